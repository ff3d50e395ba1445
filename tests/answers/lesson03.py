"""Answers to lesson 03's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import math

import torch
import torch.nn.functional as F

# --- 03.1 causal_mask(n) ----------------------------------------------------------------------------

WRONG_CAUSAL = {
    "inverted": (lambda n: torch.ones(n, n).triu(1).bool(), "polarity is inverted"),
    "no diagonal": (lambda n: torch.ones(n, n).tril(-1).bool(), "diagonal is excluded"),
    "future": (lambda n: torch.ones(n, n).triu().bool(), "see the future"),
    "additive": (lambda n: torch.zeros(n, n).masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf")),
                 "additive"),
    "0/1 ints": (lambda n: torch.ones(n, n, dtype=torch.long).tril(), "0/1 numbers"),
    "all allowed": (lambda n: torch.ones(n, n, dtype=torch.bool), "values differ"),
    "float tril": (lambda n: torch.tril(torch.ones(n, n)), "0/1 numbers"),
    "one position ahead": (lambda n: torch.ones(n, n).tril(1).bool(), "next position"),
    "strict comparison, key before query": (lambda n: torch.arange(n)[None, :] < torch.arange(n)[:, None],
                                            "diagonal is excluded"),
    "comparison the wrong way round": (lambda n: torch.arange(n)[:, None] <= torch.arange(n)[None, :],
                                       "see the future"),
}
RIGHT_CAUSAL = {
    "arange comparison": lambda n: torch.arange(n)[None, :] <= torch.arange(n)[:, None],
    "loops": lambda n: torch.tensor([[j <= i for j in range(n)] for i in range(n)], dtype=torch.bool),
    "not triu": lambda n: ~torch.ones(n, n, dtype=torch.bool).triu(1),
    "triu equals 0": lambda n: torch.triu(torch.ones(n, n), diagonal=1) == 0,
}

# --- 03.2 padding_mask(valid_lens, n_k) ---------------------------------------------------------------


def key_mask(valid_lens, n_k):
    return torch.arange(n_k) < valid_lens[:, None]


WRONG_PADDING = {
    "no query axis": (key_mask, "query axis is missing"),
    "inverted": (lambda lens, n_k: ~key_mask(lens, n_k)[:, None], "polarity is inverted"),
    "off by one": (lambda lens, n_k: (torch.arange(n_k) <= lens[:, None])[:, None], "off by one"),
    "axes swapped": (lambda lens, n_k: key_mask(lens, n_k)[:, :, None], "axes are swapped"),
    "additive": (lambda lens, n_k: torch.zeros(len(lens), 1, n_k).masked_fill(~key_mask(lens, n_k)[:, None],
                                                                              float("-inf")), "expected dtype"),
    "lengths not unsqueezed": (lambda lens, n_k: (torch.arange(n_k) < lens)[None, None],
                               "your code raised RuntimeError"),
    "square (B, n_k, n_k)": (lambda lens, n_k: key_mask(lens, n_k)[:, None].expand(-1, n_k, -1), "expected shape"),
    "0/1 floats": (lambda lens, n_k: key_mask(lens, n_k)[:, None].float(), "0/1 numbers"),
    "loop filling the padding": (lambda lens, n_k: padding_by_loop(lens, n_k, fill_padding=True),
                                 "polarity is inverted"),
}
def padding_by_loop(valid_lens, n_k, fill_padding=False):
    mask = torch.zeros(len(valid_lens), 1, n_k, dtype=torch.bool)
    for b, length in enumerate(valid_lens.tolist()):
        if fill_padding:
            mask[b, :, length:] = True
        else:
            mask[b, :, :length] = True
    return mask


RIGHT_PADDING = {
    "unsqueeze": lambda lens, n_k: key_mask(lens, n_k).unsqueeze(1),
    "loops": lambda lens, n_k: torch.tensor([[[j < int(L) for j in range(n_k)]] for L in lens], dtype=torch.bool),
    "expand and compare": lambda lens, n_k: torch.arange(n_k).expand(len(lens), 1, n_k) < lens.view(-1, 1, 1),
    "loop filling the real tokens": padding_by_loop,
}

# --- 03.3 masked_attention(Q, K, V, mask) -------------------------------------------------------------


def scores(Q, K):
    return Q @ K.mT / math.sqrt(Q.shape[-1])


def masked(Q, K, V, mask, fill):
    weights = scores(Q, K).masked_fill(~mask, fill).softmax(-1)
    return weights @ V, weights


def masked_nan_to_zero(Q, K, V, mask):
    weights = torch.nan_to_num(scores(Q, K).masked_fill(~mask, float("-inf")).softmax(-1), nan=0.0)
    return weights @ V, weights


def masked_by_renormalising(Q, K, V, mask):
    """Exponentiate, zero the blocked entries, divide by the row sum where it is positive."""
    s = scores(Q, K)
    e = torch.exp(s - s.amax(-1, keepdim=True)) * mask
    total = e.sum(-1, keepdim=True)
    weights = torch.where(total > 0, e / total.clamp_min(torch.finfo(s.dtype).tiny), 0.0)
    return weights @ V, weights


def masked_with_sdpa_after_fix(Q, K, V, mask):
    mask = mask.expand(*scores(Q, K).shape)
    any_allowed = mask.any(-1, keepdim=True)
    safe = mask | ~any_allowed  # a fully masked row attends everywhere, then is zeroed
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=safe) * any_allowed
    weights = scores(Q, K).masked_fill(~safe, float("-inf")).softmax(-1) * any_allowed
    return out, weights


WRONG_MASKED = {
    "NaN rows": (lambda Q, K, V, m: masked(Q, K, V, m, float("-inf")), "give such rows zero weights"),
    "fill 0": (lambda Q, K, V, m: masked(Q, K, V, m, 0.0), "set to 0 instead of -inf"),
    "fill -1e9": (lambda Q, K, V, m: masked(Q, K, V, m, -1e9), "large negative number"),
    "inverted": (lambda Q, K, V, m: masked_nan_to_zero(Q, K, V, ~m), "values differ"),
    "after softmax": (lambda Q, K, V, m: ((scores(Q, K).softmax(-1) * m) @ V, scores(Q, K).softmax(-1) * m),
                      "applied after the softmax"),
    "no scaling": (lambda Q, K, V, m: masked_nan_to_zero(Q * math.sqrt(Q.shape[-1]), K, V, m), "values differ"),
    "inverted, NaN rows": (lambda Q, K, V, m: masked(Q, K, V, ~m, float("-inf")), "polarity is inverted"),
    "scores times the mask": (lambda Q, K, V, m: (lambda w: (w @ V, w))((scores(Q, K) * m).softmax(-1)),
                              "set to 0 instead of -inf"),
    "fill finfo.min": (lambda Q, K, V, m: masked(Q, K, V, m, torch.finfo(Q.dtype).min), "large negative number"),
    "NaN fixed after the output": (lambda Q, K, V, m: (lambda w: (w @ V, w.nan_to_num(0.0)))(
        scores(Q, K).masked_fill(~m, float("-inf")).softmax(-1)), "wrong result for"),
    "mask given a head axis": (lambda Q, K, V, m: masked_nan_to_zero(Q, K, V, m.unsqueeze(1)), "wrong result for"),
}
RIGHT_MASKED = {
    "nan_to_num": masked_nan_to_zero,
    "renormalise": masked_by_renormalising,
    "F.sdpa with fully masked rows fixed": masked_with_sdpa_after_fix,
    "blocked weights zeroed after the softmax": lambda Q, K, V, m: (lambda w: (w @ V, w))(
        scores(Q, K).masked_fill(~m, float("-inf")).softmax(-1).masked_fill(~m, 0.0)),
}

#: The mistake id each new wrong answer must be named by (None: no name, as no known mistake explains every case).
MISTAKES = {
    "03.1": {"float tril": "not-boolean", "one position ahead": "sees-next-position",
             "strict comparison, key before query": "diagonal-excluded",
             "comparison the wrong way round": "sees-the-future"},
    "03.2": {"lengths not unsqueezed": None, "square (B, n_k, n_k)": None, "0/1 floats": "not-boolean",
             "loop filling the padding": "polarity-inverted"},
    "03.3": {"inverted, NaN rows": "polarity-inverted", "scores times the mask": "masked-with-zero",
             "fill finfo.min": "large-negative-not-inf", "NaN fixed after the output": None,
             "mask given a head axis": None},
}

EXERCISES = {
    "03.1": (WRONG_CAUSAL, RIGHT_CAUSAL),
    "03.2": (WRONG_PADDING, RIGHT_PADDING),
    "03.3": (WRONG_MASKED, RIGHT_MASKED),
}
