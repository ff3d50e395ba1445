"""Whole models built from the blocks: encoder and decoder stacks, a seq2seq transformer, a decoder-only LM.

Shapes: batch B, source length n_enc, target length n_dec (n for a single sequence), width d, vocabulary
|V|. Token ids are integer tensors ``(B, n)``; models return logits ``(B, n, |V|)``. Every model can
return its attention weights, per layer and head, for the lessons' heatmaps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from transformer_course import _validate
from transformer_course.blocks import DecoderBlock, EncoderBlock, make_norm
from transformer_course.masking import causal_mask
from transformer_course.multihead import KVCache
from transformer_course.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, embedding_scale


def check_tokens(name: str, tokens, vocab_size: int, max_len: int) -> torch.Tensor:
    """Token ids must be an integer tensor ``(B, n)`` with ids in ``[0, vocab_size)`` and ``n <= max_len``."""
    _validate.tensor(name, tokens)
    if tokens.is_floating_point() or tokens.dtype == torch.bool or tokens.is_complex():
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, n), got {tuple(tokens.shape)}")
    if tokens.shape[1] > max_len:
        raise ValueError(f"{name} has n={tokens.shape[1]} positions, more than max_len={max_len}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"{name} holds ids from {int(tokens.min())} to {int(tokens.max())}, outside the vocabulary "
            f"[0, {vocab_size})"
        )
    return tokens


def parameter_breakdown(model: nn.Module) -> dict[str, int]:
    """Parameters by part: embeddings, attention, FFN, norms, head (a tied head counts under embeddings)."""
    parts = {"embeddings": 0, "attention": 0, "ffn": 0, "norms": 0, "head": 0}
    seen: set[int] = set()
    for name, p in model.named_parameters():  # named_parameters yields a shared (tied) tensor once
        if id(p) in seen:
            continue
        seen.add(id(p))
        if "embedding" in name:
            parts["embeddings"] += p.numel()
        elif "attention" in name:
            parts["attention"] += p.numel()
        elif ".ffn." in name:
            parts["ffn"] += p.numel()
        elif "norm" in name:
            parts["norms"] += p.numel()
        else:
            parts["head"] += p.numel()
    return parts


class _CountsParameters:
    def num_parameters(self) -> int:
        """The number of distinct parameters (a tied matrix counts once)."""
        return sum(parameter_breakdown(self).values())

    def parameter_breakdown(self) -> dict[str, int]:
        return parameter_breakdown(self)


# --- stacks ---------------------------------------------------------------------------------------


class TransformerEncoder(nn.Module, _CountsParameters):
    """``num_layers`` encoder blocks; pre-norm stacks end with a final LayerNorm (as GPT-2 and PyTorch do).

    ``forward(x, mask=None, return_weights=False)``: x ``(B, n, d)``; returns ``(B, n, d)`` and, on
    request, the list of each layer's weights ``(B, h, n, n)``.
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 activation="relu", norm_first: bool = False):
        super().__init__()
        num_layers = _validate.integer("num_layers", num_layers, minimum=1)
        self.layers = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model) if norm_first else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_weights: bool = False):
        weights = []
        for layer in self.layers:
            if return_weights:
                x, w = layer(x, mask, return_weights=True)
                weights.append(w)
            else:
                x = layer(x, mask)
        if self.norm is not None:
            x = self.norm(x)
        return (x, weights) if return_weights else x

    @classmethod
    def from_pytorch(cls, stack: nn.TransformerEncoder) -> TransformerEncoder:
        if not isinstance(stack, nn.TransformerEncoder):
            raise TypeError(f"stack must be an nn.TransformerEncoder, got {type(stack).__name__}")
        return _stack_from_pytorch(cls, stack, EncoderBlock)


class TransformerDecoder(nn.Module, _CountsParameters):
    """``num_layers`` decoder blocks (+ a final LayerNorm when pre-norm).

    ``forward(x, memory, self_mask=None, memory_mask=None, return_weights=False, self_is_causal=False)``:
    x ``(B, n_dec, d)``, memory ``(B, n_enc, d)``; returns ``(B, n_dec, d)`` and, on request, a list of
    ``(self_weights, cross_weights)`` per layer. ``self_is_causal`` is the hint of :class:`DecoderBlock`.
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 activation="relu", norm_first: bool = False):
        super().__init__()
        num_layers = _validate.integer("num_layers", num_layers, minimum=1)
        self.layers = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, self_mask=None, memory_mask=None, return_weights: bool = False,
                self_is_causal: bool = False):
        weights = []
        for layer in self.layers:
            if return_weights:
                x, w = layer(x, memory, self_mask, memory_mask, return_weights=True, self_is_causal=self_is_causal)
                weights.append(w)
            else:
                x = layer(x, memory, self_mask, memory_mask, self_is_causal=self_is_causal)
        if self.norm is not None:
            x = self.norm(x)
        return (x, weights) if return_weights else x

    @classmethod
    def from_pytorch(cls, stack: nn.TransformerDecoder) -> TransformerDecoder:
        if not isinstance(stack, nn.TransformerDecoder):
            raise TypeError(f"stack must be an nn.TransformerDecoder, got {type(stack).__name__}")
        return _stack_from_pytorch(cls, stack, DecoderBlock)


def _stack_from_pytorch(cls, stack, block_cls):
    """Build ``cls`` around blocks copied from PyTorch's stack (and its final norm, if any)."""
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    model.layers = nn.ModuleList(block_cls.from_pytorch(layer) for layer in stack.layers)
    model.norm = copy.deepcopy(stack.norm) if stack.norm is not None else None
    return model


# --- models ---------------------------------------------------------------------------------------


@dataclass
class Seq2SeqConfig:
    """An encoder-decoder transformer: source and target vocabularies, widths, depths, the pad id."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 128
    num_heads: int = 4
    d_ff: int = 512
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    max_len: int = 128
    dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    pad_id: int = 0


class Seq2SeqTransformer(nn.Module, _CountsParameters):
    """The encoder-decoder of Vaswani et al. (2017): embeddings scaled by sqrt(d) plus sinusoidal PE,
    an encoder stack, a decoder stack and a linear head over the target vocabulary.

    ``forward(src, tgt)``: src ``(B, n_enc)``, tgt ``(B, n_dec)`` token ids (the decoder input: BOS and
    the target shifted right). The source padding mask (from ``pad_id``) and the causal mask are built
    inside. Returns logits ``(B, n_dec, |V_tgt|)``; with ``return_weights=True`` also a dict of weights.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = c = config
        self.src_embedding = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embedding = nn.Embedding(c.tgt_vocab_size, c.d_model)
        self.positional = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.encoder = TransformerEncoder(c.num_encoder_layers, c.d_model, c.num_heads, c.d_ff, c.dropout,
                                          c.activation, c.norm_first)
        self.decoder = TransformerDecoder(c.num_decoder_layers, c.d_model, c.num_heads, c.d_ff, c.dropout,
                                          c.activation, c.norm_first)
        self.head = nn.Linear(c.d_model, c.tgt_vocab_size)
        self.scale = embedding_scale(c.d_model)
        # Embeddings start with std 1/sqrt(d), so that after the sqrt(d) scale tokens and positions have
        # comparable norms (lesson 06); nn.Embedding's N(0, 1) would drown the positions by a factor sqrt(d).
        for embedding in (self.src_embedding, self.tgt_embedding):
            nn.init.normal_(embedding.weight, std=c.d_model**-0.5)

    def source_mask(self, src: torch.Tensor) -> torch.Tensor:
        """``(B, 1, n_enc)``: True at real source tokens, False at padding."""
        return (src != self.config.pad_id).unsqueeze(1)

    def encode(self, src: torch.Tensor, return_weights: bool = False):
        """src ``(B, n_enc)`` -> memory ``(B, n_enc, d)`` (and the encoder's weights on request)."""
        c = self.config
        check_tokens("src", src, c.src_vocab_size, c.max_len)
        x = self.positional(self.src_embedding(src) * self.scale)
        return self.encoder(x, self.source_mask(src), return_weights=return_weights)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, return_weights: bool = False):
        """tgt ``(B, n_dec)`` and memory ``(B, n_enc, d)`` -> logits ``(B, n_dec, |V_tgt|)``."""
        c = self.config
        check_tokens("tgt", tgt, c.tgt_vocab_size, c.max_len)
        if tgt.shape[0] != memory.shape[0]:
            raise ValueError(f"tgt and src must have the same batch size, got {tgt.shape[0]} and {memory.shape[0]}")
        x = self.positional(self.tgt_embedding(tgt) * self.scale)
        out = self.decoder(x, memory, causal_mask(tgt.shape[1], device=tgt.device), src_mask,
                           return_weights=return_weights, self_is_causal=True)
        if return_weights:
            return self.head(out[0]), out[1]
        return self.head(out)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, return_weights: bool = False):
        if return_weights:
            memory, encoder_weights = self.encode(src, return_weights=True)
            logits, decoder_weights = self.decode(tgt, memory, self.source_mask(src), return_weights=True)
            return logits, {
                "encoder": encoder_weights,
                "decoder_self": [w[0] for w in decoder_weights],
                "cross": [w[1] for w in decoder_weights],
            }
        return self.decode(tgt, self.encode(src), self.source_mask(src))


@dataclass
class DecoderOnlyConfig:
    """A GPT-style language model: one vocabulary, learned positions, causal self-attention only."""

    vocab_size: int
    d_model: int = 128
    num_heads: int = 4
    d_ff: int = 512
    num_layers: int = 2
    max_len: int = 128
    dropout: float = 0.0
    activation: str = "gelu"
    norm_first: bool = True
    tie_weights: bool = True
    # Lesson 11's variants: "rms" norms, grouped-query attention, and how positions enter.
    norm: str = "layer"
    num_kv_heads: int | None = None
    positional: str = "learned"  # "learned" (GPT-2), "sinusoidal" (2017) or "rotary" (RoPE)


class DecoderOnlyLM(nn.Module, _CountsParameters):
    """Token embedding + learned positions, blocks with a causal mask, a final norm, a head over |V|.

    With ``tie_weights`` the head reuses the token embedding matrix (Press & Wolf, 2017), so |V| d
    parameters are stored once. ``forward(tokens)``: ``(B, n)`` -> logits ``(B, n, |V|)``; the logits at
    position t depend on tokens 0..t only.
    """

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        positions = {"learned": lambda: LearnedPositionalEmbedding(c.max_len, c.d_model, c.dropout),
                     "sinusoidal": lambda: SinusoidalPositionalEncoding(c.d_model, c.max_len, c.dropout),
                     "rotary": lambda: None}  # rotary positions act inside attention instead
        if c.positional not in positions:
            raise ValueError(f"positional must be one of {sorted(positions)}, got {c.positional!r}")
        self.position_embedding = positions[c.positional]()
        self.blocks = nn.ModuleList(
            EncoderBlock(c.d_model, c.num_heads, c.d_ff, c.dropout, c.activation, c.norm_first, norm=c.norm,
                         num_kv_heads=c.num_kv_heads, rotary=c.positional == "rotary", max_len=c.max_len)
            for _ in range(c.num_layers))
        self.norm = make_norm(c.norm, c.d_model) if c.norm_first else nn.Identity()
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        # Small embeddings, as GPT-2 starts them (std 0.02): with nn.Embedding's N(0, 1) a tied head would
        # begin with logits of size sqrt(d) and a needlessly confident, slow-to-train model.
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        if isinstance(self.position_embedding, LearnedPositionalEmbedding):
            nn.init.normal_(self.position_embedding.embedding.weight, std=0.02)
        if c.tie_weights:
            self.head.weight = self.token_embedding.weight

    def new_cache(self) -> list[KVCache]:
        """An empty key-value cache, one per block, for :meth:`forward` during generation."""
        return [KVCache() for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, return_weights: bool = False, cache: list[KVCache] | None = None):
        """tokens ``(B, n)`` -> logits ``(B, n, |V|)``.

        With a ``cache`` (from :meth:`new_cache`), ``tokens`` are only the new positions: they are
        placed after the ``n_past`` cached ones, attend over all of them, and are added to the cache.
        """
        c = self.config
        offset = len(cache[0]) if cache else 0
        check_tokens("tokens", tokens, c.vocab_size, c.max_len)  # the positions check below covers the cache
        n = tokens.shape[1]
        x = self.token_embedding(tokens)
        if self.position_embedding is not None:
            x = self.position_embedding(x, offset=offset)
        elif offset + n > c.max_len:
            raise ValueError(f"positions {offset}..{offset + n - 1} exceed max_len={c.max_len}")
        # One new token after the cache may see every position: no mask needed (and none to check).
        mask = None if n == 1 else causal_mask(n, offset + n, offset=offset, device=tokens.device)
        is_causal = mask is not None and offset == 0  # square: the fused kernel can skip the masked half
        weights = []
        for i, block in enumerate(self.blocks):
            layer_cache = cache[i] if cache else None
            if return_weights:
                x, w = block(x, mask, return_weights=True, cache=layer_cache, is_causal=is_causal)
                weights.append(w)
            else:
                x = block(x, mask, cache=layer_cache, is_causal=is_causal)
        logits = self.head(self.norm(x))
        return (logits, weights) if return_weights else logits
