"""Generation speed: the fast cached step, the module path it replaced, and no cache, side by side in one run.

An untrained decoder-only model (d=64, 4 heads, 2 layers, d_ff=256; the weights do not change the cost)
generates 64, 256 and 512 tokens greedily from an 8-token prompt, batch 1, three ways in interleaved
rounds (the best of ROUNDS runs each: other programs can only slow a run down):

- new: ``generate(...)``, the default: ``CachedDecoder``, a preallocated cache written in place, one call
  per step of the functional pieces the modules' ``forward`` calls too, checks once per call,
  ``torch.inference_mode``;
- old: ``generate(..., fast=False)``, the loop the package had before: ``model(token, cache=cache)`` through
  the modules' checked ``forward`` with a ``KVCache`` per block;
- no cache: ``generate(..., use_cache=False)``, the whole sequence every step.

Then tokens per second for batches of 1, 8 and 32 sequences (256 new tokens, cached), and the one-token
step through ``torch.compile`` (inductor, which needs a C++ compiler: skipped with a message without one,
or with ``--no-compile``). Targets: new >= 2x old at every length, new >= 8x no cache at 512 tokens, and the
same tokens from every path. Record the figures under two numerics configurations, on an idle machine:

    .venv/bin/python benchmarks/kv_cache.py
    ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kv_cache.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from functools import partial

import torch

from transformer_course.generation import generate
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

ROUNDS = 5
LENGTHS = (64, 256, 512)
BATCHES = (1, 8, 32)
PATHS = {"new": {}, "old": {"fast": False}, "no cache": {"use_cache": False}}


def best_times(calls: dict, rounds: int = ROUNDS) -> tuple[dict, dict]:
    """{name: fn} -> ({name: the shortest time of fn() in seconds}, {name: fn's last output}), over interleaved
    rounds that call every fn once each."""
    best, outputs = dict.fromkeys(calls, float("inf")), {}
    for _ in range(rounds):
        for name, fn in calls.items():
            start = time.perf_counter()
            outputs[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best, outputs


def cxx_compiler() -> str | None:
    """The C++ compiler that inductor would use on the CPU, or None."""
    return os.environ.get("CXX") or next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile measurement")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = DecoderOnlyLM(DecoderOnlyConfig(vocab_size=32, d_model=64, num_heads=4, d_ff=256, num_layers=2,
                                            max_len=600)).eval()
    prompt = torch.randint(32, (1, 8), generator=torch.Generator().manual_seed(1))
    numerics = " ".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_CBWR")
                        if k in os.environ) or "default numerics"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()} ({numerics}); best of {ROUNDS} interleaved rounds")
    for path in PATHS.values():  # warm-up: the first calls pay one-off costs
        generate(model, prompt, 16, **path)

    print("\nbatch 1, tokens/s (new: CachedDecoder; old: the module path, fast=False; no cache: use_cache=False)")
    print(f"{'new tokens':>10} {'new':>7} {'old':>7} {'new/old':>8} {'no cache':>9} {'new/no cache':>13} "
          f"{'old/no cache':>13} {'same tokens':>12}")
    ratios = {}
    for n in LENGTHS:
        seconds, out = best_times({name: partial(generate, model, prompt, n, **kw) for name, kw in PATHS.items()})
        rate = {name: n / s for name, s in seconds.items()}
        same = torch.equal(out["new"], out["old"]) and torch.equal(out["new"], out["no cache"])
        ratios[n] = (rate["new"] / rate["old"], rate["new"] / rate["no cache"], same)
        print(f"{n:10d} {rate['new']:7.0f} {rate['old']:7.0f} {ratios[n][0]:7.1f}x {rate['no cache']:9.0f} "
              f"{ratios[n][1]:12.1f}x {rate['old'] / rate['no cache']:12.1f}x {str(same):>12}")

    n = 256
    print(f"\nbatch throughput, cached, {n} new tokens: tokens/s over all sequences (B x {n} / time)")
    print(f"{'batch':>5} {'new':>8} {'old':>8} {'new/old':>8} {'new per sequence':>17}")
    for batch in BATCHES:
        prompts = torch.randint(32, (batch, 8), generator=torch.Generator().manual_seed(batch))
        seconds, out = best_times({name: partial(generate, model, prompts, n, **kw)
                                   for name, kw in list(PATHS.items())[:2]}, rounds=3)
        new, old = batch * n / seconds["new"], batch * n / seconds["old"]
        assert torch.equal(out["new"], out["old"])
        print(f"{batch:5d} {new:8.0f} {old:8.0f} {new / old:7.1f}x {new / batch:17.0f}")

    print("\nthe one-token step through torch.compile (inductor), batch 1")
    compiler = cxx_compiler()
    if args.no_compile:
        print("skipped (--no-compile)")
    elif compiler is None:
        print("skipped: no C++ compiler found (g++, c++, clang++ or $CXX); inductor needs one on the CPU")
    else:
        start = time.perf_counter()
        try:
            generate(model, prompt, 16, compile=True)
        except Exception as error:  # a broken toolchain should not hide the figures above
            reason = next((line for line in str(error).splitlines() if line.strip() and "raised:" not in line), "")
            print(f"skipped: torch.compile failed with {type(error).__name__}: {reason.strip()[:200]}")
        else:
            print(f"compiler {compiler}; first call (compiling) {time.perf_counter() - start:.1f} s")
            print(f"{'new tokens':>10} {'compiled':>9} {'eager new':>10} {'compiled/eager':>15} {'same tokens':>12}")
            for n in LENGTHS:
                seconds, out = best_times({"compiled": partial(generate, model, prompt, n, compile=True),
                                           "eager": partial(generate, model, prompt, n)}, rounds=3)
                rate = {name: n / s for name, s in seconds.items()}
                same = torch.equal(out["compiled"], out["eager"])
                print(f"{n:10d} {rate['compiled']:9.0f} {rate['eager']:10.0f} "
                      f"{rate['compiled'] / rate['eager']:14.2f}x {str(same):>12}")

    print("\ntargets: new >= 2x old at every length: "
          f"{'met' if all(r[0] >= 2 for r in ratios.values()) else 'NOT met'}; new >= 8x no cache at 512 tokens: "
          f"{'met' if ratios[512][1] >= 8 else 'NOT met'}; the same tokens from every path: "
          f"{'yes' if all(r[2] for r in ratios.values()) else 'NO'}")


if __name__ == "__main__":
    main()
