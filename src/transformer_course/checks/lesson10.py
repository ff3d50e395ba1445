"""Checks for lesson 10, generation: one KV-cached attention step, and top-k sampling with a temperature."""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_course.checks.core import (
    Case,
    CheckFailed,
    Mistake,
    call_answer,
    case_generator,
    case_seed,
    check_function,
    exercise,
    require_callable,
)
from transformer_course.positional import sinusoidal_encoding

# --- 10.1 one decoding step with a key-value cache ----------------------------------------------------


def _step_cases() -> list[Case]:
    g = case_generator(14)

    def case(label, B, n_past, d, dtype=torch.float32):
        torch.manual_seed(case_seed(B * 10 + n_past))
        linears = [nn.Linear(d, d).to(dtype) for _ in range(3)]
        return Case(label, {
            "x": torch.randn(B, 1, d, generator=g, dtype=dtype),
            "position": n_past,
            "pe": sinusoidal_encoding(32, d, dtype=dtype),
            "W_q": linears[0], "W_k": linears[1], "W_v": linears[2],
            "cache_k": torch.randn(B, n_past, d, generator=g, dtype=dtype),
            "cache_v": torch.randn(B, n_past, d, generator=g, dtype=dtype),
        })

    return [case("B=2, 4 cached positions", 2, 4, 8), case("empty cache (first step)", 3, 0, 8),
            case("B=1, 9 cached", 1, 9, 6), case("float64", 2, 3, 4, torch.float64)]


def _step(x, position, pe, W_q, W_k, W_v, cache_k, cache_v, *, offset=True, axis=1, use_cache=True, scale=True):
    """The reference step, and with one argument changed, each classic mistake."""
    h = x + pe[position if offset else 0]
    k_all = torch.cat([cache_k, W_k(h)], dim=axis)
    v_all = torch.cat([cache_v, W_v(h)], dim=axis)
    keys, values = (k_all, v_all) if use_cache else (W_k(h), W_v(h))
    scores = W_q(h) @ keys.transpose(-2, -1) / (math.sqrt(x.shape[-1]) if scale else 1.0)
    return scores.softmax(-1) @ values, k_all, v_all


@exercise("10.1", title="One decoding step with a key-value cache", points=3)
def check_cached_step(answer) -> int:
    with torch.no_grad():
        return check_function(
            answer,
            _step,
            _step_cases(),
            [
                Mistake("the cache is appended along the wrong axis: keys and values are (B, n, d), add the new "
                        "position on axis 1.", lambda *a: _step(*a, axis=2)),
                Mistake("the positional offset is not advanced: the new token sits at `position`, so add "
                        "pe[position], not pe[0].", lambda *a: _step(*a, offset=False)),
                Mistake("the new query attends only to itself: it must attend over the cached keys and values too.",
                        lambda *a: _step(*a, use_cache=False)),
                Mistake("the scores are not scaled by 1/sqrt(d).", lambda *a: _step(*a, scale=False)),
            ],
            names=("output", "cache_k", "cache_v"),
        )


# --- 10.2 top-k sampling with a temperature, checked statistically -----------------------------------

SAMPLES = 40_000
TOLERANCE = 0.02  # total variation; with 40,000 draws the sampling noise is below 0.01


def _distribution(logits: torch.Tensor, k: int, temperature: float, rule: str = "right") -> torch.Tensor:
    """The next-token distribution of one row of ``logits`` ``(|V|,)`` under a rule (right or a mistake)."""
    keep = k + 1 if rule == "k+1" else k
    if rule == "temperature after softmax":  # softmax(l)/T renormalised is softmax(l): T has no effect
        temperature = 1.0
    if rule == "temperature multiplies":
        temperature = 1.0 / temperature
    scaled = logits / temperature
    top = scaled.topk(min(keep, len(logits))).indices
    kept = torch.zeros_like(logits, dtype=torch.bool)
    kept[top] = True
    if rule == "masked with 0":  # dropped tokens get logit 0 instead of -inf
        return torch.softmax(scaled.masked_fill(~kept, 0.0), -1)
    if rule == "no top-k":
        return torch.softmax(scaled, -1)
    return torch.softmax(scaled.masked_fill(~kept, float("-inf")), -1)


SAMPLING_MISTAKES = {
    "k+1": "top-k keeps k + 1 tokens: keep exactly the k largest logits.",
    "temperature after softmax": "the temperature is applied after the softmax, where it has no effect after "
                                 "renormalising: divide the logits by it before the softmax.",
    "temperature multiplies": "the logits are multiplied by the temperature: divide them by it.",
    "masked with 0": "the dropped tokens' logits are set to 0 instead of -inf, so they keep some probability.",
    "no top-k": "every token can be drawn: keep only the k largest logits.",
}


@exercise("10.2", title="Top-k sampling with a temperature", points=2)
def check_top_k_sampling(answer) -> int:
    require_callable(answer)
    def case(label: str, logits: list[float], k: int, temperature: float) -> Case:
        # SAMPLES copies of one row of logits: one draw each, so the token frequencies estimate the distribution.
        return Case(label, {"logits": torch.tensor(logits).expand(SAMPLES, -1).clone(), "k": k,
                            "temperature": temperature, "generator": case_generator(15)})

    cases = [
        case("k=3, T=0.5", [2.0, 1.5, 0.3, 1.0, -0.5, 0.8], 3, 0.5),
        case("k=2, T=2", [0.5, 1.0, 0.9, -1.0, 0.2], 2, 2.0),
        case("k=4, T=1", [3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.0], 4, 1.0),
    ]
    for case in cases:
        logits, k, temperature = case.args["logits"][0], case.args["k"], case.args["temperature"]
        got = call_answer(answer, case)
        if type(got) is not torch.Tensor or got.shape != (SAMPLES,) or got.is_floating_point():
            what = (f"shape {tuple(got.shape)}, dtype {got.dtype}" if isinstance(got, torch.Tensor)
                    else type(got).__name__)
            raise CheckFailed(f"for {case.describe()} expected integer token ids of shape ({SAMPLES},), got {what}")
        if got.min() < 0 or got.max() >= len(logits):
            raise CheckFailed(f"for {case.describe()} token ids must lie in [0, {len(logits)}), got "
                              f"{int(got.min())}..{int(got.max())}")
        empirical = torch.bincount(got, minlength=len(logits)).float() / SAMPLES
        expected = _distribution(logits, k, temperature)
        distance = 0.5 * (empirical - expected).abs().sum().item()
        if distance > TOLERANCE:
            hint = min(((0.5 * (empirical - _distribution(logits, k, temperature, rule)).abs().sum().item(), h)
                        for rule, h in SAMPLING_MISTAKES.items()), key=lambda pair: pair[0])
            raise CheckFailed(
                f"for {case.describe()} the token frequencies are off by {distance:.3f} (total variation; "
                f"at most {TOLERANCE} allowed):\n    expected {_fmt(expected)}\n    got      {_fmt(empirical)}",
                mistake=hint[1] if hint[0] <= TOLERANCE else None,
            )
    return len(cases)


def _fmt(p: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in p.tolist()) + "]"
