"""Answers to lesson 09's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import torch
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2

# --- 09.1 teacher_forcing_loss(model, src, tgt) ---------------------------------------------------


def loss_by_mask(model, src, tgt):
    logits, labels = model(src, tgt[:, :-1]), tgt[:, 1:]
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")  # (B, n)
    real = labels != PAD
    return (per_token * real).sum() / real.sum()


def loss_by_log_softmax(model, src, tgt):
    logp = model(src, tgt[:, :-1]).log_softmax(-1)
    labels = tgt[:, 1:]
    picked = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return -picked[labels != PAD].mean()


def ce(logits, labels, **kw):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), **kw)


WRONG_LOSS = {
    "padding counted": (lambda m, s, t: ce(m(s, t[:, :-1]), t[:, 1:]), "padding is counted"),
    "not shifted": (lambda m, s, t: ce(m(s, t), t, ignore_index=PAD), "not shifted"),
    "shifted backwards": (lambda m, s, t: ce(m(s, t[:, 1:]), t[:, :-1], ignore_index=PAD), "wrong way"),
    "summed per sequence": (lambda m, s, t: ce(m(s, t[:, :-1]), t[:, 1:], ignore_index=PAD, reduction="sum") / len(t),
                            "summed per sequence"),
    "classes on the wrong axis": (lambda m, s, t: F.cross_entropy(m(s, t[:, :-1]), t[:, 1:], ignore_index=PAD),
                                  "your code raised"),
    "label smoothing added": (lambda m, s, t: ce(m(s, t[:, :-1]), t[:, 1:], ignore_index=PAD, label_smoothing=0.1),
                              "wrong result for"),
    "<bos> scored, <eos> not": (lambda m, s, t: ce(m(s, t[:, :-1]), t[:, :-1], ignore_index=PAD), "wrong result for"),
}
RIGHT_LOSS = {"mask and mean": loss_by_mask, "log_softmax and gather": loss_by_log_softmax,
              # the decoder is causal: its first n - 1 outputs on the whole target are its outputs on tgt[:, :-1]
              "whole target in, last output dropped": lambda m, s, t: ce(m(s, t)[:, :-1], t[:, 1:], ignore_index=PAD)}

# --- 09.2 greedy_translate(model, src, bos_id, eos_id, max_len) ----------------------------------


def greedy_rows(model, src, bos_id, eos_id, max_len):
    """One sentence at a time, stopping at its own <eos>."""
    results = []
    for b in range(len(src)):
        out = [bos_id]
        for _ in range(max_len):
            token = int(model(src[b : b + 1], torch.tensor([out]))[0, -1].argmax())
            if token == eos_id:
                break
            out.append(token)
        results.append(out[1:])
    return results


def greedy_batched_early_exit(model, src, bos_id, eos_id, max_len):
    out = torch.full((len(src), 1), bos_id)
    done = torch.zeros(len(src), dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, out)[:, -1].argmax(-1).masked_fill(done, eos_id)
        out = torch.cat([out, token[:, None]], 1)
        done |= token == eos_id
        if done.all():
            break
    return [[t for t in row[1:]][: (row[1:].index(eos_id) if eos_id in row[1:] else None)] for row in out.tolist()]


def no_stop(model, src, bos_id, eos_id, max_len):
    out = torch.full((len(src), 1), bos_id)
    for _ in range(max_len):
        out = torch.cat([out, model(src, out)[:, -1].argmax(-1, keepdim=True)], 1)
    return out[:, 1:].tolist()


def stop_at_first_eos_of_batch(model, src, bos_id, eos_id, max_len):
    out = torch.full((len(src), 1), bos_id)
    for _ in range(max_len):
        out = torch.cat([out, model(src, out)[:, -1].argmax(-1, keepdim=True)], 1)
        if (out[:, -1] == eos_id).any():
            break
    return [[t for t in row if t != eos_id] for row in out[:, 1:].tolist()]


def greedy_last_token_only(model, src, bos_id, eos_id, max_len):
    """Feeds the decoder only the last token written, as if it had no memory of the rest."""
    out = torch.full((len(src), 1), bos_id)
    for _ in range(max_len):
        out = torch.cat([out, model(src, out[:, -1:])[:, -1].argmax(-1, keepdim=True)], 1)
    return [row[: row.index(eos_id)] if eos_id in row else row for row in out[:, 1:].tolist()]


WRONG_GREEDY = {
    "never stops": (no_stop, "never stops at <eos>"),
    "stops with the first row": (stop_at_first_eos_of_batch, "stops too early"),
    "keeps eos": (lambda *a: [r + [EOS] if len(r) < a[4] else r for r in greedy_rows(*a)], "<eos> token is kept"),
    "keeps bos": (lambda *a: [[BOS] + r for r in greedy_rows(*a)], "starts with <bos>"),
    "tensor returned": (lambda *a: torch.zeros(2, 3), "expected a list of token-id lists"),
    "only the last token fed back": (greedy_last_token_only, "wrong result for"),
    "one token too few": (lambda m, s, b, e, n: greedy_rows(m, s, b, e, n - 1), "wrong result for"),
}
RIGHT_GREEDY = {"one sentence at a time": greedy_rows, "batched, early exit": greedy_batched_early_exit}

EXERCISES = {"09.1": (WRONG_LOSS, RIGHT_LOSS), "09.2": (WRONG_GREEDY, RIGHT_GREEDY)}
