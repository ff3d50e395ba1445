"""Issue 34, items 1 and 2, for lessons 01-04: the answers of tests/answers/lesson01..04 run under the public cases
and every cases seed in tests/test_exercise_checks.py; here, the proof that 02.3's cases before issue 34 named two
wrong answers by another mistake's name, which the cases now tell apart."""

import torch

from tests.answers import lesson01, lesson02, lesson03, lesson04
from transformer_course.checks import CheckFailed, check, core
from transformer_course.checks import lesson02 as checks02

LESSONS = (lesson01, lesson02, lesson03, lesson04)
TABLES = {ex: table for module in LESSONS for ex, table in module.EXERCISES.items()}
MISTAKE_IDS = {ex: ids for module in LESSONS for ex, ids in getattr(module, "MISTAKES", {}).items()}


def _problems(exercise_id: str, only: tuple[str, ...] = ()) -> list[str]:
    """What the check of ``exercise_id`` gets wrong, under the current cases seed, about the tables' answers (the
    wrong answers named in ``only`` alone, if given)."""
    wrong, right = TABLES[exercise_id]
    problems = []
    for name, (answer, hint) in wrong.items():
        if only and name not in only:
            continue
        try:
            check(exercise_id, answer)
        except CheckFailed as failure:
            named = failure.mistake
            if hint not in str(failure):
                problems.append(f"{name}: hint {hint!r} missing from {str(failure)!r}")
            if named is not None and hint not in named.hint:
                problems.append(f"{name}: named {named.id!r}, another mistake's name")
            expected = MISTAKE_IDS.get(exercise_id, {}).get(name, named.id if named else None)
            if (named.id if named else None) != expected:
                problems.append(f"{name}: named {named.id if named else None!r}, expected {expected!r}")
        else:
            problems.append(f"{name}: accepted")
    for name, answer in ({} if only else right).items():
        try:
            check(exercise_id, answer)
        except CheckFailed as failure:
            problems.append(f"correct {name}: rejected: {failure}")
    return problems


def _old_variance_cases() -> list[core.Case]:
    """02.3's cases before issue 34: every feature of q (of k) has the same standard deviation."""
    g = core.case_generator(23)
    cases = []
    for d_k, std_q, std_k in ((1, 1.0, 1.0), (16, 0.5, 2.0), (64, 1.0, 0.25), (256, 2.0, 1.5)):
        q = torch.randn(checks02.VARIANCE_SAMPLES, d_k, generator=g) * std_q
        k = torch.randn(checks02.VARIANCE_SAMPLES, d_k, generator=g) * std_k
        cases.append(core.Case(f"d_k={d_k}, std(q)={std_q:g}, std(k)={std_k:g}", {"q": q, "k": k}))
    return cases


def test_the_old_variance_cases_named_the_formula_as_another_mistake(monkeypatch):
    """Where every feature has the same standard deviation, the formula d_k var(q) var(k) (which the exercise rules
    out) agrees with every query paired with every key within the tolerance, and var(q) var(k) with the variance
    of one product: the old cases gave them those mistakes' names. The test above fails on them."""
    formula, product = "the formula d_k var(q) var(k)", "product of the entries' variances"
    assert _problems("02.3", (formula, product)) == []
    monkeypatch.setattr(checks02, "_variance_cases", _old_variance_cases)
    assert f"{formula}: named 'every-query-with-every-key', another mistake's name" in _problems("02.3", (formula,))
    monkeypatch.setattr(core, "CASES_SEED", 5)
    assert f"{product}: named 'products-not-summed', another mistake's name" in _problems("02.3", (product,))
