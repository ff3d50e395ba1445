"""attention_weights(model): every attention layer's weights by name, for any model, with no hook left behind."""

import pytest
import torch
from torch import nn

from transformer_course.blocks import DecoderBlock, EncoderBlock
from transformer_course.masking import causal_mask, padding_mask
from transformer_course.models import (
    DecoderOnlyConfig,
    DecoderOnlyLM,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerEncoder,
)
from transformer_course.multihead import MultiHeadAttention, attention_weights

D, H = 16, 4


def seq2seq():
    torch.manual_seed(0)
    return Seq2SeqTransformer(Seq2SeqConfig(11, 9, d_model=D, num_heads=H, d_ff=32, max_len=16)).eval()


def lm(**options):
    torch.manual_seed(0)
    return DecoderOnlyLM(DecoderOnlyConfig(13, d_model=D, num_heads=H, d_ff=32, max_len=16, **options)).eval()


def hooks(model):
    return [(name, len(m._forward_hooks) + len(m._forward_pre_hooks)) for name, m in model.named_modules()
            if m._forward_hooks or m._forward_pre_hooks]


def test_seq2seq_layers_by_name_with_their_shapes_and_masks():
    model = seq2seq()
    src = torch.tensor([[3, 4, 5, 6, 7], [3, 4, 0, 0, 0]])  # the second source is padded after 2 tokens
    tgt = torch.randint(1, 9, (2, 4), generator=torch.Generator().manual_seed(1))
    with attention_weights(model) as weights:
        logits = model(src, tgt)
    assert list(weights) == ["encoder.layers.0.attention", "encoder.layers.1.attention",
                             "decoder.layers.0.self_attention", "decoder.layers.0.cross_attention",
                             "decoder.layers.1.self_attention", "decoder.layers.1.cross_attention"]
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, 4, 9)
    assert all(w.shape == (2, H, 5, 5) for w in weights.select("encoder.*"))
    for self_w, cross_w in zip(weights.select("decoder.*.self_attention"), weights.select("*.cross_attention"),
                               strict=True):
        assert self_w.shape == (2, H, 4, 4) and torch.equal(self_w, self_w.tril())  # causal
        assert cross_w.shape == (2, H, 4, 5) and (cross_w[1, :, :, 2:] == 0).all()  # source padding
        torch.testing.assert_close(cross_w.sum(-1), torch.ones(2, H, 4))
    assert not weights["decoder.layers.1.cross_attention"].requires_grad  # detached: for reading


def test_the_weights_are_those_the_layer_computes():
    torch.manual_seed(2)
    block = EncoderBlock(D, H, 32).eval()  # post-norm: the attention reads x itself
    x, mask = torch.randn(2, 6, D), padding_mask(torch.tensor([6, 3]), 6)
    with attention_weights(block) as weights:
        out = block(x, mask)
    assert torch.equal(weights["attention"], block.attention(x, mask=mask)[1])
    torch.testing.assert_close(out, block(x, mask), atol=1e-6, rtol=1e-5)  # explicit path vs fused: same output


@pytest.mark.parametrize("options, shape", [
    ({}, (2, H, 7, 7)),  # learned positions, standard heads
    ({"num_kv_heads": 1}, (2, H, 7, 7)),  # multi-query: one key/value head, still h query heads
    ({"num_kv_heads": 2, "positional": "rotary", "norm": "rms"}, (2, H, 7, 7)),
    ({"positional": "sinusoidal", "norm_first": False}, (2, H, 7, 7)),
])
def test_every_attention_kind_of_the_decoder_only_model(options, shape):
    model = lm(**options)
    tokens = torch.randint(0, 13, (2, 7), generator=torch.Generator().manual_seed(3))
    with attention_weights(model) as weights:
        model(tokens)
    assert list(weights) == ["blocks.0.attention", "blocks.1.attention"]
    for w in weights.values():
        assert w.shape == shape and torch.equal(w, w.tril())


def test_a_layer_called_again_keeps_its_latest_weights():
    model = lm()
    cache = model.new_cache()
    with torch.no_grad(), attention_weights(model) as weights:
        model(torch.tensor([[1, 2, 3]]), cache=cache)
        first = weights["blocks.0.attention"]
        model(torch.tensor([[4]]), cache=cache)  # one cached step: one query over 4 positions
    assert first.shape == (1, H, 3, 3) and weights["blocks.0.attention"].shape == (1, H, 1, 4)
    assert list(weights) == ["blocks.0.attention", "blocks.1.attention"]


def test_blocks_and_bare_attention_are_named_relative_to_what_is_passed():
    torch.manual_seed(4)
    block, mha = DecoderBlock(D, H, 32).eval(), MultiHeadAttention(D, H).eval()
    x, memory = torch.randn(2, 3, D), torch.randn(2, 5, D)
    with attention_weights(block) as weights:
        block(x, memory, causal_mask(3))
    assert list(weights) == ["self_attention", "cross_attention"]
    assert weights["cross_attention"].shape == (2, H, 3, 5)
    with attention_weights(mha) as weights:
        out, returned = mha(x, need_weights=False)  # the layer is asked for its weights anyway
    assert list(weights) == [""] and torch.equal(weights[""], returned)
    stack = TransformerEncoder(2, D, H, 32, norm_first=True).eval()
    with attention_weights(stack) as weights:
        stack(x)
    assert weights.select("layers.*") == [weights["layers.0.attention"], weights["layers.1.attention"]]


def test_hooks_are_removed_after_the_block_even_after_an_error():
    model = seq2seq()
    src, tgt = torch.tensor([[3, 4, 5]]), torch.tensor([[1, 2]])
    with attention_weights(model):
        assert len(hooks(model)) == 6
    assert hooks(model) == []
    with pytest.raises(RuntimeError, match="stop"), attention_weights(model):
        model(src, tgt)
        raise RuntimeError("stop")
    assert hooks(model) == []
    # Outside the block each layer is back on the fused path: asked for no weights, it returns none.
    assert model.encoder.layers[0].attention(torch.randn(1, 3, D), need_weights=False)[1] is None


def test_rejects_what_has_no_attention_and_names_what_was_not_recorded():
    with pytest.raises(ValueError, match=r"model \(Sequential\) has no MultiHeadAttention layer"), \
            attention_weights(nn.Sequential(nn.Linear(4, 4), nn.ReLU())):
        pass
    with pytest.raises(TypeError, match="model must be an nn.Module, got str"), attention_weights("gpt"):
        pass
    model = seq2seq()
    with attention_weights(model) as weights:
        model.encode(torch.tensor([[3, 4]]))  # the decoder never runs
    with pytest.raises(KeyError, match="no attention weights recorded under 'decoder.layers.0.cross_attention'; "
                                       "recorded: 'encoder.layers.0.attention', 'encoder.layers.1.attention'"):
        weights["decoder.layers.0.cross_attention"]
