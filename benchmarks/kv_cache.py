"""Generation speed with and without the key-value cache, measured side by side in one run.

An untrained decoder-only model (d=64, 4 heads, 2 layers; the weights do not change the cost)
generates 64, 256 and 512 tokens greedily from an 8-token prompt, with and without the cache, in
interleaved rounds. Prints tokens/s for each and the speed-up, and checks the tokens are identical.
Goals: >= 6x at 256 tokens and >= 10x at 512.

    .venv/bin/python benchmarks/kv_cache.py
"""

from __future__ import annotations

import statistics
import time

import torch

from transformer_course.generation import generate
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

ROUNDS = 3


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = DecoderOnlyLM(DecoderOnlyConfig(vocab_size=32, d_model=64, num_heads=4, d_ff=256, num_layers=2,
                                            max_len=600)).eval()
    prompt = torch.randint(32, (1, 8), generator=torch.Generator().manual_seed(1))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {ROUNDS} interleaved rounds")
    print(f"{'new tokens':>10} {'cache tok/s':>12} {'no cache tok/s':>15} {'speed-up':>9} {'same tokens':>12}")
    for n in (64, 256, 512):
        seconds = {True: [], False: []}
        outputs = {}
        for _ in range(ROUNDS):
            for use_cache in (True, False):
                start = time.perf_counter()
                outputs[use_cache] = generate(model, prompt, n, use_cache=use_cache)
                seconds[use_cache].append(time.perf_counter() - start)
        cached, uncached = statistics.median(seconds[True]), statistics.median(seconds[False])
        ratio = statistics.median(u / c for c, u in zip(seconds[True], seconds[False], strict=True))
        same = torch.equal(outputs[True], outputs[False])
        print(f"{n:10d} {n / cached:12.0f} {n / uncached:15.0f} {ratio:8.1f}x {str(same):>12}")


if __name__ == "__main__":
    main()
