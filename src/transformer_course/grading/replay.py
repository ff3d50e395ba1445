"""Re-checking a kernel's recorded results outside the kernel (runs in the grader's pytest process).

A check that passed inside the learner's kernel is confirmed here: the exercise's checker runs again,
in this clean process, with a stand-in answer that returns, call by call, the plain results the
kernel recorded (:mod:`.kernel`). The cases, the reference and every comparison are this process's
own, so patching ``check``, ``compare``, ``torch.isclose`` or the registry inside the kernel cannot
turn a wrong result into a pass: the only way to pass is to have produced the right numbers.

Checkers may draw cases from torch's global generator: the kernel and the replay seed it alike
(:data:`.kernel.SEED`), and the replay restores, after each recorded call, the generator state that
the learner's code left behind. A module check is replayed on a stand-in module built from the recorded
parameter names and shapes (``checks.modules``). Checkers that call the learner's answer other than through
``core.call_answer`` cannot be replayed; for them the kernel's verdict stands ("unconfirmed").

A checker that grades by bands returns a ``registry.Score``: the points come from this re-check alone (the kernel
only prints them), "partial" when they are fewer than the exercise's.

An exercise that registers ``from_data`` (the capstone) is not replayed from results when its record holds the
answer itself as data: the answer is rebuilt here, from this process's package, and the checker runs on it, so no
learner code takes part in the verdict (a forged or malformed answer is a "bad_record"). When the record holds no
such data (the learner's own kind of model), the recorded results are re-checked as for any exercise, and the
confirmation carries a review note saying that the points rest on results the kernel produced.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from transformer_course.grading.kernel import MAX_RECORD_BYTES, OPAQUE, SEED

# The review note of a check re-scored from results the kernel produced, where the grader could have rebuilt a
# course model and checked it itself (it reads "[review the code: it ...]").
DECODED_IN_KERNEL = ("was graded on results its own kernel produced: its answer is not a model the grader can "
                     "rebuild from its weights (the course's Seq2SeqTransformer)")


# "partial": a checker that grades by bands (``registry.Score``) gave part of the points; "unconfirmed": the checker
# cannot be replayed, the kernel's verdict stands; "no_record" / "bad_record": the kernel saved no record, or one
# that cannot be read.
Verdict = Literal["passed", "partial", "failed", "unconfirmed", "no_record", "bad_record"]


@dataclass(frozen=True)
class Confirmation:
    verdict: Verdict
    message: str = ""  # why it failed; for a checker that returns a Score, "3/4 points: <what was measured>"
    cases: int = 0
    points: int | None = None  # for a checker that returns a Score: the points the re-check gave
    rebuilt: bool = False  # the checker ran on the answer rebuilt from its recorded data, not on recorded results
    review: str = ""  # a review note on how the answer was checked (DECODED_IN_KERNEL), or ""


class _NotReplayable(BaseException):
    """The checker called the answer directly, not through core.call_answer.

    A BaseException, so that a checker's own ``except Exception`` around that call lets it through.
    """


def _revive(value):
    if isinstance(value, dict) and OPAQUE in value:
        name, text = str(value.get(OPAQUE)), str(value.get("repr", ""))
        return type(name, (), {"__repr__": lambda self: text})()
    if type(value) in (tuple, list):
        return type(value)(_revive(v) for v in value)
    return value


def read_regular_file(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file (not a link, FIFO or device) of at most ``limit`` bytes;
    with ``tail``, its last ``limit`` bytes whatever its size.

    A learner's kernel can put anything at a path the grader reads later: opening a FIFO would wait for a
    writer for ever and block the whole grading run, so the file is opened without blocking and without
    following a link, and checked after it is opened. Raises ValueError (or OSError) otherwise.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit and not tail:
            raise ValueError("record too large")
        with os.fdopen(fd, "rb", closefd=False) as f:
            f.seek(max(0, info.st_size - limit) if tail else 0)
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit and not tail:
        raise ValueError("record too large")
    return data[-limit:]


def _load(path: Path) -> tuple[list, object]:
    """The recorded calls, and the answer's data (None when the record holds none)."""
    import io

    import torch

    data = torch.load(io.BytesIO(read_regular_file(path, MAX_RECORD_BYTES)), weights_only=True)
    calls = data["calls"]
    if not isinstance(calls, list) or not all(
        type(c) in (tuple, list) and len(c) == 3 and c[0] in ("value", "raised") and type(c[2]) is torch.Tensor
        and c[2].dtype == torch.uint8 for c in calls
    ):
        raise ValueError("malformed record")
    return calls, data.get("answer")


def confirm(exercise_id: str, record: Path, cases_seed: int | None = None) -> Confirmation:
    """Re-run exercise ``exercise_id``'s checker on the results recorded in ``record`` (or on the answer rebuilt
    from the record's data, for an exercise that registers ``from_data``), on the cases drawn from ``cases_seed``
    (None: the public cases), as the kernel's check did.

    Not thread-safe (it seeds torch's global generator): the grader runs one replay at a time.
    """
    import torch

    from transformer_course.checks import REGISTRY, CheckFailed, core
    from transformer_course.checks.registry import Score, points_line, score_of

    if not os.path.lexists(record):
        return Confirmation("no_record")
    try:
        calls, data = _load(record)
    except Exception as error:  # noqa: BLE001 - anything unreadable is not a confirmation
        return Confirmation("bad_record", f"{type(error).__name__}: {error}"[:200])
    ex = REGISTRY.get(exercise_id)
    if ex is None:
        return Confirmation("unconfirmed", "the exercise is not registered in this installation")
    rebuilt = None
    if ex.from_data is not None and data is not None:
        try:
            rebuilt = ex.from_data(data)
        except Exception as error:  # noqa: BLE001 - forged or malformed data is not a confirmation
            return Confirmation("bad_record", f"the recorded answer cannot be rebuilt: {error}"[:300])
    how = {"rebuilt": rebuilt is not None,
           "review": DECODED_IN_KERNEL if ex.from_data is not None and rebuilt is None else ""}
    pending = iter(calls)
    entry = core._call_answer.__code__

    def recorded_answer(*args, **kwargs):
        if sys._getframe(1).f_code is not entry:
            raise _NotReplayable
        kind, value, rng_after = next(pending, ("missing", None, None))
        if kind == "missing":
            raise CheckFailed("the kernel recorded fewer results than the check asks for")
        torch.set_rng_state(rng_after)  # what the learner's code left in the global generator
        if kind == "raised":
            raise CheckFailed(str(value))
        return _revive(value)

    recorded_answer.__name__ = "your function"
    recorded_answer.replays_records = True  # checks.modules builds a stand-in module from the records
    state = torch.get_rng_state()
    previous_seed, core.CASES_SEED = core.CASES_SEED, cases_seed
    torch.manual_seed(core.case_seed(SEED))
    try:
        result = ex.checker(recorded_answer if rebuilt is None else rebuilt)
    except _NotReplayable:
        return Confirmation("unconfirmed")
    except CheckFailed as failure:
        return Confirmation("failed", str(failure), **how)
    except Exception as error:  # noqa: BLE001 - a replay that crashes confirms nothing
        what = "results" if rebuilt is None else "answer"
        return Confirmation("failed", f"the recorded {what} could not be re-checked ({type(error).__name__})", **how)
    finally:
        core.CASES_SEED = previous_seed
        torch.set_rng_state(state)
    if rebuilt is None and next(pending, None) is not None:
        return Confirmation("failed", "the kernel recorded more results than the check asks for")
    score = score_of(ex, result)  # as the kernel's check read it
    if not isinstance(result, Score):
        return Confirmation("passed", cases=score.cases, **how)
    line = points_line(score, ex.points)
    if score.points == 0:
        return Confirmation("failed", line, **how)
    return Confirmation("passed" if score.points == ex.points else "partial", line, score.cases, score.points, **how)
