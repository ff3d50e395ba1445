"""Checks for lesson 02, attention: a stable softmax, scaled dot-product attention, the variance of q.k."""

from __future__ import annotations

import math
import numbers

import torch

from transformer_course.attention import scaled_dot_product_attention
from transformer_course.checks.core import Case, CheckFailed, Mistake, call_answer, check_function, exercise


def _naive_softmax(x, dim=-1):
    return x.exp() / x.exp().sum(dim, keepdim=True)


def _softmax_cases() -> list[Case]:
    g = torch.Generator().manual_seed(3)
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
            Mistake("exp overflows or underflows: subtract the maximum along `dim` before exponentiating "
                    "(softmax(x) = softmax(x - max x)).", _naive_softmax),
            Mistake("softmax over the wrong axis: normalise along `dim`, not always the last axis.",
                    lambda x, dim: torch.softmax(x, dim=-1)),
            Mistake("the maximum is subtracted along the wrong axis (or over the whole tensor) and the sums "
                    "along `dim` ignore it: use `x.amax(dim, keepdim=True)`.",
                    lambda x, dim: _naive_softmax(x - x.max(), dim)),
            Mistake("the exponentials are divided by the sum over the whole tensor, not along `dim`.",
                    lambda x, dim: (x - x.max()).exp() / (x - x.max()).exp().sum()),
            Mistake("the result is log-softmax: return the probabilities themselves.",
                    lambda x, dim: torch.log_softmax(x, dim=dim)),
        ],
        names=("softmax",),
        # float32 entries near +-1000 carry ~6e-5 of rounding; a stable softmax written another way
        # (via logsumexp, say) may differ from torch.softmax by that much and is still right.
        rtol=1e-4,
        atol=1e-5,
    )


def _attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)

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
            Mistake("the scores are not scaled: divide Q K^T by sqrt(d_k).", _attention_with(lambda d: 1.0)),
            Mistake("the scores are divided by d_k: divide by its square root, sqrt(d_k).",
                    _attention_with(lambda d: 1 / d)),
            Mistake("softmax over the wrong axis: each query's weights (a row, the keys' axis -1) must sum to 1.",
                    _attention_with(sqrt, dim=-2)),
            Mistake("the weights are transposed: return them as (..., n_q, n_k), one row per query.",
                    _attention_with(sqrt, transpose_weights=True)),
            Mistake("K is not transposed: the scores are Q K^T, of shape (..., n_q, n_k).",
                    lambda Q, K, V: _attention_with(sqrt)(Q, K.transpose(-2, -1), V)),
            Mistake("output and weights are swapped: return (output, weights).",
                    lambda Q, K, V: tuple(reversed(_attention(Q, K, V)))),
        ],
        names=("output", "weights"),
    )


# --- 02.3: a statistical check -------------------------------------------------------------------

VARIANCE_DIMS = (1, 4, 16, 64, 256)
VARIANCE_SAMPLES = 20_000
VARIANCE_TOLERANCE = 0.1  # relative; the estimate's relative spread is about sqrt(8 / 20000) = 2% or less


@exercise("02.3", title="The variance of q.k grows with d_k", points=2)
def check_dot_product_variance(answer) -> int:
    """Compare the learner's estimate with the exact variance d_k of q.k for q, k ~ N(0, I)."""
    estimates = {}
    for d_k in VARIANCE_DIMS:
        torch.manual_seed(d_k)  # the learner's sampling is reproducible, so is the verdict
        case = Case(f"d_k={d_k}", {"d_k": d_k, "num_samples": VARIANCE_SAMPLES})
        got = call_answer(answer, case)
        if type(got) is torch.Tensor and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(got):
            raise CheckFailed(f"for {case.describe()} expected a finite number, got {type(got).__name__} {got!r:.40}")
        estimates[d_k] = float(got)
    wrong = [d_k for d_k, got in estimates.items() if abs(got - d_k) > VARIANCE_TOLERANCE * d_k]
    if not wrong:
        return len(VARIANCE_DIMS)
    table = ", ".join(f"d_k={d_k}: {got:.4g}" for d_k, got in estimates.items())
    # The largest d_k tells the classic mistakes apart best (0, sqrt(d_k), 1 and d_k are far apart there).
    d_max = VARIANCE_DIMS[-1]
    raise CheckFailed(f"expected variances close to d_k (within {VARIANCE_TOLERANCE:.0%}), got {table}",
                      mistake=_variance_hint(estimates[d_max], d_max))


def _variance_hint(got: float, d_k: int) -> str | None:
    """The classic mistake whose value at ``d_k`` is near ``got``, if any."""
    known = [
        (0.0, "this looks like the mean of q.k (which is 0), not its variance."),
        (math.sqrt(d_k), "this is the standard deviation of q.k; the variance is its square."),
        (1.0, "this is the variance of the scaled q.k / sqrt(d_k), which is 1; measure the raw dot product."),
        (d_k / 9, "draw q and k from a standard normal (torch.randn), not a uniform distribution."),
        (7 * d_k / 144, "draw q and k from a standard normal (torch.randn), not a uniform distribution."),
        (float(d_k) ** 2, "each q.k must be a sum over d_k products, one number per sample."),
    ]
    for value, hint in known:
        if abs(got - value) <= 0.2 * max(value, 1.0):
            return hint
    return None
