"""MultiHeadAttention equals nn.MultiheadAttention after a weight copy; split/merge; clear errors."""

import pytest
import torch
from torch import nn

from transformer_course.masking import causal_mask, padding_mask
from transformer_course.multihead import MultiHeadAttention, merge_heads, split_heads

D, H = 12, 3


def pair(bias=True, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(D, H, bias=bias, batch_first=True, dtype=dtype).eval()
    return MultiHeadAttention.from_pytorch(theirs).eval(), theirs


def inputs(B=2, n_q=5, n_k=7, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, n_q, D, generator=g, dtype=dtype), torch.randn(B, n_k, D, generator=g, dtype=dtype)


def assert_same(ours, theirs, atol):
    (out, w), (out_t, w_t) = ours, theirs
    torch.testing.assert_close(out, out_t, atol=atol, rtol=1e-5)
    torch.testing.assert_close(w, w_t, atol=atol, rtol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_self_attention_with_causal_mask_equals_pytorch(bias, dtype, atol):
    ours, theirs = pair(bias, dtype)
    x, _ = inputs(n_q=6, dtype=dtype)
    mask = causal_mask(6)
    assert_same(ours(x, mask=mask), theirs(x, x, x, attn_mask=~mask, average_attn_weights=False), atol)


@pytest.mark.parametrize("bias", [True, False])
def test_cross_attention_with_key_padding_equals_pytorch(bias):
    ours, theirs = pair(bias)
    x, memory = inputs(B=3)
    lens = torch.tensor([7, 2, 5])
    ours_out = ours(x, memory, memory, mask=padding_mask(lens, 7))
    key_padding = ~padding_mask(lens, 7).squeeze(1)  # PyTorch: (B, n_k), True = NOT allowed
    assert_same(ours_out, theirs(x, memory, memory, key_padding_mask=key_padding, average_attn_weights=False), 1e-5)


def test_distinct_key_and_value_and_unbatched():
    ours, theirs = pair()
    x, memory = inputs(B=1)
    value = memory.flip(1)
    assert_same(ours(x[0], memory[0], value[0]), theirs(x[0], memory[0], value[0], average_attn_weights=False), 1e-5)


def test_fused_path_equals_explicit_path_and_returns_no_weights():
    ours, _ = pair()
    x, memory = inputs()
    mask = padding_mask(torch.tensor([3, 7]), 7)
    fused, none = ours(x, memory, mask=mask, need_weights=False)
    explicit, _ = ours(x, memory, mask=mask)
    assert none is None
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_is_causal_hint_gives_the_same_output_and_gradients_as_the_mask(dtype):
    ours, _ = pair(dtype=dtype)
    x, _ = inputs(n_q=9, dtype=dtype)
    runs = {}
    for name, kwargs in {"hint": dict(is_causal=True), "mask only": {}}.items():
        x_ = x.clone().requires_grad_()
        out, weights = ours(x_, mask=causal_mask(9), need_weights=False, **kwargs)
        out.square().sum().backward()
        runs[name] = out, x_.grad
        assert weights is None
    explicit, _ = ours(x, mask=causal_mask(9), is_causal=True)  # with weights: the explicit path, same output
    torch.testing.assert_close(runs["hint"][0], runs["mask only"][0], atol=0, rtol=0)
    torch.testing.assert_close(runs["hint"][1], runs["mask only"][1], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(runs["hint"][0], explicit, atol=1e-6, rtol=1e-5)
    # and it is causal: changing the last position changes no earlier output
    x2 = x.clone()
    x2[:, -1] += 1
    changed, _ = ours(x2, mask=causal_mask(9), need_weights=False, is_causal=True)
    torch.testing.assert_close(changed[:, :-1], runs["hint"][0][:, :-1].detach(), atol=0, rtol=0)


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_give_the_output_bias_not_nan(need_weights):
    ours, _ = pair()
    x, memory = inputs()
    out, _ = ours(x, memory, mask=padding_mask(torch.tensor([0, 4]), 7), need_weights=need_weights)
    assert not out.isnan().any()
    # Zero attention output for the empty sequence, so only W_o's bias remains.
    torch.testing.assert_close(out[0], ours.W_o.bias.expand(5, D))


def test_four_dimensional_mask_per_head():
    ours, theirs = pair()
    x, _ = inputs(B=2, n_q=4)
    mask = torch.rand(2, H, 4, 4, generator=torch.Generator().manual_seed(3)) > 0.3
    mask |= torch.eye(4, dtype=torch.bool)  # no empty rows: PyTorch would give NaN there
    expected = theirs(x, x, x, attn_mask=~mask.reshape(2 * H, 4, 4), average_attn_weights=False)
    assert_same(ours(x, mask=mask), expected, 1e-5)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x, _ = inputs()
    mha.eval()
    torch.testing.assert_close(mha(x)[0], mha(x)[0])
    mha.train()
    assert not torch.allclose(mha(x)[0], mha(x)[0])


@pytest.mark.parametrize("d, h, bias", [(12, 3, True), (64, 8, False), (512, 8, True)])
def test_parameter_count_is_4d2_plus_4d(d, h, bias):
    ours = MultiHeadAttention(d, h, bias=bias)
    theirs = nn.MultiheadAttention(d, h, bias=bias)
    count = sum(p.numel() for p in ours.parameters())
    assert count == 4 * d * d + (4 * d if bias else 0) == sum(p.numel() for p in theirs.parameters())


def test_split_and_merge_heads():
    x = torch.arange(2 * 3 * 8).reshape(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert heads[0, 1, 2].tolist() == x[0, 2, 2:4].tolist()  # head 1 of position 2: features 2 and 3
    assert torch.equal(merge_heads(heads), x)
    assert torch.equal(merge_heads(split_heads(x[0], 2)), x[0])  # unbatched
    y = torch.randn(5, 2, 7, 6)  # two leading dims
    assert split_heads(y, 3).shape == (5, 2, 3, 7, 2) and torch.equal(merge_heads(split_heads(y, 3)), y)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: MultiHeadAttention(10, 3), ValueError, "d_model=10 must be divisible by num_heads=3"),
        (lambda: MultiHeadAttention(12, 0), ValueError, "num_heads must be >= 1, got 0"),
        (lambda: MultiHeadAttention(12.0, 3), TypeError, "d_model must be an integer"),
        (lambda: MultiHeadAttention(12, 3, dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got 1.0"),
        (lambda: split_heads(torch.randn(2, 5, 12), 5), ValueError, r"\(d=12\) must be divisible by num_heads=5"),
        (lambda: merge_heads(torch.randn(5, 12)), ValueError, r"at least 3 dimensions, got shape \(5, 12\)"),
    ],
)
def test_bad_construction(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, x, y: m(x[..., :8]), ValueError, r"query must have shape \(B, n, 12\) or \(n, 12\), got \(2, 5, 8"),
        (lambda m, x, y: m(x, y, y[:, :3]), ValueError, r"key and value must have the same \(B, n_k\)"),
        (lambda m, x, y: m(x, y[:1]), ValueError, "same batch size, got 2 and 1"),
        (lambda m, x, y: m(x, y[0]), ValueError, "must all be batched or all unbatched"),
        (lambda m, x, y: m(x.long()), TypeError, "query must have a floating-point dtype"),
        (lambda m, x, y: m(x, y, mask=torch.ones(2, 5, 6, dtype=torch.bool)), ValueError,
         r"mask of shape \(2, 1, 5, 6\) does not broadcast to .* \(2, 3, 5, 7\)"),
        (lambda m, x, y: m(x, y, mask=torch.ones(5, 7, dtype=torch.int64)), TypeError, "mask must be boolean"),
        (lambda m, x, y: m(x[None]), ValueError, r"got \(1, 2, 5, 12\)"),
        (lambda m, x, y: m(x, is_causal=True), ValueError, r"is_causal=True .* needs that mask .* got mask=None"),
        (lambda m, x, y: m(x, y, mask=causal_mask(5, 7), is_causal=True), ValueError,
         r"as many queries as keys, got mask=\(5, 7\), n_q=5, n_k=7"),
    ],
)
def test_bad_forward_input(call, error, match):
    ours, _ = pair()
    x, y = inputs()
    with pytest.raises(error, match=match):
        call(ours, x, y)


def test_from_pytorch_rejects_other_modules():
    with pytest.raises(TypeError, match="mha must be an nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_pytorch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="kdim = vdim = embed_dim"):
        MultiHeadAttention.from_pytorch(nn.MultiheadAttention(12, 3, kdim=5))
