"""BPE with Hugging Face tokenizers: round trip, special ids, determinism, the merges it learns on number words."""

import subprocess
import sys

import pytest
import torch

from transformer_course import data
from transformer_course.tokenization import BPETokenizer, first_merges, train_bpe


@pytest.fixture(scope="module")
def german():
    texts = [y for _, y in data.number_examples(data.number_splits().train, "de")]
    return texts, train_bpe(texts, vocab_size=100)


@pytest.fixture(scope="module")
def french():
    texts = [y for _, y in data.number_examples(data.number_splits().train, "fr")]
    return texts, train_bpe(texts, vocab_size=100)


def test_round_trip_and_special_ids(german, french):
    for texts, tok in (german, french):
        for text in texts[:200]:
            ids = tok.encode(text, bos=True, eos=True)
            assert ids[0] == tok.bos_id == 1 and ids[-1] == tok.eos_id == 2
            assert tok.decode(ids + [tok.pad_id]) == text
            assert tok.decode(torch.tensor(ids)) == text
        assert tok.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and tok.pad_id == 0 and tok.unk_id == 3
        assert len(tok) == 100 and all(tok.stoi[s] == i for i, s in enumerate(tok.itos))
    tok = french[1]
    assert tok.decode(tok.encode("trois cent quarante-deux") + [tok.eos_id, 7]) == "trois cent quarante-deux"
    assert tok.encode("cent", bos=False) == [tok.stoi["▁cent"]]
    assert tok.unk_id in tok.encode("cent!")  # never seen in training
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 100\) for this vocabulary, got 100"):
        tok.decode([5, 100])


def test_encode_pairs_works_with_bpe_and_shortens_the_sequences(german):
    texts, target = german
    source = train_bpe([x for x, _ in data.number_examples(data.number_splits().train, "de")], vocab_size=100)
    pairs = data.number_examples([342, 7001], "de")
    src, dec_in, dec_out = data.encode_pairs(pairs, source, target)
    assert source.decode(src[0]) == "three hundred and forty-two" and target.decode(dec_out[1]) == "siebentausendeins"
    # the input is the target shifted right by one, <bos> first, with <eos> left out
    assert dec_in[0, 0] == target.bos_id
    assert torch.equal(dec_in[:, 1:], dec_out[:, :-1].masked_fill(dec_out[:, :-1] == target.eos_id, 0))
    assert target.tokens("dreihundertzweiundvierzig") == ["▁drei", "hundert", "zwei", "undvierzig"]
    assert sum(len(target.encode(t)) for t in texts) < sum(map(len, texts)) / 5


def test_training_is_deterministic_in_and_across_processes(german):
    texts, tok = german
    again = train_bpe(texts, vocab_size=100)
    assert again.itos == tok.itos and first_merges(again, 96) == first_merges(tok, 96)
    code = ("from transformer_course import data; from transformer_course.tokenization import train_bpe; "
            "print(train_bpe([y for _, y in data.number_examples(data.number_splits().train, 'de')], 100).itos)")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other.strip() == str(tok.itos)


def test_german_and_french_merges_are_number_pieces(german, french):
    merges = first_merges(german[1], 20)
    assert merges[:2] == [("n", "d"), ("u", "nd")] and len(first_merges(german[1], 1000)) == 100 - 4 - 22
    merged = {a + b for a, b in merges}
    assert {"und", "hundert", "tausend", "zig"} <= merged
    assert {"vingt", "▁cent", "▁mille"} <= {a + b for a, b in first_merges(french[1], 40)}


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size must be >= 5, got 4"):
        train_bpe(["ab"], vocab_size=4)
    with pytest.raises(TypeError, match="texts must be a non-empty sequence of strings, got str"):
        train_bpe("ab", vocab_size=10)
    with pytest.raises(TypeError, match="texts must be a non-empty sequence of strings, got list"):
        train_bpe([], vocab_size=10)
    assert len(train_bpe(["ab ab"], vocab_size=50)) < 50  # a tiny corpus stops early
    with pytest.raises(ValueError, match="n must be >= 0"):
        first_merges(train_bpe(["ab"], vocab_size=10), -1)
    assert isinstance(train_bpe(["ab"], vocab_size=10), BPETokenizer)
