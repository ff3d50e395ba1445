"""Modules built for their shapes alone: on the meta device, without initialising their weights.

The checks that count parameters build the reference model (up to GPT-2's size) on the meta device, where a
tensor has a shape and no storage. Meta tensors hold no values, so initialising them does nothing, but in
torch 2.13 ``normal_`` on a meta tensor runs a Python reference that first imports ``torch._dynamo``: 1.5 s of
CPU in every kernel and grader process that counts a model with an embedding. :func:`shapes_only` skips that
call on meta tensors and changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

_INITS = (torch.Tensor.normal_, nn.init.normal_)


class _NoInitOnMeta(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _INITS:
            tensor = args[0] if args else kwargs["tensor"]
            if tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


@contextmanager
def shapes_only() -> Iterator[None]:
    """Build modules inside this block on the meta device, with ``normal_`` initialisation skipped there."""
    with torch.device("meta"), _NoInitOnMeta():
        yield
