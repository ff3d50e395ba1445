"""Tests of ``transformer_course.masking``: the masks' values, and what they do inside attention."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_course.attention import scaled_dot_product_attention
from transformer_course.masking import cached_causal_mask, causal_mask, padding_mask, to_additive_mask, to_boolean_mask
from transformer_course.probes import future_influence

TOLERANCE = {torch.float32: {"atol": 1e-6, "rtol": 1e-5}, torch.float64: {"atol": 1e-12, "rtol": 1e-10}}
PROPERTY_SETTINGS = settings(max_examples=25, deadline=None)


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(q_shape, k_shape, v_shape, dtype=torch.float32, seed=0):
    return tuple(randn(*shape, dtype=dtype, seed=seed + i) for i, shape in enumerate((q_shape, k_shape, v_shape)))


def assert_close(actual, expected):
    torch.testing.assert_close(actual, expected, **TOLERANCE[expected.dtype])


def in_order(*fragments: str) -> str:
    return ".*".join(re.escape(fragment) for fragment in fragments)


# --- causal_mask ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_causal_mask_is_lower_triangular(n):
    mask = causal_mask(n)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, torch.tril(torch.ones(n, n, dtype=torch.bool)))


@pytest.mark.parametrize(("n_q", "n_k"), [(3, 5), (5, 3), (1, 4)])
def test_causal_mask_rectangular_without_offset_is_top_left_aligned(n_q, n_k):
    """Offset 0 is the convention of F.scaled_dot_product_attention(is_causal=True) when n_q != n_k."""
    assert torch.equal(causal_mask(n_q, n_k), torch.tril(torch.ones(n_q, n_k, dtype=torch.bool)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(7, 8), (2, 7, 8), (2, 3, 7, 8)], ids=["unbatched", "batched", "multihead"])
def test_causal_mask_in_attention_matches_is_causal(shape, dtype):
    query, key, value = qkv(shape, shape, shape, dtype)
    output, _ = scaled_dot_product_attention(query, key, value, causal_mask(shape[-2]))
    assert_close(output, F.scaled_dot_product_attention(query, key, value, is_causal=True))


@pytest.mark.parametrize(("n_q", "n_k"), [(1, 6), (2, 6), (6, 6)])
def test_causal_mask_with_offset_is_the_last_rows_of_the_full_mask(n_q, n_k):
    mask = causal_mask(n_q, n_k, offset=n_k - n_q)
    assert torch.equal(mask, causal_mask(n_k)[-n_q:])

    # KV-cache decoding: the last n_q queries against all n_k keys give the last rows of full attention.
    query, key, value = qkv((2, n_k, 4), (2, n_k, 4), (2, n_k, 4))
    full, _ = scaled_dot_product_attention(query, key, value, causal_mask(n_k))
    cached, _ = scaled_dot_product_attention(query[:, -n_q:], key, value, mask)
    assert_close(cached, full[:, -n_q:])


@pytest.mark.parametrize(("n", "offset"), [(1, 0), (1, 5), (3, 0), (3, 4)])
def test_cached_causal_mask_is_the_offset_mask_and_says_when_is_causal_may_stand_for_it(n, offset):
    mask, is_causal = cached_causal_mask(n, offset)
    if n == 1:  # one new query may see every key
        assert mask is None and not is_causal
        return
    assert torch.equal(mask, causal_mask(n + offset)[-n:]) and is_causal == (offset == 0)
    query, key, value = qkv((2, n, 4), (2, n + offset, 4), (2, n + offset, 4))
    ours, _ = scaled_dot_product_attention(query, key, value, mask)
    top_left = F.scaled_dot_product_attention(query, key, value, is_causal=True)  # what is_causal=True computes
    assert torch.allclose(ours, top_left, atol=1e-6) == (offset == 0)


def test_causal_mask_respects_device():
    assert causal_mask(3, device="meta").device.type == "meta"


# --- padding_mask --------------------------------------------------------------------------------------

def test_padding_mask_values_and_shape():
    mask = padding_mask(torch.tensor([2, 0, 3]), 3)
    expected = torch.tensor([[[True, True, False]], [[False, False, False]], [[True, True, True]]])
    assert mask.shape == (3, 1, 3)
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("lens", [[4, 1, 3], (4, 1, 3)], ids=["list", "tuple"])
def test_padding_mask_accepts_a_sequence(lens):
    assert torch.equal(padding_mask(lens, 5), padding_mask(torch.tensor(lens), 5))


def test_padding_mask_with_per_step_lengths():
    lens = torch.tensor([[1, 2, 3], [0, 4, 4]])  # (B, T)
    mask = padding_mask(lens, 4)
    assert mask.shape == (2, 3, 1, 4)
    for b in range(2):
        for t in range(3):
            assert torch.equal(mask[b, t, 0], torch.arange(4) < lens[b, t])


def test_padding_mask_of_a_scalar_length():
    assert torch.equal(padding_mask(torch.tensor(2), 3), torch.tensor([[True, True, False]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("multihead", [False, True])
def test_padding_mask_in_attention_matches_torch(multihead, dtype):
    lens = [6, 3, 1]
    shape_q, shape_kv = ((3, 2, 4, 8), (3, 2, 6, 8)) if multihead else ((3, 4, 8), (3, 6, 8))
    query, key, value = qkv(shape_q, shape_kv, shape_kv, dtype)
    mask = padding_mask(lens, 6).unsqueeze(1) if multihead else padding_mask(lens, 6)

    output, weights = scaled_dot_product_attention(query, key, value, mask)

    assert_close(output, F.scaled_dot_product_attention(query, key, value, attn_mask=mask))
    for b, n in enumerate(lens):
        assert (weights[b, ..., n:] == 0).all()


# --- additive and boolean forms ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_to_additive_mask_values(dtype):
    mask = torch.tensor([[True, False], [False, True]])
    additive = to_additive_mask(mask, dtype)
    assert additive.dtype == dtype
    assert torch.equal(additive, torch.tensor([[0.0, float("-inf")], [float("-inf"), 0.0]], dtype=dtype))


def test_to_additive_mask_defaults_to_float32():
    assert to_additive_mask(causal_mask(3)).dtype == torch.float32


@pytest.mark.parametrize("mask", [causal_mask(5), padding_mask([3, 0], 4), causal_mask(2, 4, offset=1)])
def test_boolean_additive_round_trip(mask):
    assert torch.equal(to_boolean_mask(to_additive_mask(mask)), mask)


def test_to_boolean_mask_treats_only_minus_inf_as_masked():
    additive = torch.tensor([0.0, -1e9, float("-inf"), 3.0])
    assert torch.equal(to_boolean_mask(additive), torch.tensor([True, True, False, True]))


@pytest.mark.parametrize(
    "mask", [causal_mask(5), padding_mask([5, 2, 0], 5), torch.zeros(5, 5, dtype=torch.bool)],
    ids=["causal", "padding-with-empty-rows", "all-masked"],
)
def test_attention_with_either_form_is_identical(mask):
    query, key, value = qkv((3, 5, 8), (3, 5, 8), (3, 5, 8))
    with_bool = scaled_dot_product_attention(query, key, value, mask)
    with_additive = scaled_dot_product_attention(query, key, value, to_additive_mask(mask))
    for a, b in zip(with_bool, with_additive, strict=True):
        assert torch.equal(a, b)


def test_multihead_attention_takes_the_inverted_mask():
    """nn.MultiheadAttention's masks say True = NOT allowed: passing ``~mask`` there means the same thing.

    With one head, no bias and identity projections nn.MultiheadAttention is plain attention.
    """
    d, n, lens = 6, 5, [5, 3]
    mha = nn.MultiheadAttention(d, num_heads=1, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.eye(d).repeat(3, 1))
        mha.out_proj.weight.copy_(torch.eye(d))
    query, key, value = qkv((2, n, d), (2, n, d), (2, n, d))
    causal, padding = causal_mask(n), padding_mask(lens, n)  # padding: (2, 1, n)

    expected, expected_weights = mha(
        query, key, value, attn_mask=~causal, key_padding_mask=~padding.squeeze(1), need_weights=True
    )
    output, weights = scaled_dot_product_attention(query, key, value, causal & padding)

    assert_close(output, expected.detach())
    assert_close(weights, expected_weights.detach())


# --- properties ----------------------------------------------------------------------------------------

def perturbed(tensor, where, seed):
    """``tensor`` with fresh random values wherever the boolean ``where`` (broadcast) is True."""
    return torch.where(where, randn(*tensor.shape, seed=seed) * 10, tensor)


@PROPERTY_SETTINGS
@given(
    batch=st.integers(1, 3), n=st.integers(1, 8), d=st.integers(1, 6), data=st.data(),
    additive=st.booleans(), seed=st.integers(0, 2**16),
)
def test_causal_mask_hides_the_future(batch, n, d, data, additive, seed):
    t = data.draw(st.integers(0, n - 1), label="t")
    query, key, value = qkv((batch, n, d), (batch, n, d), (batch, n, d), seed=seed)
    mask = to_additive_mask(causal_mask(n)) if additive else causal_mask(n)
    future = (torch.arange(n) > t).unsqueeze(-1)  # (n, 1): rows after t

    before = scaled_dot_product_attention(query, key, value, mask)
    after = scaled_dot_product_attention(
        *(perturbed(x, future, seed + 10 + i) for i, x in enumerate((query, key, value))), mask
    )

    for a, b in zip(before, after, strict=True):
        assert_close(b[..., : t + 1, :], a[..., : t + 1, :])


@PROPERTY_SETTINGS
@given(
    lens=st.lists(st.integers(0, 6), min_size=1, max_size=3), n_q=st.integers(1, 5), d=st.integers(1, 4),
    additive=st.booleans(), seed=st.integers(0, 2**16),
)
def test_padding_mask_ignores_padded_keys(lens, n_q, d, additive, seed):
    n_k, batch = 6, len(lens)
    query, key, value = qkv((batch, n_q, d), (batch, n_k, d), (batch, n_k, d + 1), seed=seed)
    padded = (torch.arange(n_k) >= torch.tensor(lens).unsqueeze(-1)).unsqueeze(-1)  # (B, n_k, 1) key rows
    mask = to_additive_mask(padding_mask(lens, n_k)) if additive else padding_mask(lens, n_k)

    before = scaled_dot_product_attention(query, key, value, mask)
    after = scaled_dot_product_attention(
        query, perturbed(key, padded, seed + 1), perturbed(value, padded, seed + 2), mask
    )

    for a, b in zip(before, after, strict=True):
        assert_close(b, a)


# --- future_influence ----------------------------------------------------------------------------------

def self_attention(mask_fn):
    """Self-attention of vectors (B, n, d) with fixed projections; mask_fn(n) gives the mask (or None)."""
    w_q, w_k, w_v = (randn(4, 4, seed=50 + i) for i in range(3))

    def attend(x):
        mask = mask_fn(x.shape[-2])
        return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, mask)[0]
    return attend


def test_future_influence_of_causal_attention_is_zero_at_every_t():
    x = randn(2, 7, 4)
    change = future_influence(self_attention(causal_mask), x, generator=torch.Generator().manual_seed(0))
    assert change.shape == (6,)
    assert torch.equal(change, torch.zeros(6))


def test_future_influence_of_unmasked_attention_is_positive_at_every_t():
    x = randn(2, 7, 4)
    change = future_influence(self_attention(lambda n: None), x, generator=torch.Generator().manual_seed(0))
    assert change.shape == (6,)
    assert (change > 1e-3).all()


def test_future_influence_catches_a_leak_at_one_position_only():
    """The test can fail, and where: position 2 reads position 3, so only t = 2 sees the future moved."""
    def leaks_at_2(x):  # a causal running sum, except that position 2 also reads position 3
        out = x.cumsum(dim=1)
        out[:, 2] += x[:, 3]
        return out

    change = future_influence(leaks_at_2, randn(1, 6, 3))
    assert (change[2] > 0).item()
    assert torch.equal(change[[0, 1, 3, 4]], torch.zeros(4))


def test_future_influence_on_token_ids_with_another_seq_dim():
    embedding = randn(10, 4)
    ids = torch.tensor([[1, 5, 9, 0, 2], [3, 3, 3, 3, 3]]).T  # (n, B): positions on dimension 0
    causal = self_attention(causal_mask)

    def model(ids):  # (n, B) ids -> (n, B, d) outputs
        return causal(embedding[ids].transpose(0, 1)).transpose(0, 1)

    assert torch.equal(future_influence(model, ids, seq_dim=0, vocab_size=10), torch.zeros(4))
    unmasked = self_attention(lambda n: None)
    leaky = future_influence(lambda i: unmasked(embedding[i].transpose(0, 1)).transpose(0, 1), ids, seq_dim=0,
                             vocab_size=10)
    assert (leaky > 0).all()


def test_future_influence_replaces_ids_by_other_ids_in_range():
    seen = []

    def record(ids):
        seen.append(ids.clone())
        return ids.float()

    ids = torch.tensor([[1, 2, 3, 0]])
    future_influence(record, ids, vocab_size=4, generator=torch.Generator().manual_seed(0))
    for t, edited in enumerate(seen[1:]):
        assert torch.equal(edited[:, : t + 1], ids[:, : t + 1])
        assert (edited[:, t + 1:] != ids[:, t + 1:]).all()
        assert ((edited >= 1) | (edited == ids)).all() and (edited < 4).all()


def test_future_influence_uses_replace_and_generator():
    x = randn(1, 5, 2)
    identity = future_influence(lambda v: v.cumsum(dim=1), x, replace=lambda future: future + 1)
    assert torch.equal(identity, torch.zeros(4))
    leaky = lambda v: v.flip(1).cumsum(dim=1)  # noqa: E731  every position reads every later one
    first, again = (future_influence(leaky, x, generator=torch.Generator().manual_seed(1)) for _ in range(2))
    assert torch.equal(first, again)


# --- bad input -----------------------------------------------------------------------------------------

BAD_MASKING_INPUTS = {
    "causal-zero": (lambda: causal_mask(0), ValueError, ("n_q", ">= 1", "got 0")),
    "causal-float": (lambda: causal_mask(2.5), TypeError, ("n_q", "integer", "float 2.5")),
    "causal-bool": (lambda: causal_mask(True), TypeError, ("n_q", "integer", "bool True")),
    "causal-n_k-zero": (lambda: causal_mask(3, 0), ValueError, ("n_k", ">= 1", "got 0")),
    "causal-negative-offset": (lambda: causal_mask(3, offset=-1), ValueError, ("offset", ">= 0", "got -1")),
    "padding-float-lens": (lambda: padding_mask(torch.tensor([1.0, 2.0]), 3), TypeError,
                           ("valid_lens", "integers", "torch.float32")),
    "padding-float-list": (lambda: padding_mask([1.5, 2], 3), TypeError, ("valid_lens", "integers", "float32")),
    "padding-bool-lens": (lambda: padding_mask(torch.tensor([True]), 3), TypeError, ("valid_lens", "torch.bool")),
    "padding-lens-too-long": (lambda: padding_mask([1, 4], 3), ValueError,
                              ("valid_lens", "[0, n_k=3]", "from 1 to 4")),
    "padding-lens-negative": (lambda: padding_mask([-1, 2], 3), ValueError,
                              ("valid_lens", "[0, n_k=3]", "from -1 to 2")),
    "padding-lens-not-a-tensor": (lambda: padding_mask("12", 3), TypeError, ("valid_lens", "torch.Tensor", "str")),
    "padding-n_k-zero": (lambda: padding_mask([0], 0), ValueError, ("n_k", ">= 1", "got 0")),
    "additive-of-float-mask": (lambda: to_additive_mask(torch.zeros(2, 2)), TypeError,
                               ("mask", "boolean", "torch.float32")),
    "additive-integer-dtype": (lambda: to_additive_mask(causal_mask(2), torch.int32), TypeError,
                               ("dtype", "floating", "torch.int32")),
    "additive-dtype-not-a-dtype": (lambda: to_additive_mask(causal_mask(2), "float32"), TypeError,
                                   ("dtype", "floating", "'float32'")),
    "boolean-of-bool-mask": (lambda: to_boolean_mask(causal_mask(2)), TypeError,
                             ("mask", "floating", "torch.bool")),
    "boolean-of-non-tensor": (lambda: to_boolean_mask([0.0]), TypeError, ("mask", "torch.Tensor", "list")),
    "future-fn-not-callable": (lambda: future_influence("attention", randn(1, 3, 2)), TypeError,
                               ("fn", "callable", "str 'attention'")),
    "future-seq_dim-too-large": (lambda: future_influence(abs, randn(1, 3, 2), seq_dim=3), ValueError,
                                 ("seq_dim", "[-3, 2]", "(1, 3, 2)", "got 3")),
    "future-seq_dim-float": (lambda: future_influence(abs, randn(1, 3, 2), seq_dim=1.0), TypeError,
                             ("seq_dim", "integer", "float 1.0")),
    "future-one-position": (lambda: future_influence(abs, randn(1, 1, 2)), ValueError,
                            ("x", "at least 2 positions", "seq_dim=1", "(1, 1, 2)")),
    "future-x-not-a-tensor": (lambda: future_influence(abs, [[1.0, 2.0]]), TypeError, ("x", "torch.Tensor", "list")),
    "future-ids-without-vocab": (lambda: future_influence(abs, torch.tensor([[1, 2]])), TypeError,
                                 ("vocab_size", "required", "torch.int64")),
    "future-ids-out-of-range": (lambda: future_influence(abs, torch.tensor([[1, 7]]), vocab_size=5), ValueError,
                                ("x", "[0, vocab_size=5)", "from 1 to 7")),
    "future-vocab-for-floats": (lambda: future_influence(abs, randn(1, 3), vocab_size=5), ValueError,
                                ("vocab_size", "token ids", "torch.float32")),
    "future-replace-not-callable": (lambda: future_influence(abs, randn(1, 3), replace=0.0), TypeError,
                                    ("replace", "callable", "float 0.0")),
    "future-replace-wrong-shape": (lambda: future_influence(abs, randn(1, 3), replace=lambda f: f[:, :1]),
                                   ValueError, ("replace", "(1, 2)", "(1, 1)")),
    "future-output-too-short": (lambda: future_influence(lambda v: v[:, :1], randn(1, 3)), ValueError,
                                ("fn", "n=3", "seq_dim=1", "(1, 1)")),
    "future-bad-generator": (lambda: future_influence(abs, randn(1, 3), generator=0), TypeError,
                             ("generator", "torch.Generator", "int 0")),
}


@pytest.mark.parametrize(
    ("call", "error", "fragments"), list(BAD_MASKING_INPUTS.values()), ids=list(BAD_MASKING_INPUTS)
)
def test_masking_rejects_bad_input(call, error, fragments):
    with pytest.raises(error, match=in_order(*fragments)):
        call()
