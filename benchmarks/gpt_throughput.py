"""Training throughput of lesson 13's GPT: the package's ``DecoderOnlyLM`` against the same model built from
PyTorch's ``nn.TransformerEncoderLayer``, side by side in one run.

Both models have the same embedding, learned positions, tied head and final LayerNorm; their blocks are pre-norm,
GELU, no dropout, under a causal mask (``is_causal=True`` in both), with the same d, heads, d_ff and layers. A step
is the course's training step: forward, cross-entropy, zero_grad, backward, clipping to 1, AdamW (foreach). The
two models alternate in rounds, so that a change of the machine's load hits both; the median of the rounds is
reported, with the ratio.

    python benchmarks/gpt_throughput.py                       # lesson 13's checkpoint model: d 128, 4 layers, 128
    python benchmarks/gpt_throughput.py --layers 2 --block 64  # the model trained in the lesson

Measured 2026-11-26 (torch 2.13.0, 2 threads, the course's 2-core machine shared with a load average of about 7 and
the lesson's nbval run; --steps 8 --rounds 3, the checkpoint's model): DecoderOnlyLM 0.94 steps/s (rounds 0.94,
0.92, 1.18), nn.TransformerEncoderLayer 0.92 (0.97, 0.89, 0.92): course / PyTorch 1.02. Under that load the rounds
vary by 25%; rerun on an idle machine with more rounds before quoting a difference below that.

Measured 2026-11-27 on the same machine kind, idle (load under 0.2; torch 2.13.0, 2 threads, the defaults: 5 rounds
of 20 steps), median steps/s, course / PyTorch:

- the checkpoint's model (d 128, 4 layers, block 128, batch 16): 13.15 against 11.45, 1.15 (rounds 11.4-13.3 and
  11.4-12.2);
- the lesson's model (``--layers 2 --block 64``): 48.8 against 44.5, 1.10 (rounds 46.4-50.7 and 41.7-46.4).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM
from transformer_course.training import parameter_groups


class TorchGPT(nn.Module):
    """``DecoderOnlyLM``'s architecture with ``nn.TransformerEncoderLayer`` blocks: tokens ``(B, n)`` -> logits
    ``(B, n, |V|)``."""

    def __init__(self, c: DecoderOnlyConfig):
        super().__init__()
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.position_embedding = nn.Embedding(c.max_len, c.d_model)
        layer = nn.TransformerEncoderLayer(c.d_model, c.num_heads, c.d_ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, c.num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.token_embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(n, device=tokens.device))
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)  # (n, n), -inf above
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))


def steps_per_second(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Training steps per second of ``model`` over ``batches`` (after one warm-up step)."""
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.01), lr=1e-3, foreach=True)

    def step(inputs, targets):
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    model.train()
    step(*batches[0])
    start = time.perf_counter()
    for inputs, targets in batches:
        step(inputs, targets)
    return len(batches) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=81)
    parser.add_argument("--steps", type=int, default=20, help="steps per round and model")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    config = DecoderOnlyConfig(vocab_size=args.vocab, d_model=args.d_model, num_heads=args.heads,
                               d_ff=4 * args.d_model, num_layers=args.layers, max_len=args.block)
    torch.manual_seed(0)
    models = {"DecoderOnlyLM (course)": DecoderOnlyLM(config), "nn.TransformerEncoderLayer": TorchGPT(config)}
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    assert len(set(counts.values())) == 1, f"the two models differ in size: {counts}"
    data = torch.randint(args.vocab, (args.steps, args.batch_size, args.block + 1))
    batches = [(d[:, :-1], d[:, 1:]) for d in data]
    rates = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            rates[name].append(steps_per_second(model, batches))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; d {args.d_model}, {args.heads} heads, "
          f"{args.layers} layers, block {args.block}, batch {args.batch_size}, {counts[next(iter(counts))]:,} "
          f"parameters each; {args.rounds} rounds of {args.steps} steps")
    for name, r in rates.items():
        print(f"  {name:<28} {statistics.median(r):6.2f} steps/s (rounds: {', '.join(f'{x:.2f}' for x in r)})")
    course, torch_rate = (statistics.median(r) for r in rates.values())
    print(f"course / PyTorch: {course / torch_rate:.2f}")


if __name__ == "__main__":
    main()
