"""Answers to lesson 13's exercises: known-wrong ones with the hint their check must give, and correct ones written
differently from the solution, which the check must accept.

``MISTAKES`` gives, for every wrong answer, the id of the mistake its rejection must name, or None where no known
mistake explains it (tests/test_lesson13_checks.py: its own name or none, never another's). The answers are written
here as a learner would write them, not with the checks' variants.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from tests.answers import Deferred

# --- 13.1 train_bpe(text, num_merges) -----------------------------------------------------------------------

WORDS = re.compile(r" ?\S+|\s")


def bpe(text, num_merges, *, words=True, count="every position", ties="vocabulary", recount=True, direction="left",
        extra=0, word_counts=True, stop=True):
    """BPE recounted after every merge; each keyword changes one thing, as a learner's mistake does."""
    if words == "split":  # str.split(): the spaces and newlines are dropped
        pieces = Counter(text.split())
    elif words == "any whitespace first":  # r"\s?\S+|\s": a newline joins the word after it, as a space does
        pieces = Counter(re.findall(r"\s?\S+|\s", text))
    else:
        pieces = Counter(WORDS.findall(text) if words else [text])
    splits = {w: list(w) for w in pieces}
    rank = {c: i for i, c in enumerate(sorted(set(text)))}
    merges, first_counts = [], None
    while len(merges) < num_merges + extra:
        counts = Counter()
        for w, n in pieces.items():
            t = splits[w]
            n = n if word_counts else 1  # word_counts=False: each distinct word counted once
            if count == "every position":
                for pair in zip(t, t[1:], strict=False):
                    counts[pair] += n
            else:  # a pair counted as merging would take it: "aaa" holds ("a", "a") once
                i = 0
                while i + 1 < len(t):
                    counts[(t[i], t[i + 1])] += n
                    i += 2 if i + 2 < len(t) and t[i] == t[i + 1] == t[i + 2] else 1
        if not recount:
            first_counts = first_counts or counts
            counts = Counter({p: c for p, c in first_counts.items() if p not in merges})
        if not counts and stop:
            break
        if ties == "vocabulary":
            best = min(counts, key=lambda p: (-counts[p], rank[p[0]], rank[p[1]]))
        elif ties == "max of strings":
            best = max(counts, key=lambda p: (counts[p], p))
        elif ties == "left token only":  # the right token forgotten: among equal left tokens, the first counted
            best = min(counts, key=lambda p: (-counts[p], rank[p[0]]))
        else:  # counts.most_common: the first counted wins
            best = counts.most_common(1)[0][0]
        merges.append(best)
        rank.setdefault(best[0] + best[1], len(rank))
        for w, t in splits.items():
            if direction == "right":
                t = t[::-1]
            out, i = [], 0
            pair = best if direction == "left" else best[::-1]
            while i < len(t):
                if i + 1 < len(t) and (t[i], t[i + 1]) == pair:
                    out.append(t[i] + t[i + 1] if direction == "left" else t[i + 1] + t[i])
                    i += 2
                else:
                    out.append(t[i])
                    i += 1
            splits[w] = out[::-1] if direction == "right" else out
    return merges


def bpe_by_string_replace(text, num_merges):
    """Each word kept as one string, its tokens joined by a separator, and a merge done with str.replace: the pair
    ("h", "e") also matches the end of a token "th" and the next token "e" ("th\0e" holds "h\0e")."""
    sep = "\0"
    words = Counter(WORDS.findall(text))
    splits = {w: sep.join(w) for w in words}
    rank = {c: i for i, c in enumerate(sorted(set(text)))}
    merges = []
    while len(merges) < num_merges:
        counts = Counter()
        for w, n in words.items():
            t = splits[w].split(sep)
            for pair in zip(t, t[1:], strict=False):
                counts[pair] += n
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], rank[p[0]], rank[p[1]]))
        merges.append(best)
        rank.setdefault(best[0] + best[1], len(rank))
        for w in splits:
            splits[w] = splits[w].replace(best[0] + sep + best[1], best[0] + best[1])
    return merges


def bpe_vocabulary_list(text, num_merges):
    """The vocabulary as a list (a token's number is list.index), the words as a list of token lists, and the
    counts of a merge's pairs recounted over the whole text."""
    vocabulary = sorted(set(text))
    words = [list(w) for w in re.findall(r" ?\S+|\s", text)]
    merges = []
    for _ in range(num_merges):
        counts = Counter(pair for w in words for pair in zip(w, w[1:], strict=False))
        if not counts:
            break
        top = max(counts.values())
        best = min((p for p, c in counts.items() if c == top),
                   key=lambda p: (vocabulary.index(p[0]), vocabulary.index(p[1])))
        merges.append(best)
        if best[0] + best[1] not in vocabulary:
            vocabulary.append(best[0] + best[1])
        for k, w in enumerate(words):
            out, i = [], 0
            while i < len(w):
                if w[i:i + 2] == list(best):
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[k] = out
    return merges


def bpe_incremental(text, num_merges):
    """Counts kept up to date word by word (as the package and tokenizers do), the best pair from a heap."""
    words = Counter(WORDS.findall(text))
    tokens = {w: list(w) for w in words}
    rank = {c: i for i, c in enumerate(sorted(set(text)))}
    counts, where = Counter(), {}
    for w, n in words.items():
        for pair in zip(tokens[w], tokens[w][1:], strict=False):
            counts[pair] += n
            where.setdefault(pair, set()).add(w)
    merges = []
    while len(merges) < num_merges:
        live = [(-c, rank[p[0]], rank[p[1]], p) for p, c in counts.items() if c > 0]
        if not live:
            break
        best = heapq.nsmallest(1, live)[0][3]
        merges.append(best)
        rank.setdefault("".join(best), len(rank))
        for w in where.pop(best, set()):
            old, new, i = tokens[w], [], 0
            while i < len(old):
                if old[i:i + 2] == list(best):
                    new.append("".join(best))
                    i += 2
                else:
                    new.append(old[i])
                    i += 1
            for pair in zip(old, old[1:], strict=False):
                counts[pair] -= words[w]
            for pair in zip(new, new[1:], strict=False):
                counts[pair] += words[w]
                where.setdefault(pair, set()).add(w)
            tokens[w] = new
        counts = Counter({p: c for p, c in counts.items() if c > 0})
    return merges


WRONG_BPE = {
    "across words": (lambda t, n: bpe(t, n, words=False), "merges cross word boundaries"),
    "aaa counted once": (lambda t, n: bpe(t, n, count="as merged"), 'a run like "aaa" is counted as one pair'),
    "ties: most_common": (lambda t, n: bpe(t, n, ties="first counted"), "ties are broken another way"),
    "ties: largest strings": (lambda t, n: bpe(t, n, ties="max of strings"), "wrong result for"),
    "counts not updated": (lambda t, n: bpe(t, n, recount=False), "the pair counts are not updated"),
    "merged from the right": (lambda t, n: bpe(t, n, direction="right"), "a pair is merged from the right"),
    "one merge too many": (lambda t, n: bpe(t, n, extra=1), "wrong result for"),
    "merges as joined strings": (lambda t, n: ["".join(p) for p in bpe(t, n)], "should be a pair of strings"),
    "each distinct word counted once": (lambda t, n: bpe(t, n, word_counts=False), "each distinct word is counted"),
    "words from str.split()": (lambda t, n: bpe(t, n, words="split"), "the text is cut into other words"),
    "a newline joins the next word": (lambda t, n: bpe(t, n, words="any whitespace first"),
                                      "the text is cut into other words"),
    "ties: left token only": (lambda t, n: bpe(t, n, ties="left token only"), "ties are broken another way"),
    "no stop when no pair is left": (lambda t, n: bpe(t, n, stop=False), "raised ValueError"),
    "merged by str.replace": (bpe_by_string_replace, "raised KeyError"),
}
RIGHT_BPE = {
    "incremental counts": bpe_incremental,
    "lists, not tuples": lambda t, n: [list(p) for p in bpe(t, n)],
    "the vocabulary as a list": bpe_vocabulary_list,
}
MISTAKES = {
    "13.1": {"across words": "merges-across-words", "aaa counted once": "overlapping-pair-counted-once",
             "ties: most_common": "ties-broken-differently", "ties: largest strings": None,
             "counts not updated": "counts-not-updated", "merged from the right": "merges-from-the-right",
             "one merge too many": None, "merges as joined strings": None,
             "each distinct word counted once": "word-counts-ignored",
             "words from str.split()": "words-cut-wrongly", "a newline joins the next word": "words-cut-wrongly",
             "ties: left token only": "ties-broken-differently",
             "no stop when no pair is left": None, "merged by str.replace": None},
}

# --- 13.2 train_loop(model, batches, optimizer, scheduler, max_norm) -----------------------------------------


def loop(model, batches, optimizer, scheduler, max_norm, *, zero=True, clip="before", schedule="after", loss="mean",
         train=True, positions="all", as_tensors=False):
    if train:
        model.train()
    losses = []
    for x, y in batches:
        if schedule == "before":
            scheduler.step()
        if zero:
            optimizer.zero_grad()
        if clip == "before backward":  # the gradients are zero here: nothing is clipped
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        logits = model(x)
        if positions == "last":  # the next token of the last position only, as in classification
            logits, y = logits[:, -1:], y[:, -1:]
        elif positions == "shifted again":  # y already holds the next tokens: shifting it again misaligns them
            logits, y = logits[:, :-1], y[:, 1:]
        if loss == "sum / B":  # averaged over the sequences, not over the B * n tokens
            value = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum") / len(x)
        else:
            value = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=loss)
        value.backward()
        if clip == "before":
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        elif clip == "by value":
            nn.utils.clip_grad_value_(model.parameters(), max_norm)
        optimizer.step()
        if clip == "after":
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if schedule == "after":
            scheduler.step()
        losses.append(value.detach() if as_tensors else value.item())
    if schedule == "once, after the loop":
        scheduler.step()
    return losses


def loop_transposed_logits(model, batches, optimizer, scheduler, max_norm):
    """F.cross_entropy on logits (B, |V|, n) and targets (B, n), as it takes a class dimension 1; model.zero_grad();
    the model put back in eval mode at the end."""
    model.train()
    losses = []
    for x, y in batches:
        model.zero_grad()
        loss = F.cross_entropy(model(x).transpose(1, 2), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    model.eval()
    return losses


def loop_by_hand(model, batches, optimizer, scheduler, max_norm):
    """The loss from log_softmax by hand, the clipping by hand, zero_grad after each step instead of before."""
    model.train()
    losses = []
    for x, y in batches:
        log_p = model(x).log_softmax(-1)  # (B, n, |V|)
        loss = -log_p.gather(-1, y.unsqueeze(-1)).mean()
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
        if norm > max_norm:
            for g in grads:
                g.mul_(max_norm / (norm + 1e-6))
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        scheduler.step()
        losses.append(float(loss))
    return losses


def loop_eval_inside(model, batches, optimizer, scheduler, max_norm):
    """Evaluates on the first batch before each step (eval mode, no gradients), then goes back to train mode."""
    losses = []
    for x, y in batches:
        model.eval()
        with torch.no_grad():
            model(x)
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return torch.tensor(losses)


def loop_left_in_eval(model, batches, optimizer, scheduler, max_norm):
    """Evaluates before each step and forgets to go back to train mode."""
    losses = []
    for x, y in batches:
        model.eval()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


WRONG_LOOP = {
    "no zero_grad": (lambda *a: loop(*a, zero=False), "the gradients are not zeroed"),
    "clipped after the step": (lambda *a: loop(*a, clip="after"), "the step uses unclipped gradients"),
    "never clipped": (lambda *a: loop(*a, clip="never"), "the step uses unclipped gradients"),
    "scheduler before the step": (lambda *a: loop(*a, schedule="before"), "scheduler.step() comes before"),
    "scheduler never stepped": (lambda *a: loop(*a, schedule="never"), "the scheduler is never stepped"),
    "loss summed": (lambda *a: loop(*a, loss="sum"), "the loss is summed"),
    "no model.train()": (lambda *a: loop(*a, train=False), "the model stays in eval mode"),
    "model.eval() each step": (loop_left_in_eval, "the model stays in eval mode"),
    "no losses returned": (lambda *a: loop(*a) and None, "the loop should return the list of the losses"),
    "losses kept as tensors": (lambda *a: loop(*a, as_tensors=True), "the loop should return the list of the losses"),
    "clipped before backward": (lambda *a: loop(*a, clip="before backward"), "the step uses unclipped gradients"),
    "clip_grad_value_": (lambda *a: loop(*a, clip="by value"), "each gradient entry is clipped"),
    "scheduler stepped once, after the loop": (lambda *a: loop(*a, schedule="once, after the loop"),
                                               "the scheduler is never stepped"),
    "loss summed, divided by B": (lambda *a: loop(*a, loss="sum / B"), "wrong result for"),
    "last position only": (lambda *a: loop(*a, positions="last"), "wrong result for"),
    "targets shifted again": (lambda *a: loop(*a, positions="shifted again"), "the targets are shifted again"),
}
RIGHT_LOOP = {"by hand": loop_by_hand, "evaluates inside, losses as a tensor": loop_eval_inside,
              "logits (B, |V|, n), model.zero_grad()": loop_transposed_logits}
MISTAKES["13.2"] = {"no zero_grad": "no-zero-grad", "clipped after the step": "clip-after-step",
                    "never clipped": "clip-after-step", "scheduler before the step": "scheduler-before-step",
                    "scheduler never stepped": "scheduler-not-stepped", "loss summed": "loss-summed",
                    "no model.train()": "eval-mode", "model.eval() each step": "eval-mode", "no losses returned": None,
                    "losses kept as tensors": None, "clipped before backward": "clip-after-step",
                    "clip_grad_value_": "clipped-by-value",
                    "scheduler stepped once, after the loop": "scheduler-not-stepped",
                    "loss summed, divided by B": None, "last position only": None,
                    "targets shifted again": "targets-shifted-twice"}

# --- 13.3 (GPT, load_checkpoint) -----------------------------------------------------------------------------


class FusedGPT(nn.Module):
    """nanoGPT's layout: one fused qkv projection (c_attn), attention written out with a mask, einsum heads."""

    def __init__(self, config, *, final_norm=True, tied=True, position_offset=0, causal="tril", activation=F.gelu,
                 scale="head", norm_first=True, heads="split", head_bias=False):
        super().__init__()
        d, self.h, self.final_norm, self.offset = config.d_model, config.num_heads, final_norm, position_offset
        self.causal, self.activation, self.scale, self.norm_first, self.heads = (causal, activation, scale, norm_first,
                                                                                 heads)
        self.wte, self.wpe = nn.Embedding(config.vocab_size, d), nn.Embedding(config.max_len, d)
        self.ln_1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(config.num_layers))
        self.ln_2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(config.num_layers))
        self.c_attn = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(config.num_layers))
        self.c_proj = nn.ModuleList(nn.Linear(d, d) for _ in range(config.num_layers))
        self.c_fc = nn.ModuleList(nn.Linear(d, config.d_ff) for _ in range(config.num_layers))
        self.c_out = nn.ModuleList(nn.Linear(config.d_ff, d) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=head_bias)  # head_bias: a bias the checkpoint lacks
        if tied:
            self.lm_head.weight = self.wte.weight

    def attend(self, q, k, v):
        """Causal multi-head attention of q, k, v (B, n, d), the heads by einsum (or as a ``heads`` mistake takes
        them) -> (B, n, d)."""
        B, n, d = q.shape
        if self.heads == "view(B, h, n, d / h)":  # the heads cut across positions: no transpose
            q, k, v = (t.reshape(B, self.h, n, -1).transpose(1, 2) for t in (q, k, v))
        else:
            q, k, v = (t.reshape(B, n, self.h, -1) for t in (q, k, v))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1] if self.scale == "head" else d)
        if self.causal == "tril":
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        elif self.causal == "tril(-1)":  # the diagonal masked too: position 0 sees nothing
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(-1), float("-inf"))
        out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)  # (B, n, h, d / h)
        if self.heads == "merged from (B, h, n, d / h)":  # the heads put back without the transpose
            return out.transpose(1, 2).contiguous().reshape(B, n, d)
        return out.reshape(B, n, d)

    def forward(self, ids):
        B, n = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(n) + self.offset)
        for i in range(len(self.c_attn)):
            if self.norm_first:
                x = x + self.c_proj[i](self.attend(*self.c_attn[i](self.ln_1[i](x)).chunk(3, dim=-1)))
                x = x + self.c_out[i](self.activation(self.c_fc[i](self.ln_2[i](x))))
            else:  # post-norm, as in the 2017 block
                x = self.ln_1[i](x + self.c_proj[i](self.attend(*self.c_attn[i](x).chunk(3, dim=-1))))
                x = self.ln_2[i](x + self.c_out[i](self.activation(self.c_fc[i](x))))
        return self.lm_head(self.ln_f(x) if self.final_norm else x)


def load_fused(model, state_dict, *, transpose=(), order="qkv"):
    """The checkpoint's W_q, W_k, W_v stacked into c_attn (in ``order``); ``transpose`` names weights loaded as W.T."""
    def get(name):
        t = state_dict[name]
        return t.T if any(name.endswith(f"{w}.weight") for w in transpose) else t

    with torch.no_grad():
        model.wte.weight.copy_(state_dict["token_embedding.weight"])
        model.wpe.weight.copy_(state_dict["position_embedding.embedding.weight"])
        model.ln_f.weight.copy_(state_dict["norm.weight"])
        model.ln_f.bias.copy_(state_dict["norm.bias"])
        for i in range(len(model.c_attn)):
            p = f"blocks.{i}."
            model.c_attn[i].weight.copy_(torch.cat([get(p + f"attention.W_{c}.weight") for c in order]))
            model.c_attn[i].bias.copy_(torch.cat([state_dict[p + f"attention.W_{c}.bias"] for c in order]))
            for mine, theirs in ((model.c_proj[i], "attention.W_o"), (model.c_fc[i], "ffn.W_1"),
                                 (model.c_out[i], "ffn.W_2"), (model.ln_1[i], "norm1"), (model.ln_2[i], "norm2")):
                mine.weight.copy_(get(p + theirs + ".weight"))
                mine.bias.copy_(state_dict[p + theirs + ".bias"])


class ModulesGPT(nn.Module):
    """The package's own parts, as a learner assembling exercises 04, 07 and 08 would: blocks of DecoderOnlyBlock."""

    def __init__(self, config):
        from transformer_course.blocks import DecoderOnlyBlock

        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Parameter(torch.zeros(config.max_len, config.d_model))
        self.blocks = nn.ModuleList(DecoderOnlyBlock(config.d_model, config.num_heads, config.d_ff, norm_first=True,
                                                     activation="gelu") for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.d_model)

    def forward(self, ids):
        from transformer_course.masking import causal_mask

        n = ids.shape[1]
        x = self.token_embedding(ids) + self.positions[:n]
        for block in self.blocks:
            x = block(x, causal_mask(n))
        return self.norm(x) @ self.token_embedding.weight.T


def load_modules(model, state_dict):
    theirs = {k: v for k, v in state_dict.items() if k != "head.weight"}
    theirs["positions"] = theirs.pop("position_embedding.embedding.weight")
    model.load_state_dict(theirs)


def gpt_with(**options):
    return lambda config: FusedGPT(config, **options)


class TorchBlocksGPT(nn.Module):
    """Blocks of torch's nn.MultiheadAttention (its in_proj holds W_q, W_k, W_v stacked) and an nn.Sequential FFN."""

    def __init__(self, config, *, batch_first=True):
        super().__init__()
        d, L = config.d_model, config.num_layers
        self.tok, self.pos = nn.Embedding(config.vocab_size, d), nn.Embedding(config.max_len, d)
        self.attn = nn.ModuleList(nn.MultiheadAttention(d, config.num_heads, batch_first=batch_first)
                                  for _ in range(L))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(d, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, d))
                                 for _ in range(L))
        self.ln1, self.ln2 = (nn.ModuleList(nn.LayerNorm(d) for _ in range(L)) for _ in range(2))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        n = ids.shape[1]
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # True: may NOT attend (torch's convention)
        x = self.tok(ids) + self.pos(torch.arange(n))
        for attn, ffn, ln1, ln2 in zip(self.attn, self.ffn, self.ln1, self.ln2, strict=True):
            a = ln1(x)
            x = x + attn(a, a, a, attn_mask=future, need_weights=False)[0]
            x = x + ffn(ln2(x))
        return self.ln_f(x) @ self.tok.weight.T


def load_torch_blocks(model, state_dict):
    with torch.no_grad():
        model.tok.weight.copy_(state_dict["token_embedding.weight"])
        model.pos.weight.copy_(state_dict["position_embedding.embedding.weight"])
        model.ln_f.weight.copy_(state_dict["norm.weight"])
        model.ln_f.bias.copy_(state_dict["norm.bias"])
        for i, attn in enumerate(model.attn):
            p = f"blocks.{i}."
            attn.in_proj_weight.copy_(torch.cat([state_dict[p + f"attention.W_{c}.weight"] for c in "qkv"]))
            attn.in_proj_bias.copy_(torch.cat([state_dict[p + f"attention.W_{c}.bias"] for c in "qkv"]))
            attn.out_proj.weight.copy_(state_dict[p + "attention.W_o.weight"])
            attn.out_proj.bias.copy_(state_dict[p + "attention.W_o.bias"])
            for mine, theirs in ((model.ffn[i][0], "ffn.W_1"), (model.ffn[i][2], "ffn.W_2"),
                                 (model.ln1[i], "norm1"), (model.ln2[i], "norm2")):
                mine.weight.copy_(state_dict[p + theirs + ".weight"])
                mine.bias.copy_(state_dict[p + theirs + ".bias"])


WRONG_GPT = {
    "W_q transposed": ((FusedGPT, lambda m, s: load_fused(m, s, transpose=("W_q",))), "a weight matrix is transposed"),
    "every weight transposed (GPT-2's Conv1D habit)": (
        (FusedGPT, lambda m, s: load_fused(m, s, transpose=("W_q", "W_k", "W_v", "W_o"))),
        "a weight matrix is transposed"),
    "queries and keys swapped": ((FusedGPT, lambda m, s: load_fused(m, s, order="kqv")), "are mixed up"),
    "no final norm": ((gpt_with(final_norm=False), load_fused), "the final LayerNorm is missing"),
    "head not tied": ((gpt_with(tied=False), load_fused), "the output head is not tied"),
    "positions from 1": ((gpt_with(position_offset=1), load_fused), "the positions are off by one"),
    "the class, not the pair": (FusedGPT, "expected the pair (GPT, load_checkpoint)"),
    "no causal mask": ((gpt_with(causal=None), load_fused), "the attention is not causal"),
    "the diagonal masked too": ((gpt_with(causal="tril(-1)"), load_fused), "got NaN"),
    "scores scaled by sqrt(d_model)": ((gpt_with(scale="model"), load_fused), "divided by sqrt(d_model)"),
    "heads by view(B, h, n, d / h)": ((gpt_with(heads="view(B, h, n, d / h)"), load_fused), "wrong result for"),
    "heads merged without the transpose": ((gpt_with(heads="merged from (B, h, n, d / h)"), load_fused),
                                           "wrong result for"),
    "ReLU": ((gpt_with(activation=F.relu), load_fused), "not the exact GELU"),
    "GELU's tanh approximation (GPT-2's gelu_new)": (
        (gpt_with(activation=lambda x: F.gelu(x, approximate="tanh")), load_fused), "not the exact GELU"),
    "post-norm blocks": ((gpt_with(norm_first=False), load_fused), "the blocks are post-norm"),
    "the head with a bias": ((gpt_with(head_bias=True), load_fused), "the output head has a bias"),
    "nn.MultiheadAttention, batch_first left False": (
        (lambda config: TorchBlocksGPT(config, batch_first=False), load_torch_blocks), "raised RuntimeError"),
}
RIGHT_GPT = {"fused qkv, attention by hand": (FusedGPT, load_fused), "the package's blocks": (ModulesGPT, load_modules),
             "torch's nn.MultiheadAttention": (TorchBlocksGPT, load_torch_blocks)}
MISTAKES["13.3"] = {"W_q transposed": "transposed-weight",
                    "every weight transposed (GPT-2's Conv1D habit)": "transposed-weight",
                    "queries and keys swapped": "qkv-swapped", "no final norm": "final-norm-missing",
                    "head not tied": "head-not-tied", "positions from 1": "positions-off-by-one",
                    "the class, not the pair": None, "no causal mask": "no-causal-mask",
                    "the diagonal masked too": None,
                    "scores scaled by sqrt(d_model)": "scores-scaled-by-d-model", "heads by view(B, h, n, d / h)": None,
                    "heads merged without the transpose": None, "ReLU": "not-exact-gelu",
                    "GELU's tanh approximation (GPT-2's gelu_new)": "not-exact-gelu",
                    "post-norm blocks": "post-norm-blocks",
                    "the head with a bias": "head-has-bias", "nn.MultiheadAttention, batch_first left False": None}

EXERCISES = {"13.1": (WRONG_BPE, RIGHT_BPE), "13.2": (WRONG_LOOP, RIGHT_LOOP), "13.3": (WRONG_GPT, RIGHT_GPT)}

# --- 13.4 my_model: a trained model of Shakespeare's characters ----------------------------------------------


@functools.cache
def _train_ids() -> torch.Tensor:
    from transformer_course import data
    from transformer_course.checks import shakespeare_model

    return shakespeare_model.encode(data.shakespeare("train"))


class NGram(nn.Module):
    """A count model, not a GPT: the next character from the last k - 1, by interpolated absolute discounting over
    orders 1 .. k (Ney et al., 1994). It predicts well (a trigram model reaches about 2.9 bits/char, a 4-gram 2.5, a
    transformer trained for 40 s about 3.4), but reads no further back than k - 1 characters, which the check
    measures."""

    def __init__(self, k: int, discount: float = 0.75):
        super().__init__()
        ids, self.k, self.discount = _train_ids(), k, discount
        self.V = V = int(ids.max()) + 1
        for order in range(1, k + 1):
            code = torch.zeros(len(ids) - order + 1, dtype=torch.long)
            for j in range(order):
                code = code * V + ids[j: len(ids) - order + 1 + j]
            self.register_buffer(f"counts{order}", torch.bincount(code, minlength=V**order).reshape(-1, V).float())

    def forward(self, x):
        B, n = x.shape
        unigram = self.counts1[0]
        p = ((unigram + 1) / (unigram.sum() + self.V)).expand(B, n, self.V)
        for order in range(2, self.k + 1):
            context = torch.zeros(B, n, dtype=torch.long)
            for j in range(order - 1):
                context = context * self.V + torch.roll(x, order - 2 - j, dims=1)
            c = getattr(self, f"counts{order}")[context]  # (B, n, V)
            total, kinds = c.sum(-1, keepdim=True).clamp_min(1), (c > 0).sum(-1, keepdim=True)
            q = torch.where(c.sum(-1, keepdim=True) > 0,
                            (c - self.discount).clamp_min(0) / total + self.discount * kinds / total * p, p)
            has_context = (torch.arange(n) >= order - 2)[None, :, None]  # a window's first characters have less
            p = torch.where(has_context, q, p)
        return p.log()


def untrained_gpt() -> nn.Module:
    from transformer_course.checks import shakespeare_model
    from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

    torch.manual_seed(0)
    config = DecoderOnlyConfig(len(shakespeare_model.vocabulary()), d_model=32, num_heads=2, d_ff=64, num_layers=1,
                               max_len=128)
    return DecoderOnlyLM(config).eval()


class LastPositionOnly(nn.Module):
    """Returns the logits of the last position only, (B, |V|)."""

    def __init__(self):
        super().__init__()
        self.inner = NGram(2)

    def forward(self, ids):
        return self.inner(ids)[:, -1]


def diverged_gpt() -> nn.Module:
    """A GPT whose training diverged: a NaN loss stepped into its weights."""
    model = untrained_gpt()
    with torch.no_grad():
        model.blocks[0].ffn.W_1.weight[0, 0] = float("nan")
    return model


def course_checkpoint() -> nn.Module:
    from transformer_course import pretrained

    return pretrained.shakespeare_gpt()


class AsksTheCheckpoint(nn.Module):
    def __init__(self):
        super().__init__()
        self.unused = nn.Linear(3, 3)

    def forward(self, ids):
        from transformer_course import pretrained

        return pretrained.shakespeare_gpt()(ids)


def _train_for_13_4(model: nn.Module, steps: int, seed: int) -> nn.Module:
    """``steps`` steps of 8 random windows of 128 training characters, AdamW at 3e-3, 50 warm-up steps then a cosine
    to 10%, gradients clipped to 1: a hand-written loop, as a learner writes it."""
    ids = _train_ids()
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: min(1.0, (i + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * i / steps))))
    model.train()
    for _ in range(steps):
        starts = torch.randint(len(ids) - 129, (8,), generator=g).tolist()
        batch = torch.stack([ids[s: s + 129] for s in starts])
        optimizer.zero_grad()
        logits = model(batch[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    return model.eval()


def _rotary_gpt() -> nn.Module:
    from transformer_course.checks import shakespeare_model
    from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

    return DecoderOnlyLM(DecoderOnlyConfig(len(shakespeare_model.vocabulary()), d_model=64, num_heads=4, d_ff=256,
                                           num_layers=2, max_len=128, dropout=0.0, positional="rotary"))


def train_package_gpt_with_rotary_positions() -> nn.Module:
    """The package's DecoderOnlyLM with rotary positions, which form position-relative heads sooner: 400 steps."""
    torch.manual_seed(2)
    return _train_for_13_4(_rotary_gpt(), 400, seed=2)


def package_gpt_with_rotary_positions() -> nn.Module:
    """:func:`train_package_gpt_with_rotary_positions`'s model, from its stored weights (tests/stored_models.py)."""
    from tests.stored_models import stored

    return stored("gpt_rotary", _rotary_gpt())


READS_NO_FURTHER = "the predictions depend only on the last few characters"
WRONG_OWN = {
    "nothing handed in": (None, "not implemented yet"),
    "untrained": (Deferred(untrained_gpt, slow=False), "the held-out loss is too high"),
    "training diverged": (Deferred(diverged_gpt, slow=False), "the training diverged"),
    "last position only": (Deferred(LastPositionOnly, slow=False), "must return logits of shape"),
    "the course checkpoint": (Deferred(course_checkpoint, slow=False), "the course's pretrained checkpoint"),
    "asks the checkpoint": (Deferred(AsksTheCheckpoint, slow=False), "the course's pretrained checkpoint"),
    # Count models predict better than a GPT trained for a minute, and earn nothing: they read no context.
    "bigram counts": (Deferred(lambda: NGram(2), slow=False), READS_NO_FURTHER),
    "trigram counts": (Deferred(lambda: NGram(3), slow=False), READS_NO_FURTHER),
    "4-gram counts": (Deferred(lambda: NGram(4), slow=False), READS_NO_FURTHER),
}
# The other correct answer is the solution's recipe (its own GPT of 13.3, learned positions): nbval trains it
# (solutions/13) and tests/test_grading_release.py grades the model it trained (tests/stored_models.py keeps it), so
# it is not trained again here.
RIGHT_OWN = {"the package's GPT, rotary positions": Deferred(package_gpt_with_rotary_positions)}
SOLUTION_COUNTS = {"13.4": "solutions/13_gpt_on_real_text.ipynb, ex4-answer"}
MISTAKES["13.4"] = {"nothing handed in": None, "untrained": "too-high-loss", "training diverged": "training-diverged",
                    "last position only": None,
                    "the course checkpoint": "uses-course-checkpoint", "asks the checkpoint": "uses-course-checkpoint",
                    "bigram counts": "ignores-far-context", "trigram counts": "ignores-far-context",
                    "4-gram counts": "ignores-far-context"}
EXERCISES["13.4"] = (WRONG_OWN, RIGHT_OWN)
