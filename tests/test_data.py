"""The synthetic tasks: tokenizers, date formats, disjoint splits, padding, LM targets."""

import datetime as dt

import pytest
import torch

from transformer_course import data


def test_tokenizer_round_trip_and_specials():
    tok = data.CharTokenizer("cab")
    assert tok.itos[:3] == ["<pad>", "<bos>", "<eos>"] and len(tok) == 6
    ids = tok.encode("abc", bos=True, eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert tok.decode(ids + [tok.pad_id, tok.stoi["a"]]) == "abc"  # stops at <eos>
    with pytest.raises(ValueError, match=r"characters outside the vocabulary: \['z'\]"):
        tok.encode("az")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 6\) for this vocabulary, got 6"):
        tok.decode([3, 6])


@pytest.mark.parametrize("min_len, max_len, match", [(0, 3, "min_len must be >= 1, got 0"),
                                                     (5, 3, "max_len must be >= 5, got 3")])
def test_sort_examples_lengths_are_checked(min_len, max_len, match):
    with pytest.raises(ValueError, match=match):
        data.sort_examples(4, min_len=min_len, max_len=max_len)


def test_every_format_of_every_date_is_encodable_and_month_day_are_right():
    source, target = data.date_tokenizers()
    splits = data.date_splits(seed=0)
    for fmt in data.DATE_FORMATS.values():
        for date in splits.test[:50]:
            source.encode(fmt(date))
            target.encode(date.isoformat())
    date = dt.date(2021, 3, 3)
    assert data.DATE_FORMATS["Wednesday, March 3rd 2021"](date) == "Wednesday, March 3rd 2021"
    assert data.DATE_FORMATS["03/03/21"](dt.date(1987, 11, 2)) == "11/02/87"
    assert data.DATE_FORMATS["3rd of March, 2021"](dt.date(2021, 3, 12)) == "12th of March, 2021"


def test_splits_share_no_date_and_examples_are_deterministic():
    splits = data.date_splits(seed=0)
    train, valid, test = map(set, (splits.train, splits.valid, splits.test))
    assert not (train & valid or train & test or valid & test)
    assert len(train) + len(valid) + len(test) == (data.LAST_DATE - data.FIRST_DATE).days + 1
    pairs = data.date_examples(splits.test, 20, seed=3)
    assert pairs == data.date_examples(splits.test, 20, seed=3)
    assert all(dt.date.fromisoformat(y) in test for _, y in pairs)


def test_encode_pairs_shifts_the_target_for_teacher_forcing():
    source, target = data.date_tokenizers()
    src, dec_in, dec_out = data.encode_pairs([("3 March 2021", "2021-03-03"), ("1/2/2000", "2000-01-02")],
                                             source, target)
    assert src.shape == (2, 12) and src[1, 8:].eq(0).all()
    assert dec_in[0, 0] == target.bos_id and torch.equal(dec_in[:, 1:], dec_out[:, :-1])
    assert target.decode(dec_out[0]) == "2021-03-03" and dec_out[0, -1] == target.eos_id


def test_sort_task_and_lm_targets_score_the_answer_only():
    pairs = data.sort_examples(5, seed=0)
    assert all(p.endswith("=") and a == "".join(sorted(p[:-1])) for p, a in pairs)
    tok = data.CharTokenizer(data.SORT_CHARS)
    inputs, targets = data.encode_lm([("31=", "13")], tok)
    assert tok.decode(inputs[0]) == "31=13"
    assert targets[0].tolist() == [0, 0, 0, tok.stoi["1"], tok.stoi["3"], tok.eos_id]


def test_pad_batch():
    batch, lengths = data.pad_batch([[5, 6, 7], [8]], pad_id=0)
    assert batch.tolist() == [[5, 6, 7], [8, 0, 0]] and lengths.tolist() == [3, 1]
    with pytest.raises(ValueError, match="at least one sequence"):
        data.pad_batch([])


def test_batcher_wraps_around_and_trims_padding_columns():
    a = torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0], [4, 5, 6, 0]])
    batch = data.batcher(a, a * 10, batch_size=2)
    first, first_scaled = batch(0)
    assert first.tolist() == [[1, 2], [3, 0]] and torch.equal(first_scaled, first * 10)
    assert batch(1)[0].tolist() == [[4, 5, 6], [1, 2, 0]]  # rows 2 and 0: wrapped around
    with pytest.raises(ValueError, match=r"the same number of rows, got \[3, 2\]"):
        data.batcher(a, a[:2], batch_size=2)


def test_decoder_input_and_target_of_unequal_rows_stay_aligned_in_batches():
    tok = data.number_tokenizers("de")[1]
    pairs = [("x", "zwei"), ("x", "zweiundzwanzig"), ("x", "eins")]
    src, dec_in, dec_tgt = data.encode_pairs(pairs, data.number_tokenizers("de")[0], tok)
    assert torch.equal(dec_in != 0, dec_tgt != 0)  # no <eos> left in a short row's input
    assert dec_in[0, : len("zwei") + 1].tolist() == [tok.bos_id, *tok.encode("zwei")]
    batch = data.batcher(src, dec_in, dec_tgt, batch_size=2)
    for i in range(3):  # batches without the longest row are cut shorter, the input and its target alike
        _, batch_in, batch_tgt = batch(i)
        assert batch_in.shape == batch_tgt.shape and batch_in.shape[1] in (5, 15)


def test_number_words_are_what_num2words_writes():
    assert data.number_examples([342], "de") == [("three hundred and forty-two", "dreihundertzweiundvierzig")]
    assert data.number_examples([342, 97, 71], "fr") == [("three hundred and forty-two", "trois cent quarante-deux"),
                                                          ("ninety-seven", "quatre-vingt-dix-sept"),
                                                          ("seventy-one", "soixante et onze")]
    assert data.number_words(1234, "en") == "one thousand, two hundred and thirty-four"
    assert data.number_words(1234, "de") == "eintausendzweihundertvierunddreißig"
    with pytest.raises(ValueError, match=r"lang must be one of \['de', 'en', 'fr'\], got 'es'"):
        data.number_words(3, "es")
    with pytest.raises(ValueError, match="n must be <= 999999, got 1000000"):
        data.number_words(10**6, "de")
    with pytest.raises(ValueError, match="high must be <= 999999"):
        data.number_splits(high=10**6)
    with pytest.raises(ValueError, match="high must be >= 10, got 9"):
        data.number_splits(low=10, high=9)


def test_number_splits_are_disjoint_deterministic_and_cover_the_range():
    splits = data.number_splits(low=1, high=2000, seed=0)
    train, valid, test = map(set, (splits.train, splits.valid, splits.test))
    assert not (train & valid or train & test or valid & test)
    assert train | valid | test == set(range(1, 2001)) and len(valid) == len(test) == 100
    assert splits == data.number_splits(low=1, high=2000, seed=0) != data.number_splits(low=1, high=2000, seed=1)
    small = data.number_splits(low=5, high=9, valid_fraction=0.2, test_fraction=0.2)
    assert sorted(small.train + small.valid + small.test) == [5, 6, 7, 8, 9] and len(small.test) == 1


@pytest.mark.parametrize("lang", ["de", "fr"])
def test_number_words_encode_with_the_character_tokenizers(lang):
    source, target = data.number_tokenizers(lang)
    numbers = [*range(0, 1200), *range(1200, data.MAX_NUMBER + 1, 997), data.MAX_NUMBER]
    pairs = data.number_examples(numbers, lang)
    assert {c for x, _ in pairs for c in x} == set(data.NUMBER_CHARS["en"])  # every character is used
    assert {c for _, y in pairs for c in y} == set(data.NUMBER_CHARS[lang])
    src, dec_in, dec_out = data.encode_pairs(pairs[340:345], source, target)
    assert source.decode(src[2]) == "three hundred and forty-two" and dec_in[:, 0].eq(target.bos_id).all()
    assert target.decode(dec_out[2]) == data.number_words(342, lang)
