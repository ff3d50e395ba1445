"""Checks for lesson 13, a GPT of Shakespeare: BPE from scratch (13.1), the training loop (13.2) and the learner's own
GPT loaded with the course's checkpoint (13.3). Exercise 13.4, graded by what a model achieves, is in
:mod:`.shakespeare_model`.

Every check runs all its cases before its verdict, and names a mistake only when that mistake's variant of the
reference reproduces the learner's results on every case (issue 34: no name is better than a wrong one).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course import bpe, data, pretrained
from transformer_course.checks.core import (
    Case,
    CheckFailed,
    Mistake,
    call_answer,
    case_generator,
    case_seed,
    compare,
    exercise,
    require_callable,
)


def _verdict(run: tuple[list, CheckFailed | None], same: Callable[[object, object], str | None],
             mistakes: Sequence[Mistake]) -> int:
    """The verdict on ``run`` (from :func:`_run_all`): the number of cases when the answer ran on every one and agreed,
    else CheckFailed: on the first case that differs, naming the mistake whose variant gives the learner's result on
    every case it ran on (the ones that agreed included), and no mistake when none does; else the learner's error."""
    results, error = run
    failing = [(case, expected, got) for case, expected, got in results if same(expected, got) is not None]
    if not failing:
        if error is not None:
            raise error
        return len(results)
    case, expected, got = failing[0]
    hint = None
    for mistake in mistakes:
        try:
            if all(same(mistake.wrong(*c.fresh_args()), g) is None for c, _, g in results):
                hint = mistake
                break
        except Exception:  # noqa: BLE001 - a variant that cannot run on a case names nothing
            continue
    raise CheckFailed(f"wrong result for {case.describe()}\n  {same(expected, got)}", mistake=hint)


def _run_all(answer, cases: Sequence[Case], reference: Callable,
             mistakes: Sequence[Mistake] = ()) -> tuple[list, CheckFailed | None]:
    """(case, expected, got) for each case the answer ran on, and the learner's error (a CheckFailed) that stopped it
    on a later case, if any; an error on the first case is raised at once."""
    results = []
    for case in cases:
        expected = reference(*case.fresh_args())
        try:
            got = call_answer(answer, case, mistakes)
        except CheckFailed as error:
            if not results:
                raise
            return results, error
        results.append((case, expected, got))
    return results, None


# --- 13.1 BPE from scratch ------------------------------------------------------------------------------------


#: How an answer cuts the text into words: the exercise's way (bpe.pretokenize), and mistaken ones (None: the text
#: is one word).
_WORDS = {"pretokenize": bpe.pretokenize, "split": str.split, "any whitespace first": re.compile(r"\s?\S+|\s").findall,
          None: lambda text: [text]}


def _slow_bpe(text: str, num_merges: int, *, words: str | None = "pretokenize", overlapping: bool = True,
              ties: str = "vocabulary", update: bool = True, from_right: bool = False,
              word_counts: bool = True) -> list[tuple[str, str]]:
    """BPE recounted from scratch after every merge: with every default, the merges of ``bpe.train_bpe``; with one
    argument changed, a classic mistake (merges across words, or words cut another way; "aaa" counted as one ("a",
    "a"); ties broken by the strings, by first occurrence or by the left token alone; counts never updated; merging
    from the right; each distinct word counted once)."""
    found_words = _WORDS[words](text)
    if not word_counts:
        found_words = list(dict.fromkeys(found_words))
    pieces = [list(w) for w in found_words]
    rank = {t: i for i, t in enumerate(sorted(set(text)))}

    def merge(tokens, pair):
        if not from_right:
            return bpe.merge_pair(tokens, pair)
        out, i = [], len(tokens) - 1
        while i >= 0:
            if i >= 1 and (tokens[i - 1], tokens[i]) == pair:
                out.append(tokens[i - 1] + tokens[i])
                i -= 2
            else:
                out.append(tokens[i])
                i -= 1
        return out[::-1]

    def counts() -> Counter:
        found: Counter = Counter()
        for tokens in pieces:
            if overlapping:
                found.update(pairwise(tokens))
            else:  # as merge_pair takes them: "a a a" holds one
                i = 0
                while i + 1 < len(tokens):
                    pair = (tokens[i], tokens[i + 1])
                    found[pair] += 1
                    i += 2 if i + 2 < len(tokens) and tokens[i + 2] == tokens[i + 1] == tokens[i] else 1
        return found

    stale = counts()
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges:
        found = counts() if update else Counter({p: n for p, n in stale.items() if p not in merges})
        if not found:
            break
        if ties == "vocabulary":
            best = min(found, key=lambda p: (-found[p], rank[p[0]], rank[p[1]]))
        elif ties == "strings":
            best = min(found, key=lambda p: (-found[p], p))
        elif ties == "left token":  # the right token forgotten: among equal left tokens, the first counted
            best = min(found, key=lambda p: (-found[p], rank[p[0]]))
        else:  # "first seen": Counter.most_common keeps the order in which pairs were first counted
            best = found.most_common(1)[0][0]
        merges.append(best)
        rank.setdefault(best[0] + best[1], len(rank))
        pieces = [merge(tokens, best) for tokens in pieces]
    return merges


_TIES_HINT = ("ties are broken another way: among pairs with the same count, take the one whose left token comes "
              "first in the vocabulary (characters in code-point order, then the merged tokens in the order they were "
              "made), then the one whose right token does.")
_WORDS_HINT = (r'the text is cut into other words: use re.findall(r" ?\S+|\s", text), so that a word keeps the one '
               "space before it (merges such as (' ', 't') need it) and every other whitespace character (a newline, "
               "the first of two spaces) is a word of its own.")

BPE_MISTAKES = [
    Mistake("merges-across-words",
            "merges cross word boundaries: cut the text into words first (bpe.pretokenize: a space and the "
            "non-space characters after it, or one other whitespace character), count and merge inside words only.",
            lambda t, n: _slow_bpe(t, n, words=None)),
    Mistake("words-cut-wrongly", _WORDS_HINT, lambda t, n: _slow_bpe(t, n, words="split")),
    Mistake("words-cut-wrongly", _WORDS_HINT, lambda t, n: _slow_bpe(t, n, words="any whitespace first")),
    Mistake("word-counts-ignored",
            "each distinct word is counted once: a word that occurs k times holds its pairs k times, so add each "
            "pair's count times the word's count (or count every word of the text, repeats included).",
            lambda t, n: _slow_bpe(t, n, word_counts=False)),
    Mistake("overlapping-pair-counted-once",
            'a run like "aaa" is counted as one pair ("a", "a"): count a pair at every position where it occurs, '
            "so \"aaa\" holds it twice (merging still goes left to right: \"aaa\" -> \"aa\", \"a\").",
            lambda t, n: _slow_bpe(t, n, overlapping=False)),
    *[Mistake("ties-broken-differently", _TIES_HINT, functools.partial(_slow_bpe, ties=ties))
      for ties in ("strings", "first seen", "left token")],
    Mistake("counts-not-updated",
            "the pair counts are not updated after a merge: count again (or update the counts of the words that "
            "held the pair), so that pairs with the new token can be merged in turn.",
            lambda t, n: _slow_bpe(t, n, update=False)),
    Mistake("merges-from-the-right",
            'a pair is merged from the right: go left to right, so "aaa" becomes "aa", "a" (not "a", "aa").',
            lambda t, n: _slow_bpe(t, n, from_right=True)),
]

#: Handwritten texts, each for one mistake: runs of one letter (overlapping pairs, merging direction), words
#: that end and start alike (boundaries), tied counts, merges that need merged tokens, and newlines (words cut
#: another way). The drawn cases add slices of Shakespeare.
BPE_TEXTS = [
    ("runs of one letter", "b ab aaaa b ab", 6),
    ("runs against pairs", "xxx xxx xxx bcbc bc", 3),
    ("a word's end and the next one's start", "ab ba ab ba abba ba", 4),
    ("tied counts", "zy xw yz wx zy xw dc cd", 5),
    ("merges of merged tokens", "low lower lowest newest widest", 10),
    ("more merges than pairs, and newlines", "to\nbe or\nnot", 50),
    ("no merges", "to be or not to be", 0),
]


def _bpe_cases() -> list[Case]:
    """The handwritten texts, then slices of the training plays: the public cases from even-numbered 1,500-character
    slices, the hidden ones (a cases seed) from odd-numbered ones, so the two never share a slice."""
    from transformer_course.checks import core

    cases = [Case(label, {"text": text, "num_merges": n}) for label, text, n in BPE_TEXTS]
    g = case_generator(131)
    plays = data.shakespeare("train")
    slices = len(plays) // 1500
    parity = 0 if core.CASES_SEED is None else 1
    for n_merges in (40, 25):
        k = 2 * int(torch.randint(slices // 2, (1,), generator=g)) + parity
        cases.append(Case(f"1,500 characters of Shakespeare from character {1500 * k:,}",
                          {"text": plays[1500 * k: 1500 * (k + 1)], "num_merges": n_merges}))
    return cases


def _merges_of(got) -> list[tuple[str, str]] | str:
    if not isinstance(got, (list, tuple)):
        return f"expected a list of merges (pairs of strings), got {type(got).__name__} {got!r:.60}"
    merges = []
    for i, pair in enumerate(got):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(type(t) is str for t in pair)):
            return f"merge {i} should be a pair of strings, like ('t', 'h'), got {pair!r:.40}"
        merges.append((pair[0], pair[1]))
    return merges


def _same_merges(expected, got) -> str | None:
    merges = _merges_of(got)
    if isinstance(merges, str):
        return merges
    for i, (e, m) in enumerate(zip(expected, merges, strict=False)):
        if e != m:
            return (f"merge {i} (from 0) is {m!r}, expected {e!r}; the merges before it agree"
                    f"{'' if i else ' (there are none)'}")
    if len(merges) != len(expected):
        return f"expected {len(expected)} merges, got {len(merges)}"
    return None


@exercise("13.1", title="BPE from scratch", points=2)
def check_bpe(answer) -> int:
    require_callable(answer)
    return _verdict(_run_all(answer, _bpe_cases(), bpe.train_bpe, BPE_MISTAKES), _same_merges, BPE_MISTAKES)


# --- 13.2 the training loop ---------------------------------------------------------------------------------

LOOP_STEPS = 6


def _reference_loop(model, batches, optimizer, scheduler, max_norm, *, zero_grad=True, clip="before", schedule="after",
                    reduction="mean", train_mode=True, shift_targets=False):
    """The loop of the exercise (every default); with one argument changed, a classic mistake (``clip="value"``:
    each gradient entry clipped to [-max_norm, max_norm]; ``shift_targets``: y shifted once more, as if it held the
    tokens of x)."""
    if train_mode:
        model.train()
    losses = []
    for x, y in batches:
        if scheduler is not None and schedule == "before":
            with warnings.catch_warnings():  # PyTorch warns of this very mistake: the learner's own code shows it
                warnings.simplefilter("ignore", UserWarning)
                scheduler.step()
        if zero_grad:
            optimizer.zero_grad()
        logits = model(x)  # (B, n, |V|)
        if shift_targets:
            logits, y = logits[:, :-1], y[:, 1:]
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction=reduction)
        loss.backward()
        if clip == "before":
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        elif clip == "value":
            nn.utils.clip_grad_value_(model.parameters(), max_norm)
        optimizer.step()
        if clip == "after":
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if scheduler is not None and schedule == "after":
            scheduler.step()
        losses.append(loss.item())
    return losses


@functools.cache
def _loop_task(mixed_seed: int) -> tuple[dict, list]:
    """A small GPT's initial weights (dropout 0.2) and LOOP_STEPS batches of 4 sequences of 12 tokens over 19, drawn
    from ``mixed_seed`` (a case's seed mixed with the cases seed: ``core.case_seed``)."""
    from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

    g = torch.Generator().manual_seed(mixed_seed)
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=g)))
    model = DecoderOnlyLM(DecoderOnlyConfig(19, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=16,
                                            dropout=0.2))
    batches = []
    for _ in range(LOOP_STEPS):
        x = torch.randint(19, (4, 13), generator=g)
        batches.append((x[:, :-1], x[:, 1:]))
    return {k: v.clone() for k, v in model.state_dict().items()}, batches


LOOP_CASES = [  # (label, seed, optimizer, learning rate, max_norm, schedule)
    ("SGD with momentum, warm-up", 132, "sgd", 0.5, 0.5, "warmup"),
    ("AdamW, warm-up", 133, "adamw", 0.02, 0.1, "warmup"),
    ("AdamW, step decay", 134, "adamw", 0.02, 0.1, "decay"),
]


def _loop_setup(seed, optimizer_name, lr, schedule):
    """A fresh model (in eval mode, as after an evaluation), its optimizer and scheduler, and the batches."""
    from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

    weights, batches = _loop_task(case_seed(seed))
    model = DecoderOnlyLM(DecoderOnlyConfig(19, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=16,
                                            dropout=0.2))
    model.load_state_dict(weights)
    model.eval()
    if optimizer_name == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        # eps 1e-5, not 1e-8: Adam divides by the gradients' size, and where a gradient is rounding noise the default
        # eps turns that noise into a full step; correct loops that round differently must agree.
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, eps=1e-5)
    factor = (lambda i: min(1.0, (i + 1) / 4)) if schedule == "warmup" else (lambda i: 0.5 ** i)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return model, [(x.clone(), y.clone()) for x, y in batches], optimizer, scheduler


class _LoopRun:
    """Runs a training loop on one case, from the same weights and the same dropout draws: what the check compares
    is the losses and the parameters after LOOP_STEPS steps (plain tensors, which the grader records)."""

    def __init__(self, loop: Callable, **options):
        self.loop, self.options = loop, options
        self.__name__ = getattr(loop, "__name__", "your function")

    def __call__(self, seed, optimizer_name, lr, max_norm, schedule):
        if self.loop is _reference_loop:  # the reference and the mistakes' variants: the same on every call
            return _cached_reference_run(tuple(sorted(self.options.items())), case_seed(seed), seed, optimizer_name,
                                         lr, max_norm, schedule)
        return self._run(seed, optimizer_name, lr, max_norm, schedule)

    def _run(self, seed, optimizer_name, lr, max_norm, schedule):
        model, batches, optimizer, scheduler = _loop_setup(seed, optimizer_name, lr, schedule)
        state = torch.get_rng_state()
        torch.manual_seed(case_seed(seed))  # the dropout masks: the same for the answer and the reference
        try:
            losses = self.loop(model, batches, optimizer, scheduler, max_norm, **self.options)
        finally:
            torch.set_rng_state(state)
        params = torch.cat([p.detach().flatten() for p in model.parameters()])
        return losses, params


@functools.lru_cache(maxsize=64)
def _cached_reference_run(options: tuple, mixed_seed: int, *case) -> tuple[list[float], torch.Tensor]:
    """The reference's (or a variant's) run on a case; ``mixed_seed`` keys the cache to the cases seed."""
    losses, params = _LoopRun(_reference_loop, **dict(options))._run(*case)
    return losses, params.clone()


def _loop_cases() -> list[Case]:
    return [Case(label, {"seed": seed, "optimizer_name": opt, "lr": lr, "max_norm": norm, "schedule": schedule})
            for label, seed, opt, lr, norm, schedule in LOOP_CASES]


def _losses_of(got) -> torch.Tensor | str:
    if isinstance(got, torch.Tensor):
        got = got.tolist() if got.dim() == 1 else got
    if not isinstance(got, (list, tuple)) or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) for v in got):
        return f"the loop should return the list of the losses, one float per step, got {type(got).__name__} " \
               f"{got!r:.60}"
    return torch.tensor([float(v) for v in got], dtype=torch.float64)


def _same_run(expected, got) -> str | None:
    if type(got) not in (tuple, list) or len(got) != 2:
        return f"malformed result {got!r:.60}"
    (e_losses, e_params), (g_losses, g_params) = expected, got
    losses = _losses_of(g_losses)
    if isinstance(losses, str):
        return losses
    if len(losses) != len(e_losses):
        return f"expected {len(e_losses)} losses (one per batch), got {len(losses)}"
    problem = compare(torch.tensor(e_losses, dtype=torch.float64), losses, ("the losses",), rtol=1e-4, atol=1e-5)
    if problem:
        return problem
    return compare(e_params, g_params, (f"the parameters after {LOOP_STEPS} steps",), rtol=1e-3, atol=1e-4)


LOOP_MISTAKES = [
    Mistake("no-zero-grad",
            "the gradients are not zeroed: loss.backward() adds to .grad, so call optimizer.zero_grad() before "
            "each backward pass.", _LoopRun(_reference_loop, zero_grad=False)),
    Mistake("clip-after-step",
            "the step uses unclipped gradients (clipped after optimizer.step(), or not at all): clip with "
            "nn.utils.clip_grad_norm_(model.parameters(), max_norm) between loss.backward() and optimizer.step().",
            _LoopRun(_reference_loop, clip="after")),
    Mistake("scheduler-before-step",
            "scheduler.step() comes before optimizer.step(): the first update then runs with the second step's "
            "learning rate; step the scheduler after the optimizer.", _LoopRun(_reference_loop, schedule="before")),
    Mistake("scheduler-not-stepped", "the scheduler is never stepped: call scheduler.step() once per step, after "
            "optimizer.step().", _LoopRun(_reference_loop, schedule="never")),
    Mistake("loss-summed",
            "the loss is summed over the tokens: average it (F.cross_entropy's default reduction), so the step "
            "size does not grow with the batch.", _LoopRun(_reference_loop, reduction="sum")),
    Mistake("clipped-by-value",
            "each gradient entry is clipped to [-max_norm, max_norm] (clip_grad_value_): clip the gradients' total "
            "norm instead, nn.utils.clip_grad_norm_(model.parameters(), max_norm), which keeps their direction.",
            _LoopRun(_reference_loop, clip="value")),
    Mistake("targets-shifted-twice",
            "the targets are shifted again: y already holds the next token of each position of x, so compare "
            "model(x) with y as it is, position for position.", _LoopRun(_reference_loop, shift_targets=True)),
    Mistake("eval-mode",
            "the model stays in eval mode, so dropout is off: call model.train() before training (the model "
            "comes in eval mode, as after an evaluation).", _LoopRun(_reference_loop, train_mode=False)),
]


@exercise("13.2", title="The training loop", points=2)
def check_training_loop(answer) -> int:
    require_callable(answer)
    run = answer if getattr(answer, "replays_records", False) else _LoopRun(answer)
    return _verdict(_run_all(run, _loop_cases(), _LoopRun(_reference_loop), LOOP_MISTAKES), _same_run, LOOP_MISTAKES)


# --- 13.3 your GPT, with the course's weights -------------------------------------------------------------------


class Weights:
    """A checkpoint handed to the learner's code: the model's config and its state dict (names -> tensors), with a
    short repr for the check's messages."""

    def __init__(self, name: str, config, state_dict: dict[str, torch.Tensor], vocabulary: Sequence[str] = ()):
        self.name, self.config, self.state_dict, self.vocabulary = name, config, state_dict, tuple(vocabulary)

    def __repr__(self) -> str:
        return self.name


def _random_weights(seed: int) -> Weights:
    """A small package GPT with every weight drawn at random (norm gains and biases too, so that each one matters)."""
    return _random_weights_from(case_seed(seed))


@functools.cache
def _random_weights_from(mixed_seed: int) -> Weights:
    from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

    g = torch.Generator().manual_seed(mixed_seed)
    config = DecoderOnlyConfig(23, d_model=24, num_heads=3, d_ff=40, num_layers=2, max_len=32, dropout=0.0)
    model = DecoderOnlyLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() > 1 else 0.2))
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)  # gains near 1, as in a trained model
    return Weights("a small GPT with random weights", config, {k: v.clone() for k, v in model.state_dict().items()})


@functools.cache
def _course_weights() -> Weights:
    checkpoint = pretrained.shakespeare_checkpoint()
    return Weights("the course checkpoint", checkpoint.config, checkpoint.state_dict, checkpoint.vocabulary)


class _Unmasked(nn.Module):
    """A block run without its causal mask (a mistake's variant): every position attends to the whole sequence."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x, mask=None, *, cache=None, is_causal=False):  # x (B, n, d) -> (B, n, d)
        return self.block(x, None, cache=cache)


def _package_model(weights: Weights, *, transpose: tuple[str, ...] = (), qkv: str = "qkv", final_norm: bool = True,
                   position_shift: int = 0, causal: bool = True, activation: str = "gelu", norm_first: bool = True,
                   scale: str = "head") -> nn.Module:
    """The package's GPT loaded with ``weights`` (every default); with one argument changed, loaded or built as a
    classic mistake has it: attention weights transposed, Q/K/V swapped, no final norm, positions shifted by one, no
    causal mask, ReLU or the tanh GELU, post-norm blocks (the final norm kept), scores over sqrt(d_model)."""
    from transformer_course.blocks import make_norm
    from transformer_course.models import DecoderOnlyLM

    config = weights.config
    model = DecoderOnlyLM(dataclasses.replace(config, activation="relu" if activation == "relu" else "gelu",
                                              norm_first=norm_first))
    if activation == "tanh":
        for block in model.blocks:
            block.ffn.activation = functools.partial(F.gelu, approximate="tanh")
    state = {k: v.clone() for k, v in weights.state_dict.items()}
    for key in list(state):
        parts = key.split(".")
        if len(parts) == 5 and parts[2] == "attention" and parts[3] in ("W_q", "W_k", "W_v"):
            source = "W_" + "qkv"[qkv.index(parts[3][-1])]
            state[key] = weights.state_dict[".".join([*parts[:3], source, parts[4]])].clone()
        if parts[-1] == "weight" and len(parts) == 5 and parts[3] in transpose:
            state[key] = state[key].T.contiguous()
    if scale == "model":  # q.k / sqrt(d) is (q / sqrt(h)).k / sqrt(d / h): the queries scaled by 1 / sqrt(h)
        for key in state:
            if ".attention.W_q." in key:
                state[key] = state[key] / config.num_heads ** 0.5
    if position_shift:
        rows = state["position_embedding.embedding.weight"]
        state["position_embedding.embedding.weight"] = torch.cat([rows[position_shift:], rows[-position_shift:]])
    if not norm_first:  # the package's post-norm model has no final norm: a learner's keeps it
        model.norm = make_norm(config.norm, config.d_model)
    model.load_state_dict(state)
    if not causal:
        model.blocks = nn.ModuleList(_Unmasked(block) for block in model.blocks)
    if not final_norm:
        model.norm = nn.Identity()
    return model.eval()


def _greedy(model: Callable, prompt: torch.Tensor, steps: int, max_len: int) -> tuple[list[int], list[float]]:
    """Greedy continuation of ``prompt`` (n,) by ``steps`` tokens, the whole model run at every step on the last
    ``max_len`` tokens; and the margin of the best token over the second at each step."""
    tokens, margins = prompt.tolist(), []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([tokens[-max_len:]]))[0, -1]
            top = logits.topk(2).values
            margins.append(float(top[0] - top[1]))
            tokens.append(int(logits.argmax()))
    return tokens[len(prompt):], margins


_REFERENCE_RUNS: dict[tuple, tuple] = {}  # (weights (cached objects), inputs, variant) -> the reference's outputs


class _GPTRun:
    """Builds a model with ``build(config)``, loads ``weights`` into it with ``load(model, state_dict)``, and returns
    its logits on ``tokens`` ``(B, n)`` and its greedy continuation of ``prompt``: plain tensors, which the grader
    records. The reference is the package's own model (``build`` None). ``flags``: what the learner's model showed
    on the cases run so far, for naming a mistake (in the kernel: a replayed run has none)."""

    def __init__(self, build=None, load=None, *, greedy: bool = True, **variant):
        self.build, self.load, self.greedy, self.variant = build, load, greedy, variant
        self.flags: dict[str, bool] = {}
        self.__name__ = "GPT or load_checkpoint"

    def __call__(self, weights: Weights, tokens: torch.Tensor, prompt: torch.Tensor, steps: int):
        if self.build is None:  # the reference and the mistakes' variants: the same on every call
            key = (id(weights), tuple(tokens.flatten().tolist()), tuple(prompt.tolist()), steps, self.greedy,
                   tuple(sorted(self.variant.items())))
            if key not in _REFERENCE_RUNS:
                _REFERENCE_RUNS[key] = self._run(weights, tokens, prompt, steps)
            return _REFERENCE_RUNS[key]
        return self._run(weights, tokens, prompt, steps)

    def _run(self, weights: Weights, tokens: torch.Tensor, prompt: torch.Tensor, steps: int):
        if self.build is None:
            model = _package_model(weights, **self.variant)
        else:
            model = self.build(weights.config)
            if not isinstance(model, nn.Module):
                raise TypeError(f"GPT(config) should build an nn.Module, got {type(model).__name__}")
            self.load(model, {k: v.clone() for k, v in weights.state_dict.items()})
            model.eval()
            self.flags["untied-head"] = _untied_head(model, weights)
        with torch.no_grad():
            logits = model(tokens)
        if self.build is not None:  # on every case so far: the logits off by one vector, as a head's bias puts them
            expected = _GPTRun()(weights, tokens, prompt, steps)[0]
            self.flags["head-bias"] = self.flags.get("head-bias", True) and _off_by_one_vector(expected, logits)
            if _logits_problem(expected, logits):  # the verdict stops at the logits (_same_gpt): no generation
                return logits, torch.zeros(0, dtype=torch.long)
        if not self.greedy:  # a mistake's variant, named by its logits alone
            return logits, None, None
        ids, margins = _greedy(model, prompt, steps, weights.config.max_len)
        return (logits, torch.tensor(ids)) if self.build is not None else (logits, torch.tensor(ids), margins)


def _untied_head(model: nn.Module, weights: Weights) -> bool:
    """True when the model holds the checkpoint's token embedding and another (|V|, d) matrix that is not it: an
    output head of its own, left as it was initialised."""
    embedding = weights.state_dict["token_embedding.weight"]
    same_shape = [p for p in model.parameters() if p.shape == embedding.shape]
    return len(same_shape) >= 2 and any(torch.equal(p.detach(), embedding) for p in same_shape) and not all(
        torch.equal(p.detach(), embedding) for p in same_shape)


def _off_by_one_vector(expected: torch.Tensor, got) -> bool:
    """True when ``got`` (B, n, |V|) differs from ``expected`` by the same nonzero vector (|V|,) at every position."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not got.is_floating_point():
        return False
    diff = (got.detach().double() - expected.double()).flatten(0, -2)  # (B n, |V|)
    tol = 1e-4 * max(1.0, expected.abs().max().item())
    return bool(diff[0].abs().max() > tol and (diff - diff[0]).abs().max() <= tol)


def _gpt_cases() -> list[Case]:
    """A small GPT with random weights on random tokens, then the course checkpoint on two windows of the test plays
    (the public cases from even-numbered 64-character windows, the hidden ones from odd-numbered ones)."""
    from transformer_course.checks import core

    g = case_generator(133)
    small = _random_weights(1330)
    cases = [Case("a small GPT with random weights", {
        "weights": small, "tokens": torch.randint(small.config.vocab_size, (2, 20), generator=g),
        "prompt": torch.randint(small.config.vocab_size, (5,), generator=g), "steps": 12})]
    course = _course_weights()
    text = data.shakespeare("test")
    n = 64
    windows = len(text) // n
    parity = 0 if core.CASES_SEED is None else 1
    known = set(course.vocabulary)
    ids = []
    while len(ids) < 3:  # windows of characters the checkpoint knows
        k = 2 * int(torch.randint(windows // 2, (1,), generator=g)) + parity
        if set(text[n * k: n * (k + 1)]) <= known:
            ids.append(pretrained.encode(text[n * k: n * (k + 1)], course.vocabulary))
    cases.append(Case("the course checkpoint on held-out lines", {
        "weights": course, "tokens": torch.stack(ids[:2]), "prompt": ids[2][:24], "steps": 40}))
    return cases


def _logits_problem(expected: torch.Tensor, got) -> str | None:
    """What is wrong with a model's logits ``got`` against the reference's ``(B, n, |V|)``, or None."""
    return compare(expected, got, ("the logits",), rtol=1e-5, atol=1e-5)


def _same_gpt(expected, got) -> str | None:
    if type(got) not in (tuple, list) or len(got) != 2:
        return f"malformed result {got!r:.60}"
    logits, ids, margins = expected
    problem = _logits_problem(logits, got[0])
    if problem or ids is None:
        return problem
    got_ids = got[1].tolist() if isinstance(got[1], torch.Tensor) else got[1]
    for t, (e, m) in enumerate(zip(ids.tolist(), got_ids, strict=False)):
        if e != m:
            if margins[t] < 1e-4:  # a near tie: rounding may pick either token, and the rest follows from it
                return None
            return f"greedy generation: token {t} is {m}, expected {e} (the tokens before it agree)"
    return None if len(got_ids) == len(ids) else f"expected {len(ids)} generated tokens, got {len(got_ids)}"


GPT_MISTAKES = [
    Mistake("transposed-weight",
            "a weight matrix is transposed: nn.Linear keeps its weight as (out_features, in_features) and computes "
            "x @ W.T + b; the checkpoint stores it the same way, so copy it as it is (GPT-2's Conv1D checkpoints "
            "are the ones that need .T).",
            _GPTRun(greedy=False, transpose=("W_q", "W_k", "W_v", "W_o"))),
    *[Mistake("transposed-weight",
              "a weight matrix is transposed: nn.Linear keeps its weight as (out_features, in_features) and computes "
              "x @ W.T + b; the checkpoint stores it the same way, so copy it as it is (GPT-2's Conv1D checkpoints "
              "are the ones that need .T).", _GPTRun(greedy=False, transpose=(name,)))
      for name in ("W_q", "W_k", "W_v", "W_o")],
    *[Mistake("qkv-swapped",
              "the query, key and value projections are mixed up: W_q makes the queries, W_k the keys and W_v the "
              "values; copy each into its own place.", _GPTRun(greedy=False, qkv=order))
      for order in ("kqv", "vkq", "qvk")],
    Mistake("final-norm-missing",
            "the final LayerNorm is missing: a pre-norm GPT normalises the last block's output (the checkpoint's "
            "norm.weight and norm.bias) before the output head.", _GPTRun(greedy=False, final_norm=False)),
    Mistake("positions-off-by-one",
            "the positions are off by one: the first token has position 0, so position embedding row t goes with "
            "token t.", _GPTRun(greedy=False, position_shift=1)),
    Mistake("no-causal-mask",
            "the attention is not causal: position t may attend to positions 0..t only, so mask the scores of later "
            "positions with -inf before the softmax (or F.scaled_dot_product_attention(..., is_causal=True)).",
            _GPTRun(greedy=False, causal=False)),
    Mistake("scores-scaled-by-d-model",
            "the scores are divided by sqrt(d_model): each head divides its q.k by the square root of its own width, "
            "sqrt(d_model / num_heads).", _GPTRun(greedy=False, scale="model")),
    *[Mistake("not-exact-gelu",
              "the FFN's activation is not the exact GELU: use F.gelu(x) (nn.GELU()), not ReLU and not the tanh "
              "approximation (approximate='tanh', GPT-2's gelu_new).", _GPTRun(greedy=False, activation=kind))
      for kind in ("relu", "tanh")],
    Mistake("post-norm-blocks",
            "the blocks are post-norm, LN(x + sublayer(x)): the checkpoint's blocks are pre-norm, "
            "x + sublayer(LN(x)), for the attention and the FFN alike.", _GPTRun(greedy=False, norm_first=False)),
]

HEAD_BIAS = Mistake("head-has-bias",
                    "the output head has a bias: the checkpoint's head is the token embedding and has none "
                    "(nn.Linear(d_model, vocab_size, bias=False)); a bias left as initialised moves every position's "
                    "logits by the same vector.")
HEAD_NOT_TIED = Mistake("head-not-tied",
                        "the output head is not tied to the token embedding: the checkpoint's head.weight is the "
                        "token embedding (tie_weights), so your head must use that matrix (tie it, or copy it).")


@exercise("13.3", title="Your GPT, with the course's weights", points=3)
def check_gpt(answer) -> int:
    if getattr(answer, "replays_records", False):
        run = answer
    else:
        if type(answer) not in (tuple, list) or len(answer) != 2:
            raise CheckFailed(f"expected the pair (GPT, load_checkpoint): your model class and your loading function, "
                              f"got {type(answer).__name__} {answer!r:.60}")
        require_callable(answer[0], "GPT, a class or function: GPT(config) -> nn.Module")
        require_callable(answer[1], "load_checkpoint, a function: load_checkpoint(model, state_dict)")
        run = _GPTRun(*answer)
    flags = getattr(run, "flags", {})
    try:
        return _verdict(_run_all(run, _gpt_cases(), _GPTRun()), _same_gpt, GPT_MISTAKES)
    except CheckFailed as failure:
        # Named from what the learner's model showed on every case it ran on, when no variant explains the results.
        if failure.mistake is None and flags.get("head-bias"):
            raise CheckFailed(failure.message, mistake=HEAD_BIAS) from None
        if failure.mistake is None and flags.get("untied-head"):
            raise CheckFailed(failure.message, mistake=HEAD_NOT_TIED) from None
        raise
