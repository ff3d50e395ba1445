"""Checks for lesson 04, multi-head attention: split/merge heads, the forward pass, the parameter count."""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_course.checks.core import Case, Mistake, case_generator, check_function, exercise
from transformer_course.checks.modules import ModuleCase, check_module
from transformer_course.masking import causal_mask, padding_mask
from transformer_course.multihead import MultiHeadAttention, merge_heads, split_heads


def _numbered(*shape, dtype=torch.float32) -> torch.Tensor:
    """Distinct values everywhere, so any misplaced element shows."""
    return torch.arange(math.prod(shape), dtype=dtype).reshape(shape)


@exercise("04.1", title="Split the heads", points=2)
def check_split_heads(answer) -> int:
    cases = [
        Case("batched", {"X": _numbered(2, 3, 8), "num_heads": 4}),
        Case("unbatched", {"X": _numbered(5, 6), "num_heads": 3}),
        Case("two leading dims", {"X": _numbered(2, 2, 4, 6), "num_heads": 2}),
        Case("float64, n = d/h", {"X": torch.randn(3, 4, 8, dtype=torch.float64), "num_heads": 2}),
    ]
    return check_function(
        answer,
        split_heads,
        cases,
        [
            Mistake("split-without-transpose",
                    "the heads are split by a reshape without a transpose: that mixes positions. Reshape to "
                    "(..., n, h, d/h), then swap the n and h axes.",
                    lambda X, h: X.reshape(*X.shape[:-2], h, X.shape[-2], X.shape[-1] // h)),
            Mistake("head-axis-not-moved", "the head axis is not moved before the positions: return (..., h, n, d/h).",
                    lambda X, h: X.reshape(*X.shape[:-1], h, X.shape[-1] // h)),
            Mistake("features-strided",
                    "d is split as (d/h, h), so each head gets every h-th feature: split it as (h, d/h).",
                    lambda X, h: X.reshape(*X.shape[:-1], X.shape[-1] // h, h).transpose(-1, -2).transpose(-3, -2)),
            Mistake("num-heads-as-width", "num_heads is used as the head width: there are h heads of width d/h.",
                    lambda X, h: X.reshape(*X.shape[:-1], X.shape[-1] // h, h).transpose(-3, -2)),
        ],
        names=("heads",),
    )


@exercise("04.2", title="Merge the heads", points=2)
def check_merge_heads(answer) -> int:
    cases = [
        Case("batched", {"X": _numbered(2, 4, 3, 2)}),
        Case("unbatched", {"X": _numbered(3, 5, 2)}),
        Case("two leading dims", {"X": _numbered(2, 2, 2, 4, 3)}),
        Case("float64", {"X": torch.randn(2, 3, 4, 5, dtype=torch.float64)}),
    ]
    return check_function(
        answer,
        merge_heads,
        cases,
        [
            Mistake("merge-without-transpose",
                    "the heads are merged by a reshape without a transpose: that mixes positions. Swap the h "
                    "and n axes first, then reshape to (..., n, h * d_h).",
                    lambda X: X.reshape(*X.shape[:-3], X.shape[-2], X.shape[-3] * X.shape[-1])),
            Mistake("merge-d-h-major",
                    "the merge puts features in the wrong order (d_h-major): after moving n forward, keep the "
                    "axes (h, d_h) in that order before reshaping.",
                    lambda X: X.permute(*range(X.dim() - 3), -2, -1, -3).reshape(*X.shape[:-3], X.shape[-2], -1)),
            Mistake("positions-stacked", "the positions of all heads are stacked: return (..., n, h * d_h).",
                    lambda X: X.reshape(*X.shape[:-3], X.shape[-3] * X.shape[-2], X.shape[-1])),
            Mistake("heads-averaged", "the heads are averaged: concatenate them instead.", lambda X: X.mean(-3)),
        ],
        names=("merged",),
    )


# --- 04.3: the learner's module, with the package's weights --------------------------------------


def _forward_variant(m: MultiHeadAttention, split=None, scale=None, merge=None, w_o=True, head_axis=True):
    """A known-wrong multi-head forward with ``m``'s weights; each argument swaps in one mistake."""
    def forward(query, key, value, mask):
        h = m.num_heads
        split_ = split or (lambda x: split_heads(x, h))
        q, k, v = split_(m.W_q(query)), split_(m.W_k(key)), split_(m.W_v(value))
        scores = q @ k.transpose(-2, -1) * (scale or 1 / math.sqrt(q.shape[-1]))
        if mask is not None:
            scores = scores.masked_fill(~(mask.unsqueeze(1) if head_axis else mask), float("-inf"))
        weights = scores.softmax(-1)
        merged = (merge or merge_heads)(weights @ v)
        return (m.W_o(merged) if w_o else merged), weights
    return forward


def _mha_mistakes(m: MultiHeadAttention) -> list[Mistake]:
    h = m.num_heads
    return [
        Mistake("split-without-transpose",
                "the heads are split by a reshape without a transpose: that mixes positions.",
                _forward_variant(m, split=lambda x: x.reshape(x.shape[0], h, x.shape[1], -1))),
        Mistake("w-o-missing", "the output projection W_o is missing: the merged heads go through W_o.",
                _forward_variant(m, w_o=False)),
        Mistake("scaled-by-d-model",
                "the scores are scaled by sqrt(d_model): scale by sqrt(d_k), the width of one head (d_model / h).",
                _forward_variant(m, scale=1 / math.sqrt(m.d_model))),
        Mistake("mask-without-head-axis",
                "the mask is not broadcast over the heads: give it a head axis, mask.unsqueeze(1), so that "
                "(B, n_q, n_k) becomes (B, 1, n_q, n_k).", _forward_variant(m, head_axis=False)),
        Mistake("merge-without-transpose",
                "the heads are merged by a reshape without a transpose: that mixes positions.",
                _forward_variant(m, merge=lambda x: x.reshape(x.shape[0], x.shape[2], -1))),
    ]


def _mha_cases() -> list[ModuleCase]:
    g = case_generator(6)

    def case(label, d, h, B, n_q, n_k, mask, dtype=torch.float32):
        x = torch.randn(B, n_q, d, generator=g, dtype=dtype)
        memory = torch.randn(B, n_k, d, generator=g, dtype=dtype)
        key, value = (x, x) if n_q == n_k else (memory, memory)
        return ModuleCase((d, h), dtype, d + h, Case(label, {"query": x, "key": key, "value": value, "mask": mask}))

    return [
        # B == h: there a mask without a head axis broadcasts silently (wrongly), and can be named.
        case("cross-attention, padded keys, B = h = 2", 8, 2, 2, 4, 5, padding_mask(torch.tensor([5, 2]), 5)),
        case("self-attention, no mask", 16, 4, 2, 5, 5, None),
        case("self-attention, causal, B = 3", 12, 3, 3, 4, 4, causal_mask(4).expand(3, 4, 4)),
        case("float64 cross-attention", 8, 2, 3, 3, 6, padding_mask(torch.tensor([6, 1, 4]), 6), torch.float64),
    ]


@exercise("04.3", title="Multi-head attention, forward", points=4)
def check_multihead_forward(answer) -> int:
    return check_module(answer, MultiHeadAttention, _mha_cases(), _mha_mistakes,
                        "MultiHeadAttention(d_model, num_heads)", ("output", "weights"))


# --- 04.4 ------------------------------------------------------------------------------------------


@exercise("04.4", title="The parameter count of multi-head attention", points=1)
def check_mha_parameter_count(answer) -> int:
    cases = [
        Case("bias", {"d_model": 512, "num_heads": 8, "bias": True}),
        Case("no bias", {"d_model": 64, "num_heads": 4, "bias": False}),
        Case("one head", {"d_model": 12, "num_heads": 1, "bias": True}),
        Case("many heads", {"d_model": 96, "num_heads": 12, "bias": True}),
    ]
    return check_function(
        answer,
        lambda d, h, bias: sum(p.numel() for p in nn.MultiheadAttention(d, h, bias=bias, device="meta").parameters()),
        cases,
        [
            Mistake("w-o-not-counted", "W_o is not counted: there are four d x d projections, W_q, W_k, W_v and W_o.",
                    lambda d, h, bias: 3 * d * d + (3 * d if bias else 0)),
            Mistake("heads-multiply-count",
                    "the heads do not multiply the count: together the h heads' projections are d x d.",
                    lambda d, h, bias: h * (4 * d * d + (4 * d if bias else 0))),
            Mistake("heads-shrink-count",
                    "splitting into heads does not shrink the projections: each is d x d whatever h is.",
                    lambda d, h, bias: 4 * d * d // h + (4 * d if bias else 0)),
            Mistake("biases-miscounted", "the biases (4 d numbers when bias=True) are not counted right.",
                    lambda d, h, bias: 4 * d * d + (0 if bias else 4 * d)),
            Mistake("biases-miscounted", "the biases (4 d numbers when bias=True) are not counted right.",
                    lambda d, h, bias: 4 * d * d),  # left out: right when bias=False, so a variant of its own
            Mistake("biases-miscounted", "the biases (4 d numbers when bias=True) are not counted right.",
                    lambda d, h, bias: 4 * d * d + 4 * d),  # counted whatever `bias` says: right when bias=True
        ],
        names=("count",),
    )
