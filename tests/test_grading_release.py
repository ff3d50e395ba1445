"""`transformer-course grade` on the whole course, with the grader's default limits (60 s per cell, 600 s per
notebook, 4096 MiB): the blank release scores zero, the solutions full marks. The capstone's solution (12.4) trains
its translator inside the grader's kernel within the cell limit and earns its 4 points with no review flag.

In a file of its own so that pytest-xdist (``--dist loadfile``) runs it beside tests/test_grading_e2e.py,
not after it: each grades a class of notebooks for a minute or more.
"""

import shutil
from pathlib import Path

import pytest

from transformer_course.cli import main
from transformer_course.grading.collect import load_releases
from transformer_course.grading.report import read_csv

pytestmark = pytest.mark.slow  # grades the whole release twice, training the capstone once

ROOT = Path(__file__).resolve().parents[1]


def test_blank_release_scores_zero_and_solutions_score_full_marks(tmp_path):
    submissions = tmp_path / "submissions"
    shutil.copytree(ROOT / "exercises", submissions / "blank")
    shutil.copytree(ROOT / "solutions", submissions / "solutions")
    out = tmp_path / "grades.csv"
    code = main(["grade", str(submissions), "--release", str(ROOT / "exercises"), "--out", str(out), "--jobs", "2",
                 "--quiet"])
    assert code == 0
    rows = read_csv(out)
    released_exercises = {c.exercise for r in load_releases(ROOT / "exercises") for c in r.checks}
    blank = [r for r in rows if r.student == "blank"]
    solutions = [r for r in rows if r.student == "solutions"]
    assert {r.exercise for r in blank} == {r.exercise for r in solutions} == released_exercises
    assert all(r.points == 0 and r.status == "failed" and "not implemented yet" in r.message for r in blank), blank
    assert all(r.points == r.max_points and r.status == "passed" for r in solutions), solutions
    capstone = next(r for r in solutions if r.exercise == "12.4")
    assert capstone.message.startswith("4/4 points: exact match ") and "review the code" not in capstone.message, \
        capstone
