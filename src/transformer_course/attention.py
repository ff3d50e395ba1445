"""Scaled dot-product attention and the masked softmax it rests on.

Shapes follow D2L chapter 11: ``n_q`` queries and ``n_k`` key-value pairs, query/key width ``d_k``,
value width ``d_v``. Every function takes any number of leading batch dimensions ``...``.

Masks follow one convention throughout the package (the one of ``F.scaled_dot_product_attention``):
a boolean mask is True where attention IS allowed; a floating mask is added to the scores (0 / -inf).
A query whose row allows nothing gets zero weights and a zero output, never NaN.
"""

from __future__ import annotations

import math

import torch

from transformer_course import _validate


def _apply_mask(scores: torch.Tensor, mask: torch.Tensor | None, inplace: bool = False) -> torch.Tensor:
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        if inplace and mask.numel() < scores.numel():
            # A mask broadcast over the scores (a causal (n, n) over (B, h, n, n)): adding it as 0 / -inf is
            # twice as fast as masked_fill_ with broadcasting on CPU, and gives the same weights.
            return scores.add_(torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
                               .masked_fill_(~mask, float("-inf")))
        return (scores.masked_fill_ if inplace else scores.masked_fill)(~mask, float("-inf"))
    # An additive mask of another floating dtype (float32 from to_additive_mask, say, on float64 scores)
    # would otherwise promote the weights and fail later in ``weights @ value``.
    return scores.add_(mask.to(scores.dtype)) if inplace else scores + mask.to(scores.dtype)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` along ``dim`` over the allowed entries only.

    Args:
        scores: ``(..., n_q, n_k)`` floating tensor.
        mask: ``None``, a boolean mask (True = allowed) or an additive float mask, broadcastable to
            ``scores``.
        dim: the axis that sums to one (the keys' axis, ``-1``, for attention).

    Returns:
        Weights of the same shape as ``scores``; rows (along ``dim``) with no allowed entry are all zero.
    """
    _validate.tensor("scores", scores, min_dim=1, floating=True)
    dim = _validate.integer("dim", dim)
    if not -scores.dim() <= dim < scores.dim():
        raise ValueError(
            f"dim must be in [{-scores.dim()}, {scores.dim()}) for scores of shape {tuple(scores.shape)}, "
            f"got {dim}"
        )
    if mask is not None:
        _validate.mask("mask", mask, scores.shape)
    return _masked_softmax(scores, mask, dim)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, dim: int, inplace: bool = False):
    """:func:`masked_softmax` without the checks; with ``inplace`` the mask is applied to ``scores`` itself
    (one pass over the n_q x n_k scores fewer, for callers that own them)."""
    if mask is None:
        return torch.softmax(scores, dim=dim)
    empty = empty_rows(mask, dim, scores.dim())
    scores = _apply_mask(scores, mask, inplace)
    if not empty.any():  # the usual case: every query may attend somewhere
        return torch.softmax(scores, dim=dim)
    # torch.softmax is stable (it subtracts the row maximum), but a row that is all -inf gives 0/0 = NaN,
    # in the forward pass and in the gradient. Softmax such rows over zeros instead, then zero them out.
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=dim)
    return weights.masked_fill(empty, 0.0)


def empty_rows(mask: torch.Tensor, dim: int, ndim: int) -> torch.Tensor:
    """True for the rows (along ``dim``) where the mask allows nothing.

    Computed on the mask's own shape, which is often far smaller than the scores' (a causal mask
    ``(n, n)`` broadcast over ``(B, h, n, n)``), so the check costs almost nothing.
    """
    allowed = mask if mask.dtype == torch.bool else ~torch.isneginf(mask)
    allowed = allowed.reshape((1,) * (ndim - allowed.dim()) + allowed.shape)  # align with the scores' axes
    if allowed.shape[dim] == 0:
        shape = list(allowed.shape)
        shape[dim] = 1
        return torch.ones(shape, dtype=torch.bool, device=allowed.device)
    # amax over uint8 is vectorised; Tensor.any over bool is not (50x slower on CPU for a 1024 x 1024 mask).
    return allowed.view(torch.uint8).amax(dim=dim, keepdim=True) == 0


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k) + mask) V, returning the output and the attention weights.

    Args:
        query: ``(..., n_q, d_k)``.
        key: ``(..., n_k, d_k)``.
        value: ``(..., n_k, d_v)``.
        mask: boolean (True = may attend) or additive float mask broadcastable to ``(..., n_q, n_k)``.
        dropout_p: probability of dropping an attention weight (applied to the output's weights only).
        scale: factor on the scores; ``1/sqrt(d_k)`` by default.

    Returns:
        ``(output, weights)``: output ``(..., n_q, d_v)``, weights ``(..., n_q, n_k)`` before dropout.
        The leading dimensions are those of query, key and value broadcast together.
    """
    q = _validate.tensor("query", query, min_dim=2, floating=True)
    k = _validate.tensor("key", key, min_dim=2, floating=True)
    v = _validate.tensor("value", value, min_dim=2, floating=True)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"query, key and value must share a dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    (n_q, d_k), (n_k, d_k_key), (n_v, _) = q.shape[-2:], k.shape[-2:], v.shape[-2:]
    if d_k != d_k_key:
        raise ValueError(
            f"query and key must have the same last dimension d_k, got query {tuple(q.shape)} "
            f"(d_k={d_k}) and key {tuple(k.shape)} (d_k={d_k_key})"
        )
    if n_k != n_v:
        raise ValueError(
            f"key and value must have the same number of positions n_k, got key {tuple(k.shape)} "
            f"(n_k={n_k}) and value {tuple(v.shape)} (n_k={n_v})"
        )
    if n_k == 0 or d_k == 0:
        raise ValueError(f"key must have n_k >= 1 and d_k >= 1, got shape {tuple(k.shape)}")
    batch = _validate.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if batch is None:
        raise ValueError(
            f"the leading (batch) dimensions of query {tuple(q.shape)}, key {tuple(k.shape)} and "
            f"value {tuple(v.shape)} do not broadcast together"
        )
    if mask is not None:
        _validate.mask("mask", mask, (*batch, n_q, n_k))
    dropout_p = _validate.probability("dropout_p", dropout_p)
    if scale is not None and not _validate.real("scale", scale) > 0:
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    return attention_unchecked(q, k, v, mask, dropout_p, scale, batch)


def attention_unchecked(q, k, v, mask, dropout_p: float, scale: float | None, batch: torch.Size):
    """:func:`scaled_dot_product_attention` without the checks, for callers that made them (multi-head attention
    checks its inputs once); ``batch`` is the leading dimensions of q, k and v broadcast together.
    q ``(*batch, n_q, d_k)``, k ``(*batch, n_k, d_k)``, v ``(*batch, n_k, d_v)`` -> (output ``(*batch, n_q, d_v)``,
    weights ``(*batch, n_q, n_k)``)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., n_q, n_k); scaling q costs n_q d_k, not n_q n_k
    owned = scores.shape == (*batch, n_q, n_k)
    # The scores carry the batch dims of q and k only; when value (or the mask) has more, expand them
    # (a view, which must not be written to) so that the weights have the documented shape.
    weights = _masked_softmax(scores if owned else scores.expand(*batch, n_q, n_k), mask, -1, inplace=owned)
    dropped = torch.dropout(weights, dropout_p, train=True) if dropout_p > 0 else weights
    return dropped @ v, weights
