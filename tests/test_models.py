"""Decoder block and stacks equal PyTorch's; the models are causal, ignore source padding, count parameters."""

import dataclasses

import pytest
import torch
from torch import nn

from transformer_course.blocks import BlockConfig, DecoderBlock
from transformer_course.masking import causal_mask, padding_mask
from transformer_course.models import (
    DEFAULTS,
    DecoderOnlyConfig,
    DecoderOnlyLM,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerDecoder,
    TransformerEncoder,
)
from transformer_course.multihead import attention_weights

D, H, D_FF = 16, 4, 32
ATOL = dict(atol=1e-5, rtol=1e-5)


def decoder_inputs(B=3, n_dec=5, n_enc=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([6, 3, 1][:B])
    return torch.randn(B, n_dec, D, generator=g), torch.randn(B, n_enc, D, generator=g), lens


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_pytorch(norm_first):
    torch.manual_seed(0)
    layer = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    block = DecoderBlock.from_pytorch(layer).eval()
    x, memory, lens = decoder_inputs()
    self_mask, memory_mask = causal_mask(5), padding_mask(lens, 6)
    expected = layer(x, memory, tgt_mask=~self_mask, memory_key_padding_mask=~memory_mask.squeeze(1))
    with attention_weights(block) as weights:
        out = block(x, memory, self_mask, memory_mask)
    self_w, cross_w = weights["self_attention"], weights["cross_attention"]
    torch.testing.assert_close(out, expected, **ATOL)
    assert self_w.shape == (3, H, 5, 5) and cross_w.shape == (3, H, 5, 6)
    assert torch.equal(self_w, self_w.tril()) and (cross_w[1, :, :, 3:] == 0).all()


def test_causal_hint_changes_no_number_of_the_blocks_or_the_models():
    torch.manual_seed(0)
    block = DecoderBlock(D, H, D_FF).eval()
    x, memory, lens = decoder_inputs()
    args = (x, memory, causal_mask(5), padding_mask(lens, 6))
    torch.testing.assert_close(block(*args, self_is_causal=True), block(*args), atol=0, rtol=0)
    lm = DecoderOnlyLM(DecoderOnlyConfig(11, d_model=D, num_heads=H, d_ff=D_FF, num_layers=2, max_len=12)).eval()
    tokens = torch.randint(0, 11, (3, 8))
    with_hint = lm(tokens)  # the model passes the hint itself; with weights it takes the explicit path
    with attention_weights(lm):
        explicit = lm(tokens)
    torch.testing.assert_close(with_hint, explicit, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_equal_pytorch(norm_first):
    torch.manual_seed(1)
    enc_layer = nn.TransformerEncoderLayer(D, H, D_FF, 0.0, batch_first=True, norm_first=norm_first)
    dec_layer = nn.TransformerDecoderLayer(D, H, D_FF, 0.0, batch_first=True, norm_first=norm_first)
    final = (lambda: nn.LayerNorm(D)) if norm_first else (lambda: None)
    theirs_enc = nn.TransformerEncoder(enc_layer, 3, norm=final(), enable_nested_tensor=False).eval()
    theirs_dec = nn.TransformerDecoder(dec_layer, 2, norm=final()).eval()
    ours_enc, ours_dec = TransformerEncoder.from_pytorch(theirs_enc).eval(), TransformerDecoder.from_pytorch(theirs_dec)
    x, src, lens = decoder_inputs()
    src_mask = padding_mask(lens, 6)
    memory = ours_enc(src, src_mask)
    torch.testing.assert_close(memory, theirs_enc(src, src_key_padding_mask=~src_mask.squeeze(1)), **ATOL)
    expected = theirs_dec(x, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~src_mask.squeeze(1))
    torch.testing.assert_close(ours_dec.eval()(x, memory, causal_mask(5), src_mask), expected, **ATOL)


def small_seq2seq(**overrides):
    torch.manual_seed(2)
    config = Seq2SeqConfig(src_vocab_size=11, tgt_vocab_size=9, d_model=D, num_heads=H, d_ff=D_FF, max_len=12,
                           **overrides)
    return Seq2SeqTransformer(config).eval()


def small_lm(**overrides):
    torch.manual_seed(3)
    config = DecoderOnlyConfig(vocab_size=13, d_model=D, num_heads=H, d_ff=4 * D, num_layers=2, max_len=10,
                               **overrides)
    return DecoderOnlyLM(config).eval()


def test_decoder_only_lm_is_causal():
    model = small_lm()
    tokens = torch.randint(13, (2, 8), generator=torch.Generator().manual_seed(4))
    logits = model(tokens)
    for t in range(7):
        changed = tokens.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % 13
        torch.testing.assert_close(model(changed)[:, : t + 1], logits[:, : t + 1])
        assert not torch.allclose(model(changed)[:, t + 1 :], logits[:, t + 1 :])


def test_seq2seq_decoder_is_causal_and_ignores_source_padding():
    model = small_seq2seq()
    g = torch.Generator().manual_seed(5)
    src = torch.randint(1, 11, (2, 7), generator=g)
    src[1, 4:] = 0  # padding
    tgt = torch.randint(1, 9, (2, 6), generator=g)
    with attention_weights(model) as weights:
        logits = model(src, tgt)
    assert logits.shape == (2, 6, 9)
    assert len(weights.select("encoder.*")) == 2 and weights["decoder.layers.0.cross_attention"].shape == (2, H, 6, 7)
    assert (weights["decoder.layers.1.cross_attention"][1, :, :, 4:] == 0).all()
    changed = tgt.clone()
    changed[:, 3:] = (changed[:, 3:] % 8) + 1
    torch.testing.assert_close(model(src, changed)[:, :3], logits[:, :3])
    padded_more = torch.cat([src, torch.zeros(2, 3, dtype=src.dtype)], dim=1)
    padded_more[0, 7:] = 0
    # More padding on the source changes nothing for the sentence with real tokens only where it had them.
    torch.testing.assert_close(model(padded_more, tgt)[1], logits[1], **ATOL)


def test_parameter_counts():
    lm, untied = small_lm(), small_lm(tie_weights=False)
    assert lm.num_parameters() == sum(p.numel() for p in lm.parameters())
    assert untied.num_parameters() - lm.num_parameters() == 13 * D  # tying stores |V| d once
    parts = lm.parameter_breakdown()
    assert parts["head"] == 0 and parts["embeddings"] == 13 * D + 10 * D
    per_block = 12 * D * D + 13 * D  # attention 4d^2+4d, FFN 8d^2+5d, two norms 4d
    assert parts["attention"] + parts["ffn"] + parts["norms"] - 2 * D == 2 * per_block  # minus the final norm
    model = small_seq2seq()
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, lm: lm(torch.tensor([[1, 13]])), ValueError, r"ids from 1 to 13, outside the vocabulary \[0, 13\)"),
        (lambda m, lm: lm(torch.zeros(1, 11, dtype=torch.long)), ValueError,
         r"positions 0..10 exceed max_len=10: tokens \(n=11"),
        (lambda m, lm: lm(torch.zeros(1, 3)), TypeError, "tokens must hold integer token ids, got dtype torch.float32"),
        (lambda m, lm: lm(torch.zeros(3, dtype=torch.long)), ValueError, r"must have shape \(B, n\), got \(3,\)"),
        (lambda m, lm: m(torch.ones(2, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long)), ValueError,
         "same batch size, got 3 and 2"),
        (lambda m, lm: m(torch.full((1, 4), -1), torch.ones(1, 4, dtype=torch.long)), ValueError, "src holds ids"),
        (lambda m, lm: TransformerEncoder(0, D, H, D_FF), ValueError, "num_layers must be >= 1, got 0"),
        (lambda m, lm: DecoderBlock.from_pytorch(nn.Linear(2, 2)), TypeError, "nn.TransformerDecoderLayer"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(small_seq2seq(), small_lm())


@pytest.mark.parametrize("make, error, match", [
    (lambda: Seq2SeqConfig(0, 5), ValueError, "src_vocab_size must be >= 1, got 0"),
    (lambda: Seq2SeqConfig(5, 5, d_model=10, num_heads=4), ValueError, "d_model=10 must be divisible by num_heads=4"),
    (lambda: Seq2SeqConfig(5, 5, num_encoder_layers=0), ValueError, "num_encoder_layers must be >= 1, got 0"),
    (lambda: Seq2SeqConfig(5, 5, activation="swish"), ValueError, "activation must be one of"),
    (lambda: DecoderOnlyConfig(5.0), TypeError, "vocab_size must be an integer, got float 5.0"),
    (lambda: DecoderOnlyConfig(5, dropout=-0.1), ValueError, r"dropout must be in \[0, 1\), got -0.1"),
    (lambda: DecoderOnlyConfig(5, positional="alibi"), ValueError, "positional must be one of"),
    (lambda: DecoderOnlyConfig(5, num_kv_heads=3), ValueError, "num_heads=4 must be divisible by num_kv_heads=3"),
    (lambda: DecoderOnlyConfig(5, norm="batch"), ValueError, "norm must be 'layer' or 'rms', got 'batch'"),
    (lambda: DecoderOnlyConfig(5, max_len=0), ValueError, "max_len must be >= 1, got 0"),
])
def test_model_configs_name_the_bad_field(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_model_configs_give_their_blocks_one_set_of_options():
    lm = DecoderOnlyConfig(5, d_model=16, num_heads=4, d_ff=32, max_len=12, norm="rms", num_kv_heads=2,
                           positional="rotary")
    assert lm.block_config() == BlockConfig(d_model=16, num_heads=4, d_ff=32, activation="gelu", norm_first=True,
                                            max_len=12, norm="rms", num_kv_heads=2, rotary=True)
    assert lm.block_options() == dict(d_model=16, num_heads=4, d_ff=32, dropout=0.0, activation="gelu",
                                      norm_first=True, norm="rms", eps=1e-5, num_kv_heads=2, rotary=True, max_len=12)
    # One set of defaults: the models' sizes, then the 2017 block's options, except GPT's GELU and pre-norm.
    assert Seq2SeqConfig(5, 5).block_config() == DEFAULTS == BlockConfig(d_model=128, num_heads=4, d_ff=512,
                                                                         max_len=128)
    assert DecoderOnlyConfig(5).block_config() == dataclasses.replace(DEFAULTS, activation="gelu", norm_first=True)
    model = Seq2SeqTransformer(Seq2SeqConfig(5, 6, d_model=16, num_heads=4, d_ff=32, max_len=12, norm_first=True))
    assert model.encoder.config == model.decoder.config == model.decoder.layers[0].config
    assert model.encoder.config.norm_first and model.encoder.config.max_len == 12


def test_model_configs_are_frozen_and_replace_checks_the_new_fields():
    config = DecoderOnlyConfig(5, d_model=16, num_heads=4, d_ff=32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_kv_heads = 3  # would skip the check that 3 divides num_heads
    with pytest.raises(ValueError, match="num_heads=4 must be divisible by num_kv_heads=3"):
        dataclasses.replace(config, num_kv_heads=3)
    assert dataclasses.replace(config, num_kv_heads=2).block_config().num_kv_heads == 2
    with pytest.raises(TypeError, match="positional"):
        BlockConfig(16, 4, 32)  # keyword-only
    translator = Seq2SeqConfig(7, 9, d_model=16, num_heads=4, d_ff=32)
    assert dataclasses.replace(translator, pad_id=-1).pad_id == -1 and translator.pad_id == 0
    # The constructors keep their order: the vocabulary sizes first, then the widths, by position too.
    assert DecoderOnlyConfig(5, 16, 2, 32, 3, 20) == DecoderOnlyConfig(vocab_size=5, d_model=16, num_heads=2, d_ff=32,
                                                                         num_layers=3, max_len=20)
    assert repr(translator).startswith("Seq2SeqConfig(src_vocab_size=7, tgt_vocab_size=9, d_model=16, num_heads=4,")
