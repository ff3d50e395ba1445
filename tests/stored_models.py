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
from dataclasses import dataclass
from pathlib import Path

import nbformat
import torch
from torch import nn

MODELS = Path(__file__).resolve().parent / "models"
SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
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


# --- the solutions' trained answers (12.4, 13.4) ---------------------------------------------------------------
#
# tests/test_grading_release.py grades every solution as the grader does. nbval already runs each solution's training
# (make test), and again under one thread (make test-portable); the release test grades the solutions of 12 and 13
# with the model their own answer cell trained, loaded from the weights stored here, so the same training is not run a
# third time. The stored file records the sha256 of the answer cell that trained it: once the cell changes, the test
# fails and asks for a rebuild (`python -m tests.stored_models solution_12_4`).


@dataclass(frozen=True)
class SolutionAnswer:
    notebook: str  # in solutions/
    cell: str  # the answer cell that trains the model
    saves: str  # an expression, in the notebook's namespace after that cell: the dict stored (tensors, plain values)
    loads: str  # code that rebuilds the answer from ``saved`` (that dict) in the graded notebook's namespace


SOLUTION_ANSWERS = {
    "solution_12_4": SolutionAnswer(
        "12_capstone_real_words.ipynb", "ex4-answer",
        "{'config': dataclasses.asdict(translator.config), 'state_dict': translator.state_dict()}",
        "translator = Seq2SeqTransformer(Seq2SeqConfig(**saved['config']))\n"
        "translator.load_state_dict(saved['state_dict'])"),
    "solution_13_4": SolutionAnswer(
        "13_gpt_on_real_text.ipynb", "ex4-answer",
        "{'shape': vars(shape), 'state_dict': my_model.state_dict()}",
        "from types import SimpleNamespace\n\n"
        "my_model = GPT(SimpleNamespace(**saved['shape']))\n"
        "my_model.load_state_dict(saved['state_dict'])"),
}


def _answer_digest(answer: SolutionAnswer) -> str:
    nb = nbformat.read(SOLUTIONS / answer.notebook, as_version=4)
    source = next(c.source for c in nb.cells if c.get("id") == answer.cell)
    return hashlib.sha256(source.encode()).hexdigest()


def _train_solution_answer(name: str) -> dict:
    """Execute the solution notebook up to its answer cell in a fresh kernel, as nbval does, and return what
    ``saves`` gives, with the answer cell's sha256."""
    import tempfile

    from nbclient import NotebookClient

    answer = SOLUTION_ANSWERS[name]
    nb = nbformat.read(SOLUTIONS / answer.notebook, as_version=4)
    last = next(i for i, c in enumerate(nb.cells) if c.get("id") == answer.cell)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "saved.pt"
        nb.cells = [*nb.cells[:last + 1], nbformat.v4.new_code_cell(
            f"import dataclasses\ntorch.save({answer.saves}, {str(out)!r})")]
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
        saved = torch.load(out, weights_only=True)
    return {**saved, "answer_sha256": _answer_digest(answer)}


def solution_answer_source(name: str) -> str:
    """The source of an answer cell that loads the stored answer ``name`` instead of training it; fails, asking for
    a rebuild, when the solution's answer cell is no longer the one that trained the stored weights."""
    answer = SOLUTION_ANSWERS[name]
    path = MODELS / f"{name}.pt"
    rebuild = REBUILD.replace("stored_models", f"stored_models {name}")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {rebuild}")
    saved = torch.load(path, weights_only=True)
    if saved.get("answer_sha256") != _answer_digest(answer):
        raise AssertionError(f"{path.name} was trained by another version of solutions/{answer.notebook}'s cell "
                             f"{answer.cell}: {rebuild}")
    return (f"saved = torch.load({str(path)!r}, weights_only=True)  # trained by this cell's solution "
            f"(tests/stored_models.py)\n{answer.loads}")


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
    for name, recipe in {**recipes(), **dict.fromkeys(SOLUTION_ANSWERS)}.items():
        if names and name not in names:
            continue
        start = time.perf_counter()
        path = MODELS / f"{name}.pt"
        if name in SOLUTION_ANSWERS:
            torch.save(_train_solution_answer(name), path)
        else:
            torch.save(recipe().state_dict(), path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        print(f"{path.name}: {path.stat().st_size:,} bytes, sha256 {digest}..., "
              f"trained in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
