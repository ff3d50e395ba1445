"""Answers to lesson 08's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import torch
from torch import nn

from transformer_course.blocks import EncoderBlock, PositionWiseFFN
from transformer_course.masking import causal_mask
from transformer_course.multihead import MultiHeadAttention
from transformer_course.positional import LearnedPositionalEmbedding

# --- 08.1 DecoderBlock(d_model, num_heads, d_ff).forward(x, memory, self_mask, memory_mask) -------


class Decoder(nn.Module):
    mistake = None

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads)
        self.cross_attention = MultiHeadAttention(d_model, num_heads)
        self.ffn = PositionWiseFFN(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        m = self.mistake
        if m == "masks swapped":
            self_mask, memory_mask = memory_mask, self_mask
        if m == "sub-layers out of order":
            x = self.norm1(x + self.cross_attention(x, memory, memory, mask=memory_mask)[0])
            x = self.norm2(x + self.self_attention(x, mask=self_mask)[0])
            return self.norm3(x + self.ffn(x))
        if m == "pre-norm":
            x = x + self.self_attention(self.norm1(x), mask=self_mask)[0]
            x = x + self.cross_attention(self.norm2(x), memory, memory, mask=memory_mask)[0]
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attention(x, mask=None if m == "no causal mask" else self_mask)[0])
        kv = x if m == "cross on decoder" else memory
        q = memory if m == "query from memory" else x
        n2, n3 = (self.norm3, self.norm2) if m == "norms 2 and 3 swapped" else (self.norm2, self.norm3)
        x = n2(x + self.cross_attention(q, kv, kv, mask=None if m == "no memory mask" else memory_mask)[0])
        return n3(self.ffn(x)) if m == "no ffn residual" else n3(x + self.ffn(x))


def decoder_with(mistake):
    return type(f"Decoder_{mistake.replace(' ', '_')}", (Decoder,), {"mistake": mistake})


class DecoderLoop(Decoder):
    """Sub-layers as a list of (function, norm) pairs: correct, written differently."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [(lambda h: self.self_attention(h, h, h, self_mask)[0], self.norm1),
                 (lambda h: self.cross_attention(h, memory, mask=memory_mask)[0], self.norm2),
                 (self.ffn, self.norm3)]
        for sublayer, norm in steps:
            x = norm(x + sublayer(x))
        return x


WRONG_DECODER = {
    "no causal mask": (decoder_with("no causal mask"), "causal mask is missing"),
    "cross on decoder": (decoder_with("cross on decoder"), "must be the encoder output"),
    "query from memory": (decoder_with("query from memory"), "queries come from the decoder"),
    "no memory mask": (decoder_with("no memory mask"), "padding mask is not passed"),
    "sub-layers out of order": (decoder_with("sub-layers out of order"), "sub-layers are in the wrong order"),
    "pre-norm": (decoder_with("pre-norm"), "this block is post-norm"),
    "no residual around the FFN": (decoder_with("no ffn residual"), "wrong result for"),
    "norms 2 and 3 swapped": (decoder_with("norms 2 and 3 swapped"), "wrong result for"),
    "masks swapped": (decoder_with("masks swapped"), "wrong result for"),
}
RIGHT_DECODER = {"straight": Decoder, "loop over sub-layers": DecoderLoop}

# --- 08.4 (stretch) PreNormDecoderBlock(d_model, num_heads, d_ff) -------------------------------------


class PreNorm(Decoder):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        m = self.mistake
        if m == "post-norm":
            return super().forward(x, memory, self_mask, memory_mask)
        if m == "normalised residual":
            h = self.norm1(x)
            x = h + self.self_attention(h, mask=self_mask)[0]
            h = self.norm2(x)
            x = h + self.cross_attention(h, memory, memory, mask=memory_mask)[0]
            h = self.norm3(x)
            return h + self.ffn(h)
        n1, n2 = (self.norm2, self.norm1) if m == "norms 1 and 2 swapped" else (self.norm1, self.norm2)
        h = n1(x)
        x = x + self.self_attention(h, mask=None if m == "no causal mask" else self_mask)[0]
        h = n2(x)
        kv = {"memory normalised": self.norm2(memory), "cross on decoder": h}.get(m, memory)
        x = x + self.cross_attention(h, kv, kv, mask=None if m == "no memory mask" else memory_mask)[0]
        h = self.norm3(x)
        x = (h if m == "last residual normalised" else x) + self.ffn(h)
        return self.norm3(x) if m == "final norm" else x


def prenorm_with(mistake):
    return type(f"PreNorm_{mistake.replace(' ', '_')}", (PreNorm,), {"mistake": mistake})


class PreNormResidualList(Decoder):
    """The three sub-layers as (norm, function) pairs, each added to the stream: correct, written differently."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        for norm, sublayer in [(self.norm1, lambda h: self.self_attention(h, h, h, self_mask)[0]),
                               (self.norm2, lambda h: self.cross_attention(h, memory, memory, memory_mask)[0]),
                               (self.norm3, self.ffn)]:
            x = torch.add(x, sublayer(norm(x)))
        return x


WRONG_PRENORM = {
    "post-norm": (prenorm_with("post-norm"), "this is the post-norm block"),
    "normalised residual": (prenorm_with("normalised residual"), "add the sub-layer's output to x itself"),
    "memory normalised": (prenorm_with("memory normalised"), "the memory is normalised too"),
    "no causal mask": (prenorm_with("no causal mask"), "causal mask is missing"),
    "final norm": (prenorm_with("final norm"), "a final LayerNorm was applied"),
    "no memory mask": (prenorm_with("no memory mask"), "padding mask is not passed"),
    "cross on decoder": (prenorm_with("cross on decoder"), "must be the encoder output"),
    "norms 1 and 2 swapped": (prenorm_with("norms 1 and 2 swapped"), "wrong result for"),
    "only the last residual normalised": (prenorm_with("last residual normalised"), "wrong result for"),
}
RIGHT_PRENORM = {"straight": PreNorm, "list of residual sub-layers": PreNormResidualList}

# --- 08.2 TinyGPT(vocab_size, d_model, num_heads, num_layers, max_len) -------------------------------


class GPT(nn.Module):
    mistake = None

    def __init__(self, vocab_size, d_model, num_heads, num_layers, max_len):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positional = LearnedPositionalEmbedding(d_model, max_len=max_len)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, 4 * d_model) for _ in range(num_layers))
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        m = self.mistake
        x = self.token_embedding(tokens)
        if m != "positions per block":
            x = self.positional(x)
        mask = None if m == "no mask" else causal_mask(tokens.shape[1])
        if m == "inverted mask":
            mask = ~mask
        if m == "mask transposed":  # True on and above the diagonal: each position sees itself and the future
            mask = mask.T
        if m == "float tril mask":  # 1.0 and 0.0: a float mask is added to the scores, so nothing is blocked
            mask = torch.ones(tokens.shape[1], tokens.shape[1]).tril()
        if m == "mask over max_len":
            mask = causal_mask(self.positional.embedding.num_embeddings)
        for block in self.blocks:
            x = block(self.positional(x) if m == "positions per block" else x, mask)
        return self.head(x)


def gpt_with(mistake):
    return type(f"GPT_{mistake.replace(' ', '_')}", (GPT,), {"mistake": mistake})


class GPTAdditiveMask(GPT):
    def forward(self, tokens):
        n = tokens.shape[1]
        x = self.token_embedding(tokens) + self.positional.embedding(torch.arange(n))
        mask = torch.full((n, n), float("-inf")).triu(1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


class GPTNoPositions(GPT):
    def forward(self, tokens):
        x = self.token_embedding(tokens)
        for block in self.blocks:
            x = block(x, causal_mask(tokens.shape[1]))
        return self.head(x)


class GPTNoHead(GPT):
    """The logits read off the token embedding (a tied head), the skeleton's head left unused."""

    def forward(self, tokens):
        x = self.positional(self.token_embedding(tokens))
        for block in self.blocks:
            x = block(x, causal_mask(tokens.shape[1]))
        return x @ self.token_embedding.weight.T


WRONG_GPT = {
    "positions per block": (gpt_with("positions per block"), "added in every block"),
    "no mask": (gpt_with("no mask"), "causal mask is missing"),
    "inverted mask": (gpt_with("inverted mask"), "not causal"),
    "softmax": (type("GPTSoftmax", (GPT,), {"forward": lambda self, t: GPT.forward(self, t).softmax(-1)}),
                "softmax was applied"),
    "positions missing": (GPTNoPositions, "positions are missing"),
    "mask transposed": (gpt_with("mask transposed"), "not causal"),
    "mask over max_len": (gpt_with("mask over max_len"), "raised"),
    "float tril mask": (gpt_with("float tril mask"), "not causal"),
    "head tied to the embedding": (GPTNoHead, "wrong result for"),
}
RIGHT_GPT = {"straight": GPT, "additive mask, positions by hand": GPTAdditiveMask}

# --- 08.3 decoder_only_parameter_count(vocab_size, d_model, num_layers, max_len, tie_weights) ------


def count_by_parts(v, d, L, n, tied):
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * 4 * d + 4 * d + d
    norms = 2 * 2 * d
    return v * d + n * d + L * (attention + ffn + norms) + 2 * d + (0 if tied else v * d)


def count_with_package(v, d, L, n, tied):
    from transformer_course.checks.meta_device import shapes_only
    from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

    with shapes_only():
        model = DecoderOnlyLM(DecoderOnlyConfig(v, d, 1, 4 * d, L, n, tie_weights=tied))
    return sum(p.numel() for p in model.parameters())


WRONG_COUNT = {
    "tied twice": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, False), "count |V| d once"),
    "head bias": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) + v, "no bias"),
    "no positions": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) - n * d, "position embeddings"),
    "12 L d^2 only": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) - 13 * L * d, "12 d^2 + 13 d"),
    "no final norm": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) - 2 * d, "final LayerNorm"),
    "attention without biases": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) - L * 4 * d,
                                 "projections have biases"),
    "a LayerNorm counted as d": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) - (2 * L + 1) * d,
                                 "a LayerNorm has 2d parameters"),
    "d_ff = d in the FFN": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) - L * (6 * d * d + 3 * d),
                            "wrong result for"),
    "three matrices of attention": (lambda v, d, L, n, tied: count_by_parts(v, d, L, n, tied) - L * (d * d + d),
                                    "wrong result for"),
    "float from 4.0 * d": (lambda v, d, L, n, tied: float(count_by_parts(v, d, L, n, tied)), "expected an integer"),
}
RIGHT_COUNT = {"by parts": count_by_parts, "the package's model": count_with_package}

EXERCISES = {
    "08.1": (WRONG_DECODER, RIGHT_DECODER),
    "08.2": (WRONG_GPT, RIGHT_GPT),
    "08.3": (WRONG_COUNT, RIGHT_COUNT),
    "08.4": (WRONG_PRENORM, RIGHT_PRENORM),
}

#: The mistake each new wrong answer must be named by (None: no name, the case and the difference only).
MISTAKES = {
    "08.1": {"sub-layers out of order": "sublayers-out-of-order", "pre-norm": "pre-norm",
             "no residual around the FFN": None, "norms 2 and 3 swapped": None, "masks swapped": None},
    "08.2": {"positions missing": "positions-missing", "mask transposed": None, "mask over max_len": None,
             "float tril mask": None, "head tied to the embedding": None},
    "08.3": {"attention without biases": "attention-biases-not-counted",
             "a LayerNorm counted as d": "layer-norm-counted-as-d", "d_ff = d in the FFN": None,
             "three matrices of attention": None, "float from 4.0 * d": None},
    "08.4": {"no memory mask": "padding-mask-missing", "cross on decoder": "kv-from-decoder",
             "norms 1 and 2 swapped": None, "only the last residual normalised": None},
}
