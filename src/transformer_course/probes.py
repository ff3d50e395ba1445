"""Probes: measurements that look inside a model, for any function of a sequence.

:func:`future_influence` is the causality test of lesson 3 (section 3.3): it edits the future and measures how far
the past moves.
"""

from __future__ import annotations

import torch

from transformer_course import _validate


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
