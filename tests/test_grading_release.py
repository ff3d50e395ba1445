"""`transformer-course grade` and `transformer-course check` on the whole course: blank notebooks score zero;
the solutions, checked as a learner checks a notebook (the same grading of one student's notebooks), with the
grader's default limits, full marks with nothing flagged; a solution whose check cell was edited is marked tampered.
The two answers that are trained models (12.4's translator, 13.4's GPT) are the very models their solution's answer
cell trains, loaded from the weights tests/stored_models.py keeps of them: nbval runs that training (make test, and
under one thread make test-portable), so the grade of what it trains is checked here without training it a third
time. The capstone's translator, a Seq2SeqTransformer, is decoded by the grader from its weights: 4 points, no flag.

In a file of its own so that pytest-xdist (``--dist loadfile``) runs it beside tests/test_grading_e2e.py,
not after it: each grades a class of notebooks for a minute or more.
"""

import json
import shutil
from pathlib import Path

import pytest

from tests.stored_models import SOLUTION_ANSWERS, solution_answer_source
from transformer_course.cli import main
from transformer_course.grading.collect import load_releases
from transformer_course.grading.gradebook import read_csv
from transformer_course.grading.limits import Limits
from transformer_course.grading.selfcheck import check_notebooks, check_report

pytestmark = pytest.mark.slow  # grades the whole release

ROOT = Path(__file__).resolve().parents[1]


# Blank notebooks graded here: the first and the capstone. tests/test_notebooks.py runs every released notebook
# and proves that each stub fails each of its checks; here the grader turns such failures into zero points.
BLANK = ["01_tensor_shapes.ipynb", "12_capstone_real_words.ipynb"]


def solutions_with_stored_answers(folder: Path) -> list[Path]:
    """Every solution notebook; those whose answer trains a model, copied into ``folder`` with that answer cell
    loading the model it trained (tests/stored_models.py) instead of training it again."""
    folder.mkdir()
    paths = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    for name, answer in SOLUTION_ANSWERS.items():
        nb = json.loads((ROOT / "solutions" / answer.notebook).read_text())
        next(c for c in nb["cells"] if c.get("id") == answer.cell)["source"] = solution_answer_source(name)
        (folder / answer.notebook).write_text(json.dumps(nb))
        paths[paths.index(ROOT / "solutions" / answer.notebook)] = folder / answer.notebook
    return paths


def test_blank_release_scores_zero_and_solutions_score_full_marks(tmp_path):
    submissions = tmp_path / "submissions"
    (submissions / "blank").mkdir(parents=True)
    for name in BLANK:
        shutil.copy(ROOT / "exercises" / name, submissions / "blank" / name)
    out = tmp_path / "grades.csv"
    code = main(["grade", str(submissions), "--release", str(ROOT / "exercises"), "--out", str(out), "--jobs", "2",
                 "--quiet"])
    assert code == 0
    blank = read_csv(out)
    releases = load_releases(ROOT / "exercises")
    released_exercises = {c.exercise for r in releases for c in r.checks}
    handed_in = {c.exercise for r in releases if r.name in BLANK for c in r.checks}
    assert len(handed_in) >= 7 and {r.exercise for r in blank} == released_exercises
    assert not [r for r in blank if r.exercise in handed_in
                and (r.points or r.status != "failed" or "not implemented yet" not in r.message)]
    assert not [r for r in blank if r.exercise not in handed_in and (r.points or r.status != "missing")]

    # The solutions as `transformer-course check` grades them, against the release that `make exercises` makes
    # from solutions/; and a solution whose check cell was edited.
    tampered = tmp_path / "01_tensor_shapes.ipynb"
    nb = json.loads((ROOT / "solutions" / tampered.name).read_text())
    next(c for c in nb["cells"] if c.get("id") == "ex2-check")["source"] = "print('all good')"
    tampered.write_text(json.dumps(nb))
    limits = Limits()  # the grader's defaults, as `check` uses them
    checked = check_notebooks([*solutions_with_stored_answers(tmp_path / "solutions"), tampered], limits=limits,
                              jobs=2)
    solutions = [r for c in checked[:-1] for r in c.rows]
    assert {r.exercise for r in solutions} == released_exercises
    assert not [r for r in solutions if r.points != r.max_points or r.status != "passed"]
    capstone = next(r for r in solutions if r.exercise == "12.4")
    assert capstone.message.startswith("4/4 points: exact match ") and "review the code" not in capstone.message, \
        capstone
    for c in checked[:-1]:
        text = check_report(c, limits)
        full = sum(r.max_points for r in c.rows)
        assert f"Total: {full}/{full} points." in text and "Nothing would be marked `tampered` or flagged" in text, text
    assert [(r.exercise, r.status) for r in checked[-1].rows] == [("01.1", "passed"), ("01.2", "tampered"),
                                                                  ("01.3", "passed")]
    assert "TAMPERED: the grader will mark 01.2 as `tampered`" in check_report(checked[-1], limits)


def test_a_stored_answer_trained_by_another_answer_cell_is_refused(tmp_path, monkeypatch):
    import tests.stored_models as stored_models

    answer = SOLUTION_ANSWERS["solution_12_4"]
    nb = json.loads((ROOT / "solutions" / answer.notebook).read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == answer.cell)
    cell["source"] = "".join(cell["source"]).replace("max_steps=200", "max_steps=250")
    (tmp_path / answer.notebook).write_text(json.dumps(nb))
    monkeypatch.setattr(stored_models, "SOLUTIONS", tmp_path)
    with pytest.raises(AssertionError, match="trained by another version of .* rebuild the stored answers"):
        solution_answer_source("solution_12_4")
