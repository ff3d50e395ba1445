"""Checks for lesson 12, the capstone: the label-smoothed loss (the Annotated Transformer's convention), the
warm-up / inverse-square-root learning rate, and beam search for one sequence with GNMT's length penalty."""

from __future__ import annotations

import hashlib
import math
import numbers

import torch

from transformer_course.checks.core import (
    Case,
    CheckFailed,
    Mistake,
    call_answer,
    case_generator,
    check_function,
    exercise,
    require_callable,
)

# --- 12.1 the label-smoothed loss, padding excluded from the smoothing ------------------------------


def _smoothed_cases() -> list[Case]:
    g = case_generator(21)

    def case(label, lengths, n, vocab, epsilon, pad_id=0, dtype=torch.float32):
        """Targets never <pad> before a row's length and <pad> after it; logits favour the right token and give
        <pad> a low score, as a trained model's do, so that every convention gives a clearly different loss."""
        words = torch.tensor([v for v in range(vocab) if v != pad_id])
        targets = words[torch.randint(len(words), (len(lengths), n), generator=g)]
        targets[torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]] = pad_id
        logits = 1.5 * torch.randn(len(lengths), n, vocab, generator=g, dtype=dtype)
        logits += 2.5 * torch.nn.functional.one_hot(targets, vocab).to(dtype)
        logits[..., pad_id] -= 7.0
        return Case(label, {"logits": logits, "targets": targets, "epsilon": epsilon, "pad_id": pad_id})

    return [case("a padded batch", [5, 3], 5, 6, 0.1), case("epsilon = 0.3, |V| = 5", [4, 2, 1], 4, 5, 0.3),
            case("pad_id = 2", [4, 2], 4, 7, 0.2, pad_id=2), case("float64", [3, 1], 3, 6, 0.1, dtype=torch.float64),
            case("epsilon = 0: the plain cross-entropy", [3], 4, 5, 0.0)]


def _smoothed(logits, targets, epsilon, pad_id=0, *, spread="others", right=None, positions="real", mean="real",
              kl=False):
    """The reference loss (every default), and with one argument changed, each classic mistake."""
    V = logits.shape[-1]
    log_p = logits.log_softmax(-1)  # (B, n, V)
    if spread == "all":  # PyTorch's label_smoothing: eps / V on every class, the right one and <pad> included
        q = torch.full_like(log_p, epsilon / V)
        q.scatter_add_(-1, targets[..., None], torch.full_like(log_p[..., :1], 1 - epsilon))
    else:
        q = torch.full_like(log_p, epsilon / (V - 1 if spread == "pad too" else V - 2))
        if spread != "pad too":
            q[..., pad_id] = 0.0
        q.scatter_(-1, targets[..., None], torch.full_like(log_p[..., :1], 1 - epsilon if right is None else right))
        if spread != "pad too" and positions == "all":  # the Annotated Transformer's code without its row mask
            q[..., pad_id] = 0.0
    per_position = -(q * log_p).sum(-1)  # (B, n)
    if kl:
        per_position = per_position + (q * q.clamp_min(1e-30).log()).sum(-1)
    keep = targets != pad_id
    if positions == "all":
        keep = torch.ones_like(keep)
    total = per_position[keep].sum()
    if mean == "sum":
        return total
    return total / (keep.numel() if mean == "all" else keep.sum())


@exercise("12.1", title="The label-smoothed loss, padding excluded", points=2)
def check_smoothed_loss(answer) -> int:
    return check_function(
        answer,
        _smoothed,
        _smoothed_cases(),
        [
            Mistake("pad-gets-smoothing",
                    "<pad> gets smoothing mass: spread epsilon over the |V| - 2 tokens that are neither the right "
                    "one nor <pad> (epsilon / (|V| - 2) each); <pad> gets probability 0.",
                    lambda lg, t, e, p: _smoothed(lg, t, e, p, spread="pad too")),
            Mistake("smoothing-over-all-classes",
                    "epsilon is spread over all |V| classes, the right one and <pad> included: that is PyTorch's "
                    "label_smoothing=, which this task replaces by 1 - epsilon on the right token and "
                    "epsilon / (|V| - 2) on each token that is neither the right one nor <pad>.",
                    lambda lg, t, e, p: _smoothed(lg, t, e, p, spread="all")),
            Mistake("pad-positions-scored",
                    "positions whose target is <pad> are scored: they add nothing to the loss and are left out of "
                    "the mean.", lambda lg, t, e, p: _smoothed(lg, t, e, p, positions="all", mean="all")),
            Mistake("mean-over-all-positions",
                    "the mean divides by all B x n positions: divide by the number of targets that are not <pad>.",
                    lambda lg, t, e, p: _smoothed(lg, t, e, p, mean="all")),
            Mistake("loss-summed", "the loss is summed: average it over the targets that are not <pad>.",
                    lambda lg, t, e, p: _smoothed(lg, t, e, p, mean="sum")),
            Mistake("target-not-lowered",
                    "the right token gets probability 1 on top of the smoothing: give it 1 - epsilon, so that the "
                    "smoothed target sums to 1.", lambda lg, t, e, p: _smoothed(lg, t, e, p, right=1.0)),
            Mistake("kl-not-cross-entropy",
                    "this is the KL divergence from the smoothed target, lower than the cross-entropy by the "
                    "target's entropy: compute the cross-entropy -sum_v q_v log p_v.",
                    lambda lg, t, e, p: _smoothed(lg, t, e, p, kl=True)),
            Mistake("pad-id-ignored", "<pad> is taken to be token 0: use the pad_id argument.",
                    lambda lg, t, e, p: _smoothed(lg, t, e, 0)),
        ],
        names=("loss",),
        rtol=1e-4,
        atol=1e-5,
    )


# --- 12.2 the warm-up / inverse-square-root learning rate ---------------------------------------------


def _noam(step, d_model, warmup_steps, *, shift=0, d_power=-0.5, warmup_power=-1.5, pick=min, decay=-0.5):
    """The reference rate (every default), and with one argument changed, each classic mistake."""
    s = step + shift
    return d_model**d_power * pick(s**decay, s * warmup_steps**warmup_power)


def _noam_cases() -> list[Case]:
    """Steps around the peak first (where the off-by-one mistakes show), then the first step and the decay."""
    g = case_generator(22)
    d_model = [16, 32, 64, 128][int(torch.randint(4, (1,), generator=g))]
    warmup = int(torch.randint(6, 40, (1,), generator=g))

    def case(label, step, d=d_model, w=warmup):
        return Case(label, {"step": step, "d_model": d, "warmup_steps": w})

    return [case("the peak, step = warmup_steps", warmup), case("one step after the peak", warmup + 1),
            case("one step before the peak", warmup - 1), case("the first step", 1),
            case("during the warm-up", warmup // 2), case("decay, 4 x warmup_steps", 4 * warmup),
            case("long after the peak", 100 * warmup + 7),
            case("the paper's settings, at the peak", 4000, 512, 4000),
            case("the paper's settings, step 100,000", 100_000, 512, 4000)]


def _compare_rate(expected: float, got) -> str | None:
    if isinstance(got, torch.Tensor) and got.numel() == 1 and got.is_floating_point():
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        return f"expected a number (a float), got {type(got).__name__} {got!r:.40}"
    got = float(got)
    if not abs(got - expected) <= 1e-5 * abs(expected):
        return f"expected {expected:.6g}, got {got:.6g}"
    return None


@exercise("12.2", title="The warm-up / inverse-square-root learning rate", points=1)
def check_noam(answer) -> int:
    mistakes = [
        Mistake("step-off-by-one-early",
                "the step is off by one (the peak comes a step early): steps count from 1, and the rate peaks at "
                "step = warmup_steps.", lambda *a: _noam(*a, shift=1)),
        Mistake("step-off-by-one-late",
                "the step is off by one (the peak comes a step late): steps count from 1, the first update is "
                "step 1, and the rate peaks at step = warmup_steps.", lambda *a: _noam(*a, shift=-1)),
        Mistake("d-model-factor-missing", "the factor d_model^-0.5 is missing.", lambda *a: _noam(*a, d_power=0.0)),
        Mistake("d-model-factor-inverted", "the factor is d_model^0.5: it is d_model^-0.5, smaller for wider models.",
                lambda *a: _noam(*a, d_power=0.5)),
        Mistake("warmup-exponent-wrong",
                "the warm-up line is step * warmup_steps^-0.5: it is step * warmup_steps^-1.5, which meets "
                "step^-0.5 at step = warmup_steps.", lambda *a: _noam(*a, warmup_power=-0.5)),
        Mistake("max-not-min", "max instead of min: the rate is the smaller of step^-0.5 and step * warmup_steps^-1.5.",
                lambda *a: _noam(*a, pick=max)),
        Mistake("decays-as-1-over-step",
                "the rate decays as 1 / step: it decays as step^-0.5, the inverse square root.",
                lambda *a: _noam(*a, decay=-1.0)),
    ]
    require_callable(answer)
    cases = _noam_cases()
    for case in cases:
        expected = _noam(*case.fresh_args())
        got = call_answer(answer, case, mistakes)
        problem = _compare_rate(expected, got)
        if problem:
            hint = None
            for mistake in mistakes:
                try:
                    wrong = mistake.wrong(*case.fresh_args())
                except Exception:  # noqa: BLE001 - a variant that cannot run on this case says nothing
                    continue
                if _compare_rate(wrong, got) is None:
                    hint = mistake
                    break
            raise CheckFailed(f"wrong result for {case.describe()}\n  {problem}", mistake=hint)
    return len(cases)


# --- 12.3 beam search for one sequence, with GNMT's length penalty ------------------------------------


class ScriptedModel:
    """A stand-in for a trained decoder: ``next_log_probs(prefix)``, the log-probabilities of the next token.

    ``prefix`` is a hypothesis so far, a list of token ids that starts with ``bos_id``. The answer is a float32
    tensor ``(|V|,)`` of log-probabilities (their exponentials sum to 1). They are made up from a hash of the
    prefix, the same on every machine; ``<eos>`` grows likelier as the prefix grows, and ``<bos>`` is (almost)
    never predicted. The checks' cases were chosen, among many such models, so that every classic mistake of beam
    search returns a hypothesis different from the right one, by margins far above rounding.

    Internally the model works on canonical ids (0 ``<bos>``, 1 ``<eos>``, then the words); ``ids`` maps them to
    the ids the learner sees, so that the hidden cases (``--cases-seed``) relabel the vocabulary.
    """

    def __init__(self, name: str, seed: int, vocab_size: int, sharpness: float, eos_bias: float, eos_slope: float,
                 ids: list[int]):
        self.name, self.seed, self.vocab_size = name, seed, vocab_size
        self.sharpness, self.eos_bias, self.eos_slope = sharpness, eos_bias, eos_slope
        self.ids = list(ids)  # canonical id -> id seen by the learner
        self.canonical = {token: c for c, token in enumerate(self.ids)}
        self.bos_id, self.eos_id = self.ids[0], self.ids[1]
        self._cache: dict[tuple[int, ...], list[float]] = {}

    def __repr__(self) -> str:
        return f"ScriptedModel({self.name!r})"

    def _tokens(self, prefix) -> list[int]:
        if isinstance(prefix, torch.Tensor):
            if prefix.dim() != 1 or prefix.is_floating_point():
                raise ValueError(f"next_log_probs takes one hypothesis, a list of token ids (or a 1-D integer "
                                 f"tensor), got a tensor of shape {tuple(prefix.shape)} and dtype {prefix.dtype}")
            prefix = prefix.tolist()
        if not isinstance(prefix, (list, tuple)) or not all(
                isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in prefix):
            raise TypeError(f"next_log_probs takes one hypothesis, a list of token ids, got {prefix!r:.80}")
        tokens = [int(t) for t in prefix]
        if not tokens or tokens[0] != self.bos_id:
            raise ValueError(f"a hypothesis starts with bos_id={self.bos_id}, got {tokens}")
        if any(not 0 <= t < self.vocab_size for t in tokens):
            raise ValueError(f"token ids lie in [0, {self.vocab_size}), got {tokens}")
        return tokens

    def _canonical_log_probs(self, key: tuple[int, ...]) -> list[float]:
        if key not in self._cache:
            logits = []
            for v in range(self.vocab_size):
                digest = hashlib.sha256(f"{self.seed}|{key}|{v}".encode()).digest()
                u = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64  # uniform in (0, 1)
                logits.append(self.sharpness * 0.55 * math.log(u / (1 - u)))  # logistic, sd about sharpness
            logits[0] = -30.0  # <bos> is never predicted
            logits[1] += self.eos_bias + self.eos_slope * len(key)
            top = max(logits)
            log_z = top + math.log(sum(math.exp(x - top) for x in logits))
            self._cache[key] = torch.tensor([x - log_z for x in logits], dtype=torch.float32).tolist()
        return self._cache[key]

    def __call__(self, prefix) -> torch.Tensor:
        tokens = self._tokens(prefix)
        canonical = self._canonical_log_probs(tuple(self.canonical[t] for t in tokens[1:]))
        out = torch.empty(self.vocab_size, dtype=torch.float32)
        out[self.ids] = torch.tensor(canonical, dtype=torch.float32)
        return out


def _penalty(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


def _beam(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha, *, penalty=True, finished_stay=True,
          space="log", per_hypothesis=None, final="normalised", eos_counted=True, stop="all", during_search=True,
          trace=None):
    """The reference beam search (every default), and with one argument changed, each classic mistake.

    A hypothesis is (tokens from <bos>, score, finished, |Y|); ``trace`` (a list) collects, at every step and at
    the final choice, the gap between the last kept candidate and the first dropped one (the design's margins).
    """
    alpha = alpha if penalty else 0.0
    beam = [((bos_id,), 1.0 if space == "product" else 0.0, False, 0)]

    def rank(hypothesis, a):
        return hypothesis[1] / _penalty(hypothesis[3], a)

    for t in range(1, max_len + 1):
        candidates = []
        for tokens, score, finished, length in beam:
            if finished and finished_stay:
                candidates.append((tokens, score, finished, length))  # carried over unchanged
                continue
            log_p = next_log_probs(list(tokens)).tolist()
            options = range(len(log_p))
            if per_hypothesis is not None:
                options = sorted(options, key=lambda v: -log_p[v])[:per_hypothesis]
            for v in options:
                new = (score + log_p[v] if space == "log" else score * math.exp(log_p[v]) if space == "product"
                       else score + math.exp(log_p[v]))
                ends = v == eos_id and finished_stay
                candidates.append((tokens + (v,), new, ends, t - 1 if v == eos_id and not eos_counted else t))
        values = [rank(c, alpha if during_search else 0.0) for c in candidates]
        order = sorted(range(len(candidates)), key=lambda i: -values[i])
        if trace is not None and len(order) > beam_size:
            trace.append(values[order[beam_size - 1]] - values[order[beam_size]])
        beam = [candidates[i] for i in order[:beam_size]]
        if stop == "first" and beam[0][2]:
            return list(beam[0][0][1:])
        if all(h[2] for h in beam):
            break
    values = [rank(h, alpha if final == "normalised" else 0.0) for h in beam]
    order = sorted(range(len(beam)), key=lambda i: -values[i])
    if trace is not None and len(order) > 1:
        trace.append(values[order[0]] - values[order[1]])
    return list(beam[order[0]][0][1:])


BEAM_MISTAKES = [
    Mistake("no-length-penalty",
            "no length penalty: rank hypotheses by log P(Y) / ((5 + |Y|) / 6)^alpha, during the search and at the "
            "end.", lambda *a: _beam(*a, penalty=False)),
    Mistake("finished-extended",
            "finished hypotheses are extended: a hypothesis that ends with <eos> is finished; carry it over "
            "unchanged (same score, same |Y|) and stop when every hypothesis in the beam is finished.",
            lambda *a: _beam(*a, finished_stay=False)),
    Mistake("probabilities-multiplied",
            "the scores are probabilities multiplied together: add the log-probabilities, log P(Y) = sum of "
            "log p(y_t | ...), and divide that sum by the length penalty.", lambda *a: _beam(*a, space="product")),
    Mistake("probabilities-added",
            "the scores are probabilities added together: add the log-probabilities, log P(Y) = sum of "
            "log p(y_t | ...), and divide that sum by the length penalty.", lambda *a: _beam(*a, space="sum")),
    Mistake("greedy-per-hypothesis",
            "each hypothesis keeps only its best continuation (that is greedy decoding): consider every token for "
            "every hypothesis, beam_size x |V| candidates, and keep the beam_size best of them all.",
            lambda *a: _beam(*a, per_hypothesis=1)),
    Mistake("final-choice-unpenalised",
            "the final choice ignores the length penalty: return the hypothesis of the beam with the best "
            "log P(Y) / ((5 + |Y|) / 6)^alpha, not the best log P(Y).", lambda *a: _beam(*a, final="raw")),
    Mistake("penalty-only-at-end", "the length penalty is applied only at the end: rank the candidates by "
            "log P(Y) / ((5 + |Y|) / 6)^alpha at every step too.", lambda *a: _beam(*a, during_search=False)),
    Mistake("length-without-eos", "|Y| leaves out the <eos>: it counts every token after <bos>, the <eos> included.",
            lambda *a: _beam(*a, eos_counted=False)),
    Mistake("stops-too-early",
            "the search stops as soon as the best hypothesis is finished: go on until every hypothesis in the beam "
            "is finished (or max_len tokens are written), then return the best.", lambda *a: _beam(*a, stop="first")),
    Mistake("bos-kept", "the result starts with <bos>: return the tokens after it.", lambda *a: [a[1], *_beam(*a)]),
    Mistake("eos-left-out", "the <eos> is left out: a finished hypothesis ends with it.",
            lambda *a: [t for t in _beam(*a) if t != a[2]]),
]

#: The cases: (label, seed, |V|, sharpness, eos_bias, eos_slope, beam_size, max_len, alpha), the scripted model's
#: parameters first. The first three were found by a search over many scripted models: together they give every
#: mistake of BEAM_MISTAKES its own sequence of results, different from the right one's, and at every step of the
#: right search and of every mistaken one, the last candidate kept ranks at least 3e-3 above the first one dropped.
#: The last three are edge cases: no length penalty, no hypothesis finished at max_len, and greedy decoding.
BEAM_CASES = [
    ("beam_size=2, alpha=0.6 (GNMT's)", 22, 6, 1.5, 0.0, 0.0, 2, 5, 0.6),
    ("beam_size=3, alpha=2", 2, 6, 1.5, -1.5, 0.6, 3, 4, 2.0),
    ("|V|=7, alpha=2", 5, 7, 1.0, -2.5, 1.0, 2, 6, 2.0),
    ("alpha=0, no length penalty", 0, 6, 1.5, -0.5, 0.3, 2, 5, 0.0),
    ("nothing finishes within max_len", 4, 6, 1.5, -6.0, 0.0, 2, 4, 1.0),
    ("beam_size=1 (greedy decoding)", 0, 7, 1.5, -1.5, 0.6, 1, 6, 0.6),
]


def _beam_cases() -> list[Case]:
    g = case_generator(23)
    cases = []
    for label, seed, vocab, sharpness, eos_bias, eos_slope, beam_size, max_len, alpha in BEAM_CASES:
        ids = torch.randperm(vocab, generator=g).tolist()
        model = ScriptedModel(f"model {len(cases) + 1}", seed, vocab, sharpness, eos_bias, eos_slope, ids)
        cases.append(Case(label, {"next_log_probs": model, "bos_id": model.bos_id, "eos_id": model.eos_id,
                                  "beam_size": beam_size, "max_len": max_len, "alpha": alpha}))
    return cases


def _tokens_of(got) -> list[int] | str:
    """The learner's hypothesis as a list of ints, or a description of what is wrong with its type."""
    if isinstance(got, torch.Tensor) and got.dim() == 1 and not got.is_floating_point() and got.dtype != torch.bool:
        return got.tolist()
    if isinstance(got, (list, tuple)) and all(isinstance(t, numbers.Integral) and not isinstance(t, bool)
                                              for t in got):
        return [int(t) for t in got]
    return f"expected a list of token ids, got {type(got).__name__} {got!r:.60}"


def _describe_score(case: Case, tokens: list[int]) -> str:
    """' (log P = ..., score ...)' for a complete hypothesis (it ends with <eos>, or has max_len tokens and none is
    <eos>), else ''."""
    model, bos_id, eos_id, _, max_len, alpha = case.args.values()
    if (not tokens or len(tokens) > max_len or any(not 0 <= t < model.vocab_size for t in tokens)
            or bos_id in tokens or eos_id in tokens[:-1] or (tokens[-1] != eos_id and len(tokens) < max_len)):
        return ""
    log_p = sum(model([bos_id, *tokens[:t]])[tokens[t]].item() for t in range(len(tokens)))
    return f" (log P = {log_p:.3f}, score {log_p / _penalty(len(tokens), alpha):.3f})"


@exercise("12.3", title="Beam search with a length penalty", points=3)
def check_beam_search(answer) -> int:
    """Every case runs before any verdict, so that a mistake is named by its results on all the cases it ran on
    (several mistakes can agree on one case)."""
    require_callable(answer)
    cases, results, failure = _beam_cases(), [], None
    for case in cases:
        expected = _beam(*case.fresh_args())
        try:
            got = call_answer(answer, case)
        except CheckFailed:
            if failure is None:
                raise
            break  # report the earlier wrong result
        tokens = _tokens_of(got)
        results.append((case, tokens))
        if failure is None and isinstance(tokens, str):
            raise CheckFailed(f"wrong result for {case.describe()}\n  {tokens}")
        if failure is None and tokens != expected:
            failure = (case, expected, tokens)
    if failure is None:
        return len(cases)
    case, expected, tokens = failure
    matches = [m for m in BEAM_MISTAKES if m.wrong(*case.fresh_args()) == tokens]
    everywhere = [m for m in matches
                  if all(isinstance(t, list) and m.wrong(*c.fresh_args()) == t for c, t in results)]
    hint = (everywhere or matches or [None])[0]
    raise CheckFailed(f"wrong result for {case.describe()}\n  expected {expected}{_describe_score(case, expected)}"
                      f"\n  got      {tokens}{_describe_score(case, tokens)}",
                      mistake=hint)
