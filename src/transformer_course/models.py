"""Whole models built from the blocks: encoder and decoder stacks, a seq2seq transformer, a decoder-only LM.

Shapes: batch B, source length n_enc, target length n_dec (n for a single sequence), width d, vocabulary
|V|. Token ids are integer tensors ``(B, n)``; models return logits ``(B, n, |V|)``. The weights of any
model's attention layers, by name, come from :func:`~transformer_course.multihead.attention_weights`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields

import torch
from torch import nn

from transformer_course import _validate
from transformer_course.blocks import BlockConfig, DecoderBlock, DecoderOnlyBlock, EncoderBlock, make_norm
from transformer_course.masking import cached_causal_mask, causal_mask
from transformer_course.multihead import KVCache
from transformer_course.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, embedding_scale


def check_tokens(name: str, tokens, vocab_size: int, max_len: int, offset: int = 0) -> torch.Tensor:
    """Token ids must be an integer tensor ``(B, n)`` with ids in ``[0, vocab_size)``, at positions
    ``offset .. offset + n - 1`` below ``max_len``."""
    _validate.integers(name, tokens, "integer token ids")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, n), got {tuple(tokens.shape)}")
    _validate.positions(tokens.shape[1], max_len, offset, what=name)
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


class _Stack(nn.Module, _CountsParameters):
    """``num_layers`` blocks of one kind, each with its own weights; pre-norm stacks end with a final norm
    (as GPT-2 and PyTorch do), since pre-norm blocks leave the residual stream itself unnormalised."""

    block: type[nn.Module]  # the block it stacks
    pytorch: type[nn.Module]  # PyTorch's stack of the same blocks

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, **options):
        super().__init__()
        num_layers = _validate.integer("num_layers", num_layers, minimum=1)
        self.config = c = BlockConfig(d_model=d_model, num_heads=num_heads, d_ff=d_ff, **options)
        self.layers = nn.ModuleList(self.block(d_model, num_heads, d_ff, **options) for _ in range(num_layers))
        self.norm = make_norm(c.norm, c.d_model, c.eps) if c.norm_first else None

    @classmethod
    def from_pytorch(cls, stack: nn.Module) -> _Stack:
        """A stack with the layers (copied into our blocks) and final norm of PyTorch's ``stack``."""
        if not isinstance(stack, cls.pytorch):
            raise TypeError(f"stack must be an nn.{cls.pytorch.__name__}, got {type(stack).__name__}")
        model = cls.__new__(cls)
        nn.Module.__init__(model)
        model.layers = nn.ModuleList(cls.block.from_pytorch(layer) for layer in stack.layers)
        model.config = model.layers[0].config
        model.norm = copy.deepcopy(stack.norm) if stack.norm is not None else None
        return model


class TransformerEncoder(_Stack):
    """``TransformerEncoder(num_layers, d_model, num_heads, d_ff, **options)``: encoder blocks, the options
    being the fields of :class:`BlockConfig` by keyword. ``forward(x, mask=None)``: ``(B, n, d) -> (B, n, d)``."""

    block, pytorch = EncoderBlock, nn.TransformerEncoder

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)  # (B, n, d)
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(_Stack):
    """``TransformerDecoder(num_layers, d_model, num_heads, d_ff, **options)``: decoder blocks.

    ``forward(x, memory, self_mask=None, memory_mask=None, self_is_causal=False)``: x ``(B, n_dec, d)``,
    memory ``(B, n_enc, d)``; returns ``(B, n_dec, d)``. ``self_is_causal`` is the hint of :class:`DecoderBlock`.
    """

    block, pytorch = DecoderBlock, nn.TransformerDecoder

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, *, self_is_causal: bool = False) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, memory, self_mask, memory_mask, self_is_causal=self_is_causal)  # (B, n_dec, d)
        return x if self.norm is None else self.norm(x)


# --- models ---------------------------------------------------------------------------------------


# The models' default sizes; every other option of their blocks defaults to BlockConfig's (the 2017 block) unless
# a model says otherwise where it declares the field (DecoderOnlyConfig: GPT-2's GELU and pre-norm).
DEFAULTS = BlockConfig(d_model=128, num_heads=4, d_ff=512, max_len=128)


class _ModelConfig:
    """What the two model configurations share: their blocks' :class:`BlockConfig`, made of the fields of the
    same names (and :meth:`_variant_options`), and the checks of every field.

    A model configuration lists its own fields, in the order of its constructor (the vocabulary sizes first,
    positionally); it is frozen: change a field with ``dataclasses.replace``, which checks it again.
    """

    def block_config(self) -> BlockConfig:
        """The options of this model's blocks, checked."""
        shared = {f.name: getattr(self, f.name) for f in fields(BlockConfig) if hasattr(self, f.name)}
        return BlockConfig(**shared, **self._variant_options())

    def block_options(self) -> dict:
        """:meth:`block_config` as keyword arguments of a block or a stack, by name."""
        block = self.block_config()
        return {f.name: getattr(block, f.name) for f in fields(block)}

    def _variant_options(self) -> dict:
        """Block options that this model derives from fields of another name."""
        return {}

    def _counts(self) -> tuple[str, ...]:
        """The fields that count something (vocabulary sizes, layers, positions): whole numbers >= 1."""
        raise NotImplementedError

    def __post_init__(self):
        for name in self._counts():
            _validate.integer(name, getattr(self, name), minimum=1)
        self.block_config()  # a bad width, head count, dropout, activation or norm fails here


@dataclass(frozen=True)
class Seq2SeqConfig(_ModelConfig):
    """An encoder-decoder transformer: source and target vocabularies, widths, depths, the pad id."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = DEFAULTS.d_model
    num_heads: int = DEFAULTS.num_heads
    d_ff: int = DEFAULTS.d_ff
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    max_len: int = DEFAULTS.max_len
    dropout: float = DEFAULTS.dropout
    activation: str = DEFAULTS.activation
    norm_first: bool = DEFAULTS.norm_first
    pad_id: int = 0

    def _counts(self) -> tuple[str, ...]:
        return ("src_vocab_size", "tgt_vocab_size", "num_encoder_layers", "num_decoder_layers", "max_len")


class Seq2SeqTransformer(nn.Module, _CountsParameters):
    """The encoder-decoder of Vaswani et al. (2017): embeddings scaled by sqrt(d) plus sinusoidal PE,
    an encoder stack, a decoder stack and a linear head over the target vocabulary.

    ``forward(src, tgt)``: src ``(B, n_enc)``, tgt ``(B, n_dec)`` token ids (the decoder input: BOS and
    the target shifted right). The source padding mask (from ``pad_id``) and the causal mask are built
    inside. Returns logits ``(B, n_dec, |V_tgt|)``; :func:`~transformer_course.multihead.attention_weights`
    reads the weights of ``"encoder.layers.0.attention"``, ``"decoder.layers.0.self_attention"``,
    ``"decoder.layers.0.cross_attention"``, ...
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = c = config
        self.src_embedding = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embedding = nn.Embedding(c.tgt_vocab_size, c.d_model)
        self.positional = SinusoidalPositionalEncoding(c.d_model, max_len=c.max_len, dropout=c.dropout)
        self.encoder = TransformerEncoder(c.num_encoder_layers, **c.block_options())
        self.decoder = TransformerDecoder(c.num_decoder_layers, **c.block_options())
        self.head = nn.Linear(c.d_model, c.tgt_vocab_size)
        self.scale = embedding_scale(c.d_model)
        # Embeddings start with std 1/sqrt(d), so that after the sqrt(d) scale tokens and positions have
        # comparable norms (lesson 06); nn.Embedding's N(0, 1) would drown the positions by a factor sqrt(d).
        for embedding in (self.src_embedding, self.tgt_embedding):
            nn.init.normal_(embedding.weight, std=c.d_model**-0.5)

    def source_mask(self, src: torch.Tensor) -> torch.Tensor:
        """``(B, 1, n_enc)``: True at real source tokens, False at padding."""
        return (src != self.config.pad_id).unsqueeze(1)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """src ``(B, n_enc)`` -> memory ``(B, n_enc, d)``."""
        c = self.config
        check_tokens("src", src, c.src_vocab_size, c.max_len)
        x = self.positional(self.src_embedding(src) * self.scale)  # (B, n_enc, d)
        return self.encoder(x, self.source_mask(src))

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """tgt ``(B, n_dec)``, memory ``(B, n_enc, d)``, src_mask ``(B, 1, n_enc)`` -> logits ``(B, n_dec, |V|)``."""
        c = self.config
        check_tokens("tgt", tgt, c.tgt_vocab_size, c.max_len)
        if tgt.shape[0] != memory.shape[0]:
            raise ValueError(f"tgt and src must have the same batch size, got {tgt.shape[0]} and {memory.shape[0]}")
        x = self.positional(self.tgt_embedding(tgt) * self.scale)  # (B, n_dec, d)
        x = self.decoder(x, memory, causal_mask(tgt.shape[1], device=tgt.device), src_mask, self_is_causal=True)
        return self.head(x)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src), self.source_mask(src))


@dataclass(frozen=True)
class DecoderOnlyConfig(_ModelConfig):
    """A GPT-style language model: one vocabulary, learned positions, causal self-attention only."""

    vocab_size: int
    d_model: int = DEFAULTS.d_model
    num_heads: int = DEFAULTS.num_heads
    d_ff: int = DEFAULTS.d_ff
    num_layers: int = 2
    max_len: int = DEFAULTS.max_len
    dropout: float = DEFAULTS.dropout
    activation: str = "gelu"  # GPT-2's, where the 2017 block has ReLU
    norm_first: bool = True  # GPT-2's pre-norm, where the 2017 block is post-norm
    tie_weights: bool = True
    # Lesson 11's variants: "rms" norms, grouped-query attention, and how positions enter.
    norm: str = DEFAULTS.norm
    num_kv_heads: int | None = DEFAULTS.num_kv_heads
    positional: str = "learned"  # "learned" (GPT-2), "sinusoidal" (2017) or "rotary" (RoPE)

    def _counts(self) -> tuple[str, ...]:
        return ("vocab_size", "num_layers", "max_len")

    def _variant_options(self) -> dict:
        if self.positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {sorted(POSITIONAL)}, got {self.positional!r}")
        return dict(rotary=self.positional == "rotary")


POSITIONAL = ("learned", "sinusoidal", "rotary")


class DecoderOnlyLM(nn.Module, _CountsParameters):
    r"""Token embedding + learned positions, blocks with a causal mask, a final norm, a head over |V|.

    The blocks are :data:`~transformer_course.blocks.DecoderOnlyBlock`\ s: encoder blocks under a causal
    mask. With ``tie_weights`` the head reuses the token embedding matrix (Press & Wolf, 2017), so |V| d
    parameters are stored once. ``forward(tokens)``: ``(B, n)`` -> logits ``(B, n, |V|)``; the logits at
    position t depend on tokens 0..t only.
    """

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        positions = {"learned": LearnedPositionalEmbedding, "sinusoidal": SinusoidalPositionalEncoding}
        self.position_embedding = (positions[c.positional](c.d_model, max_len=c.max_len, dropout=c.dropout)
                                   if c.positional in positions else None)  # rotary acts inside attention instead
        self.blocks = nn.ModuleList(DecoderOnlyBlock(**c.block_options()) for _ in range(c.num_layers))
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

    def forward(self, tokens: torch.Tensor, cache: list[KVCache] | None = None) -> torch.Tensor:
        """tokens ``(B, n)`` -> logits ``(B, n, |V|)``.

        With a ``cache`` (from :meth:`new_cache`), ``tokens`` are only the new positions: they are
        placed after the ``n_past`` cached ones, attend over all of them, and are added to the cache.
        """
        c = self.config
        offset = len(cache[0]) if cache else 0
        check_tokens("tokens", tokens, c.vocab_size, c.max_len, offset)
        n = tokens.shape[1]
        x = self.token_embedding(tokens)  # (B, n, d)
        if self.position_embedding is not None:
            x = self.position_embedding(x, offset=offset)
        mask, is_causal = cached_causal_mask(n, offset, device=tokens.device)  # (n, offset + n) or None for one token
        for block, layer_cache in zip(self.blocks, cache or [None] * len(self.blocks), strict=True):
            x = block(x, mask, cache=layer_cache, is_causal=is_causal)  # (B, n, d)
        return self.head(self.norm(x))  # (B, n, |V|)
