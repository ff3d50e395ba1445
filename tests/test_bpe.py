"""The reference BPE (transformer_course.bpe): the same merges and ids as Hugging Face tokenizers on the
Shakespeare corpus and on random texts, the same merges as a from-scratch recount, and different merges from
each classic mistake a learner makes (exercise 13.1 will name them)."""

import json
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_course import bpe, data


def hf_merges(text: str, num_merges: int) -> list[tuple[str, str]]:
    """The first ``num_merges`` merges of tokenizers' BpeTrainer in the reference's configuration."""
    merges = json.loads(bpe.tokenizers_equivalent(text, num_merges).to_str())["model"]["merges"]
    return [tuple(m) for m in merges[:num_merges]]


def merge_right_to_left(tokens, pair):
    """A wrong merge: scans from the right, so "aaa" becomes "a", "aa"."""
    out, i = [], len(tokens) - 1
    while i >= 0:
        if i > 0 and (tokens[i - 1], tokens[i]) == pair:
            out.append(tokens[i - 1] + tokens[i])
            i -= 2
        else:
            out.append(tokens[i])
            i -= 1
    return out[::-1]


def recount_bpe(text, num_merges, *, across_words=False, count="positions", merge=bpe.merge_pair,
                ties="vocabulary", update=True):
    """BPE that counts every pair from scratch before each merge: slow, short, independent of the reference's
    bookkeeping. With its defaults it is the reference; each keyword turns on one classic mistake."""
    words = Counter([text] if across_words else bpe.pretokenize(text))
    splits = {w: list(w) for w in words}
    rank = {c: i for i, c in enumerate(sorted(set(text)))}
    merges, counted = [], None
    while len(merges) < num_merges:
        if update or counted is None:
            counted = Counter()
            for w, n in words.items():
                t = splits[w]
                for p in dict.fromkeys(pairwise(t)):  # in the order they first occur (no set: its order varies)
                    occurrences = sum(q == p for q in pairwise(t))
                    if count == "merges":  # as many as a merge replaces: "aaa" holds one ("a", "a")
                        occurrences = len(t) - len(bpe.merge_pair(t, p))
                    counted[p] += n * occurrences
        occurring = {p for t in splits.values() for p in pairwise(t)}
        pairs = {p: c for p, c in counted.items() if p in occurring}  # stale counts keep merged pairs
        if not pairs:
            break
        if ties == "vocabulary":
            best = min(pairs, key=lambda p: (-pairs[p], rank[p[0]], rank[p[1]]))
        elif ties == "strings":
            best = min(pairs, key=lambda p: (-pairs[p], p))
        else:  # "first seen": max keeps the first of equal counts, in the order the pairs were counted
            best = max(pairs, key=pairs.get)
        merges.append(best)
        rank.setdefault(best[0] + best[1], len(rank))
        splits = {w: merge(t, best) for w, t in splits.items()}
    return merges


@pytest.fixture(scope="module")
def corpus_slice():
    """300 000 characters of the train plays and the merges both implementations learn on them."""
    text = data.shakespeare("train")[1_000_000:1_300_000]
    return text, bpe.train_bpe(text, 200)


def test_same_merges_ids_and_tokens_as_tokenizers_on_shakespeare(corpus_slice):
    text, merges = corpus_slice
    assert len(merges) == 200
    tokenizer = bpe.tokenizers_equivalent(text, 200)
    assert merges == hf_merges(text, 200)
    vocab = bpe.vocabulary(text, merges)
    assert vocab == [tokenizer.id_to_token(i) for i in range(len(vocab))]
    alphabet = set(text)  # a character the slice lacks (a "Z") would be unknown to both: leave it out
    held_out = "".join(c for c in data.shakespeare("valid")[:20_000] if c in alphabet)
    ids = bpe.encode(held_out, merges, vocab)
    assert ids == tokenizer.encode(held_out).ids
    assert bpe.decode(ids, vocab) == held_out
    assert len(ids) < 0.6 * len(held_out)  # 200 merges: 0.56 tokens per character
    assert merges[:3] == [(" ", "t"), ("h", "e"), (" ", "a")]


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="aab \nc", max_size=40), st.integers(0, 12))
def test_same_merges_as_tokenizers_and_a_recount_on_random_texts(text, num_merges):
    merges = bpe.train_bpe(text, num_merges)
    assert merges == hf_merges(text, num_merges)
    assert merges == recount_bpe(text, num_merges)


@given(st.text(alphabet="ab \n\t.", max_size=30))
def test_pretokenize_and_tokenize_give_back_the_text(text):
    assert "".join(bpe.pretokenize(text)) == text
    merges = bpe.train_bpe(text, 5)
    assert "".join(bpe.tokenize(text, merges)) == text


def test_rules_on_small_inputs():
    assert bpe.pretokenize("To be,\nor  not") == ["To", " be,", "\n", "or", " ", " not"]
    assert bpe.merge_pair(["a", "a", "a"], ("a", "a")) == ["aa", "a"]
    assert bpe.merge_pair(["a", "a", "a", "a"], ("a", "a")) == ["aa", "aa"]
    assert bpe.train_bpe("ab ab", 10) == [("a", "b"), (" ", "ab")]  # stops when every word is one token
    assert bpe.train_bpe("abc", 0) == []
    # two merges that make the same string make one token of the vocabulary
    assert bpe.vocabulary("abc", [("a", "b"), ("ab", "c"), ("b", "c"), ("a", "bc")]) == ["a", "b", "c", "ab", "abc",
                                                                                       "bc"]


# Each mistake, the smallest text on which it learns other merges than the reference (found by search), and the
# reference's merges there, which tokenizers confirms.
MISTAKES = {
    "merges across word boundaries": ("b ", 1, dict(across_words=True), []),
    "counts 'aaa' as one ('a', 'a'), where tokenizers counts two": ("aaa ab", 1, dict(count="merges"),
                                                                    [("a", "a")]),
    "merges from the right ('aaa' -> 'a', 'aa')": ("bbb", 2, dict(merge=merge_right_to_left),
                                                   [("b", "b"), ("bb", "b")]),
    "breaks ties by the pair's strings, not the vocabulary's ids": (" bba", 2, dict(ties="strings"),
                                                                    [(" ", "b"), ("b", "a")]),
    "breaks ties by the pair counted first": ("bab", 1, dict(ties="first seen"), [("a", "b")]),
    "never updates the counts after a merge": ("aab", 2, dict(update=False), [("a", "a"), ("aa", "b")]),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_classic_mistake_learns_other_merges(mistake):
    text, num_merges, wrong, expected = MISTAKES[mistake]
    assert bpe.train_bpe(text, num_merges) == expected == hf_merges(text, num_merges)
    assert recount_bpe(text, num_merges) == expected
    assert recount_bpe(text, num_merges, **wrong) != expected


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_merges must be >= 0, got -1"):
        bpe.train_bpe("abc", -1)
    with pytest.raises(TypeError, match="text must be a str, got list"):
        bpe.train_bpe(["abc"], 3)
    vocab = bpe.vocabulary("ab", [])
    with pytest.raises(ValueError, match=r"text has characters outside the vocabulary: \['c'\]"):
        bpe.encode("abc", [], vocab)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 2\) for this vocabulary, got 2"):
        bpe.decode([0, 2], vocab)
