"""Tests of ``transformer_course.attention`` against PyTorch's own scaled dot-product attention."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from transformer_course import causal_mask, padding_mask, to_additive_mask
from transformer_course.attention import masked_softmax, scaled_dot_product_attention

TOLERANCE = {torch.float32: {"atol": 1e-6, "rtol": 1e-5}, torch.float64: {"atol": 1e-12, "rtol": 1e-10}}
NEG_INF = float("-inf")


def randn(*shape, dtype=torch.float32, seed=0, requires_grad=False):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_(requires_grad)


def qkv(q_shape, k_shape, v_shape, dtype=torch.float32, requires_grad=False):
    return tuple(
        randn(*shape, dtype=dtype, seed=seed, requires_grad=requires_grad)
        for seed, shape in enumerate((q_shape, k_shape, v_shape))
    )


def random_bool_mask(*shape, seed=0):
    """Random True/False, with key 0 always allowed so that no row is fully masked."""
    mask = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.5
    mask[..., 0] = True
    return mask


def reference_weights(query, key, mask=None, scale=None):
    """softmax(Q K^T / sqrt(d_k) + mask), written out; NaN on fully masked rows, so keep those out."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, dim=-1)


def assert_close(actual, expected):
    torch.testing.assert_close(actual, expected, **TOLERANCE[expected.dtype])


def in_order(*fragments: str) -> str:
    """A ``match`` pattern: the literal fragments, in this order, anywhere in the message."""
    return ".*".join(re.escape(fragment) for fragment in fragments)


def case(name, q_shape, k_shape=None, v_shape=None, mask=None, dtype=torch.float32, scale=None):
    """One agreement case; key and value default to the query's shape, ``mask`` is built lazily."""
    k_shape = k_shape or q_shape
    return pytest.param(q_shape, k_shape, v_shape or k_shape, mask, dtype, scale, id=name)


AGREEMENT_CASES = [
    case("batched", (2, 5, 8)),
    case("unbatched", (5, 8)),
    case("4d-multihead", (2, 3, 5, 8)),
    case("5d", (2, 2, 3, 4, 6)),
    case("broadcast-batch", (2, 1, 5, 8), (1, 3, 5, 8)),
    case("causal-bool", (2, 5, 8), mask=lambda: causal_mask(5)),
    case("causal-4d", (2, 3, 6, 4), mask=lambda: causal_mask(6)),
    case("padding-bool", (3, 4, 8), (3, 6, 8), mask=lambda: padding_mask([6, 2, 1], 6)),
    case("padding-multihead", (3, 2, 4, 8), (3, 2, 6, 8), mask=lambda: padding_mask([6, 2, 1], 6).unsqueeze(1)),
    case("random-bool", (2, 3, 5, 8), (2, 3, 7, 8), mask=lambda: random_bool_mask(2, 1, 5, 7)),
    case("additive-inf", (2, 5, 8), mask=lambda: to_additive_mask(causal_mask(5))),
    case("additive-finite", (2, 5, 8), mask=lambda: randn(2, 5, 5, seed=9)),
    case("n_q-neq-n_k", (2, 3, 8), (2, 7, 8)),
    case("d_v-neq-d_k", (2, 5, 8), (2, 7, 8), (2, 7, 3), mask=lambda: random_bool_mask(5, 7)),
    case("float64", (2, 5, 8), (2, 6, 8), (2, 6, 4), mask=lambda: random_bool_mask(2, 5, 6), dtype=torch.float64),
    case("float64-additive", (2, 5, 8), mask=lambda: to_additive_mask(causal_mask(5), torch.float64),
         dtype=torch.float64),
    case("custom-scale", (2, 5, 8), scale=0.3),
    case("custom-scale-masked", (2, 5, 8), (2, 5, 8), (2, 5, 3), mask=lambda: causal_mask(5), dtype=torch.float64,
         scale=2.0),
]


@pytest.mark.parametrize(("q_shape", "k_shape", "v_shape", "make_mask", "dtype", "scale"), AGREEMENT_CASES)
def test_matches_torch_sdpa(q_shape, k_shape, v_shape, make_mask, dtype, scale):
    query, key, value = qkv(q_shape, k_shape, v_shape, dtype)
    mask = None if make_mask is None else make_mask()

    output, weights = scaled_dot_product_attention(query, key, value, mask, scale=scale)

    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)
    assert output.shape == expected.shape
    assert output.dtype == weights.dtype == dtype
    assert_close(output, expected)
    assert_close(weights, reference_weights(query, key, mask, scale).expand_as(weights))
    assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=dtype))


def test_value_with_more_batch_dims_than_query_and_key_takes_a_mask():
    """The mask broadcasts against the batch dims of query, key *and* value, as the docstring says."""
    query, key, value = qkv((5, 8), (5, 8), (2, 5, 4))
    mask = random_bool_mask(2, 5, 5)

    output, weights = scaled_dot_product_attention(query, key, value, mask)

    assert weights.shape == (2, 5, 5)
    for b in range(2):
        expected = F.scaled_dot_product_attention(query, key, value[b], attn_mask=mask[b])
        assert_close(output[b], expected)


@pytest.mark.parametrize(
    ("dtype", "mask_dtype"), [(torch.float64, torch.float32), (torch.float32, torch.float64)], ids=str
)
def test_additive_mask_of_another_float_dtype_is_cast_to_the_scores_dtype(dtype, mask_dtype):
    query, key, value = qkv((2, 5, 8), (2, 5, 8), (2, 5, 8), dtype=dtype)
    mask = causal_mask(5)

    output, weights = scaled_dot_product_attention(query, key, value, to_additive_mask(mask, mask_dtype))

    assert output.dtype == weights.dtype == dtype
    assert_close(output, F.scaled_dot_product_attention(query, key, value, attn_mask=mask))


# --- fully masked query rows ---------------------------------------------------------------------------

def mask_with_empty_rows(form):
    """(2, 4, 5) mask in which query rows 1 and 3 of batch 0 and row 0 of batch 1 allow no key at all."""
    mask = random_bool_mask(2, 4, 5, seed=3)
    mask[0, 1] = mask[0, 3] = mask[1, 0] = False
    return mask, (mask if form == "bool" else to_additive_mask(mask))


@pytest.mark.parametrize("form", ["bool", "additive"])
def test_fully_masked_rows_give_zero_weights_and_output(form):
    bool_mask, mask = mask_with_empty_rows(form)
    empty = ~bool_mask.any(-1)  # (2, 4)
    query, key, value = qkv((2, 4, 8), (2, 5, 8), (2, 5, 3))

    output, weights = scaled_dot_product_attention(query, key, value, mask)

    assert not output.isnan().any() and not weights.isnan().any()
    assert (weights[empty] == 0).all() and (output[empty] == 0).all()
    assert_close(weights[~empty].sum(-1), torch.ones(int((~empty).sum())))
    assert (weights[~bool_mask] == 0).all()
    # The other rows are untouched: compare them with PyTorch row by row.
    for b, i in (~empty).nonzero().tolist():
        expected = F.scaled_dot_product_attention(
            query[b, i : i + 1], key[b], value[b], attn_mask=bool_mask[b, i : i + 1]
        )
        assert_close(output[b, i : i + 1], expected)


@pytest.mark.parametrize("form", ["bool", "additive"])
def test_fully_masked_rows_give_zero_gradients(form):
    bool_mask, mask = mask_with_empty_rows(form)
    empty = ~bool_mask.any(-1)
    upstream = randn(2, 4, 3, seed=7)
    query, key, value = qkv((2, 4, 8), (2, 5, 8), (2, 5, 3), requires_grad=True)

    output, _ = scaled_dot_product_attention(query, key, value, mask)
    (output * upstream).sum().backward()

    # Reference: PyTorch on the rows that allow something, with the same upstream gradient there.
    ref_q, ref_k, ref_v = (t.detach().clone().requires_grad_() for t in (query, key, value))
    for b in range(2):
        rows = ~empty[b]
        expected = F.scaled_dot_product_attention(ref_q[b, rows], ref_k[b], ref_v[b], attn_mask=bool_mask[b, rows])
        (expected * upstream[b, rows]).sum().backward()

    for tensor in (query, key, value):
        assert tensor.grad.isfinite().all()
    assert (query.grad[empty] == 0).all()
    assert_close(query.grad, ref_q.grad)
    assert_close(key.grad, ref_k.grad)
    assert_close(value.grad, ref_v.grad)


def test_all_rows_masked_gives_zeros_everywhere_including_gradients():
    query, key, value = qkv((2, 3, 4), (2, 5, 4), (2, 5, 4), requires_grad=True)
    mask = torch.zeros(3, 5, dtype=torch.bool)

    output, weights = scaled_dot_product_attention(query, key, value, mask)
    (output.sum() + weights.sum()).backward()

    assert (output == 0).all() and (weights == 0).all()
    for tensor in (query, key, value):
        assert (tensor.grad == 0).all()


# --- dropout ---------------------------------------------------------------------------------------------

def test_dropout_zeroes_and_rescales_weights_but_returns_them_undropped():
    """With value = identity the output *is* the dropped weight matrix, which we can inspect entry by entry."""
    torch.manual_seed(0)
    p = 0.5
    query, key, _ = qkv((4, 16, 8), (4, 16, 8), (4, 16, 16))
    value = torch.eye(16).expand(4, 16, 16)

    output, weights = scaled_dot_product_attention(query, key, value, dropout_p=p)

    _, undropped = scaled_dot_product_attention(query, key, value)
    torch.testing.assert_close(weights, undropped)
    kept = output != 0
    assert 0.3 < kept.float().mean() < 0.7
    torch.testing.assert_close(output[kept], weights[kept] / (1 - p))


# --- masked_softmax ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("shape", "dim"), [((7,), -1), ((3, 7), -1), ((3, 7), 0), ((2, 3, 4, 5), 1)])
def test_masked_softmax_without_mask_is_softmax(shape, dim):
    scores = randn(*shape)
    torch.testing.assert_close(masked_softmax(scores, dim=dim), torch.softmax(scores, dim=dim), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_mask", [False, True])
def test_masked_softmax_is_stable_on_large_scores(dtype, with_mask):
    scores = torch.tensor([[1e4, 1e4 - 1.0, -1e4, 5e3]], dtype=dtype)
    assert torch.exp(scores).isinf().any()  # the naive formula would give inf / inf = NaN
    mask = torch.tensor([[True, True, True, False]]) if with_mask else None
    e = math.exp(-1.0)

    weights = masked_softmax(scores, mask)

    assert_close(weights, torch.tensor([[1 / (1 + e), e / (1 + e), 0.0, 0.0]], dtype=dtype))


def test_masked_softmax_bool_and_additive_masks_agree_exactly():
    scores = randn(2, 3, 4, 6)
    mask = random_bool_mask(2, 1, 4, 6)
    mask[0, 0, 2] = False  # one fully masked row as well

    weights = masked_softmax(scores, mask)

    assert torch.equal(weights, masked_softmax(scores, to_additive_mask(mask)))
    assert (weights[~mask.expand_as(weights)] == 0).all()


def test_masked_softmax_finite_additive_mask_shifts_the_scores():
    scores, mask = randn(3, 5), randn(3, 5, seed=1)
    torch.testing.assert_close(masked_softmax(scores, mask), torch.softmax(scores + mask, dim=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_softmax_fully_masked_rows_are_zero(dtype):
    scores = randn(4, 5, dtype=dtype)
    mask = torch.tensor([[True] * 5, [False] * 5, [True, False, False, False, False], [False] * 5])

    weights = masked_softmax(scores, mask)

    assert (weights[[1, 3]] == 0).all()
    assert_close(weights[[0, 2]].sum(-1), torch.ones(2, dtype=dtype))
    assert_close(weights[2], torch.tensor([1.0, 0, 0, 0, 0], dtype=dtype))


@pytest.mark.parametrize("dim", [0, 1, -2])
def test_masked_softmax_dim_argument(dim):
    scores = randn(3, 4, 5)
    mask = random_bool_mask(3, 4, 5)
    mask[:, 1, :] = False  # fully masked along dim=-1, but not along the other dims

    weights = masked_softmax(scores, mask, dim=dim)

    expected = masked_softmax(scores.movedim(dim, -1), mask.movedim(dim, -1)).movedim(-1, dim)
    torch.testing.assert_close(weights, expected)
    empty = ~mask.any(dim, keepdim=True)
    torch.testing.assert_close(weights.sum(dim, keepdim=True), (~empty).float())


def test_masked_softmax_with_a_mask_on_an_empty_axis():
    weights = masked_softmax(torch.zeros(3, 0), torch.ones(3, 0, dtype=torch.bool))
    assert weights.shape == (3, 0)


# --- bad input -----------------------------------------------------------------------------------------

def bad_call(**changes):
    """Attention on valid (2, 5, 8) inputs, with some arguments replaced."""
    query, key, value = qkv((2, 5, 8), (2, 5, 8), (2, 5, 8))
    kwargs = {"query": query, "key": key, "value": value} | changes
    return lambda: scaled_dot_product_attention(**kwargs)


BAD_ATTENTION_INPUTS = {
    "query-not-a-tensor": (bad_call(query=[[1.0, 2.0]]), TypeError, ("query", "torch.Tensor", "got list")),
    "query-1d": (bad_call(query=torch.ones(8)), ValueError, ("query", "at least 2 dimensions", "(8,)")),
    "value-0d": (bad_call(value=torch.tensor(1.0)), ValueError, ("value", "at least 2 dimensions", "()")),
    "key-integer-dtype": (
        bad_call(key=torch.ones(2, 5, 8, dtype=torch.int64)), TypeError, ("key", "floating", "torch.int64"),
    ),
    "query-complex-dtype": (
        bad_call(query=torch.ones(2, 5, 8, dtype=torch.complex64)), TypeError, ("query", "torch.complex64"),
    ),
    "dtype-mismatch": (
        bad_call(value=torch.ones(2, 5, 8, dtype=torch.float64)), TypeError,
        ("query, key and value", "dtype", "torch.float32, torch.float32 and torch.float64"),
    ),
    "d_k-mismatch": (
        bad_call(key=torch.ones(2, 5, 6)), ValueError,
        ("query", "key", "d_k", "query (2, 5, 8) (d_k=8)", "key (2, 5, 6) (d_k=6)"),
    ),
    "n_k-mismatch": (
        bad_call(value=torch.ones(2, 4, 8)), ValueError,
        ("key and value", "n_k", "key (2, 5, 8) (n_k=5)", "value (2, 4, 8) (n_k=4)"),
    ),
    "batch-not-broadcastable": (
        bad_call(key=torch.ones(3, 5, 8), value=torch.ones(3, 5, 8)), ValueError,
        ("batch", "query (2, 5, 8)", "key (3, 5, 8)", "do not broadcast"),
    ),
    "empty-key": (
        bad_call(key=torch.ones(2, 0, 8), value=torch.ones(2, 0, 8)), ValueError, ("key", "n_k >= 1", "(2, 0, 8)"),
    ),
    "mask-not-a-tensor": (bad_call(mask=[[True]]), TypeError, ("mask", "torch.Tensor", "got list")),
    "mask-integer-dtype": (
        bad_call(mask=torch.ones(5, 5, dtype=torch.int64)), TypeError, ("mask", "boolean", "torch.int64"),
    ),
    "mask-not-broadcastable": (
        bad_call(mask=torch.ones(4, 4, dtype=torch.bool)), ValueError,
        ("mask of shape (4, 4)", "does not broadcast", "(2, 5, 5)"),
    ),
    "mask-enlarges-output": (
        bad_call(mask=torch.ones(3, 2, 5, 5, dtype=torch.bool)), ValueError,
        ("mask of shape (3, 2, 5, 5)", "does not broadcast", "(2, 5, 5)"),
    ),
    "dropout_p-one": (bad_call(dropout_p=1.0), ValueError, ("dropout_p", "[0, 1)", "got 1.0")),
    "dropout_p-negative": (bad_call(dropout_p=-0.1), ValueError, ("dropout_p", "[0, 1)", "got -0.1")),
    "dropout_p-nan": (bad_call(dropout_p=float("nan")), ValueError, ("dropout_p", "got nan")),
    "dropout_p-string": (bad_call(dropout_p="0.1"), TypeError, ("dropout_p", "real number", "str '0.1'")),
    "scale-zero": (bad_call(scale=0.0), ValueError, ("scale", "positive", "got 0.0")),
    "scale-negative": (bad_call(scale=-2), ValueError, ("scale", "positive", "got -2")),
    "scale-infinite": (bad_call(scale=float("inf")), ValueError, ("scale", "finite", "got inf")),
    "scale-tensor": (bad_call(scale=torch.tensor(0.5)), TypeError, ("scale", "real number", "a tensor of shape ()")),
}


@pytest.mark.parametrize(
    ("call", "error", "fragments"), list(BAD_ATTENTION_INPUTS.values()), ids=list(BAD_ATTENTION_INPUTS)
)
def test_attention_rejects_bad_input(call, error, fragments):
    with pytest.raises(error, match=in_order(*fragments)):
        call()


BAD_SOFTMAX_INPUTS = {
    "scores-not-a-tensor": (lambda: masked_softmax([1.0, 2.0]), TypeError, ("scores", "torch.Tensor", "list")),
    "scores-integer": (lambda: masked_softmax(torch.ones(3, dtype=torch.int32)), TypeError,
                       ("scores", "floating", "torch.int32")),
    "scores-0d": (lambda: masked_softmax(torch.tensor(1.0)), ValueError, ("scores", "at least 1", "()")),
    "mask-wrong-shape": (lambda: masked_softmax(torch.ones(3, 4), torch.ones(3, 5, dtype=torch.bool)),
                         ValueError, ("mask of shape (3, 5)", "(3, 4)")),
    "mask-integer": (lambda: masked_softmax(torch.ones(3, 4), torch.ones(3, 4, dtype=torch.uint8)), TypeError,
                     ("mask", "torch.uint8")),
    "dim-out-of-range": (lambda: masked_softmax(torch.ones(3, 4), dim=2), ValueError,
                         ("dim", "[-2, 2)", "(3, 4)", "got 2")),
    "dim-float": (lambda: masked_softmax(torch.ones(3, 4), dim=1.0), TypeError, ("dim", "integer", "float 1.0")),
}


@pytest.mark.parametrize(
    ("call", "error", "fragments"), list(BAD_SOFTMAX_INPUTS.values()), ids=list(BAD_SOFTMAX_INPUTS)
)
def test_masked_softmax_rejects_bad_input(call, error, fragments):
    with pytest.raises(error, match=in_order(*fragments)):
        call()
