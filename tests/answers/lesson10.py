"""Answers to lesson 10's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import math

import torch

# --- 10.1 cached_step(x, position, pe, W_q, W_k, W_v, cache_k, cache_v) -----------------------------


def step(x, position, pe, W_q, W_k, W_v, cache_k, cache_v, mistake=None):
    h = x + pe[0 if mistake == "offset" else position]
    k_new, v_new = W_k(h), W_v(h)
    axis = 2 if mistake == "axis" else 1
    cache_k, cache_v = torch.cat([cache_k, k_new], axis), torch.cat([cache_v, v_new], axis)
    keys, values = (k_new, v_new) if mistake == "no cache" else (cache_k, cache_v)
    scale = 1.0 if mistake == "no scale" else math.sqrt(x.shape[-1])
    weights = torch.softmax(W_q(h) @ keys.mT / scale, -1)
    return weights @ values, cache_k, cache_v


def step_with_sdpa(x, position, pe, W_q, W_k, W_v, cache_k, cache_v):
    h = x + pe[position : position + 1]
    cache_k = torch.cat((cache_k, W_k(h)), dim=-2)
    cache_v = torch.cat((cache_v, W_v(h)), dim=-2)
    return torch.nn.functional.scaled_dot_product_attention(W_q(h), cache_k, cache_v), cache_k, cache_v


WRONG_STEP = {
    "wrong axis": (lambda *a: step(*a, mistake="axis"), "appended along the wrong axis"),
    "offset not advanced": (lambda *a: step(*a, mistake="offset"), "offset is not advanced"),
    "cache ignored": (lambda *a: step(*a, mistake="no cache"), "attends only to itself"),
    "no scale": (lambda *a: step(*a, mistake="no scale"), "not scaled"),
    "output only": (lambda *a: step(*a)[0], "expected a tuple"),
    "cache returned without the new position": (lambda x, p, pe, W_q, W_k, W_v, ck, cv: (
        step(x, p, pe, W_q, W_k, W_v, ck, cv)[0], ck, cv), "wrong result for"),
    "positional encoding left out": (lambda x, p, pe, *a: step(x, p, torch.zeros_like(pe), *a), "wrong result for"),
}
RIGHT_STEP = {"explicit": step, "F.scaled_dot_product_attention": step_with_sdpa}

# --- 10.2 sample_top_k(logits, k, temperature, generator) -----------------------------------------


def sample(logits, k, temperature, generator, mistake=None):
    if mistake == "after softmax":
        probs = torch.softmax(logits, -1) / temperature
    else:
        scaled = logits * temperature if mistake == "multiply" else logits / temperature
        keep = k + 1 if mistake == "k+1" else k
        kth = scaled.topk(keep, dim=-1).values[..., -1:]
        fill = 0.0 if mistake == "zero" else float("-inf")
        probs = torch.softmax(scaled.masked_fill(scaled < kth, fill), -1)
    if mistake == "after softmax":
        kth = probs.topk(k, dim=-1).values[..., -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_by_gumbel(logits, k, temperature, generator):
    """The Gumbel-max trick over the top k: the same distribution, sampled without multinomial."""
    values, indices = (logits / temperature).topk(k, dim=-1)
    u = torch.rand(values.shape, generator=generator).clamp_min(1e-20)
    return indices.gather(-1, (values - torch.log(-torch.log(u))).argmax(-1, keepdim=True)).squeeze(-1)


def sample_by_sorting(logits, k, temperature, generator):
    order = logits.argsort(-1, descending=True)[..., :k]
    probs = torch.softmax(logits.gather(-1, order) / temperature, -1)
    return order.gather(-1, torch.multinomial(probs, 1, generator=generator)).squeeze(-1)


WRONG_SAMPLE = {
    "k+1": (lambda *a: sample(*a, mistake="k+1"), "keeps k + 1"),
    "temperature after softmax": (lambda *a: sample(*a, mistake="after softmax"), "after the softmax"),
    "temperature multiplies": (lambda *a: sample(*a, mistake="multiply"), "multiplied by the temperature"),
    "masked with 0": (lambda *a: sample(*a, mistake="zero"), "set to 0 instead of -inf"),
    "greedy": (lambda logits, k, t, g: logits.argmax(-1), "token frequencies are off"),
    "probabilities returned": (lambda logits, k, t, g: torch.softmax(logits, -1), "expected integer token ids"),
    "softmax over the samples": (lambda logits, k, t, g: torch.multinomial(torch.softmax(
        (logits / t).masked_fill(logits < logits.topk(k, -1).values[..., -1:], float("-inf")), 0), 1,
        generator=g).squeeze(-1), "your code raised RuntimeError"),  # a dropped token's column is all -inf: NaN
    "k + 1 kept when k = 3 only": (lambda logits, k, t, g: sample(logits, k, t, g, mistake="k+1" if k == 3 else None),
                                   "token frequencies are off"),
}
#: the mistake each wrong answer must be named by, or None: "k + 1 kept when k = 3 only" is right on the other cases,
#: where keeping k + 1 tokens is not, so that mistake does not explain it.
MISTAKES = {"10.2": {"k+1": "keeps-k-plus-1", "temperature after softmax": "temperature-after-softmax",
                     "temperature multiplies": "temperature-multiplies", "masked with 0": "masked-with-zero",
                     "greedy": None, "probabilities returned": None, "softmax over the samples": None,
                     "k + 1 kept when k = 3 only": None}}
RIGHT_SAMPLE = {"multinomial": sample, "Gumbel-max": sample_by_gumbel, "sorted top-k": sample_by_sorting}

EXERCISES = {"10.1": (WRONG_STEP, RIGHT_STEP), "10.2": (WRONG_SAMPLE, RIGHT_SAMPLE)}

# --- 10.3 cached_stack_step(x, layers, cache_k, cache_v) ---------------------------------------------


def stack_step(x, layers, cache_k, cache_v, mistake=None):
    keys, values, stream = [], [], x
    for i, layer in enumerate(layers):
        source = x if mistake == "stack input" else stream
        q, k, v = (t.view(len(x), 1, layer.num_heads, -1).transpose(1, 2)  # (B, 1, d) -> (B, h, 1, d_h)
                   for t in (layer.W_q(stream), layer.W_k(source), layer.W_v(source)))
        past = 0 if mistake == "first cache" else i
        k, v = torch.cat([cache_k[past], k], 2), torch.cat([cache_v[past], v], 2)
        attend_k, attend_v = (cache_k[past], cache_v[past]) if mistake == "not itself" else (k, v)
        scale = math.sqrt(x.shape[-1] if mistake == "sqrt(d)" else q.shape[-1])
        out = (torch.softmax(q @ attend_k.mT / scale, -1) @ attend_v).transpose(1, 2).reshape(len(x), 1, -1)
        out = out if mistake == "no W_o" else layer.W_o(out)
        stream = out if mistake == "no residual" else stream + out
        keys.append(k)
        values.append(v)
    return stream, torch.stack(keys), torch.stack(values)


def stack_step_with_kv_cache(x, layers, cache_k, cache_v):
    """The package's own cache: fill a KVCache per layer with the given keys and values, then call the layer."""
    from transformer_course.multihead import KVCache

    keys, values = [], []
    for layer, past_k, past_v in zip(layers, cache_k, cache_v, strict=True):
        cache = KVCache()
        cache.append(past_k, past_v)
        x = x + layer(x, cache=cache)[0]
        keys.append(cache.keys)
        values.append(cache.values)
    return x, torch.stack(keys), torch.stack(values)


def stack_step_with_sdpa(x, layers, cache_k, cache_v):
    new_k, new_v = [], []
    for layer, past_k, past_v in zip(layers, cache_k, cache_v, strict=True):
        q, k, v = (W(x).unflatten(-1, (layer.num_heads, -1)).transpose(-3, -2)
                   for W in (layer.W_q, layer.W_k, layer.W_v))
        k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
        heads = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + layer.W_o(heads.transpose(-3, -2).flatten(-2))
        new_k.append(k)
        new_v.append(v)
    return x, torch.stack(new_k), torch.stack(new_v)


def stack_step_without_caches(x, layers, cache_k, cache_v):
    """Returns the old caches: right output, caches not updated."""
    return stack_step(x, layers, cache_k, cache_v)[0], cache_k, cache_v


WRONG_STACK = {
    "keys from the stack input": (lambda *a: stack_step(*a, mistake="stack input"), "from the stack's input x"),
    "no residual": (lambda *a: stack_step(*a, mistake="no residual"), "residual connection is missing"),
    "not itself": (lambda *a: stack_step(*a, mistake="not itself"), "does not attend to itself"),
    "sqrt(d)": (lambda *a: stack_step(*a, mistake="sqrt(d)"), "divided by sqrt(d), the model's width"),
    "no W_o": (lambda *a: stack_step(*a, mistake="no W_o"), "not mixed by W_o"),
    "first layer's cache": (lambda *a: stack_step(*a, mistake="first cache"), "reads the first layer's cache"),
    "caches not updated": (stack_step_without_caches, "the caches returned are the ones given"),
    "output only": (lambda *a: stack_step(*a)[0], "expected a tuple"),
}
RIGHT_STACK = {"explicit heads": stack_step, "KVCache and the layer": stack_step_with_kv_cache,
               "F.scaled_dot_product_attention": stack_step_with_sdpa}

EXERCISES["10.3"] = (WRONG_STACK, RIGHT_STACK)
