"""The capstone (12.4) under `transformer-course grade`: its solution, trained inside the grader's kernel on one
thread within the cell time limit, earns full marks with no review flag; its stub fails. Slow: a real training run
in a real kernel."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from transformer_course.authoring import make_exercise_notebook
from transformer_course.checks import REGISTRY
from transformer_course.cli import main
from transformer_course.grading.report import read_csv

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NAME = "12_capstone_real_words.ipynb"


@pytest.fixture(scope="module")
def capstone_release(tmp_path_factory):
    """Lesson 12's solution notebook cut down to its header and the capstone's cells, and the exercise notebook
    generated from it (12.1-12.3 are graded with the other lessons' exercises by the end-to-end tests)."""
    root = tmp_path_factory.mktemp("capstone")
    nb = nbformat.read(ROOT / "solutions" / NAME, as_version=4)
    header = ("title", "how-to", "install", "setup", "next")
    nb.cells = [c for c in nb.cells if c.id in header or c.id.startswith("ex4-")]
    solution = root / "solutions" / NAME
    solution.parent.mkdir()
    nbformat.write(nb, solution)
    release = root / "release"
    release.mkdir()
    others = {k: REGISTRY.pop(k) for k in list(REGISTRY) if k.startswith("12.") and k != "12.4"}
    try:  # the exercise notebook of this capstone-only solution checks 12.4 alone
        nbformat.write(make_exercise_notebook(nbformat.read(solution, as_version=4), solution), release / NAME)
    finally:
        REGISTRY.update(others)
    return solution, release


def test_the_solution_earns_full_marks_and_the_stub_none(capstone_release, tmp_path):
    solution, release = capstone_release
    submissions = tmp_path / "submissions"
    for student, source in (("sol", solution), ("stub", release / NAME)):
        (submissions / student).mkdir(parents=True)
        shutil.copy(source, submissions / student / NAME)
    out = tmp_path / "grades.csv"
    assert main(["grade", str(submissions), "--release", str(release), "--out", str(out), "--jobs", "2",
                 "--quiet"]) == 0  # the default limits: 60 s per cell, 600 s per notebook, 4096 MiB
    rows = {r.student: r for r in read_csv(out)}
    sol, stub = rows["sol"], rows["stub"]
    assert (sol.exercise, sol.points, sol.max_points, sol.status) == ("12.4", 4, 4, "passed"), sol
    assert sol.message.startswith("4/4 points: exact match ") and "review the code" not in sol.message, sol
    assert (stub.points, stub.status) == (0, "failed") and "not implemented yet" in stub.message, stub
