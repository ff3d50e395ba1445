"""Answers to lesson 01's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.checks.meta_device import shapes_only

# --- 01.1 token_logits(tokens, embedding, head_weight, head_bias) ---------------------------------

WRONG_LOGITS = {
    "no transpose": (lambda t, E, W, b: E[t] @ W + b, "multiply by its transpose"),
    "no bias": (lambda t, E, W, b: E[t] @ W.T, "bias is missing"),
    "embedding as head": (lambda t, E, W, b: E[t] @ E.T + b, "embedding table instead of the output head"),
    "softmax applied": (lambda t, E, W, b: F.softmax(F.linear(E[t], W, b), -1), "softmax was applied"),
    "float32 hard-coded": (lambda t, E, W, b: (E[t] @ W.T + b).float(), "expected dtype torch.float64"),
    "flattened batch": (lambda t, E, W, b: (E[t] @ W.T + b).reshape(-1, W.shape[0]), "expected shape"),
    "F.linear with W.T": (lambda t, E, W, b: F.linear(F.embedding(t, E), W.T, b), "multiply by its transpose"),
    "bias looked up per token": (lambda t, E, W, b: E[t] @ W.T + b[t, None], "wrong result for"),
    "log-softmax applied": (lambda t, E, W, b: F.log_softmax(E[t] @ W.T + b, -1), "wrong result for"),
    "softmax over the positions": (lambda t, E, W, b: torch.softmax(E[t] @ W.T + b, 0), "wrong result for"),
    "bias added before the head": (lambda t, E, W, b: (E[t] + b) @ W.T, "wrong result for"),
}


def one_hot_logits(tokens, embedding, head_weight, head_bias):
    one_hot = F.one_hot(tokens, embedding.shape[0]).to(embedding.dtype)
    return one_hot @ embedding @ head_weight.T + head_bias


def module_logits(tokens, embedding, head_weight, head_bias):
    emb = nn.Embedding.from_pretrained(embedding)
    head = nn.Linear(embedding.shape[1], embedding.shape[0], dtype=embedding.dtype)
    with torch.no_grad():
        head.weight.copy_(head_weight)
        head.bias.copy_(head_bias)
        return head(emb(tokens))


RIGHT_LOGITS = {
    "F.embedding + F.linear": lambda t, E, W, b: F.linear(F.embedding(t, E), W, b),
    "einsum": lambda t, E, W, b: torch.einsum("...d,vd->...v", E[t], W) + b,
    "one-hot matmul": one_hot_logits,
    "nn modules": module_logits,
}

# --- 01.2 next_token_pairs(tokens) ---------------------------------------------------------------


def shifted_with_loop(tokens):
    n = tokens.shape[-1]
    inputs = torch.stack([tokens[..., i] for i in range(n - 1)], dim=-1)
    targets = torch.stack([tokens[..., i + 1] for i in range(n - 1)], dim=-1)
    return inputs, targets


WRONG_PAIRS = {
    "swapped": (lambda t: (t[..., 1:], t[..., :-1]), "swapped"),
    "not shifted": (lambda t: (t.clone(), t.clone()), "nothing is shifted"),
    "batch axis": (lambda t: (t[:-1], t[1:]), "along the batch axis"),
    "shift by two": (lambda t: (t[..., :-2], t[..., 2:]), "shift is by two"),
    "rolled": (lambda t: (t, t.roll(-1, dims=-1)), "expected shape"),
    "one tensor": (lambda t: t[..., 1:], "expected a tuple"),
    "batch axis hard-coded": (lambda t: (t[:, :-1], t[:, 1:]), "your code raised IndexError"),
    "batch flattened into one stream": (lambda t: (t.flatten()[:-1], t.flatten()[1:]), "expected shape"),
    "targets are the previous tokens": (lambda t: (t[..., 1:], t[..., 1:].roll(1, -1)), "wrong result for"),
    "shifted along dim 0 with narrow": (lambda t: (t.narrow(0, 0, t.shape[0] - 1), t.narrow(0, 1, t.shape[0] - 1)),
                                        "along the batch axis"),
}
RIGHT_PAIRS = {
    "narrow": lambda t: (t.narrow(-1, 0, t.shape[-1] - 1), t.narrow(-1, 1, t.shape[-1] - 1)),
    "loop": shifted_with_loop,
    "list": lambda t: [t[..., :-1], t[..., 1:]],
    "negative narrow of the last axis": lambda t: (t[..., : t.size(-1) - 1], t[..., -(t.size(-1) - 1):]),
}

# --- 01.3 lm_parameter_count(vocab_size, d_model, tie_weights) ------------------------------------

WRONG_COUNTS = {
    "no bias": (lambda v, d, tie: v * d * (1 if tie else 2), "bias (|V| numbers) is not counted"),
    "tied counted twice": (lambda v, d, tie: 2 * v * d + v, "count it once"),
    "bias of size d": (lambda v, d, tie: v * d * (1 if tie else 2) + d, "not d"),
    "float result": (lambda v, d, tie: float(v * d * (1 if tie else 2) + v), "expected an integer"),
    "tied head has no bias": (lambda v, d, tie: v * d if tie else 2 * v * d + v, "wrong result for"),
    "flag read backwards": (lambda v, d, tie: v * d + (v * d + v if tie else v), "wrong result for"),
    "head built as Linear(|V|, d)": (lambda v, d, tie: count_with_modules(v, d, tie, head_in_out=(v, d)), "not d"),
    "embedding with a bias": (lambda v, d, tie: v * d + d + (v if tie else v * d + v), "wrong result for"),
}


def count_with_modules(vocab_size, d_model, tie_weights, head_in_out=None):
    with shapes_only():
        embedding = nn.Embedding(vocab_size, d_model)
        head = nn.Linear(*(head_in_out or (d_model, vocab_size)))
    n = embedding.weight.numel() + head.bias.numel()
    return n if tie_weights else n + head.weight.numel()


RIGHT_COUNTS = {
    "formula": lambda v, d, tie: v * d + (v if tie else v * d + v),
    "modules": count_with_modules,
    "bool arithmetic": lambda v, d, tie: v * d * (2 - tie) + v,
}

#: The mistake id each new wrong answer must be named by (None: no name, as no known mistake explains every case).
MISTAKES = {
    "01.1": {"F.linear with W.T": "head-not-transposed", "bias looked up per token": None,
             "log-softmax applied": None, "softmax over the positions": None,
             "bias added before the head": None},
    "01.2": {"batch axis hard-coded": None, "batch flattened into one stream": None,
             "targets are the previous tokens": None, "shifted along dim 0 with narrow": "shift-on-batch-axis"},
    "01.3": {"tied head has no bias": None, "flag read backwards": None,
             "head built as Linear(|V|, d)": "head-bias-of-size-d", "embedding with a bias": None},
}

EXERCISES = {
    "01.1": (WRONG_LOGITS, RIGHT_LOGITS),
    "01.2": (WRONG_PAIRS, RIGHT_PAIRS),
    "01.3": (WRONG_COUNTS, RIGHT_COUNTS),
}
