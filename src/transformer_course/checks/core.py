"""The machinery behind ``check("02.1", answer)``: ``CheckFailed``, known mistakes, cases and the comparisons.

An exercise is a function registered with :func:`exercise` (:mod:`.registry`) that receives the learner's
answer and either returns the number of cases it passed or raises :class:`CheckFailed` with a short, specific
message: which case failed, expected vs got, and the name of the mistake when one is recognised.
An exercise graded by what the answer achieves (the capstone's translator) returns a :class:`Score`
instead: the points earned, by bands, and the measured result.

Most exercises ask for a function. :func:`check_function` runs the learner's function and the
reference on the same inputs (:class:`Case`), compares the results (:func:`compare`) and, on a
mismatch, runs known-wrong variants (:class:`Mistake`) to name what went wrong.
"""

from __future__ import annotations

import numbers
import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

import transformer_course
from transformer_course.checks import progress
from transformer_course.checks.registry import (  # noqa: F401  (the lesson modules register through core)
    REGISTRY,
    Exercise,
    Score,
    exercise,
    points_line,
    score_of,
)

# Frames in these folders are not the learner's: tracebacks point at the learner's own line instead.
_NOT_LEARNER = (str(Path(transformer_course.__file__).parent), str(Path(torch.__file__).parent))

class CheckFailed(Exception):
    """An answer did not pass its check. The message alone is the feedback (Jupyter shows no traceback).

    ``mistake`` is the known :class:`Mistake` the answer matched, if one was recognised; the message then ends
    with its hint, on a line of its own ("Likely mistake: ..."), and the grader's gradebook names it by its id
    (``03.1/diagonal-excluded``).
    """

    def __init__(self, message: str, *, mistake: Mistake | None = None):
        if mistake is not None and not isinstance(mistake, Mistake):
            raise TypeError(f"CheckFailed(mistake=...): expected a Mistake or None, got {type(mistake).__name__}")
        self.message, self.mistake = message, mistake
        super().__init__(f"{message}\nLikely mistake: {mistake.hint}" if mistake else message)


#: What a mistake's id looks like: a short kebab-case slug, e.g. ``diagonal-excluded``.
MISTAKE_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MISTAKE_ID_MAX = 40


@dataclass(frozen=True)
class Mistake:
    """A known mistake: its stable id, the hint a learner sees when an answer matches it, and the known-wrong
    variant of the reference that makes it (``wrong``; None for a mistake a checker recognises another way).

    ``id`` is a short kebab-case slug (``"diagonal-excluded"``), one per mistake of an exercise (two variants of
    the same mistake share it, with the same hint); the gradebook counts the class's mistakes by it, so it is not
    changed once an exercise is released.
    """

    id: str
    hint: str
    wrong: Callable | None = None

    def __post_init__(self):
        if not isinstance(self.id, str) or not MISTAKE_ID.fullmatch(self.id) or len(self.id) > MISTAKE_ID_MAX:
            raise ValueError(f"Mistake id {self.id!r}: expected a kebab-case slug of at most {MISTAKE_ID_MAX} "
                             "characters, such as 'diagonal-excluded'")
        if not isinstance(self.hint, str) or not self.hint.strip():
            raise ValueError(f"Mistake {self.id!r}: expected a hint (a non-empty string), got {self.hint!r:.40}")


def check(exercise_id: str, answer) -> None:
    """Check ``answer`` for the exercise ``exercise_id``; print a confirmation or raise CheckFailed.

    What it found is kept for the notebook's progress cell (:mod:`.progress`).
    """
    __tracebackhide__ = True  # pytest: show the message, not this frame
    try:
        score = score_answer(exercise_id, answer)
    except BaseException as error:
        progress.record_failure(exercise_id, error)
        raise
    progress.record_score(exercise_id, score)


def score_answer(exercise_id: str, answer) -> Score:
    """What :func:`check` does, returning the Score it printed: runs the exercise's checker on ``answer`` and
    prints the confirmation; raises CheckFailed, with the exercise's id and title, when it fails or scores 0."""
    __tracebackhide__ = True
    if exercise_id not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        raise CheckFailed(f"unknown exercise id {exercise_id!r}; known ids: {known}")
    ex = REGISTRY[exercise_id]
    try:
        result = ex.checker(answer)
    except CheckFailed as failure:
        raise CheckFailed(f"{ex.id} {ex.title}: {failure.message}", mistake=failure.mistake) from None
    score = score_of(ex, result)
    if not isinstance(result, Score):
        print(f"\u2714 {ex.id} {ex.title}: public checks passed ({score.cases} cases).")
    elif score.points == 0:
        raise CheckFailed(f"{ex.id} {ex.title}: {points_line(score, ex.points)}")
    elif score.points == ex.points:
        print(f"\u2714 {ex.id} {ex.title}: public checks passed ({points_line(score, ex.points)}).")
    else:  # part of the points: not a pass, not an error either
        print(f"\u25d1 {ex.id} {ex.title}: {points_line(score, ex.points)}")
    return score


# --- inputs ------------------------------------------------------------------------------------

#: ``None``: the public cases, the ones learners see in their notebooks. The grader's ``--cases-seed`` sets it,
#: in the learner's kernel and in the re-check outside it alike, so that every case drawn at random differs
#: from the public ones and outputs memorised from the notebooks fail.
CASES_SEED: int | None = None


def case_seed(seed: int) -> int:
    """The seed a checker draws its cases from: ``seed`` for the public cases, else mixed with CASES_SEED."""
    return seed if CASES_SEED is None else (CASES_SEED * 1_000_003 + seed) % 2**62


def case_half(items: Sequence) -> Sequence:
    """The half of ``items`` a check draws its cases from when it samples a fixed pool (held-out numbers, windows of
    text): the even-numbered items for the public cases, the odd-numbered ones under a cases seed, so that no public
    case is ever a hidden one."""
    return items[0 if CASES_SEED is None else 1:: 2]


def case_generator(seed: int) -> torch.Generator:
    """A generator for a checker's random cases (see :data:`CASES_SEED`)."""
    return torch.Generator().manual_seed(case_seed(seed))



@dataclass
class Case:
    """One input to a learner's function: a label and the arguments, by parameter name, in order."""

    label: str
    args: dict[str, object] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        for name, value in self.args.items():
            if isinstance(value, torch.nn.Module):
                parts.append(f"{name}={type(value).__name__}")
            elif isinstance(value, torch.Tensor):
                dtype = "" if value.dtype in (torch.float32, torch.int64) else f" {value.dtype}"
                parts.append(f"{name} {tuple(value.shape)}{dtype}")
            else:
                parts.append(f"{name}={value!r}")
        # What the label already says is not repeated: "n=4", not "n=4 [n=4]".
        parts = [p for p in parts if not re.search(rf"(?<![\w.]){re.escape(p)}(?![\w.])", self.label)]
        return f"{self.label} [{', '.join(parts)}]" if parts else self.label

    def fresh_args(self) -> list:
        """Copies of the arguments, so an answer that edits its inputs in place cannot spoil a case."""
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in self.args.values()]


# --- calling the learner's code ----------------------------------------------------------------


def require_callable(answer, what: str = "a function") -> None:
    if not callable(answer):
        raise CheckFailed(f"expected {what}, got {type(answer).__name__} {answer!r:.60}")


def require_trained_model(model, name: str, forward: str) -> None:
    """For the exercises graded by what a model achieves: ``model`` (the learner's variable ``name``) must be a
    module; ``forward`` describes its call, e.g. ``"forward(ids) returns logits (B, n, |V|)"``."""
    if model is None:
        raise CheckFailed(f"{name} is not implemented yet: build and train your model in the answer cell and leave it "
                          f"in `{name}` (it is still None).")
    if not isinstance(model, torch.nn.Module):
        raise CheckFailed(f"{name} must be your trained model, an nn.Module whose {forward}; got "
                          f"{type(model).__name__}")


#: ``None``, except inside a kernel run by ``transformer-course grade``: there the grader's check
#: (``transformer_course.grading.kernel``) sets it to a function called after every call of the
#: learner's answer as ``CALL_RECORDER(result, failure)`` (``failure``: the CheckFailed message, else
#: ``None``), so that the grader can re-check the recorded results outside the learner's kernel.
CALL_RECORDER: Callable | None = None


def call_answer(answer: Callable, case: Case, mistakes: Sequence[Mistake] = ()):
    """Call the learner's function on a case; their exception becomes feedback, not a crash.

    When a known-wrong variant raises the same error on this case, the feedback names that mistake.
    """
    try:
        result = _call_answer(answer, case, mistakes)
    except CheckFailed as failure:
        if CALL_RECORDER is not None:
            CALL_RECORDER(None, str(failure))
        raise
    if CALL_RECORDER is not None:
        CALL_RECORDER(result, None)
    return result


def _call_answer(answer: Callable, case: Case, mistakes: Sequence[Mistake]):
    try:
        return answer(*case.fresh_args())
    except NotImplementedError:
        name = getattr(answer, "__name__", "your function")
        raise CheckFailed(
            f"{name} is not implemented yet: replace the `raise NotImplementedError(...)` line with your code."
        ) from None
    except CheckFailed:
        raise
    except Exception as error:  # noqa: BLE001 - any learner error is feedback
        failure = CheckFailed(
            f"your code raised {type(error).__name__} on the case {case.describe()}:\n"
            f"  {error}\n{_learner_location(error)}",
            mistake=_diagnose_error(mistakes, case, error),
        )
        failure.error = error  # for check_function, which names a mistake only if it explains every case
        raise failure from None


def _diagnose_error(mistakes: Sequence[Mistake], case: Case, error: Exception) -> Mistake | None:
    """The first known mistake that fails on this case with the same error, or None."""
    return next((m for m in mistakes if m.wrong is not None and _raises_the_same(m, case, error)), None)


def _raises_the_same(mistake: Mistake, case: Case, error: Exception) -> bool:
    try:
        mistake.wrong(*case.fresh_args())
    except Exception as theirs:  # noqa: BLE001
        return type(theirs) is type(error) and str(theirs) == str(error)
    return False


def _learner_location(error: Exception) -> str:
    """Where in the learner's code the error happened: the last frame outside torch and this package."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_NOT_LEARNER)]
    if not frames:
        return ""
    f = frames[-1]
    code = f": {f.line.strip()}" if f.line else ""
    return f"  at line {f.lineno} in {f.name}{code}"


# --- comparing results -------------------------------------------------------------------------


def _fmt(values: torch.Tensor, limit: int = 6) -> str:
    items = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in values.flatten()[:limit].tolist()]
    return "[" + ", ".join(items) + (", ...]" if values.numel() > limit else "]")


def compare_tensor(expected: torch.Tensor, got, name: str, rtol: float, atol: float) -> str | None:
    """None if ``got`` matches ``expected``; else a short description of the first difference."""
    if type(got) not in (torch.Tensor, torch.nn.Parameter):
        return f"{name}: expected a torch.Tensor, got {type(got).__name__}"
    got = got.detach()
    if got.shape != expected.shape:
        return f"{name}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
    if got.dtype != expected.dtype:
        return f"{name}: expected dtype {expected.dtype}, got {got.dtype}"
    if not expected.is_floating_point():
        wrong = got != expected
    else:
        nan_got, nan_exp = torch.isnan(got), torch.isnan(expected)
        if (nan_got & ~nan_exp).any():
            where = tuple(torch.nonzero(nan_got & ~nan_exp)[0].tolist())
            return f"{name}: got NaN at index {where} where {expected[where].item():.4g} was expected"
        # Float rounding grows with the size of the numbers a result is computed from, not with the result: an
        # entry near 0 in a row of entries near 10 (after a LayerNorm, say) carries errors of 10 x eps. So atol
        # is scaled by the tensor's largest finite magnitude (at least 1).
        finite = expected[torch.isfinite(expected)]
        scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
        wrong = ~torch.isclose(got, expected, rtol=rtol, atol=atol * scale, equal_nan=True)
    if not wrong.any():
        return None
    first = tuple(torch.nonzero(wrong)[0].tolist())
    message = f"{name}: {int(wrong.sum())} of {wrong.numel()} values differ"
    if expected.is_floating_point():
        err = (got - expected).abs().nan_to_num(nan=float("inf"))
        message += f" (max abs error {err.max().item():.3g})"
    if expected.dim() >= 2:
        row = first[:-1]
        message += f"; row {list(row)}:\n    expected {_fmt(expected[row])}\n    got      {_fmt(got[row])}"
    else:
        message += f":\n    expected {_fmt(expected)}\n    got      {_fmt(got)}"
    return message


def compare_number(expected, got, name: str) -> str | None:
    if isinstance(expected, numbers.Integral):
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            return f"{name}: expected an integer, got {type(got).__name__} {got!r:.40}"
        return None if int(got) == int(expected) else f"{name}: expected {expected}, got {int(got)}"
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        return f"{name}: expected a number, got {type(got).__name__} {got!r:.40}"
    ok = abs(float(got) - float(expected)) <= 1e-6 + 1e-4 * abs(float(expected))
    return None if ok else f"{name}: expected {float(expected):.6g}, got {float(got):.6g}"


def compare(expected, got, names: Sequence[str] = ("output",), rtol: float = 1e-5, atol: float = 1e-6):
    """Compare a result (a tensor, a number, or a tuple of them named by ``names``) with the expected one.

    The type of ``got`` is validated before any comparison, so an object that claims to equal
    everything cannot pass.
    """
    if isinstance(expected, tuple):
        if type(got) not in (tuple, list):
            return f"expected a tuple ({', '.join(names)}), got {type(got).__name__}"
        if len(got) != len(expected):
            return f"expected a tuple of {len(expected)} ({', '.join(names)}), got {len(got)} values"
        for name, e, g in zip(names, expected, got, strict=True):
            problem = compare(e, g, (name,), rtol, atol)
            if problem:
                return problem
        return None
    name = names[0]
    if isinstance(expected, torch.Tensor):
        return compare_tensor(expected, got, name, rtol, atol)
    return compare_number(expected, got, name)


def diagnose(mistakes: Sequence[Mistake], results: Sequence[tuple[Case, object]],
             differ: Callable[[object, object, Case], str | None]) -> Mistake | None:
    """The first known mistake whose variant gives the learner's result on every case the answer ran on, or None.

    ``results`` holds ``(case, got)`` for each case, right or wrong: ``got`` is the answer's output, or the exception
    it raised (the mistake must then raise the same). ``differ(expected, got, case)`` says how ``got`` differs from
    ``expected`` (None: it does not). One case is not enough: two mistakes can give the same output on one input
    (``1/d`` and ``d**-0.5`` at d = 1), and a variant that is wrong where the learner is right is not the learner's
    mistake. A wrong name sends the learner the wrong way; no name is better.
    """
    return diagnose_each([(mistakes, case, got) for case, got in results], differ)


def diagnose_each(results: Sequence[tuple[Sequence[Mistake], Case, object]],
                  differ: Callable[[object, object, Case], str | None]) -> Mistake | None:
    """:func:`diagnose` where each case has variants of its own: ``results`` holds ``(mistakes, case, got)``. A
    module's check builds a reference per case and binds the mistakes' variants to it; a mistake is named when the
    variant of the same id gives the learner's result on every case."""
    if not results:
        return None
    for mistake in results[0][0]:
        if all(any(m.id == mistake.id and m.wrong is not None and _reproduces(m, case, got, differ) for m in mistakes)
               for mistakes, case, got in results):
            return mistake
    return None


def _reproduces(mistake: Mistake, case: Case, got, differ: Callable) -> bool:
    if isinstance(got, Exception):
        return _raises_the_same(mistake, case, got)
    try:
        wrong = mistake.wrong(*case.fresh_args())
        return differ(wrong, got, case) is None
    except Exception:  # noqa: BLE001 - a variant that cannot run on this case does not explain it
        return False


def run_cases(
    answer,
    reference: Callable,
    cases: Sequence[Case],
    mistakes: Sequence[Mistake],
    differ: Callable[[object, object, Case], str | None],
) -> tuple[str | None, list[tuple[Case, object]]]:
    """Run ``answer`` and ``reference`` on every case: (the message of the first case it gets wrong, or None; the
    ``(case, got)`` of every case, for :func:`diagnose`, or [] when a later case stopped the answer from running).

    ``got`` is the answer's output, or the error it raised. A CheckFailed that carries no error of the learner's (not
    implemented yet, or one the answer raised itself) is raised as it is when no case went wrong before it.
    """
    first, results = None, []
    for case in cases:
        expected = reference(*case.fresh_args())
        try:
            got = call_answer(answer, case, mistakes)
        except CheckFailed as failure:
            error = getattr(failure, "error", None)
            if error is None:  # not implemented, or the answer raised CheckFailed itself: reported as it is
                if first is None:
                    raise
                return first, []
            first = first or failure.message
            results.append((case, error))
            continue
        problem = differ(expected, got, case)
        if problem:
            first = first or f"wrong result for {case.describe()}\n  {problem}"
        results.append((case, got))
    return first, results


def default_differ(names: Sequence[str] = ("output",), rtol: float = 1e-5,
                   atol: float = 1e-6) -> Callable[[object, object, Case], str | None]:
    """The ``differ`` of :func:`check_function`: :func:`compare` with ``names``, ``rtol`` and ``atol``."""
    def differ(expected, got, case):
        return compare(expected, got, names=names, rtol=rtol, atol=atol)

    return differ


def check_function(
    answer,
    reference: Callable,
    cases: Sequence[Case],
    mistakes: Sequence[Mistake] = (),
    *,
    names: Sequence[str] = ("output",),
    rtol: float = 1e-5,
    atol: float = 1e-6,
    differ: Callable[[object, object, Case], str | None] | None = None,
) -> int:
    """Run ``answer`` and ``reference`` on every case; raise CheckFailed for the first case it gets wrong.

    ``differ(expected, got, case)`` describes how a result differs from the expected one, None when it matches;
    by default :func:`compare` with ``names``, ``rtol`` and ``atol``. The remaining cases still run after a wrong
    one, so that a mistake is named only when its variant gives the answer's result on every case (its output, or
    the error it raises): see :func:`diagnose`.
    """
    require_callable(answer)
    if differ is None:
        differ = default_differ(names, rtol, atol)
    first, results = run_cases(answer, reference, cases, mistakes, differ)
    if first is not None:
        raise CheckFailed(first, mistake=diagnose(mistakes, results, differ) if results else None)
    return len(cases)


# --- Jupyter display -----------------------------------------------------------------------------


def _show_check_failed(shell, etype, value, tb, tb_offset=None):
    """IPython handler: show a CheckFailed as its message alone, in red, with no traceback."""
    lines = [f"\x1b[1;31m\u2718 {etype.__name__}\x1b[0m: {value}"]
    shell._showtraceback(etype, value, lines)  # publishes the error; the execute reply stays 'error'
    return lines


def install_ipython_handler() -> None:
    """In a Jupyter kernel, render CheckFailed as a short message instead of a long traceback."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((CheckFailed,), _show_check_failed)
