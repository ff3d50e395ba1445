"""Where the time of one cached decoding step goes, by kind of PyTorch operator (lesson 10, section 10.8).

Lesson 10 times one cached step of its untrained long model (d = 64, h = 4, L = 2, max_len = 600) at n = 256
cached positions, two ways (the module path, ``model(token, cache=cache)``, and the fast step,
``generation.CachedDecoder``), and reports the time inside the matrix products and the operator calls. This
script keeps the full measurement that the lesson shortened: every operator's self time under ``torch.profiler``,
sorted into the matrix products and attention kernel, element-wise operations and norms, the argument checks of
the package's modules, views / copies / wrappers, and the time outside every operator (Python and the profiler).

    .venv/bin/python benchmarks/step_profile.py [--n-past 256] [--calls 50]

Prints microseconds per step for each group and each way, the operator calls per step, and the step's FLOPs at
the rate of a 256 x 256 x 256 matrix product. One thread, as in the lesson. The profiler adds a cost of its own
to every call, so its groups add up to more than the step's time without it: read the shares.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

from transformer_course import data, generation
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

GROUPS = {  # operator names by what they do; every other operator counts as "views, copies, wrappers"
    "matrix products, attention": {"aten::addmm", "aten::mm", "aten::bmm",
                                   "aten::_scaled_dot_product_flash_attention_for_cpu"},
    "element-wise, norms": {"aten::native_layer_norm", "aten::gelu", "aten::add", "aten::mul", "aten::_softmax"},
    "argument checks": {"aten::min", "aten::max", "aten::lt", "aten::ge", "aten::item", "aten::is_nonzero",
                        "aten::_local_scalar_dense"},
}
OTHER = "views, copies, wrappers"


@contextlib.contextmanager
def quiet_stderr():
    """Point file descriptor 2 at /dev/null: the profiler's C++ part logs two lines there."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def step_function(model, way: str, n_past: int, bos_id: int):
    """One cached step of ``model`` after ``n_past`` random tokens, as a function; each call adds a position."""
    prompt = torch.randint(model.config.vocab_size, (1, n_past), generator=torch.Generator().manual_seed(0))
    token = torch.tensor([[bos_id]])
    if way == "module path":
        cache = model.new_cache()
        with torch.no_grad():
            model(prompt, cache=cache)
        return torch.no_grad()(lambda: model(token, cache=cache))
    decoder = generation.CachedDecoder(model, batch_size=1)
    with torch.inference_mode():
        decoder(prompt)
    return torch.inference_mode()(lambda: decoder(token))


def best_seconds(fn, rounds: int) -> float:
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def profile_step(step, calls: int) -> tuple[dict[str, float], float]:
    """({group: microseconds per step}, operator calls per step), under the profiler."""
    for _ in range(5):
        step()  # warm-up
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        begin = time.perf_counter()
        for _ in range(calls):
            step()
        wall = (time.perf_counter() - begin) / calls
    groups = dict.fromkeys([*GROUPS, OTHER], 0.0)
    ops = prof.key_averages()
    for op in ops:
        group = next((g for g, names in GROUPS.items() if op.key in names), OTHER)
        groups[group] += op.self_cpu_time_total / calls
    groups["outside operators"] = max(1e6 * wall - sum(groups.values()), 0.0)
    return groups, sum(op.count for op in ops) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-past", type=int, default=256, help="cached positions before the step")
    parser.add_argument("--calls", type=int, default=50, help="profiled steps per way")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tok = data.CharTokenizer(data.SORT_CHARS)
    torch.manual_seed(0)
    config = DecoderOnlyConfig(len(tok), d_model=64, num_heads=4, d_ff=256, num_layers=2, max_len=600)
    model = DecoderOnlyLM(config)

    a, b = torch.randn(2, 256, 256).unbind(0)
    rate = 2 * 256**3 / best_seconds(lambda: torch.matmul(a, b), rounds=30)
    d, L, n_keys = config.d_model, config.num_layers, args.n_past + 1
    flops = 2 * (L * (4 * d * d + 2 * d * config.d_ff + 2 * n_keys * d) + d * config.vocab_size)
    print(f"torch {torch.__version__}, one thread; matrix product rate {rate / 1e9:.1f} GFLOP/s")
    print(f"one step at n = {n_keys}: {flops:,} FLOPs = {1e6 * flops / rate:.1f} microseconds at that rate\n")

    ways = ["module path", "fast step"]
    results = {}
    for way in ways:
        step = step_function(model, way, args.n_past, tok.bos_id)
        wall = 1e6 * best_seconds(lambda step=step: [step() for _ in range(20)], rounds=5) / 20
        groups, calls = profile_step(step_function(model, way, args.n_past, tok.bos_id), args.calls)
        results[way] = wall, groups, calls
    print(f"{'microseconds per step':<30}" + "".join(f"{w:>14}" for w in ways))
    print(f"{'measured (no profiler)':<30}" + "".join(f"{results[w][0]:>14.0f}" for w in ways))
    for group in results[ways[0]][1]:
        print(f"{'  ' + group:<30}" + "".join(f"{results[w][1][group]:>14.1f}" for w in ways))
    print(f"{'operator calls per step':<30}" + "".join(f"{results[w][2]:>14.0f}" for w in ways))


if __name__ == "__main__":
    main()
