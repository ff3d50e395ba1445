"""What a language model must beat: the cross-entropy of held-out text under counting models.

Each function counts a model on ``train`` and returns the mean negative log-likelihood, in nats per token, of
the tokens of ``held_out`` from the second on (the first has no previous token for the bigram, so the three
baselines average over the same tokens). Tokens are the items of a sequence: the characters of a str, or ids.

- **uniform**: every token of the vocabulary is equally likely, ``p = 1 / |V|``: the cross-entropy is ``ln |V|``.
- **unigram**: ``p(t) = (c(t) + 1) / (N + |V|)``, with ``c(t)`` the count of ``t`` in ``train`` and ``N`` its
  length: token frequencies, add-one (Laplace) smoothed so that a token never seen in training is not
  impossible.
- **bigram**: ``p(t | s) = (c(s t) + 1) / (c(s .) + |V|)``, with ``c(s t)`` the count of ``s`` followed by ``t``
  in ``train`` and ``c(s .)`` the count of ``s`` followed by anything: the previous token as context, add-one
  smoothed.

``|V|`` is ``vocab_size`` when given, else the number of distinct tokens in ``train`` and ``held_out`` together.
Divide by ``ln 2`` (:func:`bits`) for bits per token.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from itertools import pairwise

from transformer_course import _validate


def bits(nats: float) -> float:
    """A cross-entropy in nats as bits: ``nats / ln 2``."""
    return nats / math.log(2)


def _check(train: Sequence[Hashable], held_out: Sequence[Hashable], vocab_size: int | None) -> int:
    for name, tokens in (("train", train), ("held_out", held_out)):
        if not isinstance(tokens, Sequence):
            raise TypeError(f"{name} must be a sequence of tokens (a str or a list of ids), "
                            f"got {_validate.describe(tokens)}")
    if len(train) < 2:
        raise ValueError(f"train must hold at least 2 tokens, got {len(train)}")
    if len(held_out) < 2:
        raise ValueError(f"held_out must hold at least 2 tokens (the first is context only), got {len(held_out)}")
    seen = len(set(train) | set(held_out))
    if vocab_size is None:
        return seen
    vocab_size = _validate.integer("vocab_size", vocab_size, minimum=1)
    if vocab_size < seen:
        raise ValueError(f"vocab_size must be at least the {seen} distinct tokens of train and held_out, "
                         f"got {vocab_size}")
    return vocab_size


def uniform_cross_entropy(train: Sequence[Hashable], held_out: Sequence[Hashable],
                          vocab_size: int | None = None) -> float:
    """``ln |V|`` nats per token: what a model that knows nothing but the vocabulary achieves."""
    return math.log(_check(train, held_out, vocab_size))


def unigram_cross_entropy(train: Sequence[Hashable], held_out: Sequence[Hashable],
                          vocab_size: int | None = None) -> float:
    """Nats per token of ``held_out[1:]`` under add-one smoothed token frequencies of ``train``."""
    v = _check(train, held_out, vocab_size)
    counts, n = Counter(train), len(train)
    return -sum(math.log((counts[t] + 1) / (n + v)) for t in held_out[1:]) / (len(held_out) - 1)


def bigram_cross_entropy(train: Sequence[Hashable], held_out: Sequence[Hashable],
                         vocab_size: int | None = None) -> float:
    """Nats per token of ``held_out[1:]``, each given the token before it, under add-one smoothed pair counts
    of ``train``."""
    v = _check(train, held_out, vocab_size)
    pairs = Counter(pairwise(train))
    followed = Counter(train[:-1])  # c(s .): how often s has a next token
    nll = sum(-math.log((pairs[s, t] + 1) / (followed[s] + v)) for s, t in pairwise(held_out))
    return nll / (len(held_out) - 1)


def baselines(train: Sequence[Hashable], held_out: Sequence[Hashable],
              vocab_size: int | None = None) -> dict[str, float]:
    """``{"uniform": ..., "unigram": ..., "bigram": ...}``: the three cross-entropies, in nats per token."""
    return {"uniform": uniform_cross_entropy(train, held_out, vocab_size),
            "unigram": unigram_cross_entropy(train, held_out, vocab_size),
            "bigram": bigram_cross_entropy(train, held_out, vocab_size)}
