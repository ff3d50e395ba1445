"""Trained answers kept as weights in tests/models/, so that a test session loads them instead of training them.

The checks of the exercises graded by what a model achieves (12.4, 13.4) must accept a correct model built
differently from the solution, and give part of the points to a weakly trained one. Those models are trained by
the recipes below, once, and their weights are stored: loading one takes a fraction of a second, training it took
a test session about a minute of CPU under make test's load. Stored weights also keep these tests independent of
the machine's numerics: a model trained again elsewhere takes another trajectory and could end on the other side of
a points band.

After a change to a task, a tokenizer, a model or a recipe, rebuild them (about a minute on 2 cores):

    .venv/bin/python -m tests.stored_models

A stored file that no longer fits its model (a vocabulary or a layer changed) fails to load with a message that
says to run that command; one that still fits but was trained on what a change made stale (a tokenizer that numbers
its tokens otherwise) loads, and then fails its test's check.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import torch
from torch import nn

MODELS = Path(__file__).resolve().parent / "models"
REBUILD = "rebuild the stored answers with `python -m tests.stored_models`"


def stored(name: str, model: nn.Module) -> nn.Module:
    """``model`` (built untrained, as recipe ``name`` builds it) holding the stored weights, in eval mode."""
    path = MODELS / f"{name}.pt"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {REBUILD}")
    try:
        model.load_state_dict(torch.load(path, weights_only=True))
    except RuntimeError as error:  # missing or unexpected keys, other shapes
        raise RuntimeError(f"{path} does not fit its model ({error}): {REBUILD}") from error
    return model.eval()


def recipes() -> dict:
    """{name: a function that trains the model from scratch and returns it}."""
    from tests.answers import capstone, lesson13

    return {
        "capstone_torch_transformer": capstone.train_torch_transformer,
        "capstone_weak": capstone.train_weak,
        "gpt_rotary": lesson13.train_package_gpt_with_rotary_positions,
    }


def main(names: list[str]) -> None:
    MODELS.mkdir(exist_ok=True)
    for name, recipe in recipes().items():
        if names and name not in names:
            continue
        start = time.perf_counter()
        model = recipe()
        path = MODELS / f"{name}.pt"
        torch.save(model.state_dict(), path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        print(f"{path.name}: {path.stat().st_size:,} bytes, sha256 {digest}..., "
              f"trained in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
