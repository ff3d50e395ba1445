"""How fast the course's models learn their tasks on 2 CPU threads.

Trains the lesson-09 translator (dates -> ISO) and the lesson-10 decoder-only model (sorting digits)
with the lessons' settings and prints the training seconds (evaluation time excluded) at which the
held-out exact match first reached 95% and 99%. Goals: dates 99% within 45 s, sorting within 20 s.

    .venv/bin/python benchmarks/learning.py
"""

from __future__ import annotations

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
    src, dec_in, dec_out = data.encode_pairs(data.date_examples(splits.train, 60000, seed=1), source, target)
    valid = data.date_examples(splits.valid, 500, seed=2)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(len(source), len(target), d_model=64, num_heads=4, d_ff=256,
                                             max_len=40, norm_first=True))
    return timed_run(
        model, data.batcher(src, dec_in, dec_out, batch_size=128),
        lambda m, b: masked_cross_entropy(m(b[0], b[1]), b[2]),
        lambda m: {"accuracy": exact_match(translate(m, [x for x, _ in valid], source, target, 12),
                                           [y for _, y in valid])},
        max_steps=700, lr=2e-3, warmup_steps=100)


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


def main():
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; training seconds, evaluation excluded")
    print(f"{'task':10} {'95%':>8} {'99%':>8} {'final':>7} {'steps':>6}")
    for name, run in (("dates", dates), ("sorting", sorting)):
        reached, history = run()
        cells = [f"{reached[t]:7.1f}s" if t in reached else "    n/a " for t in THRESHOLDS]
        print(f"{name:10} {cells[0]:>8} {cells[1]:>8} {history.metric('accuracy')[-1]:7.1%} {len(history.steps):6d}")


if __name__ == "__main__":
    main()
