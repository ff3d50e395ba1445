"""`transformer-course similarity`: pairs of learners' answers that share code, per exercise (copydetect).

A fabricated class for exercises 01: ada writes the answers; bob copies them with other names and comments; cat
writes 01.1 her own way; dan hands in the stub; frank copies ada's 01.1 inside a much longer answer; gina copies it
into a cell she added after the answer cell, leaving the stub; eve's notebook is not JSON. No kernel runs.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import re
from pathlib import Path

import pytest

from transformer_course.cli import main
from transformer_course.grading import collect, similarity

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / "exercises" / "01_tensor_shapes.ipynb"

ADA_1 = ("    vectors = embedding[tokens]\n    logits = vectors @ head_weight.T\n    logits = logits + head_bias\n"
         "    return logits\n")
BOB_1 = ("    # look up each token\n    v = embedding[tokens]\n    out = v @ head_weight.T\n"
         "    out = out + head_bias  # add the bias\n    return out\n")
CAT_1 = ("    import torch\n    one_hot = torch.nn.functional.one_hot(tokens, embedding.shape[0]).to(embedding.dtype)\n"
         "    return torch.einsum('...nv,vd,kd->...nk', one_hot, embedding, head_weight) + head_bias\n")
FRANK_1 = ("    def check_shapes(tokens, embedding, head_weight, head_bias):\n"
           "        if tokens.dtype not in (torch.int64, torch.int32):\n"
           "            raise TypeError(f'tokens must be integers, got {tokens.dtype}')\n"
           "        if embedding.dim() != 2 or head_weight.dim() != 2 or head_bias.dim() != 1:\n"
           "            raise ValueError('embedding and head_weight must be matrices, head_bias a vector')\n"
           "        if head_weight.shape[1] != embedding.shape[1] or head_bias.shape[0] != head_weight.shape[0]:\n"
           "            raise ValueError(f'shapes {embedding.shape}, {head_weight.shape}, {head_bias.shape} differ')\n"
           "    check_shapes(tokens, embedding, head_weight, head_bias)\n" + ADA_1)
ADA_2 = "    inputs = tokens[..., :-1]\n    targets = tokens[..., 1:]\n    return inputs, targets\n"
BOB_2 = "    x = tokens[..., :-1]\n    y = tokens[..., 1:]\n    return x, y\n"


def _release() -> dict:
    return json.loads(RELEASE.read_text())


def _filled(cell_id: str, body: str) -> str:
    stub = "".join(next(c for c in _release()["cells"] if c.get("id") == cell_id)["source"])
    return stub[: stub.index("    raise NotImplementedError")] + body


def _student(folder: Path, name: str, answers: dict[str, str], extra_after: dict[str, str] | None = None):
    nb = copy.deepcopy(_release())
    cells = []
    for cell in nb["cells"]:
        if cell.get("id") in answers:
            cell["source"] = answers[cell["id"]]
        cells.append(cell)
        if extra_after and cell.get("id") in extra_after:
            cells.append({"cell_type": "code", "id": f"mine-{len(cells)}", "metadata": {}, "execution_count": None,
                          "outputs": [], "source": extra_after[cell["id"]]})
    nb["cells"] = cells
    (folder / name).mkdir(parents=True)
    (folder / name / RELEASE.name).write_text(json.dumps(nb))


@pytest.fixture(scope="module")
def submissions(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("similar") / "submissions"
    _student(folder, "ada", {"ex1-answer": _filled("ex1-answer", ADA_1), "ex2-answer": _filled("ex2-answer", ADA_2)})
    _student(folder, "bob", {"ex1-answer": _filled("ex1-answer", BOB_1), "ex2-answer": _filled("ex2-answer", BOB_2)})
    _student(folder, "cat", {"ex1-answer": _filled("ex1-answer", CAT_1)})
    _student(folder, "dan", {})
    _student(folder, "frank", {"ex1-answer": _filled("ex1-answer", FRANK_1)})
    _student(folder, "gina", {}, extra_after={"ex1-answer": "def token_logits(tokens, embedding, head_weight, "
                                              "head_bias):\n" + ADA_1})
    (folder / "eve").mkdir()
    (folder / "eve" / RELEASE.name).write_text("{not json")
    return folder


def _compare(submissions, **options):
    releases = collect.load_releases(ROOT / "exercises")
    releases = [r for r in releases if r.name == RELEASE.name]
    students, _ = collect.find_students(submissions, releases)
    reports, notes = similarity.compare(releases, students, **options)
    return {r.exercise: r for r in reports}, notes


def test_copies_are_paired_whatever_their_names_and_comments(submissions):
    reports, notes = _compare(submissions)
    one = reports["01.1"]
    assert [(p.first, p.second, p.similarity) for p in one.top] == [("ada", "bob", 1.0)]
    assert [(p.first, p.second) for p in reports["01.2"].top] == [("ada", "bob")]
    assert notes == [f"eve/{RELEASE.name}: not read (not valid JSON (Expecting property name enclosed in double "
                     "quotes at line 1, column 2))"]


def test_the_stub_counts_for_nothing_and_a_copy_inside_more_code_is_not_a_pair(submissions):
    """dan handed in the stub: not a student of 01.1. cat shares the released def line and docstring with everyone,
    and nothing else. frank's answer holds all of ada's, but ada's is a small part of frank's: the smaller share
    counts."""
    reports, _ = _compare(submissions, threshold=0.01, top=100)
    one = reports["01.1"]
    assert one.students == 5 and one.pairs == 10  # ada, bob, cat, frank, gina
    named = {(p.first, p.second): p for p in one.top}
    assert not [pair for pair in named if "cat" in pair]
    frank = named[("ada", "frank")]
    assert frank.shares[0] > 0.5 and frank.shares[1] < 0.2 and frank.similarity == frank.shares[1]
    gina = named[("ada", "gina")]  # her copy sits in a cell she added: it is her code for 01.1 all the same
    assert gina.shares[0] > 0.5 and gina.shared_tokens >= 25
    reports, _ = _compare(submissions)
    assert ("ada", "frank") not in {(p.first, p.second) for p in reports["01.1"].top}
    assert reports["01.1"].above == 1 and reports["01.3"].students == 0


def test_the_page_marks_the_shared_code_and_escapes_names(submissions, tmp_path):
    reports, notes = _compare(submissions)
    folder = tmp_path / "class"
    page, table = similarity.write_report(reports.values(), folder, 0.5, notes)
    text = page.read_text()
    assert "<h3>ada and bob: 100%</h3>" in text and "<mark>" in text and "not a verdict" in text
    assert "1 of 10 pairs (10%) reach 50%" in text
    assert "eve/01_tensor_shapes.ipynb: not read" in text
    marked = reports["01.1"].top[0].marked[1]  # bob's code: the comment is his own, the code is shared
    assert "<mark>" in marked and "# look up each token" in marked.replace("<mark>", "").replace("</mark>", "")
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert [(r["exercise"], r["student_a"], r["student_b"], r["similarity"]) for r in rows] == [
        ("01.1", "ada", "bob", "1.000"), ("01.2", "ada", "bob", "1.000")]
    weird = similarity.ExerciseReport("01.1", "T", 2, 1, 1, [similarity.Pair("01.1", "<b>a", "b&", (1.0, 1.0), 30,
                                                                             ("x", "y"))])
    assert "&lt;b&gt;a and b&amp;: 100%" in similarity.report_page([weird], 0.5)


@pytest.mark.parametrize(("options", "message"), [
    ({"threshold": 0}, "threshold: expected a share of the code in (0, 1], got 0"),
    ({"threshold": 1.5}, "threshold: expected a share of the code in (0, 1], got 1.5"),
    ({"top": 0}, "top: expected a whole number of pairs >= 1, got 0"),
])
def test_bad_options_are_named(submissions, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _compare(submissions, **options)


def test_the_command_writes_the_report_where_asked(submissions, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["similarity", str(submissions), "--release", str(ROOT / "exercises"), "--out", str(out)]) == 0
    assert (out / "similarity.html").is_file() and (out / "similarity.csv").is_file()
    assert "2 pair(s) listed at 50% or more" in capsys.readouterr().out
    assert main(["similarity", str(submissions), "--release", str(ROOT / "exercises"), "--out", str(out),
                 "--top", "0"]) == 2
    assert "--top 0: expected a whole number of pairs >= 1" in capsys.readouterr().err
    assert main(["similarity", str(submissions), "--release", str(ROOT / "exercises"), "--out", str(out),
                 "--threshold", "2"]) == 2
    assert "--threshold 2: expected a share of the code in (0, 1]" in capsys.readouterr().err
    assert main(["similarity", str(submissions), "--release", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "release folder" in capsys.readouterr().err
    file = tmp_path / "a-file"
    file.write_text("")
    assert main(["similarity", str(submissions), "--release", str(ROOT / "exercises"), "--out", str(file)]) == 2
    assert "expected a folder, found a file" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --out is required: the report names students
        main(["similarity", str(submissions), "--release", str(ROOT / "exercises")])
