"""Checks for lesson 06, positional encoding: the sinusoidal table and the rotation M_k that shifts it."""

from __future__ import annotations

import torch

from transformer_course.checks.core import Case, Mistake, check_function, exercise
from transformer_course.positional import rotation_matrix, sinusoidal_encoding


def _as_float32(fn):
    """Accept float64 answers (computed in float64 or with Python floats) by comparing them in float32."""
    if getattr(fn, "replays_records", False):  # the grader's re-check: the recorded results were converted already
        return fn

    def wrapped(*args):
        out = fn(*args)
        return out.float() if type(out) is torch.Tensor and out.dtype == torch.float64 else out
    wrapped.__name__ = getattr(fn, "__name__", "your function")
    return wrapped


def _pe_variant(frequency, swap=False, concatenate=False):
    """A known-wrong table: ``frequency(column, d, base)`` gives each column's omega."""
    def wrong(n, d, base):
        columns = torch.arange(d, dtype=torch.float64)
        angles = torch.arange(n, dtype=torch.float64)[:, None] * frequency(columns, d, base)
        sin, cos = angles.sin(), angles.cos()
        if concatenate:
            half = (d + 1) // 2
            return torch.cat([sin[:, 0:d:2][:, :half], cos[:, 0:d:2][:, : d - half]], dim=-1).float()
        even, odd = (cos, sin) if swap else (sin, cos)
        return torch.where(columns.long() % 2 == 0, even, odd).float()
    return wrong


def _pair_frequency(columns, d, base):  # the right omega: one per (sin, cos) pair, base^(-2i/d)
    return base ** (-(columns - columns % 2) / d)


@exercise("06.1", title="The sinusoidal positional encoding", points=2)
def check_sinusoidal_encoding(answer) -> int:
    cases = [
        Case("n=6, d=8", {"n": 6, "d": 8, "base": 10000.0}),
        Case("base 100", {"n": 5, "d": 4, "base": 100.0}),
        Case("long sequence, n=1000", {"n": 1000, "d": 16, "base": 10000.0}),
        Case("one pair", {"n": 3, "d": 2, "base": 10000.0}),
    ]
    return check_function(
        _as_float32(answer),
        sinusoidal_encoding,
        cases,
        [
            Mistake("sin-cos-swapped",
                    "sin and cos are swapped: even columns 2i hold the sine, odd columns 2i+1 the cosine.",
                    _pe_variant(_pair_frequency, swap=True)),
            Mistake("not-interleaved",
                    "sines and cosines are not interleaved: column 2i holds sin, column 2i+1 cos of the same "
                    "frequency (not all sines first, then all cosines).",
                    _pe_variant(_pair_frequency, concatenate=True)),
            Mistake("exponent-uses-column",
                    "the exponent uses the column index j (base^(j/d)); the sin and cos of one pair share "
                    "the frequency base^(2i/d), with i = j // 2.", _pe_variant(lambda c, d, b: b ** (-c / d))),
            Mistake("exponent-i-over-d", "the exponent is i/d instead of 2i/d (i = j // 2 is the pair index).",
                    _pe_variant(lambda c, d, b: b ** (-(c // 2) / d))),
            Mistake("exponent-2j-over-d",
                    "the exponent is 2j/d with the column index j: use 2i/d with the pair index i = j // 2.",
                    _pe_variant(lambda c, d, b: b ** (-2 * c / d))),
            Mistake("base-ignored",
                    "the base is not used as given: divide the position by base^(2i/d) with the `base` argument.",
                    lambda n, d, base: sinusoidal_encoding(n, d, 10000.0)),
            Mistake("positions-from-one",
                    "the positions start at 1: the first row is position 0 (sin 0 = 0, cos 0 = 1).",
                    lambda n, d, base: sinusoidal_encoding(n + 1, d, base)[1:]),
        ],
        names=("encoding",),
        # float32 angles up to 1000 radians carry ~6e-5 of rounding: a table computed another way may
        # differ that much and still be right.
        atol=2e-4,
        rtol=1e-4,
    )


@exercise("06.2", title="The rotation that shifts positions", points=2)
def check_rotation_matrix(answer) -> int:
    cases = [
        Case("k=1, d=4", {"k": 1, "d": 4, "base": 10000.0}),
        Case("k=3, d=8, base 10", {"k": 3, "d": 8, "base": 10.0}),
        Case("k=-2, d=6", {"k": -2, "d": 6, "base": 100.0}),
    ]
    return check_function(
        _as_float32(answer),
        rotation_matrix,
        cases,
        [
            Mistake("rotation-reversed",
                    "the rotation goes the wrong way (it shifts by -k): PE(pos+k) = M_k PE(pos) needs the "
                    "blocks [[cos, sin], [-sin, cos]] of angle k*omega.",
                    lambda k, d, base: rotation_matrix(k, d, base).T.contiguous()),
            Mistake("angle-not-times-k",
                    "the angle is omega, not k * omega: M_k rotates each pair by k times its frequency.",
                    lambda k, d, base: rotation_matrix(1, d, base)),
            Mistake("sin-cos-swapped", "cos and sin are swapped inside the 2 x 2 blocks.",
                    lambda k, d, base: _swap_block_entries(rotation_matrix(k, d, base))),
            Mistake("exponent-i-over-d",
                    "the exponent is i/d instead of 2i/d: pair i turns at the frequency base^(-2i/d).",
                    lambda k, d, base: rotation_matrix(k, 2 * d, base)[: d, : d]),
        ],
        names=("M_k",),
        atol=1e-5,
    )


def _swap_block_entries(M: torch.Tensor) -> torch.Tensor:
    """Exchange cos and sin entries in each 2 x 2 block: [[c, s], [-s, c]] -> [[s, c], [-c, s]]."""
    out = M.clone()
    for i in range(0, M.shape[0], 2):
        c, s = M[i, i], M[i, i + 1]
        out[i : i + 2, i : i + 2] = torch.stack([torch.stack([s, c]), torch.stack([-c, s])])
    return out
