"""Checks for lesson 05, self- and cross-attention: cross-attention over a padded source."""

from __future__ import annotations

import torch

from transformer_course.checks.core import Case, Mistake, case_generator, case_seed, check_function, exercise
from transformer_course.masking import causal_mask, padding_mask
from transformer_course.multihead import MultiHeadAttention


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
    ]


def _cross_attention(decoder_x, encoder_out, src_valid_lens, mha):
    return mha(decoder_x, encoder_out, encoder_out, mask=padding_mask(src_valid_lens, encoder_out.shape[1]))


SWAPPED = "the roles are swapped: queries come from the decoder, keys and values from the encoder."


@exercise("05.1", title="Cross-attention over a padded source", points=3)
def check_cross_attention(answer) -> int:
    return check_function(
        answer,
        _cross_attention,
        _cross_cases(),
        [
            Mistake(SWAPPED, lambda x, mem, lens, mha: mha(mem, x, x)),
            Mistake(SWAPPED, lambda x, mem, lens, mha: mha(mem, x, x, mask=padding_mask(lens.clamp_max(x.shape[1]),
                                                                                        x.shape[1]))),
            Mistake("the source padding is not masked: padded encoder positions must get no weight.",
                    lambda x, mem, lens, mha: mha(x, mem, mem)),
            Mistake("the padding mask is inverted: True = may attend (the real source tokens).",
                    lambda x, mem, lens, mha: mha(x, mem, mem, mask=~padding_mask(lens, mem.shape[1]))),
            Mistake("cross-attention has no causal mask: every target position may see the whole source.",
                    lambda x, mem, lens, mha: mha(x, mem, mem, mask=padding_mask(lens, mem.shape[1])
                                                  & causal_mask(x.shape[1], mem.shape[1]))),
            Mistake("the mask is built over the decoder's length: the keys are the n_enc encoder positions.",
                    lambda x, mem, lens, mha: mha(x, mem, mem, mask=padding_mask(lens.clamp_max(x.shape[1]),
                                                                                 x.shape[1]))),
        ],
        names=("output", "weights"),
    )
