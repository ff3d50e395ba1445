"""Checks for lesson 03, masking: causal and padding masks, attention that survives fully masked rows."""

from __future__ import annotations

import math

import torch

from transformer_course import masking
from transformer_course.attention import scaled_dot_product_attention
from transformer_course.checks.core import Case, Mistake, case_generator, check_function, exercise

NOT_BOOLEAN = "the mask holds 0/1 numbers: return a boolean tensor (dtype torch.bool)."


@exercise("03.1", title="A causal mask", points=1)
def check_causal_mask(answer) -> int:
    tril = lambda n, k=0: torch.ones(n, n).tril(k).bool()  # noqa: E731
    return check_function(
        answer,
        masking.causal_mask,
        [Case(f"n={n}", {"n": n}) for n in (4, 1, 7)],
        [
            Mistake("polarity-inverted",
                    "the polarity is inverted: True must mark what a query MAY attend to (itself and the past).",
                    lambda n: ~tril(n)),
            Mistake("diagonal-excluded",
                    "the diagonal is excluded: each position may attend to itself.", lambda n: tril(n, -1)),
            Mistake("sees-the-future",
                    "the mask lets queries see the future: keep the lower triangle (key j <= query i).",
                    lambda n: tril(n).T.contiguous()),
            Mistake("additive-mask", "the mask is additive (0 / -inf): return a boolean mask, True = may attend.",
                    lambda n: masking.to_additive_mask(tril(n))),
            Mistake("not-boolean", NOT_BOOLEAN, lambda n: tril(n).long()),
            Mistake("not-boolean", NOT_BOOLEAN, lambda n: tril(n).float()),
            Mistake("sees-next-position",
                    "each query also sees the next position: keep key j <= query i (tril with diagonal=0, not 1).",
                    lambda n: tril(n, 1)),
        ],
        names=("mask",),
    )


def _padding_cases() -> list[Case]:
    return [
        Case("batch of 4", {"valid_lens": torch.tensor([2, 5, 0, 3]), "n_k": 5}),
        Case("one full sequence", {"valid_lens": torch.tensor([1]), "n_k": 1}),
        Case("more keys than any length", {"valid_lens": torch.tensor([4, 1]), "n_k": 6}),
    ]


@exercise("03.2", title="A padding mask from valid lengths", points=2)
def check_padding_mask(answer) -> int:
    keys = lambda lens, n_k: torch.arange(n_k) < lens[:, None]  # noqa: E731  (B, n_k)
    return check_function(
        answer,
        masking.padding_mask,
        _padding_cases(),
        [
            Mistake("query-axis-missing",
                    "the query axis is missing: return shape (B, 1, n_k) so the mask broadcasts over queries.",
                    keys),
            Mistake("polarity-inverted",
                    "the polarity is inverted: True must mark the real tokens, which may be attended to.",
                    lambda lens, n_k: ~keys(lens, n_k)[:, None, :]),
            Mistake("off-by-one",
                    "off by one: a sequence of length L has real tokens at positions 0 .. L-1 (use <, not <=).",
                    lambda lens, n_k: (torch.arange(n_k) <= lens[:, None])[:, None, :]),
            Mistake("axes-swapped", "the axes are swapped: return (B, 1, n_k), with the keys on the last axis.",
                    lambda lens, n_k: keys(lens, n_k)[:, :, None]),
            Mistake("not-boolean", NOT_BOOLEAN, lambda lens, n_k: keys(lens, n_k)[:, None, :].long()),
            Mistake("not-boolean", NOT_BOOLEAN, lambda lens, n_k: keys(lens, n_k)[:, None, :].float()),
        ],
        names=("mask",),
    )


def _masked_attention_cases() -> list[Case]:
    g = case_generator(5)

    def case(label, batch, n_q, n_k, d_k, d_v, mask, dtype=torch.float32):
        return Case(label, {
            "Q": torch.randn(*batch, n_q, d_k, generator=g, dtype=dtype),
            "K": torch.randn(*batch, n_k, d_k, generator=g, dtype=dtype),
            "V": torch.randn(*batch, n_k, d_v, generator=g, dtype=dtype),
            "mask": mask,
        })

    lens = torch.tensor([3, 0, 5])  # the middle sequence is all padding: its rows are fully masked
    return [
        case("causal", (), 5, 5, 4, 3, masking.causal_mask(5)),
        case("padding with an empty sequence", (3,), 4, 5, 6, 2, masking.padding_mask(lens, 5)),
        case("batch and heads, causal and padding", (3, 2), 5, 5, 4, 4,
             masking.causal_mask(5) & masking.padding_mask(lens, 5).unsqueeze(1)),
        case("n_q != n_k, first query sees nothing", (2,), 3, 6, 8, 5,
             torch.tensor([[False] * 6, [True, True] + [False] * 4, [True] * 6])),
        case("float64", (3,), 4, 5, 4, 2, masking.padding_mask(lens, 5), dtype=torch.float64),
    ]


def _masked_with(fill=None, after_softmax=False, invert=False):
    """Known-wrong masked attention: fill blocked scores with ``fill``, or zero weights after softmax."""
    def wrong(Q, K, V, mask):
        mask = ~mask if invert else mask
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if after_softmax:
            weights = torch.softmax(scores, -1) * mask
        else:
            weights = torch.softmax(scores.masked_fill(~mask, fill), -1)
        return weights @ V, weights
    return wrong


@exercise("03.3", title="Masked attention without NaN", points=3)
def check_masked_attention(answer) -> int:
    return check_function(
        answer,
        scaled_dot_product_attention,
        _masked_attention_cases(),
        [
            Mistake("nan-on-fully-masked-row",
                    "a fully masked row gives NaN (softmax of all -inf is 0/0): give such rows zero weights "
                    "and a zero output.", _masked_with(float("-inf"))),
            Mistake("masked-with-zero",
                    "blocked scores are set to 0 instead of -inf: a score of 0 still gets weight, so masked "
                    "tokens leak in.", _masked_with(0.0)),
            Mistake("large-negative-not-inf",
                    "a large negative number instead of -inf gives a fully masked row uniform weights: those "
                    "rows must be zero.", _masked_with(-1e9)),
            Mistake("polarity-inverted",
                    "the mask polarity is inverted: True = may attend.", _masked_with(float("-inf"), invert=True)),
            Mistake("masked-after-softmax",
                    "the mask is applied after the softmax: blocked weights are zeroed but the rest no longer "
                    "sum to 1. Mask the scores before the softmax.", _masked_with(after_softmax=True)),
        ],
        names=("output", "weights"),
    )
