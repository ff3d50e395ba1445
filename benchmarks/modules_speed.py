"""The package's modules against PyTorch's built-ins doing the same work, measured side by side.

- ``MultiHeadAttention`` vs ``nn.MultiheadAttention(batch_first=True)`` (same weights), forward and
  forward+backward, with weights requested (both materialise them) and without (the package then uses
  the fused ``F.scaled_dot_product_attention``; PyTorch's module with ``need_weights=False`` too).
- ``EncoderBlock`` / ``DecoderBlock`` vs ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``.
- Achieved GFLOP/s of the package's fused attention against a large matmul on this machine (the
  practical ceiling), and the peak memory of one forward pass as n grows, without weights (linear: no
  n x n matrix is kept) and with them (quadratic), from the profiler's allocation record.

Ratios are package / PyTorch, the median of interleaved rounds (target <= 1.10).

    .venv/bin/python benchmarks/modules_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys

import torch
from torch import nn
from torch.utils import benchmark

from transformer_course.blocks import DecoderBlock, EncoderBlock
from transformer_course.masking import causal_mask
from transformer_course.multihead import MultiHeadAttention

D, H, ROUNDS = 256, 4, 5


def ratio(ours, theirs, min_run_time=0.2):
    """Median over interleaved rounds of (our time, their time, our/their ratio)."""
    timers = [benchmark.Timer("f()", globals={"f": f}) for f in (ours, theirs)]
    rounds = [[t.blocked_autorange(min_run_time=min_run_time).median for t in timers] for _ in range(ROUNDS)]
    return (statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds),
            statistics.median(r[0] / r[1] for r in rounds))


def forward(module, *args, **kwargs):
    @torch.no_grad()
    def run():
        module(*args, **kwargs)
    return run


def forward_backward(module, *args, **kwargs):
    def run():
        out = module(*args, **kwargs)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    return run


def attention_table():
    print(f"\nMultiHeadAttention vs nn.MultiheadAttention (d={D}, h={H}, B=1, causal mask)")
    print(f"{'n':>6} {'pass':>9} {'weights':>8} {'package':>10} {'PyTorch':>10} {'ratio':>7}")
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D, H, batch_first=True)
    ours = MultiHeadAttention.from_pytorch(theirs)
    for n in (128, 512, 1024, 2048, 4096):
        x = torch.randn(1, n, D, requires_grad=True)
        mask = causal_mask(n)
        for weights in (True, False):
            if weights and n > 2048:
                continue  # the n x n weights of every head: 256 MB at n = 4096, not a sensible workload
            for name, make in (("forward", forward), ("fwd+bwd", forward_backward)):
                t_a, t_b, r = ratio(make(ours, x, mask=mask, need_weights=weights),
                                    make(theirs, x, x, x, attn_mask=~mask, need_weights=weights,
                                         average_attn_weights=False))
                print(f"{n:6d} {name:>9} {str(weights):>8} {t_a * 1e3:8.2f}ms {t_b * 1e3:8.2f}ms {r:6.2f}x")


def blocks_table():
    print(f"\nBlocks vs PyTorch's layers (d={D}, h={H}, d_ff={4 * D}, B=4, n=256, forward+backward)")
    print(f"{'block':>24} {'package':>10} {'PyTorch':>10} {'ratio':>7}")
    torch.manual_seed(0)
    x, memory = torch.randn(4, 256, D, requires_grad=True), torch.randn(4, 256, D)
    mask = causal_mask(256)
    for norm_first in (False, True):
        layer = nn.TransformerEncoderLayer(D, H, 4 * D, 0.0, batch_first=True, norm_first=norm_first)
        t_a, t_b, r = ratio(forward_backward(EncoderBlock.from_pytorch(layer), x, mask),
                            forward_backward(layer, x, src_mask=~mask))
        label = ("pre" if norm_first else "post") + "-norm"
        print(f"{'encoder, ' + label:>24} {t_a * 1e3:8.2f}ms {t_b * 1e3:8.2f}ms {r:6.2f}x")
        layer = nn.TransformerDecoderLayer(D, H, 4 * D, 0.0, batch_first=True, norm_first=norm_first)
        t_a, t_b, r = ratio(forward_backward(DecoderBlock.from_pytorch(layer), x, memory, mask),
                            forward_backward(layer, x, memory, tgt_mask=~mask))
        print(f"{'decoder, ' + label:>24} {t_a * 1e3:8.2f}ms {t_b * 1e3:8.2f}ms {r:6.2f}x")


MEMORY_PROBE = """
import torch
from transformer_course.multihead import MultiHeadAttention
from transformer_course.masking import causal_mask
torch.manual_seed(0)
m = MultiHeadAttention({d}, {h}).eval()
x = torch.randn(1, {n}, {d})
mask = causal_mask({n})
with torch.no_grad(), torch.profiler.profile(profile_memory=True) as prof:
    m(x, mask=mask, need_weights={weights})
# Peak of the running total of every allocation and free made during the forward pass, in time order.
total = peak = 0
for event in sorted(prof.events(), key=lambda e: e.time_range.start):
    total += event.self_cpu_memory_usage
    peak = max(peak, total)
print(peak)
"""


def peak_bytes(n: int, weights: bool) -> int:
    code = MEMORY_PROBE.format(d=D, h=H, n=n, weights=weights)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(result.stdout.split()[-1])


def ceiling_and_memory_table():
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    matmul = benchmark.Timer("a @ b", globals={"a": a, "b": b}).blocked_autorange(min_run_time=1).median
    ceiling = 2 * 2048**3 / matmul / 1e9
    print(f"\nMatmul ceiling (2048 x 2048 float32): {ceiling:.1f} GFLOP/s")
    print(f"{'n':>6} {'fused GFLOP/s':>14} {'of ceiling':>11} {'peak MB, fused':>15} {'peak MB, weights':>17}")
    torch.manual_seed(0)
    module = MultiHeadAttention(D, H).eval()
    for n in (256, 1024, 2048, 4096):
        x = torch.randn(1, n, D)
        with torch.no_grad():
            t = benchmark.Timer("m(x, need_weights=False)", globals={"m": module, "x": x}).blocked_autorange(
                min_run_time=0.5).median
        flops = 4 * 2 * n * D * D + 2 * 2 * n * n * D  # four projections, Q K^T and A V (no mask: full n x n)
        explicit = f"{peak_bytes(n, True) / 2**20:16.1f}" if n <= 2048 else f"{'-':>16}"
        print(f"{n:6d} {flops / t / 1e9:14.1f} {flops / t / 1e9 / ceiling:10.0%} "
              f"{peak_bytes(n, False) / 2**20:15.1f} {explicit}")


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    attention_table()
    blocks_table()
    ceiling_and_memory_table()


if __name__ == "__main__":
    main()
