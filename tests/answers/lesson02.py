"""Answers to lesson 02's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import math

import torch

# --- 02.1 softmax(x, dim=-1) -----------------------------------------------------------------------


def softmax_loop(x, dim=-1):
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = torch.stack([torch.exp(r - r.max()) / torch.exp(r - r.max()).sum() for r in rows])
    return out.reshape(moved.shape).movedim(-1, dim)


WRONG_SOFTMAX = {
    "naive exp": (lambda x, dim=-1: x.exp() / x.exp().sum(dim, keepdim=True), "subtract the maximum"),
    "ignores dim": (lambda x, dim=-1: torch.softmax(x, -1), "wrong axis"),
    "global max": (lambda x, dim=-1: (x - x.max()).exp() / (x - x.max()).exp().sum(dim, keepdim=True),
                   "over the whole tensor"),
    "global sum": (lambda x, dim=-1: (x - x.max()).exp() / (x - x.max()).exp().sum(), "sum over the whole tensor"),
    "log-softmax": (lambda x, dim=-1: torch.log_softmax(x, dim), "log-softmax"),
    "float32 always": (lambda x, dim=-1: torch.softmax(x.float(), dim), "expected dtype torch.float64"),
    "sum without keepdim": (lambda x, dim=-1: (lambda e: e / e.sum(dim))((x - x.amax(dim, keepdim=True)).exp()),
                            "your code raised RuntimeError"),
    "sum over the last axis": (lambda x, dim=-1: (lambda e: e / e.sum(-1, keepdim=True))(
        (x - x.amax(dim, keepdim=True)).exp()), "wrong result for"),
    "minimum subtracted": (lambda x, dim=-1: (lambda e: e / e.sum(dim, keepdim=True))(
        (x - x.amin(dim, keepdim=True)).exp()), "wrong result for"),
    "mean subtracted": (lambda x, dim=-1: (lambda e: e / e.sum(dim, keepdim=True))(
        (x - x.mean(dim, keepdim=True)).exp()), "wrong result for"),
    "no max, global sum": (lambda x, dim=-1: torch.exp(x) / torch.sum(torch.exp(x)), "wrong result for"),
}
RIGHT_SOFTMAX = {
    "logsumexp": lambda x, dim=-1: torch.exp(x - torch.logsumexp(x, dim, keepdim=True)),
    "loop over rows": softmax_loop,
    "F.softmax": lambda x, dim=-1: torch.nn.functional.softmax(x, dim=dim),
}

# --- 02.2 scaled_dot_product_attention(Q, K, V) ----------------------------------------------------


def attention_einsum(Q, K, V):
    scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(Q.shape[-1])
    weights = scores.softmax(-1)
    return torch.einsum("...qk,...kv->...qv", weights, V), weights


def attention_loop(Q, K, V):
    """One query at a time, as in the lesson's first version."""
    d_k = Q.shape[-1]
    rows = [torch.softmax((K @ Q[..., i, :, None]).squeeze(-1) / d_k**0.5, -1) for i in range(Q.shape[-2])]
    weights = torch.stack(rows, dim=-2)
    return weights @ V, weights


def unbatched_only(Q, K, V):
    n_q, d_k = Q.shape  # fails on batched input: "too many values to unpack"
    return attention(Q, K, V, d_k**-0.5)


def attention(Q, K, V, scale, dim=-1):
    weights = torch.softmax(Q @ K.transpose(-2, -1) * scale, dim=dim)
    return weights @ V, weights


WRONG_ATTENTION = {
    "no scaling": (lambda Q, K, V: attention(Q, K, V, 1.0), "not scaled"),
    "divided by d_k": (lambda Q, K, V: attention(Q, K, V, 1 / Q.shape[-1]), "divided by d_k"),
    "softmax over queries": (lambda Q, K, V: attention(Q, K, V, Q.shape[-1] ** -0.5, dim=-2), "wrong axis"),
    "weights transposed": (lambda Q, K, V: (attention(Q, K, V, Q.shape[-1] ** -0.5)[0],
                                            attention(Q, K, V, Q.shape[-1] ** -0.5)[1].mT), "transposed"),
    "K not transposed": (lambda Q, K, V: attention(Q, K.mT, V, Q.shape[-1] ** -0.5), "K is not transposed"),
    "swapped results": (lambda Q, K, V: attention(Q, K, V, Q.shape[-1] ** -0.5)[::-1], "swapped"),
    "scaled by sqrt(d_v)": (lambda Q, K, V: attention(Q, K, V, V.shape[-1] ** -0.5), "values differ"),
    "crash on batch": (unbatched_only, "your code raised ValueError"),
    "K.T": (lambda Q, K, V: attention(Q, K.T, V, Q.shape[-1] ** -0.5) if K.dim() == 2 else
            attention(Q, K.permute(*reversed(range(K.dim()))), V, Q.shape[-1] ** -0.5), "wrong result for"),
    "softmax over dim 0": (lambda Q, K, V: attention(Q, K, V, Q.shape[-1] ** -0.5, dim=0), "wrong result for"),
    "scaled by sqrt(n_k)": (lambda Q, K, V: attention(Q, K, V, K.shape[-2] ** -0.5), "wrong result for"),
    "multiplied by sqrt(d_k)": (lambda Q, K, V: attention(Q, K, V, Q.shape[-1] ** 0.5), "wrong result for"),
    "scaled after the softmax": (lambda Q, K, V: (lambda w: (w @ V, w))(
        torch.softmax(Q @ K.mT, -1) / math.sqrt(Q.shape[-1])), "wrong result for"),
    "Q transposed instead of K": (lambda Q, K, V: (lambda w: (w @ V, w))(
        torch.softmax(Q.mT @ K / math.sqrt(Q.shape[-1]), -1)), "wrong result for"),
}
RIGHT_ATTENTION = {
    "einsum": attention_einsum,
    "loop over queries": attention_loop,
    "F.sdpa + explicit weights": lambda Q, K, V: (
        torch.nn.functional.scaled_dot_product_attention(Q, K, V),
        torch.softmax(Q @ K.mT / math.sqrt(Q.shape[-1]), -1),
    ),
}

# --- 02.3 dot_product_variance(q, k) ---------------------------------------------------------------


def dots(q, k):
    return (q * k).sum(-1)


WRONG_VARIANCE = {
    "mean": (lambda q, k: dots(q, k).mean().item(), "mean of the dot products"),
    "standard deviation": (lambda q, k: dots(q, k).std().item(), "standard deviation"),
    "scaled dot product": (lambda q, k: (dots(q, k) / math.sqrt(q.shape[-1])).var().item(), "scaled q.k / sqrt"),
    "no sum over d_k": (lambda q, k: (q * k).var().item(), "sum over the last axis"),
    "the constant d_k": (lambda q, k: float(q.shape[-1]), "these samples have other standard deviations"),
    "every query with every key": (lambda q, k: (q @ k.T).var().item(), "row i of q goes with row i of k"),
    "a tensor of values": (lambda q, k: dots(q, k), "expected a finite number"),
    "nan": (lambda q, k: float("nan"), "expected a finite number"),
    "product of the entries' variances": (lambda q, k: (q.var() * k.var()).item(), "expected a variance of"),
    "the formula d_k var(q) var(k)": (lambda q, k: q.shape[-1] * q.var().item() * k.var().item(),
                                      "expected a variance of"),
    "summed over the samples": (lambda q, k: (q * k).sum(0).var().item(), "expected a"),
    "dot products squared, not centred, summed": (lambda q, k: dots(q, k).pow(2).sum().item(),
                                                  "expected a variance of"),
}
RIGHT_VARIANCE = {
    "unbiased var": lambda q, k: dots(q, k).var().item(),
    "biased var, float64, 0-d tensor": lambda q, k: dots(q.double(), k.double()).var(unbiased=False),
    "mean of squares (the mean is 0)": lambda q, k: torch.einsum("nd,nd->n", q, k).pow(2).mean().item(),
}

#: The mistake id each new wrong answer must be named by (None: no name, as no known mistake explains every case).
MISTAKES = {
    "02.1": {"sum without keepdim": None, "sum over the last axis": None, "minimum subtracted": None,
             "mean subtracted": None, "no max, global sum": None},
    "02.2": {"K.T": None, "softmax over dim 0": None, "scaled by sqrt(n_k)": None, "multiplied by sqrt(d_k)": None,
             "scaled after the softmax": None,
             "Q transposed instead of K": None},
    "02.3": {"product of the entries' variances": None, "the formula d_k var(q) var(k)": None,
             "summed over the samples": None, "dot products squared, not centred, summed": None},
}

EXERCISES = {
    "02.1": (WRONG_SOFTMAX, RIGHT_SOFTMAX),
    "02.2": (WRONG_ATTENTION, RIGHT_ATTENTION),
    "02.3": (WRONG_VARIANCE, RIGHT_VARIANCE),
}
