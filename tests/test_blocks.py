"""EncoderBlock equals nn.TransformerEncoderLayer after a weight copy; FFN and Add & Norm; errors."""

import pytest
import torch
from torch import nn

from transformer_course.blocks import AddNorm, EncoderBlock, PositionWiseFFN, RMSNorm
from transformer_course.masking import padding_mask

D, H, D_FF = 16, 4, 64


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("with_padding", [False, True])
def test_encoder_block_equals_pytorch(norm_first, activation, with_padding):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first).eval()
    block = EncoderBlock.from_pytorch(layer).eval()
    x = torch.randn(3, 6, D)
    if with_padding:
        mask = padding_mask(torch.tensor([6, 2, 4]), 6)
        expected = layer(x, src_key_padding_mask=~mask.squeeze(1))
        got = block(x, mask)
        valid = mask.squeeze(1)  # PyTorch's fast path may zero padded rows: compare the real positions
        torch.testing.assert_close(got[valid], expected[valid], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(block(x), layer(x), atol=1e-5, rtol=1e-5)


def test_encoder_block_unbatched_weights_and_float64():
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, dtype=torch.float64).eval()
    block = EncoderBlock.from_pytorch(layer).eval()
    x = torch.randn(5, D, dtype=torch.float64)
    out, weights = block(x, return_weights=True)
    torch.testing.assert_close(out, layer(x), atol=1e-12, rtol=1e-10)
    assert weights.shape == (H, 5, 5)


def test_ffn_treats_positions_independently_and_counts_parameters():
    torch.manual_seed(2)
    ffn = PositionWiseFFN(D, D_FF, activation="gelu")
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(ffn(x)[:, 3], ffn(x[:, 3:4])[:, 0])
    assert sum(p.numel() for p in ffn.parameters()) == 2 * D * D_FF + D_FF + D


def test_add_norm():
    add_norm = AddNorm(D)
    x, y = torch.randn(2, 3, D), torch.randn(2, 3, D)
    torch.testing.assert_close(add_norm(x, y), nn.functional.layer_norm(x + y, (D,)))
    with pytest.raises(ValueError, match=r"one shape, got \(2, 3, 16\) and \(2, 3, 8\)"):
        add_norm(x, y[..., :8])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: EncoderBlock(16, 3, 64), ValueError, "d_model=16 must be divisible by num_heads=3"),
        (lambda: PositionWiseFFN(16, 64, activation="swish"), ValueError, "activation must be one of"),
        (lambda: PositionWiseFFN(16, 0), ValueError, "d_ff must be >= 1, got 0"),
        (lambda: EncoderBlock.from_pytorch(nn.Linear(2, 2)), TypeError, "nn.TransformerEncoderLayer, got Linear"),
        (lambda: EncoderBlock(16, 4, 64)(torch.randn(2, 5, 12)), ValueError, r"query must have shape \(B, n, 16\)"),
        (lambda: PositionWiseFFN(16, 64)(torch.randn(2, 5, 12)), ValueError,
         r"x must have shape \(\.\.\., 16\) \(vectors of width d_model=16\), got \(2, 5, 12\)"),
        (lambda: PositionWiseFFN(16, 64)(torch.ones(2, 16, dtype=torch.long)), TypeError, "x must have a floating"),
        (lambda: RMSNorm(16)(torch.randn(2, 8)), ValueError, r"x must have shape \(\.\.\., 16\) .* got \(2, 8\)"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
