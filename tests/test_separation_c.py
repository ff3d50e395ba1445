"""Lesson 13's checks separate every plausible mistake (issue 34, items 1 and 2), under the public cases and any cases
seed (tests/test_exercise_checks.py rejects each known-wrong answer of tests/answers/lesson13.py, 13.1-13.3, there
with its own mistake's name or none); here, each mistake a check can name is rejected by at least two of its cases
(13.3, which has two cases, by one);
and no two mistakes with different ids give the same results on every case (else a learner who makes the second
would get the first's name). Lesson 13's checks run all their cases through lesson13._verdict, not
core.check_function, so tests/test_exercise_checks.py's generic test of told-apart mistakes does not reach them."""

from __future__ import annotations

import itertools

import pytest

from transformer_course import bpe
from transformer_course.checks import core, lesson13

SEEDS = [None, 1, 2, 3, 4, 5]  # the public cases and five cases seeds


def _separation_problems(outputs: dict[str, list], same, least: int) -> list[str]:
    """What a check's cases fail to do, from each variant's results on every case (``outputs``: "reference" and the
    mistakes' ids, a list of results per id for a mistake with several variants): each mistake's results differ from
    the reference's on at least ``least`` cases, and two mistakes with different ids differ on some case.
    ``same(a, b)`` says whether two results agree."""
    right = outputs.pop("reference")[0]
    variants = [(name, got) for name, results in outputs.items() for got in results]
    problems = [f"{name} is rejected by fewer than {least} cases" for name, got in variants
                if sum(not same(g, r) for g, r in zip(got, right, strict=True)) < least]
    problems += [f"{a} and {b} agree on every case" for (a, x), (b, y) in itertools.combinations(variants, 2)
                 if a != b and all(same(g, h) for g, h in zip(x, y, strict=True))]
    return problems


def _outputs(reference, cases, mistakes) -> dict[str, list]:
    outputs = {"reference": [[reference(*case.fresh_args()) for case in cases]]}
    for mistake in mistakes:
        outputs.setdefault(mistake.id, []).append([mistake.wrong(*case.fresh_args()) for case in cases])
    return outputs


def _bpe_problems() -> list[str]:
    outputs = _outputs(bpe.train_bpe, lesson13._bpe_cases(), lesson13.BPE_MISTAKES)
    return _separation_problems(outputs, lambda a, b: lesson13._same_merges(a, b) is None, least=2)


def _loop_problems() -> list[str]:
    outputs = _outputs(lesson13._LoopRun(lesson13._reference_loop), lesson13._loop_cases(), lesson13.LOOP_MISTAKES)
    return _separation_problems(outputs, lambda a, b: lesson13._same_run(a, b) is None, least=2)


def _gpt_problems() -> list[str]:
    """The mistakes' variants give logits only (they are named by their logits): compared with the reference's."""
    reference = lesson13._GPTRun(greedy=False)
    outputs = _outputs(reference, lesson13._gpt_cases(), lesson13.GPT_MISTAKES)

    def same(a, b):
        return lesson13._same_gpt(a, b[:2]) is None

    return _separation_problems(outputs, same, least=1)


@pytest.mark.parametrize("seed", SEEDS)
def test_bpe_cases_separate_every_mistake(seed, monkeypatch):
    monkeypatch.setattr(core, "CASES_SEED", seed)
    assert _bpe_problems() == []


def test_the_bpe_texts_before_issue_34_did_not_separate_the_mistakes(monkeypatch):
    """The test above fails on known-wrong cases: 13.1's handwritten texts before, where only one case rejected
    "aaa" counted once, and under cases seed 5 only one rejected the words cut at any whitespace."""
    old = [("runs of one letter", "aaa aaa aaaa b aaab aaaaa", 6), *lesson13.BPE_TEXTS[1:5],
           ("more merges than pairs", "to be or not", 50), lesson13.BPE_TEXTS[6]]
    monkeypatch.setattr(lesson13, "BPE_TEXTS", old)
    assert "overlapping-pair-counted-once is rejected by fewer than 2 cases" in _bpe_problems()
    monkeypatch.setattr(core, "CASES_SEED", 5)
    assert "words-cut-wrongly is rejected by fewer than 2 cases" in _bpe_problems()


@pytest.mark.parametrize("seed", [None, 3])
def test_training_loop_cases_separate_every_mistake(seed, monkeypatch):
    monkeypatch.setattr(core, "CASES_SEED", seed)
    assert _loop_problems() == []


@pytest.mark.parametrize("seed", [None, 3])
def test_gpt_cases_separate_every_mistake(seed, monkeypatch):
    monkeypatch.setattr(core, "CASES_SEED", seed)
    assert _gpt_problems() == []


def test_the_separation_test_fails_on_mistakes_that_agree(monkeypatch):
    """The separation tests find what they look for: a second variant of another id that is the same mistake (a
    learner's no-causal-mask as "post-norm"), and a mistake the cases never reject (one that changes nothing)."""
    from transformer_course.checks.core import Mistake

    monkeypatch.setattr(lesson13, "GPT_MISTAKES", [
        *lesson13.GPT_MISTAKES,
        Mistake("post-norm-blocks", "a copy", lesson13._GPTRun(greedy=False, causal=False)),
        Mistake("changes-nothing", "a copy", lesson13._GPTRun(greedy=False))])
    problems = _gpt_problems()
    assert "no-causal-mask and post-norm-blocks agree on every case" in problems
    assert "changes-nothing is rejected by fewer than 1 cases" in problems


def test_a_head_bias_is_told_by_logits_off_by_one_vector_at_every_position():
    """13.3 names "head-has-bias" from behaviour: the learner's logits minus the right ones are one nonzero vector
    (|V|,) at every position. Not for right logits, nor for a difference that changes with the position."""
    import torch

    torch.manual_seed(0)
    expected, bias = torch.randn(2, 5, 7), torch.randn(7) * 0.1
    assert lesson13._off_by_one_vector(expected, expected + bias)
    assert not lesson13._off_by_one_vector(expected, expected.clone())
    varies = expected + bias
    varies[1, 3] += 0.05
    assert not lesson13._off_by_one_vector(expected, varies)
    assert not lesson13._off_by_one_vector(expected, (expected + bias)[:, :4])
