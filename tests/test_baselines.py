"""The counting baselines of lesson 13 against answers worked out by hand on a tiny text."""

import math

import pytest

from transformer_course import baselines

# train "aaab", held out "aab": |V| = 2 (a, b); the scored tokens are held_out[1:] = "ab".
# unigram: c(a) = 3, c(b) = 1, N = 4, so p(a) = (3+1)/(4+2) = 2/3, p(b) = (1+1)/(4+2) = 1/3.
# bigram:  c(aa) = 2, c(ab) = 1, c(a.) = 3, so p(a|a) = (2+1)/(3+2) = 3/5, p(b|a) = (1+1)/(3+2) = 2/5.
BY_HAND = {"uniform": math.log(2),
           "unigram": -(math.log(2 / 3) + math.log(1 / 3)) / 2,
           "bigram": -(math.log(3 / 5) + math.log(2 / 5)) / 2}
# The same with vocab_size=4: p(a) = 4/8, p(b) = 2/8; p(a|a) = 3/7, p(b|a) = 2/7.
BY_HAND_V4 = {"uniform": math.log(4),
              "unigram": -(math.log(4 / 8) + math.log(2 / 8)) / 2,
              "bigram": -(math.log(3 / 7) + math.log(2 / 7)) / 2}


def test_cross_entropies_by_hand():
    got = baselines.baselines("aaab", "aab")
    assert got == pytest.approx(BY_HAND, rel=1e-12)
    assert baselines.baselines("aaab", "aab", vocab_size=4) == pytest.approx(BY_HAND_V4, rel=1e-12)
    # ids work as well as characters
    assert baselines.baselines([0, 0, 0, 1], [0, 0, 1]) == pytest.approx(BY_HAND, rel=1e-12)
    assert baselines.bits(math.log(2)) == pytest.approx(1.0)
    # the hand values are not those of an unsmoothed model (p(a) = 3/4, p(b) = 1/4; p(a|a) = 2/3, p(b|a) = 1/3)
    assert got["unigram"] != pytest.approx(-(math.log(3 / 4) + math.log(1 / 4)) / 2, rel=1e-3)
    assert got["bigram"] != pytest.approx(-(math.log(2 / 3) + math.log(1 / 3)) / 2, rel=1e-3)


def test_a_pair_never_seen_in_training_is_not_impossible():
    # "ba" never occurs in "aaab": add-one gives it (0+1)/(c(b.) + 2) = 1/2 (b has no successor in train)
    assert baselines.bigram_cross_entropy("aaab", "ba") == pytest.approx(math.log(2))
    assert math.isfinite(baselines.unigram_cross_entropy("aaab", "ac"))


def test_more_context_helps_on_structured_text():
    train, held_out = "abcabcabcabcabc" * 20, "abcabcabc"
    got = baselines.baselines(train, held_out)
    assert got["bigram"] < got["unigram"] <= got["uniform"] + 1e-12


def test_bad_arguments():
    with pytest.raises(ValueError, match="held_out must hold at least 2 tokens"):
        baselines.unigram_cross_entropy("ab", "a")
    with pytest.raises(ValueError, match="train must hold at least 2 tokens, got 1"):
        baselines.bigram_cross_entropy("a", "ab")
    with pytest.raises(ValueError, match="vocab_size must be at least the 3 distinct tokens of train and held_out, "
                                         "got 2"):
        baselines.uniform_cross_entropy("ab", "bc", vocab_size=2)
    with pytest.raises(TypeError, match="held_out must be a sequence of tokens"):
        baselines.baselines("ab", iter("ab"))
