"""Attention masks: causal, padding, and the two forms a mask takes.

Convention of the whole package: a boolean mask is True where attention IS allowed (as in
``F.scaled_dot_product_attention``), broadcastable to the scores' shape ``(..., n_q, n_k)``. An additive
mask holds 0 where allowed and -inf where not. Note that ``nn.MultiheadAttention``'s ``attn_mask`` and
``key_padding_mask`` use the opposite boolean convention (True = NOT allowed): pass ``~mask`` there.
"""

from __future__ import annotations

import torch

from transformer_course import _validate


def causal_mask(n_q: int, n_k: int | None = None, *, offset: int = 0, device=None) -> torch.Tensor:
    """Boolean ``(n_q, n_k)`` mask: query ``i`` may attend key ``j`` iff ``j <= i + offset``.

    With ``offset=0`` (and ``n_k = n_q`` by default) this is the lower-triangular mask of
    ``F.scaled_dot_product_attention(..., is_causal=True)``. When the queries are the last ``n_q`` of
    ``n_k`` positions (decoding with a cache), pass ``offset = n_k - n_q``.
    """
    n_q = _validate.integer("n_q", n_q, minimum=1)
    n_k = n_q if n_k is None else _validate.integer("n_k", n_k, minimum=1)
    offset = _validate.integer("offset", offset, minimum=0)
    i = torch.arange(n_q, device=device).unsqueeze(-1)
    j = torch.arange(n_k, device=device)
    return j <= i + offset


def cached_causal_mask(n: int, offset: int, *, device=None) -> tuple[torch.Tensor | None, bool]:
    """The self-attention mask of ``n`` new positions that follow ``offset`` cached ones (decoding with a cache).

    Returns ``(mask, is_causal)``. One new position may see every key: no mask, ``(None, False)``. Otherwise
    ``causal_mask(n, offset + n, offset=offset)``, ``(n, offset + n)``, with ``is_causal`` True when it is the
    square mask (``offset == 0``): only then may ``F.scaled_dot_product_attention(..., is_causal=True)`` stand
    for it, since that mask is aligned to the top left, as if no key came before the first query.
    """
    if n == 1:
        return None, False
    return causal_mask(n, offset + n, offset=offset, device=device), offset == 0


def padding_mask(valid_lens, n_k: int) -> torch.Tensor:
    """Boolean key mask from valid lengths: True for the first ``valid_lens[b]`` of ``n_k`` keys.

    Args:
        valid_lens: integer tensor (or list) of shape ``(...)``, usually ``(B,)``, each in ``[0, n_k]``.
        n_k: number of key positions (the padded length).

    Returns:
        ``(..., 1, n_k)``: broadcasts against scores ``(..., n_q, n_k)``. For multi-head scores
        ``(B, h, n_q, n_k)`` insert the head axis: ``padding_mask(lens, n_k).unsqueeze(1)``.
    """
    n_k = _validate.integer("n_k", n_k, minimum=1)
    if isinstance(valid_lens, (list, tuple)):
        valid_lens = torch.tensor(valid_lens)
    _validate.integers("valid_lens", valid_lens)
    if valid_lens.numel() and (valid_lens.min() < 0 or valid_lens.max() > n_k):
        raise ValueError(
            f"valid_lens must lie in [0, n_k={n_k}], got values from {int(valid_lens.min())} "
            f"to {int(valid_lens.max())}"
        )
    positions = torch.arange(n_k, device=valid_lens.device)
    return (positions < valid_lens.unsqueeze(-1)).unsqueeze(-2)


def to_additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask (True = allowed) -> additive mask of ``dtype``: 0 where allowed, -inf elsewhere."""
    _validate.tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def to_boolean_mask(mask: torch.Tensor) -> torch.Tensor:
    """Additive float mask -> boolean mask: True where the entry is above -inf (attention allowed)."""
    _validate.tensor("mask", mask)
    if not mask.is_floating_point():
        raise TypeError(f"mask must be an additive floating mask (0 / -inf), got dtype {mask.dtype}")
    return mask > float("-inf")
