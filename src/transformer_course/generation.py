"""Turning a trained model's logits into text: greedy decoding, beam search, temperature and top-k sampling,
KV caching.

Shapes: batch B, prompt length n, vocabulary |V|. ``logits`` are the model's unnormalised scores
``(B, |V|)`` for the next token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from transformer_course import _validate
from transformer_course.models import DecoderOnlyLM, Seq2SeqTransformer


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of ``logits`` ``(B, |V|)``; returns ids ``(B,)``.

    ``temperature`` divides the logits before the softmax (below 1 sharpens, above 1 flattens; 0 means
    greedy argmax); ``top_k`` keeps the k largest logits and renormalises over them.
    """
    _validate.tensor("logits", logits, min_dim=2, floating=True)
    temperature = _validate.real("temperature", temperature)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(-1)
    if top_k is not None:
        top_k = _validate.integer("top_k", top_k, minimum=1)
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """Run torch with ``n`` threads inside the block, restoring the process-wide setting after it, even on an
    error. A cached decoding step works on one position: its matrix products are too small to split across
    threads, and handing work between threads costs more than the arithmetic (a 2-3x slower step on 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Run the block with ``model`` in eval mode (no dropout), restoring its mode after it, even on an error."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def generate(model: DecoderOnlyLM, prompt: torch.Tensor, max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, use_cache: bool = True, eos_id: int | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Continue ``prompt`` ``(B, n)`` by ``max_new_tokens`` tokens; returns ``(B, n + max_new_tokens)``.

    Without the cache every step runs the model over the whole sequence so far (O(n^2) work per token
    in attention, O(n) in the rest); with it, a step feeds only the newest token, whose keys and values
    are appended to each layer's :class:`~transformer_course.multihead.KVCache`. Both give the same
    tokens. Rows that produced ``eos_id`` keep producing it.
    """
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    max_new_tokens = _validate.integer("max_new_tokens", max_new_tokens, minimum=0)
    total = prompt.shape[-1] + max_new_tokens
    if total > model.config.max_len:
        raise ValueError(f"prompt ({prompt.shape[-1]}) + max_new_tokens ({max_new_tokens}) = {total} exceeds "
                         f"the model's max_len={model.config.max_len}")
    tokens, cache = prompt, (model.new_cache() if use_cache else None)
    step_input = prompt
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    with _evaluating(model), contextlib.ExitStack() as settings:
        for step in range(max_new_tokens):
            if use_cache and step == 1:  # the prompt is done: from now on one position a step, on one thread
                settings.enter_context(_threads(1))
            logits = model(step_input if use_cache else tokens, cache=cache)[:, -1]  # (B, |V|)
            next_token = sample_next(logits, temperature, top_k, generator)  # (B,)
            if eos_id is not None:
                next_token = next_token.masked_fill(finished, eos_id)
                finished |= next_token == eos_id
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            step_input = next_token[:, None]
    return tokens


def _seq2seq_inputs(model, src, bos_id: int, eos_id: int, max_len: int) -> int:
    """Validate the arguments shared by :func:`greedy_decode` and :func:`beam_search`; returns ``max_len``."""
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"model must be a Seq2SeqTransformer, got {type(model).__name__}")
    _validate.integers("src", src, "token ids")
    if src.dim() != 2:
        raise ValueError(f"src must have shape (B, n_enc), got {tuple(src.shape)}")
    vocab = model.config.tgt_vocab_size
    for name, token in (("bos_id", bos_id), ("eos_id", eos_id)):
        if not 0 <= _validate.integer(name, token) < vocab:
            raise ValueError(f"{name} must lie in [0, {vocab}) (the target vocabulary), got {token}")
    return _validate.integer("max_len", max_len, minimum=1)


@torch.no_grad()
def greedy_decode(model: Seq2SeqTransformer, src: torch.Tensor, bos_id: int, eos_id: int,
                  max_len: int) -> torch.Tensor:
    """Translate ``src`` ``(B, n_enc)`` by taking the most likely token at each step until ``<eos>``.

    Returns the generated ids ``(B, m)`` without the leading ``<bos>`` (rows that finished early are
    padded with ``eos_id``). The attention weights behind a translation: run the model once over ``<bos>``
    and the ids it wrote inside :func:`~transformer_course.multihead.attention_weights`.
    """
    max_len = _seq2seq_inputs(model, src, bos_id, eos_id, max_len)
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1), then (B, 1 + m)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    with _evaluating(model):
        memory, src_mask = model.encode(src), model.source_mask(src)  # the source is encoded once
        for _ in range(max_len):
            next_token = model.decode(out, memory, src_mask)[:, -1].argmax(-1)  # (B,)
            next_token = next_token.masked_fill(finished, eos_id)
            out = torch.cat([out, next_token[:, None]], dim=1)
            finished |= next_token == eos_id
            if finished.all():
                break
    return out[:, 1:]


def gnmt_length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT's length penalty ``((5 + |Y|) / 6) ** alpha`` (Wu et al., 2016): 1 for one token, growing with ``|Y|``.

    Beam search ranks a hypothesis by ``log P(Y) / gnmt_length_penalty(|Y|, alpha)``. Every token lowers
    ``log P(Y)``, so with ``alpha = 0`` (no penalty) short hypotheses are favoured; larger ``alpha`` favours
    longer ones.
    """
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(model: Seq2SeqTransformer, src: torch.Tensor, bos_id: int, eos_id: int, beam_size: int,
                max_len: int, length_penalty: float = 0.0) -> torch.Tensor:
    """Translate each row of ``src`` ``(B, n_enc)`` with beam search; returns ids ``(B, m)`` as :func:`greedy_decode`.

    Each source keeps the ``beam_size`` best hypotheses. A step extends every unfinished one by every
    token (``beam_size * |V|`` candidates, scored by their summed log-probabilities) and keeps the
    ``beam_size`` best candidates, ranked by ``log P(Y) / gnmt_length_penalty(|Y|, length_penalty)``.
    A hypothesis that wrote ``<eos>`` is finished: it is not extended, keeps its score and its length
    (``|Y|`` counts the ``<eos>``) and competes for a place in the beam with the new candidates. The
    search stops when every hypothesis is finished or after ``max_len`` tokens, and returns the best of
    the beam without the leading ``<bos>``, rows padded with ``eos_id``. ``beam_size=1`` is greedy
    decoding. One source: ``beam_search(model, src[None], ...)[0]``.
    """
    max_len = _seq2seq_inputs(model, src, bos_id, eos_id, max_len)
    beam_size = _validate.integer("beam_size", beam_size, minimum=1)
    vocab = model.config.tgt_vocab_size
    alpha = _validate.real("length_penalty", length_penalty)
    if alpha < 0:
        raise ValueError(f"length_penalty must be >= 0, got {alpha}")

    B, K, device = src.shape[0], beam_size, src.device
    rows = torch.arange(B, device=device)[:, None]  # (B, 1), to pick beams per source
    tokens = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)  # (B, K, 1 + t)
    scores = torch.full((B, K), float("-inf"), device=device)  # (B, K): log P of each hypothesis
    scores[:, 0] = 0.0  # one live hypothesis at the start, not K copies of <bos>
    lengths = torch.zeros(B, K, dtype=torch.long, device=device)  # (B, K): tokens written, <eos> included
    finished = torch.zeros(B, K, dtype=torch.bool, device=device)
    only_eos = torch.full((vocab,), float("-inf"), device=device)
    only_eos[eos_id] = 0.0  # a finished hypothesis "extends" by <eos> at no cost: it stays as it is
    with _evaluating(model):
        memory, src_mask = model.encode(src), model.source_mask(src)  # the source is encoded once
        memory, src_mask = memory.repeat_interleave(K, 0), src_mask.repeat_interleave(K, 0)  # (B*K, ...)
        for step in range(max_len):
            logits = model.decode(tokens.view(B * K, -1), memory, src_mask)[:, -1]  # (B*K, |V|)
            log_probs = torch.where(finished[..., None], only_eos, logits.log_softmax(-1).view(B, K, vocab))
            candidates = scores[..., None] + log_probs  # (B, K, |V|)
            new_lengths = torch.where(finished, lengths, step + 1)[..., None].expand(B, K, vocab)
            ranking = candidates / gnmt_length_penalty(new_lengths, alpha)  # (B, K, |V|)
            best = ranking.view(B, K * vocab).topk(K, dim=-1).indices  # (B, K)
            beam, token = best // vocab, best % vocab
            tokens = torch.cat([tokens[rows, beam], token[..., None]], dim=-1)
            scores = candidates.view(B, -1).gather(1, best)
            lengths = new_lengths.reshape(B, -1).gather(1, best)
            finished = finished[rows, beam] | (token == eos_id)
            if finished.all():
                break
    choice = (scores / gnmt_length_penalty(lengths, alpha)).argmax(-1)  # (B,)
    out = tokens[rows[:, 0], choice, 1:]  # (B, steps); a finished row continues with <eos>
    return out[:, : int(lengths[rows[:, 0], choice].max())]


def translate(model: Seq2SeqTransformer, texts: list[str], source, target, max_len: int = 16) -> list[str]:
    """Greedy translations of ``texts`` (strings) with the tokenizers ``source`` and ``target``."""
    from transformer_course.data import pad_batch

    src, _ = pad_batch([source.encode(t) for t in texts], source.pad_id)
    out = greedy_decode(model, src, target.bos_id, target.eos_id, max_len)
    return [target.decode(row) for row in out]


def complete(model: DecoderOnlyLM, prompts: list[str], tokenizer, max_new_tokens: int) -> list[str]:
    """Greedy continuations of ``prompts`` up to ``<eos>``; prompts of equal length are batched together."""
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(i)
    answers = [""] * len(prompts)
    for length, indices in by_length.items():
        batch = torch.tensor([tokenizer.encode(prompts[i], bos=True) for i in indices])
        out = generate(model, batch, max_new_tokens, eos_id=tokenizer.eos_id)
        for i, row in zip(indices, out, strict=True):
            answers[i] = tokenizer.decode(row[length + 1 :])
    return answers
