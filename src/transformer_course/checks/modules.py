"""Checks of modules the learner writes: build theirs, copy the reference's weights in, compare forwards.

An exercise that asks for an ``nn.Module`` gives the learner its ``__init__`` (so the parameter names
are fixed) and asks for ``forward``. :func:`check_module` builds the learner's module and the package's
reference for each case, fills the reference with random weights (LayerNorms too, so that a skipped or
swapped norm shows), loads them into the learner's module and compares the two forward passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import nn

from transformer_course.checks.core import (
    Case,
    CheckFailed,
    Mistake,
    call_answer,
    case_generator,
    default_differ,
    diagnose_each,
    require_callable,
    run_cases,
)


def _build(answer, args: tuple, signature: str) -> nn.Module:
    """The learner's module, built through ``call_answer`` so that the grader records what the check uses of
    it (parameter names and shapes; the forward outputs are recorded by the forward's own call) and can
    re-run this check outside the learner's kernel on a stand-in (:class:`_Recorded`)."""
    built = []

    def construct(*args):
        try:
            module = answer(*args)
        except Exception as error:  # noqa: BLE001 - the learner's constructor
            raise CheckFailed(f"{signature} raised {type(error).__name__}: {error}") from None
        if not isinstance(module, nn.Module):
            raise CheckFailed(f"{signature} must build an nn.Module, got {type(module).__name__}")
        built.append(module)
        return _parameter_shapes(module)

    case = Case(signature, dict(enumerate(args)))
    if getattr(answer, "replays_records", False):  # the grader's re-check: the answer returns what was recorded
        return _Recorded(call_answer(answer, case), answer)
    call_answer(construct, case)
    return built[0]


def _parameter_shapes(module: nn.Module) -> list:
    """What _copy_weights reads of a module: its state's names and shapes, as plain data."""
    return [[name, list(value.shape)] for name, value in module.state_dict().items()]


class _Recorded(nn.Module):
    """Outside the kernel: a module with the recorded parameter names and shapes whose forward returns the
    recorded outputs, so that the released checker runs unchanged on what the learner's module produced."""

    def __init__(self, shapes, forward):
        super().__init__()
        if type(shapes) is not list or not all(type(s) is list and len(s) == 2 and type(s[0]) is str
                                                and type(s[1]) is list for s in shapes):
            raise CheckFailed("the recorded module description is malformed")
        self._shapes = {name: torch.Size(shape) for name, shape in shapes}
        object.__setattr__(self, "forward", forward)  # called by run_cases as module.forward

    def state_dict(self, *args, **kwargs):
        return {name: torch.empty(shape, device="meta") for name, shape in self._shapes.items()}

    def load_state_dict(self, state_dict, *args, **kwargs):
        return None

def _copy_weights(module: nn.Module, reference: nn.Module) -> None:
    """Load the reference's parameters into the learner's module (same attribute names and shapes)."""
    theirs, ours = module.state_dict(), reference.state_dict()
    wrong = {k: (tuple(ours[k].shape), tuple(theirs[k].shape)) for k in ours if k in theirs
             and theirs[k].shape != ours[k].shape}
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if missing or unexpected or wrong:
        raise CheckFailed(
            "the module's parameters must be those of the skeleton: "
            + "; ".join(part for part in [f"missing {missing}" if missing else "",
                                          f"unexpected {unexpected}" if unexpected else "",
                                          f"shapes (expected, got) {wrong}" if wrong else ""] if part)
        )
    module.load_state_dict(ours)
    module.to(next(reference.parameters()).dtype).eval()


class ModuleCase(NamedTuple):
    """A module to build and an input to run it on."""

    args: tuple  # the constructor's positional arguments, e.g. (d_model, num_heads)
    dtype: torch.dtype
    seed: int  # of the reference's random weights
    case: Case  # the forward pass's arguments


def _randomise(module: nn.Module, seed: int) -> nn.Module:
    """Random values in every parameter (LayerNorms too), so swapped or skipped parts show."""
    g = case_generator(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * (0.5 if p.dim() > 1 else 1.0))
    return module.eval()


def check_module(
    answer,
    make_reference: Callable[..., nn.Module],
    cases: Sequence[ModuleCase],
    mistakes_for: Callable[[nn.Module], Sequence[Mistake]],
    signature: str,
    names: Sequence[str],
) -> int:
    """Build the learner's module for each case, copy the reference's weights into it, and compare the
    forward passes. Every case runs, so that a mistake is named only when it explains the forward's result on each
    (its variants are bound to each case's reference: :func:`~transformer_course.checks.core.diagnose_each`)."""
    require_callable(answer, f"a class, {signature}")
    differ = default_differ(names)
    first, results = None, []  # results: (the mistakes of the case's reference, case, what the forward gave)
    for args, dtype, seed, case in cases:
        reference = _randomise(make_reference(*args).to(dtype), seed)
        mistakes = mistakes_for(reference)
        try:
            module = _build(answer, args, f"{signature.split('(')[0]}{args}")
            _copy_weights(module, reference)
            wrong, ran = run_cases(module.forward, reference.forward, [case], mistakes, differ)
        except CheckFailed:  # not implemented, or a module that cannot be built for this case
            if first is None:
                raise
            results = []  # the answer stopped running: the first wrong case is reported, with no name
            break
        first = first or wrong
        results += [(mistakes, c, got) for c, got in ran]
    if first is not None:
        raise CheckFailed(first, mistake=diagnose_each(results, differ))
    return len(cases)
