"""Checks for lesson 05, self- and cross-attention: cross-attention over a padded source, and from the memory's
cached keys and values."""

from __future__ import annotations

import math

import torch

from transformer_course.checks.core import Case, Mistake, case_generator, case_seed, check_function, exercise
from transformer_course.masking import causal_mask, padding_mask
from transformer_course.multihead import MultiHeadAttention, merge_heads, split_heads


def _cross_cases() -> list[Case]:
    g = case_generator(7)

    def case(label, B, n_dec, n_enc, d, h, lens, dtype=torch.float32):
        torch.manual_seed(case_seed(d * h + n_enc))
        return Case(label, {
            "decoder_x": torch.randn(B, n_dec, d, generator=g, dtype=dtype),
            "encoder_out": torch.randn(B, n_enc, d, generator=g, dtype=dtype),
            "src_valid_lens": torch.tensor(lens),
            "mha": MultiHeadAttention(d, h).to(dtype).eval(),
        })

    return [
        case("n_dec < n_enc", 3, 4, 6, 8, 2, [6, 3, 1]),
        case("n_dec > n_enc", 2, 5, 3, 12, 3, [3, 2]),
        case("float64", 2, 3, 5, 8, 4, [2, 5], torch.float64),
        # No source fills the memory: a mask built up to the longest source (lens.max()) has too few keys.
        case("every source padded", 2, 2, 7, 8, 2, [5, 3]),
    ]


def _cross_attention(decoder_x, encoder_out, src_valid_lens, mha):
    return mha(decoder_x, encoder_out, encoder_out, mask=padding_mask(src_valid_lens, encoder_out.shape[1]))


SWAPPED = "the roles are swapped: queries come from the decoder, keys and values from the encoder."
LONGEST = ("the mask is built over the longest source (src_valid_lens.max()): it needs one entry per key, the n_enc "
           "positions of the memory, padded ones included.")


@exercise("05.1", title="Cross-attention over a padded source", points=3)
def check_cross_attention(answer) -> int:
    return check_function(
        answer,
        _cross_attention,
        _cross_cases(),
        [
            Mistake("roles-swapped", SWAPPED, lambda x, mem, lens, mha: mha(mem, x, x)),
            Mistake("roles-swapped",
                    SWAPPED, lambda x, mem, lens, mha: mha(mem, x, x, mask=padding_mask(lens.clamp_max(x.shape[1]),
                                                                                        x.shape[1]))),
            Mistake("padding-not-masked",
                    "the source padding is not masked: padded encoder positions must get no weight.",
                    lambda x, mem, lens, mha: mha(x, mem, mem)),
            Mistake("padding-mask-inverted",
                    "the padding mask is inverted: True = may attend (the real source tokens).",
                    lambda x, mem, lens, mha: mha(x, mem, mem, mask=~padding_mask(lens, mem.shape[1]))),
            Mistake("causal-mask-added",
                    "cross-attention has no causal mask: every target position may see the whole source.",
                    lambda x, mem, lens, mha: mha(x, mem, mem, mask=padding_mask(lens, mem.shape[1])
                                                  & causal_mask(x.shape[1], mem.shape[1]))),
            Mistake("mask-over-decoder-length",
                    "the mask is built over the decoder's length: the keys are the n_enc encoder positions.",
                    lambda x, mem, lens, mha: mha(x, mem, mem, mask=padding_mask(lens.clamp_max(x.shape[1]),
                                                                                 x.shape[1]))),
            Mistake("mask-over-longest-source", LONGEST,
                    lambda x, mem, lens, mha: mha(x, mem, mem, mask=padding_mask(lens, int(lens.max())))),
        ],
        names=("output", "weights"),
    )


# --- 05.2: cross-attention from the memory's cached keys and values -------------------------------------------


def _cached_cases() -> list[Case]:
    g = case_generator(8)

    def case(label, B, n_dec, n_enc, d, h, lens, dtype=torch.float32):
        torch.manual_seed(case_seed(100 + d * h + n_enc))
        mha = MultiHeadAttention(d, h).to(dtype).eval()
        memory = torch.randn(B, n_enc, d, generator=g, dtype=dtype)
        with torch.no_grad():  # what a decoder computes once per source, and keeps
            memory_k, memory_v = split_heads(mha.W_k(memory), h), split_heads(mha.W_v(memory), h)
        return Case(label, {
            "decoder_x": torch.randn(B, n_dec, d, generator=g, dtype=dtype),
            "memory_k": memory_k,
            "memory_v": memory_v,
            "src_valid_lens": torch.tensor(lens),
            "mha": mha,
        })

    return [
        # B == h and no full-length source first: there a mask without its head axis, or an inverted one,
        # gives wrong numbers (not an error or NaN), and the mistake can be named.
        case("one decoding step, B = h = 2", 2, 1, 5, 8, 2, [4, 2]),
        case("4 decoder positions, B = 3", 3, 4, 6, 12, 2, [6, 3, 1]),
        case("float64, h = 4", 2, 3, 4, 8, 4, [2, 4], torch.float64),
    ]


def _cached_cross_attention(decoder_x, memory_k, memory_v, src_valid_lens, mha, *, scale="d_h", mask="padding",
                            swap=False, w_o=True, merge=True, causal=False, project_q=True, reproject=False,
                            softmax_dim=-1):
    """The reference, and with one argument changed, each classic mistake."""
    h, n_enc = memory_k.shape[-3], memory_k.shape[-2]
    k, v = memory_k, memory_v
    if reproject:  # the cached keys and values go through W_k and W_v a second time
        k, v = split_heads(mha.W_k(merge_heads(k)), h), split_heads(mha.W_v(merge_heads(v)), h)
    if swap:
        k, v = v, k
    q = split_heads(mha.W_q(decoder_x) if project_q else decoder_x, h)  # (B, h, n_dec, d_h)
    scores = q @ k.transpose(-2, -1)  # (B, h, n_dec, n_enc)
    if scale == "d_h":
        scores = scores / math.sqrt(k.shape[-1])
    elif scale == "d_model":
        scores = scores / math.sqrt(decoder_x.shape[-1])
    elif scale == "d_h unrooted":
        scores = scores / k.shape[-1]
    allowed = padding_mask(src_valid_lens, n_enc)  # (B, 1, n_enc)
    allowed = {"padding": allowed.unsqueeze(1), "inverted": ~allowed.unsqueeze(1), "no head axis": allowed,
               "none": torch.ones_like(allowed).unsqueeze(1),
               # one entry per position up to the longest source: masked_fill raises unless one fills the memory
               "longest": padding_mask(src_valid_lens, int(src_valid_lens.max())).unsqueeze(1)}[mask]
    if causal:
        allowed = allowed & causal_mask(decoder_x.shape[-2], n_enc)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=softmax_dim)
    heads = weights @ v  # (B, h, n_dec, d_h)
    merged = merge_heads(heads) if merge else heads.reshape(heads.shape[0], heads.shape[2], -1)
    return (mha.W_o(merged) if w_o else merged), weights


def _variant(**mistake):
    return lambda *args: _cached_cross_attention(*args, **mistake)


@exercise("05.2", title="Cross-attention from cached keys and values", points=3)
def check_cached_cross_attention(answer) -> int:
    with torch.no_grad():
        return check_function(
            answer,
            _cached_cross_attention,
            _cached_cases(),
            [
                Mistake("memory-reprojected",
                        "the cached keys and values are projected already: use memory_k and memory_v as they are, "
                        "without W_k or W_v.", _variant(reproject=True)),
                Mistake("keys-values-swapped",
                        "the keys and values are swapped: the queries are compared with memory_k, and the weights "
                        "average memory_v.", _variant(swap=True)),
                Mistake("queries-not-projected",
                        "the queries are not projected: the decoder's states go through W_q before the heads are "
                        "split.", _variant(project_q=False)),
                Mistake("not-scaled",
                        "the scores are not scaled: divide them by sqrt(d_h), the width of one head (the last axis "
                        "of memory_k).", _variant(scale=None)),
                Mistake("scaled-by-d-model",
                        "the scores are scaled by sqrt(d_model): scale by sqrt(d_h), the width of one head (the last "
                        "axis of memory_k).", _variant(scale="d_model")),
                Mistake("scaled-by-d-h-not-root",
                        "the scores are divided by d_h: divide them by its square root, sqrt(d_h).",
                        _variant(scale="d_h unrooted")),
                Mistake("softmax-wrong-axis",
                        "the softmax runs over the wrong axis: each query's weights over the n_enc keys sum to 1 "
                        "(dim=-1).", _variant(softmax_dim=-2)),
                Mistake("padding-not-masked",
                        "the source padding is not masked: padded encoder positions must get no weight.",
                        _variant(mask="none")),
                Mistake("padding-mask-inverted",
                        "the padding mask is inverted: True = may attend (the real source tokens).",
                        _variant(mask="inverted")),
                Mistake("mask-without-head-axis",
                        "the mask has no head axis: against scores (B, h, n_dec, n_enc) a mask (B, 1, n_enc) is read "
                        "as (1, B, 1, n_enc), so head i gets the mask of sequence i. Give it the shape "
                        "(B, 1, 1, n_enc).", _variant(mask="no head axis")),
                Mistake("mask-over-longest-source", LONGEST, _variant(mask="longest")),
                Mistake("causal-mask-added",
                        "cross-attention has no causal mask: every decoder position may read the whole source.",
                        _variant(causal=True)),
                Mistake("w-o-missing",
                        "the output projection W_o is missing: the merged heads go through W_o.", _variant(w_o=False)),
                Mistake("merge-without-transpose",
                        "the heads are merged by a reshape without a transpose: that mixes positions. Swap the h and "
                        "n_dec axes first.", _variant(merge=False)),
            ],
            names=("output", "weights"),
        )
