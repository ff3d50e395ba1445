"""Lesson 11's variants: RMSNorm, SwiGLU, grouped-query attention, rotary attention, and their KV caches."""

import dataclasses

import pytest
import torch
from torch import nn

from transformer_course.blocks import PositionWiseFFN, RMSNorm, make_norm
from transformer_course.generation import generate
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM
from transformer_course.multihead import MultiHeadAttention, split_heads


def test_rms_norm_equals_pytorch():
    torch.manual_seed(0)
    ours, theirs = RMSNorm(8, eps=1e-6), nn.RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 5, 8) * 4 + 1
    torch.testing.assert_close(ours(x), theirs(x))
    with pytest.raises(ValueError, match="norm must be 'layer' or 'rms', got 'batch'"):
        make_norm("batch", 8)


def test_swiglu_ffn_gates_and_counts():
    torch.manual_seed(1)
    ffn = PositionWiseFFN(12, 32, activation="swiglu")
    x = torch.randn(2, 3, 12)
    gate, up = ffn.W_1(x).chunk(2, -1)
    torch.testing.assert_close(ffn(x), ffn.W_2(nn.functional.silu(gate) * up))
    assert sum(p.numel() for p in ffn.parameters()) == 12 * 64 + 64 + 32 * 12 + 12


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_grouped_query_attention_shares_key_value_heads(num_kv_heads):
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads).eval()
    x = torch.randn(2, 5, 16)
    out, weights = mha(x)
    q = split_heads(mha.W_q(x), 4)
    k = split_heads(mha.W_k(x), num_kv_heads).repeat_interleave(4 // num_kv_heads, dim=1)
    expected = torch.softmax(q @ k.mT / 2.0, -1)
    torch.testing.assert_close(weights, expected)
    assert mha.W_k.weight.shape == (4 * num_kv_heads, 16) and out.shape == x.shape
    with pytest.raises(ValueError, match="num_heads=4 must be divisible by num_kv_heads=3"):
        MultiHeadAttention(16, 4, num_kv_heads=3)


def test_rotary_attention_depends_on_relative_positions_only():
    torch.manual_seed(3)
    mha = MultiHeadAttention(16, 2, rotary=True, max_len=64).eval()
    x = torch.randn(1, 6, 16)
    _, weights = mha(x)
    # The same six vectors placed 20 positions later (after 20 cached dummy positions) attend alike.
    from transformer_course.multihead import KVCache

    cache = KVCache()
    mha(torch.randn(1, 20, 16), cache=cache)
    _, shifted = mha(x, cache=cache, mask=torch.arange(26) >= 20)  # hide the dummies
    torch.testing.assert_close(shifted[..., 20:], weights, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", [dict(positional="rotary"), dict(num_kv_heads=1), dict(norm="rms"),
                                     dict(activation="swiglu", d_ff=40), dict(positional="sinusoidal")])
def test_variant_models_generate_the_same_with_and_without_cache(variant):
    torch.manual_seed(4)
    config = DecoderOnlyConfig(vocab_size=13, d_model=16, num_heads=4, d_ff=32, num_layers=2, max_len=64)
    model = DecoderOnlyLM(dataclasses.replace(config, **variant)).eval()  # replace checks the changed fields
    prompt = torch.randint(13, (2, 5), generator=torch.Generator().manual_seed(5))
    assert torch.equal(generate(model, prompt, 20), generate(model, prompt, 20, use_cache=False))
    changed = prompt.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 13
    with torch.no_grad():  # causal
        torch.testing.assert_close(model(changed)[:, :-1], model(prompt)[:, :-1])


def test_multi_query_cache_stores_one_head():
    model = DecoderOnlyLM(DecoderOnlyConfig(vocab_size=13, d_model=16, num_heads=4, d_ff=32, max_len=64,
                                            num_kv_heads=1)).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(1, 7, dtype=torch.long), cache=cache)
    keys, _ = cache[0].append(torch.zeros(1, 1, 0, 4), torch.zeros(1, 1, 0, 4))
    assert keys.shape == (1, 1, 7, 4)  # (B, h_kv, n, d_head): a quarter of the standard cache


def test_unknown_positional_kind():
    with pytest.raises(ValueError, match="positional must be one of"):
        DecoderOnlyLM(DecoderOnlyConfig(vocab_size=5, positional="alibi"))
