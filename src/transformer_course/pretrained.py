"""The course's pretrained character-level GPT of Shakespeare (lesson 13): its vocabulary and encoding, the loss
it was trained and measured with, and the shipped checkpoint.

The checkpoint is the package's :class:`~transformer_course.models.DecoderOnlyLM` trained on the train plays by
``tools/train_checkpoint.py`` (``checkpoints/shakespeare/README.md`` says how). Its files ship in the package:
``model.pt`` (the float32 state_dict), ``vocab.txt`` (one character per line, as a JSON string) and ``log.json``
(the configuration and the training log). :func:`shakespeare_checkpoint` checks ``model.pt`` against
:data:`CHECKPOINT_SHA256` before it reads it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

import torch
import torch.nn.functional as F

from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

CHECKPOINT_DIR = "checkpoints/shakespeare"
CHECKPOINT_SHA256 = "to be set when the checkpoint is trained"


# --- characters <-> ids ------------------------------------------------------------------------------------

def character_vocabulary(train_text: str, *held_out: str) -> tuple[str, ...]:
    """The characters of ``train_text``, sorted: the model's ids (no padding or special token is needed).

    Raises ValueError if a ``held_out`` text has a character that ``train_text`` lacks.
    """
    vocabulary = tuple(sorted(set(train_text)))
    for i, text in enumerate(held_out):
        unknown = sorted(set(text) - set(vocabulary))
        if unknown:
            raise ValueError(f"held-out text {i} has characters the training text lacks: {unknown}")
    return vocabulary


def encode(text: str, vocabulary: Sequence[str]) -> torch.Tensor:
    """``text`` -> ids ``(len(text),)`` int64, the index of each character in ``vocabulary``.

    Raises ValueError naming the characters of ``text`` that ``vocabulary`` lacks.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    unknown = sorted(set(text) - set(vocabulary))
    if unknown:
        raise ValueError(f"text has characters outside the vocabulary: {unknown}")
    if text.isascii() and all(len(c) == 1 and c.isascii() for c in vocabulary):
        # a table indexed by the character's code: 4 M characters in a few tens of milliseconds
        table = torch.full((128,), -1, dtype=torch.long)
        table[[ord(c) for c in vocabulary]] = torch.arange(len(vocabulary))
        return table[torch.frombuffer(bytearray(text.encode("ascii")), dtype=torch.uint8).long()]
    index = {c: i for i, c in enumerate(vocabulary)}
    return torch.tensor([index[c] for c in text], dtype=torch.long)


def decode(ids, vocabulary: Sequence[str]) -> str:
    """ids (a 1-D tensor or a sequence of ints) -> the text. Raises ValueError for an id outside the vocabulary."""
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < len(vocabulary)]
    if bad:
        raise ValueError(f"ids must be integers in [0, {len(vocabulary)}), got {bad[:5]}")
    return "".join(vocabulary[i] for i in ids)


# --- training and measuring on windows of text -------------------------------------------------------------

def window_batch(ids: torch.Tensor, block: int, batch_size: int, seed: int) -> Callable[[int], tuple]:
    """``batch(i)``: ``batch_size`` random windows of ``ids``, inputs ``(B, block)`` and targets (the next
    characters) ``(B, block)``; batch i draws its offsets from its own generator seeded with ``(seed, i)``, so a
    run is the same whatever else draws random numbers."""
    def batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + i)
        starts = torch.randint(len(ids) - block, (batch_size,), generator=generator)
        windows = ids[starts[:, None] + torch.arange(block + 1)]  # (B, block + 1)
        return windows[:, :-1], windows[:, 1:]
    return batch


def lm_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of the next token at every position of ``batch = (inputs, targets)``,
    both ``(B, n)``."""
    inputs, targets = batch
    logits = model(inputs)  # (B, n, |V|)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def held_out_loss(model: torch.nn.Module, ids: torch.Tensor, block: int, windows: int) -> float:
    """Mean next-token cross-entropy (nats) over ``windows`` evenly spaced windows of ``block`` tokens of ``ids``
    (the same windows every time, so that two evaluations compare)."""
    starts = torch.linspace(0, len(ids) - block - 1, windows).long()
    data = ids[starts[:, None] + torch.arange(block + 1)]  # (windows, block + 1)
    total = 0.0
    with torch.no_grad():
        for i in range(0, windows, 64):
            chunk = data[i:i + 64]
            total += lm_loss(model, (chunk[:, :-1], chunk[:, 1:])).item() * len(chunk)
    return total / windows


# --- the shipped checkpoint --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checkpoint:
    """What the shipped files hold."""

    config: DecoderOnlyConfig  # the model's configuration
    vocabulary: tuple[str, ...]  # id -> character
    state_dict: dict[str, torch.Tensor]  # DecoderOnlyLM(config).state_dict()'s names and shapes, float32
    log: dict  # the training log: losses, seconds, seed, torch, CPU, sha256


def _checkpoint_files(folder=None) -> dict:
    folder = resources.files("transformer_course").joinpath(CHECKPOINT_DIR) if folder is None else folder
    return {name: folder.joinpath(name) for name in ("model.pt", "vocab.txt", "log.json")}


@functools.cache
def _load(folder=None, expected_sha256: str | None = None) -> Checkpoint:
    import io

    files = _checkpoint_files(folder)
    expected = CHECKPOINT_SHA256 if expected_sha256 is None else expected_sha256
    weights = files["model.pt"].read_bytes()
    digest = hashlib.sha256(weights).hexdigest()
    if digest != expected:
        raise ValueError(f"the checkpoint {files['model.pt']} has sha256 {digest}, expected {expected}: the file "
                         "is damaged or not the course's; rebuild it with tools/train_checkpoint.py")
    vocabulary = tuple(json.loads(line) for line in files["vocab.txt"].read_text().splitlines())
    log = json.loads(files["log.json"].read_text())
    state_dict = torch.load(io.BytesIO(weights), map_location="cpu", weights_only=True)
    return Checkpoint(DecoderOnlyConfig(**log["config"]), vocabulary, state_dict, log)


def shakespeare_checkpoint() -> Checkpoint:
    """The course's checkpoint, read from the package's files after checking ``model.pt``'s sha256.

    Raises ValueError naming the file if its hash is not :data:`CHECKPOINT_SHA256`. The returned tensors are
    shared between calls: copy them before changing them in place.
    """
    return _load()


def shakespeare_gpt() -> DecoderOnlyLM:
    """A new :class:`DecoderOnlyLM` with the course's checkpoint loaded, in eval mode."""
    checkpoint = shakespeare_checkpoint()
    model = DecoderOnlyLM(checkpoint.config)
    model.load_state_dict(checkpoint.state_dict)
    return model.eval()
