"""The gradebook: one row per student x exercise (:class:`GradeRow`), its statuses, its CSV form, and gradebooks
merged. The text summary and the HTML pages made from it are in :mod:`.report` and :mod:`.classpage`."""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Literal, get_args

# What each status means: see grading/verdict.py.
Status = Literal["passed", "partial", "failed", "error", "timeout", "missing", "tampered"]
STATUSES: tuple[Status, ...] = get_args(Status)


@dataclass(frozen=True)
class GradeRow:
    student: str
    notebook: str
    exercise: str
    title: str
    points: int
    max_points: int
    status: Status
    message: str
    mistake: str = ""  # a failed row's recognised mistake, EXERCISE/ID (03.1/diagonal-excluded); else empty


COLUMNS = [f.name for f in fields(GradeRow)]
OLD_COLUMNS = COLUMNS[:-1]  # gradebooks written before the mistake column still read (with no mistakes)


def exercise_key(exercise: str) -> tuple:
    """Sort "01.2" before "01.10"."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", exercise))


def sort_rows(rows: Iterable[GradeRow]) -> list[GradeRow]:
    return sorted(rows, key=lambda r: (r.student, r.notebook, exercise_key(r.exercise)))


# --- CSV -----------------------------------------------------------------------------------------------


# A spreadsheet runs a cell that starts with one of these as a formula ("CSV injection"); a student's name or
# an error message can start with any of them. Such a cell is written with a leading apostrophe, which
# spreadsheets show as text, and read_csv removes it again. A cell that starts with an apostrophe gets one more.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def escape_cell(cell):
    """The cell as a spreadsheet shows it as text (a leading apostrophe when it could run as a formula)."""
    return f"'{cell}" if isinstance(cell, str) and cell.startswith(_FORMULA_START) else cell


def _unescape(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


def to_csv(rows: Sequence[GradeRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([escape_cell(cell) for cell in astuple(r)] for r in rows)
    return buffer.getvalue()


def write_csv(rows: Sequence[GradeRow], path: str | Path) -> None:
    Path(path).write_text(to_csv(rows), encoding="utf-8", newline="")


class BadGradebook(ValueError):
    pass


def read_csv(path: str | Path) -> list[GradeRow]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet may have added a byte-order mark
    except (OSError, UnicodeDecodeError) as error:
        raise BadGradebook(f"{path}: cannot be read ({error.__class__.__name__})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header not in (COLUMNS, OLD_COLUMNS):
        raise BadGradebook(f"{path}: not a gradebook (expected the header {','.join(COLUMNS)})")
    rows = []
    for lineno, record in enumerate(reader, start=2):
        try:
            if len(record) != len(header):
                raise ValueError
            student, notebook, exercise, title, points, max_points, status, message, *mistake = map(_unescape, record)
            rows.append(GradeRow(student, notebook, exercise, title, int(points), int(max_points), status, message,
                            *mistake))
        except ValueError:
            raise BadGradebook(f"{path}: row {lineno} is malformed") from None
        if status not in STATUSES:
            raise BadGradebook(f"{path}: row {lineno} has an unknown status {status!r}")
    return rows


def merge(gradebooks: Sequence[tuple[str, list[GradeRow]]]) -> tuple[list[GradeRow], list[str]]:
    """Join gradebooks (shards, weeks graded with ``--notebooks``, or a gradebook and a regrade): a student's rows
    of a notebook come from the last file that has that student's rows of that notebook. Returns the rows and notes
    about the rows that were replaced."""
    owner: dict[tuple[str, str], str] = {}
    by_unit: dict[tuple[str, str], list[GradeRow]] = {}
    notes = []
    for name, rows in gradebooks:
        here: dict[tuple[str, str], list[GradeRow]] = defaultdict(list)
        for row in rows:
            here[row.student, row.notebook].append(row)
        replaced: dict[str, list[str]] = defaultdict(list)
        for unit, unit_rows in here.items():
            if unit in owner:
                replaced[f"{unit[0]}: the rows from {name} replace those from {owner[unit]}"].append(unit[1])
            owner[unit] = name
            by_unit[unit] = unit_rows
        notes += [f"{note} ({', '.join(sorted(notebooks))})" for note, notebooks in replaced.items()]
    return sort_rows(r for rows in by_unit.values() for r in rows), notes
