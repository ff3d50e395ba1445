"""The class report (`transformer-course report`, and the class page of `grade --html`) on a fabricated class of
gradebook rows with known counts (tests/fabricated_class.py: the rows carry the real checks' messages and mistake
ids, and no notebook runs), and the command line of `transformer-course check` without a kernel (the grading
itself is tested on every solution notebook in tests/test_grading_release.py). Fast: part of make test-fast.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fabricated_class import CLASS, CLASS_EXPECTED, NAME, ROOT, class_rows

from transformer_course.cli import main
from transformer_course.grading.classpage import class_stats, class_summary, shorten
from transformer_course.grading.gradebook import GradeRow, write_csv


@pytest.fixture(scope="module")
def rows():
    return class_rows()


def test_the_counts_and_the_ranking_of_the_mistakes(rows):
    stats = {s.exercise: s for s in class_stats(rows)}
    assert list(stats) == list(CLASS_EXPECTED)
    for exercise, (passed, mistakes, unknown, stubs) in CLASS_EXPECTED.items():
        s = stats[exercise]
        assert (s.students, s.passed, s.unrecognised, s.not_attempted) == (len(CLASS), passed, unknown, stubs)
        assert [(m.key, m.students) for m in s.mistakes] == mistakes  # most students first
    assert [s.exercise for s in stats.values() if s.needs_a_mistake] == ["02.1"]  # 6 of 8 wrong answers unknown
    assert stats["03.1"].distribution() == "0: 9, 1: 3" and stats["03.1"].statuses["missing"] == 1
    diagonal = stats["03.1"].mistakes[0]
    assert diagonal.hint == "the diagonal is excluded: each position may attend to itself."
    assert diagonal.example.startswith("wrong result for n=4\n") and "Likely mistake" not in diagonal.example


def test_the_terminal_summary(rows):
    text = class_summary(rows)
    assert text.startswith(f"Class report: {len(CLASS)} student(s), 4 exercise(s).")
    line = next(line for line in text.splitlines() if line.startswith("03.1"))
    assert re.search(r"3/12\s+25%\s+0\.2/1\s+diagonal-excluded 5, polarity-inverted 1\s+2\s+0$", line), line
    assert text.splitlines()[-1] == "Worth a new Mistake (most wrong answers match no known mistake): 02.1 (6 of 8)."


def test_the_instructor_guide_shows_the_summary_of_this_class(rows):
    guide = (ROOT / "book" / "instructor_guide.md").read_text()
    shown = re.search(r"```text\n(Class report:.*?)```", guide, re.DOTALL)
    assert shown, "the instructor guide's class report section lost its example summary"
    assert shown.group(1).rstrip() == class_summary(rows).rstrip(), "the guide's example is stale: paste class_summary"


def test_the_class_page_names_no_student_and_ranks_the_mistakes(rows, tmp_path, capsys):
    gradebook = tmp_path / "grades.csv"
    write_csv(rows, gradebook)
    assert main(["report", str(gradebook), "--html", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith(class_summary(rows))
    page = (tmp_path / "out" / "class.html").read_text()
    figure = tmp_path / "out" / "class-pass-rate.png"
    assert figure.read_bytes().startswith(b"\x89PNG") and 'src="class-pass-rate.png"' in page
    for student in CLASS:
        assert not re.search(student, page, re.IGNORECASE), student
    assert "&lt;student&gt;&#x27;s mask is not ready" in page  # the example that carried a name, anonymised
    section = page[page.index("<h3>03.1 "):]
    assert section.index("03.1/diagonal-excluded") < section.index("03.1/polarity-inverted")
    assert "the diagonal is excluded: each position may attend to itself." in section
    worth = page[page.index("Where a new Mistake"):page.index("Wrong answers, by exercise")]
    assert "02.1 A numerically stable softmax" in worth and "01.1" not in worth


def test_grade_html_links_the_class_page_and_an_old_gradebook_reports_too(rows, tmp_path, capsys):
    from transformer_course.grading.gradebook import COLUMNS
    from transformer_course.grading.report import write_html

    write_html(rows, tmp_path / "html")  # what `grade --html` and `merge-grades --html` write
    index = (tmp_path / "html" / "index.html").read_text()
    assert 'href="class.html"' in index
    # The summary as tables, not the terminal's text: a header row per table, numbers right-aligned.
    assert "<pre>" not in index and "<th>exercise</th><th>title</th>" in index and '<td class="num">' in index
    assert "points: students</em>, how many students earned each number of points" in (
        tmp_path / "html" / "class.html").read_text()
    assert (tmp_path / "html" / "class.html").read_text() == (tmp_path / "html" / "class.html").read_text()
    legacy = tmp_path / "legacy.csv"  # written before the mistake column: every wrong answer is unknown
    legacy.write_text(",".join(COLUMNS[:-1]) + "\nAurelio,01_tensor_shapes.ipynb,01.1,T,0,2,failed,wrong\n")
    assert main(["report", str(legacy)]) == 0
    assert re.search(r"^01\.1 .* -\s+1\s+0$", capsys.readouterr().out, re.MULTILINE)
    assert main(["report", str(tmp_path / "nope.csv")]) == 2


# --- transformer-course check, without a kernel ----------------------------------------------------------


def test_check_finds_the_release_and_says_why_it_cannot(tmp_path, monkeypatch, capsys):
    from transformer_course.grading import grader

    seen = []

    def fake_grade_unit(student, release, data, limits, snapshot=None):
        seen.append((student, release.name, [c.exercise for c in release.checks], limits.cell_timeout))
        return [GradeRow(student, release.name, "01.1", "Token ids to logits", 2, 2, "passed", "all 5 cases passed"),
                GradeRow(student, release.name, "01.2", "Inputs", 2, 2, "tampered", "the check cell was deleted. ..."),
                GradeRow(student, release.name, "01.3", "Parameters", 1, 1, "passed",
                    "all 4 cases passed [review the code: it imports the checking code]")]

    monkeypatch.setattr(grader, "grade_unit", fake_grade_unit)
    mine = tmp_path / NAME
    mine.write_bytes((ROOT / "exercises" / NAME).read_bytes())
    monkeypatch.chdir(ROOT)  # the release is made from ./solutions, as `make exercises` makes it
    assert main(["check", str(mine), "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert seen == [("you", NAME, ["01.1", "01.2", "01.3"], 30.0)]
    assert "Total: 5/5 points." in out and f"made from {ROOT / 'solutions' / NAME}" in out
    assert "TAMPERED: the grader will mark 01.2 as `tampered`" in out
    assert "FLAGGED FOR REVIEW: the points of 01.3 stand" in out
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(mine)]) == 2
    assert "pass --release" in capsys.readouterr().err
    assert main(["check", str(mine), "--release", str(mine)]) == 2
    assert "is the notebook being checked" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "nope.ipynb"), "--release", str(ROOT / "exercises")]) == 2
    assert main(["check", str(mine), "--release", str(ROOT / "exercises")]) == 0
    assert f"restored from the release {Path(ROOT / 'exercises' / NAME)}" in capsys.readouterr().out


def test_long_titles_are_cut_with_an_ellipsis():
    assert shorten("Cross-attention from cached keys and values", 32) == "Cross-attention from cached key\u2026"
    assert len(shorten("x" * 40, 32)) == 32 and shorten("A causal mask", 32) == "A causal mask"


def test_a_whole_courses_chart_wraps_by_whole_lessons():
    from transformer_course.grading.classpage import BARS_PER_ROW, _chart_rows, class_stats
    from transformer_course.grading.collect import load_releases

    rows = [GradeRow("ann", r.name, c.exercise, c.title, 0, c.points, "failed", "x")
            for r in load_releases(ROOT / "exercises") for c in r.checks]
    stats = class_stats(rows)
    chart = _chart_rows(stats)
    assert len(chart) >= 3 and sorted(lesson for row in chart for lesson in row) == sorted({s.lesson for s in stats})
    assert all(sum(s.lesson in row for s in stats) <= BARS_PER_ROW for row in chart)
    assert _chart_rows(stats[:3]) == [[stats[0].lesson]]
