"""Subword tokens: byte-pair encoding (BPE) trained with Hugging Face ``tokenizers``, the library real models use.

BPE starts from characters and repeatedly merges the most frequent adjacent pair of tokens into a new token,
until the vocabulary reaches ``vocab_size``. On German number words the first merges are "n"+"d" -> "nd",
"u"+"nd" -> "und", then "hundert", "tausend", "zig": frequent pieces become single tokens and a number
becomes a handful of tokens instead of 30-odd characters.

:class:`BPETokenizer` has the interface of :class:`~transformer_course.data.CharTokenizer` (``encode(text,
bos=, eos=)``, ``decode``, ``pad_id``, ``itos``, ``len``), so :func:`~transformer_course.data.encode_pairs`
and :func:`~transformer_course.generation.translate` work with either. Special ids: ``<pad>`` = 0,
``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3 (a character never seen in training).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from transformer_course import _validate
from transformer_course.data import BOS, EOS, PAD, content_ids

UNK = "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


class BPETokenizer:
    """A trained ``tokenizers.Tokenizer`` behind the course's tokenizer interface; make one with :func:`train_bpe`.

    Words are split at spaces, and each space is kept as the marker "▁" at the start of the next word
    (the ``Metaspace`` pre-tokenizer, as in SentencePiece), so :meth:`decode` gives back the text exactly.
    (The ``Whitespace`` pre-tokenizer drops the spaces and splits "forty-two" at the hyphen: its tokens
    cannot be joined back into the text.)
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.itos = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        if tuple(self.itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"the tokenizer's first ids must be {SPECIALS}, got {tuple(self.itos[:len(SPECIALS)])}")
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = range(len(SPECIALS))

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """Token ids of ``text``; characters never seen in training become ``<unk>``."""
        return [self.bos_id] * bos + self.tokenizer.encode(text).ids + [self.eos_id] * eos

    def tokens(self, text: str) -> list[str]:
        """The pieces ``text`` is cut into: ``["▁drei", "hundert", "zwei", "undvierzig"]``."""
        return self.tokenizer.encode(text).tokens

    def decode(self, ids) -> str:
        """The text of ``ids`` (a list or a 1-D tensor) up to the first ``<eos>``; ``<pad>``, ``<bos>`` skipped."""
        return self.tokenizer.decode(content_ids(self, ids), skip_special_tokens=False)


def train_bpe(texts: Sequence[str], vocab_size: int) -> BPETokenizer:
    """Learn a BPE vocabulary of at most ``vocab_size`` tokens (4 special, the characters of ``texts``, merges).

    Deterministic: the same texts give the same vocabulary and merges, also in another process (tested).
    A corpus with fewer distinct pairs than needed stops early, below ``vocab_size``.
    """
    vocab_size = _validate.integer("vocab_size", vocab_size, minimum=len(SPECIALS) + 1)
    if isinstance(texts, str) or not texts or not all(isinstance(t, str) for t in texts):
        raise TypeError(f"texts must be a non-empty sequence of strings, got {_validate.describe(texts)}")
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return BPETokenizer(tokenizer)


def first_merges(tokenizer: BPETokenizer, n: int = 20) -> list[tuple[str, str]]:
    """The first ``n`` merges learned, in order: ``[("n", "d"), ("u", "nd"), ...]`` (each pair becomes one token)."""
    n = _validate.integer("n", n, minimum=0)
    merges = json.loads(tokenizer.tokenizer.to_str())["model"]["merges"]  # pairs [a, b] (tokenizers >= 0.20)
    return [tuple(m) for m in merges[:n]]
