"""The check machinery itself: type validation, learner errors as feedback, messages, the registry."""

import re

import pytest
import torch

from transformer_course.checks import REGISTRY, CheckFailed, check
from transformer_course.checks.core import Case, Mistake, check_function, compare


class AlwaysEqual:
    """An answer that claims to equal anything: it must never pass."""

    def __eq__(self, other):
        return True

    def __index__(self):
        return 0


class SneakyTensor(torch.Tensor):
    """A tensor subclass whose comparisons always succeed."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.isclose, torch.Tensor.__ne__, torch.Tensor.__eq__, torch.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize(
    "exercise_id, answer",
    [
        ("01.1", lambda *a: AlwaysEqual()),
        ("01.1", lambda t, E, W, b: (E[t] @ W.T).as_subclass(SneakyTensor)),
        ("01.2", lambda t: AlwaysEqual()),
        ("01.2", lambda t: (AlwaysEqual(), AlwaysEqual())),
        ("01.3", lambda v, d, tie: AlwaysEqual()),
        ("01.3", lambda v, d, tie: True),
    ],
)
def test_objects_that_claim_equality_fail(exercise_id, answer):
    with pytest.raises(CheckFailed, match=r"expected (a torch.Tensor|a tuple .*|an integer), got"):
        check(exercise_id, answer)


def test_learner_exception_becomes_feedback_with_its_line():
    def token_logits(tokens, embedding, head_weight, head_bias):
        x = embedding[tokens]
        return x @ head_weight[:2]  # shape error inside the learner's code

    with pytest.raises(CheckFailed) as failure:
        check("01.1", token_logits)
    message = str(failure.value)
    assert "your code raised RuntimeError" in message
    assert "in token_logits: return x @ head_weight[:2]" in message
    assert failure.value.__cause__ is None and failure.value.__suppress_context__


def test_stub_says_not_implemented():
    def next_token_pairs(tokens):
        raise NotImplementedError("01.2: replace this line with your code")

    with pytest.raises(CheckFailed, match=r"next_token_pairs is not implemented yet"):
        check("01.2", next_token_pairs)


@pytest.mark.parametrize("answer", [None, 3, "tokens[..., 1:]"])
def test_non_callable_answer(answer):
    with pytest.raises(CheckFailed, match="expected a function, got"):
        check("01.2", answer)


def test_unknown_exercise_id_lists_known_ones():
    with pytest.raises(CheckFailed, match=r"unknown exercise id '99.9'; known ids: .*01\.1"):
        check("99.9", lambda: None)


def test_answer_that_edits_its_input_in_place_cannot_spoil_the_reference():
    def next_token_pairs(tokens):
        pairs = tokens[..., :-1].clone(), tokens[..., 1:].clone()
        tokens.zero_()
        return pairs

    check("01.2", next_token_pairs)


def test_pass_message_says_public_checks(capsys):
    check("01.2", lambda t: (t[..., :-1], t[..., 1:]))
    assert re.fullmatch(r"\u2714 01\.2 .*: public checks passed \(\d+ cases\)\.\n", capsys.readouterr().out)


def test_failure_message_shows_case_shapes_and_one_wrong_row():
    with pytest.raises(CheckFailed) as failure:
        check("01.1", lambda t, E, W, b: E[t] @ W.T + 2 * b)
    message = str(failure.value)
    assert "[tokens (2, 3), embedding (5, 5), head_weight (5, 5), head_bias (5,)]" in message
    assert "max abs error" in message and "row [0, 0]" in message
    assert "expected [" in message and "got      [" in message
    assert "Likely mistake" not in message  # no known mistake matches: none is invented
    assert failure.value.mistake is None


def test_nan_is_reported_where_it_appears():
    expected = torch.zeros(2, 3)
    got = expected.clone()
    got[1, 2] = float("nan")
    assert compare(expected, got) == "output: got NaN at index (1, 2) where 0 was expected"


def test_first_matching_mistake_is_named_and_cases_stop_at_first_failure():
    cases = [Case("small", {"x": torch.arange(3.0)}), Case("big", {"x": torch.arange(5.0)})]
    mistakes = [Mistake("doubled", lambda x: 2 * x), Mistake("negated", lambda x: -x)]
    named = r"wrong result for small \[x \(3,\)\][\s\S]*Likely mistake: negated"
    with pytest.raises(CheckFailed, match=named) as caught:
        check_function(lambda x: -x, lambda x: x, cases, mistakes)
    assert caught.value.mistake == "negated" and str(caught.value).endswith("\nLikely mistake: negated")
    assert check_function(lambda x: x + 0, lambda x: x, cases, mistakes) == 2


def test_the_recognised_mistake_survives_the_exercise_prefix():
    # What a program (lesson 8's check, the grader) reads instead of searching the message for "Likely mistake".
    with pytest.raises(CheckFailed) as caught:
        check("01.2", lambda t: (t[..., 1:], t[..., :-1]))
    assert caught.value.mistake and caught.value.message.startswith("01.2 ")
    assert str(caught.value) == f"{caught.value.message}\nLikely mistake: {caught.value.mistake}"


def test_registry_entries_are_well_formed():
    assert REGISTRY, "no exercise registered"
    for exercise_id, ex in REGISTRY.items():
        assert re.fullmatch(r"\d{2}\.\d+", exercise_id) and ex.id == exercise_id
        assert isinstance(ex.points, int) and ex.points > 0
        assert ex.title and ex.lesson == exercise_id[:2]
