"""Checks for lesson 12, the capstone: the label-smoothed loss (the Annotated Transformer's convention), the
warm-up / inverse-square-root learning rate, and beam search for one sequence with GNMT's length penalty."""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import replace
from functools import partial

import torch

from transformer_course.checks.core import (
    Case,
    Mistake,
    case_generator,
    check_function,
    exercise,
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
            case("pad_id = 2", [4, 2], 4, 7, 0.2, pad_id=2),
            case("float64, pad_id = 5", [3, 1], 3, 6, 0.1, pad_id=5, dtype=torch.float64),
            case("epsilon = 0: the plain cross-entropy", [3], 4, 5, 0.0)]


def _smoothed(logits, targets, epsilon, pad_id=0, *, spread="others", right=None, positions="real", mean="real",
              kl=False, axis=-1, normalised=True):
    """The reference loss (every default), and with one argument changed, each classic mistake.

    ``spread``: where epsilon goes: epsilon / (|V| - 2) on the tokens neither right nor <pad> ("others"), or on <pad>
    too ("pad not zeroed"), epsilon / (|V| - 1) on every token but the right one ("pad too"), epsilon / |V| on the
    others ("over |V|"), or epsilon / |V| on every token ("all", PyTorch's). ``mean``: over the real targets ("real"),
    over all positions ("all"), each sentence's mean averaged ("per sentence"), or none ("sum").
    """
    V = logits.shape[-1]
    log_p = logits.log_softmax(axis) if normalised else logits  # (B, n, V)
    if spread == "all":  # PyTorch's label_smoothing: eps / V on every class, the right one and <pad> included
        q = torch.full_like(log_p, epsilon / V)
        q.scatter_add_(-1, targets[..., None], torch.full_like(log_p[..., :1], 1 - epsilon))
    else:
        q = torch.full_like(log_p, epsilon / {"pad too": V - 1, "over |V|": V}.get(spread, V - 2))
        if spread in ("others", "over |V|"):
            q[..., pad_id] = 0.0
        q.scatter_(-1, targets[..., None], torch.full_like(log_p[..., :1], 1 - epsilon if right is None else right))
        if spread in ("others", "over |V|") and positions == "all":  # the Annotated Transformer's, no row mask
            q[..., pad_id] = 0.0
    per_position = -(q * log_p).sum(-1)  # (B, n)
    if kl:
        per_position = per_position + (q * q.clamp_min(1e-30).log()).sum(-1)
    keep = targets != pad_id
    count = keep.sum()
    if positions == "all":
        keep = torch.ones_like(keep)
    if mean == "per sentence":
        return ((per_position * keep).sum(-1) / keep.sum(-1)).mean()
    total = per_position[keep].sum()
    if mean == "sum":
        return total
    return total / (keep.numel() if mean == "all" else count)


#: The mistakes 12.1 can name; replace(mistake, wrong=...) is another variant of the same mistake (same id and hint).
SMOOTHED_MISTAKES = [
    _PAD_GETS_MASS := Mistake("pad-gets-smoothing",
            "<pad> gets smoothing mass: spread epsilon over the |V| - 2 tokens that are neither the right "
            "one nor <pad> (epsilon / (|V| - 2) each); <pad> gets probability 0.",
            lambda lg, t, e, p: _smoothed(lg, t, e, p, spread="pad too")),
    Mistake("smoothing-over-all-classes",
            "epsilon is spread over all |V| classes, the right one and <pad> included: that is PyTorch's "
            "label_smoothing=, which this task replaces by 1 - epsilon on the right token and "
            "epsilon / (|V| - 2) on each token that is neither the right one nor <pad>.",
            lambda lg, t, e, p: _smoothed(lg, t, e, p, spread="all")),
    replace(_PAD_GETS_MASS, wrong=lambda lg, t, e, p: _smoothed(lg, t, e, p, spread="pad not zeroed")),
    Mistake("smoothing-denominator",
            "epsilon is divided among the wrong number of tokens: each of the |V| - 2 tokens that are neither the "
            "right one nor <pad> gets epsilon / (|V| - 2), so that the smoothed target sums to 1.",
            lambda lg, t, e, p: _smoothed(lg, t, e, p, spread="over |V|")),
    _PAD_SCORED := Mistake("pad-positions-scored",
            "positions whose target is <pad> are scored: they add nothing to the loss and are left out of "
            "the mean.", lambda lg, t, e, p: _smoothed(lg, t, e, p, positions="all", mean="all")),
    replace(_PAD_SCORED, wrong=lambda lg, t, e, p: _smoothed(lg, t, e, p, positions="all")),
    Mistake("mean-over-all-positions",
            "the mean divides by all B x n positions: divide by the number of targets that are not <pad>.",
            lambda lg, t, e, p: _smoothed(lg, t, e, p, mean="all")),
    Mistake("loss-summed", "the loss is summed: average it over the targets that are not <pad>.",
            lambda lg, t, e, p: _smoothed(lg, t, e, p, mean="sum")),
    Mistake("mean-of-sentence-means",
            "the loss is the mean of each sentence's mean: average over all the targets that are not <pad> at once "
            "(a sentence with more targets weighs more).",
            lambda lg, t, e, p: _smoothed(lg, t, e, p, mean="per sentence")),
    Mistake("target-not-lowered",
            "the right token gets probability 1 on top of the smoothing: give it 1 - epsilon, so that the "
            "smoothed target sums to 1.", lambda lg, t, e, p: _smoothed(lg, t, e, p, right=1.0)),
    Mistake("kl-not-cross-entropy",
            "this is the KL divergence from the smoothed target, lower than the cross-entropy by the "
            "target's entropy: compute the cross-entropy -sum_v q_v log p_v.",
            lambda lg, t, e, p: _smoothed(lg, t, e, p, kl=True)),
    Mistake("pad-id-ignored", "<pad> is taken to be token 0: use the pad_id argument.",
            lambda lg, t, e, p: _smoothed(lg, t, e, 0)),
    Mistake("logits-not-log-probs", "the logits are used as log-probabilities: take log_softmax over the "
            "vocabulary first.", lambda lg, t, e, p: _smoothed(lg, t, e, p, normalised=False)),
    Mistake("log-softmax-wrong-axis", "log_softmax runs over the wrong axis: normalise over the vocabulary, the "
            "last axis (dim=-1).", lambda lg, t, e, p: _smoothed(lg, t, e, p, axis=1)),
]


@exercise("12.1", title="The label-smoothed loss, padding excluded", points=2)
def check_smoothed_loss(answer) -> int:
    return check_function(
        answer,
        _smoothed,
        _smoothed_cases(),
        SMOOTHED_MISTAKES,
        names=("loss",),
        rtol=1e-4,
        atol=1e-5,
    )


# --- 12.2 the warm-up / inverse-square-root learning rate ---------------------------------------------


def _noam(step, d_model, warmup_steps, *, shift=0, d_power=-0.5, warmup_power=-1.5, pick=min, decay=-0.5,
          power=pow):
    """The reference rate (every default), and with one argument changed, each classic mistake."""
    s = step + shift
    decayed = power(s, decay) if s > 0 else math.inf  # step 0 (a late count's first step): the warm-up line's 0
    return power(d_model, d_power) * pick(decayed, s * power(warmup_steps, warmup_power))


def _noam_cases() -> list[Case]:
    """Steps around the peak first (where the off-by-one mistakes show), then the first step and the decay."""
    g = case_generator(22)
    d_model = [16, 32, 64, 128][int(torch.randint(4, (1,), generator=g))]
    warmup = int(torch.randint(6, 40, (1,), generator=g))
    warmup += warmup == d_model  # d_model = warmup_steps would hide swapped arguments

    def case(label, step, d=d_model, w=warmup):
        return Case(label, {"step": step, "d_model": d, "warmup_steps": w})

    return [case("the peak, step = warmup_steps", warmup), case("one step after the peak", warmup + 1),
            case("one step before the peak", warmup - 1), case("the first step", 1),
            case("during the warm-up", warmup // 2), case("decay, 4 x warmup_steps", 4 * warmup),
            case("long after the peak", 100 * warmup + 7),
            case("the paper's settings, at the peak", 4000, 512, 4000),
            case("the paper's settings, step 100,000", 100_000, 512, 4000)]


def _compare_rate(expected: float, got, case: Case | None = None) -> str | None:
    if isinstance(got, torch.Tensor) and got.numel() == 1 and got.is_floating_point():
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        return f"expected a number (a float), got {type(got).__name__} {got!r:.40}"
    got = float(got)
    if not abs(got - expected) <= 1e-5 * abs(expected):
        return f"expected {expected:.6g}, got {got:.6g}"
    return None


NOAM_MISTAKES = [
    Mistake("step-off-by-one-early",
            "the step is off by one (the peak comes a step early): steps count from 1, and the rate peaks at "
            "step = warmup_steps.", partial(_noam, shift=1)),
    Mistake("step-off-by-one-late",
            "the step is off by one (the peak comes a step late): steps count from 1, the first update is "
            "step 1, and the rate peaks at step = warmup_steps.", partial(_noam, shift=-1)),
    Mistake("arguments-swapped", "d_model and warmup_steps are swapped: the signature is "
            "noam(step, d_model, warmup_steps).", lambda step, d_model, warmup: _noam(step, warmup, d_model)),
    Mistake("d-model-factor-missing", "the factor d_model^-0.5 is missing.", partial(_noam, d_power=0.0)),
    Mistake("d-model-factor-inverted", "the factor is d_model^0.5: it is d_model^-0.5, smaller for wider models.",
            partial(_noam, d_power=0.5)),
    Mistake("d-model-factor-1-over-d", "the factor is 1 / d_model: it is d_model^-0.5, the inverse square root.",
            partial(_noam, d_power=-1.0)),
    Mistake("power-precedence",
            "x**-1/2 is (x**-1) / 2 in Python (** binds tighter than /): write x**-0.5, or x**(-1/2), and "
            "x**-1.5 for warmup_steps^-3/2.", partial(_noam, power=lambda x, p: x ** (2 * p) / 2)),
    _WARMUP_EXPONENT := Mistake("warmup-exponent-wrong",
            "the warm-up line's exponent is wrong: it is step * warmup_steps^-1.5, which meets step^-0.5 at "
            "step = warmup_steps.", partial(_noam, warmup_power=-0.5)),
    replace(_WARMUP_EXPONENT, wrong=partial(_noam, warmup_power=-1.0)),
    Mistake("max-not-min", "max instead of min: the rate is the smaller of step^-0.5 and step * warmup_steps^-1.5.",
            partial(_noam, pick=max)),
    Mistake("no-warm-up", "there is no warm-up: the rate is the smaller of step^-0.5 and step * warmup_steps^-1.5, "
            "so it rises linearly until step = warmup_steps.", partial(_noam, pick=lambda decay, warm_up: decay)),
    Mistake("no-decay", "the rate never decays: it is the smaller of step^-0.5 and step * warmup_steps^-1.5, so "
            "it falls as step^-0.5 after step = warmup_steps.", partial(_noam, pick=lambda decay, warm_up: warm_up)),
    Mistake("decays-as-1-over-step",
            "the rate decays as 1 / step: it decays as step^-0.5, the inverse square root.",
            partial(_noam, decay=-1.0)),
]


@exercise("12.2", title="The warm-up / inverse-square-root learning rate", points=1)
def check_noam(answer) -> int:
    return check_function(answer, _noam, _noam_cases(), NOAM_MISTAKES, differ=_compare_rate)


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
    """GNMT's length penalty, ((5 + |Y|) / 6)^alpha."""
    return ((5 + length) / 6) ** alpha


def _beam(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha, *, penalty=_penalty, space="log",
          finished="stay", eos_counted=True, eos_scored=True, per_hypothesis=None, prune=True, during_search=True,
          stop="all", final="normalised", steps=0, trace=None):
    """The reference beam search (every default), and with one argument changed, each classic mistake.

    A hypothesis is (tokens from <bos>, score, finished, |Y|), ranked by score / penalty(|Y|, alpha). ``finished``
    says what becomes of a hypothesis that ends with <eos>: carried over unchanged ("stay"), extended like the others
    ("extended"), set aside while the beam is refilled with unfinished ones until beam_size are set aside
    ("set-aside", as some libraries do), or dropped ("dropped").
    ``trace`` (a list) collects, at every step and at the final choice, the gap between the last candidate kept and
    the first one dropped: the margins by which the checks' cases separate the mistakes.
    """
    beam = [((bos_id,), 1.0 if space == "product" else 0.0, False, 0)]
    if not prune:  # each hypothesis keeps its beam_size best continuations, and the beam grows
        per_hypothesis = beam_size
    done = []  # the hypotheses set aside ("set-aside")

    def rank(h, normalised=True):
        return h[1] / penalty(h[3], alpha) if normalised else h[1]

    def keep(ranked, k):  # the k best of ranked, a list of (value, hypothesis) sorted best first
        if trace is not None and len(ranked) > k:
            trace.append(ranked[k - 1][0] - ranked[k][0])
        return [h for _, h in ranked[:k]]

    for t in range(1, max_len + steps + 1):
        candidates = []
        for tokens, score, ended, length in beam:
            if ended:  # carried over unchanged
                candidates.append((tokens, score, True, length))
                continue
            log_p = next_log_probs(list(tokens)).tolist()
            options = sorted(range(len(log_p)), key=lambda v: -log_p[v])
            extensions = []
            for v in options[:per_hypothesis]:
                p = log_p[v] if eos_scored or v != eos_id else 0.0
                new = {"log": score + p, "product": score * math.exp(p), "sum": score + math.exp(p)}[space]
                extensions.append((tokens + (v,), new, v == eos_id and finished != "extended",
                                   t - 1 if v == eos_id and not eos_counted else t))
            if per_hypothesis is not None and trace is not None and per_hypothesis < len(options):
                trace.append(log_p[options[per_hypothesis - 1]] - log_p[options[per_hypothesis]])
            candidates += extensions
        if finished == "dropped":
            candidates = [c for c in candidates if not c[2]]
        ranked = sorted(((rank(c, during_search), c) for c in candidates), key=lambda pair: -pair[0])
        if not prune:
            beam = [c for _, c in ranked]
        elif finished == "set-aside":
            done += [c for c in keep(ranked, beam_size) if c[2]]
            beam = keep([(v, c) for v, c in ranked if not c[2]], beam_size)
            if len(done) >= beam_size:
                break
        else:
            beam = keep(ranked, beam_size)
        if stop == "first" and beam[0][2]:
            return list(beam[0][0][1:])
        if all(h[2] for h in beam) or (stop == "any" and any(h[2] for h in beam)):
            break
    pool = done + beam
    if final == "finished-first" and any(h[2] for h in pool):
        pool = [h for h in pool if h[2]]
    best = keep(sorted(((rank(h, final != "raw"), h) for h in pool), key=lambda pair: -pair[0]), 1)[0]
    return list(best[0][1:])


_WITH_PENALTY = "rank hypotheses by log P(Y) / ((5 + |Y|) / 6)^alpha"
_CARRIED = "carry it over unchanged (same log P, same |Y|), in the beam, where it keeps its place"
BEAM_MISTAKES = [
    Mistake("no-length-penalty", f"no length penalty: {_WITH_PENALTY}, during the search and at the end (a "
            "finished hypothesis carried over keeps its |Y|: if its |Y| grows with every step, all hypotheses have the "
            "same length and the penalty changes nothing).",
            partial(_beam, penalty=lambda n, alpha: 1.0)),
    Mistake("finished-extended",
            "finished hypotheses are extended: a hypothesis that ends with <eos> is finished; carry it over "
            "unchanged (same score, same |Y|) and stop when every hypothesis in the beam is finished.",
            partial(_beam, finished="extended")),
    Mistake("finished-set-aside",
            f"finished hypotheses are set aside and the beam refilled with unfinished ones: {_CARRIED} among the "
            "beam_size best candidates.", partial(_beam, finished="set-aside")),
    Mistake("finished-dropped", f"finished hypotheses are dropped: a hypothesis that ends with <eos> is finished; "
            f"{_CARRIED}.", partial(_beam, finished="dropped")),
    Mistake("probabilities-multiplied",
            "the scores are probabilities multiplied together: add the log-probabilities, log P(Y) = sum of "
            "log p(y_t | ...), and divide that sum by the length penalty.", partial(_beam, space="product")),
    Mistake("probabilities-added",
            "the scores are probabilities added together: add the log-probabilities, log P(Y) = sum of "
            "log p(y_t | ...), and divide that sum by the length penalty.", partial(_beam, space="sum")),
    Mistake("penalty-multiplies",
            "log P(Y) is multiplied by the length penalty: divide it by ((5 + |Y|) / 6)^alpha (log P is negative, "
            "so dividing by a penalty above 1 is what favours longer hypotheses).",
            partial(_beam, penalty=lambda n, alpha: 1 / _penalty(n, alpha))),
    Mistake("penalty-without-five", "the length penalty is |Y|^alpha: GNMT's is ((5 + |Y|) / 6)^alpha.",
            partial(_beam, penalty=lambda n, alpha: n**alpha)),
    Mistake("penalty-parentheses", "the length penalty is (5 + |Y| / 6)^alpha: GNMT's is ((5 + |Y|) / 6)^alpha.",
            partial(_beam, penalty=lambda n, alpha: (5 + n / 6) ** alpha)),
    Mistake("length-counts-bos", "|Y| counts <bos>: it counts the tokens written after <bos>, the <eos> included.",
            partial(_beam, penalty=lambda n, alpha: _penalty(n + 1, alpha))),
    Mistake("length-without-eos", "|Y| leaves out the <eos>: it counts every token after <bos>, the <eos> included.",
            partial(_beam, eos_counted=False)),
    Mistake("eos-not-scored", "the <eos> token's log-probability is not added: log P(Y) sums the log-probabilities "
            "of all its tokens, the <eos> included.", partial(_beam, eos_scored=False)),
    Mistake("greedy-per-hypothesis",
            "this is greedy decoding: each hypothesis keeps only its best continuation, or the beam started with "
            "beam_size copies of [bos_id], which stay copies of one hypothesis. Start from one hypothesis, consider "
            "every token for every hypothesis, and keep the beam_size best of all the candidates.",
            partial(_beam, per_hypothesis=1)),
    Mistake("no-pruning-across-hypotheses",
            "each hypothesis keeps its own beam_size best continuations, so the beam grows: pool the candidates of "
            "all hypotheses and keep the beam_size best of them all.",
            partial(_beam, prune=False)),
    Mistake("final-choice-unpenalised",
            "the final choice ignores the length penalty: return the hypothesis of the beam with the best "
            "log P(Y) / ((5 + |Y|) / 6)^alpha, not the best log P(Y).", partial(_beam, final="raw")),
    Mistake("final-choice-prefers-finished",
            "the final choice prefers finished hypotheses: return the kept hypothesis with the best score, finished "
            "or not (one that wrote max_len tokens without <eos> competes too).",
            partial(_beam, final="finished-first")),
    Mistake("penalty-only-at-end", "the length penalty is applied only at the end: rank the candidates by "
            "log P(Y) / ((5 + |Y|) / 6)^alpha at every step too.", partial(_beam, during_search=False)),
    Mistake("stops-too-early",
            "the search stops as soon as the best hypothesis is finished: go on until every hypothesis in the beam "
            "is finished (or max_len tokens are written), then return the best.", partial(_beam, stop="first")),
    Mistake("stops-when-one-finishes",
            "the search stops as soon as one hypothesis is finished: go on until every hypothesis in the beam "
            "is finished (or max_len tokens are written), then return the best.", partial(_beam, stop="any")),
    Mistake("one-step-short", "the search writes one token too few: it runs up to max_len steps, one token each.",
            partial(_beam, steps=-1)),
    Mistake("one-step-long", "the search writes one token too many: it runs up to max_len steps, one token each.",
            partial(_beam, steps=1)),
    Mistake("bos-kept", "the result starts with <bos>: return the tokens after it.", lambda *a: [a[1], *_beam(*a)]),
    Mistake("eos-left-out", "the <eos> is left out: a finished hypothesis ends with it.",
            lambda *a: [t for t in _beam(*a) if t != a[2]]),
]

#: The cases: (label, seed, |V|, sharpness, eos_bias, eos_slope, beam_size, max_len, alpha), the scripted model's
#: parameters first. The first five were chosen, greedily, among 3,000 random scripted models so that together they
#: separate every pair of BEAM_MISTAKES and the right search (each mistake's results on the cases differ from every
#: other mistake's, so a named mistake is the learner's own), and reject each mistake on at least two cases: in them
#: finished and unfinished hypotheses compete at the end, the length penalty flips rankings, and pruning across
#: hypotheses matters. The last three are edge cases: no length penalty, no hypothesis finished at max_len, and
#: greedy decoding. In every case, at every step of the right search and of every mistaken one, the last candidate
#: kept ranks at least 3e-3 above the first one dropped (BEAM_MARGINS: less for the mistakes that rank
#: probabilities, still far above float rounding), so rounding cannot flip a choice. The hidden cases (--cases-seed)
#: relabel the vocabulary, which changes no choice. tests/test_exercise_checks.py proves all of this.
BEAM_MARGINS = {"reference": 3e-3, "probabilities-multiplied": 1e-7, "probabilities-added": 1e-4,
                "penalty-parentheses": 2e-4}  # the smallest margin of each search over the cases; 1e-3 if not here
BEAM_CASES = [
    ("beam_size=3, alpha=3", 406811, 7, 1.0, 0.0, 1.0, 3, 4, 3.0),
    ("|V|=7, alpha=3", 462, 7, 2.0, 0.0, 1.0, 2, 4, 3.0),
    ("max_len=6, alpha=3", 561992, 6, 2.0, -2.0, 0.3, 2, 6, 3.0),
    ("beam_size=3, alpha=1.5", 318463, 7, 1.5, -1.0, 0.0, 3, 4, 1.5),
    ("|V|=5, max_len=3, alpha=2", 267459, 5, 1.5, -1.0, 1.0, 2, 3, 2.0),
    ("alpha=0, no length penalty", 0, 6, 1.5, -0.5, 0.3, 2, 5, 0.0),
    ("nothing finishes within max_len", 339563, 6, 1.5, -6.0, 0.0, 2, 4, 1.0),
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


def _compare_hypothesis(expected: list[int], got, case: Case) -> str | None:
    """None if the learner's hypothesis is the expected one, else expected and got, each with its log P and score."""
    tokens = _tokens_of(got)
    if isinstance(tokens, str):
        return tokens
    if tokens == expected:
        return None
    return (f"expected {expected}{_describe_score(case, expected)}\n"
            f"  got      {tokens}{_describe_score(case, tokens)}")


@exercise("12.3", title="Beam search with a length penalty", points=3)
def check_beam_search(answer) -> int:
    return check_function(answer, _beam, _beam_cases(), BEAM_MISTAKES, differ=_compare_hypothesis)
