"""Checks for lesson 07, the transformer block: LayerNorm, the position-wise FFN, the encoder block."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from transformer_course.blocks import EncoderBlock, PositionWiseFFN
from transformer_course.checks.core import Case, Mistake, case_generator, check_function, exercise
from transformer_course.checks.modules import ModuleCase, check_module
from transformer_course.masking import padding_mask

# --- 07.1 layer_norm --------------------------------------------------------------------------------


def _layer_norm_cases() -> list[Case]:
    g = case_generator(8)

    def case(label, shape, eps=1e-5, scale=1.0, shift=3.0, dtype=torch.float32):
        d = shape[-1]
        return Case(label, {
            "x": torch.randn(*shape, generator=g, dtype=dtype) * scale + shift,
            "gamma": torch.randn(d, generator=g, dtype=dtype),
            "beta": torch.randn(d, generator=g, dtype=dtype),
            "eps": eps,
        })

    return [
        case("batch of sequences", (2, 3, 6)),
        # Centred: a mean of 3 on a spread of 1e-3 would leave float32 too few digits for any formula.
        case("low variance (eps matters)", (4, 5), scale=1e-3, shift=0.0),
        case("large eps", (3, 4), eps=0.5),
        case("one vector", (8,)),
        case("float64", (2, 2, 5), dtype=torch.float64),
    ]


def _layer_norm(x, gamma, beta, eps):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


@exercise("07.1", title="Layer normalisation from scratch", points=2)
def check_layer_norm(answer) -> int:
    def normed(x, eps, dim=-1, unbiased=False):
        mean = x.mean(dim, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(dim, keepdim=True, unbiased=unbiased) + eps)

    return check_function(
        answer,
        _layer_norm,
        _layer_norm_cases(),
        [
            Mistake("unbiased-variance",
                    "the variance is unbiased (divided by d - 1): LayerNorm divides by d (unbiased=False).",
                    lambda x, g, b, eps: normed(x, eps, unbiased=True) * g + b),
            Mistake("eps-outside-sqrt",
                    "eps is outside the square root: divide by sqrt(var + eps), not sqrt(var) + eps.",
                    lambda x, g, b, eps: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True, unbiased=False)
                                                                           + eps) * g + b),
            Mistake("wrong-axis",
                    "the statistics are taken over the wrong axis: normalise each vector over its d features "
                    "(the last axis), not across the batch.",
                    lambda x, g, b, eps: normed(x, eps, dim=0) * g + b),
            Mistake("affine-missing", "gamma and beta are not applied: return gamma * normalised + beta.",
                    lambda x, g, b, eps: normed(x, eps)),
            Mistake("gamma-beta-swapped", "gamma and beta are swapped: scale by gamma, then shift by beta.",
                    lambda x, g, b, eps: normed(x, eps) * b + g),
            Mistake("eps-ignored", "eps is ignored: add it to the variance inside the square root.",
                    lambda x, g, b, eps: normed(x, 0.0) * g + b),
            Mistake("mean-not-subtracted",
                    "the mean is not subtracted: that is RMSNorm. LayerNorm centres x, (x - mean) / sqrt(var + eps).",
                    lambda x, g, b, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g + b),
            Mistake("variance-not-rooted",
                    "x - mean is divided by the variance: divide by the standard deviation, sqrt(var + eps).",
                    lambda x, g, b, eps: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False)
                                                                           + eps) * g + b),
        ],
        names=("normalised",),
        atol=1e-5,
        rtol=1e-4,
    )


# --- 07.2 PositionWiseFFN ----------------------------------------------------------------------------


def _ffn_cases() -> list[ModuleCase]:
    g = case_generator(9)

    def case(args, dtype, seed, label, shape):
        return ModuleCase(args, dtype, seed, Case(label, {"x": torch.randn(*shape, generator=g, dtype=dtype)}))

    return [
        case((8, 32), torch.float32, 1, "batch of sequences", (2, 5, 8)),
        case((6, 12), torch.float32, 2, "one sequence", (4, 6)),
        case((4, 16), torch.float64, 3, "float64", (3, 4)),
    ]


def _ffn_mistakes(ffn: PositionWiseFFN) -> list[Mistake]:
    return [
        Mistake("activation-missing",
                "the activation is missing: relu(W_1 x + b_1) before W_2.", lambda x: ffn.W_2(ffn.W_1(x))),
        Mistake("activation-after-w2", "the activation is applied after W_2 instead of between W_1 and W_2.",
                lambda x: F.relu(ffn.W_2(ffn.W_1(x)))),
        Mistake("gelu-not-relu", "the activation is GELU: this FFN uses ReLU, as in the 2017 paper.",
                lambda x: ffn.W_2(F.gelu(ffn.W_1(x)))),
        Mistake("residual-in-ffn",
                "the residual belongs to the block, not the FFN: return W_2 relu(W_1 x + b_1) + b_2 alone.",
                lambda x: x + ffn.W_2(F.relu(ffn.W_1(x)))),
    ]


@exercise("07.2", title="The position-wise feed-forward network", points=2)
def check_position_wise_ffn(answer) -> int:
    return check_module(answer, PositionWiseFFN, _ffn_cases(), _ffn_mistakes,
                        "PositionWiseFFN(d_model, d_ff)", ("output",))


# --- 07.3 EncoderBlock (post-norm) -------------------------------------------------------------------


def _block_cases() -> list[ModuleCase]:
    g = case_generator(10)

    def case(args, dtype, seed, label, shape, mask=None):
        x = torch.randn(*shape, generator=g, dtype=dtype)
        return ModuleCase(args, dtype, seed, Case(label, {"x": x, "mask": mask}))

    return [
        case((8, 2, 16), torch.float32, 4, "no mask", (2, 5, 8)),
        case((8, 2, 16), torch.float32, 5, "padding mask", (3, 4, 8), padding_mask(torch.tensor([4, 2, 1]), 4)),
        case((12, 3, 24), torch.float64, 6, "float64", (2, 3, 12)),
    ]


def _block_mistakes(block: EncoderBlock) -> list[Mistake]:
    attn = lambda x, mask: block.attention(x, mask=mask)[0]  # noqa: E731
    n1, n2, ffn = block.norm1, block.norm2, block.ffn
    return [
        Mistake("pre-norm",
                "the norms come before the sub-layers (pre-norm): the 2017 block normalises after the residual "
                "sum, x = norm(x + sublayer(x)).",
                lambda x, mask: (lambda h: h + ffn(n2(h)))(x + attn(n1(x), mask))),
        Mistake("residual-after-norm", "the residual is added after the norm: it goes inside, norm(x + sublayer(x)).",
                lambda x, mask: (lambda h: n2(ffn(h)) + h)(n1(attn(x, mask)) + x)),
        Mistake("residual-missing", "the residual connections are missing: add each sub-layer's input to its output.",
                lambda x, mask: n2(ffn(n1(attn(x, mask))))),
        Mistake("norms-swapped", "norm1 and norm2 are swapped: norm1 follows attention, norm2 the FFN.",
                lambda x, mask: (lambda h: n1(h + ffn(h)))(n2(x + attn(x, mask)))),
        Mistake("mask-not-passed", "the mask is not passed to the attention.",
                lambda x, mask: (lambda h: n2(h + ffn(h)))(n1(x + attn(x, None)))),
    ]


def _encoder_block(d_model, num_heads, d_ff):
    return EncoderBlock(d_model, num_heads, d_ff)


@exercise("07.3", title="The encoder block, post-norm", points=3)
def check_encoder_block(answer) -> int:
    return check_module(answer, _encoder_block, _block_cases(), _block_mistakes,
                        "EncoderBlock(d_model, num_heads, d_ff)", ("output",))
