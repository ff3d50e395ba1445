"""Argument checks shared by the package: each error names the argument, what it got and what it wanted.

The point is that a learner who passes the wrong thing reads "query has d_k=8 but key has d_k=6"
instead of a bare shape error from deep inside a matrix multiplication.
"""

from __future__ import annotations

import math
import numbers
import operator

import torch


def describe(x) -> str:
    """A short description of a value for error messages: shape and dtype for tensors."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}" if isinstance(x, (int, float, str)) else type(x).__name__


def tensor(name: str, x, *, min_dim: int = 0, floating: bool = False) -> torch.Tensor:
    """Require a tensor with at least ``min_dim`` dimensions (and a floating dtype if asked)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {describe(x)}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {x.dtype}")
    return x


def features(name: str, x, d: int) -> torch.Tensor:
    """Require a floating tensor ``(..., d)``: vectors of width ``d`` at every position."""
    tensor(name, x, min_dim=1, floating=True)
    if x.shape[-1] != d:
        raise ValueError(f"{name} must have shape (..., {d}) (vectors of width d_model={d}), got {tuple(x.shape)}")
    return x


def integer(name: str, value, *, minimum: int | None = None) -> int:
    """Require a whole number (not a bool), at least ``minimum``; returns it as an int."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {describe(value)}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def real(name: str, value) -> float:
    """Require a finite real number (not a bool); returns it as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def probability(name: str, p) -> float:
    """Require a dropout probability in ``[0, 1)`` (1 would drop everything); returns it as a float."""
    p = real(name, p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p!r}")
    return p


def integers(name: str, x, what: str = "integers") -> torch.Tensor:
    """Require a tensor of an integer dtype (token ids, lengths): not floating, boolean or complex."""
    tensor(name, x)
    if x.is_floating_point() or x.dtype == torch.bool or x.is_complex():
        raise TypeError(f"{name} must hold {what}, got dtype {x.dtype}")
    return x


def positions(n: int, max_len: int, offset: int = 0, what: str = "the sequence") -> None:
    """Require positions ``offset .. offset + n - 1`` to lie below ``max_len``, the length a module was built for."""
    if offset + n > max_len:
        raise ValueError(f"positions {offset}..{offset + n - 1} exceed max_len={max_len}: {what} (n={n}, "
                         f"offset={offset}) is longer than this module was built for")


def divisible(name: str, value: int, by_name: str, by: int) -> None:
    """Require ``value`` to be a multiple of ``by`` (heads split the width evenly)."""
    if value % by:
        raise ValueError(f"{name}={value} must be divisible by {by_name}={by}")


def heads(d_model, num_heads, num_kv_heads=None) -> tuple[int, int, int]:
    """The widths of multi-head attention: h divides d, and h_kv (h by default) divides h; returns (d, h, h_kv)."""
    d_model = integer("d_model", d_model, minimum=1)
    num_heads = integer("num_heads", num_heads, minimum=1)
    divisible("d_model", d_model, "num_heads", num_heads)
    num_kv_heads = num_heads if num_kv_heads is None else integer("num_kv_heads", num_kv_heads, minimum=1)
    divisible("num_heads", num_heads, "num_kv_heads", num_kv_heads)
    return d_model, num_heads, num_kv_heads


def mask(name: str, m, target_shape: torch.Size) -> torch.Tensor:
    """Require a boolean or floating mask that broadcasts to ``target_shape`` without enlarging it."""
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (bool or float), got {describe(m)}")
    if m.dtype != torch.bool and not m.is_floating_point():
        raise TypeError(
            f"{name} must be boolean (True = may attend) or floating (additive 0 / -inf), got {m.dtype}"
        )
    # Broadcasting without enlarging: each of the mask's trailing sizes is 1 or the target's size.
    shape, target = tuple(m.shape), tuple(target_shape)
    if len(shape) > len(target) or any(s not in (1, t) for s, t in zip(shape, target[len(target) - len(shape):],
                                                                        strict=True)):
        raise ValueError(
            f"{name} of shape {tuple(m.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(target_shape)} (..., n_q, n_k)"
        )
    return m


def broadcast_shapes(*shapes) -> tuple[int, ...] | None:
    """The shape the given shapes broadcast to, or None if they do not.

    The same rule as ``torch.broadcast_shapes``, which is written in Python with symbolic-shape guards
    and costs tens of microseconds a call: too much on the per-token path of generation.
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for sizes in zip(*[(1,) * (ndim - len(s)) + tuple(s) for s in shapes], strict=True):
        big = {n for n in sizes if n != 1}
        if len(big) > 1:
            return None
        out.append(big.pop() if big else 1)
    return tuple(out)
