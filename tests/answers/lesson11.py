"""Answers to lesson 11's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import math

import torch
import torch.nn.functional as F

# --- 11.1 rms_norm(x, weight, eps) -----------------------------------------------------------------


def rms(x, w, eps=1e-6, centre=False, dim=-1):
    x_ = x - x.mean(-1, keepdim=True) if centre else x
    return x_ / torch.sqrt(x_.pow(2).mean(dim, keepdim=True) + eps) * w


WRONG_RMS = {
    "centred": (lambda x, w, eps=1e-6: rms(x, w, eps, centre=True), "mean is subtracted"),
    "std": (lambda x, w, eps=1e-6: x / torch.sqrt(x.var(-1, keepdim=True) + eps) * w, "standard deviation"),
    "eps outside": (lambda x, w, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w, "outside"),
    "no weight": (lambda x, w, eps=1e-6: rms(x, 1.0, eps), "weight is not applied"),
    "wrong axis": (lambda x, w, eps=1e-6: rms(x, w, eps, dim=0), "wrong axis"),
    "sum of squares, not mean": (lambda x, w, eps=1e-6: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
                                 "wrong result for"),
    "mean of |x|": (lambda x, w, eps=1e-6: x / (x.abs().mean(-1, keepdim=True) + eps) * w, "wrong result for"),
}
RIGHT_RMS = {
    "norm-based": lambda x, w, eps=1e-6: x / torch.sqrt(x.norm(dim=-1, keepdim=True) ** 2 / x.shape[-1] + eps) * w,
    "F.rms_norm": lambda x, w, eps=1e-6: F.rms_norm(x, (x.shape[-1],), w, eps),
}

# --- 11.2 apply_rotary(q, k, offset) -----------------------------------------------------------------


def rotate_pairs(x, offset, sign=1.0, halves=False, start_at_zero=False, base=10000.0):
    d, n = x.shape[-1], x.shape[-2]
    first = 0 if start_at_zero else offset
    pos = torch.arange(first, first + n, dtype=torch.float64)[:, None]
    angle = pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    c, s = angle.cos().to(x.dtype), (sign * angle.sin()).to(x.dtype)
    if halves:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * c - b * s, a * s + b * c], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)


def rotary_complex(q, k, offset):
    """Each pair (a, b) as the complex number a + ib, multiplied by e^{i t}."""
    d, n = q.shape[-1], q.shape[-2]
    angle = torch.arange(offset, offset + n, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones_like(angle), angle)

    def rotate(x):
        z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(z * turn).flatten(-2).to(x.dtype)

    return rotate(q), rotate(k)


def rotary_matrices(q, k, offset):
    from transformer_course.positional import rotation_matrix

    def rotate(x):
        rows = [x[..., t, :] @ rotation_matrix(offset + t, x.shape[-1], dtype=torch.float64).to(x.dtype)
                for t in range(x.shape[-2])]
        return torch.stack(rows, dim=-2)

    return rotate(q), rotate(k)


WRONG_ROPE = {
    "wrong direction": (lambda q, k, o: (rotate_pairs(q, o, -1.0), rotate_pairs(k, o, -1.0)), "wrong way"),
    "halves": (lambda q, k, o: (rotate_pairs(q, o, halves=True), rotate_pairs(k, o, halves=True)), "(i, i + d/2)"),
    "offset ignored": (lambda q, k, o: (rotate_pairs(q, o, start_at_zero=True), rotate_pairs(k, o, start_at_zero=True)),
                       "offset is ignored"),
    "keys not rotated": (lambda q, k, o: (rotate_pairs(q, o), k), "only the queries"),
    "positions from 1": (lambda q, k, o: (rotate_pairs(q, o + 1), rotate_pairs(k, o + 1)), "wrong result for"),
    "i/d frequencies": (lambda q, k, o: (rotate_pairs(q, o, base=100.0), rotate_pairs(k, o, base=100.0)),
                        "base^(-2i/d)"),
}
RIGHT_ROPE = {"complex numbers": rotary_complex, "rotation matrices": rotary_matrices}

# --- 11.3 grouped_query_attention(q, k, v) -----------------------------------------------------------


def gqa(q, k, v, tile=False, shared=False, dim=-1):
    group = q.shape[1] // k.shape[1]
    if shared:
        k, v, group = k[:, :1], v[:, :1], q.shape[1]
    expand = (lambda t: t.repeat(1, group, 1, 1)) if tile else (lambda t: t.repeat_interleave(group, 1))
    w = torch.softmax(q @ expand(k).mT / math.sqrt(q.shape[-1]), dim)
    return w @ expand(v), w


def gqa_by_reshaping(q, k, v):
    """Group the query heads instead of copying the key/value heads."""
    B, h, n_q, d = q.shape
    h_kv = k.shape[1]
    qg = q.reshape(B, h_kv, h // h_kv, n_q, d)
    w = torch.softmax(qg @ k[:, :, None].mT / math.sqrt(d), -1)
    return (w @ v[:, :, None]).reshape(B, h, n_q, -1), w.reshape(B, h, n_q, -1)


WRONG_GQA = {
    "tiled": (lambda q, k, v: gqa(q, k, v, tile=True), "tiled"),
    "one head for all": (lambda q, k, v: gqa(q, k, v, shared=True), "key/value head 0"),
    "wrong softmax axis": (lambda q, k, v: gqa(q, k, v, dim=-2), "wrong axis"),
    "scaled by all heads": (lambda q, k, v: (lambda w: (w @ v.repeat_interleave(q.shape[1] // k.shape[1], 1), w))(
        torch.softmax(q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).mT / math.sqrt(q.shape[-1] * q.shape[1]),
                      -1)), "sqrt(h * d_head)"),
    "not scaled": (lambda q, k, v: (lambda w: (w @ v.repeat_interleave(q.shape[1] // k.shape[1], 1), w))(
        torch.softmax(q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).mT, -1)), "wrong result for"),
}
RIGHT_GQA = {
    "group the queries": gqa_by_reshaping,
    "F.sdpa enable_gqa + explicit weights": lambda q, k, v: (
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True), gqa(q, k, v)[1]),
}

EXERCISES = {"11.1": (WRONG_RMS, RIGHT_RMS), "11.2": (WRONG_ROPE, RIGHT_ROPE), "11.3": (WRONG_GQA, RIGHT_GQA)}
