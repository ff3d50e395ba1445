"""Cases that separate every plausible mistake of lessons 05-08 (issue 34, items 1 and 2).

tests/test_exercise_checks.py holds the answers' verdicts under the public cases and every cases seed; here, for the
checks that compare a function's results, that no two mistakes agree on every case under each seed, and for the checks
of modules (07.2, 07.3, 08.1, 08.2, 08.4), whose mistakes are named
from one case at a time, a proof that on every case no two mistakes give the same output.
"""

import itertools

import pytest
import torch

from tests.test_exercise_checks import SEEDS, TABLES, _named_mistake_problems
from transformer_course.checks import REGISTRY, CheckFailed, check, core, lesson05, lesson06, lesson07, lesson08
from transformer_course.checks.modules import _randomise


@pytest.mark.parametrize("exercise_id", ["05.1", "05.2", "06.1", "06.2", "07.1", "08.3"])
@pytest.mark.parametrize("seed", SEEDS)
def test_every_named_mistake_is_told_apart_under_any_cases_seed(exercise_id, seed, monkeypatch):
    """test_exercise_checks' test of the same name for the check_function exercises of lessons 05-08, under the
    public cases and five cases seeds: each mistake is rejected, and no two mistakes agree on every case."""
    calls = []

    def capture(answer, reference, cases, mistakes=(), *, names=("output",), rtol=1e-5, atol=1e-6, differ=None):
        def compare(expected, got, case):
            return core.compare(expected, got, names=names, rtol=rtol, atol=atol)
        calls.append((reference, list(cases), list(mistakes), differ or compare))
        return len(cases)

    monkeypatch.setattr(core, "CASES_SEED", seed)
    for module in (lesson05, lesson06, lesson07, lesson08):
        monkeypatch.setattr(module, "check_function", capture)
    REGISTRY[exercise_id].checker(lambda *args: None)
    assert len(calls) == 1 and _named_mistake_problems(*calls[0]) == []


MODULE_CHECKS = {  # exercise -> (the reference's builder, its cases, its mistakes)
    "07.2": (lesson07.PositionWiseFFN, lesson07._ffn_cases, lesson07._ffn_mistakes),
    "07.3": (lesson07._encoder_block, lesson07._block_cases, lesson07._block_mistakes),
    "08.1": (lesson08._decoder_block, lesson08._decoder_cases, lesson08._decoder_mistakes),
    "08.2": (lesson08.ReferenceGPT, lesson08._gpt_cases, lesson08._gpt_mistakes),
    "08.4": (lesson08._prenorm_decoder_block, lesson08._decoder_cases, lesson08._prenorm_mistakes),
}


def _module_case_problems(module_check) -> list[str]:
    """What a check_module exercise's cases fail to do. check_module names a mistake from the first case an answer
    gets wrong, alone: so each mistake must be wrong on some case, and on every case where a mistake is wrong, no
    mistake with another id may give the same output (or raise the same error), else a learner who makes the second
    would get the first's name. Outputs count as the same within 10 x the check's tolerance."""
    make, cases_of, mistakes_of = module_check

    def run(function, case):
        try:
            with torch.no_grad():
                return function(*case.fresh_args())
        except Exception as error:  # noqa: BLE001 - a variant may raise: then it raises the same or not
            return error

    def same(a, b):
        if isinstance(a, Exception) or isinstance(b, Exception):
            return type(a) is type(b) and str(a) == str(b)
        return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, b.abs().max().item()))

    problems, ever_wrong = [], set()
    for args, dtype, seed, case in cases_of():
        reference = _randomise(make(*args).to(dtype), seed)
        right = run(reference, case)
        outputs = [(m.id, run(m.wrong, case)) for m in mistakes_of(reference)]
        wrong = [(name, out) for name, out in outputs if not same(out, right)]
        ever_wrong.update(name for name, _ in wrong)
        problems += [f"{case.label}: {a} and {b} agree" for (a, x), (b, y) in itertools.product(wrong, outputs)
                     if a != b and same(x, y)]
    problems += [f"{name} is never wrong" for name, _ in outputs if name not in ever_wrong]
    return sorted(set(problems))


@pytest.mark.parametrize("exercise_id", sorted(MODULE_CHECKS))
@pytest.mark.parametrize("seed", SEEDS)
def test_every_case_of_a_module_check_tells_its_mistakes_apart(exercise_id, seed, monkeypatch):
    monkeypatch.setattr(core, "CASES_SEED", seed)
    assert _module_case_problems(MODULE_CHECKS[exercise_id]) == []


def test_the_module_test_above_fails_on_cases_that_do_not_separate():
    """Known-wrong cases: 07.3 without its padded case (a block that drops the mask is right there), and a mistake
    list where two ids share one variant."""
    make, cases_of, mistakes_of = MODULE_CHECKS["07.3"]
    only_unmasked = (make, lambda: [c for c in cases_of() if c.case.args["mask"] is None], mistakes_of)
    assert "mask-not-passed is never wrong" in _module_case_problems(only_unmasked)

    def with_a_copy(block):
        mistakes = mistakes_of(block)
        return [*mistakes, core.Mistake("copy-of-pre-norm", "a copy", mistakes[0].wrong)]

    problems = _module_case_problems((make, cases_of, with_a_copy))
    assert "no mask: pre-norm and copy-of-pre-norm agree" in problems


def test_the_old_cases_of_05_1_accepted_a_mask_over_the_longest_source(monkeypatch, capsys):
    """05.1's three cases before issue 34 each had a source that fills the memory, where a mask up to lens.max()
    is the right one: the answer passed. The case with every source padded rejects it."""
    answer, _ = TABLES["05.1"][0]["mask over the longest source"]
    old_cases = lesson05._cross_cases()[:3]
    monkeypatch.setattr(lesson05, "_cross_cases", lambda: old_cases)
    check("05.1", answer)
    assert "public checks passed (3 cases)" in capsys.readouterr().out
    monkeypatch.undo()
    with pytest.raises(CheckFailed, match="over the longest source"):
        check("05.1", answer)
