"""Every exercise's check rejects known-wrong answers with the right hint and accepts other correct answers.

The answers live in ``tests/answers/lessonNN.py``: for each exercise id, a table of wrong answers
(name -> (function, the hint its rejection must contain)) and a table of correct alternatives
(name -> function), written differently from the solution (einsum, loops, modules, float64 ...).
"""

import importlib
import pkgutil

import pytest

import tests.answers
from transformer_course.checks import REGISTRY, CheckFailed, check

TABLES = {}
for module_info in pkgutil.iter_modules(tests.answers.__path__):
    TABLES.update(importlib.import_module(f"tests.answers.{module_info.name}").EXERCISES)

WRONG = [
    pytest.param(ex, answer, hint, id=f"{ex}-{name}")
    for ex, (wrong, _) in sorted(TABLES.items())
    for name, (answer, hint) in wrong.items()
]
RIGHT = [
    pytest.param(ex, answer, id=f"{ex}-{name}")
    for ex, (_, right) in sorted(TABLES.items())
    for name, answer in right.items()
]


@pytest.mark.parametrize("exercise_id, answer, hint", WRONG)
def test_wrong_answer_is_rejected_with_its_hint(exercise_id, answer, hint):
    with pytest.raises(CheckFailed) as failure:
        check(exercise_id, answer)
    assert hint in str(failure.value), str(failure.value)
    assert str(failure.value).startswith(exercise_id)


@pytest.mark.parametrize("exercise_id, answer", RIGHT)
def test_correct_alternative_is_accepted(exercise_id, answer, capsys):
    check(exercise_id, answer)
    assert "public checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id", sorted(REGISTRY))
def test_every_exercise_has_enough_answers_in_the_tests(exercise_id):
    wrong, right = TABLES.get(exercise_id, ({}, {}))
    assert len(wrong) >= 4, f"{exercise_id}: at least 4 known-wrong answers"
    assert len(right) >= 2, f"{exercise_id}: at least 2 correct alternatives"
