"""The capstone's check (12.4) beyond its table of answers (tests/answers/capstone.py): the data it hands out and
the numbers it holds back, its bands, the number-word library switched off while a model translates, and partial
credit, in the learner's kernel and in the grader's re-check outside it."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from num2words import CONVERTER_CLASSES, num2words

from tests.answers.capstone import LookUp, lesson_model
from tests.answers.capstone import weak as stored_weak
from transformer_course import data
from transformer_course.checks import CheckFailed, capstone, check, core

ROOT = Path(__file__).resolve().parents[1]


def test_the_learner_gets_the_checks_tokenizers_and_no_held_out_number():
    task = capstone.capstone_task()
    source, target = capstone._tokenizers()
    assert task.tgt_tok.itos == target.itos and len(target) == capstone.TARGET_VOCAB
    assert task.src_tok.itos == source.itos
    assert task.tgt_tok is not target  # the learner's objects are not the check's
    held_out = capstone.held_out_numbers()
    assert len(set(held_out)) == capstone.SAMPLE and set(held_out) <= set(data.number_splits().test)
    english = {data.number_words(n, "en") for n in held_out}
    assert not english & {e for e, _ in task.train_pairs + task.valid_pairs}
    longest = max(len(target.encode(data.number_words(n, "de"), eos=True)) for n in range(1, 10_000))
    assert longest < capstone.MAX_TOKENS  # a right translation always fits, <eos> included


def test_hidden_cases_translate_numbers_no_public_case_holds(monkeypatch):
    public = set(capstone.held_out_numbers())
    samples = []
    for seed in (4242, 1, 20261125):
        monkeypatch.setattr(core, "CASES_SEED", seed)
        hidden = capstone.held_out_numbers()
        assert len(set(hidden)) == capstone.SAMPLE and set(hidden) <= set(data.number_splits().test)
        assert not public & set(hidden), seed
        samples.append(hidden)
    assert samples[0] != samples[1] != samples[2]  # each seed draws its own sample


def test_bands():
    assert capstone.band(0.95, 99.0) == (4, "")
    assert capstone.band(0.949, 99.0) == (3, "4 points need exact match >= 95%")
    assert capstone.band(0.5, 90.0) == (2, "3 points need exact match >= 80%")
    assert capstone.band(0.49, 80.0) == (1, "2 points need exact match >= 50%")
    assert capstone.band(0.49, 79.9) == (0, "1 point needs chrF >= 80")


def test_the_library_is_switched_off_only_while_the_model_translates():
    pairs = capstone.capstone_task().valid_pairs[:20]
    # A "translator" that reads the English and asks num2words is perfect while the library answers...
    assert capstone.evaluate_translator(LookUp(), pairs)["exact_match"] == 1.0
    converter = CONVERTER_CLASSES["de"]
    with capstone.library_switched_off():
        for call in (lambda: num2words(42, lang="de"), lambda: converter.to_cardinal(42),
                     lambda: data.number_words(42, "de"), lambda: data.number_examples([42])):
            with pytest.raises(RuntimeError, match=capstone.SWITCHED_OFF):
                call()
        saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "num2words"}
        try:  # nor can it be imported afresh
            for name in saved:
                del sys.modules[name]
            with pytest.raises(ImportError, match=capstone.SWITCHED_OFF):
                importlib.import_module("num2words")
        finally:
            sys.modules.update(saved)
    # ... and gets nothing from the check, which names the mistake; the library works again afterwards.
    with pytest.raises(CheckFailed, match="looks the translation up"):
        check("12.4", LookUp())
    assert num2words(42, lang="de") == data.number_words(42, "de") == "zweiundvierzig"
    assert data.number_examples([7]) == [("seven", "sieben")]


def test_a_module_left_in_training_mode_is_decoded_in_eval_mode_and_left_as_it_was():
    model = lesson_model(dropout=0.5)
    src = torch.tensor([[5, 6, 7]])
    first = capstone.translator_ids(model, src, capstone.TARGET_VOCAB)
    assert torch.equal(first, capstone.translator_ids(model, src, capstone.TARGET_VOCAB))  # no dropout
    assert all(m.training for m in model.modules())


@pytest.mark.slow  # the capstone's task and tokenizers, and three decodings of 240 numbers
def test_a_weak_model_earns_the_same_points_in_the_kernel_and_from_its_weights_outside(tmp_path, monkeypatch, capsys):
    from transformer_course.grading import kernel
    from transformer_course.grading.replay import confirm

    weak = stored_weak()  # the lesson's model after 70 steps (tests/stored_models.py)
    check("12.4", weak)  # no CheckFailed: part of the points is not a failure
    line = capsys.readouterr().out
    assert line.startswith("\u25d1 12.4 Capstone: your own translator: ") and "public checks passed" not in line
    points = int(re.search(r"(\d)/4 points: ", line)[1])
    assert 0 < points < capstone.POINTS, line
    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    kernel.recording_check("12.4", weak)
    assert "answer" in torch.load(tmp_path / "12.4.pt", weights_only=True)  # a package model leaves as its weights
    found = confirm("12.4", tmp_path / "12.4.pt")  # decoded by the grader from those weights
    assert (found.verdict, found.points, found.cases) == ("partial", points, capstone.SAMPLE)
    assert found.message.startswith(f"{points}/4 points: exact match ") and found.message in line
    assert found.rebuilt and found.review == ""


def _recipe_lines(source: str) -> list[str]:
    """The code lines of an answer cell that are not comments, blank or the stub's raise."""
    return [line for line in source.splitlines()
            if line.strip() and not line.lstrip().startswith(("#", "raise NotImplementedError"))]


def test_the_released_answer_cell_leaves_the_recipe_to_the_learner():
    """Exercise 12.4 hands over the task, the data, the tokenizers and the check; the model and its training are the
    learner's: the released answer cell holds no code but ``translator = None``."""
    released = nbformat.read(ROOT / "exercises" / "12_capstone_real_words.ipynb", as_version=4)
    answer = next(c for c in released.cells if c.get("id") == "ex4-answer")
    assert _recipe_lines(answer.source) == ["translator = None  # your trained model: translator(src, tgt) -> logits "
                                            "(B, n_dec, len(tgt_tok))"]
