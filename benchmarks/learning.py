"""How fast the course's models learn their tasks on 2 CPU threads.

Trains the lesson-09 translator (dates -> ISO) and the lesson-10 decoder-only model (sorting digits)
with the lessons' settings and prints the training seconds (evaluation time excluded) at which the
held-out exact match first reached 95% and 99%. Goals: dates 99% within 45 s, sorting within 20 s.

    .venv/bin/python benchmarks/learning.py

``capstone`` instead measures the learner's recipe of exercise 12.4 (the solution's answer cell) as the grader runs
it, on one thread, and the held-out exact match that its check would grade: the evidence for the check's bands
(``checks/capstone.py``, BANDS). Run it under each numerics configuration with several seeds:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learning.py capstone --seeds 0 1
    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=default .venv/bin/python benchmarks/learning.py capstone --seeds 0 1

``shakespeare`` runs exercise 13.4's solution from the solution notebook's cells and measures it as its check does
(``checks/shakespeare_model.py``, BANDS and MIN_FAR_CHANGE):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learning.py shakespeare --seeds 0 1
"""

from __future__ import annotations

import argparse
import time

import torch

from transformer_course import data
from transformer_course.generation import complete, translate
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM, Seq2SeqConfig, Seq2SeqTransformer
from transformer_course.training import exact_match, masked_cross_entropy, train

THRESHOLDS = (0.95, 0.99)


def timed_run(model, batch, loss_of, evaluate, max_steps, lr, warmup_steps):
    """Train, evaluating every 50 steps; return {threshold: training seconds when first reached}, history."""
    eval_seconds, reached = 0.0, {}

    def timed_evaluate(m):
        nonlocal eval_seconds
        start = time.perf_counter()
        metrics = evaluate(m)
        eval_seconds += time.perf_counter() - start
        for t in THRESHOLDS:
            if metrics["accuracy"] >= t and t not in reached:
                reached[t] = time.perf_counter() - run_start - eval_seconds
        return metrics

    run_start = time.perf_counter()
    history = train(model, batch, loss_of, max_steps=max_steps, lr=lr, warmup_steps=warmup_steps,
                    evaluate=timed_evaluate, eval_every=50, target=("accuracy", max(THRESHOLDS)), progress=False)
    return reached, history


def dates():
    source, target = data.date_tokenizers()
    splits = data.date_splits(seed=0)
    src, dec_in, dec_out = data.encode_pairs(data.date_examples(splits.train, 32000, seed=1), source, target)
    valid = data.date_examples(splits.valid, 500, seed=2)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(len(source), len(target), d_model=64, num_heads=4, d_ff=256,
                                             max_len=40, norm_first=True))
    return timed_run(
        model, data.batcher(src, dec_in, dec_out, batch_size=64),
        lambda m, b: masked_cross_entropy(m(b[0], b[1]), b[2]),
        lambda m: {"accuracy": exact_match(translate(m, [x for x, _ in valid], source, target, 12),
                                           [y for _, y in valid])},
        max_steps=500, lr=3e-3, warmup_steps=50)


def sorting():
    tok = data.CharTokenizer(data.SORT_CHARS)
    inputs, targets = data.encode_lm(data.sort_examples(50000, seed=1), tok)
    valid = data.sort_examples(500, seed=2)
    torch.manual_seed(0)
    model = DecoderOnlyLM(DecoderOnlyConfig(len(tok), d_model=64, num_heads=4, d_ff=256, num_layers=2, max_len=24))
    return timed_run(
        model, data.batcher(inputs, targets, batch_size=128),
        lambda m, b: masked_cross_entropy(m(b[0]), b[1]),
        lambda m: {"accuracy": exact_match(complete(m, [p for p, _ in valid], tok, 9), [a for _, a in valid])},
        max_steps=600, lr=3e-3, warmup_steps=50)


def capstone(seed: int, steps: int) -> tuple[float, float, dict, dict]:
    """The solution's recipe for exercise 12.4: (the answer cell's wall seconds, its CPU seconds, validation
    scores, held-out scores as the check computes them). On one thread the CPU seconds are what the cell takes on
    an idle core; the wall seconds grow with the machine's load."""
    from transformer_course.checks.capstone import capstone_task, evaluate_translator, held_out_numbers
    from transformer_course.training import label_smoothed_cross_entropy

    begin, begin_cpu = time.perf_counter(), time.process_time()  # the answer cell, from its first line
    task = capstone_task()
    config = Seq2SeqConfig(len(task.src_tok), len(task.tgt_tok), d_model=64, num_heads=4, d_ff=256,
                           num_encoder_layers=2, num_decoder_layers=2, max_len=64, norm_first=True)
    batches = data.batcher(*data.encode_pairs(task.train_pairs, task.src_tok, task.tgt_tok), batch_size=64)
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(config)
    train(model, batches, lambda m, b: label_smoothed_cross_entropy(m(b[0], b[1]), b[2], 0.1), max_steps=steps,
          lr=5e-3, warmup_steps=50, progress=False)
    valid = evaluate_translator(model, task.valid_pairs)
    cell, cell_cpu = time.perf_counter() - begin, time.process_time() - begin_cpu
    return cell, cell_cpu, valid, evaluate_translator(model, data.number_examples(held_out_numbers(), "de"))


# Measured on 2026-11-26, torch 2.13.0, OMP_NUM_THREADS=1, on this machine kind (2 cores shared with three other
# jobs, load 10-20: the wall seconds are far above an idle core's; the CPU seconds, also inflated by the sharing, are
# closer to what one idle thread takes). Held-out: the 300 public numbers the check used then (it now translates 240
# from one half of the test split, the hidden cases coming from the other). Recipe: exercise 12.4's solution
# (d = 64, 2 + 2 pre-norm layers, label smoothing 0.1, AdamW, batches of 64, warm-up 50, cosine from 5e-3).
#
#   numerics                      steps  seed  answer cell (CPU)  validation  held-out exact match  chrF
#   default                        300     0        44.7 s          99.6%          99.3%            99.9
#   default                        200     0        33.2 s          99.4%          99.3%            99.9
#   default                        200     1        27.9 s          99.8%          99.3%            99.9
#   ATEN_CPU_CAPABILITY=default    200     0        45.0 s          99.4%          99.3%            99.9
#   ATEN_CPU_CAPABILITY=default    200     1        41.5 s          99.8%          99.0%            99.9
#
# So full marks (>= 95%) leave 4 points of room under both configurations, and the 200-step answer fits the 60 s
# limit with a margin on one thread with vector instructions; without them (the slowest kernels PyTorch has) it
# comes closer, which is why the task asks learners to keep their training cell to about half the limit.


def shakespeare(seed: int, steps: int = 800) -> dict:
    """Exercise 13.4's solution, run from the solution notebook's own cells (its imports, ``train_loop``, ``GPT``, the
    task's data and the answer cell; ``manual_seed(0)`` becomes ``manual_seed(seed)``, so the initial weights and the
    batches change), then measured as the check measures it: {the answer cell's wall and CPU seconds, bits/char and
    far-context change (``checks/shakespeare_model.py``) on the public windows and on a hidden sample}. ``steps``
    other than 800 (the solution's) measures a shorter or longer training run of the same recipe."""
    import json
    from pathlib import Path

    from transformer_course.checks import core, shakespeare_model

    notebook = json.loads((Path(__file__).parent.parent / "solutions/13_gpt_on_real_text.ipynb").read_text())
    wanted = ("from transformer_course.checks import check", "def train_loop", "class GPT", "The task's data",
              "my_model = None")
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    chosen = [next(c for c in cells if marker in c) for marker in wanted]
    namespace: dict = {}
    for source in chosen[:-1]:
        exec(compile(source, "<solution>", "exec"), namespace)  # noqa: S102 - the course's own notebook
    begin, begin_cpu = time.perf_counter(), time.process_time()
    answer = chosen[-1].replace("manual_seed(0)", f"manual_seed({seed})").replace("steps, batch_size, n = 800,",
                                                                                 f"steps, batch_size, n = {steps},")
    exec(compile(answer, "<answer>", "exec"), namespace)  # noqa: S102
    result = {"cell": time.perf_counter() - begin, "cpu": time.process_time() - begin_cpu}
    model = namespace["my_model"]
    for name, cases_seed in (("public", None), ("hidden", 20261125)):
        previous, core.CASES_SEED = core.CASES_SEED, cases_seed
        try:
            windows = shakespeare_model.held_out_windows()
        finally:
            core.CASES_SEED = previous
        logits = shakespeare_model._logits_of(model, windows[:, :-1])
        replaced = shakespeare_model._logits_of(model, shakespeare_model.far_context_replaced(windows[:, :-1]))
        result[name] = (shakespeare_model.bits_per_char(logits, windows[:, 1:]),
                        shakespeare_model.far_context_change(logits, replaced))
    return result


# Exercise 13.4's far-context measure, chosen on 2026-11-26 (torch 2.13.0, one thread, this machine kind, shared).
# Models: the solution's recipe (800 steps of 8 x 128 characters, d = 64, 2 layers, learned positions) and variants of
# it (the one with batches of 4 trains on as many characters in 1.6x the CPU time), the package's DecoderOnlyLM with
# rotary positions on the same loop (800 steps, about the solution's CPU time), and count models
# (tests/answers/lesson13.py). Public windows, the first 64 characters replaced by the previous window's; for each
# NEAR k, the positions that still see k characters of their own: the loss gain (replaced - true, bits/char) and the
# KL divergence of the predictions (bits).
#
#   model                              bits/char  gain k=4  gain k=8  gain k=32  KL k=4   KL k=8
#   solution's recipe, seed 0          3.455      0.006     0.001     -0.005     0.044    0.035
#   batches of 4, 1,600 steps          3.273      0.012     0.009     -0.005     0.031    0.023
#   sinusoidal start for positions     3.367      0.007     0.006      0.000     0.029    0.025
#   lr 1e-2                            3.584      0.007     0.005      0.002     0.039    0.036
#   rotary positions (package GPT)     2.816      0.015     0.011      0.001     0.016    0.013
#   untrained GPT                      6.359      0.001     0.001      0.001     0.0006   0.0005
#   trigram / 4-gram counts            2.94/2.52  0 / 0     0 / 0      0 / 0      0 / 0    0 / 0
#
# The loss gain from far context is within its noise (a negative gain at k = 32) for every GPT trained this briefly,
# so the check asks for the KL divergence instead: whether the predictions depend on the far context at all, which a
# count model's never do (0 exactly) and a trained GPT's do, by 0.004 bits (100 steps) to 0.045. The threshold is
# 0.001 bits at k = 8 (checks/shakespeare_model.py, MIN_FAR_CHANGE). Rotary positions are the one variant that leaves
# the bigram plateau within the budget (2.82 bits/char, better than the trigram's 2.94): a candidate for the solution.


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", choices=["capstone", "shakespeare"],
                        help="the recipe of exercise 12.4 or 13.4 instead of the lessons")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, help="training steps of the recipe (capstone: 200, shakespeare: 800)")
    args = parser.parse_args()
    if args.task == "shakespeare":
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
        for seed in args.seeds:
            steps = args.steps or 800
            r = shakespeare(seed, steps)
            print(f"{steps} steps, seed {seed}: answer cell {r['cell']:.1f} s wall, {r['cpu']:.1f} s CPU; bits/char "
                  f"{r['public'][0]:.3f} public, {r['hidden'][0]:.3f} hidden; far-context change "
                  f"{r['public'][1]:.4f} public, {r['hidden'][1]:.4f} hidden", flush=True)
        return
    if args.task == "capstone":
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
        for seed in args.seeds:
            steps = args.steps or 200
            cell, cpu, valid, held = capstone(seed, steps)
            print(f"{steps} steps, seed {seed}: answer cell {cell:.1f} s wall, {cpu:.1f} s CPU; "
                  f"validation exact match {valid['exact_match']:.1%}; held-out exact match {held['exact_match']:.1%}, "
                  f"chrF {held['chrf']:.1f}")
        return
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; training seconds, evaluation excluded")
    print(f"{'task':10} {'95%':>8} {'99%':>8} {'final':>7} {'steps':>6}")
    for name, run in (("dates", dates), ("sorting", sorting)):
        reached, history = run()
        cells = [f"{reached[t]:7.1f}s" if t in reached else "    n/a " for t in THRESHOLDS]
        print(f"{name:10} {cells[0]:>8} {cells[1]:>8} {history.metric('accuracy')[-1]:7.1%} {len(history.steps):6d}")


if __name__ == "__main__":
    main()
