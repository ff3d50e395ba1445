"""The training loop: it learns, is reproducible, stops at its target or budget; the masked loss."""

import pytest
import torch
from torch import nn

from transformer_course.training import (
    exact_match,
    label_smoothed_cross_entropy,
    masked_cross_entropy,
    noam,
    noam_schedule,
    parameter_groups,
    train,
    warmup_cosine,
)


def regression_problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return x, y


def run(max_steps=200, **kwargs):
    torch.manual_seed(1)
    model = nn.Linear(4, 1)
    x, y = regression_problem()
    history = train(model, lambda i: (x[(i * 32) % 512 :][:32], y[(i * 32) % 512 :][:32]),
                    lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]), max_steps=max_steps, lr=0.05,
                    warmup_steps=10, progress=False, **kwargs)
    return model, history


def test_training_learns_and_is_reproducible():
    model, history = run()
    assert history.losses[-1] < 1e-2 * history.losses[0]
    assert history.losses == run()[1].losses
    assert len(history.learning_rates) == 200 and history.stopped == "max_steps=200 reached"


def test_stops_at_the_target_and_evaluates_at_the_end():
    x, y = regression_problem()
    _, history = run(evaluate=lambda m: {"r2": 1 - ((m(x) - y) ** 2).mean().item() / y.var().item()},
                     eval_every=20, target=("r2", 0.99))
    assert history.stopped.startswith("reached r2 >= 0.99 at step")
    assert history.metric("r2")[-1] >= 0.99 and history.eval_steps[-1] == history.steps[-1] + 1


def test_time_budget():
    _, history = run(max_steps=100000, time_budget=0.2)
    assert history.stopped.startswith("time budget of 0 s reached") and len(history.steps) < 100000


def test_masked_cross_entropy_ignores_padding():
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, 2, 0], [4, 0, 0]])
    real = torch.tensor([[True, True, False], [True, False, False]])
    expected = nn.functional.cross_entropy(logits[real], targets[real])
    torch.testing.assert_close(masked_cross_entropy(logits, targets), expected)
    with pytest.raises(ValueError, match=r"disagree: \(2, 3, 5\) and \(2, 2\)"):
        masked_cross_entropy(logits, targets[:, :2])
    with pytest.raises(TypeError, match=r"targets must hold class indices \(torch.long\), got dtype torch.float32"):
        masked_cross_entropy(logits, targets.float())


def test_schedule_and_exact_match():
    assert warmup_cosine(0, 10, 100) == pytest.approx(0.1) and warmup_cosine(9, 10, 100) == 1.0
    assert warmup_cosine(100, 10, 100) == pytest.approx(0.1)
    assert exact_match(["a", "b"], ["a", "c"]) == 0.5


def test_weight_decay_shrinks_matrices_only():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    groups = parameter_groups(model, 0.1)
    assert [(len(g["params"]), g["weight_decay"]) for g in groups] == [(2, 0.1), (3, 0.0)]
    before = [p.detach().clone() for p in model.parameters()]
    # A loss with zero gradient: Adam's step is 0, so only the decay can move a parameter.
    train(model, lambda i: (torch.zeros(1),), lambda m, b: 0 * sum(p.sum() for p in m.parameters()), max_steps=1,
          lr=0.5, warmup_steps=1, weight_decay=0.1, progress=False)
    for (name, p), old in zip(model.named_parameters(), before, strict=True):
        if p.dim() >= 2:
            torch.testing.assert_close(p.detach(), old * (1 - 0.5 * 0.1), msg=name)
        else:
            assert torch.equal(p.detach(), old), f"{name} was decayed"


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("ignore_index", [0, -100])
def test_label_smoothed_cross_entropy_equals_pytorch(epsilon, ignore_index):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 7, generator=g) * 3
    targets = torch.tensor([[1, 2, 6, 0], [4, 3, 0, 0], [5, 5, 5, 5]])
    if ignore_index == -100:
        targets = targets.masked_fill(targets == 0, -100)
    expected = nn.functional.cross_entropy(logits.reshape(-1, 7), targets.reshape(-1), label_smoothing=epsilon,
                                           ignore_index=ignore_index)
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, targets, epsilon, ignore_index=ignore_index),
                               expected)


def test_label_smoothing_details():
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, 2, 0], [4, 0, 0]])
    unsmoothed = label_smoothed_cross_entropy(logits, targets, 0.0)
    torch.testing.assert_close(unsmoothed, masked_cross_entropy(logits, targets))
    # a model that is sure of the right class pays for it once the targets are smoothed
    confident = nn.functional.one_hot(targets, 5).float() * 20
    assert masked_cross_entropy(confident, targets) < 1e-6 < 1.0 < label_smoothed_cross_entropy(confident, targets, 0.1)
    with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\], got 1.5"):
        label_smoothed_cross_entropy(logits, targets, 1.5)
    with pytest.raises(ValueError, match=r"disagree: \(2, 3, 5\) and \(2, 2\)"):
        label_smoothed_cross_entropy(logits, targets[:, :2], 0.1)


def test_noam_schedule_values_and_peak():
    peak = 512**-0.5 * 4000**-0.5
    assert noam(4000, 512, 4000) == pytest.approx(peak) and peak == pytest.approx(6.988e-4, rel=1e-4)
    assert noam(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam(2000, 512, 4000) == pytest.approx(peak / 2) and noam(16000, 512, 4000) == pytest.approx(peak / 2)
    rates = [noam(s, 64, 100) for s in range(1, 1001)]
    assert max(rates) == rates[99] and rates[:100] == sorted(rates[:100]) and rates[99:] == sorted(rates[99:])[::-1]
    for kwargs, match in [(dict(step=0, d_model=64, warmup_steps=10), "step must be >= 1, got 0"),
                          (dict(step=1, d_model=0, warmup_steps=10), "d_model must be >= 1, got 0"),
                          (dict(step=1, d_model=64, warmup_steps=0), "warmup_steps must be >= 1, got 0")]:
        with pytest.raises(ValueError, match=match):
            noam(**kwargs)


def test_train_takes_a_schedule_such_as_noam():
    _, history = run(max_steps=50, schedule=noam_schedule(d_model=16, warmup_steps=20))
    # learning_rates[i] is read after step i, so it is the rate of step i + 1: the paper's step i + 2 (lr=0.05 scales)
    assert history.learning_rates == pytest.approx([0.05 * noam(i + 2, 16, 20) for i in range(50)])
    assert max(history.learning_rates) == history.learning_rates[18]  # paper's step 20 = warmup
    _, default = run(max_steps=50)
    assert default.learning_rates == pytest.approx([0.05 * warmup_cosine(i + 1, 10, 50) for i in range(50)])
    with pytest.raises(TypeError, match="schedule must be a function of the step, got str"):
        run(max_steps=5, schedule="noam")
