"""Positional information: sinusoidal encodings, learned position embeddings and rotary embeddings.

Attention alone is permutation-equivariant; these modules tell it where each token is. Shapes: batch
B, positions n, model width d (``d_model``), and for rotary embeddings the width of one head ``d_head``.
All three take their width first and ``max_len`` (the positions they are built for) by keyword.
The sinusoidal encoding of Vaswani et al. (2017) interleaves sines and cosines:

    PE[pos, 2i] = sin(pos / base^(2i/d)),   PE[pos, 2i+1] = cos(pos / base^(2i/d)).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_course import _validate

MAX_LEN = 4096  # the default number of positions of every module that has a maximum length


def _frequencies(d: int, base: float) -> torch.Tensor:
    """``omega_i = base^(-2i/d)`` for i = 0 .. ceil(d/2) - 1, in float64."""
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


def sinusoidal_encoding(n: int, d: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``(n, d)`` sinusoidal position encoding (computed in float64, returned as ``dtype``)."""
    n = _validate.integer("n", n, minimum=1)
    d = _validate.integer("d", d, minimum=1)
    base = _validate.real("base", base)
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    angles = torch.arange(n, dtype=torch.float64)[:, None] * _frequencies(d, base)  # (n, ceil(d/2))
    pe = torch.empty(n, d, dtype=torch.float64)
    pe[:, 0::2] = angles.sin()
    pe[:, 1::2] = angles[:, : d // 2].cos()
    return pe.to(dtype)


def rotation_matrix(k: int, d: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``(d, d)`` block-diagonal M_k with ``PE[pos + k] = M_k @ PE[pos]`` for every position (d even).

    Each 2 x 2 block rotates the pair (sin, cos) of one frequency omega by the angle k * omega.
    """
    k = _validate.integer("k", k)
    d = _validate.integer("d", d, minimum=2)
    if d % 2:
        raise ValueError(f"d must be even for the (sin, cos) pairs, got {d}")
    angle = k * _frequencies(d, _validate.real("base", base))
    cos, sin = angle.cos(), angle.sin()
    blocks = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype)


def _check_positions(x: torch.Tensor, offset: int, max_len: int, d_model: int) -> int:
    _validate.tensor("x", x, floating=True)
    if x.dim() not in (2, 3) or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape (B, n, {d_model}) or (n, {d_model}), got {tuple(x.shape)}")
    offset = _validate.integer("offset", offset, minimum=0)
    _validate.positions(x.shape[-2], max_len, offset)
    return offset


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding to token embeddings, then applies dropout.

    ``forward(x, offset=0)``: x ``(B, n, d_model)`` or ``(n, d_model)``; the positions are
    ``offset .. offset + n - 1`` (``offset > 0`` when decoding one token at a time with a cache).
    """

    def __init__(self, d_model: int, *, max_len: int = MAX_LEN, dropout: float = 0.0, base: float = 10000.0):
        super().__init__()
        self.d_model, self.max_len = d_model, _validate.integer("max_len", max_len, minimum=1)
        self.dropout = nn.Dropout(dropout)
        # A buffer, not a parameter: it moves with .to(device) and is saved, but is never trained.
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        offset = _check_positions(x, offset, self.max_len, self.d_model)
        return self.dropout(x + self.pe[offset : offset + x.shape[-2]].to(x.dtype))


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trained vector per position (as in BERT and GPT-2); knows nothing past ``max_len``."""

    def __init__(self, d_model: int, *, max_len: int = MAX_LEN, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, _validate.integer("max_len", max_len, minimum=1)
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        offset = _check_positions(x, offset, self.max_len, self.d_model)
        positions = torch.arange(offset, offset + x.shape[-2], device=x.device)
        return self.dropout(x + self.embedding(positions))


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoFormer, Su et al. 2021) for queries and keys of width ``d_head``.

    ``forward(x, offset=0)`` rotates each pair of features (2i, 2i+1) of the vector at position p by
    the angle ``p * base^(-2i/d_head)``. Applied to queries and keys, it makes q_m . k_n depend only on
    the offset m - n. x: ``(..., n, d_head)``; returns the same shape.
    """

    def __init__(self, d_head: int, *, max_len: int = MAX_LEN, base: float = 10000.0):
        super().__init__()
        d_head = _validate.integer("d_head", d_head, minimum=2)
        if d_head % 2:
            raise ValueError(f"d_head must be even (features are rotated in pairs), got {d_head}")
        self.d_head, self.max_len = d_head, _validate.integer("max_len", max_len, minimum=1)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * _frequencies(d_head, base)
        self.register_buffer("cos", angles.cos().float(), persistent=False)  # (max_len, d_head/2)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _validate.tensor("x", x, min_dim=2, floating=True)
        if x.shape[-1] != self.d_head:
            raise ValueError(f"the last dimension of x must be d_head={self.d_head}, got shape {tuple(x.shape)}")
        offset = _validate.integer("offset", offset, minimum=0)
        n = x.shape[-2]
        _validate.positions(n, self.max_len, offset)
        return rotate(x, self.cos[offset : offset + n].to(x.dtype), self.sin[offset : offset + n].to(x.dtype))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """:class:`RotaryEmbedding`'s rotation, without checks: each feature pair (2i, 2i+1) of x ``(..., n, d_head)``
    turned by the angle whose cosine and sine are ``cos[p, i]``, ``sin[p, i]`` ``(n, d_head/2)``."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def embedding_scale(d_model: int) -> float:
    """The factor sqrt(d) by which the 2017 transformer multiplies token embeddings before adding PE."""
    return math.sqrt(_validate.integer("d_model", d_model, minimum=1))
