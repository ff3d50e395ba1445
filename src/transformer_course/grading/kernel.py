"""Runs inside the learner's kernel during grading: :func:`recording_check`, the ``check`` that the restored check
cells call.

The grader executes each released check cell as::

    from transformer_course.grading.kernel import recording_check as check  # the grader's check
    check("01.1", token_logits)

It runs the ordinary :func:`transformer_course.checks.core.check` (same cases, same messages) while
:data:`core.CALL_RECORDER` keeps a plain copy of everything the learner's function returned. When the
check passes, the copies are saved (``torch.save``) to ``$TRANSFORMER_COURSE_GRADE_RECORDS/<id>.pt``;
the grader re-runs the exercise's checker on them outside this kernel (:mod:`.replay`). For an exercise that
registers ``as_data`` (the capstone), the record also holds the answer itself as plain data (the model's config
and weights), which the grader rebuilds and checks in its own process instead. Code in this
process can be altered by the learner, so nothing here decides a grade: a missing, altered or forged
record can only make a pass fail its confirmation, never make a wrong answer pass.

When the check fails with a known mistake, its id goes to ``$TRANSFORMER_COURSE_GRADE_RECORDS/<id>.mistake``
(one line, e.g. ``diagonal-excluded``); the grader's plugin reads it right after the check cell and the
gradebook's ``mistake`` column shows it (``03.1/diagonal-excluded``). It labels a row that earned no points and
decides nothing either.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

from transformer_course.grading.messages import sanitize

RECORDS_ENV = "TRANSFORMER_COURSE_GRADE_RECORDS"
CASES_ENV = "TRANSFORMER_COURSE_GRADE_CASES_SEED"  # the grader's --cases-seed, when given
MISTAKE_SUFFIX = ".mistake"  # <records>/<exercise id>.mistake: the id of the mistake a failed check recognised
OPAQUE = "__opaque__"
SEED = 2017  # torch's global generator during a graded check, in the kernel and in the replay
MAX_RECORD_BYTES = 64 * 2**20  # the most the grader reads of a record
_MAX_DEPTH = 4


def plain(value, depth: int = 0):
    """A copy of ``value`` made of plain data only (exact tensors, tuples, lists, numbers, strings).

    Anything else (a tensor subclass, an object claiming equality, a dict, ...) becomes a marker with
    its type name and a short repr, which fails any comparison on replay just as the object itself
    fails the check's type validation.
    """
    import torch

    try:
        if type(value) in (torch.Tensor, torch.nn.Parameter):
            return torch.Tensor.detach(value).to("cpu").clone()
        if type(value) in (tuple, list) and depth < _MAX_DEPTH:
            return type(value)(plain(v, depth + 1) for v in value)
        if value is None or type(value) in (bool, int, float, str):
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)  # what compare_number uses (numpy integers, ...)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
    except Exception:  # noqa: BLE001 - a value that cannot be copied is recorded as opaque
        pass
    return {OPAQUE: type(value).__name__, "repr": _short_repr(value)}


def _short_repr(value) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        text = f"<{type(value).__name__}>"
    return sanitize(text, limit=60)


def cases_seed() -> int | None:
    text = os.environ.get(CASES_ENV, "")
    return int(text) if text.strip().lstrip("-").isdigit() else None


def _write_mistake(path: Path, mistake_id: str) -> None:
    try:
        path.write_text(mistake_id + "\n", encoding="ascii")
    except OSError:  # the label is a courtesy to the instructor: the check's own failure is what matters
        pass


def recording_check(exercise_id: str, answer) -> None:
    """:func:`transformer_course.checks.check`, recording the learner's results for the grader.

    With the grader's ``--cases-seed`` (in :data:`CASES_ENV`), every case is drawn from it (see
    ``checks.core.CASES_SEED``). torch's global generator is seeded with :data:`SEED` for the check (and
    restored after it; mixed with the cases seed when there is one), so a
    checker that draws cases from it draws the same ones here and in the replay; the generator's state
    after each call of the learner's function is recorded too, so the replay can reproduce what the
    learner's code drew from it.
    """
    __tracebackhide__ = True
    import torch

    from transformer_course.checks import core

    calls: list[tuple] = []

    def record(result, failure):
        outcome = ("raised", failure) if failure is not None else ("value", plain(result))
        calls.append((*outcome, torch.get_rng_state()))

    folder = os.environ.get(RECORDS_ENV)
    previous, core.CALL_RECORDER = core.CALL_RECORDER, record
    previous_seed, core.CASES_SEED = core.CASES_SEED, cases_seed()
    state = torch.get_rng_state()
    torch.manual_seed(core.case_seed(SEED))
    try:
        core.check(exercise_id, answer)
    except core.CheckFailed as failure:
        if folder and failure.mistake is not None:
            _write_mistake(Path(folder) / f"{exercise_id}{MISTAKE_SUFFIX}", failure.mistake.id)
        raise
    finally:
        core.CALL_RECORDER, core.CASES_SEED = previous, previous_seed
        torch.set_rng_state(state)
    if folder:
        (Path(folder) / f"{exercise_id}.pt").write_bytes(_record_bytes(exercise_id, calls, answer))


def _as_data(exercise_id: str, answer):
    """The answer as plain data for an exercise the grader rebuilds outside the kernel (the capstone's model), or
    None: then the grader re-checks the recorded results, and the row says so."""
    from transformer_course.checks import REGISTRY

    ex = REGISTRY.get(exercise_id)
    if ex is None or ex.as_data is None:
        return None
    try:
        return ex.as_data(answer)
    except Exception:  # noqa: BLE001 - no data: the recorded results remain
        return None


def _record_bytes(exercise_id: str, calls: list, answer) -> bytes:
    """The saved record: the recorded calls, and the answer as data when the exercise takes it and the record
    still fits within :data:`MAX_RECORD_BYTES`."""
    record = {"exercise": exercise_id, "calls": calls}
    data = _as_data(exercise_id, answer)
    if data is not None:
        saved = _saved({**record, "answer": data})
        if len(saved) <= MAX_RECORD_BYTES:
            return saved
    return _saved(record)


def _saved(record: dict) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(record, buffer)
    return buffer.getvalue()
