"""The course's pretrained GPT: characters <-> ids, the hash check, and the shipped checkpoint."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from transformer_course import data, pretrained
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

SHIPPED = Path(pretrained.__file__).parent / pretrained.CHECKPOINT_DIR


def test_encode_decode_round_trip_and_unknown_characters():
    vocabulary = pretrained.character_vocabulary("to be, or not to be")
    assert vocabulary == (" ", ",", "b", "e", "n", "o", "r", "t")
    ids = pretrained.encode("not to be", vocabulary)
    assert ids.dtype == torch.long and ids.tolist() == [4, 5, 7, 0, 7, 5, 0, 2, 3]
    assert pretrained.decode(ids, vocabulary) == pretrained.decode(ids.tolist(), vocabulary) == "not to be"
    # the fast ASCII table and the general path agree (a non-ASCII vocabulary takes the general path)
    wide = (*vocabulary, "é")
    assert pretrained.encode("not to be", wide).tolist() == ids.tolist()
    assert pretrained.encode("été", wide).tolist() == [8, 7, 8]
    with pytest.raises(ValueError, match=r"characters outside the vocabulary: \['!', '\?'\]"):
        pretrained.encode("be?, or not!", vocabulary)
    with pytest.raises(ValueError, match=r"outside the vocabulary: \['é'\]"):
        pretrained.encode("bé", vocabulary)
    with pytest.raises(TypeError, match="text must be a str, got list"):
        pretrained.encode(["a"], vocabulary)
    with pytest.raises(ValueError, match=r"ids must be integers in \[0, 8\), got \[8, -1\]"):
        pretrained.decode([0, 8, -1], vocabulary)
    with pytest.raises(ValueError, match=r"held-out text 1 has characters the training text lacks: \['z'\]"):
        pretrained.character_vocabulary("abc", "cab", "zab")


def test_the_corpus_vocabulary():
    vocabulary = pretrained.character_vocabulary(data.shakespeare("train"), data.shakespeare("valid"),
                                                 data.shakespeare("test"))
    assert len(vocabulary) == 81 and vocabulary[0] == "\n" and "A" in vocabulary and "z" in vocabulary
    text = data.shakespeare("valid")[:5000]
    assert pretrained.decode(pretrained.encode(text, vocabulary), vocabulary) == text


def test_window_batch_and_held_out_loss():
    ids = torch.arange(100)
    batch = pretrained.window_batch(ids, block=8, batch_size=3, seed=0)
    inputs, targets = batch(5)
    assert inputs.shape == targets.shape == (3, 8)
    assert torch.equal(targets, inputs + 1)  # the targets are the next tokens
    assert torch.equal(batch(5)[0], inputs) and not torch.equal(batch(6)[0], inputs)  # batch i is fixed by (seed, i)
    torch.manual_seed(0)
    model = DecoderOnlyLM(DecoderOnlyConfig(vocab_size=100, d_model=16, num_heads=2, d_ff=32, max_len=8))
    loss = pretrained.held_out_loss(model.eval(), ids, block=8, windows=70)  # two chunks: 64 and 6 windows
    starts = torch.linspace(0, 100 - 9, 70).long()
    windows = ids[starts[:, None] + torch.arange(9)]
    with torch.no_grad():
        expected = pretrained.lm_loss(model, (windows[:, :-1], windows[:, 1:])).item()
    assert loss == pytest.approx(expected, rel=1e-6)


def fake_checkpoint(folder: Path) -> str:
    """A small checkpoint in the shipped layout, and its model.pt's sha256."""
    torch.manual_seed(0)
    config = DecoderOnlyConfig(vocab_size=3, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=4)
    folder.mkdir()
    torch.save(DecoderOnlyLM(config).state_dict(), folder / "model.pt")
    (folder / "vocab.txt").write_text("".join(json.dumps(c) + "\n" for c in "\nab"))
    log = {"config": {k: getattr(config, k) for k in config.__dataclass_fields__}}
    (folder / "log.json").write_text(json.dumps(log))
    return hashlib.sha256((folder / "model.pt").read_bytes()).hexdigest()


def test_the_hash_is_checked(tmp_path):
    digest = fake_checkpoint(tmp_path / "ok")
    checkpoint = pretrained._load(tmp_path / "ok", digest)
    assert checkpoint.vocabulary == ("\n", "a", "b") and checkpoint.config.d_model == 8
    assert set(checkpoint.state_dict) == set(DecoderOnlyLM(checkpoint.config).state_dict())
    shutil.copytree(tmp_path / "ok", tmp_path / "damaged")
    weights = bytearray((tmp_path / "damaged" / "model.pt").read_bytes())
    weights[-100] ^= 1
    (tmp_path / "damaged" / "model.pt").write_bytes(bytes(weights))
    with pytest.raises(ValueError, match=r"damaged/model\.pt has sha256 [0-9a-f]{64}, expected "
                                         f"{digest}: the file is damaged"):
        pretrained._load(tmp_path / "damaged", digest)


@pytest.mark.skipif(not (SHIPPED / "model.pt").exists(), reason="the checkpoint is not trained yet")
def test_the_shipped_checkpoint():
    checkpoint = pretrained.shakespeare_checkpoint()
    assert checkpoint.log["model_sha256"] == pretrained.CHECKPOINT_SHA256
    assert (SHIPPED / "model.pt").stat().st_size <= 10_000_000
    assert checkpoint.vocabulary == pretrained.character_vocabulary(data.shakespeare("train"))
    assert checkpoint.config == DecoderOnlyConfig(vocab_size=81, d_model=128, num_heads=4, d_ff=512, num_layers=4,
                                                  max_len=128)
    assert all(t.dtype == torch.float32 for t in checkpoint.state_dict.values())
    model = pretrained.shakespeare_gpt()
    assert not model.training and model.head.weight is model.token_embedding.weight
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, checkpoint.state_dict[name]), name
    # it has learned the plays: far below the bigram baseline (3.62 bits, 2.51 nats) on the held-out plays (log: 1.46)
    ids = pretrained.encode(data.shakespeare("valid"), checkpoint.vocabulary)
    assert pretrained.held_out_loss(model, ids, block=128, windows=64) < 1.7


def test_a_run_cut_by_time_is_repeated_by_stop_after(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_checkpoint", SHIPPED.parents[3] / "tools" /
                                                  "train_checkpoint.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    args = ["--steps", "50", "--eval-windows", "4", "--block", "16", "--batch-size", "2", "--warmup", "0"]
    assert tool.main(["--out", str(tmp_path / "cut"), "--minutes", "0", *args]) == 0  # stops after its first step
    assert tool.main(["--out", str(tmp_path / "repeat"), "--stop-after", "1", *args]) == 0
    cut, repeat = (json.loads((tmp_path / run / "log.json").read_text()) for run in ("cut", "repeat"))
    assert cut["steps"] == repeat["steps"] == 1 and cut["stopped"].startswith("time budget")
    assert cut["model_sha256"] == repeat["model_sha256"]
    # --stop-after keeps the schedule planned for --steps: two steps of a 50-step plan are not a 2-step run
    assert tool.main(["--out", str(tmp_path / "two"), "--stop-after", "2", *args]) == 0
    assert tool.main(["--out", str(tmp_path / "short"), *args[:1], "2", *args[2:]]) == 0
    two, short = (json.loads((tmp_path / run / "log.json").read_text()) for run in ("two", "short"))
    assert two["steps"] == short["steps"] == 2 and two["model_sha256"] != short["model_sha256"]
