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


def future_influence(fn, x: torch.Tensor, *, seq_dim: int = 1, vocab_size: int | None = None, replace=None,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """How much editing the future moves the past: the test of lesson 3, section 3.3, for any function.

    For every position ``t = 0 .. n - 2`` the inputs after ``t`` (along ``seq_dim``) are replaced, ``fn`` runs
    again, and the largest absolute change of its outputs at positions ``0 .. t`` is recorded. A causal ``fn``
    gives exactly 0 for every ``t``; a value above 0 at ``t`` means that some output at or before ``t`` reads an
    input after ``t``.

    Args:
        fn: a deterministic function (``.eval()`` a model with dropout) from inputs like ``x`` to a tensor whose
            positions lie on the same dimension ``seq_dim``, with the same length ``n``: ids ``(B, n)`` to logits
            ``(B, n, |V|)``, or vectors ``(B, n, d)`` to outputs ``(B, n, d)``.
        x: the inputs, with ``n >= 2`` positions along ``seq_dim``. Token ids (an integer dtype) are replaced by
            other random ids in ``[1, vocab_size)`` (never the padding id 0, never the id they replace); floating
            inputs by standard normal values.
        seq_dim: the dimension of the positions, in ``x`` and in ``fn``'s output.
        vocab_size: the number of token ids; required for integer ``x`` unless ``replace`` is given.
        replace: optional callable that takes the inputs after ``t`` (a tensor) and returns their replacement, of
            the same shape; used instead of the random replacement, for ids and vectors alike.
        generator: an optional ``torch.Generator`` for the random replacements (reproducible results).

    Returns:
        ``(n - 1,)``: entry ``t`` is the largest ``|fn(edited) - fn(x)|`` over the outputs at positions ``<= t``
        (and over every other dimension), when the inputs after ``t`` are replaced.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable (inputs -> outputs), got {_validate.describe(fn)}")
    _validate.tensor("x", x, min_dim=1)
    seq_dim = _validate.integer("seq_dim", seq_dim)
    if not -x.dim() <= seq_dim < x.dim():
        raise ValueError(f"seq_dim must be a dimension of x, in [{-x.dim()}, {x.dim() - 1}] for x of shape "
                         f"{tuple(x.shape)}, got {seq_dim}")
    seq_dim %= x.dim()
    n = x.shape[seq_dim]
    if n < 2:
        raise ValueError(f"x must have at least 2 positions along seq_dim={seq_dim} (else there is no future to "
                         f"edit), got shape {tuple(x.shape)}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {_validate.describe(generator)}")
    if replace is not None:
        if not callable(replace):
            raise TypeError(f"replace must be callable (inputs after t -> new inputs), got "
                            f"{_validate.describe(replace)}")
        if vocab_size is not None:
            raise ValueError("pass vocab_size or replace, not both: replace decides the new inputs itself")
    elif x.is_floating_point():
        if vocab_size is not None:
            raise ValueError(f"vocab_size is for token ids, but x is floating ({x.dtype}): leave it out, or pass "
                             f"integer ids")
    else:
        _validate.integers("x", x, "token ids (or floating vectors)")
        if vocab_size is None:
            raise TypeError(f"vocab_size is required for token ids (x has dtype {x.dtype}): the future is "
                            f"replaced by random ids in [1, vocab_size)")
        vocab_size = _validate.integer("vocab_size", vocab_size, minimum=3)
        if x.min() < 0 or x.max() >= vocab_size:
            raise ValueError(f"x must hold ids in [0, vocab_size={vocab_size}), got values from {int(x.min())} "
                             f"to {int(x.max())}")

    def new_values(future: torch.Tensor) -> torch.Tensor:
        if replace is not None:
            new = replace(future)
            if not isinstance(new, torch.Tensor) or new.shape != future.shape:
                raise ValueError(f"replace must return a tensor of the shape it was given, "
                                 f"{tuple(future.shape)}, got {_validate.describe(new)}")
            return new
        if future.is_floating_point():
            return torch.randn(future.shape, generator=generator, dtype=future.dtype).to(future.device)
        # a shift by 1 .. vocab_size - 2 within [1, vocab_size): another id, never 0, never the same one
        shift = torch.randint(1, vocab_size - 1, future.shape, generator=generator).to(future.device)
        return 1 + (future - 1 + shift) % (vocab_size - 1)

    def run(inputs: torch.Tensor) -> torch.Tensor:
        out = fn(inputs)
        if not isinstance(out, torch.Tensor) or out.dim() <= seq_dim or out.shape[seq_dim] != n:
            raise ValueError(f"fn must return a tensor with the n={n} positions of x on dimension seq_dim={seq_dim},"
                             f" got {_validate.describe(out)}")
        return out

    with torch.no_grad():
        base = run(x)
        changes = []
        for t in range(n - 1):
            edited = x.clone()
            future = edited.narrow(seq_dim, t + 1, n - t - 1)
            future.copy_(new_values(future))
            change = (run(edited) - base).abs().narrow(seq_dim, 0, t + 1)
            changes.append(change.max())
    changes = torch.stack(changes)
    return changes if changes.is_floating_point() else changes.float()
