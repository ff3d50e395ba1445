"""Lesson 13's checks beyond the generic tables of tests/test_exercise_checks.py (which also hold each wrong answer to
its exact mistake id, from tests/answers/lesson13.MISTAKES): the checks' variants are the package's reference with
one thing changed, the hidden cases share nothing with the public ones, and exercise 13.4's bands, its guards against
the course checkpoint and against models that read no context (count models), and its re-check outside the kernel."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.answers import lesson13 as answers
from transformer_course import bpe, data, pretrained
from transformer_course.checks import CheckFailed, check, core, lesson13, shakespeare_model


@pytest.fixture(params=[None, 20261125], ids=["public cases", "hidden cases"])
def cases_seed(request, monkeypatch):
    monkeypatch.setattr(core, "CASES_SEED", request.param)
    return request.param


def test_the_bpe_variants_are_the_package_bpe_with_one_rule_changed(cases_seed):
    """With every default, the check's slow BPE is bpe.train_bpe; each mistake's variant differs from it on some case
    (else the check could not name it)."""
    cases = lesson13._bpe_cases()
    for case in cases:
        assert lesson13._slow_bpe(*case.fresh_args()) == bpe.train_bpe(*case.fresh_args()), case.label
    for mistake in lesson13.BPE_MISTAKES:
        assert any(mistake.wrong(*c.fresh_args()) != bpe.train_bpe(*c.fresh_args()) for c in cases), mistake.id


def test_hidden_cases_share_no_text_with_the_public_ones(monkeypatch):
    public_bpe = {c.args["text"] for c in lesson13._bpe_cases()}
    public_windows = {tuple(row.tolist()) for row in shakespeare_model.held_out_windows()}
    public_gpt = lesson13._gpt_cases()[1].args["tokens"]
    public_loop = lesson13._LoopRun(lesson13._reference_loop)(*lesson13._loop_cases()[0].fresh_args())
    monkeypatch.setattr(core, "CASES_SEED", 4242)
    hidden_loop = lesson13._LoopRun(lesson13._reference_loop)(*lesson13._loop_cases()[0].fresh_args())
    assert not torch.equal(public_loop[1], hidden_loop[1])  # other weights, batches and dropout draws
    drawn = {c.args["text"] for c in lesson13._bpe_cases()} - {t for _, t, _ in lesson13.BPE_TEXTS}
    assert drawn and not drawn & public_bpe
    hidden_windows = {tuple(row.tolist()) for row in shakespeare_model.held_out_windows()}
    assert len(hidden_windows) == shakespeare_model.SAMPLE and not hidden_windows & public_windows
    hidden_gpt = lesson13._gpt_cases()[1].args["tokens"]
    assert not {tuple(r.tolist()) for r in hidden_gpt} & {tuple(r.tolist()) for r in public_gpt}


def test_the_held_out_windows_come_from_the_test_plays():
    text = data.shakespeare("test")
    for row in shakespeare_model.held_out_windows()[:5]:
        assert shakespeare_model.decode(row) in text


def test_bands():
    top, second = shakespeare_model.BANDS[0][1], shakespeare_model.BANDS[1][1]
    assert shakespeare_model.band(top) == (4, "")
    assert shakespeare_model.band(top + 0.01) == (3, f"4 points need bits/char <= {top}")
    assert shakespeare_model.band(second + 0.01)[0] == 2
    assert shakespeare_model.band(99.0)[0] == 0


class CallsTheCheckpoint(nn.Module):
    """A "model" whose forward asks the course checkpoint: its weights are its own (random), its predictions not."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, ids):
        return pretrained.shakespeare_gpt()(ids)


def _fine_tuned_checkpoint() -> nn.Module:
    """The checkpoint, trained on for 5 steps of the training plays: its weights still are the checkpoint's."""
    model = pretrained.shakespeare_gpt()
    ids = shakespeare_model.encode(data.shakespeare("train")[:200_000])
    batch = pretrained.window_batch(ids, 128, 4, seed=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for i in range(5):
        optimizer.zero_grad()
        pretrained.lm_loss(model, batch(i)).backward()
        optimizer.step()
    return model.eval()


@pytest.mark.parametrize("make", [pretrained.shakespeare_gpt, CallsTheCheckpoint, _fine_tuned_checkpoint],
                         ids=["the checkpoint", "calls the checkpoint", "fine-tuned from the checkpoint"])
def test_a_model_from_the_course_checkpoint_earns_nothing(make):
    with pytest.raises(CheckFailed) as failure:
        check("13.4", make())
    assert failure.value.mistake.id == "uses-course-checkpoint", str(failure.value)
    assert str(failure.value).startswith("13.4") and "0/4 points" in str(failure.value)


def test_an_untrained_model_earns_nothing_and_the_stub_is_not_implemented():
    torch.manual_seed(0)
    with pytest.raises(CheckFailed) as failure:
        check("13.4", answers.untrained_gpt())
    assert failure.value.mistake.id == "too-high-loss"
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check("13.4", None)


def test_a_count_model_earns_nothing_and_the_grader_names_why(tmp_path, monkeypatch):
    """A trigram model predicts better than the bands' top (2.9 bits/char) and earns nothing: its predictions do not
    move when the characters more than NEAR back change. In the grader's kernel the check fails, records no pass to
    confirm, and leaves the mistake's id for the gradebook."""
    from transformer_course.grading import kernel
    from transformer_course.grading.replay import confirm

    model = answers.NGram(3)
    with pytest.raises(CheckFailed) as failure:
        check("13.4", model)
    assert failure.value.mistake.id == "ignores-far-context" and "0/4 points" in str(failure.value)
    assert "2.94" in str(failure.value) and "does not read its context" in str(failure.value)
    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    with pytest.raises(CheckFailed):
        kernel.recording_check("13.4", model)
    assert confirm("13.4", tmp_path / "13.4.pt").verdict == "no_record"
    assert (tmp_path / f"13.4{kernel.MISTAKE_SUFFIX}").read_text().strip() == "ignores-far-context"


def test_the_far_context_change_is_zero_for_a_count_model_and_not_for_a_model_that_reads_far_back():
    """The measure itself: a 4-gram model's predictions at positions FAR_CUT + NEAR - 1 and later are the same on the
    replaced windows (0 exactly); a model that adds the first character's embedding to every position's logits (so
    reads 127 characters back) moves them."""
    windows = shakespeare_model.held_out_windows()[:16, :-1]
    replaced = shakespeare_model.far_context_replaced(windows)
    assert torch.equal(replaced[:, shakespeare_model.FAR_CUT:], windows[:, shakespeare_model.FAR_CUT:])
    assert not torch.equal(replaced, windows)
    ngram = answers.NGram(4)
    with torch.no_grad():
        assert shakespeare_model.far_context_change(ngram(windows), ngram(replaced)) == 0.0

    class ReadsTheFirstCharacter(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.table = answers.NGram(2), nn.Embedding(len(shakespeare_model.vocabulary()), 1)
            torch.manual_seed(0)
            nn.init.normal_(self.table.weight)

        def forward(self, ids):
            logits = self.inner(ids)
            bump = torch.zeros_like(logits)
            bump[..., 0] = self.table(ids[:, :1])[..., 0]  # the first character raises or lowers the first id
            return logits + bump

    far = ReadsTheFirstCharacter()
    with torch.no_grad():
        change = shakespeare_model.far_context_change(far(windows), far(replaced))
    assert change > shakespeare_model.MIN_FAR_CHANGE


def test_an_answer_that_fails_on_a_later_case_is_rejected():
    """Every case counts: right on the first case and raising on the next is a failure, reported as the error."""
    first = lesson13._bpe_cases()[0].args["text"]

    def right_once(text, num_merges):
        if text != first:
            raise KeyError("a case I did not expect")
        return bpe.train_bpe(text, num_merges)

    with pytest.raises(CheckFailed, match="KeyError"):
        check("13.1", right_once)
