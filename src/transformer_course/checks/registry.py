"""The registry of exercises: each id's title, points and checker, registered by the lesson modules
(``@exercise("02.1", "Scaled dot-product attention", 2)``), and what a checker's result is worth (:class:`Score`).

A checker receives the learner's answer and returns the number of cases it passed, or, for an exercise graded by
what the answer achieves (the capstone's translator), a :class:`Score`; it raises ``core.CheckFailed`` otherwise.
The learner's ``check``, the notebook's progress cell and the grader's re-check outside the kernel all read a
checker's result through :func:`score_of`. Imports nothing of the course (no torch), so every part of the checks
can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    points: int
    checker: Callable[[object], object]  # answer -> the cases passed (int) or a Score; raises CheckFailed
    # An answer the grader rebuilds in its own process and checks there, where no learner code runs (the capstone's
    # model, as its weights): as_data(answer) -> plain data (tensors, numbers, strings, dicts), or None for an
    # answer that cannot be rebuilt; from_data(data) -> the answer, raising ValueError or TypeError on data that
    # does not describe one. None for the exercises whose recorded results are re-checked instead.
    as_data: Callable[[object], object] | None = None
    from_data: Callable[[object], object] | None = None

    @property
    def lesson(self) -> str:
        """The two-digit lesson number, e.g. ``"02"`` for ``"02.1"``."""
        return self.id.split(".")[0]


REGISTRY: dict[str, Exercise] = {}


def exercise(id: str, title: str, points: int, *, as_data: Callable | None = None,
             from_data: Callable | None = None) -> Callable:
    """Register the decorated function as the checker of exercise ``id`` (e.g. ``"02.1"``); ``as_data`` and
    ``from_data``: see :class:`Exercise` (both or neither)."""
    if (as_data is None) != (from_data is None):
        raise ValueError(f"exercise {id!r}: give both as_data and from_data, or neither")

    def register(checker: Callable[[object], object]) -> Callable[[object], object]:
        if id in REGISTRY:
            raise ValueError(f"exercise {id!r} is registered twice")
        REGISTRY[id] = Exercise(id, title, points, checker, as_data, from_data)
        return checker

    return register


@dataclass(frozen=True)
class Score:
    """What a checker returns when it grades by what an answer achieves rather than pass or fail.

    ``points``: earned, from 0 to the exercise's points; ``summary``: the measured result in words
    ("exact match 91.2% (..), chrF 98.1; 4 points need exact match >= 95%"); ``cases``: how many inputs it
    rests on. A checker returning an int (the cases passed) earns all the points.
    """

    points: int
    summary: str
    cases: int = 0


def score_of(ex: Exercise, result) -> Score:
    """A checker's return value as a Score: an int (cases passed) earns all the exercise's points; a Score's
    points are kept within 0 .. the exercise's points."""
    if isinstance(result, Score):
        return Score(max(0, min(int(result.points), ex.points)), str(result.summary), int(result.cases))
    return Score(ex.points, "", int(result) if isinstance(result, int) and not isinstance(result, bool) else 0)


def points_line(score: Score, max_points: int) -> str:
    """A score as the learner and the gradebook read it: "3/4 points: exact match 91.2% (..), chrF 98.1"."""
    return f"{score.points}/{max_points} points: {score.summary}"
