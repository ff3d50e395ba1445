"""Answers to the capstone, exercise 12.4 (a trained English -> German number-word translator): known-wrong ones
with the hint their rejection must give, and a correct one that is not the lesson's recipe: PyTorch's own
nn.Transformer, really trained here.

The lesson's recipe is the solution's answer (solutions/12): nbval trains it, and tests/test_grading_release.py grades
the model it trained (stored by tests/stored_models.py) as the grader does, so it is not trained again here. The
other trained models are trained once, by tests/stored_models.py, and loaded from their stored weights; the answer
is ``Deferred`` (it needs the capstone's tokenizers: built once per session, when a test first needs it), and its
tests are marked slow. A weakly trained
model, which earns part of the points, is tested in tests/test_capstone.py (a partial score is neither a pass nor a
rejection).
"""

from __future__ import annotations

import torch
from num2words import CONVERTER_CLASSES
from torch import nn

from tests.answers import Deferred
from tests.stored_models import stored
from transformer_course import data, training
from transformer_course.checks import capstone
from transformer_course.models import Seq2SeqConfig, Seq2SeqTransformer
from transformer_course.positional import sinusoidal_encoding

N_SRC, N_TGT = len(data.number_tokenizers("de")[0]), capstone.TARGET_VOCAB  # without building the BPE here
EOS = capstone.EOS_ID


def tokenizers():
    """The capstone's tokenizers (the check's own, built once: about 2 s)."""
    return capstone._tokenizers()


def lesson_model(seed: int = 0, **options) -> Seq2SeqTransformer:
    """Lesson 12's model (pre-norm, d = 64), untrained."""
    torch.manual_seed(seed)
    config = dict(d_model=64, num_heads=4, d_ff=256, num_encoder_layers=2, num_decoder_layers=2, max_len=64,
                  norm_first=True) | options
    return Seq2SeqTransformer(Seq2SeqConfig(N_SRC, N_TGT, **config))


def train(model: nn.Module, steps: int, lr: float = 5e-3) -> nn.Module:
    """Label-smoothed cross-entropy, AdamW with warm-up and cosine decay, batches of 64: fixed steps, no stopping."""
    task = capstone.capstone_task()
    batch = data.batcher(*data.encode_pairs(task.train_pairs, task.src_tok, task.tgt_tok), batch_size=64)

    def loss_of(m, b):
        return training.label_smoothed_cross_entropy(m(b[0], b[1]), b[2], 0.1)

    training.train(model, batch, loss_of, max_steps=steps, lr=lr, warmup_steps=50, progress=False)
    return model


class TorchTransformer(nn.Module):
    """A different translator: PyTorch's own nn.Transformer (post-norm), learned source positions, its own head."""

    def __init__(self, d: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.src_embedding, self.tgt_embedding = nn.Embedding(N_SRC, d), nn.Embedding(N_TGT, d)
        self.src_positions = nn.Parameter(torch.randn(64, d) * 0.1)
        self.register_buffer("tgt_positions", sinusoidal_encoding(64, d))
        self.transformer = nn.Transformer(d, heads, layers, layers, 4 * d, dropout=0.0, batch_first=True)
        self.transformer.encoder.use_nested_tensor = False  # its prototype fast path only warns here
        self.head = nn.Linear(d, N_TGT)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        pad = src == 0
        x = self.src_embedding(src) + self.src_positions[: src.shape[1]]
        y = self.tgt_embedding(tgt) + self.tgt_positions[: tgt.shape[1]]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        out = self.transformer(x, y, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad)
        return self.head(out)


def train_torch_transformer() -> nn.Module:
    """One encoder and one decoder layer: half the two-layer model's training time. Measured with the check:
    exact match 97.9-99.6% (public and hidden cases, seeds 1-3, one and two threads) against 95% for full marks."""
    torch.manual_seed(1)
    return train(TorchTransformer(layers=1), 300, lr=3e-3)


def torch_transformer() -> nn.Module:
    """:func:`train_torch_transformer`'s model, from its stored weights (tests/stored_models.py)."""
    return stored("capstone_torch_transformer", TorchTransformer(layers=1))


def train_weak() -> nn.Module:
    """The lesson's model after 70 steps: it has learned some numbers, and earns part of the points."""
    return train(lesson_model(), 70)


def weak() -> nn.Module:
    """:func:`train_weak`'s model, from its stored weights."""
    return stored("capstone_weak", lesson_model())


# --- known-wrong answers ------------------------------------------------------------------------------------

_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
         "seventeen eighteen nineteen".split()
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i > 1}


def read_english(text: str) -> int:
    """'four thousand, two hundred and seven' -> 4207."""
    total, current = 0, 0
    for word in text.replace(",", " ").replace("-", " ").split():
        if word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current *= 100
        elif word == "thousand":
            total, current = total + current * 1000, 0
        elif word != "and":
            current += _UNITS.index(word)
    return total + current


class LookUp(nn.Module):
    """A "translator" that reads the English, asks a library for the German and writes its tokens: right on every
    number, as long as the library answers (``german(n)``)."""

    def __init__(self, german=None):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))
        self.german = german

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        source, target = tokenizers()
        logits = torch.zeros(src.shape[0], tgt.shape[1], N_TGT)
        for b, row in enumerate(src):
            n = read_english(source.decode(row))
            if self.german is None:
                import num2words  # at translation time

                words = num2words.num2words(n, lang="de")
            else:
                words = self.german(n)
            ids = target.encode(words, eos=True)
            for t in range(tgt.shape[1]):
                logits[b, t, ids[t] if t < len(ids) else EOS] = 10.0
        return logits


class Reshaped(nn.Module):
    def __init__(self, model: nn.Module, change):
        super().__init__()
        self.model, self.change = model, change

    def forward(self, src, tgt):
        return self.change(self.model(src, tgt))


class SameForEveryone(nn.Module):
    """Writes "einhundert" <eos> whatever the source: a decoder that ignores the encoder."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, src, tgt):
        ids = tokenizers()[1].encode("einhundert", eos=True)
        logits = torch.zeros(src.shape[0], tgt.shape[1], N_TGT)
        for t in range(tgt.shape[1]):
            logits[:, t, ids[min(t, len(ids) - 1)]] = 1.0
        return logits


def _no_eos(logits: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(torch.arange(logits.shape[-1]) == EOS, -1e9)


def never_stops() -> nn.Module:
    """Right words, then never <eos>: a table of every number's German, written before the check switches the
    library off, behind logits that can never choose <eos> (what a model trained on targets without it does)."""
    german = {n: data.number_words(n, "de") for n in range(1, 10_000)}
    return Reshaped(LookUp(german.__getitem__), _no_eos)


WRONG = {
    "nothing handed in": (None, "is not implemented yet"),
    "a function, not a module": (lambda src, tgt: torch.zeros(len(src), tgt.shape[1], N_TGT),
                                 "must be your trained model, an nn.Module"),
    "untrained": (lesson_model(), "looks untrained"),
    "num2words called in forward": (LookUp(), "looks the translation up"),
    "num2words's converter bound before the check": (LookUp(CONVERTER_CLASSES["de"].to_cardinal),
                                                    "looks the translation up"),
    "the course's generator bound before the check": (LookUp(lambda n: data.number_words(n, "de")),
                                                     "looks the translation up"),
    "sequence-first logits": (Reshaped(lesson_model(), lambda x: x.transpose(0, 1)), "sequence-first"),
    "a head over the source vocabulary": (Reshaped(lesson_model(), lambda x: x[..., :N_SRC]),
                                          f"scores {N_SRC} classes"),
    "NaN logits": (Reshaped(lesson_model(), lambda x: x * float("nan")), "training diverged"),
    "ignores the source": (SameForEveryone(), "same translation for every number"),
    "never writes <eos>": (Deferred(never_stops), "never writes <eos>"),
}

RIGHT = {
    "PyTorch's nn.Transformer, learned source positions": Deferred(torch_transformer),
}

EXERCISES = {"12.4": (WRONG, RIGHT)}
# The lesson's recipe, the other correct answer (see the module's docstring).
SOLUTION_COUNTS = {"12.4": "solutions/12_capstone_real_words.ipynb, ex4-answer"}
