"""KV-cached generation equals generation without the cache; sampling; greedy decoding; errors."""

import pytest
import torch

from transformer_course.generation import _threads, generate, greedy_decode, sample_next
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM, Seq2SeqConfig, Seq2SeqTransformer
from transformer_course.multihead import KVCache


def lm(**overrides):
    torch.manual_seed(0)
    config = DecoderOnlyConfig(vocab_size=17, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=128)
    for key, value in overrides.items():
        setattr(config, key, value)
    return DecoderOnlyLM(config).eval()


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

    def fail_at_third(*args, calls=[]):  # noqa: B006 (a counter shared by the calls)
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("stop")
        return torch.zeros(args[0].shape[0], dtype=torch.long)

    monkeypatch.setattr(generation, "sample_next", fail_at_third)
    model, before = lm().train(), torch.get_num_threads()
    with pytest.raises(RuntimeError, match="stop"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 10)
    assert model.training and torch.get_num_threads() == before
    torch.manual_seed(5)
    translator = Seq2SeqTransformer(Seq2SeqConfig(9, 7, d_model=16, num_heads=2, d_ff=32, max_len=20)).train()
    monkeypatch.setattr(translator, "decode", lambda *args: (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError, match="stop"):
        greedy_decode(translator, torch.randint(3, 9, (2, 5)), bos_id=1, eos_id=2, max_len=4)
    assert translator.training
