"""Train the course's pretrained character-level GPT on Shakespeare's train plays (lesson 13's checkpoint).

    python tools/train_checkpoint.py --out build/checkpoint --minutes 90   # the full run (checkpoints/*/README.md)
    python tools/train_checkpoint.py --out /tmp/smoke --steps 20       # a smoke test

The model is the package's ``DecoderOnlyLM`` (d = 128, 4 layers, 4 heads, d_ff = 512, pre-norm, GELU, learned
positions, tied embeddings; block 128) over the characters of the corpus, trained with ``training.train``
(AdamW, warm-up and cosine decay, clipping 1.0) on random windows of the train plays. Everything random comes
from ``--seed``: the initial weights and, for step i, the windows of batch i (their own generator, seeded from
the seed and i), so a run with a step budget is the same run on every machine up to floating-point rounding.
``--minutes`` stops a run early (a safety net: a run cut by time depends on the machine's speed); the log then
records how many steps ran, and ``--stop-after`` with that number repeats the run on any machine: it stops after
that many steps with the learning-rate schedule still planned for ``--steps``.

It writes into ``--out``: ``model.pt`` (the float32 state_dict), ``vocab.txt`` (the characters, one id per
line as JSON strings), ``log.json`` (the configuration, every evaluation's train and validation loss, seconds,
steps per second, torch version, CPU, threads, and the sha256 of model.pt) and prints the sha256.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import platform
import time
from pathlib import Path

import torch

from transformer_course.data import shakespeare
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM
from transformer_course.pretrained import character_vocabulary, encode, held_out_loss, lm_loss, window_batch
from transformer_course.training import train, warmup_cosine


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for model.pt, vocab.txt and log.json")
    # 4000 steps of 16 x 128 characters (1.9 passes over the train plays): the shipped checkpoint. 66 min of wall time
    # and 1259 CPU seconds on a 2-core machine shared with a load of 12 to 19; on the same machine kind idle, the first
    # 1000 steps took 80 s (12.5 steps/s, the log's losses to four decimals), so the whole run about 6 min.
    parser.add_argument("--steps", type=int, default=4_000)
    parser.add_argument("--minutes", type=float, default=30.0, help="stop after this many minutes (safety net)")
    parser.add_argument("--stop-after", type=int, help="stop after this many steps, the schedule planned for --steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--eval-windows", type=int, default=256)
    args = parser.parse_args(argv)

    train_text, valid_text = shakespeare("train"), shakespeare("valid")
    vocab = character_vocabulary(train_text, valid_text, shakespeare("test"))
    train_ids, valid_ids = encode(train_text, vocab), encode(valid_text, vocab)
    torch.manual_seed(args.seed)
    config = DecoderOnlyConfig(vocab_size=len(vocab), d_model=128, num_heads=4, d_ff=512, num_layers=4,
                               max_len=args.block)
    model = DecoderOnlyLM(config)
    start, cpu_start = time.perf_counter(), time.process_time()
    log_evals = []

    def evaluate(m: torch.nn.Module) -> dict:
        metrics = {"valid_loss": held_out_loss(m, valid_ids, args.block, args.eval_windows),
                   "train_loss": held_out_loss(m, train_ids, args.block, args.eval_windows),
                   "seconds": time.perf_counter() - start}
        log_evals.append(metrics)
        print(f"  eval: valid {metrics['valid_loss']:.4f}  train {metrics['train_loss']:.4f}  "
              f"at {metrics['seconds']:.0f} s", flush=True)
        return metrics

    history = train(model, window_batch(train_ids, args.block, args.batch_size, args.seed), lm_loss,
                    max_steps=args.stop_after or args.steps, lr=args.lr, evaluate=evaluate,
                    schedule=functools.partial(warmup_cosine, warmup_steps=args.warmup, max_steps=args.steps),
                    eval_every=args.eval_every, time_budget=args.minutes * 60, seed=args.seed, progress=False)
    for metrics, step in zip(log_evals, history.eval_steps, strict=True):
        metrics["step"] = step

    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / "model.pt"
    torch.save(model.state_dict(), weights)
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    (args.out / "vocab.txt").write_text("".join(json.dumps(c) + "\n" for c in vocab))
    steps = len(history.steps)
    log = {
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "training": {k: v for k, v in vars(args).items() if k != "out"},
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": steps, "stopped": history.stopped, "seconds": history.seconds,
        "steps_per_second": steps / history.seconds,
        # CPU time of this process over wall time: about the thread count on an idle machine, less when other
        # work shares the cores (then the wall-clock figures above understate the machine's speed)
        "cpu_seconds": time.process_time() - cpu_start,
        "final_valid_loss": log_evals[-1]["valid_loss"],
        "final_valid_bits_per_char": log_evals[-1]["valid_loss"] / math.log(2),
        "evals": log_evals,
        "train_loss_every_step": history.losses,
        "torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "model_sha256": digest,
    }
    (args.out / "log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"{steps} steps in {history.seconds:.1f} s ({steps / history.seconds:.2f} steps/s), "
          f"valid loss {log['final_valid_loss']:.4f} nats ({log['final_valid_bits_per_char']:.3f} bits) per char")
    print(f"model.pt sha256 {digest} ({weights.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
