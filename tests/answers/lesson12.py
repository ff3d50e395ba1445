"""Answers to lesson 12's exercises: known-wrong ones with the hint their check must give, and correct ones
written differently from the solution, which the check must accept."""

import heapq
import math

import torch
import torch.nn.functional as F

#: exercise id -> {wrong answer's name: the id of the mistake its rejection must name, or None: no name}
MISTAKES = {}

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


def smoothed_by_one_hot(logits, targets, epsilon, pad_id=0, log_p=lambda x: F.log_softmax(x, dim=-1)):
    V = logits.shape[-1]
    right = F.one_hot(targets, V).to(logits.dtype)
    pad = F.one_hot(torch.full_like(targets, pad_id), V).to(logits.dtype)
    q = (1 - epsilon) * right + epsilon / (V - 2) * (1 - right - pad)
    per_token = torch.einsum("bnv,bnv->bn", q, -log_p(logits))
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
    "logits used as log-probabilities": (lambda lg, t, e, pad_id=0: smoothed_by_one_hot(
        lg, t, e, pad_id, log_p=lambda x: x), "used as log-probabilities"),
    "log_softmax over the positions": (lambda lg, t, e, pad_id=0: smoothed_by_one_hot(
        lg, t, e, pad_id, log_p=lambda x: F.log_softmax(x, dim=1)), "wrong axis"),
    "softmax, not log_softmax": (lambda lg, t, e, pad_id=0: smoothed_by_one_hot(
        lg, t, e, pad_id, log_p=lambda x: x.softmax(-1)), "wrong result for"),
    "epsilon / |V| for the others": (lambda lg, t, e, pad_id=0: annotated(
        lg, t, e, pad_id, kl=False, size=lg.shape[-1] + 2), "divided among the wrong number"),
    "<pad> gets epsilon / (|V| - 2) too": (lambda lg, t, e, pad_id=0: smoothed_by_formula(lg, t, e, pad_id)
                                           - e / (lg.shape[-1] - 2) * lg.log_softmax(-1)[..., pad_id][t != pad_id]
                                           .mean(), "<pad> gets smoothing mass"),
    "padding rows scored, mean over the real targets": (lambda lg, t, e, pad_id=0: annotated(
        lg, t, e, pad_id, kl=False, row_mask=False), "positions whose target is <pad>"),
    "mean of each sentence's mean": (lambda lg, t, e, pad_id=0: torch.stack([
        smoothed_by_formula(lg[b : b + 1], t[b : b + 1], e, pad_id) for b in range(len(t))]).mean(),
        "mean of each sentence's mean"),
    "float32 for float64 logits": (lambda lg, t, e, pad_id=0: smoothed_by_formula(lg.float(), t, e, pad_id),
                                   "expected dtype torch.float64"),
}
MISTAKES["12.1"] = {
    "pad gets mass": "pad-gets-smoothing", "PyTorch's label_smoothing": "smoothing-over-all-classes",
    "padding rows scored": "pad-positions-scored", "mean over every position": "mean-over-all-positions",
    "summed": "loss-summed", "right token gets 1": "target-not-lowered",
    "KL divergence (the Annotated Transformer's code as it is)": "kl-not-cross-entropy",
    "pad_id ignored": "pad-id-ignored", "a float returned": None,
    "logits used as log-probabilities": "logits-not-log-probs",
    "log_softmax over the positions": "log-softmax-wrong-axis",
    "softmax, not log_softmax": None, "epsilon / |V| for the others": "smoothing-denominator",
    "<pad> gets epsilon / (|V| - 2) too": "pad-gets-smoothing",
    "padding rows scored, mean over the real targets": "pad-positions-scored",
    "mean of each sentence's mean": "mean-of-sentence-means", "float32 for float64 logits": None,
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
    "arguments swapped": (lambda s, d, w: noam_piecewise(s, w, d), "swapped"),
    "no d_model factor": (lambda s, d, w: min(s**-0.5, s * w**-1.5), "d_model^-0.5 is missing"),
    "d_model^0.5": (lambda s, d, w: math.sqrt(d) * min(s**-0.5, s * w**-1.5), "d_model^0.5"),
    "1 / d_model": (lambda s, d, w: min(s**-0.5, s * w**-1.5) / d, "the factor is 1 / d_model"),
    "x**-1/2 (precedence)": (lambda s, d, w: d**-1/2 * min(s**-1/2, s * w**-3/2), "binds tighter"),  # noqa: E226
    "warmup^-0.5": (lambda s, d, w: noam_of(s, d, w, w_power=-0.5), "warm-up line's exponent"),
    "step / warmup": (lambda s, d, w: d**-0.5 * min(s**-0.5, s / w), "warm-up line's exponent"),
    "max": (lambda s, d, w: noam_of(s, d, w, pick=max), "max instead of min"),
    "no warm-up": (lambda s, d, w: (d * s) ** -0.5, "there is no warm-up"),
    "no decay": (lambda s, d, w: s / (math.sqrt(d) * w**1.5), "never decays"),
    "1 / step": (lambda s, d, w: noam_of(s, d, w, decay=-1.0), "decays as 1 / step"),
    "a list returned": (lambda s, d, w: [noam_piecewise(s, d, w)], "expected a number"),
}
MISTAKES["12.2"] = {
    "counted from 0 (peak a step early)": "step-off-by-one-early", "peak a step late": "step-off-by-one-late",
    "arguments swapped": "arguments-swapped", "no d_model factor": "d-model-factor-missing",
    "d_model^0.5": "d-model-factor-inverted", "1 / d_model": "d-model-factor-1-over-d",
    "x**-1/2 (precedence)": "power-precedence", "warmup^-0.5": "warmup-exponent-wrong",
    "step / warmup": "warmup-exponent-wrong", "max": "max-not-min", "no warm-up": "no-warm-up", "no decay": "no-decay",
    "1 / step": "decays-as-1-over-step", "a list returned": None,
}
RIGHT_NOAM = {"piecewise": noam_piecewise, "torch, float64 tensor": noam_torch,
              "peak times a shape": lambda s, d, w: (d * w) ** -0.5 * min(s / w, (w / s) ** 0.5)}

# --- 12.3 beam_search(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha) ----------------------


def beam_with(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha, mistake=None):
    """A learner's beam search kept in dicts; ``mistake`` switches in one classic error."""
    def length(h):
        n = len(h["tokens"]) - 1
        if mistake == "length with bos":
            return n + 1
        return n - 1 if mistake == "eos not counted" and h["done"] else n

    def penalty(h):
        n = length(h)
        if mistake == "no penalty":
            return 1.0
        if mistake == "|Y|^alpha":
            return n**alpha
        if mistake == "5 + |Y| / 6":
            return (5 + n / 6) ** alpha
        return ((5 + n) / 6) ** alpha

    def value(h):
        if mistake == "probabilities":
            return math.exp(h["log_p"]) / penalty(h)
        if mistake == "probabilities added":
            return h["p_sum"] / penalty(h)
        if mistake == "log P times penalty":
            return h["log_p"] * penalty(h)
        return h["log_p"] / penalty(h)

    start = {"tokens": [bos_id], "log_p": 0.0, "p_sum": 0.0, "done": False}
    beam = [dict(start) for _ in range(beam_size)] if mistake == "beam_size copies of <bos>" else [start]
    finished = []  # "finished set aside" only
    steps = max_len + {"one step too few": -1, "one step too many": 1}.get(mistake, 0)
    for _ in range(steps):
        pool = []
        for h in beam:
            if h["done"] and mistake == "finished padded with <eos>":
                pool.append({**h, "tokens": h["tokens"] + [eos_id]})  # same log P, one more token
                continue
            if h["done"] and mistake != "extend finished":
                pool.append(h)
                continue
            log_p = next_log_probs(h["tokens"])
            if mistake == "greedy":
                tokens = [int(log_p.argmax())]
            elif mistake == "no pruning across hypotheses":
                tokens = log_p.topk(beam_size).indices.tolist()
            else:
                tokens = range(len(log_p))
            for v in tokens:
                if v == eos_id and mistake == "finished dropped":
                    continue
                added = 0.0 if v == eos_id and mistake == "<eos> not scored" else float(log_p[v])
                pool.append({"tokens": h["tokens"] + [v], "log_p": h["log_p"] + added,
                             "p_sum": h["p_sum"] + math.exp(log_p[v]),
                             "done": v == eos_id and mistake != "extend finished"})
        if mistake == "no pruning across hypotheses":
            beam = pool
        elif mistake == "finished set aside":
            pool.sort(key=value, reverse=True)
            finished += [h for h in pool[:beam_size] if h["done"]]
            beam = [h for h in pool if not h["done"]][:beam_size]
            if len(finished) >= beam_size:
                break
            continue
        else:
            pool.sort(key=(lambda h: h["log_p"]) if mistake == "penalty at the end only" else value,
                      reverse=mistake != "keeps the worst")
            beam = pool[:beam_size]
        if mistake == "stop at the first finished" and beam[0]["done"]:
            return beam[0]["tokens"][1:]
        if all(h["done"] for h in beam) or (mistake == "stop when one finishes" and any(h["done"] for h in beam)):
            break
    beam += finished
    if mistake == "finished first" and any(h["done"] for h in beam):
        beam = [h for h in beam if h["done"]]
    best = max(beam, key=(lambda h: h["log_p"]) if mistake == "raw final" else value)
    if mistake == "finished padded with <eos>" and eos_id in best["tokens"]:
        return best["tokens"][1 : best["tokens"].index(eos_id) + 1]
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


def beam_by_top_k(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha):
    """Each hypothesis proposes only its beam_size likeliest continuations (the others cannot make the beam: they
    have the same |Y| and a lower log P), then the beam keeps the beam_size best of all proposals by score."""
    def score(h):
        return h[1] / ((5 + len(h[0]) - 1) / 6) ** alpha

    beam = [([bos_id], 0.0)]
    for _ in range(max_len):
        if all(tokens[-1] == eos_id for tokens, _ in beam):
            break
        proposals = []
        for tokens, log_p in beam:
            if tokens[-1] == eos_id:
                proposals.append((tokens, log_p))
                continue
            values, indices = next_log_probs(tokens).double().topk(beam_size)
            proposals += [(tokens + [v], log_p + lp) for lp, v in zip(values.tolist(), indices.tolist(), strict=True)]
        beam = sorted(proposals, key=score)[-beam_size:]
    return beam[-1][0][1:]


def _wrong(mistake):
    return lambda *a: beam_with(*a, mistake=mistake)


#: name -> (the wrong answer, text its rejection must show); MISTAKES["12.3"] gives the mistake each must be named by.
WRONG_BEAM = {
    "no length penalty": (_wrong("no penalty"), "no length penalty"),
    "finished hypotheses extended": (_wrong("extend finished"), "finished hypotheses are extended"),
    "finished hypotheses set aside (as some libraries do)": (_wrong("finished set aside"), "set aside"),
    "finished hypotheses dropped": (_wrong("finished dropped"), "finished hypotheses are dropped"),
    "finished hypotheses padded with <eos>": (_wrong("finished padded with <eos>"), "|Y| grows"),  # = no penalty
    "probabilities multiplied": (_wrong("probabilities"), "probabilities multiplied"),
    "probabilities added": (_wrong("probabilities added"), "probabilities added"),
    "log P times the penalty": (_wrong("log P times penalty"), "multiplied by the length penalty"),
    "|Y|^alpha": (_wrong("|Y|^alpha"), "the length penalty is |Y|^alpha"),
    "(5 + |Y| / 6)^alpha": (_wrong("5 + |Y| / 6"), "(5 + |Y| / 6)^alpha"),
    "|Y| counts <bos>": (_wrong("length with bos"), "|Y| counts <bos>"),
    "|Y| without <eos>": (_wrong("eos not counted"), "leaves out the <eos>"),
    "<eos> not scored": (_wrong("<eos> not scored"), "log-probability is not added"),
    "greedy": (_wrong("greedy"), "only its best continuation"),
    "no pruning across hypotheses": (_wrong("no pruning across hypotheses"), "the beam grows"),
    "beam_size copies of <bos>": (_wrong("beam_size copies of <bos>"), "copies of [bos_id]"),  # = greedy
    "unnormalised final choice": (_wrong("raw final"), "final choice ignores"),
    "final choice among finished ones only": (_wrong("finished first"), "prefers finished"),
    "penalty at the end only": (_wrong("penalty at the end only"), "applied only at the end"),
    "stops at the first finished": (_wrong("stop at the first finished"), "best hypothesis is finished"),
    "stops when one finishes": (_wrong("stop when one finishes"), "one hypothesis is finished"),
    "one step too few": (_wrong("one step too few"), "one token too few"),
    "one step too many": (_wrong("one step too many"), "one token too many"),
    "keeps the worst candidates": (_wrong("keeps the worst"), "wrong result for"),
    "<bos> kept": (_wrong("with bos"), "starts with <bos>"),
    "<eos> dropped": (lambda *a: [t for t in beam_with(*a) if t != a[2]], "<eos> is left out"),
    "a string returned": (lambda *a: " ".join(map(str, beam_with(*a))), "expected a list of token ids"),
}
MISTAKES["12.3"] = {
    "no length penalty": "no-length-penalty", "finished hypotheses extended": "finished-extended",
    "finished hypotheses set aside (as some libraries do)": "finished-set-aside",
    "finished hypotheses dropped": "finished-dropped", "finished hypotheses padded with <eos>": "no-length-penalty",
    "probabilities multiplied": "probabilities-multiplied", "probabilities added": "probabilities-added",
    "log P times the penalty": "penalty-multiplies", "|Y|^alpha": "penalty-without-five",
    "(5 + |Y| / 6)^alpha": "penalty-parentheses", "|Y| counts <bos>": "length-counts-bos",
    "|Y| without <eos>": "length-without-eos", "<eos> not scored": "eos-not-scored", "greedy": "greedy-per-hypothesis",
    "no pruning across hypotheses": "no-pruning-across-hypotheses",
    "beam_size copies of <bos>": "greedy-per-hypothesis", "unnormalised final choice": "final-choice-unpenalised",
    "final choice among finished ones only": "final-choice-prefers-finished",
    "penalty at the end only": "penalty-only-at-end", "stops at the first finished": "stops-too-early",
    "stops when one finishes": "stops-when-one-finishes", "one step too few": "one-step-short",
    "one step too many": "one-step-long", "keeps the worst candidates": None, "<bos> kept": "bos-kept",
    "<eos> dropped": "eos-left-out", "a string returned": None,
}
RIGHT_BEAM = {"dicts": beam_with, "tensors, as generation.beam_search": beam_with_tensors, "heapq": beam_with_heap,
              "top-k of each hypothesis, then the best of all": beam_by_top_k}

EXERCISES = {"12.1": (WRONG_SMOOTHED, RIGHT_SMOOTHED), "12.2": (WRONG_NOAM, RIGHT_NOAM),
             "12.3": (WRONG_BEAM, RIGHT_BEAM)}
