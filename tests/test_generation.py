"""KV-cached generation equals generation without the cache; sampling; greedy decoding; errors."""

import dataclasses
import itertools
import math

import pytest
import torch

from transformer_course.generation import (
    CachedDecoder,
    _threads,
    beam_search,
    generate,
    gnmt_length_penalty,
    greedy_decode,
    sample_next,
)
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM, Seq2SeqConfig, Seq2SeqTransformer
from transformer_course.multihead import KVCache


def lm(**overrides):
    torch.manual_seed(0)
    config = DecoderOnlyConfig(vocab_size=17, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=128)
    return DecoderOnlyLM(dataclasses.replace(config, **overrides)).eval()  # replace validates the new fields


@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_logits_equal_full_forward(norm_first):
    model = lm(norm_first=norm_first)
    tokens = torch.randint(17, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :5], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(5, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert len(cache[0]) == 20


def test_generation_with_and_without_cache_gives_the_same_tokens():
    model = lm()
    prompt = torch.randint(17, (3, 4), generator=torch.Generator().manual_seed(2))
    threads = torch.get_num_threads()
    with_cache = generate(model, prompt, 40)
    assert torch.get_num_threads() == threads  # single-threaded cached steps restore the setting
    assert torch.equal(with_cache, generate(model, prompt, 40, use_cache=False))
    assert with_cache.shape == (3, 44) and torch.equal(with_cache[:, :4], prompt)
    sampled = [generate(model, prompt, 10, temperature=1.0, top_k=5, use_cache=c,
                        generator=torch.Generator().manual_seed(3)) for c in (True, False)]
    assert torch.equal(*sampled)


def test_kv_cache_grows_and_rejects_other_batch_shapes():
    cache = KVCache()
    for n in (3, 70, 1):  # past the initial capacity of 64
        k = torch.randn(2, 4, n, 8)
        keys, values = cache.append(k, -k)
    assert len(cache) == 74 and keys.shape == (2, 4, 74, 8) and torch.equal(values, -keys)
    assert torch.equal(cache.keys, keys) and torch.equal(cache.values, values)
    assert KVCache().keys is None
    with pytest.raises(ValueError, match=r"the cache holds \(B, h, n_past, d_h\) = \(2, 4, 74, 8\), got keys of shape "
                                         r"\(1, 4, 1, 8\)"):
        cache.append(torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8))
    with pytest.raises(ValueError, match=r"= \(2, 4, 74, 8\), got keys of shape \(2, 4, 1, 6\)"):
        cache.append(torch.randn(2, 4, 1, 6), torch.randn(2, 4, 1, 6))
    with pytest.raises(ValueError, match=r"keys and values must agree in \(B, h, n_new\), got shapes "
                                         r"\(2, 4, 3, 8\) and \(2, 4, 2, 8\)"):
        KVCache().append(torch.randn(2, 4, 3, 8), torch.randn(2, 4, 2, 8))
    assert len(cache) == 74  # a refused append leaves the cache as it was


def test_sample_next_temperature_and_top_k():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]]).expand(4000, 4)
    g = torch.Generator().manual_seed(4)
    assert torch.equal(sample_next(logits, temperature=0.0), torch.zeros(4000, dtype=torch.long))
    top2 = sample_next(logits, top_k=2, generator=g)
    assert set(top2.tolist()) == {0, 1}
    share = (top2 == 0).float().mean().item()
    assert abs(share - torch.softmax(torch.tensor([2.0, 1.0]), 0)[0].item()) < 0.03
    cold = (sample_next(logits, temperature=0.25, generator=g) == 0).float().mean().item()
    hot = (sample_next(logits, temperature=4.0, generator=g) == 0).float().mean().item()
    assert cold > 0.95 and hot < 0.4


def test_greedy_decode_stops_at_eos():
    torch.manual_seed(5)
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=7, d_model=16, num_heads=2, d_ff=32,
                                             max_len=20)).eval()
    with torch.no_grad():
        model.head.bias.fill_(-10.0)
        model.head.bias[2] = 10.0  # always predict <eos> (id 2)
    out = greedy_decode(model, torch.randint(3, 9, (2, 5)), bos_id=1, eos_id=2, max_len=10)
    assert out.tolist() == [[2], [2]]


def filled_cache(model, n):
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(1, n, dtype=torch.long), cache=cache)
    return cache


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m: generate(m, torch.zeros(1, 100, dtype=torch.long), 40), ValueError,
         "140 exceeds the model's max_len=128"),
        (lambda m: generate(torch.nn.Linear(2, 2), torch.zeros(1, 1), 1), TypeError, "model must be a DecoderOnlyLM"),
        (lambda m: sample_next(torch.zeros(2, 5), temperature=-1.0), ValueError, "temperature must be >= 0"),
        (lambda m: sample_next(torch.zeros(2, 5), top_k=0), ValueError, "top_k must be >= 1, got 0"),
        (lambda m: m(torch.zeros(1, 2, dtype=torch.long), cache=filled_cache(m, 127)), ValueError,
         r"positions 127..128 exceed max_len=128"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(lm())


def test_translate_and_complete_return_strings():
    from transformer_course.data import CharTokenizer
    from transformer_course.generation import complete, translate

    torch.manual_seed(6)
    tok = CharTokenizer("0123456789=")
    seq2seq = Seq2SeqTransformer(Seq2SeqConfig(len(tok), len(tok), d_model=16, num_heads=2, d_ff=32, max_len=20))
    out = translate(seq2seq.eval(), ["12=", "3="], tok, tok, max_len=5)
    assert len(out) == 2 and all(isinstance(s, str) and len(s) <= 5 for s in out)
    lm_model = DecoderOnlyLM(DecoderOnlyConfig(len(tok), d_model=16, num_heads=2, d_ff=32, max_len=20)).eval()
    prompts = ["31=", "7=", "22="]
    answers = complete(lm_model, prompts, tok, 4)
    assert len(answers) == 3
    for prompt, answer in zip(prompts, answers, strict=True):  # batched by length = one at a time
        assert answer == complete(lm_model, [prompt], tok, 4)[0]


def test_threads_restores_the_process_wide_setting_even_after_an_error():
    before = torch.get_num_threads()
    inside = 1 if before > 1 else 2
    with _threads(inside):
        assert torch.get_num_threads() == inside
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="stop"), _threads(inside):
        raise RuntimeError("stop")
    assert torch.get_num_threads() == before


def test_generation_sets_the_threads_once_and_restores_threads_and_mode(monkeypatch):
    settings = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (settings.append(n), real(n))[1])
    model, before = lm().train(), torch.get_num_threads()
    generate(model, torch.zeros(1, 3, dtype=torch.long), 20)
    assert settings == [1, before]  # once to one thread after the prompt, once back: not at every step
    assert model.training and torch.get_num_threads() == before
    settings.clear()
    generate(model, torch.zeros(1, 3, dtype=torch.long), 5, use_cache=False)
    assert settings == []  # without the cache every step has the whole sequence: all threads


def test_decoding_restores_mode_and_threads_after_an_error(monkeypatch):
    import transformer_course.generation as generation

    calls = []

    def fail_at_third(*args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("stop")
        return torch.zeros(args[0].shape[0], dtype=torch.long)

    monkeypatch.setattr(generation, "_sample", fail_at_third)  # the loops' sampler (sample_next checks, then calls it)
    model, before = lm().train(), torch.get_num_threads()
    for fast in (True, False):
        calls.clear()
        with pytest.raises(RuntimeError, match="stop"):
            generate(model, torch.zeros(1, 3, dtype=torch.long), 10, fast=fast)
        assert model.training and torch.get_num_threads() == before
    torch.manual_seed(5)
    translator = Seq2SeqTransformer(Seq2SeqConfig(9, 7, d_model=16, num_heads=2, d_ff=32, max_len=20)).train()
    monkeypatch.setattr(translator, "decode", lambda *args: (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError, match="stop"):
        greedy_decode(translator, torch.randint(3, 9, (2, 5)), bos_id=1, eos_id=2, max_len=4)
    assert translator.training


# --- the fast cached step -------------------------------------------------------------------------

VARIANTS = [{}, dict(norm_first=False, activation="relu", positional="sinusoidal", tie_weights=False),
            dict(norm="rms", activation="swiglu", num_kv_heads=2, positional="rotary"), dict(num_kv_heads=1)]


@pytest.mark.parametrize("overrides", VARIANTS, ids=["gpt", "post-norm sinusoidal", "rms swiglu gqa rope", "mqa"])
def test_fast_path_writes_the_tokens_of_the_module_path_and_of_the_uncached_path(overrides):
    model = lm(**overrides)
    with _threads(1):  # the uncached path's many small steps crawl on threads that share busy cores (CI)
        for batch, n, new in [(1, 1, 40), (3, 4, 9), (8, 7, 24)]:
            prompt = torch.randint(17, (batch, n), generator=torch.Generator().manual_seed(batch))
            paths = [dict(), dict(fast=False), dict(use_cache=False)]
            greedy = [generate(model, prompt, new, **path) for path in paths]
            assert all(torch.equal(greedy[0], other) for other in greedy[1:])
            sampled = [generate(model, prompt, new, temperature=1.0, top_k=top_k, eos_id=2,
                                generator=torch.Generator().manual_seed(new), **path)
                       for top_k in (None, 5) for path in paths]
            assert all(torch.equal(sampled[i], sampled[i + j]) for i in (0, 3) for j in (1, 2))
            assert greedy[0].shape == (batch, n + new) and torch.equal(greedy[0][:, :n], prompt)


CHUNK_VARIANTS = {
    "learned tied": {}, "learned untied": dict(tie_weights=False),
    "sinusoidal post-norm": dict(norm_first=False, activation="relu", positional="sinusoidal"),
    "rotary": dict(positional="rotary"), "grouped-query": dict(num_kv_heads=2), "multi-query": dict(num_kv_heads=1),
    "rms swiglu": dict(norm="rms", activation="swiglu"),
    "rms swiglu gqa rotary post-norm untied": dict(norm="rms", activation="swiglu", num_kv_heads=2,
                                                   positional="rotary", norm_first=False, tie_weights=False),
}


@pytest.mark.parametrize("overrides", CHUNK_VARIANTS.values(), ids=CHUNK_VARIANTS)
def test_chunks_of_any_size_at_any_offset_give_the_logits_of_the_full_causal_run(overrides):
    # A chunk of n > 1 tokens after cached ones must see the cache and its own past, not a top-left causal mask.
    model = lm(**overrides)
    tokens = torch.randint(17, (2, 22), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        full = model(tokens)  # (2, 22, |V|): the causal run over the whole sequence
        for prompt in (1, 3, 6):
            for size in range(1, 6):
                decoder, cache = CachedDecoder(model, batch_size=2, max_len=22), model.new_cache()
                ends = [prompt, *range(prompt + size, 23, size)]  # a prompt, then chunks of `size` at every offset
                for start, end in zip([0, *ends[:-1]], ends, strict=True):
                    fast = decoder(tokens[:, start:end])  # (2, |V|): the chunk's last position
                    modules = model(tokens[:, start:end], cache=cache)  # (2, end - start, |V|)
                    torch.testing.assert_close(fast, full[:, end - 1], atol=1e-5, rtol=1e-5,
                                               msg=f"fast path, chunk {start}..{end - 1} after prompt {prompt}")
                    torch.testing.assert_close(modules, full[:, start:end], atol=1e-5, rtol=1e-5,
                                               msg=f"module path, chunk {start}..{end - 1} after prompt {prompt}")
                assert decoder.position == len(cache[0]) == ends[-1]


def test_cached_decoder_matches_the_model_and_writes_its_cache_in_place():
    model = lm(num_kv_heads=2, positional="rotary")
    tokens = torch.randint(17, (2, 12), generator=torch.Generator().manual_seed(8))
    decoder = CachedDecoder(model, batch_size=2, max_len=12)
    where = decoder.keys.data_ptr(), decoder.values.data_ptr()
    assert decoder.keys.shape == (2, 2, 2, 12, 8)  # (L, B, h_kv, max_len, d_head), allocated once
    with torch.inference_mode():
        logits = [decoder(tokens[:, :5])] + [decoder(tokens[:, t : t + 1]) for t in range(5, 12)]
        full = model(tokens)
    torch.testing.assert_close(torch.stack(logits, 1), full[:, 4:], atol=1e-5, rtol=1e-5)
    assert decoder.position == 12 and (decoder.keys.data_ptr(), decoder.values.data_ptr()) == where
    with pytest.raises(ValueError, match=r"positions 12..12 exceed the decoder's max_len=12"):
        decoder(tokens[:, :1])
    with pytest.raises(TypeError, match="model must be a DecoderOnlyLM built from the package's modules: "
                                        "forward hooks are registered"):
        handle = model.blocks[0].register_forward_hook(lambda *args: None)
        try:
            CachedDecoder(model, 1)
        finally:
            handle.remove()


def test_generate_returns_an_ordinary_tensor_and_honours_hooks():
    model = lm()
    out = generate(model, torch.zeros(2, 3, dtype=torch.long), 5)
    assert not out.is_inference()  # usable later with autograd, unlike a tensor made in inference mode
    model.token_embedding(out).sum().backward()
    seen = []
    handle = model.blocks[0].attention.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[1]))
    try:
        generate(model, torch.zeros(1, 3, dtype=torch.long), 4)  # a hook: generate takes the module path
    finally:
        handle.remove()
    assert seen == [3, 1, 1, 1]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(eos_id=17), ValueError, r"eos_id must lie in \[0, 17\) \(the vocabulary\), got 17"),
        (dict(prompt=torch.zeros(2, 0, dtype=torch.long)), ValueError, "prompt must hold at least one token per row"),
        (dict(prompt=torch.full((1, 2), 17)), ValueError, r"prompt holds ids from 17 to 17, outside the vocabulary"),
        (dict(temperature=-0.5), ValueError, "temperature must be >= 0, got -0.5"),
        (dict(top_k=0), ValueError, "top_k must be >= 1, got 0"),
    ],
)
def test_generate_checks_its_arguments_once_up_front(kwargs, error, match):
    args = dict(prompt=torch.zeros(1, 2, dtype=torch.long), max_new_tokens=3, temperature=1.0)
    with pytest.raises(error, match=match):
        generate(lm(), **{**args, **kwargs})


# --- beam search -------------------------------------------------------------------------------------

PAD, BOS, EOS, A, B = range(5)


class TableModel(Seq2SeqTransformer):
    """A stub translator whose next-token probabilities are a table indexed by the prefix written so far
    (the source is ignored); prefixes missing from the table get ``default``. pad and bos are never written."""

    def __init__(self, table, default=(0.0, 0.0, 1 / 3, 1 / 3, 1 / 3)):
        super().__init__(Seq2SeqConfig(src_vocab_size=5, tgt_vocab_size=5, d_model=4, num_heads=1, d_ff=4,
                                       max_len=16))
        self.table, self.default = table, default

    def encode(self, src):
        return torch.zeros(src.shape[0], src.shape[1], 4)

    def decode(self, tgt, memory, src_mask):
        probs = torch.tensor([self.table.get(tuple(row[1:].tolist()), self.default) for row in tgt])
        logits = torch.zeros(*tgt.shape, 5)
        logits[:, -1] = probs.log()  # only the last position is read
        return logits


def beams(model, **kwargs):
    return beam_search(model, torch.ones(1, 3, dtype=torch.long), BOS, EOS, max_len=kwargs.pop("max_len", 6),
                       **kwargs)[0].tolist()


def test_beam_size_one_is_greedy_decoding():
    lengths = []
    for seed, eos_bias in [(0, 0.5), (2, 0.5), (2, 0.0), (3, 1.0)]:  # rows that stop after 1 .. 12 tokens, or never
        torch.manual_seed(seed)
        model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=7, d_model=16, num_heads=2,
                                                 d_ff=32, max_len=24)).eval()
        with torch.no_grad():
            model.head.bias[EOS] += eos_bias
        src = torch.randint(3, 9, (6, 7), generator=torch.Generator().manual_seed(seed))
        src[:2, 4:] = model.config.pad_id
        greedy = greedy_decode(model, src, BOS, EOS, max_len=12)
        assert torch.equal(beam_search(model, src, BOS, EOS, beam_size=1, max_len=12), greedy)
        assert torch.equal(beam_search(model, src, BOS, EOS, beam_size=1, max_len=12, length_penalty=0.6), greedy)
        wide = beam_search(model, src, BOS, EOS, beam_size=4, max_len=12)
        assert wide.shape[0] == 6 and wide.shape[1] <= 12
        lengths += [int((row == EOS).nonzero()[0]) + 1 if (row == EOS).any() else None for row in greedy]
    assert {1, 2, 4, 10, 12, None} <= set(lengths)


def test_beam_search_finds_what_greedy_misses():
    # greedy takes A (0.6), then the best it can do is A <eos> (0.6 * 0.34 = 0.204); B <eos> has 0.4 * 0.9 = 0.36
    model = TableModel({(): (0, 0, 0, 0.6, 0.4), (A,): (0, 0, 0.34, 0.33, 0.33), (B,): (0, 0, 0.9, 0.05, 0.05)})
    src = torch.ones(2, 3, dtype=torch.long)
    assert greedy_decode(model, src, BOS, EOS, max_len=6).tolist() == [[A, EOS]] * 2
    assert beam_search(model, src, BOS, EOS, beam_size=2, max_len=6).tolist() == [[B, EOS]] * 2
    assert beams(model, beam_size=1) == [A, EOS]


def test_finished_hypotheses_are_kept_not_extended_and_the_length_penalty_favours_longer_ones():
    # <eos> at once has 0.5; A <eos> has 0.3 * 0.9 = 0.27. After <eos> the table would write A with certainty.
    model = TableModel({(): (0, 0, 0.5, 0.3, 0.2), (A,): (0, 0, 0.9, 0.05, 0.05), (EOS,): (0, 0, 0, 1, 0)})
    assert beams(model, beam_size=2) == [EOS]  # extended by the table, it would go on with A (or die at P(<eos>) = 0)
    # ((5 + 2) / 6) ** 5 = 2.16: log 0.27 / 2.16 = -0.61 beats log 0.5 / 1 = -0.69
    assert beams(model, beam_size=2, length_penalty=5.0) == [A, EOS]
    assert gnmt_length_penalty(torch.tensor(1), 5.0) == 1.0


def test_beam_search_as_wide_as_every_sequence_is_exhaustive_search():
    g = torch.Generator().manual_seed(7)
    table = {}
    for prefix in itertools.chain.from_iterable(itertools.product((A, B), repeat=n) for n in range(3)):
        table[prefix] = (0, 0, *torch.softmax(torch.randn(3, generator=g), 0).tolist())
    model = TableModel(table)

    def log_prob(seq):
        return sum(math.log(table[tuple(seq[:i])][t]) for i, t in enumerate(seq))

    sequences = [(*p, EOS) for n in range(3) for p in itertools.product((A, B), repeat=n)]
    sequences += list(itertools.product((A, B), repeat=3))  # unfinished at max_len=3
    for alpha in (0.0, 0.6, 2.0):
        best = max(sequences, key=lambda s: log_prob(s) / ((5 + len(s)) / 6) ** alpha)
        found = beams(model, beam_size=len(sequences) * 5, max_len=3, length_penalty=alpha)
        assert found[: len(best)] == list(best) and all(t == EOS for t in found[len(best):])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(beam_size=0), ValueError, "beam_size must be >= 1, got 0"),
        (dict(max_len=0), ValueError, "max_len must be >= 1, got 0"),
        (dict(length_penalty=-0.5), ValueError, "length_penalty must be >= 0, got -0.5"),
        (dict(eos_id=7), ValueError, r"eos_id must lie in \[0, 7\) \(the target vocabulary\), got 7"),
        (dict(bos_id=-1), ValueError, r"bos_id must lie in \[0, 7\)"),
        (dict(src=torch.ones(5, dtype=torch.long)), ValueError, r"src must have shape \(B, n_enc\), got \(5,\)"),
        (dict(src=torch.ones(1, 5)), TypeError, "src must hold token ids, got dtype torch.float32"),
        (dict(model=torch.nn.Linear(2, 2)), TypeError, "model must be a Seq2SeqTransformer, got Linear"),
    ],
)
def test_beam_search_and_greedy_decode_bad_arguments(kwargs, error, match):
    """The same errors from greedy_decode, for the arguments it shares with beam_search (one check serves both)."""
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=7, d_model=16, num_heads=2, d_ff=32,
                                             max_len=24))
    args = dict(model=model, src=torch.ones(2, 5, dtype=torch.long), bos_id=BOS, eos_id=EOS, max_len=5)
    with pytest.raises(error, match=match):
        beam_search(**{**args, "beam_size": 2, **kwargs})
    if not {"beam_size", "length_penalty"} & kwargs.keys():
        with pytest.raises(error, match=match):
            greedy_decode(**{**args, **kwargs})
