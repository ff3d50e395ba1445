"""The learner's progress in a notebook: what each exercise's last check found in this kernel.

:func:`~transformer_course.checks.core.check` keeps what it found here (:func:`record_score` with the Score it
returned from the checker, or :func:`record_failure`). The last cell of every exercise
notebook calls :func:`progress`, which lists each exercise of the lesson with its status (passed, partly
passed, failed with the likely mistake or the first line of the failure, or not checked yet), its points,
and the total. Nothing here is read by the grader: it re-runs the checks in a fresh kernel of its own.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from transformer_course.checks.registry import REGISTRY, Score


@dataclass(frozen=True)
class LastCheck:
    """The last check of one exercise: ``status`` is "passed", "partial" or "failed"; ``detail`` the mistake,
    the first line of the failure, or the measured result of a partial score ("" for a plain pass)."""

    status: str
    points: int
    detail: str = ""


#: Exercise id -> its last check in this kernel.
LAST_CHECKS: dict[str, LastCheck] = {}


def record_score(exercise_id: str, score: Score) -> None:
    """Keep what ``check`` scored: all the exercise's points is a pass, fewer (but some) a partial pass."""
    max_points = REGISTRY[exercise_id].points
    partial = 0 < score.points < max_points
    LAST_CHECKS[exercise_id] = LastCheck("partial" if partial else "passed", score.points,
                                         score.summary if partial else "")


def record_failure(exercise_id, error: BaseException) -> None:
    """Keep the failure of a ``check`` (a CheckFailed, or anything the check raised)."""
    if isinstance(exercise_id, str):
        LAST_CHECKS[exercise_id] = LastCheck("failed", 0, _failure_detail(error))


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
class ProgressRow:
    """One exercise's line in the progress cell."""

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

    def __init__(self, lesson: str, rows: list[ProgressRow]):
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
    if isinstance(lesson, bool) or not isinstance(lesson, int | str):
        raise TypeError(f"lesson must be a lesson number such as '03' or 3, got {type(lesson).__name__} {lesson!r}")
    key = f"{int(lesson):02d}" if isinstance(lesson, int) or lesson.isdigit() else lesson
    exercises = sorted((ex for ex in REGISTRY.values() if ex.lesson == key), key=lambda ex: int(ex.id.split(".")[1]))
    if not exercises:
        known = sorted({ex.lesson for ex in REGISTRY.values()})
        raise ValueError(f"lesson must be one of {', '.join(known)}, got {lesson!r} (no exercise is registered for it)")
    rows = []
    for ex in exercises:
        last = LAST_CHECKS.get(ex.id)
        if last is None:
            rows.append(ProgressRow(ex.id, ex.title, "not checked yet", 0, ex.points, ""))
            continue
        points = ex.points if last.status == "passed" else min(last.points, ex.points)
        detail = last.detail.removeprefix(f"{ex.id} {ex.title}: ")
        rows.append(ProgressRow(ex.id, ex.title, last.status, points, ex.points, detail))
    return Progress(key, rows)
