"""The gradebook as people read it: a plain-text summary, and one HTML feedback page per student with an index
(the class report beside them is :mod:`.classpage`). The rows themselves and their CSV form: :mod:`.gradebook`."""

from __future__ import annotations

import html
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from transformer_course.grading.classpage import PAGE, write_class_page
from transformer_course.grading.gradebook import STATUSES, GradeRow, exercise_key, sort_rows
from transformer_course.grading.layout import html_page, html_table, text_table


def summary_tables(rows: Sequence[GradeRow]) -> list[tuple[list[str], list[list[str]], set[int]]]:
    """The summary's two tables, ``(header, body, right-aligned columns)``: per student the points and how many
    rows of each status; per exercise how many students passed and the points earned."""
    by_student: dict[str, list[GradeRow]] = defaultdict(list)
    by_exercise: dict[tuple[str, str, str], list[GradeRow]] = defaultdict(list)
    for r in rows:
        by_student[r.student].append(r)
        by_exercise[(r.notebook, r.exercise, r.title)].append(r)
    students = []
    for student in sorted(by_student):
        mine = by_student[student]
        counts = Counter(r.status for r in mine)
        students.append([student, f"{sum(r.points for r in mine)}/{sum(r.max_points for r in mine)}"]
                        + [str(counts.get(s, 0)) for s in STATUSES])
    exercises = []
    for notebook, exercise, title in sorted(by_exercise, key=lambda e: (e[0], exercise_key(e[1]))):
        mine = by_exercise[(notebook, exercise, title)]
        passed = sum(r.status == "passed" for r in mine)
        exercises.append([exercise, title, f"{passed}/{len(mine)}",
                          f"{sum(r.points for r in mine)}/{sum(r.max_points for r in mine)}"])
    return [(["student", "points", *STATUSES], students, set(range(1, 2 + len(STATUSES)))),
            (["exercise", "title", "passed", "points"], exercises, {2, 3})]


def _total_line(rows: Sequence[GradeRow]) -> str:
    students = len({r.student for r in rows})
    exercises = len({(r.notebook, r.exercise) for r in rows})
    return (f"{students} student(s), {exercises} exercise(s): {sum(r.points for r in rows)}/"
            f"{sum(r.max_points for r in rows)} points in all.")


def summary(rows: Sequence[GradeRow]) -> str:
    """Per-student totals and per-exercise pass counts, as plain-text tables."""
    if not rows:
        return "No rows: no students to grade."
    out = []
    for header, body, right in summary_tables(rows):
        out += text_table(header, body, right=right) + [""]
    return "\n".join(out + [_total_line(rows)])


# --- HTML ------------------------------------------------------------------------------------------------

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


def write_html(rows: Sequence[GradeRow], folder: str | Path) -> list[Path]:
    """One feedback page per student (``<student>.html``), the class report (``class.html``, which names no
    student, and its figure; see :mod:`.classpage`) and an ``index.html`` linking them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    by_student: dict[str, list[GradeRow]] = defaultdict(list)
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
        path.write_text(html_page(f"Feedback: {student}", "\n".join(lines)), encoding="utf-8")
        written.append(path)
        index.append(f'<tr><td><a href="{html.escape(path.name)}">{html.escape(student)}</a></td>'
                     f"<td>{points} / {max_points}</td></tr>")
    body = "\n".join(["<h1>Grades</h1>",
                      f'<p>The <a href="{PAGE}">class report</a>: pass rates, points and the mistakes the class made '
                      "(it names no student).</p>",
                      "<table>", "<tr><th>student</th><th>points</th></tr>", *index, "</table>",
                      "<h2>Summary</h2>", f"<p>{html.escape(_total_line(rows))}</p>",
                      *(html_table(*table) for table in summary_tables(rows))])
    (folder / "index.html").write_text(html_page("Grades", body), encoding="utf-8")
    return [folder / "index.html", *written, *class_files]
