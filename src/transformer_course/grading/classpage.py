"""The class at a glance: what an instructor reads before the next lecture, from the gradebook's rows.

Per exercise: the pass rate, how the points are spread, and the known mistakes (the gradebook's ``mistake``
column) ranked by how many students made them, each with its hint and one example message; and the exercises
where most wrong answers match no known mistake, where a new ``Mistake`` in ``checks/lessonNN.py`` would name
what the class got wrong. :func:`class_summary` prints it as text, :func:`write_class_page` writes it as
``class.html`` with a figure of the pass rates (``class-pass-rate.png``).

The class page names no student: the example messages come from the checks, which do not know who answered, and
any student's name that still appears in one (a learner's variable, say) is replaced by ``<student>``. So the
page can be shared with teaching assistants or shown in class. Imports nothing heavy: matplotlib is imported
only to draw the figure.
"""

from __future__ import annotations

import html
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformer_course.grading.gradebook import GradeRow, exercise_key
from transformer_course.grading.layout import html_page, text_table

PAGE = "class.html"
FIGURE = "class-pass-rate.png"
HINT_PREFIX = "Likely mistake: "
NOT_ATTEMPTED = "is not implemented yet"  # the message of an untouched `raise NotImplementedError` stub
OTHER_STATUSES = ("partial", "error", "timeout", "missing", "tampered")


@dataclass
class MistakeCount:
    """One known mistake of an exercise: ``key`` as in the gradebook (``03.1/diagonal-excluded``)."""

    key: str
    students: int
    hint: str
    example: str  # one message of a student who made it, anonymised, without its "Likely mistake" line

    @property
    def id(self) -> str:
        return self.key.split("/", 1)[-1]


@dataclass
class ExerciseStats:
    notebook: str
    exercise: str
    title: str
    max_points: int
    students: int = 0
    passed: int = 0
    points: Counter = field(default_factory=Counter)  # points -> how many students earned them
    statuses: Counter = field(default_factory=Counter)
    not_attempted: int = 0  # failed on the untouched stub
    unrecognised: int = 0  # failed on an attempt that matched no known mistake
    unrecognised_example: str = ""
    mistakes: list[MistakeCount] = field(default_factory=list)  # most students first

    @property
    def lesson(self) -> str:
        return self.exercise.split(".")[0]

    @property
    def pass_rate(self) -> float:
        return self.passed / self.students if self.students else 0.0

    @property
    def wrong_answers(self) -> int:
        """Failed rows on an attempt: those a known mistake could name."""
        return self.unrecognised + sum(m.students for m in self.mistakes)

    @property
    def needs_a_mistake(self) -> bool:
        """Most wrong answers match no known mistake."""
        return self.unrecognised > 0 and 2 * self.unrecognised > self.wrong_answers

    def distribution(self) -> str:
        """'0: 5, 1: 2, 2: 10': how many students earned each number of points, from 0 to the maximum."""
        return ", ".join(f"{p}: {self.points.get(p, 0)}" for p in range(self.max_points + 1)
                         if self.points.get(p, 0) or p in (0, self.max_points))


def anonymise(text: str, students: Sequence[str]) -> str:
    """``text`` with every student's name (a whole word, any case) replaced by ``<student>``."""
    for name in sorted({s for s in students if s.strip()}, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", "<student>", text, flags=re.IGNORECASE)
    return text


def _without_hint(message: str) -> str:
    lines = message.splitlines()
    return "\n".join(line for line in lines if not line.startswith(HINT_PREFIX)).strip()


def _hint(message: str) -> str:
    return next((line[len(HINT_PREFIX):] for line in reversed(message.splitlines()) if line.startswith(HINT_PREFIX)),
                "")


def _typical(texts: Sequence[str]) -> str:
    """The most common text; among equally common ones the shortest, then the first in sort order."""
    counts = Counter(t for t in texts if t)
    if not counts:
        return ""
    return min(counts, key=lambda t: (-counts[t], len(t), t))


def class_stats(rows: Sequence[GradeRow]) -> list[ExerciseStats]:
    """One ExerciseStats per exercise of the gradebook, in notebook and exercise order."""
    students = sorted({r.student for r in rows})
    stats: dict[tuple[str, str], ExerciseStats] = {}
    by_mistake: dict[tuple[str, str], list[GradeRow]] = defaultdict(list)
    unrecognised: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in rows:
        key = (r.notebook, r.exercise)
        s = stats.setdefault(key, ExerciseStats(r.notebook, r.exercise, r.title, r.max_points))
        s.max_points = max(s.max_points, r.max_points)
        s.students += 1
        s.passed += r.status == "passed"
        s.points[r.points] += 1
        s.statuses[r.status] += 1
        if r.status != "failed":
            continue
        if r.mistake:
            by_mistake[(*key, r.mistake)].append(r)
        elif NOT_ATTEMPTED in r.message:
            s.not_attempted += 1
        else:
            s.unrecognised += 1
            unrecognised[key].append(anonymise(r.message, students))
    for (notebook, exercise, mistake), made in by_mistake.items():
        messages = [anonymise(r.message, students) for r in made]
        stats[(notebook, exercise)].mistakes.append(MistakeCount(
            mistake, len(made), _typical([_hint(m) for m in messages]), _typical([_without_hint(m) for m in messages])))
    for key, s in stats.items():
        s.mistakes.sort(key=lambda m: (-m.students, m.key))
        s.unrecognised_example = _typical(unrecognised[key])
    return sorted(stats.values(), key=lambda s: (s.notebook, exercise_key(s.exercise)))


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis where it was cut."""
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def class_summary(rows: Sequence[GradeRow], top: int = 3) -> str:
    """The class report as a short text table: per exercise the pass rate, the mean points, the ``top`` known
    mistakes with how many students made each, and how many wrong answers matched none."""
    if not rows:
        return "No rows: no class to report on."
    stats = class_stats(rows)
    body = []
    for s in stats:
        named = ", ".join(f"{m.id} {m.students}" for m in s.mistakes[:top])
        if len(s.mistakes) > top:
            named += f" (+{len(s.mistakes) - top} more)"
        mean = sum(p * n for p, n in s.points.items()) / s.students
        body.append([s.exercise, shorten(s.title, 32), f"{s.passed}/{s.students}", _percent(s.pass_rate),
                     f"{mean:.1f}/{s.max_points}", named or "-", str(s.unrecognised), str(s.not_attempted)])
    students = len({r.student for r in rows})
    out = [f"Class report: {students} student(s), {len(stats)} exercise(s).", ""]
    out += text_table(["exercise", "title", "passed", "rate", "points", "known mistakes (students)", "unknown",
                   "stub"], body, right={2, 3, 4, 6, 7})
    worth = [s for s in stats if s.needs_a_mistake]
    out.append("")
    if worth:
        out.append("Worth a new Mistake (most wrong answers match no known mistake): " + ", ".join(
            f"{s.exercise} ({s.unrecognised} of {s.wrong_answers})" for s in worth) + ".")
    else:
        out.append("Every exercise's wrong answers mostly match a known mistake.")
    return "\n".join(out)


# --- the page and its figure ---------------------------------------------------------------------------------


BARS_PER_ROW = 14  # a chart row of the figure holds whole lessons, about this many bars, so labels stay readable


def _chart_rows(stats: Sequence[ExerciseStats]) -> list[list[str]]:
    """The lessons of each row of the figure: whole lessons, a new row when one would pass BARS_PER_ROW bars."""
    rows: list[list[str]] = [[]]
    count = 0
    for lesson in sorted({s.lesson for s in stats}):
        n = sum(s.lesson == lesson for s in stats)
        if rows[-1] and count + n > BARS_PER_ROW:
            rows.append([])
            count = 0
        rows[-1].append(lesson)
        count += n
    return rows


def _figure(stats: Sequence[ExerciseStats], path: Path) -> None:
    """A bar per exercise, its pass rate, grouped by lesson (a gap and a colour per lesson, the lesson below); a
    whole course's exercises wrap onto several rows of at most about BARS_PER_ROW bars."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend and figures are left alone

    colours = ["#4c72b0", "#dd8452"]
    chart_rows = _chart_rows(stats)
    fig = Figure(figsize=(9.0, 2.9 * len(chart_rows) + 0.4), dpi=100)
    axes = fig.subplots(len(chart_rows), 1, squeeze=False)[:, 0]
    k = 0
    for ax, lessons in zip(axes, chart_rows, strict=True):
        x, bars, groups = 0.0, [], []
        for lesson in lessons:
            start = x
            for s in (s for s in stats if s.lesson == lesson):
                bars.append((x, colours[k % 2], s))
                x += 1
            groups.append(((start + x - 1) / 2, lesson))
            x += 0.6
            k += 1
        for pos, colour, s in bars:
            ax.bar(pos, 100 * s.pass_rate, width=0.8, color=colour)
            ax.text(pos, 100 * s.pass_rate + 1.5, _percent(s.pass_rate), ha="center", fontsize=8)
        ax.set_xticks([pos for pos, _, _ in bars], [s.exercise for _, _, s in bars], fontsize=8)
        ax.set_xlim(-0.7, max(x - 0.6, BARS_PER_ROW * 1.05))  # every row at the same scale: bars the same width
        for pos, lesson in groups:
            ax.text(pos, -0.14, f"lesson {lesson}", transform=ax.get_xaxis_transform(), ha="center", va="top",
                    fontsize=9)
        ax.set_ylim(0, 110)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_ylabel("passed (%)", fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_title("Pass rate per exercise, by lesson", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>" if text else ""


def class_page(rows: Sequence[GradeRow], figure: str | None = FIGURE) -> str:
    """The class report as an HTML page (the figure, if any, is the image file ``figure`` beside it)."""
    stats = class_stats(rows)
    students = len({r.student for r in rows})
    parts = ["<h1>Class report</h1>",
             f"<p>{students} student(s), {len(stats)} exercise(s). This page names no student: "
             "the example messages are the checks' feedback, anonymised.</p>"]
    if figure:
        parts.append(f'<p><img src="{html.escape(figure)}" alt="Pass rate per exercise, grouped by lesson" '
                     'style="max-width: 100%"></p>')
    parts += ["<h2>Exercises</h2>",
              "<p>The columns: <em>passed</em>, the students whose check passed (and what share of the class); "
              "<em>points: students</em>, how many students earned each number of points, from 0 to the exercise's "
              "maximum (<code>0: 3, 2: 17</code>: three students earned 0 points, seventeen earned 2); <em>known "
              "mistakes</em>, the wrong answers that a check recognised and named (listed below); <em>unknown wrong "
              "answers</em>, those it did not; <em>stubs left</em>, notebooks handed in with the exercise not "
              "attempted; <em>other</em>, the rows with another status (partial, error, timeout, missing, "
              "tampered) and how many.</p>",
              "<table>",
              "<tr><th>exercise</th><th>passed</th><th>points: students</th><th>known mistakes</th>"
              "<th>unknown wrong answers</th><th>stubs left</th><th>other</th></tr>"]
    for s in stats:
        other = ", ".join(f"{status} {s.statuses[status]}" for status in OTHER_STATUSES if s.statuses[status])
        parts.append(
            f"<tr><td>{html.escape(s.exercise)} {html.escape(s.title)}</td>"
            f"<td>{s.passed} / {s.students} ({_percent(s.pass_rate)})</td><td>{html.escape(s.distribution())}</td>"
            f"<td>{sum(m.students for m in s.mistakes)}</td><td>{s.unrecognised}</td><td>{s.not_attempted}</td>"
            f"<td>{html.escape(other)}</td></tr>")
    parts.append("</table>")
    worth = [s for s in stats if s.needs_a_mistake]
    parts.append("<h2>Where a new Mistake is worth writing</h2>")
    if worth:
        parts.append("<p>In these exercises most wrong answers match no known mistake: a <code>Mistake</code> in "
                     "the exercise's checker (<code>src/transformer_course/checks/lessonNN.py</code>) that makes the "
                     "same error would name it for the next learners.</p>")
        parts.append("<table><tr><th>exercise</th><th>unknown / wrong answers</th><th>an example</th></tr>")
        for s in worth:
            parts.append(f"<tr><td>{html.escape(s.exercise)} {html.escape(s.title)}</td>"
                         f"<td>{s.unrecognised} / {s.wrong_answers}</td><td>{_pre(s.unrecognised_example)}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>None: in every exercise, most wrong answers match a known mistake.</p>")
    parts.append("<h2>Wrong answers, by exercise</h2>")
    parts.append("<p>The known mistakes, most students first, then the wrong answers that matched none.</p>")
    for s in stats:
        if not s.wrong_answers:
            continue
        parts.append(f"<h3>{html.escape(s.exercise)} {html.escape(s.title)}</h3>")
        parts.append("<table><tr><th>mistake</th><th>students</th><th>hint</th><th>an example message</th></tr>")
        for m in s.mistakes:
            parts.append(f'<tr><td><code>{html.escape(m.key)}</code></td><td>{m.students}</td>'
                         f"<td>{html.escape(m.hint)}</td><td>{_pre(m.example)}</td></tr>")
        if s.unrecognised:
            parts.append(f"<tr><td>no known mistake</td><td>{s.unrecognised}</td><td></td>"
                         f"<td>{_pre(s.unrecognised_example)}</td></tr>")
        parts.append("</table>")
    if not any(s.wrong_answers for s in stats):
        parts.append("<p>No wrong answers.</p>")
    return html_page("Class report", "\n".join(parts))


def write_class_page(rows: Sequence[GradeRow], folder: str | Path) -> list[Path]:
    """Write ``class.html`` and its figure ``class-pass-rate.png`` into ``folder``; returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stats = class_stats(rows)
    written = []
    if stats:
        _figure(stats, folder / FIGURE)
        written.append(folder / FIGURE)
    page = folder / PAGE
    page.write_text(class_page(rows, FIGURE if stats else None), encoding="utf-8")
    return [page, *written]
