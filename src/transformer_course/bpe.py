"""Byte-pair encoding written out in plain Python: the reference for the BPE exercise (13.1).

BPE (Sennrich et al., 2016) builds a vocabulary bottom-up. It starts from the characters; it counts every pair
of adjacent tokens in the corpus and merges the most frequent pair into one new token; then it counts again and
repeats. The list of merges, in the order they were learned, *is* the tokenizer: to encode new text, apply the
merges to it in the same order.

The rules, which give the same merges as Hugging Face ``tokenizers``' ``BpeTrainer`` (tested on the
Shakespeare corpus; :func:`tokenizers_equivalent` builds that configuration):

1. **Words.** :func:`pretokenize` cuts the text into words, and merges never cross a word boundary: a word is
   one space (optional) followed by a run of non-space characters, and every other whitespace character
   (a newline, the first of two spaces) is a word of its own. ``"To be,\\nor"`` -> ``["To", " be,", "\\n",
   "or"]``. The space belongs to the word after it, as in GPT-2, so ``"".join(words)`` is the text again.
2. **Counting.** A pair is counted at every position where it occurs, in every word, times the word's count:
   "aaa" holds the pair ("a", "a") twice (at positions 0 and 1), as ``tokenizers``, Sennrich's ``subword-nmt``
   and Karpathy's ``minbpe`` count it.
3. **Merging** a pair in a word goes left to right and never reuses a token: "aaa" becomes "aa", "a".
4. **Ties.** Among pairs with the same count, the one whose tokens come first in the vocabulary wins: compare
   the left tokens, then the right ones. The vocabulary (:func:`vocabulary`) numbers the characters in Unicode
   code-point order, then each new token in the order it was made.
5. **Counts are updated** after every merge, in the words that held the pair only: what the merge removed
   ("x a" and "b y" around an "a b") is subtracted, the new pairs ("x ab", "ab y") added.
6. It stops after ``num_merges`` merges, or earlier when no pair is left (every word is one token).
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import pairwise

from transformer_course import _validate

WORD = re.compile(r" ?\S+|\s")  # one optional space and a run of non-space characters, or one whitespace char

Pair = tuple[str, str]


def pretokenize(text: str) -> list[str]:
    """The words of ``text`` (rule 1): ``"To be,\\nor"`` -> ``["To", " be,", "\\n", "or"]``; they join back to it."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {_validate.describe(text)}")
    return WORD.findall(text)


def merge_pair(tokens: Sequence[str], pair: Pair) -> list[str]:
    """``tokens`` with every occurrence of ``pair`` replaced by one token, left to right (rule 3):
    ``merge_pair(["a", "a", "a"], ("a", "a"))`` is ``["aa", "a"]``."""
    out, i = [], 0
    while i < len(tokens):
        if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == pair:
            out.append(tokens[i] + tokens[i + 1])
            i += 2
        else:
            out.append(tokens[i])
            i += 1
    return out


def _pairs(tokens: Sequence[str]) -> list[Pair]:
    """Every adjacent pair, one per position: ``["a", "a", "a"]`` -> ``[("a", "a"), ("a", "a")]`` (rule 2)."""
    return list(pairwise(tokens))


def train_bpe(text: str, num_merges: int) -> list[Pair]:
    """The first ``num_merges`` merges BPE learns on ``text``, in order: ``[(" ", "t"), ("h", "e"), ...]``.

    Fewer when the words run out of pairs. A word that occurs many times is split and updated once: ``splits``
    holds each distinct word's current tokens, ``counts`` how often the word occurs.
    """
    num_merges = _validate.integer("num_merges", num_merges, minimum=0)
    counts = Counter(pretokenize(text))  # word -> how many times it occurs
    splits = {word: list(word) for word in counts}  # word -> its tokens so far (characters at the start)
    rank = {token: i for i, token in enumerate(sorted(set(text)))}  # the vocabulary's ids, for ties (rule 4)

    pair_counts: Counter[Pair] = Counter()  # pair -> occurrences in the corpus
    words_with: defaultdict[Pair, set[str]] = defaultdict(set)  # pair -> the words that hold it
    for word, n in counts.items():
        for pair in _pairs(splits[word]):
            pair_counts[pair] += n
            words_with[pair].add(word)

    # The pairs in a priority queue, the most frequent first, ties as rule 4 says. A merge changes the counts of
    # a few pairs only; rather than re-sort, an entry whose count is out of date is fixed when it reaches the top.
    def entry(pair: Pair) -> tuple:
        return -pair_counts[pair], rank[pair[0]], rank[pair[1]], pair

    queue = [entry(pair) for pair in pair_counts]
    heapq.heapify(queue)
    merges: list[Pair] = []
    while len(merges) < num_merges and queue:
        count, _, _, best = heapq.heappop(queue)
        if -count != pair_counts.get(best, 0):  # out of date: put it back with its count, if it still occurs
            if best in pair_counts:
                heapq.heappush(queue, entry(best))
            continue
        merges.append(best)
        rank.setdefault(best[0] + best[1], len(rank))  # two merges can make the same string: one token
        new_pairs = set()
        for word in words_with.pop(best):  # rule 5: only these words change
            n, old = counts[word], splits[word]
            new = merge_pair(old, best)
            if len(new) == len(old):  # an earlier merge already took the pair out of this word
                continue
            for pair in _pairs(old):
                pair_counts[pair] -= n
                if pair_counts[pair] == 0:  # no word holds it any more
                    del pair_counts[pair]
            for pair in _pairs(new):
                pair_counts[pair] += n
                words_with[pair].add(word)
                new_pairs.add(pair)
            splits[word] = new
        for pair in new_pairs & pair_counts.keys():
            heapq.heappush(queue, entry(pair))
    return merges


def vocabulary(alphabet: str, merges: Sequence[Pair]) -> list[str]:
    """The tokens by id: the characters of ``alphabet`` in code-point order, then each merge's new token
    (a string two merges both make is one token). This is how ``tokenizers`` numbers them."""
    tokens = sorted(set(alphabet))
    known = set(tokens)
    for a, b in merges:
        if a + b not in known:
            tokens.append(a + b)
            known.add(a + b)
    return tokens


def tokenize(text: str, merges: Sequence[Pair]) -> list[str]:
    """``text`` cut into tokens: each word's characters, with the merges applied in the order learned."""
    done: dict[str, list[str]] = {}  # a word that recurs is tokenized once
    tokens = []
    for word in pretokenize(text):
        if word not in done:
            pieces = list(word)
            for pair in merges:
                if len(pieces) == 1:
                    break
                pieces = merge_pair(pieces, pair)
            done[word] = pieces
        tokens.extend(done[word])
    return tokens


def encode(text: str, merges: Sequence[Pair], vocab: Sequence[str]) -> list[int]:
    """The ids of ``tokenize(text, merges)`` in ``vocab`` (from :func:`vocabulary`).

    Raises ValueError for a character that is not in the vocabulary."""
    stoi = {token: i for i, token in enumerate(vocab)}
    unknown = sorted(set(text) - set(stoi))
    if unknown:
        raise ValueError(f"text has characters outside the vocabulary: {unknown}")
    return [stoi[token] for token in tokenize(text, merges)]


def decode(ids: Sequence[int], vocab: Sequence[str]) -> str:
    """The text of token ids: their tokens joined (the spaces are inside the tokens)."""
    for i in ids:
        if not 0 <= i < len(vocab):
            raise ValueError(f"ids must lie in [0, {len(vocab)}) for this vocabulary, got {i}")
    return "".join(vocab[i] for i in ids)


def tokenizers_equivalent(text: str, num_merges: int):
    """A Hugging Face ``tokenizers.Tokenizer`` trained with the same rules as :func:`train_bpe`: a BPE model,
    no normalizer, the pre-tokenizer ``Split(WORD, "isolated")``, no special tokens, and a vocabulary of the
    characters of ``text`` plus ``num_merges`` tokens. Its merges and ids are :func:`train_bpe`'s and
    :func:`vocabulary`'s (where two merges make the same string it merges more times; compare the first
    ``num_merges``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    num_merges = _validate.integer("num_merges", num_merges, minimum=0)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(WORD.pattern), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    alphabet = len(set(text))
    trainer = trainers.BpeTrainer(vocab_size=alphabet + num_merges, show_progress=False, min_frequency=0,
                                  limit_alphabet=alphabet)
    tokenizer.train_from_iterator([text], trainer)
    return tokenizer
