"""Checks for lesson 09, training a translator: the teacher-forcing loss and greedy decoding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.checks.core import (
    Case,
    Mistake,
    case_generator,
    case_seed,
    check_function,
    exercise,
)
from transformer_course.models import Seq2SeqConfig, Seq2SeqTransformer

PAD, BOS, EOS = 0, 1, 2

# --- 09.1 the teacher-forcing loss -------------------------------------------------------------------


def _loss_cases() -> list[Case]:
    g = case_generator(13)

    def case(label, lengths, n_src=6, vocab=9, seed=0):
        torch.manual_seed(case_seed(seed))
        model = Seq2SeqTransformer(Seq2SeqConfig(8, vocab, d_model=16, num_heads=2, d_ff=32, max_len=16)).eval()
        rows = [[BOS, *torch.randint(3, vocab, (n,), generator=g).tolist(), EOS] for n in lengths]
        width = max(len(r) for r in rows)
        tgt = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
        src = torch.randint(3, 8, (len(lengths), n_src), generator=g)
        return Case(label, {"model": model, "src": src, "tgt": tgt})

    return [case("a padded batch", [5, 2, 3]), case("one sequence, no padding", [4], seed=1),
            case("very unequal lengths", [9, 1], seed=2)]


def _loss(model, src, tgt):
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)


@exercise("09.1", title="The teacher-forcing loss", points=2)
def check_teacher_forcing_loss(answer) -> int:
    def ce(logits, labels, **kw):
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), **kw)

    with torch.no_grad():
        return check_function(
            answer,
            _loss,
            _loss_cases(),
            [
                Mistake("padding-in-loss",
                        "padding is counted in the loss: pass ignore_index=pad_id (0) so padded targets score nothing.",
                        lambda m, s, t: ce(m(s, t[:, :-1]), t[:, 1:])),
                Mistake("not-shifted",
                        "the target is not shifted: the decoder reads tgt[:, :-1] and must predict tgt[:, 1:].",
                        lambda m, s, t: ce(m(s, t), t, ignore_index=PAD)),
                Mistake("shift-reversed",
                        "the shift goes the wrong way: read tgt[:, :-1] (starting with <bos>), predict tgt[:, 1:].",
                        lambda m, s, t: ce(m(s, t[:, 1:]), t[:, :-1], ignore_index=PAD)),
                Mistake("summed-per-sequence",
                        "the loss is summed per sequence: average over the real (non-padding) target tokens.",
                        lambda m, s, t: ce(m(s, t[:, :-1]), t[:, 1:], ignore_index=PAD, reduction="sum") / len(t)),
            ],
            names=("loss",),
            rtol=1e-4,
            atol=1e-5,
        )


# --- 09.2 greedy decoding -----------------------------------------------------------------------------


class ScriptedTranslator(nn.Module):
    """A stand-in for a trained seq2seq model whose greedy output is known in advance.

    Its next token depends on the source and on the previous token it is fed, so decoding that feeds
    the wrong tokens goes wrong; a sentence whose source starts with token ``3 + i`` emits ``<eos>``
    after ``lengths[i]`` tokens (so it does not matter whether sentences are decoded alone or batched).
    ``forward(src, tgt)`` returns logits ``(B, n_dec, |V|)`` like :class:`Seq2SeqTransformer`.
    """

    vocab_size = 12

    def __init__(self, lengths: list[int]):
        super().__init__()
        self.lengths = torch.tensor(lengths)

    def next_tokens(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        steps = torch.arange(tgt.shape[1])  # position t predicts token t + 1 of the output
        word = (tgt * 5 + src[:, :1] + steps) % (self.vocab_size - 3) + 3
        return torch.where(steps[None, :] >= self.lengths[src[:, :1] - 3], EOS, word)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got {src.shape[0]} and {tgt.shape[0]}")
        return F.one_hot(self.next_tokens(src, tgt), self.vocab_size).float() * 10.0


def _greedy(model, src, bos_id, eos_id, max_len):
    out = torch.full((len(src), 1), bos_id)
    for _ in range(max_len):
        out = torch.cat([out, model(src, out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    result = []
    for row in out[:, 1:].tolist():
        result.append(row[: row.index(eos_id)] if eos_id in row else row)
    return result


def _greedy_cases() -> list[Case]:
    def case(label, lengths, max_len):
        src = torch.arange(len(lengths))[:, None] + torch.tensor([[3, 4, 5]])
        return Case(label, {"model": ScriptedTranslator(lengths), "src": src, "bos_id": BOS, "eos_id": EOS,
                            "max_len": max_len})

    return [case("rows end at different steps", [3, 5, 1], 8), case("one row stops at max_len", [6, 2], 4),
            case("one row", [4], 10)]


def _no_stop(model, src, bos_id, eos_id, max_len):
    out = torch.full((len(src), 1), bos_id)
    for _ in range(max_len):
        out = torch.cat([out, model(src, out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out[:, 1:].tolist()


def _stop_when_any(model, src, bos_id, eos_id, max_len):
    out = torch.full((len(src), 1), bos_id)
    for _ in range(max_len):
        out = torch.cat([out, model(src, out)[:, -1].argmax(-1, keepdim=True)], dim=1)
        if (out[:, -1] == eos_id).any():
            break
    return [row[: row.index(eos_id)] if eos_id in row else row for row in out[:, 1:].tolist()]


def _compare_lists(expected, got, case: Case | None = None) -> str | None:
    if not isinstance(got, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in got):
        return f"expected a list of token-id lists, one per sentence, got {type(got).__name__}"
    got = [[int(t) for t in row] for row in got]
    if len(got) != len(expected):
        return f"expected {len(expected)} sentences, got {len(got)}"
    for b, (e, g) in enumerate(zip(expected, got, strict=True)):
        if e != g:
            return f"sentence {b}: expected {e}, got {g}"
    return None


GREEDY_MISTAKES = [
    Mistake("never-stops", "decoding never stops at <eos>: end a sentence at its first <eos> (and leave <eos> "
            "out).", _no_stop),
    Mistake("stops-too-early", "decoding stops too early: a sentence ends at its own <eos>; keep going until "
            "every row has one or max_len tokens are made.", _stop_when_any),
    Mistake("eos-kept", "the <eos> token is kept: return the tokens before it.",
            lambda *a: [r + [EOS] if len(r) < a[4] else r for r in _greedy(*a)]),
    Mistake("bos-kept", "the output starts with <bos>: return only the generated tokens.",
            lambda *a: [[BOS] + r for r in _greedy(*a)]),
]


@exercise("09.2", title="Greedy decoding", points=3)
def check_greedy_decode(answer) -> int:
    with torch.no_grad():
        return check_function(answer, _greedy, _greedy_cases(), GREEDY_MISTAKES, differ=_compare_lists)
