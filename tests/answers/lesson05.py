"""Answers to lesson 05's exercise: known-wrong ones with the hint the check must give, and correct ones
written differently from the solution, which the check must accept."""

import math

import torch

from transformer_course.multihead import merge_heads, split_heads


def source_mask(lens, n_enc):
    return (torch.arange(n_enc) < lens[:, None])[:, None, :]


def cross_with_4d_mask(x, mem, lens, mha):
    mask = torch.arange(mem.shape[1]).expand(len(lens), 1, 1, -1) < lens.view(-1, 1, 1, 1)
    return mha(x, mem, mem, mask=mask)


def cross_with_additive_mask(x, mem, lens, mha):
    blocked = ~source_mask(lens, mem.shape[1])
    additive = torch.zeros(blocked.shape, dtype=x.dtype).masked_fill(blocked, float("-inf"))
    return mha(x, key=mem, mask=additive)


WRONG = {
    "roles swapped": (lambda x, mem, lens, mha: mha(mem, x, x), "roles are swapped"),
    "no mask": (lambda x, mem, lens, mha: mha(x, mem, mem), "not masked"),
    "inverted": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=~source_mask(lens, mem.shape[1])), "inverted"),
    "causal": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=source_mask(lens, mem.shape[1])
                                             & torch.ones(x.shape[1], mem.shape[1]).tril().bool()), "no causal mask"),
    "decoder length": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=source_mask(lens.clamp_max(x.shape[1]),
                                                                                   x.shape[1])), "decoder's length"),
    "weights dropped": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=source_mask(lens, mem.shape[1]))[0],
                        "expected a tuple"),
    # the keys counted up to the longest source, not to n_enc: right only when some source fills the memory
    "mask over the longest source": (lambda x, mem, lens, mha: mha(x, mem, mem,
                                                                   mask=source_mask(lens, int(lens.max()))),
                                     "over the longest source"),
    "one padded position let through": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=(
        torch.arange(mem.shape[1]) <= lens[:, None])[:, None, :]), "wrong result for"),
    "values from the decoder": (lambda x, mem, lens, mha: mha(x, mem, x, mask=source_mask(lens, mem.shape[1])),
                                "your code raised"),
    "a (B, n_enc) mask": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=torch.arange(mem.shape[1]) < lens[:, None]),
                          "your code raised"),
    # (1, B, 1, n_enc): the batch axis where the heads' is, which broadcasts only when B == h
    "batch axis in the heads' place": (lambda x, mem, lens, mha: mha(x, mem, mem, mask=source_mask(lens, mem.shape[1])[
        None]), "your code raised"),
}
RIGHT = {
    "4-D mask": cross_with_4d_mask,
    "additive mask, value defaults to key": cross_with_additive_mask,
}



# --- 05.2 cached_cross_attention(decoder_x, memory_k, memory_v, src_valid_lens, mha) --------------------------


def cached(x, k, v, lens, mha, mistake=None):
    """Written out by hand, with one classic mistake on request."""
    h, n_enc, d_h = k.shape[-3:]
    if mistake == "reproject":
        k = split_heads(mha.W_k(merge_heads(k)), h)
        v = split_heads(mha.W_v(merge_heads(v)), h)
    if mistake == "swap":
        k, v = v, k
    q = split_heads(x if mistake == "no W_q" else mha.W_q(x), h)
    scale = {"no scale": 1.0, "sqrt(d)": math.sqrt(x.shape[-1]), "d_h": d_h}.get(mistake, math.sqrt(d_h))
    scores = q @ k.transpose(-2, -1) / scale
    real = torch.arange(n_enc) <= lens[:, None] if mistake == "<=" else torch.arange(n_enc) < lens[:, None]
    if mistake == "longest":  # the keys counted up to the longest source, not to n_enc
        real = torch.arange(int(lens.max())) < lens[:, None]
    if mistake == "inverted":
        real = ~real
    if mistake == "causal":
        real = real[:, None, :] & (torch.arange(n_enc) <= torch.arange(x.shape[1])[:, None])  # (B, n_dec, n_enc)
    if mistake == "no head axis":
        mask = real[:, None]
    else:
        mask = real[:, None, None, :] if mistake == "longest" else real.view(len(lens), 1, -1, n_enc)
    if mistake not in ("no mask", "after softmax"):
        scores = scores.masked_fill(~mask, 0.0 if mistake == "zero" else float("-inf"))
    weights = scores.softmax(dim=-2 if mistake == "softmax over queries" else -1)
    if mistake == "after softmax":  # the padded keys' weights zeroed, the rest not renormalised
        weights = weights * mask
    heads = weights @ v
    merged = heads.reshape(heads.shape[0], heads.shape[2], -1) if mistake == "reshape" else merge_heads(heads)
    return (merged if mistake == "no W_o" else mha.W_o(merged)), weights


def cached_with_einsum(x, k, v, lens, mha):
    """einsum over named axes, an additive mask, the heads merged by permute."""
    B, h, n_enc, d_h = k.shape
    q = mha.W_q(x).view(B, -1, h, d_h)  # (B, n_dec, h, d_h)
    scores = torch.einsum("bqhe,bhke->bhqk", q, k) / d_h**0.5
    blocked = torch.arange(n_enc).expand(B, n_enc) >= lens.unsqueeze(-1)  # (B, n_enc)
    additive = torch.zeros(B, 1, 1, n_enc, dtype=x.dtype).masked_fill(blocked.view(B, 1, 1, n_enc), float("-inf"))
    weights = torch.softmax(scores + additive, dim=-1)
    out = torch.einsum("bhqk,bhke->bqhe", weights, v).reshape(B, -1, h * d_h)
    return mha.W_o(out), weights


def cached_with_sdpa(x, k, v, lens, mha):
    """PyTorch's fused attention for the output; the weights computed beside it, in float64."""
    h = k.shape[1]
    q = split_heads(mha.W_q(x), h)
    mask = (torch.arange(k.shape[2]) < lens.view(-1, 1, 1, 1))  # (B, 1, 1, n_enc)
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = (q.double() @ k.double().mT) / math.sqrt(k.shape[-1])
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1).to(x.dtype)
    return mha.W_o(merge_heads(heads)), weights


def cached_head_by_head(x, k, v, lens, mha):
    """One sequence and one head at a time, the padded keys sliced away rather than masked."""
    B, h, n_enc, d_h = k.shape
    q = split_heads(mha.W_q(x), h)
    weights = torch.zeros(B, h, x.shape[1], n_enc, dtype=x.dtype)
    heads = torch.zeros(B, h, x.shape[1], d_h, dtype=x.dtype)
    for b in range(B):
        n = int(lens[b])
        for i in range(h):
            w = torch.softmax(q[b, i] @ k[b, i, :n].T / math.sqrt(d_h), dim=-1)  # (n_dec, n)
            weights[b, i, :, :n] = w
            heads[b, i] = w @ v[b, i, :n]
    return mha.W_o(merge_heads(heads)), weights


WRONG_CACHED = {
    "re-projected": (lambda *a: cached(*a, mistake="reproject"), "projected already"),
    "keys and values swapped": (lambda *a: cached(*a, mistake="swap"), "keys and values are swapped"),
    "queries not projected": (lambda *a: cached(*a, mistake="no W_q"), "queries are not projected"),
    "no scale": (lambda *a: cached(*a, mistake="no scale"), "not scaled"),
    "scaled by sqrt(d_model)": (lambda *a: cached(*a, mistake="sqrt(d)"), "sqrt(d_model)"),
    "no mask": (lambda *a: cached(*a, mistake="no mask"), "not masked"),
    "inverted": (lambda *a: cached(*a, mistake="inverted"), "inverted"),
    "no head axis": (lambda *a: cached(*a, mistake="no head axis"), "no head axis"),
    "causal": (lambda *a: cached(*a, mistake="causal"), "no causal mask"),
    "no W_o": (lambda *a: cached(*a, mistake="no W_o"), "W_o is missing"),
    "merged by reshape": (lambda *a: cached(*a, mistake="reshape"), "reshape without a transpose"),
    "weights dropped": (lambda *a: cached(*a)[0], "expected a tuple"),
    "softmax over the queries": (lambda *a: cached(*a, mistake="softmax over queries"), "over the wrong axis"),
    "scaled by d_h, not its root": (lambda *a: cached(*a, mistake="d_h"), "divided by d_h"),
    "one padded position let through": (lambda *a: cached(*a, mistake="<="), "wrong result for"),
    "padding masked with 0": (lambda *a: cached(*a, mistake="zero"), "wrong result for"),
    "mask applied after the softmax": (lambda *a: cached(*a, mistake="after softmax"), "wrong result for"),
    "mask over the longest source": (lambda *a: cached(*a, mistake="longest"), "over the longest source"),
}
RIGHT_CACHED = {
    "by hand": cached,
    "einsum, additive mask": cached_with_einsum,
    "F.scaled_dot_product_attention": cached_with_sdpa,
    "head by head, padding sliced away": cached_head_by_head,
}

EXERCISES = {"05.1": (WRONG, RIGHT), "05.2": (WRONG_CACHED, RIGHT_CACHED)}

#: The mistake each new wrong answer must be named by (None: no name, the case and the difference only).
MISTAKES = {
    "05.1": {"mask over the longest source": "mask-over-longest-source", "one padded position let through": None,
             "values from the decoder": None, "a (B, n_enc) mask": None, "batch axis in the heads' place": None},
    "05.2": {"softmax over the queries": "softmax-wrong-axis", "scaled by d_h, not its root": "scaled-by-d-h-not-root",
             "one padded position let through": None, "padding masked with 0": None,
             "mask applied after the softmax": None,
             "mask over the longest source": "mask-over-longest-source"},
}
