"""Checks for lesson 11, beyond the original: RMSNorm, rotary embeddings on q and k, grouped-query attention."""

from __future__ import annotations

import math

import torch

from transformer_course.checks.core import Case, Mistake, case_generator, check_function, exercise
from transformer_course.positional import RotaryEmbedding

# --- 11.1 RMSNorm -----------------------------------------------------------------------------------


def _rms_cases() -> list[Case]:
    g = case_generator(16)

    def case(label, shape, eps=1e-6, shift=2.0, dtype=torch.float32):
        return Case(label, {"x": torch.randn(*shape, generator=g, dtype=dtype) + shift,
                            "weight": torch.randn(shape[-1], generator=g, dtype=dtype), "eps": eps})

    return [case("batch of sequences", (2, 3, 6)), case("large eps", (4, 5), eps=0.5),
            case("tiny values (eps matters)", (3, 4), shift=0.0, eps=1e-2),
            case("float64", (2, 5), dtype=torch.float64)]


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@exercise("11.1", title="RMSNorm", points=2)
def check_rms_norm(answer) -> int:
    return check_function(
        answer,
        _rms,
        _rms_cases(),
        [
            Mistake("mean-subtracted",
                    "the mean is subtracted: RMSNorm divides by the root mean square of x itself, with no centring "
                    "(that is LayerNorm).", lambda x, w, eps: _rms(x - x.mean(-1, keepdim=True), w, eps)),
            Mistake("std-not-rms", "the standard deviation is used: divide by sqrt(mean(x^2) + eps), not by x.std().",
                    lambda x, w, eps: x / torch.sqrt(x.var(-1, keepdim=True) + eps) * w),
            Mistake("eps-outside-sqrt", "eps is outside the square root: sqrt(mean(x^2) + eps).",
                    lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w),
            Mistake("weight-missing", "the weight is not applied: multiply by weight at the end.",
                    lambda x, w, eps: _rms(x, torch.ones_like(w), eps)),
            Mistake("wrong-axis", "the mean of x^2 is taken over the wrong axis: use the last axis (the features).",
                    lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + eps) * w),
        ],
        names=("normalised",),
        atol=1e-5,
        rtol=1e-4,
    )


# --- 11.2 rotary embeddings applied to q and k ------------------------------------------------------


def _rope_cases() -> list[Case]:
    g = case_generator(17)

    def case(label, shape, offset=0, dtype=torch.float32):
        return Case(label, {"q": torch.randn(*shape, generator=g, dtype=dtype),
                            "k": torch.randn(*shape, generator=g, dtype=dtype), "offset": offset})

    return [case("batch and heads", (2, 3, 5, 8)), case("one sequence", (6, 4)),
            case("with an offset of 7", (1, 2, 3, 8), offset=7), case("float64", (2, 4, 6), dtype=torch.float64)]


def _rope_pair(q, k, offset, *, sign=1, pairing="interleaved", base=10000.0, positions_from_zero=False):
    """Rotate q and k; the keyword arguments switch in the classic mistakes."""
    d, n = q.shape[-1], q.shape[-2]
    start = 0 if positions_from_zero else offset
    angles = torch.arange(start, start + n, dtype=torch.float64)[:, None] * base ** (
        -torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = angles.cos().to(q.dtype), (sign * angles.sin()).to(q.dtype)

    def rotate(x):
        if pairing == "halves":  # pairs (i, i + d/2) instead of (2i, 2i + 1)
            a, b = x[..., : d // 2], x[..., d // 2 :]
            return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

    return rotate(q), rotate(k)


def _rope(q, k, offset):
    rope = RotaryEmbedding(q.shape[-1], max_len=64)
    return rope(q, offset), rope(k, offset)


@exercise("11.2", title="Rotary embeddings on queries and keys", points=3)
def check_rotary(answer) -> int:
    return check_function(
        answer,
        _rope,
        _rope_cases(),
        [
            Mistake("rotation-reversed", "the rotation goes the wrong way: the pair (a, b) at angle t becomes "
                    "(a cos t - b sin t, a sin t + b cos t).", lambda q, k, o: _rope_pair(q, k, o, sign=-1)),
            Mistake("halves-paired", "features are paired as (i, i + d/2): this course pairs neighbours (2i, 2i+1), as "
                    "sinusoidal_encoding does.", lambda q, k, o: _rope_pair(q, k, o, pairing="halves")),
            Mistake("offset-ignored", "the offset is ignored: the first of these positions is `offset`, not 0.",
                    lambda q, k, o: _rope_pair(q, k, o, positions_from_zero=True)),
            Mistake("keys-not-rotated",
                    "only the queries are rotated: rotate the keys too, so q_m . k_n depends on m - n.",
                    lambda q, k, o: (_rope(q, k, o)[0], k)),
            Mistake("exponent-i-over-d", "the frequencies use base^(-i/d) per feature: pair i turns at base^(-2i/d).",
                    lambda q, k, o: _rope_pair(q, k, o, base=10000.0 ** 0.5)),
        ],
        names=("q_rotated", "k_rotated"),
        atol=1e-5,
        rtol=1e-4,
    )


# --- 11.3 grouped-query attention ------------------------------------------------------------------


def _gqa_cases() -> list[Case]:
    g = case_generator(18)

    def case(label, B, h, h_kv, n_q, n_k, d_h, dtype=torch.float32):
        return Case(label, {"q": torch.randn(B, h, n_q, d_h, generator=g, dtype=dtype),
                            "k": torch.randn(B, h_kv, n_k, d_h, generator=g, dtype=dtype),
                            "v": torch.randn(B, h_kv, n_k, d_h, generator=g, dtype=dtype)})

    return [case("4 query heads, 2 key/value heads", 2, 4, 2, 3, 5, 8),
            case("multi-query: 1 key/value head", 1, 6, 1, 4, 4, 4),
            case("no grouping (h_kv = h)", 2, 2, 2, 3, 3, 4),
            case("8 heads in groups of 4, float64", 1, 8, 2, 2, 6, 4, torch.float64)]


def _gqa(q, k, v, *, interleave=True, scale_by=None, dim=-1):
    group = q.shape[-3] // k.shape[-3]
    expand = (lambda t: t.repeat_interleave(group, dim=-3)) if interleave else (lambda t: t.repeat(1, group, 1, 1))
    k, v = expand(k), expand(v)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(scale_by or q.shape[-1]), dim)
    return weights @ v, weights


@exercise("11.3", title="Grouped-query attention", points=3)
def check_grouped_query_attention(answer) -> int:
    return check_function(
        answer,
        lambda q, k, v: _gqa(q, k, v),
        _gqa_cases(),
        [
            Mistake("kv-heads-tiled",
                    "the key/value heads are tiled (0, 1, 0, 1, ...) instead of grouped (0, 0, 1, 1, ...): query "
                    "head i uses key/value head i // (h / h_kv); use repeat_interleave.",
                    lambda q, k, v: _gqa(q, k, v, interleave=False)),
            Mistake("scaled-by-d-model",
                    "the scores are scaled by sqrt(h * d_head): scale by the width of one head, sqrt(d_head).",
                    lambda q, k, v: _gqa(q, k, v, scale_by=q.shape[-1] * q.shape[-3])),
            Mistake("one-kv-head",
                    "every query head uses key/value head 0: each group of h / h_kv query heads has its own.",
                    lambda q, k, v: _gqa(q, k[:, :1], v[:, :1])),
            Mistake("softmax-wrong-axis",
                    "softmax over the wrong axis: each query's weights over the keys (axis -1) sum to 1.",
                    lambda q, k, v: _gqa(q, k, v, dim=-2)),
        ],
        names=("output", "weights"),
    )
