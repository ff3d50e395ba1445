"""The learner's progress in a notebook: what each exercise's last check found in this kernel.

:func:`~transformer_course.checks.core.check` records its outcome here (:func:`recorded` wraps it, and it
reports the points of an exercise graded by results with :func:`scored`). The last cell of every exercise
notebook calls :func:`progress`, which lists each exercise of the lesson with its status (passed, partly
passed, failed with the likely mistake or the first line of the failure, or not checked yet), its points,
and the total. Nothing here is read by the grader: it re-runs the checks in a fresh kernel of its own.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """The last check of one exercise: ``status`` is "passed", "partial" or "failed"; ``detail`` the mistake,
    the first line of the failure, or the measured result of a partial score ("" for a plain pass)."""

    status: str
    points: int
    detail: str = ""


#: Exercise id -> the outcome of its last check in this kernel.
OUTCOMES: dict[str, Outcome] = {}
_SCORES: dict[str, tuple[int, int, str]] = {}  # exercise id -> (points, max points, summary) of the running check


def scored(exercise_id: str, points: int, max_points: int, summary: str) -> None:
    """Called by ``check`` once an exercise graded by results (a :class:`~.core.Score`) or by cases is scored."""
    _SCORES[exercise_id] = (int(points), int(max_points), str(summary))


def recorded(check: Callable[[str, object], None]) -> Callable[[str, object], None]:
    """Wrap ``check(exercise_id, answer)`` so that every call records its outcome in :data:`OUTCOMES`."""

    @functools.wraps(check)
    def check_and_record(exercise_id, answer):
        __tracebackhide__ = True  # pytest: show the check's message, not this frame
        if isinstance(exercise_id, str):
            _SCORES.pop(exercise_id, None)
        try:
            result = check(exercise_id, answer)
        except BaseException as error:
            if isinstance(exercise_id, str):
                OUTCOMES[exercise_id] = Outcome("failed", 0, _failure_detail(error))
            raise
        if isinstance(exercise_id, str):
            points, max_points, summary = _SCORES.pop(exercise_id, (0, 0, ""))
            partial = 0 < points < max_points
            OUTCOMES[exercise_id] = Outcome("partial" if partial else "passed", points, summary if partial else "")
        return result

    return check_and_record


def _failure_detail(error: BaseException) -> str:
    mistake = getattr(error, "mistake", None)  # a checks.core.Mistake
    if mistake is not None:
        return f"Likely mistake: {mistake.hint}"
    message = getattr(error, "message", None)
    lines = [line.strip() for line in str(message or error).splitlines() if line.strip()] or [""]
    first = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]  # "raised X on ...:"
    return first if message else f"{type(error).__name__}: {first}".rstrip(": ")


# --- the progress cell ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    exercise: str
    title: str
    status: str  # "passed", "partial", "failed" or "not checked yet"
    points: int
    max_points: int
    detail: str


_SYMBOL = {"passed": "\u2714", "partial": "\u25d1", "failed": "\u2718", "not checked yet": "\u25cb"}
_LABEL = {"passed": "passed", "partial": "partly passed", "failed": "failed", "not checked yet": "not checked yet"}


class Progress:
    """Every exercise of one lesson with its last check's status and points; shows as a table in Jupyter."""

    def __init__(self, lesson: str, rows: list[Row]):
        self.lesson, self.rows = lesson, rows

    @property
    def points(self) -> int:
        return sum(r.points for r in self.rows)

    @property
    def max_points(self) -> int:
        return sum(r.max_points for r in self.rows)

    def total(self) -> str:
        passed = sum(r.status == "passed" for r in self.rows)
        unchecked = sum(r.status == "not checked yet" for r in self.rows)
        text = (f"Total: {self.points}/{self.max_points} points; {passed} of {len(self.rows)} exercises passed"
                + (f", {unchecked} not checked yet" if unchecked else "") + ".")
        return text

    def __repr__(self) -> str:
        width = max(len(f"{r.exercise} {r.title}") for r in self.rows)
        lines = [f"Your progress in lesson {self.lesson} (the last check of each exercise in this session):"]
        for r in self.rows:
            name = f"{r.exercise} {r.title}".ljust(width)
            status = f"{_SYMBOL[r.status]} {_LABEL[r.status]}".ljust(17)
            detail = f"  {r.detail}" if r.detail else ""
            lines.append(f"  {name}  {status} {r.points}/{r.max_points}{detail}")
        lines.append(self.total())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        left, keep = "style='text-align:left'", "style='text-align:left; white-space:nowrap'"
        cells = "".join(
            f"<tr><td {keep}>{html.escape(r.exercise)} {html.escape(r.title)}</td>"
            f"<td {keep}>{_SYMBOL[r.status]} {_LABEL[r.status]}</td><td {keep}>{r.points}/{r.max_points}</td>"
            f"<td {left}>{html.escape(r.detail)}</td></tr>"
            for r in self.rows)
        head = "".join(f"<th {left}>{name}</th>" for name in ("exercise", "status", "points", "details"))
        return (f"<p><b>Your progress in lesson {html.escape(self.lesson)}</b> (the last check of each exercise in "
                f"this session)</p><table><thead><tr>{head}</tr></thead><tbody>{cells}</tbody></table>"
                f"<p>{html.escape(self.total())}</p>")


def progress(lesson: str | int) -> Progress:
    """The progress of this session on the exercises of ``lesson`` (``"03"`` or ``3``), from the last check of
    each exercise run in this kernel."""
    from transformer_course.checks.core import REGISTRY

    if isinstance(lesson, bool) or not isinstance(lesson, int | str):
        raise TypeError(f"lesson must be a lesson number such as '03' or 3, got {type(lesson).__name__} {lesson!r}")
    key = f"{int(lesson):02d}" if isinstance(lesson, int) or lesson.isdigit() else lesson
    exercises = sorted((ex for ex in REGISTRY.values() if ex.lesson == key), key=lambda ex: int(ex.id.split(".")[1]))
    if not exercises:
        known = sorted({ex.lesson for ex in REGISTRY.values()})
        raise ValueError(f"lesson must be one of {', '.join(known)}, got {lesson!r} (no exercise is registered for it)")
    rows = []
    for ex in exercises:
        outcome = OUTCOMES.get(ex.id)
        if outcome is None:
            rows.append(Row(ex.id, ex.title, "not checked yet", 0, ex.points, ""))
            continue
        points = ex.points if outcome.status == "passed" else min(outcome.points, ex.points)
        detail = outcome.detail.removeprefix(f"{ex.id} {ex.title}: ")
        rows.append(Row(ex.id, ex.title, outcome.status, points, ex.points, detail))
    return Progress(key, rows)
