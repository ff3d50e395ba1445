"""The progress cell: every check keeps what it found in the kernel, and progress("NN") lists them."""

import pytest
import torch

from transformer_course.checks import REGISTRY, CheckFailed, check
from transformer_course.checks.core import Case, Mistake, Score, check_function, exercise
from transformer_course.checks.progress import LAST_CHECKS, progress


@pytest.fixture
def lesson98():
    """Three exercises of a made-up lesson 98: one by cases, one graded by results (bands), one never checked."""
    saved = dict(LAST_CHECKS)
    LAST_CHECKS.clear()

    @exercise("98.1", "Double it", 2)
    def _double(answer):
        return check_function(answer, lambda x: 2 * x, [Case("x=5", {"x": 5})],
                              [Mistake("added", "added instead of multiplied", lambda x: x + 3)])

    @exercise("98.2", "Be accurate", 4)
    def _accurate(answer):
        accuracy = answer()
        return Score(4 if accuracy >= 0.9 else 2 if accuracy >= 0.5 else 0, f"accuracy {accuracy:.0%}", 1)

    @exercise("98.10", "Never checked", 1)
    def _never(answer):
        return 1

    yield
    for key in ("98.1", "98.2", "98.10"):
        REGISTRY.pop(key)
    LAST_CHECKS.clear()
    LAST_CHECKS.update(saved)


def test_nothing_checked_yet(lesson98):
    shown = progress("98")
    assert [(r.exercise, r.status, r.points, r.max_points) for r in shown.rows] == [
        ("98.1", "not checked yet", 0, 2), ("98.2", "not checked yet", 0, 4), ("98.10", "not checked yet", 0, 1)]
    assert repr(shown).endswith("Total: 0/7 points; 0 of 3 exercises passed, 3 not checked yet.")


def test_each_exercise_shows_its_last_check(lesson98, capsys):
    with pytest.raises(CheckFailed):
        check("98.1", lambda x: x + 3)
    check("98.2", lambda: 0.7)
    assert "\u25d1 98.2 Be accurate: 2/4 points: accuracy 70%" in capsys.readouterr().out  # check's own output
    rows = {r.exercise: r for r in progress(98).rows}
    assert (rows["98.1"].status, rows["98.1"].points) == ("failed", 0)
    assert rows["98.1"].detail == "Likely mistake: added instead of multiplied"
    assert (rows["98.2"].status, rows["98.2"].points, rows["98.2"].detail) == ("partial", 2, "accuracy 70%")
    assert rows["98.10"].status == "not checked yet"

    check("98.1", lambda x: 2 * x)  # the last check counts
    with pytest.raises(CheckFailed):
        check("98.2", lambda: 0.1)  # no points: a failure
    shown = progress("98")
    rows = {r.exercise: r for r in shown.rows}
    assert (rows["98.1"].status, rows["98.1"].points, rows["98.1"].detail) == ("passed", 2, "")
    assert (rows["98.2"].status, rows["98.2"].points) == ("failed", 0)
    assert rows["98.2"].detail == "0/4 points: accuracy 10%"  # without the "98.2 Be accurate: " prefix
    text = repr(shown)
    assert "98.1 Double it" in text and "\u2714 passed" in text and "\u2718 failed" in text
    assert text.endswith("Total: 2/7 points; 1 of 3 exercises passed, 1 not checked yet.")
    page = shown._repr_html_()
    assert "<table>" in page and "accuracy 10%" in page and "Total: 2/7 points" in page


def test_a_failure_shows_its_first_line_and_an_error_its_name(lesson98):
    with pytest.raises(CheckFailed):
        check("98.1", lambda x: torch.zeros(2) @ torch.zeros(3))
    detail = progress("98").rows[0].detail
    assert detail.startswith("your code raised RuntimeError on the case") and "\n" not in detail


def test_the_lessons_progress_lists_its_registered_exercises_in_order():
    assert [r.exercise for r in progress("03").rows] == ["03.1", "03.2", "03.3"]


@pytest.mark.parametrize("lesson, error, message", [
    ("14", ValueError, "lesson must be one of 01, 02, .*, got '14'"),
    (None, TypeError, "lesson must be a lesson number such as '03' or 3, got NoneType None"),
])
def test_a_wrong_lesson_is_named(lesson, error, message):
    with pytest.raises(error, match=message):
        progress(lesson)
