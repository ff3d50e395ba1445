"""A small, deterministic training loop for the lessons, with a progress bar and a history to plot.

:func:`train` takes a model, a function that returns the loss of one batch, and a function that draws
batch ``i``; it runs AdamW (weight decay on matrices only) with linear warm-up then cosine decay (or another
schedule, such as the 2017 paper's :func:`noam_schedule`), clips the gradient norm, evaluates every
``eval_every`` steps, and stops at ``max_steps``, at a target metric, or at a time budget. Lessons train for a
fixed number of steps: a run that stops as soon as a metric first crosses a target stops at a different step
on another machine (the benchmarks use ``target`` to time a recipe).

The losses: :func:`masked_cross_entropy` ignores padding; :func:`label_smoothed_cross_entropy` also
smooths the targets, as the 2017 paper did (epsilon = 0.1).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course import _validate


def _scores_and_classes(logits: torch.Tensor, targets: torch.Tensor) -> None:
    """Require logits ``(B, n, |V|)`` and class ids ``(B, n)`` (torch.long) that agree in ``(B, n)``."""
    _validate.tensor("logits", logits, min_dim=3, floating=True)
    _validate.tensor("targets", targets, min_dim=2)
    if targets.dtype != torch.long:
        raise TypeError(f"targets must hold class indices (torch.long), got dtype {targets.dtype}")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits (B, n, |V|) and targets (B, n) disagree: {tuple(logits.shape)} and "
                         f"{tuple(targets.shape)}")


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Mean cross-entropy over the non-padding targets: logits ``(B, n, |V|)``, targets ``(B, n)``.

    ``F.cross_entropy`` wants the classes on axis 1, hence the flattening to ``(B*n, |V|)``.
    """
    _scores_and_classes(logits, targets)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=pad_id)


def label_smoothed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, epsilon: float,
                                 ignore_index: int = 0) -> torch.Tensor:
    """Cross-entropy against smoothed targets, averaged over the targets that are not ``ignore_index``.

    logits ``(B, n, |V|)``, targets ``(B, n)``. The target distribution puts ``1 - epsilon`` on the right
    class and spreads ``epsilon`` evenly over all ``|V|`` classes (the right one included), so the loss is
    ``(1 - epsilon) * (-log p[y]) + epsilon * mean_v(-log p[v])``. The same number as
    ``F.cross_entropy(logits.reshape(-1, |V|), targets.reshape(-1), label_smoothing=epsilon,
    ignore_index=ignore_index)``, written out. The default ``ignore_index`` is the course's ``<pad>`` id 0
    (``F.cross_entropy``'s is -100): padding positions get neither the true-class nor the smoothing term.
    """
    _scores_and_classes(logits, targets)
    epsilon = _validate.real("epsilon", epsilon)
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
    log_probs = logits.log_softmax(-1)  # (B, n, |V|)
    keep = targets != ignore_index  # (B, n)
    true_class = -log_probs.gather(-1, targets.masked_fill(~keep, 0)[..., None]).squeeze(-1)  # (B, n)
    uniform = -log_probs.mean(-1)  # (B, n): cross-entropy against the uniform distribution over |V|
    return ((1 - epsilon) * true_class + epsilon * uniform)[keep].mean()


def exact_match(predictions: list[str], references: list[str]) -> float:
    """The fraction of predictions equal to their reference, character for character."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    return sum(p == r for p, r in zip(predictions, references, strict=True)) / max(len(references), 1)


def warmup_cosine(step: int, warmup_steps: int, max_steps: int, floor: float = 0.1) -> float:
    """Learning-rate factor: linear from 0 to 1 over ``warmup_steps``, then cosine down to ``floor``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def noam(step: int, d_model: int, warmup_steps: int) -> float:
    """The learning rate of the 2017 paper ("Noam"): ``d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``.

    ``step`` counts from 1. It rises linearly for ``warmup_steps`` steps, peaks at ``step = warmup_steps``
    at ``(d_model * warmup_steps)^-0.5``, then decays as ``1 / sqrt(step)``: at ``4 * warmup_steps`` it is
    half the peak. The paper used d_model = 512 and 4000 warm-up steps: a peak of 7.0e-4.
    """
    step = _validate.integer("step", step, minimum=1)
    d_model = _validate.integer("d_model", d_model, minimum=1)
    warmup_steps = _validate.integer("warmup_steps", warmup_steps, minimum=1)
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_schedule(d_model: int, warmup_steps: int) -> Callable[[int], float]:
    """:func:`noam` as a ``schedule`` for :func:`train`: step ``i`` (from 0, as ``batch(i)``) is the paper's
    step ``i + 1``. With ``train(..., lr=1.0)`` the learning rates are the paper's; ``lr`` scales them."""
    d_model = _validate.integer("d_model", d_model, minimum=1)
    warmup_steps = _validate.integer("warmup_steps", warmup_steps, minimum=1)
    return lambda i: noam(i + 1, d_model, warmup_steps)


@dataclass
class History:
    """What :func:`train` measured: the loss at every step, evaluations, and why it stopped."""

    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    learning_rates: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    examples: int = 0
    stopped: str = ""

    def metric(self, name: str) -> list[float]:
        return [e[name] for e in self.evals]


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's parameter groups: weight decay for matrices (linear layers, embeddings), none for vectors.

    Decay pulls a weight towards 0. For a matrix that limits its scale; a norm's gain is meant to sit near 1
    and a bias has no scale to limit, so most recipes (nanoGPT's among them) exempt every 1-D parameter.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _progress_bar(total: int, enabled: bool):
    """A tqdm bar (a widget in Jupyter), and a function to call once it is closed.

    In Jupyter the widget is shown through a display handle that is updated when training ends, so a
    notebook saved afterwards (and the book, which cannot show widgets) keeps the final bar as text,
    "training: 100%|...| 500/500", rather than the "0%" it was first displayed with.
    """
    from tqdm.auto import tqdm

    kwargs = dict(total=total, disable=not enabled, desc="training", unit="step", mininterval=0.5)
    try:
        from tqdm.notebook import tqdm as notebook_tqdm
    except ImportError:  # ipywidgets missing: tqdm.auto is the console bar
        notebook_tqdm = None
    if not enabled or notebook_tqdm is None or not issubclass(tqdm, notebook_tqdm):
        return tqdm(**kwargs), lambda: None
    from IPython.display import display

    bar = tqdm(**kwargs, display=False)
    handle = display(bar.container, display_id=True)
    return bar, lambda: handle.update(bar.container)


def train(
    model: nn.Module,
    batch: Callable[[int], tuple],
    loss_of: Callable[[nn.Module, tuple], torch.Tensor],
    *,
    max_steps: int,
    lr: float = 3e-3,
    warmup_steps: int = 50,
    schedule: Callable[[int], float] | None = None,
    weight_decay: float = 0.01,
    clip_norm: float = 1.0,
    evaluate: Callable[[nn.Module], dict] | None = None,
    eval_every: int = 100,
    target: tuple[str, float] | None = None,
    time_budget: float | None = None,
    seed: int = 0,
    progress: bool = True,
) -> History:
    """Train ``model`` in place and return its :class:`History`.

    Args:
        batch: ``batch(i)`` returns the i-th batch (a tuple of tensors, first dimension B).
        loss_of: ``loss_of(model, batch)`` returns the scalar loss.
        schedule: ``schedule(i)`` is the factor multiplying ``lr`` at step ``i`` (from 0); by default
            ``warmup_cosine(i, warmup_steps, max_steps)``. ``noam_schedule(d_model, warmup)`` is the paper's.
        evaluate: called every ``eval_every`` steps and at the end, in eval mode; returns metrics.
        target: ``("accuracy", 0.99)`` stops as soon as an evaluation reaches it.
        time_budget: seconds after which training stops (a safety net; results then depend on speed).
        seed: seeds torch, so that a run with a step budget is reproducible.
    """
    max_steps = _validate.integer("max_steps", max_steps, minimum=1)
    torch.manual_seed(seed)
    # foreach: one kernel per operation for all parameters (bit-identical to the per-parameter loop, faster)
    optimizer = torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, foreach=True)
    if schedule is None:
        schedule = functools.partial(warmup_cosine, warmup_steps=warmup_steps, max_steps=max_steps)
    elif not callable(schedule):
        raise TypeError(f"schedule must be a function of the step, got {_validate.describe(schedule)}")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    history, start = History(), time.perf_counter()
    bar, finish_bar = _progress_bar(max_steps, progress)

    def run_eval(step: int) -> dict:
        model.eval()
        with torch.no_grad():
            metrics = evaluate(model)
        model.train()
        history.eval_steps.append(step)
        history.evals.append(metrics)
        return metrics

    model.train()
    for step in range(max_steps):
        data = batch(step)
        loss = loss_of(model, data)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm:
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
        scheduler.step()
        history.steps.append(step)
        history.losses.append(loss.item())
        history.learning_rates.append(optimizer.param_groups[0]["lr"])
        history.examples += len(data[0])
        elapsed = time.perf_counter() - start
        bar.update(1)
        # refresh=False: redraw at tqdm's own pace, not every step (each redraw of the widget is a message)
        bar.set_postfix(loss=f"{loss.item():.3f}", ex_per_s=f"{history.examples / elapsed:.0f}", refresh=False)
        if evaluate is not None and (step + 1) % eval_every == 0:
            metrics = run_eval(step + 1)
            if target is not None and metrics[target[0]] >= target[1]:
                history.stopped = f"reached {target[0]} >= {target[1]} at step {step + 1}"
                break
        if time_budget is not None and elapsed > time_budget:
            history.stopped = f"time budget of {time_budget:.0f} s reached at step {step + 1}"
            break
    else:
        history.stopped = f"max_steps={max_steps} reached"
    if evaluate is not None and history.eval_steps[-1:] != [history.steps[-1] + 1]:
        run_eval(history.steps[-1] + 1)
    bar.close()
    finish_bar()
    model.eval()
    history.seconds = time.perf_counter() - start
    return history
