"""Lesson 11's variants over several seeds: do RMSNorm, the FFNs and grouped-query attention differ in quality?

Lesson 11 trains each variant of its small sorting model once and compares it with two seeds of the reference;
most gaps are of the size of the seed-to-seed spread, and the lesson says no more than that. This script keeps the
full measurement: every variant trained with the lesson's settings (d = 32, h = 4, d_ff = 128, L = 2; 300 steps of
64 sequences at a learning rate of 0.007 after a warm-up of 30 steps; 20,000 training pairs of 2 to 6 digits) from
several seeds, with the validation loss and the exact match of greedy generation on the 500 validation prompts.

    .venv/bin/python benchmarks/variants_seeds.py [--seeds 0 1 2 3] [--variants reference RMSNorm ...]

Prints, per variant, the mean, minimum and maximum over the seeds, and the mean loss minus the reference's in
units of the reference's spread (its maximum minus its minimum over the seeds). About 2 s per model on one thread.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from transformer_course import data, training
from transformer_course.generation import complete
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

SMALL = dict(d_model=32, num_heads=4, d_ff=128, num_layers=2, max_len=24)  # lesson 11's reference
VARIANTS = {
    "reference": {},
    "RMSNorm": dict(norm="rms"),
    "ReLU FFN (2017)": dict(activation="relu"),
    "SwiGLU FFN, d_ff = 85": dict(activation="swiglu", d_ff=85),
    "grouped-query, h_kv = 2": dict(num_kv_heads=2),
    "multi-query, h_kv = 1": dict(num_kv_heads=1),
}


def train_once(changes: dict, seed: int, inputs, targets, valid_inputs, valid_targets, valid_pairs, tok):
    """(validation loss, exact match) of the SMALL model with ``changes``, trained as lesson 11 trains it."""
    def loss_of(model, batch):
        x, y = batch
        return training.masked_cross_entropy(model(x), y, pad_id=tok.pad_id)

    torch.manual_seed(seed)
    model = DecoderOnlyLM(DecoderOnlyConfig(len(tok), **{**SMALL, **changes}))
    training.train(model, data.batcher(inputs, targets, batch_size=64), loss_of, max_steps=300, lr=7e-3,
                   warmup_steps=30, seed=seed, progress=False)
    with torch.no_grad():
        loss = loss_of(model, (valid_inputs, valid_targets)).item()
    answers = complete(model, [p for p, _ in valid_pairs], tok, max_new_tokens=max(len(a) for _, a in valid_pairs) + 1)
    return loss, training.exact_match(answers, [a for _, a in valid_pairs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    tok = data.CharTokenizer(data.SORT_CHARS)
    train_pairs = data.sort_examples(20_000, seed=1, min_len=2, max_len=6)
    valid_pairs = data.sort_examples(500, seed=2, min_len=2, max_len=6)
    inputs, targets = data.encode_lm(train_pairs, tok)
    valid_inputs, valid_targets = data.encode_lm(valid_pairs, tok)

    names = ["reference", *[v for v in args.variants if v != "reference"]]
    results = {name: [train_once(VARIANTS[name], seed, inputs, targets, valid_inputs, valid_targets, valid_pairs,
                                 tok) for seed in args.seeds] for name in names}
    reference_losses = [loss for loss, _ in results["reference"]]
    spread = max(reference_losses) - min(reference_losses)
    print(f"torch {torch.__version__}, seeds {args.seeds}; reference spread in validation loss {spread:.3f}")
    print(f"{'model':<26}{'loss mean':>10}{'min':>8}{'max':>8}{'exact mean':>12}{'min':>8}{'max':>8}"
          f"{'(mean - ref) / spread':>23}")
    for name, runs in results.items():
        losses, exact = [r[0] for r in runs], [r[1] for r in runs]
        gap = (statistics.mean(losses) - statistics.mean(reference_losses)) / spread if spread else float("nan")
        print(f"{name:<26}{statistics.mean(losses):>10.3f}{min(losses):>8.3f}{max(losses):>8.3f}"
              f"{statistics.mean(exact):>12.1%}{min(exact):>8.1%}{max(exact):>8.1%}{gap:>+23.1f}")


if __name__ == "__main__":
    main()
