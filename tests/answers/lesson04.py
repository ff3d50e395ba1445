"""Answers to lesson 04's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import math

import torch
import torch.nn.functional as F
from torch import nn

# --- 04.1 split_heads(X, num_heads) / 04.2 merge_heads(X) -----------------------------------------


def split_with_view(X, h):
    *batch, n, d = X.shape
    return X.view(*batch, n, h, d // h).permute(*range(len(batch)), -2, -3, -1)


def split_with_chunks(X, h):
    return torch.stack(X.chunk(h, dim=-1), dim=-3)


WRONG_SPLIT = {
    "reshape only": (lambda X, h: X.reshape(*X.shape[:-2], h, X.shape[-2], X.shape[-1] // h), "without a transpose"),
    "no transpose": (lambda X, h: X.reshape(*X.shape[:-1], h, X.shape[-1] // h), "head axis is not moved"),
    "strided features": (lambda X, h: X.reshape(*X.shape[:-1], X.shape[-1] // h, h).movedim(-1, -3),
                         "every h-th feature"),
    "h as width": (lambda X, h: X.reshape(*X.shape[:-1], X.shape[-1] // h, h).transpose(-3, -2), "head width"),
    "batched only": (lambda X, h: X.reshape(X.shape[0], X.shape[1], h, -1).transpose(1, 2), "values differ"),
    "transpose(1, 2)": (lambda X, h: X.reshape(*X.shape[:-1], h, -1).transpose(1, 2), "expected shape"),
    "permute(0, 2, 1, 3)": (lambda X, h: X.reshape(*X.shape[:-1], h, -1).permute(0, 2, 1, 3),
                            "your code raised RuntimeError"),
    "last two axes swapped": (lambda X, h: X.reshape(*X.shape[:-1], h, -1).transpose(-2, -1), "expected shape"),
    "chunks stacked first": (lambda X, h: torch.stack(X.chunk(h, dim=-1)), "expected shape"),
}
RIGHT_SPLIT = {"view + permute": split_with_view, "chunk + stack": split_with_chunks,
               "unflatten": lambda X, h: X.unflatten(-1, (h, -1)).transpose(-3, -2)}

def merge_four_axes(X):
    B, h, n, d_h = X.shape  # fails on unbatched input: "not enough values to unpack"
    return X.transpose(1, 2).reshape(B, n, h * d_h)


WRONG_MERGE = {
    "reshape only": (lambda X: X.reshape(*X.shape[:-3], X.shape[-2], X.shape[-3] * X.shape[-1]), "without a transpose"),
    "d_h-major": (lambda X: X.permute(*range(X.dim() - 3), -2, -1, -3).flatten(-2), "wrong order"),
    "stacked positions": (lambda X: X.flatten(-3, -2), "stacked"),
    "averaged": (lambda X: X.mean(-3), "averaged"),
    "sum of heads": (lambda X: X.sum(-3), "expected shape"),
    "view after the transpose": (lambda X: X.transpose(-3, -2).view(*X.shape[:-3], X.shape[-2], -1),
                                 "your code raised RuntimeError"),
    "four axes unpacked": (merge_four_axes, "your code raised ValueError"),
    "heads concatenated along positions": (lambda X: torch.cat(X.unbind(-3), dim=-2), "stacked"),
    "all axes flattened": (lambda X: X.transpose(-3, -2).flatten(-3), "expected shape"),
}
RIGHT_MERGE = {
    "cat over heads": lambda X: torch.cat(X.unbind(-3), dim=-1),
    "movedim + flatten": lambda X: X.movedim(-3, -2).flatten(-2),
    "einops-like permute": lambda X: X.transpose(-3, -2).contiguous().view(*X.shape[:-3], X.shape[-2], -1),
}

# --- 04.3 the forward pass of a learner's MultiHeadAttention ---------------------------------------


class MHA(nn.Module):
    """A learner-style module; ``mistake`` switches in one known error."""

    mistake = None

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h = num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def split(self, x):
        B, n, d = x.shape
        if self.mistake == "reshape split":
            return x.reshape(B, self.h, n, d // self.h)
        return x.reshape(B, n, self.h, d // self.h).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        W_k, W_v = (self.W_q, self.W_q) if self.mistake == "W_q for all three" else (self.W_k, self.W_v)
        if self.mistake == "self-attention only":
            key = value = query
        q, k, v = self.split(self.W_q(query)), self.split(W_k(key)), self.split(W_v(value))
        d_k = query.shape[-1] if self.mistake == "scale by d_model" else q.shape[-1]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        if mask is not None:
            keep = mask if self.mistake == "mask without head axis" else mask[:, None]
            if self.mistake == "mask filled with 0":
                scores = scores.masked_fill(~keep, 0.0)
            elif self.mistake == "mask inverted":
                scores = scores.masked_fill(keep, float("-inf"))
            else:
                scores = scores.masked_fill(~keep, float("-inf"))
        weights = scores.softmax(-2 if self.mistake == "softmax over queries" else -1)
        merged = (weights @ v).transpose(1, 2).flatten(2)
        if self.mistake == "average weights":
            weights = weights.mean(1)
        return (merged if self.mistake == "no W_o" else self.W_o(merged)), weights


def mha_with(mistake):
    return type(f"MHA_{mistake.replace(' ', '_')}", (MHA,), {"mistake": mistake})


class MHAWithSDPA(MHA):
    """Output from the fused kernel, weights recomputed: correct, and written differently."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.W_q(query)), self.split(self.W_k(key)), self.split(self.W_v(value))
        m = None if mask is None else mask.unsqueeze(1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        weights = (scores if m is None else scores.masked_fill(~m, float("-inf"))).softmax(-1)
        return self.W_o(out.transpose(1, 2).flatten(2)), weights


class MHAEinsum(MHA):
    def forward(self, query, key, value, mask=None):
        h = self.h
        q, k, v = (W(x).unflatten(-1, (h, -1)) for W, x in ((self.W_q, query), (self.W_k, key), (self.W_v, value)))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        weights = scores.softmax(-1)
        return self.W_o(torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(-2)), weights


class NoLinears(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)


WRONG_MHA = {
    "reshape split": (mha_with("reshape split"), "split by a reshape without a transpose"),
    "no W_o": (mha_with("no W_o"), "W_o is missing"),
    "scale by d_model": (mha_with("scale by d_model"), "sqrt(d_model)"),
    "mask without head axis": (mha_with("mask without head axis"), "not broadcast over the heads"),
    "average weights": (mha_with("average weights"), "weights: expected shape (2, 2, 4, 5), got (2, 4, 5)"),
    "packed projections": (NoLinears, "missing ['W_k.bias'"),
    "constructor fails": (lambda d, h: 1 / 0, "MultiHeadAttention(8, 2) raised ZeroDivisionError"),
    "W_q for all three": (mha_with("W_q for all three"), "wrong result for"),
    "mask filled with 0": (mha_with("mask filled with 0"), "wrong result for"),
    "mask inverted": (mha_with("mask inverted"), "wrong result for"),
    "softmax over queries": (mha_with("softmax over queries"), "wrong result for"),
    "self-attention only": (mha_with("self-attention only"), "your code raised RuntimeError"),
}
RIGHT_MHA = {"with F.scaled_dot_product_attention": MHAWithSDPA, "einsum": MHAEinsum, "reference style": MHA}

# --- 04.4 mha_parameter_count(d_model, num_heads, bias) ---------------------------------------------

WRONG_COUNT = {
    "three projections": (lambda d, h, b: 3 * d * d + (3 * d if b else 0), "W_o is not counted"),
    "times heads": (lambda d, h, b: h * (4 * d * d + (4 * d if b else 0)), "do not multiply"),
    "divided by heads": (lambda d, h, b: 4 * d * d // h + (4 * d if b else 0), "does not shrink"),
    "bias ignored": (lambda d, h, b: 4 * d * d, "biases"),
    "float": (lambda d, h, b: 4.0 * d * d + 4 * d * b, "expected an integer"),
    "bias always counted": (lambda d, h, b: 4 * (d * d + d), "biases"),
    "heads of d_h x d_h": (lambda d, h, b: 4 * h * (d // h) ** 2 + (4 * d if b else 0), "does not shrink"),
    "one head's bias": (lambda d, h, b: 4 * d * d + (4 * (d // h) if b else 0), "wrong result for"),
    "W_o without a bias": (lambda d, h, b: 4 * d * d + (3 * d if b else 0), "wrong result for"),
}
RIGHT_COUNT = {
    "formula": lambda d, h, b: 4 * d * (d + int(b)),
    "count a real module": lambda d, h, b: sum(p.numel() for p in nn.MultiheadAttention(d, h, bias=b).parameters()),
    "summed over heads": lambda d, h, b: sum(4 * d * (d // h) + (4 * (d // h) if b else 0) for _ in range(h)),
}

#: The mistake id each new wrong answer must be named by (None: no name, as no known mistake explains every case).
MISTAKES = {
    "04.1": {"transpose(1, 2)": None, "permute(0, 2, 1, 3)": None, "last two axes swapped": None,
             "chunks stacked first": None},
    "04.2": {"view after the transpose": None, "four axes unpacked": None,
             "heads concatenated along positions": "positions-stacked", "all axes flattened": None},
    "04.3": {"W_q for all three": None, "mask filled with 0": None, "mask inverted": None,
             "softmax over queries": None, "self-attention only": None},
    "04.4": {"bias always counted": "biases-miscounted", "heads of d_h x d_h": "heads-shrink-count",
             "one head's bias": None, "W_o without a bias": None},
}

EXERCISES = {
    "04.1": (WRONG_SPLIT, RIGHT_SPLIT),
    "04.2": (WRONG_MERGE, RIGHT_MERGE),
    "04.3": (WRONG_MHA, RIGHT_MHA),
    "04.4": (WRONG_COUNT, RIGHT_COUNT),
}
