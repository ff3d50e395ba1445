"""The capstone (12.4) graded where no learner code runs: a model that is exactly the package's Seq2SeqTransformer
leaves the kernel as its config and weights, and the grader rebuilds and decodes it itself (grading/replay.py); any
other model is decoded in the kernel, and its row asks the instructor to review the code. One attack per class:
an instance whose forward looks the German up, a forged record, and a model of the learner's own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.answers.capstone import LookUp, lesson_model
from tests.answers.capstone import weak as stored_weak
from transformer_course.checks import capstone
from transformer_course.grading import kernel
from transformer_course.grading.replay import DECODED_IN_KERNEL, Confirmation, confirm


def _record(tmp_path: Path, answer_data) -> Path:
    """A record as a kernel would save it after a passing check, holding ``answer_data`` as the answer."""
    path = tmp_path / "12.4.pt"
    torch.save({"exercise": "12.4", "calls": [], "answer": answer_data}, path)
    return path


def test_only_the_package_model_itself_leaves_the_kernel_as_data():
    model = lesson_model()
    state = torch.get_rng_state()
    found = capstone.model_as_data(model)
    assert torch.equal(state, torch.get_rng_state())  # checking that it rebuilds draws nothing of the learner's
    assert found["config"]["d_model"] == 64 and found["state"].keys() == model.state_dict().keys()
    rebuilt = capstone.model_from_data(found)
    assert type(rebuilt) is capstone.Seq2SeqTransformer and not rebuilt.training
    assert all(torch.equal(a, b) for a, b in zip(rebuilt.state_dict().values(), model.state_dict().values(),
                                                 strict=True))

    class Mine(capstone.Seq2SeqTransformer):  # a subclass may change any method: decoded in the kernel
        pass

    subclass = Mine(model.config)
    grown = lesson_model()
    grown.extra = nn.Linear(2, 2)  # a layer added to the instance: its weights are not the package model's
    assert [capstone.model_as_data(m) for m in (subclass, grown, LookUp(), None)] == [None] * 4


@pytest.mark.slow  # the capstone's tokenizers and one decoding of 240 numbers by the stored weak model
def test_a_package_model_whose_forward_looks_the_german_up_is_graded_on_its_weights(tmp_path, monkeypatch, capsys):
    table = {n: capstone._german(n) for n in capstone.held_out_numbers()}  # filled before the library is switched off
    model = stored_weak()
    model.forward = LookUp(table.__getitem__).forward  # the instance's forward looks the German up
    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    kernel.recording_check("12.4", model)
    printed = capsys.readouterr().out
    assert "4/4 points: exact match 100.0%" in printed  # inside the kernel, the lookup is perfect
    found = confirm("12.4", tmp_path / "12.4.pt")
    # Outside, the weights alone: what tests/test_capstone.py measures for this model, part of the points.
    assert found.rebuilt and found.review == "" and found.verdict == "partial", found
    assert 0 < found.points < capstone.POINTS and re.match(r"\d/4 points: exact match \d", found.message)


def _forged(change):
    found = capstone.model_as_data(lesson_model())
    return change(found["config"], found["state"])


FORGED = {
    "no weights": (lambda c, s: {"config": c}, "must be recorded as {'config': ..., 'state': ...}"),
    "a config field added": (lambda c, s: {"config": {**c, "lookup": "num2words"}, "state": s},
                             "(unexpected: lookup)"),
    "a config field that is not plain": (lambda c, s: {"config": {**c, "d_model": [64]}, "state": s},
                                         "(d_model is a list)"),
    "a config the package refuses": (lambda c, s: {"config": {**c, "num_heads": 5}, "state": s},
                                     "must be divisible by num_heads=5"),
    "a config larger than its weights": (lambda c, s: {"config": {**c, "num_decoder_layers": 10**6}, "state": s},
                                         "describes a larger model than its"),
    "a weight of another shape": (lambda c, s: {"config": c, "state": {**s, "head.weight": torch.zeros(64, 3)}},
                                  "other shapes: head.weight (64, 3) (expected (64, 64))"),
    "a weight added": (lambda c, s: {"config": c, "state": {**s, "lookup.table": torch.zeros(3)}},
                       "(unexpected: lookup.table)"),
    "a weight missing": (lambda c, s: {"config": c, "state": {k: v for k, v in s.items() if k != "head.bias"}},
                         "(missing: head.bias)"),
    "a weight that is not a tensor": (lambda c, s: {"config": c, "state": {**s, "head.bias": 1.0}},
                                      "'head.bias': float"),
    "integer weights": (lambda c, s: {"config": c, "state": {k: v.long() for k, v in s.items()}},
                        "one floating-point dtype"),
}


@pytest.mark.parametrize("name", FORGED)
def test_a_forged_model_in_the_record_fails_its_confirmation_with_a_message(tmp_path, name):
    change, message = FORGED[name]
    found = confirm("12.4", _record(tmp_path, _forged(change)))
    assert found.verdict == "bad_record" and "the recorded answer cannot be rebuilt: " in found.message, found
    assert message in found.message, found.message


def test_a_rebuilt_model_that_fails_and_a_kernel_decoded_one_that_passes_say_so_in_their_rows():
    from transformer_course.grading.execute import CellRecord, RunResult
    from transformer_course.grading.limits import Limits
    from transformer_course.grading.prepare import CheckCell, Prepared, Release
    from transformer_course.grading.verdict import unit_rows

    release = Release("12_x.ipynb", None, [CheckCell("a-check", "12.4", "Capstone", 4)])
    prepared = Prepared(None, {"a-check": "12.4"})

    def row(confirmation):
        run = RunResult(cells={"a-check": CellRecord("ok", confirm=confirmation)})
        found, = unit_rows("amy", release, prepared, run, Limits())
        return found.points, found.status, found.message

    zero = "0/4 points: exact match 0.0% (0 of 240 held-out numbers), chrF 12.0"
    assert row(Confirmation("failed", zero, rebuilt=True)) == (0, "failed", (
        "the check passed inside the kernel, but the grader decoded the answer rebuilt from its recorded weights, "
        f"with no learner code running: {zero}"))
    assert row(Confirmation("failed", zero))[1] == "tampered"  # re-scored ids that fail: the checking was altered
    full = "4/4 points: exact match 100.0% (240 of 240 held-out numbers), chrF 100.0"
    assert row(Confirmation("passed", full, 240, 4, rebuilt=True)) == (4, "passed", full)
    assert row(Confirmation("passed", full, 240, 4, review=DECODED_IN_KERNEL)) == (
        4, "passed", f"{full} [review the code: it {DECODED_IN_KERNEL}]")
