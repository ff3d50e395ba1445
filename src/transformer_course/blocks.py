"""The transformer block and its parts: the position-wise FFN, Add & Norm, the encoder and decoder blocks.

Shapes: batch B, positions n, model width d (``d_model``), hidden width of the FFN ``d_ff`` (often 4d).
Blocks take ``norm_first``: False is the post-norm block of the 2017 paper, ``x = norm(x + f(x))``;
True is the pre-norm block of most later models, ``x = x + f(norm(x))``. Each block accepts
``(B, n, d)`` and unbatched ``(n, d)`` input and returns the same shape. Their options, the same for
every block, are the fields of :class:`BlockConfig`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course import _validate
from transformer_course.multihead import KVCache, MultiHeadAttention
from transformer_course.positional import MAX_LEN

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swiglu": F.silu}


NORM_EPS = 1e-5  # LayerNorm's default, and every norm's here: the models' norms all use it


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (Zhang & Sennrich, 2019): ``x / rms(x) * weight``, over the last axis.

    LayerNorm without the mean subtraction and the bias: cheaper, and in practice as good.
    """

    def __init__(self, d_model: int, eps: float = NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(_validate.integer("d_model", d_model, minimum=1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(_validate.features("x", x, self.weight.shape[0]), self.weight, self.eps)  # (..., d)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm's formula over the last axis, without checks: x ``(..., d)``, weight ``(d,)`` -> ``(..., d)``."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


NORMS: dict[str, Callable[..., nn.Module]] = {"layer": nn.LayerNorm, "rms": RMSNorm}


def norm_function(norm: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function a norm module (``nn.LayerNorm``, :class:`RMSNorm` or ``nn.Identity``) computes, as a
    call of its functional form on the module's own weights, without checks or module calls: for a fast
    path that must compute exactly what the module does. ``(..., d) -> (..., d)``."""
    if isinstance(norm, nn.LayerNorm):
        return functools.partial(F.layer_norm, normalized_shape=norm.normalized_shape, weight=norm.weight,
                                 bias=norm.bias, eps=norm.eps)
    if isinstance(norm, RMSNorm):
        return functools.partial(rms_norm, weight=norm.weight, eps=norm.eps)
    if isinstance(norm, nn.Identity):
        return _identity
    raise TypeError(f"norm must be an nn.LayerNorm, RMSNorm or nn.Identity, got {type(norm).__name__}")


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def make_norm(kind: str, d_model: int, eps: float = NORM_EPS) -> nn.Module:
    """``"layer"``: nn.LayerNorm (2017); ``"rms"``: RMSNorm (lesson 11)."""
    if kind not in NORMS:
        raise ValueError(f"norm must be 'layer' or 'rms', got {kind!r}")
    return NORMS[kind](d_model, eps=eps)


def _activation(activation) -> Callable[[torch.Tensor], torch.Tensor]:
    if callable(activation):
        return activation
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or a callable, got {activation!r}")
    return ACTIVATIONS[activation]


@dataclass(frozen=True, kw_only=True)
class BlockConfig:
    """Every option of a transformer block, the same for encoder and decoder blocks and their stacks.

    Frozen and keyword-only (``BlockConfig(d_model=64, num_heads=4, d_ff=256, norm_first=True)``); change a
    field with ``dataclasses.replace``, which checks it again. Blocks and stacks take ``d_model, num_heads,
    d_ff`` and the other fields by keyword (``EncoderBlock(64, 4, 256, norm_first=True)``) and keep them as
    ``.config``; a bad value fails here, with the name of the field. Its defaults are the 2017 block's, and
    the model configurations take them (:class:`~transformer_course.models.Seq2SeqConfig`) unless they say
    otherwise (:class:`~transformer_course.models.DecoderOnlyConfig`: GPT-2's GELU and pre-norm).

    Args:
        d_model, num_heads, d_ff: widths d, heads h, FFN hidden width (often 4d).
        dropout: on attention weights and on each sub-layer's output.
        activation: ``"relu"`` (2017), ``"gelu"``, ``"swiglu"`` or a callable.
        norm_first: False for post-norm (2017), True for pre-norm.
        norm, eps: ``"layer"`` (LayerNorm) or ``"rms"`` (RMSNorm, lesson 11), and their epsilon.
        num_kv_heads, rotary, max_len: lesson 11's grouped-query attention and rotary position embeddings
            in self-attention (see :class:`MultiHeadAttention`); ``max_len`` bounds the rotary positions.
    """

    d_model: int
    num_heads: int
    d_ff: int
    dropout: float = 0.0
    activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu"
    norm_first: bool = False
    norm: str = "layer"
    eps: float = NORM_EPS
    num_kv_heads: int | None = None
    rotary: bool = False
    max_len: int = MAX_LEN

    def __post_init__(self):
        _validate.heads(self.d_model, self.num_heads, self.num_kv_heads)
        _validate.integer("d_ff", self.d_ff, minimum=1)
        _validate.probability("dropout", self.dropout)
        _activation(self.activation)
        for name in ("norm_first", "rotary"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {_validate.describe(getattr(self, name))}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be 'layer' or 'rms', got {self.norm!r}")
        if not _validate.real("eps", self.eps) > 0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")
        _validate.integer("max_len", self.max_len, minimum=1)


class PositionWiseFFN(nn.Module):
    """``W_2 act(W_1 x + b_1) + b_2``, applied to every position separately: ``(..., d) -> (..., d)``.

    With ``activation="swiglu"`` (lesson 11) it is the gated FFN ``W_2 (silu(x W_gate) * x W_up)``: W_1
    then holds the gate and the up projection side by side, ``d -> 2 d_ff``.
    """

    def __init__(self, d_model: int, d_ff: int, activation="relu", dropout: float = 0.0):
        super().__init__()
        d_model = _validate.integer("d_model", d_model, minimum=1)
        d_ff = _validate.integer("d_ff", d_ff, minimum=1)
        self.gated = activation == "swiglu"
        self.W_1 = nn.Linear(d_model, 2 * d_ff if self.gated else d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.activation = _activation(activation)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _validate.features("x", x, self.W_1.in_features)
        return feed_forward(x, self.W_1.weight, self.W_1.bias, self.W_2.weight, self.W_2.bias, self.activation,
                            self.gated, self.dropout)  # (..., d)


def feed_forward(x: torch.Tensor, W_1: torch.Tensor, b_1: torch.Tensor | None, W_2: torch.Tensor,
                 b_2: torch.Tensor | None, activation: Callable[[torch.Tensor], torch.Tensor], gated: bool,
                 dropout: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """:class:`PositionWiseFFN`'s function, without checks: x ``(..., d)``, W_1 ``(d_ff, d)`` (``(2 d_ff, d)``,
    gate then up, when ``gated``), W_2 ``(d, d_ff)`` -> ``(..., d)``; ``dropout`` acts on the hidden layer."""
    hidden = F.linear(x, W_1, b_1)  # (..., d_ff), or 2 d_ff if gated
    if gated:
        gate, up = hidden.chunk(2, dim=-1)
        hidden = activation(gate) * up
    else:
        hidden = activation(hidden)
    return F.linear(hidden if dropout is None else dropout(hidden), W_2, b_2)


class AddNorm(nn.Module):
    """Residual connection then layer normalisation: ``norm(x + dropout(y))`` for a sub-layer output y."""

    def __init__(self, d_model: int, dropout: float = 0.0, eps: float = NORM_EPS):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape != y.shape:
            raise ValueError(f"the residual x and the sub-layer output y must have one shape, got "
                             f"{tuple(x.shape)} and {tuple(y.shape)}")
        return add_norm(x, self.dropout(y), self.norm)


def add_norm(x: torch.Tensor, y: torch.Tensor, norm: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Add & Norm, without checks: ``norm(x + y)`` for the residual x and a sub-layer's output y, ``(..., d)``."""
    return norm(x + y)


def residual(x: torch.Tensor, norm: Callable[[torch.Tensor], torch.Tensor], norm_first: bool,
             sublayer: Callable[..., torch.Tensor], *args) -> torch.Tensor:
    """One sub-layer with its residual connection and norm, ``(..., d) -> (..., d)``: pre-norm
    ``x + sublayer(norm(x), *args)``, or post-norm (2017) Add & Norm, ``norm(x + sublayer(x, *args))``."""
    if norm_first:
        return x + sublayer(norm(x), *args)
    return add_norm(x, sublayer(x, *args), norm)


class EncoderBlock(nn.Module):
    """Self-attention then a position-wise FFN, each wrapped in a residual connection and a norm.

    ``EncoderBlock(d_model, num_heads, d_ff, **options)``, the options being the fields of
    :class:`BlockConfig` by keyword. ``forward(x, mask=None)``: x ``(B, n, d)`` or ``(n, d)``, the same
    shape out. A decoder-only model stacks this block too (see :data:`DecoderOnlyBlock`).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, **options):
        super().__init__()
        self.config = c = BlockConfig(d_model=d_model, num_heads=num_heads, d_ff=d_ff, **options)
        self.norm_first = c.norm_first
        self.attention = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout, num_kv_heads=c.num_kv_heads,
                                            rotary=c.rotary, max_len=c.max_len)
        self.ffn = PositionWiseFFN(c.d_model, c.d_ff, c.activation, c.dropout)
        self.norm1 = make_norm(c.norm, c.d_model, c.eps)
        self.norm2 = make_norm(c.norm, c.d_model, c.eps)
        self.dropout1 = nn.Dropout(c.dropout)
        self.dropout2 = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, cache: KVCache | None = None,
                is_causal: bool = False) -> torch.Tensor:
        """x: ``(B, n, d)`` or ``(n, d)``; mask: boolean (True = may attend) broadcastable to ``(B, h, n, n)``,
        e.g. ``padding_mask(lens, n)``. Returns x's shape. With a ``cache`` (generation), x holds only the
        new positions and attends over the cached ones too. ``is_causal``: a hint that mask is
        ``causal_mask(n)`` (see :class:`MultiHeadAttention`)."""
        x = residual(x, self.norm1, self.norm_first, self._self_attention, mask, cache, is_causal)
        return residual(x, self.norm2, self.norm_first, self._feed_forward)

    def _self_attention(self, x, mask, cache, is_causal) -> torch.Tensor:
        # need_weights=False: the fused kernel; attention_weights() asks for the weights when they are read.
        out, _ = self.attention(x, mask=mask, need_weights=False, cache=cache, is_causal=is_causal)
        return self.dropout1(out)

    def _feed_forward(self, x) -> torch.Tensor:
        return self.dropout2(self.ffn(x))

    @classmethod
    def from_pytorch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """A block with the weights (and settings) of ``layer``, computing the same function."""
        return _from_pytorch_layer(cls, layer, nn.TransformerEncoderLayer, {"attention": "self_attn"})


# A decoder-only model (GPT) stacks the encoder's block: self-attention and an FFN, no cross-attention.
# The causal mask it is given, not its parts, makes it a decoder.
DecoderOnlyBlock = EncoderBlock


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, and an FFN, each with Add & Norm.

    Options as :class:`EncoderBlock` (the fields of :class:`BlockConfig`); ``rotary`` applies to the
    self-attention only, since the encoder's positions are not the decoder's. ``forward(x, memory,
    self_mask=None, memory_mask=None)``: x ``(B, n_dec, d)`` the target so far, memory ``(B, n_enc, d)``
    the encoder output; ``self_mask`` (usually ``causal_mask(n_dec)``) broadcastable to
    ``(B, h, n_dec, n_dec)`` and ``memory_mask`` (usually ``padding_mask(src_lens, n_enc)``) to
    ``(B, h, n_dec, n_enc)``, both True = may attend.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, **options):
        super().__init__()
        self.config = c = BlockConfig(d_model=d_model, num_heads=num_heads, d_ff=d_ff, **options)
        self.norm_first = c.norm_first
        self.self_attention = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout,
                                                 num_kv_heads=c.num_kv_heads, rotary=c.rotary, max_len=c.max_len)
        self.cross_attention = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout,
                                                  num_kv_heads=c.num_kv_heads)
        self.ffn = PositionWiseFFN(c.d_model, c.d_ff, c.activation, c.dropout)
        self.norm1 = make_norm(c.norm, c.d_model, c.eps)
        self.norm2 = make_norm(c.norm, c.d_model, c.eps)
        self.norm3 = make_norm(c.norm, c.d_model, c.eps)
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(c.dropout) for _ in range(3))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, *, self_is_causal: bool = False) -> torch.Tensor:
        """Returns x's shape, ``(B, n_dec, d)``. ``self_is_causal``: a hint that self_mask is
        ``causal_mask(n_dec)`` (see :class:`MultiHeadAttention`)."""
        x = residual(x, self.norm1, self.norm_first, self._self_attention, self_mask, self_is_causal)
        x = residual(x, self.norm2, self.norm_first, self._cross_attention, memory, memory_mask)
        return residual(x, self.norm3, self.norm_first, self._feed_forward)

    def _self_attention(self, x, mask, is_causal) -> torch.Tensor:
        out, _ = self.self_attention(x, mask=mask, need_weights=False, is_causal=is_causal)
        return self.dropout1(out)

    def _cross_attention(self, x, memory, mask) -> torch.Tensor:  # queries from the decoder, keys/values from memory
        out, _ = self.cross_attention(x, memory, memory, mask=mask, need_weights=False)
        return self.dropout2(out)

    def _feed_forward(self, x) -> torch.Tensor:
        return self.dropout3(self.ffn(x))

    @classmethod
    def from_pytorch(cls, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """A block with the weights (and settings) of ``layer``, computing the same function."""
        return _from_pytorch_layer(cls, layer, nn.TransformerDecoderLayer,
                                   {"self_attention": "self_attn", "cross_attention": "multihead_attn"})


def _from_pytorch_layer(cls, layer, layer_type: type, attentions: dict[str, str]):
    """A ``cls`` block with the settings and weights of PyTorch's ``layer``; ``attentions`` maps our
    attention attributes to PyTorch's (``{"attention": "self_attn"}``)."""
    if not isinstance(layer, layer_type):
        raise TypeError(f"layer must be an nn.{layer_type.__name__}, got {type(layer).__name__}")
    attention = layer.self_attn
    block = cls(attention.embed_dim, attention.num_heads, layer.linear1.out_features, dropout=layer.dropout.p,
                activation=layer.activation, norm_first=layer.norm_first, eps=layer.norm1.eps)
    block = block.to(attention.in_proj_weight.dtype)
    for ours, theirs in attentions.items():
        setattr(block, ours, MultiHeadAttention.from_pytorch(getattr(layer, theirs)))
    copy_ffn_and_norms(block, layer)
    return block


def copy_ffn_and_norms(block: nn.Module, layer: nn.Module) -> None:
    """Copy a PyTorch transformer layer's linear1/linear2 into ``block.ffn`` and its norms into ``block``."""
    with torch.no_grad():
        block.ffn.W_1.load_state_dict(layer.linear1.state_dict())
        block.ffn.W_2.load_state_dict(layer.linear2.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            if hasattr(layer, name):
                getattr(block, name).load_state_dict(getattr(layer, name).state_dict())
