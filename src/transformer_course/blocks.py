"""The transformer block and its parts: the position-wise FFN, Add & Norm, the encoder block.

Shapes: batch B, positions n, model width d (``d_model``), hidden width of the FFN ``d_ff`` (often 4d).
Blocks take ``norm_first``: False is the post-norm block of the 2017 paper, ``x = norm(x + f(x))``;
True is the pre-norm block of most later models, ``x = x + f(norm(x))``. Each block accepts
``(B, n, d)`` and unbatched ``(n, d)`` input and returns the same shape.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course import _validate
from transformer_course.multihead import KVCache, MultiHeadAttention

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swiglu": F.silu}


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (Zhang & Sennrich, 2019): ``x / rms(x) * weight``, over the last axis.

    LayerNorm without the mean subtraction and the bias: cheaper, and in practice as good.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(_validate.integer("d_model", d_model, minimum=1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _validate.features("x", x, self.weight.shape[0])
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """``"layer"``: nn.LayerNorm (2017); ``"rms"``: RMSNorm (lesson 11)."""
    if kind == "layer":
        return nn.LayerNorm(d_model, eps=eps)
    if kind == "rms":
        return RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm must be 'layer' or 'rms', got {kind!r}")


def _activation(activation) -> Callable[[torch.Tensor], torch.Tensor]:
    if callable(activation):
        return activation
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or a callable, got {activation!r}")
    return ACTIVATIONS[activation]


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
        hidden = self.W_1(_validate.features("x", x, self.W_1.in_features))
        if self.gated:
            gate, up = hidden.chunk(2, dim=-1)
            return self.W_2(self.dropout(self.activation(gate) * up))
        return self.W_2(self.dropout(self.activation(hidden)))


class AddNorm(nn.Module):
    """Residual connection then layer normalisation: ``norm(x + dropout(y))`` for a sub-layer output y."""

    def __init__(self, d_model: int, dropout: float = 0.0, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape != y.shape:
            raise ValueError(f"the residual x and the sub-layer output y must have one shape, got "
                             f"{tuple(x.shape)} and {tuple(y.shape)}")
        return self.norm(x + self.dropout(y))


class EncoderBlock(nn.Module):
    """Self-attention then a position-wise FFN, each wrapped in a residual connection and a LayerNorm.

    Args:
        d_model, num_heads, d_ff: widths d, heads h, FFN hidden width.
        dropout: on attention weights and on each sub-layer's output.
        activation: ``"relu"`` (2017), ``"gelu"``, ``"swiglu"`` or a callable.
        norm_first: False for post-norm (2017), True for pre-norm.
        norm, num_kv_heads, rotary, max_len: lesson 11's variants: ``"rms"`` norms, grouped-query
            attention and rotary position embeddings (see :class:`MultiHeadAttention`).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, activation="relu",
                 norm_first: bool = False, eps: float = 1e-5, norm: str = "layer", num_kv_heads: int | None = None,
                 rotary: bool = False, max_len: int = 4096):
        super().__init__()
        self.norm_first = norm_first
        self.attention = MultiHeadAttention(d_model, num_heads, dropout=dropout, num_kv_heads=num_kv_heads,
                                            rotary=rotary, max_len=max_len)
        self.ffn = PositionWiseFFN(d_model, d_ff, activation, dropout)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_weights: bool = False,
                cache: KVCache | None = None, is_causal: bool = False):
        """x: ``(B, n, d)`` or ``(n, d)``; mask: boolean (True = may attend) broadcastable to
        ``(B, h, n, n)``, e.g. ``padding_mask(lens, n)``. Returns x's shape, and the attention weights
        ``(B, h, n, n)`` too when ``return_weights``. With a ``cache`` (generation), x holds only the new
        positions and attends over the cached ones too. ``is_causal``: a hint that mask is
        ``causal_mask(n)`` (see :class:`MultiHeadAttention`)."""
        def attend(h):
            return self.attention(h, mask=mask, need_weights=return_weights, cache=cache, is_causal=is_causal)

        if self.norm_first:
            attended, weights = attend(self.norm1(x))
            x = x + self.dropout1(attended)
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            attended, weights = attend(x)
            x = self.norm1(x + self.dropout1(attended))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return (x, weights) if return_weights else x

    @classmethod
    def from_pytorch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """A block with the weights (and settings) of ``layer``, computing the same function."""
        return _from_pytorch_layer(cls, layer, nn.TransformerEncoderLayer, {"attention": "self_attn"})


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, and an FFN, each with Add & Norm.

    Args as :class:`EncoderBlock`. ``forward(x, memory, self_mask=None, memory_mask=None)``:
    x ``(B, n_dec, d)`` the target so far, memory ``(B, n_enc, d)`` the encoder output; ``self_mask``
    (usually ``causal_mask(n_dec)``) broadcastable to ``(B, h, n_dec, n_dec)`` and ``memory_mask``
    (usually ``padding_mask(src_lens, n_enc)``) to ``(B, h, n_dec, n_enc)``, both True = may attend.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, activation="relu",
                 norm_first: bool = False, eps: float = 1e-5):
        super().__init__()
        self.norm_first = norm_first
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = PositionWiseFFN(d_model, d_ff, activation, dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.norm3 = nn.LayerNorm(d_model, eps=eps)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, return_weights: bool = False, self_is_causal: bool = False):
        """Returns x's shape; with ``return_weights`` also ``(self_weights, cross_weights)`` of shapes
        ``(B, h, n_dec, n_dec)`` and ``(B, h, n_dec, n_enc)``. ``self_is_causal``: a hint that self_mask is
        ``causal_mask(n_dec)`` (see :class:`MultiHeadAttention`)."""
        def self_attend(h):
            return self.self_attention(h, mask=self_mask, need_weights=return_weights, is_causal=self_is_causal)

        def cross_attend(h):  # queries from the decoder, keys and values from the encoder
            return self.cross_attention(h, memory, memory, mask=memory_mask, need_weights=return_weights)

        if self.norm_first:
            attended, self_weights = self_attend(self.norm1(x))
            x = x + self.dropout1(attended)
            attended, cross_weights = cross_attend(self.norm2(x))
            x = x + self.dropout2(attended)
            x = x + self.dropout3(self.ffn(self.norm3(x)))
        else:
            attended, self_weights = self_attend(x)
            x = self.norm1(x + self.dropout1(attended))
            attended, cross_weights = cross_attend(x)
            x = self.norm2(x + self.dropout2(attended))
            x = self.norm3(x + self.dropout3(self.ffn(x)))
        return (x, (self_weights, cross_weights)) if return_weights else x

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
    block = cls(attention.embed_dim, attention.num_heads, layer.linear1.out_features, layer.dropout.p,
                layer.activation, layer.norm_first, layer.norm1.eps).to(attention.in_proj_weight.dtype)
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
