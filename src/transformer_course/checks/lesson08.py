"""Checks for lesson 08, stacking blocks: the decoder block, a decoder-only LM, a parameter count."""

from __future__ import annotations

import torch
from torch import nn

from transformer_course.blocks import DecoderBlock, EncoderBlock
from transformer_course.checks.core import Case, CheckFailed, Mistake, case_generator, check_function, exercise
from transformer_course.checks.meta_device import shapes_only
from transformer_course.checks.modules import ModuleCase, check_module
from transformer_course.masking import causal_mask, padding_mask
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM
from transformer_course.positional import LearnedPositionalEmbedding

# --- 08.1 DecoderBlock.forward (post-norm) ----------------------------------------------------------


def _decoder_cases() -> list[ModuleCase]:
    g = case_generator(11)

    def case(label, d, h, B, n_dec, n_enc, lens, dtype=torch.float32):
        return ModuleCase((d, h, 2 * d), dtype, d + n_enc, Case(label, {
            "x": torch.randn(B, n_dec, d, generator=g, dtype=dtype),
            "memory": torch.randn(B, n_enc, d, generator=g, dtype=dtype),
            "self_mask": causal_mask(n_dec),
            "memory_mask": padding_mask(torch.tensor(lens), n_enc),
        }))

    return [
        # n_dec == n_enc first: there, attention fed the wrong tensors still runs and can be named.
        case("n_dec = n_enc", 8, 2, 2, 5, 5, [5, 3]),
        case("n_dec < n_enc", 8, 2, 3, 3, 6, [6, 2, 4]),
        case("float64", 12, 3, 2, 4, 3, [3, 1], torch.float64),
    ]


KV_FROM_DECODER = "cross-attention's keys and values must be the encoder output (memory), not the decoder states."
Q_FROM_ENCODER = "cross-attention's queries come from the decoder, its keys and values from the encoder (memory)."


def _decoder_mistakes(block: DecoderBlock) -> list[Mistake]:
    sa, ca, ffn, n1, n2, n3 = (block.self_attention, block.cross_attention, block.ffn,
                               block.norm1, block.norm2, block.norm3)

    def post_norm(self_attend, cross_attend):
        def forward(x, memory, self_mask, memory_mask):
            x = n1(x + self_attend(x, memory, self_mask, memory_mask))
            x = n2(x + cross_attend(x, memory, self_mask, memory_mask))
            return n3(x + ffn(x))
        return forward

    def self_ok(x, memory, self_mask, memory_mask):
        return sa(x, mask=self_mask)[0]

    def cross_ok(x, memory, self_mask, memory_mask):
        return ca(x, memory, memory, mask=memory_mask)[0]

    return [
        Mistake("causal-mask-missing",
                "the causal mask is missing from the masked self-attention: position t must not see t+1 ...",
                post_norm(lambda x, m, s, mm: sa(x)[0], cross_ok)),
        *[Mistake("kv-from-decoder", KV_FROM_DECODER, post_norm(self_ok, wrong)) for wrong in (
            lambda x, m, s, mm: ca(x, x, x)[0], lambda x, m, s, mm: ca(x, x, x, mask=mm)[0])],
        *[Mistake("queries-from-encoder", Q_FROM_ENCODER, post_norm(self_ok, wrong)) for wrong in (
            lambda x, m, s, mm: ca(m, m, m, mask=mm)[0], lambda x, m, s, mm: ca(m, m, m)[0],
            lambda x, m, s, mm: ca(m, x, x)[0])],
        Mistake("padding-mask-missing", "the source padding mask is not passed to the cross-attention.",
                post_norm(self_ok, lambda x, m, s, mm: ca(x, m, m)[0])),
        Mistake("sublayers-out-of-order",
                "the sub-layers are in the wrong order: masked self-attention, then cross-attention, then FFN.",
                lambda x, m, s, mm: (lambda h: n3(h + ffn(h)))(
                    (lambda h: n2(h + sa(h, mask=s)[0]))(n1(x + ca(x, m, m, mask=mm)[0])))),
        Mistake("pre-norm",
                "the norms come before the sub-layers (pre-norm): this block is post-norm, norm(x + sublayer(x)).",
                lambda x, m, s, mm: (lambda h: h + ffn(n3(h)))(
                    (lambda h: h + ca(n2(h), m, m, mask=mm)[0])(x + sa(n1(x), mask=s)[0]))),
    ]


def _decoder_block(d_model, num_heads, d_ff):
    return DecoderBlock(d_model, num_heads, d_ff)


@exercise("08.1", title="The decoder block, post-norm", points=3)
def check_decoder_block(answer) -> int:
    return check_module(answer, _decoder_block, _decoder_cases(), _decoder_mistakes,
                        "DecoderBlock(d_model, num_heads, d_ff)", ("output",))


# --- 08.4 (stretch) the pre-norm decoder block ------------------------------------------------------------


def _prenorm_mistakes(block: DecoderBlock) -> list[Mistake]:
    sa, ca, ffn, n1, n2, n3 = (block.self_attention, block.cross_attention, block.ffn,
                               block.norm1, block.norm2, block.norm3)

    def pre_norm(self_attend, cross_attend, feed_forward=lambda h: h + ffn(n3(h))):
        def forward(x, memory, self_mask, memory_mask):
            x = x + self_attend(x, memory, self_mask, memory_mask)
            x = x + cross_attend(x, memory, self_mask, memory_mask)
            return feed_forward(x)
        return forward

    def self_ok(x, m, s, mm):
        return sa(n1(x), mask=s)[0]

    def cross_ok(x, m, s, mm):
        return ca(n2(x), m, m, mask=mm)[0]

    return [
        Mistake("post-norm",
                "this is the post-norm block, norm(x + sublayer(x)): in pre-norm the residual stream is never "
                "normalised, each sub-layer reads norm(x) and its output is added to x.",
                lambda x, m, s, mm: n3((lambda h: h + ffn(h))(n2((lambda h: h + ca(h, m, m, mask=mm)[0])(
                    n1(x + sa(x, mask=s)[0])))))),
        Mistake("residual-adds-normed",
                "the residual adds the normalised input, norm(x) + sublayer(norm(x)): add the sub-layer's output "
                "to x itself.",
                lambda x, m, s, mm: (lambda h: n3(h) + ffn(n3(h)))((lambda h: n2(h) + ca(n2(h), m, m, mask=mm)[0])(
                    n1(x) + sa(n1(x), mask=s)[0]))),
        Mistake("memory-normalised",
                "the memory is normalised too: in pre-norm only the decoder's queries go through norm2; the "
                "encoder output is used as it is.",
                pre_norm(self_ok, lambda x, m, s, mm: ca(n2(x), n2(m), n2(m), mask=mm)[0])),
        Mistake("causal-mask-missing", "the causal mask is missing from the masked self-attention.",
                pre_norm(lambda x, m, s, mm: sa(n1(x))[0], cross_ok)),
        Mistake("padding-mask-missing", "the source padding mask is not passed to the cross-attention.",
                pre_norm(self_ok, lambda x, m, s, mm: ca(n2(x), m, m)[0])),
        Mistake("kv-from-decoder",
                KV_FROM_DECODER, pre_norm(self_ok, lambda x, m, s, mm: ca(n2(x), n2(x), n2(x), mask=mm)[0])),
        Mistake("final-norm-applied",
                "a final LayerNorm was applied to the block's output: pre-norm blocks return the residual stream "
                "as it is (the model normalises once, after the last block).",
                lambda x, m, s, mm: n3(pre_norm(self_ok, cross_ok)(x, m, s, mm))),
    ]


def _prenorm_decoder_block(d_model, num_heads, d_ff):
    return DecoderBlock(d_model, num_heads, d_ff, norm_first=True)


@exercise("08.4", title="Stretch: the pre-norm decoder block", points=3)
def check_prenorm_decoder_block(answer) -> int:
    return check_module(answer, _prenorm_decoder_block, _decoder_cases(), _prenorm_mistakes,
                        "PreNormDecoderBlock(d_model, num_heads, d_ff)", ("output",))


# --- 08.2 a decoder-only LM from the package's parts ---------------------------------------------


class ReferenceGPT(nn.Module):
    """The architecture the exercise's skeleton builds: embeddings, positions, post-norm blocks, a head."""

    def __init__(self, vocab_size, d_model, num_heads, num_layers, max_len):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positional = LearnedPositionalEmbedding(d_model, max_len=max_len)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, 4 * d_model) for _ in range(num_layers))
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        x = self.positional(self.token_embedding(tokens))
        mask = causal_mask(tokens.shape[-1])
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


def _gpt_cases() -> list[ModuleCase]:
    g = case_generator(12)

    def case(args, seed, label, batch, n):  # args: (vocab_size, d_model, num_heads, num_layers, max_len)
        return ModuleCase(args, torch.float32, seed, Case(label, {"tokens": torch.randint(args[0], (batch, n),
                                                                                           generator=g)}))

    return [
        case((11, 8, 2, 2, 10), 1, "batch of 2", 2, 7),
        case((7, 12, 3, 1, 6), 2, "full length", 3, 6),
    ]


def _gpt_mistakes(m: ReferenceGPT) -> list[Mistake]:
    def variant(positions_per_block=False, positions=True, mask=True):
        def forward(tokens):
            n = tokens.shape[-1]
            x = m.token_embedding(tokens)
            if positions and not positions_per_block:
                x = m.positional(x)
            for block in m.blocks:
                x = block(m.positional(x) if positions_per_block else x, causal_mask(n) if mask else None)
            return m.head(x)
        return forward

    return [
        Mistake("positions-every-block",
                "the positional encoding is added in every block: add it once, to the token embeddings.",
                variant(positions_per_block=True)),
        Mistake("positions-missing",
                "the positions are missing: add self.positional to the token embeddings.", variant(positions=False)),
        Mistake("causal-mask-missing",
                "the causal mask is missing: each block needs causal_mask(n).", variant(mask=False)),
        Mistake("softmax-applied",
                "softmax was applied: return the logits.", lambda t: torch.softmax(variant()(t), -1)),
    ]


def _causality_hint(answer, args: tuple, tokens: torch.Tensor) -> str:
    """When the learner's model lets position t see later tokens, say so (the property holds for any weights)."""
    if getattr(answer, "replays_records", False):  # the grader's re-check has no model to probe: the verdict stands
        return ""
    try:
        module = answer(*args).eval()
        with torch.no_grad():
            logits = module(tokens)
            for t in range(tokens.shape[-1] - 1):
                changed = tokens.clone()
                changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % args[0]
                if not torch.allclose(module(changed)[:, : t + 1], logits[:, : t + 1], atol=1e-5):
                    return (f"\nAlso: the model is not causal: its logits at position {t} change when a later "
                            f"token changes (each block needs causal_mask(n)).")
    except Exception:  # noqa: BLE001 - the first failure already reported what broke
        return ""
    return ""


@exercise("08.2", title="A decoder-only language model from the package's parts", points=3)
def check_decoder_only(answer) -> int:
    cases = _gpt_cases()
    try:
        return check_module(answer, ReferenceGPT, cases, _gpt_mistakes,
                            "TinyGPT(vocab_size, d_model, num_heads, num_layers, max_len)", ("logits",))
    except CheckFailed as failure:
        if failure.mistake:
            raise
        first = cases[0]
        raise CheckFailed(f"{failure}{_causality_hint(answer, first.args, first.case.args['tokens'])}") from None


# --- 08.3 the parameter count of a decoder-only configuration -------------------------------------


def _count(vocab_size, d_model, num_layers, max_len, tie_weights):
    config = DecoderOnlyConfig(vocab_size, d_model, num_heads=1, d_ff=4 * d_model, num_layers=num_layers,
                               max_len=max_len, tie_weights=tie_weights)
    with shapes_only():  # counting a GPT-2-sized model costs nothing
        return DecoderOnlyLM(config).num_parameters()


@exercise("08.3", title="The parameter count of a decoder-only LM", points=2)
def check_parameter_count(answer) -> int:
    cases = [
        Case("GPT-2 small, tied", {"vocab_size": 50257, "d_model": 768, "num_layers": 12, "max_len": 1024,
                                   "tie_weights": True}),
        Case("small, untied", {"vocab_size": 100, "d_model": 32, "num_layers": 2, "max_len": 64,
                               "tie_weights": False}),
        Case("one layer, tied", {"vocab_size": 10, "d_model": 8, "num_layers": 1, "max_len": 5, "tie_weights": True}),
    ]

    def formula(v, d, L, n, tied):
        return v * d + n * d + L * (12 * d * d + 13 * d) + 2 * d + (0 if tied else v * d)

    return check_function(
        answer,
        _count,
        cases,
        [
            Mistake("tied-counted-twice", "with tied weights the head reuses the embedding matrix: count |V| d once.",
                    lambda v, d, L, n, tied: formula(v, d, L, n, False)),
            Mistake("head-bias-counted", "the head has no bias in this model, and an untied head adds |V| d.",
                    lambda v, d, L, n, tied: formula(v, d, L, n, tied) + v),
            Mistake("positions-not-counted", "the learned position embeddings (max_len x d) are not counted.",
                    lambda v, d, L, n, tied: formula(v, d, L, n, tied) - n * d),
            Mistake("block-miscounted",
                    "a block has 12 d^2 + 13 d parameters: attention 4d^2 + 4d, FFN 8d^2 + 5d, two norms 4d.",
                    lambda v, d, L, n, tied: formula(v, d, L, n, tied) - L * 13 * d),
            Mistake("final-norm-not-counted", "the final LayerNorm (2d) is not counted.",
                    lambda v, d, L, n, tied: formula(v, d, L, n, tied) - 2 * d),
            Mistake("attention-biases-not-counted",
                    "the attention's four projections have biases: 4d^2 + 4d per block, not 4d^2.",
                    lambda v, d, L, n, tied: formula(v, d, L, n, tied) - L * 4 * d),
            Mistake("layer-norm-counted-as-d",
                    "a LayerNorm has 2d parameters (gamma and beta), not d: 2 per block and the final one.",
                    lambda v, d, L, n, tied: formula(v, d, L, n, tied) - (2 * L + 1) * d),
        ],
        names=("count",),
    )
