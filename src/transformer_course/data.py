"""Synthetic, offline data sets for the training lessons, generated deterministically from a seed.

- :class:`CharTokenizer`: characters to ids, with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2.
- The **date task** (lesson 09): human-written dates in many formats ("3 March 2021", "Mar 3, 2021",
  "03/03/21", "Wednesday, March 3rd 2021", ...) to ISO dates ("2021-03-03"). The train, validation
  and test splits share no calendar date, so a test date was never seen in any format.
- The **number-word task** (lesson 12): English number words to German or French, written by ``num2words``
  ("three hundred and forty-two" -> "dreihundertzweiundvierzig" / "trois cent quarante-deux"). The
  splits are by number, so a test number was never seen in training in either language.
- The **sorting task** (lesson 10): a decoder-only model reads ``"73915="`` and continues ``"13579"``.
- :func:`pad_batch`: lists of ids to a padded ``(B, n)`` tensor and the valid lengths ``(B,)``.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from num2words import num2words

from transformer_course import _validate

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


class CharTokenizer:
    """A character vocabulary. ids 0, 1, 2 are ``<pad>``, ``<bos>``, ``<eos>``; characters follow, sorted."""

    def __init__(self, characters: str | Sequence[str]):
        chars = sorted(set(characters))
        self.itos = [PAD, BOS, EOS, *chars]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        unknown = sorted({c for c in text if c not in self.stoi})
        if unknown:
            raise ValueError(f"text {text!r} has characters outside the vocabulary: {unknown}")
        return [self.bos_id] * bos + [self.stoi[c] for c in text] + [self.eos_id] * eos

    def decode(self, ids) -> str:
        """Characters up to the first ``<eos>``; ``<pad>`` and ``<bos>`` are skipped."""
        return "".join(self.itos[i] for i in content_ids(self, ids))


def content_ids(tokenizer, ids) -> list[int]:
    """``ids`` (a list or a 1-D tensor) up to the first ``<eos>``, without ``<pad>`` and ``<bos>``: what a
    tokenizer's ``decode`` turns into text. Raises ValueError for an id outside the tokenizer's vocabulary."""
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if not 0 <= i < len(tokenizer.itos):
            raise ValueError(f"ids must lie in [0, {len(tokenizer.itos)}) for this vocabulary, got {i}")
        if i == tokenizer.eos_id:
            break
        if i not in (tokenizer.pad_id, tokenizer.bos_id):
            out.append(i)
    return out


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``B`` id lists -> ids ``(B, n_max)`` padded with ``pad_id`` on the right, and lengths ``(B,)``."""
    if not sequences:
        raise ValueError("sequences must hold at least one sequence, got none")
    lengths = torch.tensor([len(s) for s in sequences])
    batch = torch.full((len(sequences), int(lengths.max())), pad_id, dtype=torch.long)
    for i, s in enumerate(sequences):
        batch[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return batch, lengths


# --- the date task ---------------------------------------------------------------------------------

FIRST_DATE, LAST_DATE = dt.date(1950, 1, 1), dt.date(2049, 12, 31)  # two-digit years map into this century


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


# Each format turns a date into text. Slashes are month first (US style); dots are day first.
DATE_FORMATS = {
    "3 March 2021": lambda d: f"{d.day} {d:%B %Y}",
    "Mar 3, 2021": lambda d: f"{d:%b} {d.day}, {d.year}",
    "March 3, 2021": lambda d: f"{d:%B} {d.day}, {d.year}",
    "03/03/21": lambda d: f"{d:%m/%d/%y}",
    "3/3/2021": lambda d: f"{d.month}/{d.day}/{d.year}",
    "03.03.2021": lambda d: f"{d:%d.%m.%Y}",
    "Wednesday, March 3rd 2021": lambda d: f"{d:%A, %B} {_ordinal(d.day)} {d.year}",
    "Wed 3 Mar 21": lambda d: f"{d:%a} {d.day} {d:%b %y}",
    "3rd of March, 2021": lambda d: f"{_ordinal(d.day)} of {d:%B}, {d.year}",
    "march 3 2021": lambda d: f"{d:%B}".lower() + f" {d.day} {d.year}",
    "2021, March 3": lambda d: f"{d.year}, {d:%B} {d.day}",
    "3 MAR 2021": lambda d: f"{d.day} {d:%b}".upper() + f" {d.year}",
}


@dataclass(frozen=True)
class DateSplits:
    """Disjoint calendar dates for training, validation and testing."""

    train: tuple[dt.date, ...]
    valid: tuple[dt.date, ...]
    test: tuple[dt.date, ...]


def date_splits(seed: int = 0, valid_fraction: float = 0.05, test_fraction: float = 0.05) -> DateSplits:
    """Shuffle every date from 1950 to 2049 and cut the list into three disjoint splits."""
    days = [FIRST_DATE + dt.timedelta(days=i) for i in range((LAST_DATE - FIRST_DATE).days + 1)]
    random.Random(seed).shuffle(days)
    n_valid, n_test = int(len(days) * valid_fraction), int(len(days) * test_fraction)
    return DateSplits(tuple(days[n_valid + n_test :]), tuple(days[:n_valid]), tuple(days[n_valid : n_valid + n_test]))


def date_examples(dates: Sequence[dt.date], n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs (human-written date, ISO date), each a random date of ``dates`` in a random format."""
    n = _validate.integer("n", n, minimum=1)
    rng = random.Random(seed)
    formats = list(DATE_FORMATS.values())
    pairs = []
    for _ in range(n):
        date = rng.choice(dates)
        pairs.append((rng.choice(formats)(date), date.isoformat()))
    return pairs


def date_tokenizers() -> tuple[CharTokenizer, CharTokenizer]:
    """Source tokenizer (every character any format uses) and target tokenizer (digits and '-')."""
    # Every month, every weekday and every ordinal suffix (1st 2nd 3rd 4th) in every format.
    sample = [fmt(dt.date(2021, m, d)) for fmt in DATE_FORMATS.values() for m in range(1, 13) for d in range(1, 8)]
    source = CharTokenizer("".join(sample) + "0123456789")
    return source, CharTokenizer("0123456789-")


def encode_pairs(pairs: Sequence[tuple[str, str]], source: CharTokenizer, target: CharTokenizer):
    """Pairs of strings -> (src ``(B, n_enc)``, decoder input ``(B, n_dec)``, decoder target ``(B, n_dec)``).

    Teacher forcing: the decoder reads ``<bos> y_1 .. y_m`` and must predict ``y_1 .. y_m <eos>``, the
    same sequence shifted left by one. Padding is ``<pad>`` = 0 everywhere, and each row of the input has
    exactly as many tokens as the same row of the target (the input never holds ``<eos>``).
    """
    src, _ = pad_batch([source.encode(x) for x, _ in pairs], source.pad_id)
    tgt = [target.encode(y, bos=True, eos=True) for _, y in pairs]
    dec_in, _ = pad_batch([ids[:-1] for ids in tgt], target.pad_id)
    dec_tgt, _ = pad_batch([ids[1:] for ids in tgt], target.pad_id)
    return src, dec_in, dec_tgt


# --- the number-word task ----------------------------------------------------------------------------

# Every character num2words writes for 0 .. 999 999 in each language (a million brings capitals and spaces
# into German: "eine Million"). German glues a number into one word: no spaces at all.
NUMBER_CHARS = {"en": " ,-adefghilnorstuvwxyz", "de": "abcdefghilnrstuvwzßöü", "fr": " -acdefghilmnopqrstuvxzé"}
MAX_NUMBER = 999_999


def _language(lang: str) -> str:
    if lang not in NUMBER_CHARS:
        raise ValueError(f"lang must be one of {sorted(NUMBER_CHARS)}, got {lang!r}")
    return lang


@functools.cache  # num2words takes ~0.1 ms a call; a lesson asks for the same numbers again
def number_words(n: int, lang: str) -> str:
    """``n`` (0 .. 999 999) in words, as ``num2words`` writes it in ``lang`` ("en", "de" or "fr").

    English uses "and" after hundreds and a comma after thousands, hyphens inside tens: 342 is "three
    hundred and forty-two", 1234 "one thousand, two hundred and thirty-four", 2001 "two thousand and
    one". German writes units before tens and glues everything into one word: 342 is
    "dreihundertzweiundvierzig" (three-hundred-two-and-forty), 1234 "eintausendzweihundertvierunddreißig".
    French counts in twenties from 70 to 99 and joins tens with hyphens or "et": 342 is "trois cent
    quarante-deux", 97 "quatre-vingt-dix-sept" (four-twenty-ten-seven), 71 "soixante et onze", 80
    "quatre-vingts" but 200 "deux cents" and 201 "deux cent un".
    """
    n = _validate.integer("n", n, minimum=0)
    if n > MAX_NUMBER:
        raise ValueError(f"n must be <= {MAX_NUMBER}, got {n}")
    _language(lang)
    return num2words(n, lang=lang)


@dataclass(frozen=True)
class NumberSplits:
    """Disjoint integers for training, validation and testing."""

    train: tuple[int, ...]
    valid: tuple[int, ...]
    test: tuple[int, ...]


def number_splits(low: int = 1, high: int = 9_999, seed: int = 0, valid_fraction: float = 0.05,
                  test_fraction: float = 0.05) -> NumberSplits:
    """Shuffle the integers ``low .. high`` (both included) and cut them into three disjoint splits."""
    low = _validate.integer("low", low, minimum=0)
    high = _validate.integer("high", high, minimum=low)
    if high > MAX_NUMBER:
        raise ValueError(f"high must be <= {MAX_NUMBER}, got {high}")
    numbers = list(range(low, high + 1))
    random.Random(seed).shuffle(numbers)
    n_valid, n_test = int(len(numbers) * valid_fraction), int(len(numbers) * test_fraction)
    return NumberSplits(tuple(numbers[n_valid + n_test :]), tuple(numbers[:n_valid]),
                        tuple(numbers[n_valid : n_valid + n_test]))


def number_examples(numbers: Sequence[int], lang: str = "de") -> list[tuple[str, str]]:
    """One pair (English words, words in ``lang``) per number, in the order given:
    ``number_examples([342], "de")`` is ``[("three hundred and forty-two", "dreihundertzweiundvierzig")]``.

    Lengths in characters for 1 .. 9 999 (min / mean / max): English 3 / 38.3 / 47, German 3 / 32.1 / 42,
    French 2 / 30.4 / 46; for 1 .. 999 999: English 3 / 60.3 / 73, German 4 / 50.9 / 65, French 2 / 48.5 / 71.
    """
    return [(number_words(n, "en"), number_words(n, lang)) for n in numbers]


def number_tokenizers(lang: str = "de") -> tuple[CharTokenizer, CharTokenizer]:
    """Character tokenizers for the number-word task: English source, ``lang`` target (``NUMBER_CHARS``)."""
    return CharTokenizer(NUMBER_CHARS["en"]), CharTokenizer(NUMBER_CHARS[_language(lang)])


# --- the sorting task --------------------------------------------------------------------------------

SORT_CHARS = "0123456789="


def sort_examples(n: int, seed: int = 0, min_len: int = 2, max_len: int = 8) -> list[tuple[str, str]]:
    """``n`` pairs (prompt, answer): ``"73915="`` and ``"13579"``, digit strings of min_len..max_len."""
    n = _validate.integer("n", n, minimum=1)
    min_len = _validate.integer("min_len", min_len, minimum=1)
    max_len = _validate.integer("max_len", max_len, minimum=min_len)
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(min_len, max_len)))
        pairs.append((digits + "=", "".join(sorted(digits))))
    return pairs


def encode_lm(pairs: Sequence[tuple[str, str]], tokenizer: CharTokenizer):
    """Prompt/answer pairs -> (inputs ``(B, n)``, targets ``(B, n)``) for next-token training.

    The sequence is ``<bos> prompt answer <eos>``; the targets are the inputs shifted left by one, with
    the prompt's positions set to ``<pad>`` so that the loss (which ignores padding) scores the answer only.
    """
    rows, targets = [], []
    for prompt, answer in pairs:
        ids = tokenizer.encode(prompt + answer, bos=True, eos=True)
        target = ids[1:]
        target[: len(prompt)] = [tokenizer.pad_id] * len(prompt)  # predicting the prompt is not the task
        rows.append(ids[:-1])
        targets.append(target)
    return pad_batch(rows, tokenizer.pad_id)[0], pad_batch(targets, tokenizer.pad_id)[0]


def batcher(*tensors: torch.Tensor, batch_size: int, pad_id: int = 0):
    """``batch(i)``: rows ``i*batch_size .. (i+1)*batch_size`` (wrapping around) of each tensor ``(N, n)``,
    with the columns that are padding in every row of the batch cut off (short batches run faster)."""
    batch_size = _validate.integer("batch_size", batch_size, minimum=1)
    n_rows = tensors[0].shape[0]
    if any(t.shape[0] != n_rows for t in tensors):
        raise ValueError(f"tensors must have the same number of rows, got {[t.shape[0] for t in tensors]}")

    def batch(i: int) -> tuple[torch.Tensor, ...]:
        rows = torch.arange(i * batch_size, (i + 1) * batch_size) % n_rows
        out = []
        for t in tensors:
            part = t[rows]
            used = (part != pad_id).any(0).nonzero()
            out.append(part[:, : int(used.max()) + 1] if len(used) else part)
        return tuple(out)

    return batch


# --- Shakespeare's plays (lesson 13) -----------------------------------------------------------------

# The cleaned corpus ships with the package; corpora/README.md says where it comes from and how it was cleaned,
# tools/build_shakespeare.py rebuilds it. The hash is that of the text, so a file gzipped again still loads.
SHAKESPEARE_FILE = "corpora/shakespeare.txt.gz"
SHAKESPEARE_SHA256 = "7465e2de07d07dfcc12c4e083a26c4bbdd6267da6b5db142f64b5bd6635864ef"
# Whole plays are held out, so that a line learned by heart cannot pass for generalisation. Each held-out split
# has a comedy and a tragedy or history of about the median length (128 756 characters); "train": the 32 others.
SHAKESPEARE_HELD_OUT = {"valid": ("julius_caesar", "twelfth_night"), "test": ("much_ado_about_nothing", "richard_ii")}
SHAKESPEARE_SPLITS = ("train", "valid", "test")


@functools.cache
def _shakespeare_corpus(path=None) -> dict[str, str]:
    """Every play of the corpus at ``path`` (default: the package's), by id, after checking its sha256."""
    import gzip
    import hashlib
    import re
    from importlib import resources

    source = resources.files("transformer_course").joinpath(SHAKESPEARE_FILE) if path is None else path
    data = gzip.decompress(source.read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHAKESPEARE_SHA256:
        raise ValueError(f"the Shakespeare corpus {source} has sha256 {digest}, expected {SHAKESPEARE_SHA256}: "
                         "the file is damaged or not the course's; rebuild it with tools/build_shakespeare.py")
    parts = re.split(r"(?m)^=== (\w+) ===\n", data.decode("ascii"))  # ["", id, text, id, text, ...]
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def shakespeare_plays(split: str = "train") -> dict[str, str]:
    """The plays of ``split`` ("train", "valid" or "test") by id (``"macbeth"``), in alphabetical order.

    Each text starts with the play's title in capitals; a speaker's name stands on its own line in capitals
    with a full stop ("MACBETH."), followed by the speech; paragraphs are separated by one blank line.
    ``list(shakespeare_plays("valid"))`` lists the plays of a split.
    """
    if split not in SHAKESPEARE_SPLITS:
        raise ValueError(f"split must be one of {SHAKESPEARE_SPLITS}, got {split!r}")
    plays = _shakespeare_corpus()
    held_out = {play for plays_of in SHAKESPEARE_HELD_OUT.values() for play in plays_of}
    keep = SHAKESPEARE_HELD_OUT[split] if split != "train" else [p for p in plays if p not in held_out]
    return {play: plays[play] for play in sorted(keep)}


def shakespeare(split: str = "train") -> str:
    """The text of the plays of ``split`` ("train", "valid" or "test"), one after the other, a blank line
    between two plays. ASCII; 4.25 M characters for "train", 0.23 M for "valid", 0.25 M for "test"."""
    return "\n".join(shakespeare_plays(split).values())
