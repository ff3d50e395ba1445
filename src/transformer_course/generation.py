"""Turning a trained model's logits into text: greedy decoding, beam search, temperature and top-k sampling,
KV caching.

Shapes: batch B, prompt length n, vocabulary |V|. ``logits`` are the model's unnormalised scores
``(B, |V|)`` for the next token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course import _validate
from transformer_course.blocks import EncoderBlock, PositionWiseFFN, RMSNorm, feed_forward, norm_function, residual
from transformer_course.masking import cached_causal_mask
from transformer_course.models import DecoderOnlyLM, Seq2SeqTransformer, check_tokens
from transformer_course.multihead import MultiHeadAttention, fused_attention
from transformer_course.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, rotate


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of ``logits`` ``(B, |V|)``; returns ids ``(B,)``.

    ``temperature`` divides the logits before the softmax (below 1 sharpens, above 1 flattens; 0 means
    greedy argmax); ``top_k`` keeps the k largest logits and renormalises over them.
    """
    _validate.tensor("logits", logits, min_dim=2, floating=True)
    temperature, top_k = _sampling_arguments(temperature, top_k)
    return _sample(logits, temperature, top_k, generator)


def _sampling_arguments(temperature, top_k) -> tuple[float, int | None]:
    """The checks of :func:`sample_next`'s ``temperature`` and ``top_k``; returns them as float and int."""
    temperature = _validate.real("temperature", temperature)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    return temperature, None if top_k is None else _validate.integer("top_k", top_k, minimum=1)


def _sample(logits: torch.Tensor, temperature: float, top_k: int | None, generator) -> torch.Tensor:
    """:func:`sample_next` without the checks, for a loop that made them once."""
    if temperature == 0:
        return logits.argmax(-1)
    if top_k is not None:
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
def evaluating(model: nn.Module) -> Iterator[None]:
    """Run the block with ``model`` in eval mode (no dropout), restoring its mode after it, even on an error."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def generate(model: DecoderOnlyLM, prompt: torch.Tensor, max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, use_cache: bool = True, eos_id: int | None = None,
             generator: torch.Generator | None = None, fast: bool = True, compile: bool = False) -> torch.Tensor:
    """Continue ``prompt`` ``(B, n)`` by ``max_new_tokens`` tokens; returns ``(B, n + max_new_tokens)``.

    Without the cache every step runs the model over the whole sequence so far (O(n^2) work per token
    in attention, O(n) in the rest); with it, a step feeds only the newest token. Every path gives the
    same tokens. Rows that produced ``eos_id`` keep producing it. The arguments are checked once, here.

    With the cache, ``fast=True`` (the default) decodes with :class:`CachedDecoder`: keys and values in
    tensors allocated once for all ``n + max_new_tokens`` positions and written in place, every step one
    call of the modules' functional pieces, no argument checks inside the loop, under ``torch.inference_mode``.
    ``fast=False`` is the loop of lesson 10's section 10.6: ``model(token, cache=cache)`` at every step,
    through the modules' checked ``forward`` and a :class:`~transformer_course.multihead.KVCache` per
    block. Both cached paths run their one-token steps on one thread: the thread count is set once after
    the prompt and restored at the end, since handing such small operations between threads costs more
    than it saves (:func:`_threads`). The fast path falls back to the module path when a forward hook is
    registered on the model (hooks fire only in ``forward``) or when one of its classes is a subclass with
    its own ``forward``.
    ``compile=True`` runs the fast step through ``torch.compile`` (slow to start; off by default).
    """
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    max_new_tokens = _validate.integer("max_new_tokens", max_new_tokens, minimum=0)
    c = model.config
    check_tokens("prompt", prompt, c.vocab_size, c.max_len)
    if prompt.shape[1] == 0:
        raise ValueError(f"prompt must hold at least one token per row, got shape {tuple(prompt.shape)}")
    total = prompt.shape[-1] + max_new_tokens
    if total > c.max_len:
        raise ValueError(f"prompt ({prompt.shape[-1]}) + max_new_tokens ({max_new_tokens}) = {total} exceeds "
                         f"the model's max_len={c.max_len}")
    temperature, top_k = _sampling_arguments(temperature, top_k)
    if eos_id is not None and not 0 <= _validate.integer("eos_id", eos_id) < c.vocab_size:
        raise ValueError(f"eos_id must lie in [0, {c.vocab_size}) (the vocabulary), got {eos_id}")
    # no autograd bookkeeping: inference mode for the fast path (it keeps no tensor), no_grad for the modules,
    # whose caches and hooks' records may be read afterwards
    no_grad = torch.no_grad()
    if use_cache and fast and _fast_path_obstacle(model) is None:
        step, no_grad = CachedDecoder(model, prompt.shape[0], total, compile=compile), torch.inference_mode()
    else:
        cache = model.new_cache() if use_cache else None

        def step(tokens: torch.Tensor) -> torch.Tensor:  # the new tokens, or all of them without a cache
            return model(tokens, cache=cache)[:, -1]  # (B, |V|)

    with evaluating(model):
        return _generate(step, prompt, max_new_tokens, temperature, top_k, eos_id, generator, cached=use_cache,
                         no_grad=no_grad)


def _generate(step, prompt: torch.Tensor, max_new_tokens: int, temperature: float, top_k: int | None,
              eos_id: int | None, generator, *, cached: bool, no_grad) -> torch.Tensor:
    """The loop of :func:`generate`: ``step(tokens)`` -> the next token's logits ``(B, |V|)``, given the new
    tokens (``cached``: the prompt, then one token a step) or the whole sequence so far, run inside the context
    ``no_grad``. The tokens are written into one tensor allocated up front, ``(B, n + max_new_tokens)``."""
    B, n = prompt.shape
    # allocated outside the inference mode, so that the caller gets an ordinary tensor (usable with autograd)
    tokens = torch.empty(B, n + max_new_tokens, dtype=prompt.dtype, device=prompt.device)
    tokens[:, :n] = prompt
    finished = torch.zeros(B, dtype=torch.bool, device=prompt.device)
    step_input = prompt
    with no_grad, contextlib.ExitStack() as settings:
        for t in range(n, n + max_new_tokens):
            if cached and t == n + 1:  # the prompt is done: one position a step from now on, on one thread
                settings.enter_context(_threads(1))
            next_token = _sample(step(step_input), temperature, top_k, generator)  # (B,)
            if eos_id is not None:
                next_token = next_token.masked_fill(finished, eos_id)
                finished |= next_token == eos_id
            tokens[:, t] = next_token  # an in-place write into an ordinary tensor, allowed in inference mode
            step_input = tokens[:, t : t + 1] if cached else tokens[:, : t + 1]  # a view
    return tokens


def _fast_path_obstacle(model: DecoderOnlyLM) -> str | None:
    """Why :class:`CachedDecoder` cannot stand in for ``model.forward``, or None when it can."""
    expected = [(model, DecoderOnlyLM)]
    for block in model.blocks:
        expected += [(block, EncoderBlock), (block.attention, MultiHeadAttention), (block.ffn, PositionWiseFFN)]
    for module, cls in expected:
        if type(module).forward is not cls.forward:
            return f"{type(module).__name__} has its own forward"
    for norm in [model.norm] + [n for b in model.blocks for n in (b.norm1, b.norm2)]:
        if type(norm) not in (nn.LayerNorm, RMSNorm, nn.Identity):
            return f"a norm of type {type(norm).__name__}"
    if model.position_embedding is not None and type(model.position_embedding) not in (
            LearnedPositionalEmbedding, SinusoidalPositionalEncoding):
        return f"positions from {type(model.position_embedding).__name__}"
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks or any(
            m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
        return "forward hooks are registered (they fire only in forward)"
    return None


class _CachedBlock(NamedTuple):
    """One block for :func:`_decode_step`: its weights, its functional pieces and its part of the cache."""

    norm1: Callable[[torch.Tensor], torch.Tensor]  # blocks.norm_function of the block's norms
    norm2: Callable[[torch.Tensor], torch.Tensor]
    W_qkv: torch.Tensor  # (d + 2 d_kv, d): W_q, W_k and W_v stacked, one matrix product for all three
    b_qkv: torch.Tensor | None
    W_o: torch.Tensor
    b_o: torch.Tensor | None
    ffn: tuple  # the arguments of blocks.feed_forward after x: W_1, b_1, W_2, b_2, activation, gated
    keys: torch.Tensor  # (B, h_kv, max_len, d_head): a view of CachedDecoder.keys
    values: torch.Tensor


class _Hyperparameters(NamedTuple):
    """The model's widths and options that :func:`_decode_step` reads."""

    d: int
    h: int
    h_kv: int
    d_head: int
    d_kv: int  # h_kv * d_head: the width of the keys and of the values
    norm_first: bool


class CachedDecoder:
    r"""The cached decoding step of a :class:`~transformer_course.models.DecoderOnlyLM`, as one function.

    ``CachedDecoder(model, batch_size, max_len)`` allocates the keys and values of every block for
    ``max_len`` positions at once, ``(L, B, h_kv, max_len, d_head)`` each, and gathers the model's
    weights (W_q, W_k and W_v stacked into one matrix per block). ``decoder(tokens)``: tokens ``(B, n)``,
    the positions after the ``decoder.position`` already cached (a prompt, then chunks of any size, usually
    one token); returns the logits at the last position, ``(B, |V|)``. A step is one function,
    :func:`_decode_step`, that calls the functional pieces the modules' ``forward`` calls (norms, rotary
    rotation, FFN, residual, fused attention under :func:`~transformer_course.masking.cached_causal_mask`):
    no module calls, no argument checks, no growing of the cache, the new keys and values written in
    place. It computes what ``model(tokens, cache=cache)[:, -1]`` computes, up to float32 rounding. It is
    made for one generation: it copies W_q, W_k and W_v when it is built, so a model trained afterwards
    needs a new one (``generate`` builds one per call). ``compile=True`` runs the one-token step through
    ``torch.compile``.
    """

    def __init__(self, model: DecoderOnlyLM, batch_size: int, max_len: int | None = None, *, compile: bool = False):
        obstacle = _fast_path_obstacle(model) if isinstance(model, DecoderOnlyLM) else "not a DecoderOnlyLM"
        if obstacle is not None:
            raise TypeError(f"model must be a DecoderOnlyLM built from the package's modules: {obstacle}")
        c = model.config
        self.batch_size = _validate.integer("batch_size", batch_size, minimum=1)
        self.max_len = c.max_len if max_len is None else _validate.integer("max_len", max_len, minimum=1)
        _validate.positions(self.max_len, c.max_len, what="the decoder")
        att = model.blocks[0].attention
        self.hyperparameters = _Hyperparameters(c.d_model, att.num_heads, att.num_kv_heads, att.d_head,
                                                att.num_kv_heads * att.d_head, c.norm_first)
        weight = model.token_embedding.weight
        cache_shape = (len(model.blocks), self.batch_size, att.num_kv_heads, self.max_len, att.d_head)
        self.keys = torch.zeros(cache_shape, dtype=weight.dtype, device=weight.device)
        self.values = torch.zeros(cache_shape, dtype=weight.dtype, device=weight.device)
        with torch.no_grad():
            self.cached_blocks = [_cached_block(*args) for args in zip(model.blocks, self.keys, self.values,
                                                                       strict=True)]
        self.embedding, self.head, self.final_norm = weight, model.head.weight, norm_function(model.norm)
        positions = model.position_embedding
        self.positions = (positions.embedding.weight if isinstance(positions, LearnedPositionalEmbedding)
                          else positions.pe if positions is not None else None)  # (max_len, d): added to x
        self.rotary = (att.rotary.cos, att.rotary.sin) if att.rotary is not None else None  # (max_len, d_head/2)
        self.position = 0  # positions cached so far
        self._step = torch.compile(_decode_step, dynamic=True) if compile else _decode_step

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        if self.position + n > self.max_len:
            raise ValueError(f"positions {self.position}..{self.position + n - 1} exceed the decoder's max_len="
                             f"{self.max_len}")
        step = self._step if n == 1 else _decode_step  # the prompt runs once: not worth compiling
        logits = step(self, tokens, self.position)
        self.position += n
        return logits


def _cached_block(block: EncoderBlock, keys: torch.Tensor, values: torch.Tensor) -> _CachedBlock:
    """One block's pieces for :func:`_decode_step`; W_q, W_k, W_v concatenated into one matrix."""
    att, ffn = block.attention, block.ffn
    biases = [att.W_q.bias, att.W_k.bias, att.W_v.bias]
    return _CachedBlock(norm_function(block.norm1), norm_function(block.norm2),
                        torch.cat([att.W_q.weight, att.W_k.weight, att.W_v.weight]),
                        None if biases[0] is None else torch.cat(biases), att.W_o.weight, att.W_o.bias,
                        (ffn.W_1.weight, ffn.W_1.bias, ffn.W_2.weight, ffn.W_2.bias, ffn.activation, ffn.gated),
                        keys, values)


def _decode_step(decoder: CachedDecoder, tokens: torch.Tensor, position: int) -> torch.Tensor:
    """tokens ``(B, n)`` at positions ``position .. position + n - 1`` -> logits at the last one, ``(B, |V|)``.

    What ``DecoderOnlyLM.forward`` does with a cache, through the same functional pieces; the keys and values
    of the new positions are written into ``decoder.keys`` and ``decoder.values`` in place.
    """
    hp = decoder.hyperparameters
    end = position + tokens.shape[1]
    x = F.embedding(tokens, decoder.embedding)  # (B, n, d)
    if decoder.positions is not None:
        x = x + decoder.positions[position:end]  # learned or sinusoidal positions (no dropout: eval)
    mask, is_causal = cached_causal_mask(tokens.shape[1], position, device=decoder.keys.device)  # (n, end) or None
    rotary = None if decoder.rotary is None else (decoder.rotary[0][position:end], decoder.rotary[1][position:end])
    for block in decoder.cached_blocks:
        x = residual(x, block.norm1, hp.norm_first, _self_attention, hp, block, position, mask, is_causal, rotary)
        x = residual(x, block.norm2, hp.norm_first, feed_forward, *block.ffn)  # (B, n, d)
    return F.linear(decoder.final_norm(x[:, -1]), decoder.head)  # (B, |V|)


def _self_attention(x: torch.Tensor, hp: _Hyperparameters, block: _CachedBlock, position: int, mask, is_causal: bool,
                    rotary) -> torch.Tensor:
    """MultiHeadAttention's self-attention over the cache, for x ``(B, n, d)`` at ``position``: the new keys and
    values written into the block's cache, the queries attending over it under ``mask``; returns ``(B, n, d)``."""
    B, n, _ = x.shape
    end = position + n
    qkv = F.linear(x, block.W_qkv, block.b_qkv)  # (B, n, d + 2 d_kv)
    q = qkv[..., : hp.d].view(B, n, hp.h, hp.d_head).transpose(1, 2)  # (B, h, n, d_head)
    k = qkv[..., hp.d : hp.d + hp.d_kv].view(B, n, hp.h_kv, hp.d_head).transpose(1, 2)  # (B, h_kv, n, d_head)
    v = qkv[..., hp.d + hp.d_kv :].view(B, n, hp.h_kv, hp.d_head).transpose(1, 2)
    if rotary is not None:
        q, k = rotate(q, *rotary), rotate(k, *rotary)
    block.keys[:, :, position:end] = k  # written in place: the cache never grows
    block.values[:, :, position:end] = v
    heads = fused_attention(q, block.keys[:, :, :end], block.values[:, :, :end], mask, is_causal=is_causal)
    return F.linear(heads.transpose(1, 2).reshape(B, n, hp.d), block.W_o, block.b_o)  # (B, n, d)


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
    with evaluating(model):
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
    with evaluating(model):
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
