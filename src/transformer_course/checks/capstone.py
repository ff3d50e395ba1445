"""The capstone of lesson 12 (exercise 12.4): the learner's own English -> German number-word translator, graded
by what it achieves on numbers it never saw.

The learner gets the training pairs (and the validation pairs, to watch their own progress) and the two
tokenizers from :func:`capstone_task`, builds a model of their choice, trains it in the notebook, and hands in the
trained ``nn.Module``: ``model(src, tgt)`` maps source ids ``(B, n_enc)`` (English characters) and decoder input
ids ``(B, n_dec)`` (German BPE tokens, starting with ``<bos>``) to logits ``(B, n_dec, |V|)``.

The check translates :data:`SAMPLE` numbers of the *test* split (drawn with ``core.case_seed`` from one half of it: the
grader's ``--cases-seed`` draws its sample from the other half, so no public number is a hidden one) with the package's
own :func:`~transformer_course.generation.greedy_decode`, and scores the translations against ``num2words``: exact match
and chrF (``sacrebleu``). The points come in bands (:data:`BANDS`): full marks need exact match >= 95%.

Graded outside the kernel: a model that is exactly the package's :class:`~transformer_course.models.Seq2SeqTransformer`
leaves the learner's kernel as plain data, its configuration and its weights (:func:`model_as_data`); the grader
rebuilds it from its own copy of the package (:func:`model_from_data`) and runs this check on it in its own process
(``grading/replay.py``), where no learner code runs: an instance whose ``forward`` was replaced, or a model that
reaches num2words however it can, is graded on its weights alone. Any other model (the learner's own module, a
wrapper of ``nn.Transformer``, a subclass) can only be run in the kernel: it is called once, through
``core.call_answer``, by a function that decodes the held-out sources and returns the token ids; the grader scores
those ids again against references it computes itself, and the gradebook row asks the instructor to review the code.

Not a lookup, in the kernel: while the model translates, ``num2words`` and the course's number-word generator raise
(:func:`library_switched_off`), so a "translator" whose forward reads the English and calls the library fails
with a message that says so (and the grader flags code that imports them: ``grading/prepare.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from transformer_course import _validate, data, training
from transformer_course.checks.core import (
    Case,
    CheckFailed,
    Mistake,
    Score,
    call_answer,
    case_half,
    case_seed,
    exercise,
    require_trained_model,
)
from transformer_course.generation import greedy_decode
from transformer_course.models import Seq2SeqConfig, Seq2SeqTransformer
from transformer_course.tokenization import BPETokenizer, train_bpe

LANG = "de"
TARGET_VOCAB = 64  # BPE tokens of the German targets, as in lesson 12
SAMPLE = 240  # held-out numbers translated per check, of the 250 (public) or 249 (hidden) in its half of the test split
MAX_TOKENS = 24  # decoding stops here; the longest German number up to 9 999 is 12 tokens
SAMPLE_SEED = 1204
POINTS = 4
BOS_ID, EOS_ID = 1, 2  # of both tokenizers (data.CharTokenizer, tokenization.BPETokenizer)
# (points, metric, threshold), best first: the first band an answer reaches gives its points. Full marks sit below
# what a reasonable recipe reaches under the grader's limits (one thread, 60 s a cell): the solution's answer
# (lesson 12's model size, label smoothing, 200 steps of 64 pairs with warm-up and cosine) is measured by
# `benchmarks/learning.py capstone`, whose comments hold the runs.
BANDS = ((4, "exact match", 0.95), (3, "exact match", 0.80), (2, "exact match", 0.50), (1, "chrF", 80.0))


# --- the task's data --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapstoneTask:
    """What the learner trains on: English -> German pairs and the two tokenizers (the check uses the same)."""

    train_pairs: list[tuple[str, str]]  # 9 001 numbers
    valid_pairs: list[tuple[str, str]]  # 499 other numbers, to watch progress; the check uses neither split
    src_tok: data.CharTokenizer  # English characters
    tgt_tok: BPETokenizer  # German BPE, TARGET_VOCAB tokens, trained on the training targets


@functools.cache
def _splits() -> data.NumberSplits:
    return data.number_splits()


def _target_tokenizer() -> BPETokenizer:
    return train_bpe([german for _, german in data.number_examples(_splits().train, LANG)], TARGET_VOCAB)


def capstone_task() -> CapstoneTask:
    """The training and validation pairs and the tokenizers of the capstone (fresh objects on every call)."""
    splits = _splits()
    return CapstoneTask(data.number_examples(splits.train, LANG), data.number_examples(splits.valid, LANG),
                        data.number_tokenizers(LANG)[0], _target_tokenizer())


@functools.cache
def _tokenizers() -> tuple[data.CharTokenizer, BPETokenizer]:
    """The check's own tokenizers, built once per process (never the objects handed to the learner)."""
    return data.number_tokenizers(LANG)[0], _target_tokenizer()


def held_out_numbers() -> list[int]:
    """The numbers the check translates: SAMPLE numbers of the test split (never in the learner's pairs), the
    public ones from one half of it and the hidden ones (a cases seed) from the other (``core.case_half``)."""
    return sorted(random.Random(case_seed(SAMPLE_SEED)).sample(list(case_half(sorted(_splits().test))), SAMPLE))


def _german(n: int) -> str:
    """The reference translation, from num2words itself (uncached: the kernel's number-word cache never holds it)."""
    return data.number_words.__wrapped__(n, LANG)


# --- the library, switched off while the learner's model translates -----------------------------------------

SWITCHED_OFF = "num2words and the course's number-word generator are switched off while the check translates"


# The stand-ins below replace the __code__ of functions that live in num2words, so they run with num2words'
# globals: they cannot name SWITCHED_OFF, and spell its text out instead.
def _raise_switched_off(*args, **kwargs):
    raise RuntimeError("num2words and the course's number-word generator are switched off while the check translates")


class _WithClassCell:
    def switched_off(*args, **kwargs):  # a method that uses super() has a __class__ cell: this code has one too
        __class__  # noqa: B018
        raise RuntimeError("num2words and the course's number-word generator are switched off while the check "
                           "translates")


_REPLACEMENTS = {(): _raise_switched_off.__code__, ("__class__",): _WithClassCell.switched_off.__code__}


def _generator_functions() -> list[types.FunctionType]:
    """Every function of num2words (module functions and methods) and the course's number-word functions."""
    found = [data.number_words.__wrapped__, data.number_examples]
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "num2words" or name.startswith("num2words.")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, types.FunctionType) and value.__module__ == name:
                found.append(value)
            elif isinstance(value, type) and value.__module__ == name:
                for attribute in vars(value).values():
                    if isinstance(attribute, staticmethod | classmethod):
                        attribute = attribute.__func__
                    if isinstance(attribute, types.FunctionType):
                        found.append(attribute)
    return list(dict.fromkeys(found))


class _RefuseImport:
    """A meta path finder that refuses to import num2words afresh (after ``del sys.modules[...]``, or a reload)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "num2words" or name.startswith("num2words."):
            raise ImportError(SWITCHED_OFF)
        return None


@contextlib.contextmanager
def library_switched_off() -> Iterator[None]:
    """Inside the block, every function of num2words and :func:`data.number_words` / :func:`data.number_examples`
    raises RuntimeError(SWITCHED_OFF), however it is reached (a module attribute, a name bound earlier, a
    converter object), num2words cannot be imported afresh, and the number-word cache is empty. Everything is
    restored on leaving the block. Best effort against code that sets out to get round it (which the grader's
    review notes flag): it stops a model that simply calls the library."""
    swapped = []
    refuse = _RefuseImport()
    try:
        sys.meta_path.insert(0, refuse)
        data.number_words.cache_clear()
        for function in _generator_functions():
            replacement = _REPLACEMENTS.get(function.__code__.co_freevars)
            if replacement is not None:
                swapped.append((function, function.__code__))
                function.__code__ = replacement
        yield
    finally:
        for function, code in reversed(swapped):
            function.__code__ = code
        if refuse in sys.meta_path:
            sys.meta_path.remove(refuse)


def _called_the_library(error: BaseException | None) -> bool:
    seen = 0
    while error is not None and seen < 20:
        if SWITCHED_OFF in str(error):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


# --- decoding the learner's model with the package's greedy_decode -----------------------------------------


class _BadLogits(Exception):
    def __init__(self, message: str, mistake: Mistake | None = None):
        super().__init__(message)
        self.message, self.mistake = message, mistake


def _logits_problem(logits, batch: int, n_dec: int, vocab: int) -> _BadLogits | None:
    expected = f"(B, n_dec, |V|) = ({batch}, {n_dec}, {vocab})"
    if type(logits) not in (torch.Tensor, nn.Parameter):
        return _BadLogits(f"model(src, tgt) must return the logits as a tensor {expected}, got {type(logits).__name__}")
    shape = tuple(logits.shape)
    if shape != (batch, n_dec, vocab):
        mistake = None
        if shape == (n_dec, batch, vocab):
            mistake = Mistake("sequence-first-logits", "the logits are sequence-first (n_dec, B, |V|): return them "
                              "batch-first, (B, n_dec, |V|).")
        elif shape == (batch, vocab):
            mistake = Mistake("last-position-only", "only the last position's logits are returned: return one row "
                              "of scores per decoder position.")
        elif len(shape) == 3 and shape[:2] == (batch, n_dec):
            mistake = Mistake("wrong-vocabulary", f"the output head scores {shape[2]} classes: it must score the "
                              f"{vocab} tokens of the German vocabulary, len(tgt_tok) (not the source vocabulary).")
        return _BadLogits(f"model(src, tgt) returned logits of shape {shape}, expected {expected}: one score per "
                          f"target token (|V| = len(tgt_tok) = {vocab}) at each decoder position", mistake)
    if not logits.is_floating_point():
        return _BadLogits(f"model(src, tgt) returned logits of dtype {logits.dtype}, expected floating point")
    if torch.isnan(logits).any():
        return _BadLogits(
            f"model(src, tgt) returned NaN logits ({int(torch.isnan(logits).sum())} of {logits.numel()} values)",
            Mistake("training-diverged", "the training diverged (a NaN loss): lower the learning rate, keep gradient "
                    "clipping, and check that no -inf reaches a softmax row that masks every position."))
    return None


class _ForwardDecoder(Seq2SeqTransformer):
    """Any ``model(src, tgt) -> logits`` behind the interface that :func:`greedy_decode` drives: the "memory" is
    the source itself, and every step runs the whole model on the source and the tokens written so far.

    Only ``encode``, ``source_mask``, ``decode`` and ``config.tgt_vocab_size`` are used by greedy_decode; the
    model's own layers are those of the learner's module (Seq2SeqTransformer.__init__ is not run)."""

    def __init__(self, model: nn.Module, vocab: int):
        nn.Module.__init__(self)
        self.model = model
        self.config = types.SimpleNamespace(tgt_vocab_size=vocab)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return src

    def source_mask(self, src: torch.Tensor) -> None:
        return None

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: None) -> torch.Tensor:
        logits = self.model(memory, tgt)
        problem = _logits_problem(logits, tgt.shape[0], tgt.shape[1], self.config.tgt_vocab_size)
        if problem is not None:
            raise problem
        return logits


def _device_of(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def translator_ids(model, src: torch.Tensor, vocab: int, *, switch_off_library: bool = True) -> torch.Tensor:
    """``greedy_decode`` of ``model`` on ``src`` ``(B, n_enc)``: the generated ids ``(B, m)``, m <= MAX_TOKENS,
    rows that ended padded with ``<eos>``. Raises CheckFailed for a missing model, bad logits or a model that
    called the number-word library."""
    require_trained_model(model, "translator", "forward(src, tgt) returns logits (B, n_dec, |V|)")
    modes = {module: module.training for module in model.modules()}
    blocked = library_switched_off() if switch_off_library else contextlib.nullcontext()
    try:
        with blocked:
            ids = greedy_decode(_ForwardDecoder(model, vocab), src.to(_device_of(model)), BOS_ID, EOS_ID, MAX_TOKENS)
    except _BadLogits as bad:
        raise CheckFailed(bad.message, mistake=bad.mistake) from None
    except Exception as error:
        if _called_the_library(error):
            raise CheckFailed(
                "your model called num2words (or the course's number-word generator) while translating; both are "
                "switched off during the check.",
                mistake=Mistake("looks-up-translation", "the answer looks the translation up instead of computing "
                                "it: a translator must write the German with its own trained weights.")) from None
        raise
    finally:
        for module, mode in modes.items():
            module.training = mode
    return ids.detach().to("cpu")


# --- scoring ----------------------------------------------------------------------------------------------


def chrf(hypotheses: list[str], references: list[str]) -> float:
    """Corpus chrF (sacrebleu's defaults: character 6-grams, beta = 2), 0 .. 100."""
    from sacrebleu.metrics import CHRF

    return float(CHRF().corpus_score(hypotheses, [references]).score)


def evaluate_translator(model: nn.Module, pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Exact match (0 .. 1) and chrF (0 .. 100) of ``model`` on (English, German) ``pairs``, decoded greedily as
    the check does: ``evaluate_translator(translator, valid_pairs)``."""
    source, target = _tokenizers()
    src, _ = data.pad_batch([source.encode(english) for english, _ in pairs], source.pad_id)
    ids = translator_ids(model, src, len(target), switch_off_library=False)
    hypotheses = [target.decode(row) for row in ids]
    references = [german for _, german in pairs]
    return {"exact_match": training.exact_match(hypotheses, references), "chrf": chrf(hypotheses, references)}


def _rows(ids, n_rows: int, vocab: int) -> list[list[int]]:
    """The recorded ids as lists, after checking they are what greedy_decode returns (the replay reads a record)."""
    if type(ids) is not torch.Tensor or ids.dtype != torch.long or ids.dim() != 2 or ids.shape[0] != n_rows \
            or ids.shape[1] > MAX_TOKENS or (ids.numel() and not bool(((ids >= 0) & (ids < vocab)).all())):
        raise CheckFailed(f"the translations recorded are malformed: expected token ids ({n_rows}, <= {MAX_TOKENS}) "
                          f"in [0, {vocab}), got {_validate.describe(ids)}")
    return ids.tolist()


def band(exact: float, chrf_score: float) -> tuple[int, str]:
    """The points of an exact match (0 .. 1) and a chrF (0 .. 100), and what the next band needs."""
    measured = {"exact match": exact, "chrF": chrf_score}
    needs = ""
    for points, metric, threshold in BANDS:
        if measured[metric] >= threshold:
            return points, needs
        shown = f"{threshold:.0%}" if metric == "exact match" else f"{threshold:g}"
        needs = f"{points} point{'s' if points > 1 else ''} need{'s' if points == 1 else ''} {metric} >= {shown}"
    return 0, needs


def _examples(english: list[str], hypotheses: list[str], references: list[str], limit: int = 2) -> str:
    wrong = [(e, r, h) for e, h, r in zip(english, hypotheses, references, strict=True) if h != r][:limit]
    return "".join(f"\n  {e!r}: expected {r!r}, got {h[:80]!r}" for e, r, h in wrong)


# --- the model as plain data, rebuilt by the grader outside the learner's kernel -------------------------------

MAX_POSITION_VALUES = 2**24  # max_len x d_model: the positional table a rebuilt model computes (not a weight)
_PLAIN = (bool, int, float, str)


def model_as_data(answer) -> dict | None:
    """A model that is exactly the package's Seq2SeqTransformer (not a subclass), as plain data:
    ``{"config": {field: value}, "state": {name: CPU tensor}}``; None for any other answer, or for one the grader
    could not rebuild (an instance whose weights no longer fit its config): that one is decoded in the kernel."""
    if type(answer) is not Seq2SeqTransformer or type(getattr(answer, "config", None)) is not Seq2SeqConfig:
        return None
    try:
        config = {f.name: getattr(answer.config, f.name) for f in dataclasses.fields(Seq2SeqConfig)}
        state = {name: torch.Tensor.detach(t).to("cpu").clone() for name, t in answer.state_dict().items()}
        found = {"config": config, "state": state}
        model_from_data(found)  # what the grader will do: refused here, the model is decoded in the kernel instead
    except Exception:  # noqa: BLE001 - whatever the instance holds, the kernel's decoding remains
        return None
    return found


def _differences(expected: dict[str, tuple], got: dict[str, tuple]) -> str:
    missing, extra = sorted(expected.keys() - got.keys()), sorted(got.keys() - expected.keys())
    shapes = [f"{k} {got[k]} (expected {expected[k]})" for k in sorted(expected.keys() & got.keys())
              if got[k] != expected[k]]
    parts = [f"{what}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
             for what, names in (("missing", missing), ("unexpected", extra), ("other shapes", shapes)) if names]
    return "; ".join(parts)


def model_from_data(found) -> Seq2SeqTransformer:
    """The Seq2SeqTransformer that :func:`model_as_data` wrote, rebuilt from this process's package: the config's
    fields checked by Seq2SeqConfig, the weights loaded strictly (every name and shape), in eval mode on the CPU.

    Raises ValueError or TypeError naming what does not fit (a field, a key, a shape, a dtype, a size)."""
    if type(found) is not dict or set(found) != {"config", "state"}:
        got = f"the keys {sorted(map(str, found))}" if type(found) is dict else _validate.describe(found)
        raise ValueError(f"the model must be recorded as {{'config': ..., 'state': ...}}, got {got}")
    config, state = found["config"], found["state"]
    names = {f.name: () for f in dataclasses.fields(Seq2SeqConfig)}
    if type(config) is not dict:
        raise ValueError(f"the model's config must be a dict of Seq2SeqConfig's fields, got "
                         f"{_validate.describe(config)}")
    problems = [_differences(names, {str(k): () for k in config})]
    problems += [f"{k} is a {type(v).__name__}" for k, v in config.items() if type(v) not in _PLAIN][:3]
    if any(problems):
        raise ValueError("the model's config must hold exactly Seq2SeqConfig's fields, each a number, a string or a "
                         f"boolean ({'; '.join(p for p in problems if p)})")
    c = Seq2SeqConfig(**config)  # every field checked: a ValueError or TypeError names a bad one
    bad = next((f"{k!r}: {_validate.describe(v)}" for k, v in state.items() if type(k) is not str
                or type(v) is not torch.Tensor), None) if type(state) is dict else _validate.describe(state)
    if bad is not None:
        raise ValueError(f"the model's weights must be a dict of names to tensors, got {bad}")
    # Bounds that every real model meets (its embeddings and FFN matrices are among its weights), checked before
    # anything is built: a forged config cannot make the grader build a model larger than the record.
    values = sum(t.numel() for t in state.values())
    if c.num_encoder_layers + c.num_decoder_layers > len(state) or c.max_len * c.d_model > MAX_POSITION_VALUES \
            or c.d_model * max(c.src_vocab_size, c.tgt_vocab_size, c.d_ff) > values:
        raise ValueError(f"the model's config describes a larger model than its {values:,} recorded weights")
    with torch.random.fork_rng(devices=[]):  # its initial weights, overwritten below, draw nothing of the caller's
        model = Seq2SeqTransformer(c)
    differences = _differences({k: tuple(t.shape) for k, t in model.state_dict().items()},
                               {k: tuple(t.shape) for k, t in state.items()})
    if differences:
        raise ValueError(f"the model's weights do not fit its config ({differences})")
    dtypes = {t.dtype for t in state.values()}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise ValueError(f"the model's weights must share one floating-point dtype, got {sorted(map(str, dtypes))}")
    model.to(dtypes.pop()).load_state_dict(state, strict=True)
    return model.eval()


@exercise("12.4", title="Capstone: your own translator", points=POINTS, as_data=model_as_data,
          from_data=model_from_data)
def check_capstone(answer) -> Score:
    numbers = held_out_numbers()
    source, target = _tokenizers()
    english = [data.number_words(n, "en") for n in numbers]
    src, _ = data.pad_batch([source.encode(e) for e in english], source.pad_id)
    if getattr(answer, "replays_records", False):  # the grader's re-check: the answer returns the recorded ids
        translate = answer
    else:
        translate = functools.partial(translator_ids, answer, vocab=len(target))
        translate.__name__ = "your translator"
    rows = _rows(call_answer(translate, Case(f"{len(numbers)} held-out numbers", {"src": src})), len(numbers),
                 len(target))
    hypotheses = [target.decode(row) for row in rows]
    references = [_german(n) for n in numbers]
    right = sum(h == r for h, r in zip(hypotheses, references, strict=True))
    exact, chrf_score = right / len(numbers), chrf(hypotheses, references)
    points, needs = band(exact, chrf_score)
    ended = sum(EOS_ID in row for row in rows)
    if not ended:  # a translation that never ends is not a translation, whatever its chrF
        points, needs = 0, f"translations must end with <eos> within {MAX_TOKENS} tokens"
    measured = f"exact match {exact:.1%} ({right} of {len(numbers)} held-out numbers), chrF {chrf_score:.1f}"
    examples = _examples(english, hypotheses, references)
    if points == 0:
        if not ended:
            mistake = Mistake("untrained", "the model looks untrained: its output is far from German and never "
                              "ends. Is `translator` the model you trained?") if chrf_score < 50 else Mistake(
                "never-ends", "the model never writes <eos>, so every translation runs on to the limit of "
                f"{MAX_TOKENS} tokens: train on targets that end with <eos> (data.encode_pairs adds it).")
        elif len(set(hypotheses)) == 1:
            mistake = Mistake("ignores-source", "the model writes the same translation for every number: it ignores "
                              "its source (does the decoder attend to the encoder's output?).")
        else:
            mistake = Mistake("too-few-right", "too few translations are right: train longer, or a larger model, "
                              "within the time limit.")
        raise CheckFailed(f"0/{POINTS} points: {measured}; {needs}.{examples}", mistake=mistake)
    summary = measured + (f"; {needs}.{examples}" if needs else "")
    return Score(points, summary, len(numbers))
