"""Which learners' answers look alike, exercise by exercise: evidence for a person to read, never a verdict.

For each released exercise, a student's code for it is what the grader would run as theirs: the answer cell and
any code cells they added after it, until the next exercise's answer (read as :func:`.prepare.prepare` reads a
submission). `copydetect` fingerprints that code (winnowed k-grams of its tokens, with names, strings and comments
normalised, so renaming variables or rewording comments changes nothing), and the release's own stub for the
exercise is its boilerplate, so code the course handed out never counts as shared. Every pair of students who
wrote code for an exercise is compared. A pair's *similarity* is the smaller of two shares: the part of each
student's code (in fingerprinted tokens) also found in the other's. Short exercises have few ways to be right, so
the report also says, per exercise, how many of all the class's pairs reach the threshold: a pair stands out only
against that.
"""

from __future__ import annotations

import csv
import html
import io
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformer_course.cell_metadata import exercise_record, is_read_only
from transformer_course.grading.collect import Student
from transformer_course.grading.gradebook import exercise_key
from transformer_course.grading.layout import html_page
from transformer_course.grading.prepare import Release, UnreadableNotebook, prepare

# copydetect's own defaults: shared runs shorter than NOISE characters of normalised code are ignored, and every
# shared run of at least GUARANTEE characters is found (winnowing window GUARANTEE - NOISE + 1).
NOISE, GUARANTEE = 25, 25
REPORT, TABLE = "similarity.html", "similarity.csv"


@dataclass(frozen=True)
class Pair:
    """Two students' code for one exercise, and how much of it they share."""

    exercise: str
    first: str
    second: str
    shares: tuple[float, float]  # the part of each one's code (fingerprinted tokens) found in the other's
    shared_tokens: int
    marked: tuple[str, str]  # each one's code as HTML, the shared parts in <mark>

    @property
    def similarity(self) -> float:
        return min(self.shares)


@dataclass
class ExerciseReport:
    exercise: str
    title: str
    students: int  # who wrote code for it beyond the release's stub
    pairs: int  # every pair of them
    above: int  # pairs whose similarity reaches the threshold
    top: list[Pair]


def answers(releases: Sequence[Release], students: Sequence[Student]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Each exercise's code by student (``{"01.1": {"ada": "def ..."}}``), and notes on notebooks not read."""
    found: dict[str, dict[str, str]] = {}
    notes = []
    for release in releases:
        released = {c.id: c for c in release.nb.cells}
        for student in students:
            data = student.notebooks.get(release.name)
            if data is None:
                continue
            if isinstance(data, UnreadableNotebook):
                notes.append(f"{student.name}/{release.name}: not read ({data})")
                continue
            try:
                cells = prepare(release, data).nb.cells
            except UnreadableNotebook as error:
                notes.append(f"{student.name}/{release.name}: not read ({error})")
                continue
            current = None
            for cell in cells:
                record = exercise_record(released[cell.id]) if cell.id in released else {}
                if record.get("role") == "answer":
                    current = str(record["exercise"])
                elif cell.id in released and (record.get("role") or is_read_only(released[cell.id])):
                    continue  # the course's own cells: checks, progress, read-only text and code
                if current is not None and cell.cell_type == "code" and cell.source.strip():
                    code = found.setdefault(current, {})
                    code[student.name] = code.get(student.name, "") + cell.source.rstrip() + "\n\n"
    return found, notes


def _stubs(releases: Sequence[Release]) -> dict[str, str]:
    """Each exercise's released answer cells: the code every learner starts from."""
    stubs: dict[str, str] = {}
    for release in releases:
        for cell in release.nb.cells:
            record = exercise_record(cell)
            if record.get("role") == "answer" and cell.cell_type == "code":
                exercise = str(record["exercise"])
                stubs[exercise] = stubs.get(exercise, "") + cell.source.rstrip() + "\n\n"
    return stubs


def _fingerprint(name: str, code: str, boilerplate=None):
    from copydetect import CodeFingerprint

    return CodeFingerprint(f"{name}.py", NOISE, GUARANTEE - NOISE + 1, boilerplate=boilerplate,
                           fp=io.StringIO(code), language="python")


def _marked(code: str, slices) -> str:
    from copydetect.utils import highlight_overlap

    if slices.shape[-1] == 0:
        return html.escape(code)
    return highlight_overlap(code, slices, "<mark>", "</mark>", escape_html=True)[0]


def compare(releases: Sequence[Release], students: Sequence[Student], *, threshold: float = 0.5,
            top: int = 5) -> tuple[list[ExerciseReport], list[str]]:
    """Per exercise (in course order): the ``top`` most similar pairs of students at or above ``threshold``, and
    how many pairs of the class reach it; and notes on notebooks not read."""
    from copydetect import compare_files

    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise ValueError(f"threshold: expected a share of the code in (0, 1], got {threshold!r}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top: expected a whole number of pairs >= 1, got {top!r}")
    code, notes = answers(releases, students)
    stubs = _stubs(releases)
    titles = {c.exercise: c.title for r in releases for c in r.checks}
    reports = []
    for exercise in sorted(titles, key=exercise_key):
        stub = _fingerprint("release", stubs.get(exercise, ""))
        boilerplate = sorted(stub.hashes)
        prints = {name: _fingerprint(name, text, boilerplate) for name, text in sorted(code.get(exercise, {}).items())}
        prints = {name: p for name, p in prints.items() if p.token_coverage > 0}  # only the stub, or too short
        pairs, above = 0, []
        for a, b in itertools.combinations(sorted(prints), 2):
            pairs += 1
            tokens, shares, slices = compare_files(prints[a], prints[b])
            if tokens and min(shares) >= threshold:
                above.append(Pair(exercise, a, b, (float(shares[0]), float(shares[1])), int(tokens),
                                  (_marked(prints[a].raw_code, slices[0]), _marked(prints[b].raw_code, slices[1]))))
        above.sort(key=lambda p: (-p.similarity, -p.shared_tokens, p.first, p.second))
        reports.append(ExerciseReport(exercise, titles[exercise], len(prints), pairs, len(above), above[:top]))
    return reports, notes


def _percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def report_page(reports: Sequence[ExerciseReport], threshold: float, notes: Sequence[str] = ()) -> str:
    """The HTML page: per exercise, how common shared code is in the class, then the closest pairs side by side."""
    parts = ["<h1>Similar answers</h1>",
             "<p>For each exercise, the pairs of students whose code for it shares the most, measured by "
             "<code>copydetect</code> with names, strings and comments normalised and the released stub left out. "
             f"A pair is listed when each of the two has at least {_percent(threshold)} of its code in the other's. "
             "This is evidence for a person to read, not a verdict: short exercises have few ways to be right, so "
             "compare a pair with how many of the class's pairs reach the threshold for the same exercise.</p>"]
    if notes:
        parts.append("<p>Not compared:</p><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    empty = [r.exercise for r in reports if not r.students]
    if empty:
        parts.append(f"<p>No code handed in beyond the stub for {', '.join(empty)}.</p>")
    for r in (r for r in reports if r.students):
        parts.append(f"<h2>{html.escape(r.exercise)} {html.escape(r.title)}</h2>")
        rate = f" ({_percent(r.above / r.pairs)})" if r.pairs else ""
        parts.append(f"<p>{r.students} students wrote code for it; {r.above} of {r.pairs} pairs{rate} reach "
                     f"{_percent(threshold)}.</p>")
        for p in r.top:
            parts.append(
                f"<h3>{html.escape(p.first)} and {html.escape(p.second)}: {_percent(p.similarity)}</h3>"
                f"<table><tr><th>{html.escape(p.first)}: {_percent(p.shares[0])} shared</th>"
                f"<th>{html.escape(p.second)}: {_percent(p.shares[1])} shared</th></tr>"
                f"<tr><td><pre>{p.marked[0]}</pre></td><td><pre>{p.marked[1]}</pre></td></tr></table>")
    return html_page("Similar answers", "\n".join(parts))


def report_table(reports: Sequence[ExerciseReport]) -> str:
    """The listed pairs as CSV: exercise, both students, the similarity and each one's share, shared tokens."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["exercise", "student_a", "student_b", "similarity", "share_a", "share_b", "shared_tokens",
                     "pairs_at_threshold", "pairs"])
    for r in reports:
        for p in r.top:
            writer.writerow([p.exercise, p.first, p.second, f"{p.similarity:.3f}", f"{p.shares[0]:.3f}",
                             f"{p.shares[1]:.3f}", p.shared_tokens, r.above, r.pairs])
    return out.getvalue()


def write_report(reports: Sequence[ExerciseReport], folder: str | Path, threshold: float,
                 notes: Sequence[str] = ()) -> list[Path]:
    """Write ``similarity.html`` and ``similarity.csv`` into ``folder`` (made if needed); return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    page, table = folder / REPORT, folder / TABLE
    page.write_text(report_page(reports, threshold, notes), encoding="utf-8")
    table.write_text(report_table(reports), encoding="utf-8", newline="")
    return [page, table]
