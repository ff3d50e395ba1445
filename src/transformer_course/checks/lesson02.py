"""Checks for lesson 02, attention: a stable softmax, scaled dot-product attention, the variance of q.k."""

from __future__ import annotations

import math
import numbers

import torch

from transformer_course.attention import scaled_dot_product_attention
from transformer_course.checks.core import (
    Case,
    Mistake,
    case_generator,
    check_function,
    exercise,
)


def _naive_softmax(x, dim=-1):
    return x.exp() / x.exp().sum(dim, keepdim=True)


def _softmax_cases() -> list[Case]:
    g = case_generator(3)
    return [
        Case("small rows", {"x": torch.randn(3, 5, generator=g), "dim": -1}),
        Case("large magnitudes (exp overflows)", {"x": torch.randn(4, 6, generator=g) * 500, "dim": -1}),
        Case("very negative entries (exp underflows)", {"x": torch.randn(2, 7, generator=g) - 1000, "dim": -1}),
        Case("softmax over dim=0", {"x": torch.randn(5, 3, generator=g), "dim": 0}),
        Case("batched, dim=1", {"x": torch.randn(2, 4, 3, generator=g), "dim": 1}),
        Case("vector", {"x": torch.randn(8, generator=g), "dim": -1}),
        Case("float64", {"x": torch.randn(3, 4, generator=g, dtype=torch.float64) * 100, "dim": -1}),
    ]


@exercise("02.1", title="A numerically stable softmax", points=2)
def check_softmax(answer) -> int:
    return check_function(
        answer,
        lambda x, dim: torch.softmax(x, dim=dim),
        _softmax_cases(),
        [
            Mistake("no-max-subtracted",
                    "exp overflows or underflows: subtract the maximum along `dim` before exponentiating "
                    "(softmax(x) = softmax(x - max x)).", _naive_softmax),
            Mistake("wrong-axis", "softmax over the wrong axis: normalise along `dim`, not always the last axis.",
                    lambda x, dim: torch.softmax(x, dim=-1)),
            Mistake("max-over-wrong-axis",
                    "the maximum is subtracted along the wrong axis (or over the whole tensor) and the sums "
                    "along `dim` ignore it: use `x.amax(dim, keepdim=True)`.",
                    lambda x, dim: _naive_softmax(x - x.max(), dim)),
            Mistake("sum-over-whole-tensor",
                    "the exponentials are divided by the sum over the whole tensor, not along `dim`.",
                    lambda x, dim: (x - x.max()).exp() / (x - x.max()).exp().sum()),
            Mistake("log-softmax", "the result is log-softmax: return the probabilities themselves.",
                    lambda x, dim: torch.log_softmax(x, dim=dim)),
        ],
        names=("softmax",),
        # float32 entries near +-1000 carry ~6e-5 of rounding; a stable softmax written another way
        # (via logsumexp, say) may differ from torch.softmax by that much and is still right.
        rtol=1e-4,
        atol=1e-5,
    )


def _attention_cases() -> list[Case]:
    g = case_generator(4)

    def case(label, batch, n_q, n_k, d_k, d_v, dtype=torch.float32):
        return Case(label, {
            "Q": torch.randn(*batch, n_q, d_k, generator=g, dtype=dtype),
            "K": torch.randn(*batch, n_k, d_k, generator=g, dtype=dtype),
            "V": torch.randn(*batch, n_k, d_v, generator=g, dtype=dtype),
        })

    return [
        # n_q == n_k == d_k first: there, forgetting a transpose runs and can be named.
        case("square, n_q = n_k = d_k", (), 4, 4, 4, 4),
        case("n_q != n_k, d_v != d_k", (), 3, 5, 4, 6),
        case("batched", (2,), 3, 5, 8, 2),
        case("batch and heads", (2, 3), 4, 6, 16, 5),
        case("float64", (2,), 5, 3, 4, 4, dtype=torch.float64),
    ]


def _attention(Q, K, V):
    return scaled_dot_product_attention(Q, K, V)


def _attention_with(scale_of, dim=-1, transpose_weights=False):
    def wrong(Q, K, V):
        weights = torch.softmax(Q @ K.transpose(-2, -1) * scale_of(Q.shape[-1]), dim=dim)
        return weights @ V, (weights.transpose(-2, -1) if transpose_weights else weights)
    return wrong


@exercise("02.2", title="Scaled dot-product attention", points=3)
def check_attention(answer) -> int:
    sqrt = lambda d: 1 / math.sqrt(d)  # noqa: E731
    return check_function(
        answer,
        _attention,
        _attention_cases(),
        [
            Mistake("not-scaled",
                    "the scores are not scaled: divide Q K^T by sqrt(d_k).", _attention_with(lambda d: 1.0)),
            Mistake("scaled-by-d-k", "the scores are divided by d_k: divide by its square root, sqrt(d_k).",
                    _attention_with(lambda d: 1 / d)),
            Mistake("softmax-wrong-axis",
                    "softmax over the wrong axis: each query's weights (a row, the keys' axis -1) must sum to 1.",
                    _attention_with(sqrt, dim=-2)),
            Mistake("weights-transposed",
                    "the weights are transposed: return them as (..., n_q, n_k), one row per query.",
                    _attention_with(sqrt, transpose_weights=True)),
            Mistake("k-not-transposed", "K is not transposed: the scores are Q K^T, of shape (..., n_q, n_k).",
                    lambda Q, K, V: _attention_with(sqrt)(Q, K.transpose(-2, -1), V)),
            Mistake("outputs-swapped", "output and weights are swapped: return (output, weights).",
                    lambda Q, K, V: tuple(reversed(_attention(Q, K, V)))),
        ],
        names=("output", "weights"),
    )


# --- 02.3: measuring the variance of q.k from given samples ----------------------------------------------

VARIANCE_SAMPLES = 8192
# Relative. Biased and unbiased variance differ by 1/8192 = 1.2e-4; the mean of the squares (the mean is 0 in
# expectation) by mean^2 / var, about 1 / 8192 too; float32 rounding is far below either.
VARIANCE_TOLERANCE = 2e-3


def _dots(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return (q * k).sum(dim=-1)  # (num_samples,): row i of q with row i of k


def _variance_cases() -> list[Case]:
    """Pairs whose entries have standard deviations other than 1, so the variance d_k std(q)^2 std(k)^2 is not
    d_k: only a measurement passes, not a formula or a constant. In one case the standard deviations grow across
    the features, in q and k alike: there the variance of the dot products, sum_i std(q_i)^2 std(k_i)^2, is 1.5 x
    the formula d_k var(q) var(k) of the pooled entries (mean(r^4) / mean(r^2)^2 for r = 0.25 .. 1.75), so that
    formula fails, and so do the variance of one product (mean_i std(q_i)^2 std(k_i)^2) and var(q) var(k), which
    agree within the tolerance where every feature has the same standard deviation."""
    g = case_generator(23)
    cases = []
    for d_k, std_q, std_k, spread in ((1, 1.0, 1.0, False), (16, 0.5, 2.0, False), (64, 1.0, 0.25, True),
                                      (256, 2.0, 1.5, False)):
        per_feature = torch.linspace(0.25, 1.75, d_k) if spread else torch.ones(d_k)
        q = torch.randn(VARIANCE_SAMPLES, d_k, generator=g) * std_q * per_feature
        k = torch.randn(VARIANCE_SAMPLES, d_k, generator=g) * std_k * per_feature
        label = f"d_k={d_k}, std(q)={std_q:g}, std(k)={std_k:g}"
        cases.append(Case(label + (", both x 0.25 .. 1.75 across the features" if spread else ""), {"q": q, "k": k}))
    return cases


def _variance_of_all_pairs(q: torch.Tensor, k: torch.Tensor) -> float:
    """``(q @ k.T).var()`` without the (N, N) matrix (8192^2 x d_k multiply-adds, seconds on a CPU): the sum of the
    squares of all N^2 dot products q_a . k_b is sum_ij (q^T q)_ij (k^T k)_ij, their sum is (sum_a q_a) . (sum_b k_b).
    q, k: (N, d_k); in float64, as the squares of the mean cancel."""
    q, k = q.double(), k.double()
    n = q.shape[0] * k.shape[0]
    mean = q.sum(0) @ k.sum(0) / n
    return ((q.T @ q * (k.T @ k)).sum() - n * mean**2).item() / (n - 1)


VARIANCE_MISTAKES = [
    Mistake("mean-not-variance", "this is the mean of the dot products (about 0), not their variance.",
            lambda q, k: _dots(q, k).mean()),
    Mistake("std-not-variance", "this is the standard deviation of q.k; the variance is its square.",
            lambda q, k: _dots(q, k).std()),
    Mistake("scaled-dot-products", "this is the variance of the scaled q.k / sqrt(d_k); measure the raw dot product.",
            lambda q, k: (_dots(q, k) / math.sqrt(q.shape[-1])).var()),
    Mistake("products-not-summed",
            "each q.k is a sum over the d_k products of a pair: sum over the last axis, then take the variance.",
            lambda q, k: (q * k).var()),
    Mistake("d-k-not-measured",
            "this is d_k, the variance for standard normal entries; these samples have other standard deviations, "
            "so measure the variance of the given pairs' dot products.", lambda q, k: float(q.shape[-1])),
    Mistake("every-query-with-every-key",
            "row i of q goes with row i of k: one dot product per pair, not every query with every key.",
            lambda q, k: _variance_of_all_pairs(q, k)),
]


def _compare_variance(expected, got, case: Case | None = None) -> str | None:
    """None if ``got`` is within VARIANCE_TOLERANCE (relative) of ``expected``, else what is wrong with it."""
    expected, got = (x.item() if type(x) is torch.Tensor and x.numel() == 1 else x for x in (expected, got))
    if isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(got):
        return f"expected a finite number, got {type(got).__name__} {got!r:.40}"
    if abs(got - expected) > VARIANCE_TOLERANCE * abs(expected):
        return f"expected a variance of {expected:.4g} (within {VARIANCE_TOLERANCE:.1%}), got {got:.4g}"
    return None


@exercise("02.3", title="Measuring the variance of q.k", points=2)
def check_dot_product_variance(answer) -> int:
    """The learner's variance of the pairs' dot products against the reference's, on the same samples."""
    return check_function(answer, lambda q, k: _dots(q, k).var().item(), _variance_cases(), VARIANCE_MISTAKES,
                          differ=_compare_variance)
