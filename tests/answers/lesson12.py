"""Answers to lesson 12's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import heapq
import math

import torch
import torch.nn.functional as F

# --- 12.1 smoothed_loss(logits, targets, epsilon, pad_id=0) ------------------------------------------


def smoothed_by_formula(logits, targets, epsilon, pad_id=0):
    """(1 - eps) (-log p_y) + eps / (|V| - 2) * (sum of -log p_v over the tokens neither y nor <pad>)."""
    V = logits.shape[-1]
    nll = -logits.log_softmax(-1)  # (B, n, V)
    right = nll.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    others = nll.sum(-1) - right - nll[..., pad_id]
    per_token = (1 - epsilon) * right + epsilon / (V - 2) * others
    real = targets != pad_id
    return per_token.masked_select(real).mean()


def smoothed_by_one_hot(logits, targets, epsilon, pad_id=0):
    V = logits.shape[-1]
    right = F.one_hot(targets, V).to(logits.dtype)
    pad = F.one_hot(torch.full_like(targets, pad_id), V).to(logits.dtype)
    q = (1 - epsilon) * right + epsilon / (V - 2) * (1 - right - pad)
    per_token = torch.einsum("bnv,bnv->bn", q, -F.log_softmax(logits, dim=-1))
    weight = (targets != pad_id).to(logits.dtype)
    return (per_token * weight).sum() / weight.sum()


def annotated(logits, targets, epsilon, pad_id=0, kl=True, row_mask=True, size=None, norm="tokens"):
    """The Annotated Transformer's LabelSmoothing (KLDivLoss, summed) divided by the number of tokens; the
    keyword arguments switch its parts off."""
    x = logits.log_softmax(-1).reshape(-1, logits.shape[-1])
    target = targets.reshape(-1)
    true_dist = torch.full_like(x, epsilon / ((size or x.shape[1]) - 2))
    true_dist.scatter_(1, target.unsqueeze(1), 1 - epsilon)
    true_dist[:, pad_id] = 0
    if row_mask:
        true_dist[target == pad_id] = 0.0
    if kl:
        total = F.kl_div(x, true_dist, reduction="sum")
    else:
        total = -(true_dist * x).sum()
    return total / ((target != pad_id).sum() if norm == "tokens" else target.numel())


def spread_everywhere(logits, targets, epsilon, pad_id=0, with_pad=True):
    V = logits.shape[-1]
    q = torch.full_like(logits, epsilon / (V - 1))
    q.scatter_(-1, targets.unsqueeze(-1), 1 - epsilon)
    loss = -(q * logits.log_softmax(-1)).sum(-1)
    return loss[targets != pad_id].mean()


WRONG_SMOOTHED = {
    "pad gets mass": (spread_everywhere, "<pad> gets smoothing mass"),
    "PyTorch's label_smoothing": (
        lambda lg, t, e, pad_id=0: F.cross_entropy(lg.flatten(0, 1), t.flatten(), label_smoothing=e,
                                                   ignore_index=pad_id), "PyTorch's label_smoothing="),
    "padding rows scored": (lambda lg, t, e, pad_id=0: annotated(lg, t, e, pad_id, kl=False, row_mask=False,
                                                                 norm="all"), "positions whose target is <pad>"),
    "mean over every position": (lambda lg, t, e, pad_id=0: annotated(lg, t, e, pad_id, kl=False, norm="all"),
                                 "divides by all B x n positions"),
    "summed": (lambda lg, t, e, pad_id=0: smoothed_by_formula(lg, t, e, pad_id) * (t != pad_id).sum(),
               "the loss is summed"),
    "right token gets 1": (lambda lg, t, e, pad_id=0: smoothed_by_formula(lg, t, e, pad_id)
                           + e * (-lg.log_softmax(-1).gather(-1, t[..., None]).squeeze(-1))[t != pad_id].mean(),
                           "probability 1 on top"),
    "KL divergence (the Annotated Transformer's code as it is)": (annotated, "KL divergence"),
    "pad_id ignored": (lambda lg, t, e, pad_id=0: smoothed_by_formula(lg, t, e), "use the pad_id argument"),
    "a float returned": (lambda lg, t, e, pad_id=0: smoothed_by_formula(lg, t, e, pad_id).item(),
                         "expected a torch.Tensor"),
}
RIGHT_SMOOTHED = {"formula": smoothed_by_formula, "one-hot and einsum": smoothed_by_one_hot,
                  "the Annotated Transformer's, as cross-entropy": lambda lg, t, e, pad_id=0: annotated(
                      lg, t, e, pad_id, kl=False)}

# --- 12.2 noam(step, d_model, warmup_steps) ---------------------------------------------------------


def noam_piecewise(step, d_model, warmup_steps):
    if step <= warmup_steps:
        return step / warmup_steps**1.5 / math.sqrt(d_model)
    return 1 / math.sqrt(step * d_model)


def noam_torch(step, d_model, warmup_steps):
    s = torch.tensor(float(step), dtype=torch.float64)
    return torch.rsqrt(torch.tensor(float(d_model))) * torch.minimum(s.rsqrt(), s * warmup_steps**-1.5)


def noam_of(step, d_model, warmup_steps, shift=0, d_power=-0.5, w_power=-1.5, pick=min, decay=-0.5):
    s = step + shift
    return d_model**d_power * pick(s**decay, s * warmup_steps**w_power)


WRONG_NOAM = {
    "counted from 0 (peak a step early)": (lambda s, d, w: noam_of(s, d, w, shift=1), "peak comes a step early"),
    "peak a step late": (lambda s, d, w: noam_piecewise(s - 1, d, w) if s > 1 else 0.0, "peak comes a step late"),
    "no d_model factor": (lambda s, d, w: min(s**-0.5, s * w**-1.5), "d_model^-0.5 is missing"),
    "warmup^-0.5": (lambda s, d, w: noam_of(s, d, w, w_power=-0.5), "warmup_steps^-0.5"),
    "max": (lambda s, d, w: noam_of(s, d, w, pick=max), "max instead of min"),
    "1 / step": (lambda s, d, w: noam_of(s, d, w, decay=-1.0), "decays as 1 / step"),
    "d_model^0.5": (lambda s, d, w: math.sqrt(d) * min(s**-0.5, s * w**-1.5), "d_model^0.5"),
    "a list returned": (lambda s, d, w: [noam_piecewise(s, d, w)], "expected a number"),
}
RIGHT_NOAM = {"piecewise": noam_piecewise, "torch, float64 tensor": noam_torch,
              "peak times a shape": lambda s, d, w: (d * w) ** -0.5 * min(s / w, (w / s) ** 0.5)}

# --- 12.3 beam_search(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha) ----------------------


def beam_with(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha, mistake=None):
    """A learner's beam search kept in dicts; ``mistake`` switches in one classic error."""
    a = 0.0 if mistake == "no penalty" else alpha

    def length(h):
        n = len(h["tokens"]) - 1
        return n - 1 if mistake == "eos not counted" and h["done"] else n

    def value(h, a=a):
        if mistake == "probabilities":
            return math.exp(h["log_p"]) / ((5 + length(h)) / 6) ** a
        if mistake == "probabilities added":
            return h["p_sum"] / ((5 + length(h)) / 6) ** a
        return h["log_p"] / ((5 + length(h)) / 6) ** a

    beam = [{"tokens": [bos_id], "log_p": 0.0, "p_sum": 0.0, "done": False}]
    for _ in range(max_len):
        pool = []
        for h in beam:
            if h["done"] and mistake != "extend finished":
                pool.append(h)
                continue
            log_p = next_log_probs(h["tokens"])
            tokens = [int(log_p.argmax())] if mistake == "greedy" else range(len(log_p))
            for v in tokens:
                pool.append({"tokens": h["tokens"] + [v], "log_p": h["log_p"] + float(log_p[v]),
                             "p_sum": h["p_sum"] + math.exp(log_p[v]),
                             "done": v == eos_id and mistake != "extend finished"})
        pool.sort(key=(lambda h: h["log_p"]) if mistake == "penalty at the end only" else value, reverse=True)
        beam = pool[:beam_size]
        if mistake == "stop at the first finished" and beam[0]["done"]:
            return beam[0]["tokens"][1:]
        if all(h["done"] for h in beam):
            break
    best = max(beam, key=(lambda h: h["log_p"]) if mistake == "raw final" else value)
    return best["tokens"] if mistake == "with bos" else best["tokens"][1:]


def beam_with_tensors(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha):
    """As generation.beam_search, for one source: a (k, t) tensor of hypotheses, scores and lengths."""
    tokens = torch.tensor([[bos_id]])
    scores = torch.zeros(1, dtype=torch.float64)
    lengths = torch.zeros(1, dtype=torch.long)
    finished = torch.zeros(1, dtype=torch.bool)
    for step in range(1, max_len + 1):
        rows = [None if finished[i] else next_log_probs(tokens[i].tolist()).double() for i in range(len(tokens))]
        vocab = next(r for r in rows if r is not None).numel()
        only_eos = torch.full((vocab,), -math.inf, dtype=torch.float64)
        only_eos[eos_id] = 0.0
        log_p = torch.stack([only_eos if r is None else r for r in rows])  # (k, |V|)
        candidates = scores[:, None] + log_p
        new_lengths = torch.where(finished, lengths, step)[:, None].expand_as(candidates)
        ranking = candidates / ((5 + new_lengths) / 6) ** alpha
        best = ranking.flatten().topk(min(beam_size, int(torch.isfinite(ranking).sum()))).indices
        beam, token = best // vocab, best % vocab
        tokens = torch.cat([tokens[beam], token[:, None]], dim=1)
        scores, lengths = candidates.flatten()[best], new_lengths.flatten()[best]
        finished = finished[beam] | (token == eos_id)
        if finished.all():
            break
    choice = int((scores / ((5 + lengths) / 6) ** alpha).argmax())
    return tokens[choice, 1 : 1 + int(lengths[choice])]


def beam_with_heap(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha):
    """The beam as a list of (score, log P, tokens) kept with heapq.nlargest; no early stop."""
    def rank(log_p, tokens):
        return log_p / ((5 + len(tokens) - 1) / 6) ** alpha

    beam = [(0.0, 0.0, (bos_id,))]
    for _ in range(max_len):
        pool = []
        for _, log_p, tokens in beam:
            if tokens[-1] == eos_id:
                pool.append((rank(log_p, tokens), log_p, tokens))
                continue
            for v, lp in enumerate(next_log_probs(list(tokens)).tolist()):
                pool.append((rank(log_p + lp, tokens + (v,)), log_p + lp, tokens + (v,)))
        beam = heapq.nlargest(beam_size, pool)
    return list(max(beam)[2][1:])


WRONG_BEAM = {
    "no length penalty": (lambda *a: beam_with(*a, mistake="no penalty"), "no length penalty"),
    "finished hypotheses extended": (lambda *a: beam_with(*a, mistake="extend finished"),
                                     "finished hypotheses are extended"),
    "probabilities multiplied": (lambda *a: beam_with(*a, mistake="probabilities"), "probabilities multiplied"),
    "probabilities added": (lambda *a: beam_with(*a, mistake="probabilities added"), "probabilities added"),
    "greedy": (lambda *a: beam_with(*a, mistake="greedy"), "only its best continuation"),
    "unnormalised final choice": (lambda *a: beam_with(*a, mistake="raw final"), "final choice ignores"),
    "penalty at the end only": (lambda *a: beam_with(*a, mistake="penalty at the end only"),
                                "applied only at the end"),
    "|Y| without <eos>": (lambda *a: beam_with(*a, mistake="eos not counted"), "leaves out the <eos>"),
    "stops at the first finished": (lambda *a: beam_with(*a, mistake="stop at the first finished"),
                                    "stops as soon as"),
    "<bos> kept": (lambda *a: beam_with(*a, mistake="with bos"), "starts with <bos>"),
    "<eos> dropped": (lambda *a: [t for t in beam_with(*a) if t != a[2]], "<eos> is left out"),
    "a string returned": (lambda *a: " ".join(map(str, beam_with(*a))), "expected a list of token ids"),
}
RIGHT_BEAM = {"dicts": beam_with, "tensors, as generation.beam_search": beam_with_tensors, "heapq": beam_with_heap}

EXERCISES = {"12.1": (WRONG_SMOOTHED, RIGHT_SMOOTHED), "12.2": (WRONG_NOAM, RIGHT_NOAM),
             "12.3": (WRONG_BEAM, RIGHT_BEAM)}
