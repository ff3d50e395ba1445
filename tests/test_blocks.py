"""EncoderBlock equals nn.TransformerEncoderLayer after a weight copy; FFN and Add & Norm; errors."""

import pytest
import torch
from torch import nn

from transformer_course.blocks import (
    AddNorm,
    BlockConfig,
    DecoderBlock,
    DecoderOnlyBlock,
    EncoderBlock,
    PositionWiseFFN,
    RMSNorm,
    make_norm,
)
from transformer_course.masking import padding_mask
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM, TransformerDecoder
from transformer_course.multihead import attention_weights

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
    with attention_weights(block) as weights:
        out = block(x)
    torch.testing.assert_close(out, layer(x), atol=1e-12, rtol=1e-10)
    assert weights["attention"].shape == (H, 5, 5) and weights["attention"].dtype == torch.float64


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


GOOD = dict(d_model=16, num_heads=4, d_ff=64)


@pytest.mark.parametrize("options, error, match", [
    (dict(GOOD, num_heads=3), ValueError, "d_model=16 must be divisible by num_heads=3"),
    (dict(GOOD, d_model=16.0), TypeError, "d_model must be an integer, got float 16.0"),
    (dict(GOOD, d_ff=0), ValueError, "d_ff must be >= 1, got 0"),
    (dict(GOOD, dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got 1.0"),
    (dict(GOOD, dropout="0.1"), TypeError, "dropout must be a real number, got str '0.1'"),
    (dict(GOOD, activation="swish"), ValueError, "activation must be one of"),
    (dict(GOOD, norm="batch"), ValueError, "norm must be 'layer' or 'rms', got 'batch'"),
    (dict(GOOD, eps=0.0), ValueError, "eps must be > 0, got 0.0"),
    (dict(GOOD, num_kv_heads=3), ValueError, "num_heads=4 must be divisible by num_kv_heads=3"),
    (dict(GOOD, norm_first="yes"), TypeError, "norm_first must be True or False, got str 'yes'"),
    (dict(GOOD, rotary=1), TypeError, "rotary must be True or False, got int 1"),
    (dict(GOOD, max_len=0), ValueError, "max_len must be >= 1, got 0"),
])
def test_block_config_names_the_bad_field_for_every_block_and_stack(options, error, match):
    for make in (BlockConfig, EncoderBlock, DecoderBlock, lambda **o: TransformerDecoder(1, **o)):
        with pytest.raises(error, match=match):
            make(**options)


def test_one_set_of_options_for_every_block_and_stack():
    options = dict(dropout=0.1, activation="gelu", norm_first=True, norm="rms", eps=1e-6, num_kv_heads=2,
                   rotary=True, max_len=32)
    encoder, decoder = EncoderBlock(16, 4, 32, **options), DecoderBlock(16, 4, 32, **options)
    stack = TransformerDecoder(2, 16, 4, 32, **options)
    assert encoder.config == decoder.config == stack.config == stack.layers[1].config == BlockConfig(
        d_model=16, num_heads=4, d_ff=32, **options)
    for norm in (encoder.norm2, decoder.norm3, stack.norm):
        assert isinstance(norm, RMSNorm) and norm.eps == 1e-6
    assert decoder.self_attention.num_kv_heads == decoder.cross_attention.num_kv_heads == 2
    assert decoder.self_attention.rotary is not None and decoder.cross_attention.rotary is None  # RoPE: self only
    assert "num_kv_heads=2, rotary=True" in repr(decoder.self_attention)
    assert "num_kv_heads" not in repr(EncoderBlock(16, 4, 32).attention)  # the 2017 module prints as before
    with pytest.raises(TypeError, match="unexpected keyword argument 'nrom'"):
        EncoderBlock(16, 4, 32, nrom="rms")
    with pytest.raises(TypeError, match="positional argument"):
        EncoderBlock(16, 4, 32, 0.1)  # options by keyword only
    assert RMSNorm(16).eps == nn.LayerNorm(16).eps == make_norm("rms", 16).eps == BlockConfig(**GOOD).eps


def test_decoder_only_models_stack_the_decoder_only_block():
    model = DecoderOnlyLM(DecoderOnlyConfig(11, d_model=16, num_heads=4, d_ff=32))
    assert DecoderOnlyBlock is EncoderBlock and all(isinstance(b, DecoderOnlyBlock) for b in model.blocks)
    assert model.blocks[0].config == model.config.block_config() == BlockConfig(d_model=16, num_heads=4, d_ff=32,
                                                                                activation="gelu", norm_first=True,
                                                                                max_len=128)
