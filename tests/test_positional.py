"""Positional encodings: the formula, the rotation M_k, the modules, rotary relative positions, errors."""

import math

import pytest
import torch

from transformer_course.positional import (
    MAX_LEN,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    embedding_scale,
    rotation_matrix,
    sinusoidal_encoding,
)


@pytest.mark.parametrize("n, d, base, dtype", [(7, 6, 100.0, torch.float32), (5, 5, 10000.0, torch.float64),
                                                (1000, 16, 10000.0, torch.float32)])
def test_sinusoidal_encoding_matches_the_formula_written_with_loops(n, d, base, dtype):
    def pe(p, i):  # column 2j holds sin(p / base^(2j/d)), column 2j+1 its cosine
        angle = p / base ** ((i - i % 2) / d)
        return math.sin(angle) if i % 2 == 0 else math.cos(angle)

    expected = torch.tensor([[pe(p, i) for i in range(d)] for p in range(n)], dtype=torch.float64)
    got = sinusoidal_encoding(n, d, base, dtype=dtype)
    assert got.shape == (n, d) and got.dtype == dtype
    torch.testing.assert_close(got, expected.to(dtype))


@pytest.mark.parametrize("k", [1, 3, 17, -2])
def test_rotation_matrix_shifts_positions(k):
    d, n = 8, 40
    pe = sinusoidal_encoding(n + 20, d, dtype=torch.float64)
    M = rotation_matrix(k, d, dtype=torch.float64)
    positions = torch.arange(2, n)
    torch.testing.assert_close(pe[positions] @ M.T, pe[positions + k])
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=torch.float64))  # a rotation


@pytest.mark.parametrize("module_factory", [lambda: SinusoidalPositionalEncoding(8, max_len=10),
                                            lambda: LearnedPositionalEmbedding(8, max_len=10)])
def test_position_modules_add_per_position_and_respect_offset(module_factory):
    torch.manual_seed(0)
    module = module_factory().eval()
    x = torch.randn(2, 4, 8)
    full = module(torch.zeros(1, 10, 8))[0]  # the encoding of every position
    torch.testing.assert_close(module(x), x + full[:4])
    torch.testing.assert_close(module(x[0], offset=6), x[0] + full[6:10])  # unbatched, offset


@pytest.mark.parametrize("module", [SinusoidalPositionalEncoding(8, max_len=10),
                                    LearnedPositionalEmbedding(8, max_len=10)])
def test_positions_past_max_len_are_a_clear_error(module):
    with pytest.raises(ValueError, match=r"positions 8..11 exceed max_len=10"):
        module(torch.zeros(1, 4, 8), offset=8)
    with pytest.raises(ValueError, match=r"x must have shape \(B, n, 8\) or \(n, 8\), got \(1, 4, 6\)"):
        module(torch.zeros(1, 4, 6))


def test_rotary_dot_products_depend_only_on_relative_position():
    torch.manual_seed(0)
    rope = RotaryEmbedding(16, max_len=64)
    q, k = torch.randn(16), torch.randn(16)
    def score(m, n):
        qs = rope(q.expand(64, 16))[m]
        ks = rope(k.expand(64, 16))[n]
        return qs @ ks
    torch.testing.assert_close(score(10, 7), score(40, 37), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(score(5, 5), q @ k, atol=1e-4, rtol=1e-4)  # same position: no net rotation
    x = torch.randn(2, 3, 5, 16)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))  # rotations keep lengths
    torch.testing.assert_close(rope(x[..., 2:, :], offset=2), rope(x)[..., 2:, :])


def test_embedding_scale():
    assert embedding_scale(512) == math.sqrt(512)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: sinusoidal_encoding(0, 4), ValueError, "n must be >= 1, got 0"),
        (lambda: sinusoidal_encoding(4, 2.5), TypeError, "d must be an integer"),
        (lambda: sinusoidal_encoding(4, 4, base=1.0), ValueError, "base must be > 1, got 1.0"),
        (lambda: rotation_matrix(1, 5), ValueError, "d must be even"),
        (lambda: RotaryEmbedding(7), ValueError, "d_head must be even"),
        (lambda: RotaryEmbedding(8, max_len=4)(torch.zeros(5, 8)), ValueError, "exceed max_len=4"),
        (lambda: RotaryEmbedding(8)(torch.zeros(5, 6)), ValueError, r"d_head=8, got shape \(5, 6\)"),
        (lambda: SinusoidalPositionalEncoding(8)(torch.zeros(2, 3, 8), offset=-1), ValueError, "offset must be >= 0"),
        (lambda: LearnedPositionalEmbedding(8, max_len=10)(torch.zeros(2, 3, 8, dtype=torch.long)), TypeError,
         "x must have a floating-point dtype"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_positional_modules_take_their_width_first_and_max_len_by_keyword():
    modules = [SinusoidalPositionalEncoding(8), LearnedPositionalEmbedding(8), RotaryEmbedding(8)]
    assert [m.max_len for m in modules] == [MAX_LEN] * 3
    assert LearnedPositionalEmbedding(8, max_len=10).embedding.weight.shape == (10, 8)
    with pytest.raises(TypeError, match="positional argument"):
        LearnedPositionalEmbedding(10, 8)  # the old (max_len, d_model) order fails instead of building a (8, 10) table
