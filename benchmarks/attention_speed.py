"""Speed of the package's attention against PyTorch doing the same work, measured side by side.

The package's ``scaled_dot_product_attention`` returns the weights, so the like-for-like baseline is
PyTorch's explicit ``softmax(Q K^T / sqrt(d_k) + mask) V`` that also materialises them. The fused
``F.scaled_dot_product_attention`` (which never forms the weights) is shown for reference.

    .venv/bin/python benchmarks/attention_speed.py

Prints, per workload, the median time of each and the ratio package / explicit PyTorch (target <= 1.10).
"""

from __future__ import annotations

import math
import statistics

import torch
import torch.nn.functional as F
from torch.utils import benchmark

from transformer_course import causal_mask, padding_mask, scaled_dot_product_attention

ROUNDS = 7


def explicit(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def workloads():
    g = torch.Generator().manual_seed(0)
    for B, h, n, d, mask_kind in [(8, 4, 128, 32, None), (8, 4, 128, 32, "causal"), (4, 8, 256, 64, "padding"),
                                  (1, 1, 1024, 64, "causal")]:
        q, k, v = (torch.randn(B, h, n, d, generator=g) for _ in range(3))
        if mask_kind == "causal":
            mask = causal_mask(n)
        elif mask_kind == "padding":
            mask = padding_mask(torch.randint(n // 2, n + 1, (B,), generator=g), n).unsqueeze(1)
        else:
            mask = None
        yield f"B={B} h={h} n={n} d={d} mask={mask_kind}", q, k, v, mask


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'workload':42} {'package':>10} {'explicit':>10} {'F.sdpa':>10} {'pkg/explicit':>13}")
    for label, q, k, v, mask in workloads():
        env = dict(q=q, k=k, v=v, mask=mask, ours=scaled_dot_product_attention, explicit=explicit, F=F)
        timers = {
            name: benchmark.Timer(stmt, globals=env)
            for name, stmt in [("package", "ours(q, k, v, mask)"), ("explicit", "explicit(q, k, v, mask)"),
                               ("sdpa", "F.scaled_dot_product_attention(q, k, v, attn_mask=mask)")]
        }
        # Interleave short rounds so that a noisy neighbour slows all three alike; quote medians.
        rounds = [{name: t.blocked_autorange(min_run_time=0.2).median for name, t in timers.items()}
                  for _ in range(ROUNDS)]
        med = {name: statistics.median(r[name] for r in rounds) for name in timers}
        ratio = statistics.median(r["package"] / r["explicit"] for r in rounds)
        print(f"{label:42} {med['package'] * 1e3:8.2f}ms {med['explicit'] * 1e3:8.2f}ms "
              f"{med['sdpa'] * 1e3:8.2f}ms {ratio:12.2f}x")

if __name__ == "__main__":
    main()
