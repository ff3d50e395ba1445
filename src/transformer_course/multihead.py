"""Multi-head attention: h scaled dot-product attentions over h slices of d, side by side.

Shapes: batch B, queries n_q, keys n_k, model width d = h * d_h, heads h. The module keeps its four
projections as ``nn.Linear`` attributes ``W_q, W_k, W_v, W_o`` (each ``d x d``), so a reader can find
every matrix of the paper by name, and :meth:`MultiHeadAttention.from_pytorch` copies the weights of an
``nn.MultiheadAttention`` into it (the two then agree number for number). :func:`attention_weights`
reads the weights of every attention layer of any model, by name, for the lessons' heatmaps.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course import _validate
from transformer_course.attention import attention_unchecked, empty_rows
from transformer_course.positional import MAX_LEN, RotaryEmbedding


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(..., n, d) -> (..., h, n, d/h)``: head ``i`` gets features ``i*d/h .. (i+1)*d/h - 1``."""
    _validate.tensor("x", x, min_dim=2)
    num_heads = _validate.integer("num_heads", num_heads, minimum=1)
    *batch, n, d = x.shape
    if d % num_heads:
        raise ValueError(f"the last dimension of x (d={d}) must be divisible by num_heads={num_heads}")
    # Reshape splits d into (h, d/h) per position; the transpose then groups the positions by head.
    return x.reshape(*batch, n, num_heads, d // num_heads).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(..., h, n, d_h) -> (..., n, h*d_h)``: the inverse of :func:`split_heads`."""
    _validate.tensor("x", x, min_dim=3)
    *batch, h, n, d_h = x.shape
    return x.transpose(-3, -2).reshape(*batch, n, h * d_h)


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                    is_causal: bool = False, dropout_p: float = 0.0) -> torch.Tensor:
    """Every head's attention through PyTorch's fused ``F.scaled_dot_product_attention``, without checks.

    q ``(..., h, n_q, d_h)``; k, v ``(..., h_kv, n_k, d_h)`` where h_kv divides h (grouped-query attention:
    each key/value head serves ``h / h_kv`` query heads); mask boolean (True = may attend) or additive,
    broadcastable to ``(..., h, n_q, n_k)``. ``is_causal``: mask is the square ``causal_mask(n)``, and the
    kernel skips the masked half instead of reading it. Returns the heads' outputs ``(..., h, n_q, d_h)``.
    """
    return F.scaled_dot_product_attention(q, k, v, attn_mask=None if is_causal else mask, dropout_p=dropout_p,
                                          is_causal=is_causal, enable_gqa=k.shape[-3] != q.shape[-3])


class KVCache:
    """The keys and values one attention layer has computed so far, ``(B, h, n_past, d_h)`` each.

    During generation each new token's key and value are appended, so a step projects only the new
    token instead of the whole sequence. Storage grows by doubling, so appending costs O(1) on average.
    """

    def __init__(self):
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.length = 0

    def __len__(self) -> int:
        return self.length

    @property
    def keys(self) -> torch.Tensor | None:
        """The cached keys, ``(B, h_kv, n_past, d_h)``, or None before the first append (a view: do not edit)."""
        return None if self._k is None else self._k[..., : self.length, :]

    @property
    def values(self) -> torch.Tensor | None:
        """The cached values, ``(B, h_kv, n_past, d_h)``, or None before the first append."""
        return None if self._v is None else self._v[..., : self.length, :]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``(B, h, n_new, d_h)`` keys and values; return all of them, ``(B, h, n_past + n_new, d_h)``."""
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"keys and values must agree in (B, h, n_new), got shapes {tuple(k.shape)} and "
                             f"{tuple(v.shape)}")
        if self._k is not None and (self._k.shape[:-2] != k.shape[:-2] or self._k.shape[-1] != k.shape[-1]):
            held = (*self._k.shape[:-2], self.length, self._k.shape[-1])
            raise ValueError(f"the cache holds (B, h, n_past, d_h) = {held}, got keys of shape {tuple(k.shape)}: "
                             "new keys must match in B, h and d_h")
        end = self.length + k.shape[-2]
        if self._k is None or end > self._k.shape[-2]:
            capacity = max(64, 2 * end)
            grown_k = k.new_empty(*k.shape[:-2], capacity, k.shape[-1])
            grown_v = v.new_empty(*v.shape[:-2], capacity, v.shape[-1])
            if self.length:
                grown_k[..., : self.length, :] = self.keys
                grown_v[..., : self.length, :] = self.values
            self._k, self._v = grown_k, grown_v
        self._k[..., self.length : end, :] = k
        self._v[..., self.length : end, :] = v
        self.length = end
        return self.keys, self.values


class MultiHeadAttention(nn.Module):
    """Multi-head attention of Vaswani et al. (2017) with ``W_q, W_k, W_v, W_o`` as ``nn.Linear``.

    Args:
        d_model: model width d; queries, keys and values all have this width.
        num_heads: number of heads h; must divide ``d_model``.
        bias: whether the four projections have biases (as ``nn.MultiheadAttention``'s ``bias``).
        dropout: dropout probability on the attention weights, in training mode only.
        num_kv_heads: (lesson 11) grouped-query attention: only this many key/value heads, each shared by
            ``num_heads / num_kv_heads`` query heads (1 is multi-query attention). ``W_k`` and ``W_v`` then
            map d to ``num_kv_heads * d_head``, and a KV cache stores that much less.
        rotary: (lesson 11) rotate queries and keys by their positions (RoPE) instead of relying on
            positions added to the input; ``max_len`` bounds the positions.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0, *,
                 num_kv_heads: int | None = None, rotary: bool = False, max_len: int = MAX_LEN):
        super().__init__()
        d_model, num_heads, num_kv_heads = _validate.heads(d_model, num_heads, num_kv_heads)
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.dropout = _validate.probability("dropout", dropout)
        self.d_head = d_model // num_heads
        d_kv = num_kv_heads * self.d_head
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_kv, bias=bias)
        self.W_v = nn.Linear(d_model, d_kv, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.rotary = RotaryEmbedding(self.d_head, max_len=max_len) if rotary else None

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
        cache: KVCache | None = None,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: ``(B, n_q, d)`` or unbatched ``(n_q, d)``.
            key: ``(B, n_k, d)`` or ``(n_k, d)``; ``None`` means self-attention (``key = query``).
            value: like ``key``; ``None`` means ``value = key``.
            mask: boolean (True = may attend) or additive float mask, broadcastable to
                ``(B, h, n_q, n_k)``. A 3-D mask is read as ``(B, n_q, n_k)`` (the same for every
                head), e.g. ``padding_mask(lens, n_k)`` of shape ``(B, 1, n_k)``.
            need_weights: return the weights (explicit path); with False the fused
                ``F.scaled_dot_product_attention`` computes the output and the weights are ``None``.
            cache: for self-attention during generation: the new positions' keys and values are appended
                to it and the queries attend over all cached positions (``n_k = n_past + n_new``).
            is_causal: a hint, as in PyTorch, that ``mask`` is the square causal mask ``causal_mask(n)``.
                The fused path then skips the masked half of the scores instead of reading the mask
                (the same numbers, faster); the explicit path uses ``mask`` as always.

        Returns:
            ``(output, weights)``: output like ``query``, ``(B, n_q, d)``; weights ``(B, h, n_q, n_k)``
            (``(h, n_q, n_k)`` unbatched) or ``None``.
        """
        key = query if key is None else key
        value = key if value is None else value
        mask = self._check_inputs(query, key, value, mask, cache, is_causal)
        q = split_heads(self.W_q(query), self.num_heads)  # (B, h, n_q, d_h)
        k = split_heads(self.W_k(key), self.num_kv_heads)  # (B, h_kv, n_k, d_h)
        v = split_heads(self.W_v(value), self.num_kv_heads)  # (B, h_kv, n_k, d_h)
        if self.rotary is not None:  # the new positions come after the cached ones
            offset = len(cache) if cache is not None else 0
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, h_kv, n_past + n_new, d_h)
        if self.num_kv_heads != self.num_heads:  # each key/value head serves a group of query heads
            group = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)  # (B, h, n_k, d_h)
        heads, weights = self._attend(q, k, v, mask, need_weights, is_causal)  # (B, h, n_q, d_h)
        return self.W_o(merge_heads(heads)), weights  # (B, n_q, d)

    def _attend(self, q, k, v, mask, need_weights: bool, is_causal: bool):
        """Every head's attention: the explicit path when the weights are wanted, or when a query may attend
        nowhere (its zero output the fused kernel may not give); PyTorch's fused kernel otherwise."""
        dropout_p = self.dropout if self.training else 0.0
        if need_weights or (not is_causal and mask is not None and empty_rows(mask, -1, q.dim()).any()):
            heads, weights = attention_unchecked(q, k, v, mask, dropout_p, None, q.shape[:-2])  # inputs checked
            return heads, (weights if need_weights else None)
        return fused_attention(q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p), None

    def _check_inputs(self, query, key, value, mask, cache, is_causal) -> torch.Tensor | None:
        """Every argument check of :meth:`forward`, each error naming the argument; returns the mask with a
        head axis (``(B, n_q, n_k)`` -> ``(B, 1, n_q, n_k)``)."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            _validate.tensor(name, x, floating=True)
            if x.dim() not in (2, 3) or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must have shape (B, n, {self.d_model}) or (n, {self.d_model}), got {tuple(x.shape)}"
                )
        if not query.dim() == key.dim() == value.dim():
            raise ValueError(
                f"query, key and value must all be batched or all unbatched, got shapes {tuple(query.shape)}, "
                f"{tuple(key.shape)} and {tuple(value.shape)}"
            )
        if key.shape[:-1] != value.shape[:-1]:
            raise ValueError(
                f"key and value must have the same (B, n_k), got {tuple(key.shape)} and {tuple(value.shape)}"
            )
        if query.dim() == 3 and query.shape[0] != key.shape[0]:
            raise ValueError(f"query and key must have the same batch size, got {query.shape[0]} and {key.shape[0]}")
        n_k = key.shape[-2] + (len(cache) if cache is not None else 0)
        if is_causal and (mask is None or query.shape[-2] != n_k):
            raise ValueError(
                "is_causal=True is a hint that mask is the square causal mask causal_mask(n): it needs that mask "
                f"and as many queries as keys, got mask={'None' if mask is None else tuple(mask.shape)}, "
                f"n_q={query.shape[-2]}, n_k={n_k}"
            )
        if mask is None:
            return None
        mask = mask.unsqueeze(1) if query.dim() == 3 and mask.dim() == 3 else mask  # 2-D and 4-D masks as they are
        return _validate.mask("mask", mask, torch.Size((*query.shape[:-2], self.num_heads, query.shape[-2], n_k)))

    @classmethod
    def from_pytorch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A module with the weights of ``mha`` (which must have equal q/k/v widths), computing the same function."""
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be an nn.MultiheadAttention, got {type(mha).__name__}")
        if not mha._qkv_same_embed_dim or mha.bias_k is not None:
            raise ValueError("mha must have kdim = vdim = embed_dim and add_bias_kv=False")
        bias = mha.in_proj_bias is not None
        module = cls(mha.embed_dim, mha.num_heads, bias=bias, dropout=mha.dropout)
        module.to(dtype=mha.in_proj_weight.dtype, device=mha.in_proj_weight.device)
        w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
        b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3) if bias else (None, None, None)
        with torch.no_grad():
            for linear, w, b in ((module.W_q, w_q, b_q), (module.W_k, w_k, b_k), (module.W_v, w_v, b_v),
                                 (module.W_o, mha.out_proj.weight, mha.out_proj.bias)):
                linear.weight.copy_(w)
                if bias:
                    linear.bias.copy_(b)
        return module

    def extra_repr(self) -> str:
        # Lesson 11's options only where they are used, so that lesson 4's module prints as the paper's.
        grouped = f", num_kv_heads={self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        rotary = ", rotary=True" if self.rotary is not None else ""
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_head={self.d_head}, dropout={self.dropout}" + \
            grouped + rotary


class AttentionWeights(dict):
    """Attention weights by layer name (``"decoder.layers.0.cross_attention"``), each ``(B, h, n_q, n_k)``.

    Filled by :func:`attention_weights` in the order the layers ran; a layer called again (a decoding step)
    keeps the weights of its latest call.
    """

    def select(self, pattern: str) -> list[torch.Tensor]:
        """The weights of the layers whose names match the shell-style ``pattern`` (``"decoder.*.cross_attention"``)."""
        return [w for name, w in self.items() if fnmatch.fnmatchcase(name, pattern)]

    def __missing__(self, name):
        recorded = ", ".join(map(repr, self)) or "none"
        raise KeyError(f"no attention weights recorded under {name!r}; recorded: {recorded} (a layer is recorded "
                       "when it runs inside the with block)")


@contextlib.contextmanager
def attention_weights(model: nn.Module) -> Iterator[AttentionWeights]:
    """Record the weights of every :class:`MultiHeadAttention` in ``model`` while the ``with`` block runs.

        with attention_weights(model) as weights:
            model(src, tgt)
        weights["decoder.layers.0.cross_attention"]  # (B, h, n_dec, n_enc)
        weights.select("encoder.*")                    # one (B, h, n_enc, n_enc) per encoder layer

    Names are those of ``model.named_modules()`` (``""`` for a ``MultiHeadAttention`` passed itself). Inside
    the block every attention layer takes its explicit path, since the fused kernel never forms the weights
    (the same outputs up to float rounding); the weights are detached copies for reading. Forward hooks do
    the recording, and they are removed when the block ends, even by an exception.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {_validate.describe(model)}")
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError(f"model ({type(model).__name__}) has no MultiHeadAttention layer: there are no attention "
                         "weights to read")
    weights, handles = AttentionWeights(), []
    try:
        for name, layer in layers:
            handles.append(layer.register_forward_pre_hook(_ask_for_weights, with_kwargs=True))
            handles.append(layer.register_forward_hook(functools.partial(_record_weights, weights, name)))
        yield weights
    finally:
        for handle in handles:
            handle.remove()


def _ask_for_weights(module, args, kwargs):
    return args, {**kwargs, "need_weights": True}


def _record_weights(weights: AttentionWeights, name: str, module, args, output) -> None:
    weights[name] = output[1].detach()
