"""Checks for lesson 01, tensor shapes: token ids -> embeddings -> logits."""

from __future__ import annotations

import torch
from torch import nn

from transformer_course.checks.core import Case, Mistake, case_generator, check_function, exercise
from transformer_course.checks.meta_device import shapes_only


def _logits_cases() -> list[Case]:
    g = case_generator(1)

    def case(label, tokens_shape, vocab, d, dtype=torch.float32):
        return Case(
            label,
            {
                "tokens": torch.randint(vocab, tokens_shape, generator=g),
                "embedding": torch.randn(vocab, d, generator=g, dtype=dtype),
                "head_weight": torch.randn(vocab, d, generator=g, dtype=dtype),
                "head_bias": torch.randn(vocab, generator=g, dtype=dtype),
            },
        )

    return [
        # d == |V| first: there a missing transpose runs without a shape error and can be named.
        case("square head, d = |V|", (2, 3), vocab=5, d=5),
        case("batched", (2, 4), vocab=7, d=3),
        case("unbatched", (6,), vocab=9, d=4),
        case("two leading dims", (2, 3, 4), vocab=6, d=2),
        case("float64", (3, 5), vocab=8, d=4, dtype=torch.float64),
    ]


def _token_logits(tokens, embedding, head_weight, head_bias):
    return embedding[tokens] @ head_weight.T + head_bias


@exercise("01.1", title="Token ids to logits", points=2)
def check_token_logits(answer) -> int:
    return check_function(
        answer,
        _token_logits,
        _logits_cases(),
        [
            Mistake(
                "head-not-transposed",
                "head_weight is stored (|V|, d) like nn.Linear.weight: multiply by its transpose.",
                lambda t, E, W, b: E[t] @ W + b,
            ),
            Mistake("head-bias-missing",
                    "the output head's bias is missing (logits = x W^T + b).", lambda t, E, W, b: E[t] @ W.T),
            Mistake(
                "embedding-as-head", "the logits use the embedding table instead of the output head's weight.",
                lambda t, E, W, b: E[t] @ E.T + b,
            ),
            Mistake(
                "softmax-applied", "softmax was applied: logits are the unnormalised scores, before any softmax.",
                lambda t, E, W, b: torch.softmax(E[t] @ W.T + b, dim=-1),
            ),
        ],
        names=("logits",),
    )


def _pairs_cases() -> list[Case]:
    g = case_generator(2)
    # Distinct ids in each case, so that every wrong shift gives different values.
    return [
        Case(label, {"tokens": torch.randperm(100, generator=g)[: torch.Size(shape).numel()].reshape(shape)})
        for label, shape in [("batched", (3, 6)), ("unbatched", (7,)), ("two leading dims", (2, 2, 5)),
                             ("shortest sequence, n = 2", (4, 2))]
    ]


def _next_token_pairs(tokens):
    return tokens[..., :-1], tokens[..., 1:]


@exercise("01.2", title="Inputs and next-token targets", points=2)
def check_next_token_pairs(answer) -> int:
    return check_function(
        answer,
        _next_token_pairs,
        _pairs_cases(),
        [
            Mistake("inputs-targets-swapped", "inputs and targets are swapped: targets are the tokens that come next.",
                    lambda t: (t[..., 1:], t[..., :-1])),
            Mistake("not-shifted",
                    "nothing is shifted: the target at position t must be the token at t + 1.", lambda t: (t, t)),
            Mistake("shift-on-batch-axis", "the shift runs along the batch axis: shift along the last (sequence) axis.",
                    lambda t: (t[:-1], t[1:])),
            Mistake("shift-by-two", "the shift is by two positions: predict the very next token.",
                    lambda t: (t[..., :-2], t[..., 2:])),
        ],
        names=("inputs", "targets"),
    )


def _lm_parameter_count(vocab_size, d_model, tie_weights):
    with shapes_only():  # shapes but no storage: counting 40M parameters is instant
        embedding = nn.Embedding(vocab_size, d_model)
        head = nn.Linear(d_model, vocab_size)
    if tie_weights:
        head.weight = embedding.weight
    # Module.parameters() yields a shared tensor once, as a tied model stores it once.
    return sum(p.numel() for p in nn.ModuleList([embedding, head]).parameters())


@exercise("01.3", title="Parameters of the embedding and the output head", points=1)
def check_lm_parameter_count(answer) -> int:
    cases = [
        Case("tied" if tie else "untied", {"vocab_size": v, "d_model": d, "tie_weights": tie})
        for v, d, tie in [(11, 4, False), (11, 4, True), (50257, 768, False), (50257, 768, True), (3, 9, False)]
    ]
    return check_function(
        answer,
        _lm_parameter_count,
        cases,
        [
            Mistake("head-bias-not-counted", "the output head's bias (|V| numbers) is not counted.",
                    lambda v, d, tie: v * d * (1 if tie else 2)),
            Mistake("tied-counted-twice", "with tied weights the shared |V| x d matrix is stored once: count it once.",
                    lambda v, d, tie: 2 * v * d + v),
            Mistake("head-bias-of-size-d", "the head's bias has one number per token of the vocabulary (|V|), not d.",
                    lambda v, d, tie: v * d * (1 if tie else 2) + d),
        ],
        names=("count",),
    )
