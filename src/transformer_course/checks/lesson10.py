"""Checks for lesson 10, generation: one KV-cached attention step, top-k sampling with a temperature, and (a stretch)
one cached step of a stack of multi-head layers."""

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
from transformer_course.masking import causal_mask
from transformer_course.multihead import MultiHeadAttention, merge_heads, split_heads
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
                Mistake("cache-wrong-axis",
                        "the cache is appended along the wrong axis: keys and values are (B, n, d), add the new "
                        "position on axis 1.", lambda *a: _step(*a, axis=2)),
                Mistake("offset-not-advanced",
                        "the positional offset is not advanced: the new token sits at `position`, so add "
                        "pe[position], not pe[0].", lambda *a: _step(*a, offset=False)),
                Mistake("cache-ignored",
                        "the new query attends only to itself: it must attend over the cached keys and values too.",
                        lambda *a: _step(*a, use_cache=False)),
                Mistake("not-scaled", "the scores are not scaled by 1/sqrt(d).", lambda *a: _step(*a, scale=False)),
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


SAMPLING_MISTAKES = {  # rule of _distribution -> the mistake
    "k+1": Mistake("keeps-k-plus-1", "top-k keeps k + 1 tokens: keep exactly the k largest logits."),
    "temperature after softmax": Mistake(
        "temperature-after-softmax", "the temperature is applied after the softmax, where it has no effect after "
        "renormalising: divide the logits by it before the softmax."),
    "temperature multiplies": Mistake("temperature-multiplies",
                                      "the logits are multiplied by the temperature: divide them by it."),
    "masked with 0": Mistake("masked-with-zero", "the dropped tokens' logits are set to 0 instead of -inf, so they "
                             "keep some probability."),
    "no top-k": Mistake("no-top-k", "every token can be drawn: keep only the k largest logits."),
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
    failure, frequencies = None, []
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
        frequencies.append((logits, k, temperature, empirical))
        expected = _distribution(logits, k, temperature)
        distance = _total_variation(empirical, expected)
        if distance > TOLERANCE and failure is None:
            failure = (f"for {case.describe()} the token frequencies are off by {distance:.3f} (total variation; "
                       f"at most {TOLERANCE} allowed):\n    expected {_fmt(expected)}\n    got      {_fmt(empirical)}")
    if failure is not None:
        raise CheckFailed(failure, mistake=_sampling_mistake(frequencies))
    return len(cases)


def _total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * (p - q).abs().sum().item()


def _sampling_mistake(frequencies: list[tuple]) -> Mistake | None:
    """The mistake whose distribution the learner's token frequencies match, within TOLERANCE, on every case (the
    nearest if several do), or None: a mistake that explains one case only is not named."""
    worst = {rule: max(_total_variation(empirical, _distribution(logits, k, temperature, rule))
                       for logits, k, temperature, empirical in frequencies) for rule in SAMPLING_MISTAKES}
    rule = min(worst, key=worst.get)
    return SAMPLING_MISTAKES[rule] if worst[rule] <= TOLERANCE else None


def _fmt(p: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in p.tolist()) + "]"



# --- 10.3 (stretch) one cached step of a stack of multi-head layers ---------------------------------


def _stack_cases() -> list[Case]:
    """Each case runs a random stack on a whole random sequence, the full computation with a causal mask and no
    cache; the answer gets the last token's input and the keys and values of all the earlier tokens."""
    g = case_generator(16)

    def case(label, B, n_past, d, h, L, dtype=torch.float32):
        torch.manual_seed(case_seed(1000 + 100 * L + 10 * h + n_past))
        layers = nn.ModuleList(MultiHeadAttention(d, h) for _ in range(L)).to(dtype)
        sequence = torch.randn(B, n_past + 1, d, generator=g, dtype=dtype)  # the new token last
        keys, values, x = [], [], sequence
        with torch.no_grad():
            for layer in layers:
                keys.append(split_heads(layer.W_k(x), h)[:, :, :n_past])  # (B, h, n_past, d_h): earlier tokens
                values.append(split_heads(layer.W_v(x), h)[:, :, :n_past])
                x = x + layer(x, mask=causal_mask(n_past + 1))[0]
        return Case(label, {"x": sequence[:, -1:], "layers": layers, "cache_k": torch.stack(keys),
                            "cache_v": torch.stack(values)})

    return [case("3 layers, 2 heads, 4 cached positions", 2, 4, 8, 2, 3),
            case("2 layers, 4 heads, empty caches (first token)", 2, 0, 8, 4, 2),
            case("1 layer, 1 head, 5 cached", 1, 5, 6, 1, 1),
            case("float64, 2 layers, 3 heads, 3 cached", 3, 3, 6, 3, 2, torch.float64)]


def _stack_step(x, layers, cache_k, cache_v, *, keys_from="layer input", residual=True, itself=True,
                scale="head", w_o=True, cache_of="own layer", update=True):
    """The reference step (every default), and with one argument changed, each classic mistake."""
    keys, values, stream = [], [], x
    for i, layer in enumerate(layers):
        h = layer.num_heads
        source = x if keys_from == "stack input" else stream
        q = split_heads(layer.W_q(stream), h)  # (B, h, 1, d_h)
        k_new, v_new = split_heads(layer.W_k(source), h), split_heads(layer.W_v(source), h)
        past = 0 if cache_of == "first layer" else i
        k = torch.cat([cache_k[past], k_new], dim=2)  # (B, h, n_past + 1, d_h)
        v = torch.cat([cache_v[past], v_new], dim=2)
        attend_k, attend_v = (k, v) if itself else (cache_k[past], cache_v[past])
        width = q.shape[-1] if scale == "head" else stream.shape[-1]
        heads = torch.softmax(q @ attend_k.transpose(-2, -1) / math.sqrt(width), dim=-1) @ attend_v
        out = layer.W_o(merge_heads(heads)) if w_o else merge_heads(heads)
        stream = stream + out if residual else out
        keys.append(k)
        values.append(v)
    if not update:
        return stream, cache_k, cache_v
    return stream, torch.stack(keys), torch.stack(values)


@exercise("10.3", title="Stretch: a cached step through several multi-head layers", points=3)
def check_cached_stack_step(answer) -> int:
    with torch.no_grad():
        return check_function(
            answer,
            _stack_step,
            _stack_cases(),
            [
                Mistake("layers-read-input",
                        "every layer computes the new token's key and value from the stack's input x: layer l "
                        "reads the output of layer l - 1, and so must its keys and values (and its query).",
                        lambda *a: _stack_step(*a, keys_from="stack input")),
                Mistake("residual-missing",
                        "the residual connection is missing: each layer adds its attention output to its input, "
                        "x = x + W_o(...).", lambda *a: _stack_step(*a, residual=False)),
                Mistake("new-token-not-cached",
                        "the new token does not attend to itself: append its key and value to the cache before "
                        "computing the scores.", lambda *a: _stack_step(*a, itself=False)),
                Mistake("scaled-by-d-model",
                        "the scores are divided by sqrt(d), the model's width: each head divides by sqrt(d_h), "
                        "its own width.", lambda *a: _stack_step(*a, scale="model")),
                Mistake("w-o-missing",
                        "the heads are concatenated but not mixed by W_o.", lambda *a: _stack_step(*a, w_o=False)),
                Mistake("first-layer-cache",
                        "every layer reads the first layer's cache: layer l attends over cache_k[l], cache_v[l].",
                        lambda *a: _stack_step(*a, cache_of="first layer")),
                Mistake("caches-not-updated",
                        "the caches returned are the ones given: return them with the new token's keys and values "
                        "appended, (L, B, h, n_past + 1, d_h).", lambda *a: _stack_step(*a, update=False)),
            ],
            names=("output", "cache_k", "cache_v"),
        )
