"""A gradebook for a learning management system: ``transformer-course export grades.csv --roster roster.csv
--canvas canvas.csv --totals totals.csv``.

- ``--canvas``: the layout Canvas imports (Gradebook, Import): ``Student, ID, SIS User ID, SIS Login ID, Section``
  from the roster (Canvas's own gradebook export is a roster), a ``Points Possible`` row as Canvas's export has,
  then one column per released notebook with the student's points;
- ``--totals``: a plain CSV for any other system: one row per student, the points per notebook, the total.

Submissions are named after students (a folder or a file prefix); the roster column ``key`` (default ``SIS Login
ID``) holds those names. Nobody is dropped in silence: :class:`Export` lists the graded students the roster does
not have (in the totals, not in Canvas's file: Canvas cannot import a row it cannot match) and the roster's
students with no grades (their cells left empty, which Canvas leaves unchanged).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformer_course.grading.gradebook import GradeRow, escape_cell

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
POINTS_POSSIBLE = "Points Possible"


class BadRoster(ValueError):
    pass


def read_roster(path: str | Path, key: str = "SIS Login ID") -> list[dict[str, str]]:
    """The roster's students, in its order: a CSV with Canvas's columns (``CANVAS_COLUMNS``) and ``key``.
    Canvas's ``Points Possible`` row, and rows with no student, are skipped. Raises BadRoster."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise BadRoster(f"--roster {path}: cannot be read ({type(error).__name__})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in reader.fieldnames or []]
    wanted = CANVAS_COLUMNS + ([key] if key not in CANVAS_COLUMNS else [])
    absent = [c for c in wanted if c not in header]
    if absent:
        raise BadRoster(f"--roster {path}: no column {', '.join(repr(c) for c in absent)} (expected the columns "
                        f"{', '.join(wanted)}, as in Canvas's gradebook export)")
    students, seen = [], {}
    for lineno, record in enumerate(reader, start=2):
        entry = {name.strip(): (value or "").strip() for name, value in record.items() if name is not None}
        if not entry.get("Student") or entry["Student"] == POINTS_POSSIBLE:
            continue
        name = entry[key]
        if name and name in seen:
            raise BadRoster(f"--roster {path}: {key} {name!r} is on rows {seen[name]} and {lineno}")
        seen[name] = lineno
        students.append(entry)
    return students


def notebook_points(rows: Sequence[GradeRow]) -> tuple[list[str], dict[str, int], dict[str, dict[str, int]]]:
    """The notebooks (sorted), each one's maximum, and each student's points per notebook."""
    maximum: dict[str, int] = {}
    points: dict[str, dict[str, int]] = {}
    exercises: dict[str, set[str]] = {}
    for row in rows:
        if row.exercise not in exercises.setdefault(row.notebook, set()):
            exercises[row.notebook].add(row.exercise)
            maximum[row.notebook] = maximum.get(row.notebook, 0) + row.max_points
        student = points.setdefault(row.student, {})
        student[row.notebook] = student.get(row.notebook, 0) + row.points
    return sorted(maximum), maximum, points


def column(notebook: str) -> str:
    return notebook.removesuffix(".ipynb")


@dataclass
class Export:
    text: str
    not_in_roster: list[str] = field(default_factory=list)  # graded students the roster does not name
    not_graded: list[str] = field(default_factory=list)  # the roster's students without a row (their "Student")


def _csv(header: list[str], body: list[list]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([escape_cell(cell) for cell in row] for row in body)
    return buffer.getvalue()


def _match(points: dict, roster: list[dict[str, str]], key: str) -> tuple[list[str], list[str]]:
    named = {entry[key] for entry in roster}
    return (sorted(s for s in points if s not in named),
            [f"{e['Student']} ({key} {e[key] or 'empty'})" for e in roster if e[key] not in points])


def canvas(rows: Sequence[GradeRow], roster: list[dict[str, str]], key: str = "SIS Login ID") -> Export:
    """Canvas's gradebook import for the roster's students: points per notebook, empty for those not graded."""
    notebooks, maximum, points = notebook_points(rows)
    body: list[list] = [[POINTS_POSSIBLE, "", "", "", "", *(maximum[n] for n in notebooks)]]
    for entry in roster:
        mine = points.get(entry[key])
        body.append([entry[c] for c in CANVAS_COLUMNS] + [("" if mine is None else mine.get(n, 0)) for n in notebooks])
    return Export(_csv(CANVAS_COLUMNS + [column(n) for n in notebooks], body), *_match(points, roster, key))


def totals(rows: Sequence[GradeRow], roster: list[dict[str, str]] | None = None, key: str = "SIS Login ID") -> Export:
    """One row per graded student (their roster columns beside them when a roster is given), then the roster's
    students without grades, their points empty: the points per notebook, the total and the maximum."""
    notebooks, maximum, points = notebook_points(rows)
    by_key = {entry[key]: entry for entry in roster or []}
    extra = [c for c in CANVAS_COLUMNS if c != key] if roster is not None else []
    full = sum(maximum.values())
    body = []
    for student in sorted(points):
        entry = by_key.get(student, {})
        mine = [points[student].get(n, 0) for n in notebooks]
        body.append([student, *(entry.get(c, "") for c in extra), *mine, sum(mine), full])
    for entry in roster or []:
        if entry[key] not in points:
            body.append([entry[key], *(entry[c] for c in extra), *([""] * len(notebooks)), "", full])
    header = ["student" if roster is None else key, *extra, *(column(n) for n in notebooks), "total", "max_points"]
    matched = _match(points, roster, key) if roster is not None else ([], [])
    return Export(_csv(header, body), *matched)
