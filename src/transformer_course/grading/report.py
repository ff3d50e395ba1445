"""The gradebook: one row per student x exercise, as CSV, as a summary table and as HTML pages."""

from __future__ import annotations

import csv
import html
import io
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Literal, get_args

# What each status means: see grading/verdict.py.
Status = Literal["passed", "partial", "failed", "error", "timeout", "missing", "tampered"]
STATUSES: tuple[Status, ...] = get_args(Status)


@dataclass(frozen=True)
class Row:
    student: str
    notebook: str
    exercise: str
    title: str
    points: int
    max_points: int
    status: Status
    message: str
    mistake: str = ""  # a failed row's recognised mistake, EXERCISE/ID (03.1/diagonal-excluded); else empty


COLUMNS = [f.name for f in fields(Row)]
OLD_COLUMNS = COLUMNS[:-1]  # gradebooks written before the mistake column still read (with no mistakes)


def exercise_key(exercise: str) -> tuple:
    """Sort "01.2" before "01.10"."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", exercise))


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r.student, r.notebook, exercise_key(r.exercise)))


# --- CSV -----------------------------------------------------------------------------------------------


# A spreadsheet runs a cell that starts with one of these as a formula ("CSV injection"); a student's name or
# an error message can start with any of them. Such a cell is written with a leading apostrophe, which
# spreadsheets show as text, and read_csv removes it again. A cell that starts with an apostrophe gets one more.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def _escape(cell):
    return f"'{cell}" if isinstance(cell, str) and cell.startswith(_FORMULA_START) else cell


def _unescape(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


def to_csv(rows: Sequence[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([_escape(cell) for cell in astuple(r)] for r in rows)
    return buffer.getvalue()


def write_csv(rows: Sequence[Row], path: str | Path) -> None:
    Path(path).write_text(to_csv(rows), encoding="utf-8", newline="")


class BadGradebook(ValueError):
    pass


def read_csv(path: str | Path) -> list[Row]:
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
            rows.append(Row(student, notebook, exercise, title, int(points), int(max_points), status, message,
                            *mistake))
        except ValueError:
            raise BadGradebook(f"{path}: row {lineno} is malformed") from None
        if status not in STATUSES:
            raise BadGradebook(f"{path}: row {lineno} has an unknown status {status!r}")
    return rows


def merge(gradebooks: Sequence[tuple[str, list[Row]]]) -> tuple[list[Row], list[str]]:
    """Join gradebooks (shards, or a gradebook and a regrade): a student's rows come from the last file
    that has that student. Returns the rows and notes about the students that were replaced."""
    owner: dict[str, str] = {}
    by_student: dict[str, list[Row]] = {}
    notes = []
    for name, rows in gradebooks:
        here: dict[str, list[Row]] = defaultdict(list)
        for row in rows:
            here[row.student].append(row)
        for student, student_rows in here.items():
            if student in owner:
                notes.append(f"{student}: the rows from {name} replace those from {owner[student]}")
            owner[student] = name
            by_student[student] = student_rows
    return sort_rows(r for rows in by_student.values() for r in rows), notes


# --- summary ---------------------------------------------------------------------------------------------


def _table(header: list[str], body: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *body, strict=True)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if k in right else str(c).ljust(w) for k, (c, w) in
                         enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(b) for b in body]


def summary(rows: Sequence[Row]) -> str:
    """Per-student totals and per-exercise pass counts, as plain-text tables."""
    if not rows:
        return "No rows: no students to grade."
    by_student: dict[str, list[Row]] = defaultdict(list)
    by_exercise: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        by_student[r.student].append(r)
        by_exercise[(r.notebook, r.exercise, r.title)].append(r)
    students = sorted(by_student)
    exercises = sorted(by_exercise, key=lambda e: (e[0], exercise_key(e[1])))
    out = []
    body = []
    for student in students:
        mine = by_student[student]
        counts = Counter(r.status for r in mine)
        body.append([student, f"{sum(r.points for r in mine)}/{sum(r.max_points for r in mine)}"]
                    + [str(counts.get(s, 0)) for s in STATUSES])
    out += _table(["student", "points", *STATUSES], body, right=set(range(1, 2 + len(STATUSES))))
    out.append("")
    body = []
    for notebook, exercise, title in exercises:
        mine = by_exercise[(notebook, exercise, title)]
        passed = sum(r.status == "passed" for r in mine)
        points = sum(r.points for r in mine)
        body.append([exercise, title, f"{passed}/{len(mine)}", f"{points}/{sum(r.max_points for r in mine)}"])
    out += _table(["exercise", "title", "passed", "points"], body, right={2, 3})
    total = sum(r.points for r in rows)
    out.append("")
    out.append(f"{len(students)} student(s), {len(exercises)} exercise(s): {total}/{sum(r.max_points for r in rows)}"
               " points in all.")
    return "\n".join(out)


# --- HTML ------------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .4em .6em; text-align: left; vertical-align: top; }
pre { white-space: pre-wrap; margin: 0; font-size: .9em; }
.passed { color: #11702b; } .partial { color: #7a5c00; }
.failed, .error, .timeout, .missing { color: #a3120e; } .tampered { color: #8a4b00; }
.status { font-weight: bold; }
"""


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def _slugs(students: Sequence[str]) -> dict[str, str]:
    """A file name per student, unique without regard to case and never the summary's (``index``) or the class
    report's (``class``)."""
    slugs, used = {}, {"index", "class"}
    for student in sorted(students):
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", student).strip("._") or "student"
        slug, n = base, 1
        while slug.lower() in used:
            n += 1
            slug = f"{base}-{n}"
        used.add(slug.lower())
        slugs[student] = slug
    return slugs


def write_html(rows: Sequence[Row], folder: str | Path) -> list[Path]:
    """One feedback page per student (``<student>.html``), the class report (``class.html``, which names no
    student, and its figure; see :mod:`.classpage`) and an ``index.html`` linking them."""
    from transformer_course.grading.classpage import PAGE, write_class_page

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    by_student: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_student[r.student].append(r)
    students = sorted(by_student)
    slugs = _slugs(students)
    class_files = write_class_page(rows, folder)
    written = []
    index = []
    for student in students:
        mine = sort_rows(by_student[student])
        points, max_points = sum(r.points for r in mine), sum(r.max_points for r in mine)
        lines = [f"<h1>Feedback for {html.escape(student)}</h1>",
                 f"<p>Total: <strong>{points} / {max_points}</strong> points.</p>",
                 "<table>", "<tr><th>notebook</th><th>exercise</th><th>points</th><th>status</th>"
                 "<th>feedback</th></tr>"]
        for r in mine:
            lines.append(
                f"<tr><td>{html.escape(r.notebook)}</td><td>{html.escape(r.exercise)} {html.escape(r.title)}</td>"
                f"<td>{r.points} / {r.max_points}</td><td class=\"status {r.status}\">{r.status}</td>"
                f"<td><pre>{html.escape(r.message)}</pre></td></tr>")
        lines.append("</table>")
        path = folder / f"{slugs[student]}.html"
        path.write_text(_page(f"Feedback: {student}", "\n".join(lines)), encoding="utf-8")
        written.append(path)
        index.append(f'<tr><td><a href="{html.escape(path.name)}">{html.escape(student)}</a></td>'
                     f"<td>{points} / {max_points}</td></tr>")
    body = "\n".join(["<h1>Grades</h1>",
                      f'<p>The <a href="{PAGE}">class report</a>: pass rates, points and the mistakes the class made '
                      "(it names no student).</p>",
                      "<table>", "<tr><th>student</th><th>points</th></tr>", *index, "</table>",
                      "<h2>Summary</h2>", f"<pre>{html.escape(summary(rows))}</pre>"])
    (folder / "index.html").write_text(_page("Grades", body), encoding="utf-8")
    return [folder / "index.html", *written, *class_files]
