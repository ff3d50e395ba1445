"""The grader's parts without a kernel: merging and sharding gradebooks, command-line errors, preparing a
submission, reading notebooks, the record of a check and its replay, messages. Fast: part of make test-fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import threading
from pathlib import Path

import pytest
import torch
from fabricated_class import EXERCISE, NAME, ROOT, cell, correct, insert_after, solution_source

from transformer_course.checks import CheckFailed
from transformer_course.cli import build_parser, main
from transformer_course.grading import execute, grader, selfcheck, verdict
from transformer_course.grading import limits as limits_module
from transformer_course.grading.collect import (
    GradingError,
    find_students,
    load_releases,
    parse_notebooks,
    select_shard,
)
from transformer_course.grading.gradebook import COLUMNS, GradeRow, read_csv
from transformer_course.grading.limits import Limits
from transformer_course.grading.prepare import (
    AUDIT_CELL,
    AUDIT_CELL_ID,
    GRADER_CHECK_IMPORT,
    Prepared,
    load_release,
    prepare,
    strip_markers,
)
from transformer_course.grading.replay import Confirmation


def test_merge_grades_applies_a_regrade(tmp_path, capsys):
    def book(name, rows, columns=COLUMNS):
        path = tmp_path / name
        path.write_text(",".join(columns) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
        return path

    # A gradebook written before the mistake column existed, and a regrade with it: they merge.
    old = book("grades.csv", [("ann", NAME, "01.1", "t", 0, 2, "failed", "x"), ("bo", NAME, "01.1", "t", 2, 2,
                                                                                  "passed", "y"),
                              ("cy", NAME, "01.1", "t", 0, 2, "failed", "w")], columns=COLUMNS[:-1])
    assert [r.mistake for r in read_csv(old)] == ["", "", ""]
    regrade = book("ann.csv", [("ann", NAME, "01.1", "t", 0, 2, "failed", "z", "01.1/head-not-transposed")])
    out = tmp_path / "merged.csv"
    assert main(["merge-grades", str(old), str(regrade), "--out", str(out)]) == 0
    assert [(r.student, r.points, r.message, r.mistake) for r in read_csv(out)] == [
        ("ann", 0, "z", "01.1/head-not-transposed"), ("bo", 2, "y", ""), ("cy", 0, "w", "")]
    assert out.read_text().splitlines()[0] == ",".join(COLUMNS)  # the merged file has the column
    assert "ann: the rows from" in capsys.readouterr().err
    # Two weeks (two notebooks): a student's rows of each notebook are kept; a later week replaces nothing.
    week2 = book("week2.csv", [("ann", "02_attention.ipynb", "02.1", "t", 2, 2, "passed", "v", "")])
    assert main(["merge-grades", str(out), str(week2), "--out", str(out)]) == 0
    assert [(r.student, r.exercise, r.message) for r in read_csv(out)] == [
        ("ann", "01.1", "z"), ("ann", "02.1", "v"), ("bo", "01.1", "y"), ("cy", "01.1", "w")]
    assert "replace" not in capsys.readouterr().err
    short = book("short.csv", [("ann", NAME, "01.1", "t", 0, 2, "failed", "x")])  # new header, old row
    assert main(["merge-grades", str(short)]) == 2
    assert main(["merge-grades", str(tmp_path / "nope.csv")]) == 2
    (tmp_path / "bad.csv").write_text("a,b\n")
    assert main(["merge-grades", str(tmp_path / "bad.csv")]) == 2


def test_shards_are_deterministic_and_cover_everyone_once():
    class S:
        def __init__(self, name):
            self.name = name

    students = [S(n) for n in "abcdefg"]
    shards = [[s.name for s in select_shard(students, (k, 3))] for k in (1, 2, 3)]
    assert shards == [["a", "d", "g"], ["b", "e"], ["c", "f"]]


# --- command-line errors --------------------------------------------------------------------------------


def test_bad_arguments_give_a_one_line_error(tmp_path, capsys, release):
    subs = tmp_path / "subs"
    (subs / "amy").mkdir(parents=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = str(tmp_path / "g.csv")
    cases = [
        (["grade", str(subs), "--out", out, "--release", str(tmp_path / "nowhere")], "release folder"),
        (["grade", str(subs), "--out", out, "--release", str(empty)], "no released exercises"),
        (["grade", str(tmp_path / "missing"), "--out", out, "--release", str(release)], "submissions folder"),
        (["grade", str(empty), "--out", out, "--release", str(release)], "no submissions"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--shard", "3/2"], "--shard 3/2"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--shard", "x"], "--shard x"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--jobs", "0"], "--jobs 0"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--student", "zoe"], "no submission from zoe"),
        (["grade", str(subs), "--out", str(tmp_path / "no" / "g.csv"), "--release", str(release)], "--out"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--timeout", "0"], "--timeout: expected"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--memory-limit", "-1"], "--memory-limit"),
        (["check", str(tmp_path / "x.ipynb"), "--notebook-timeout", "-5"], "--notebook-timeout: expected"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and words in err and "\n" not in err, err
    assert not Path(out).exists()


def _limits_used(argv: list[str], monkeypatch) -> Limits:
    """The limits that ``transformer-course ARGV`` hands to the grading code (grade, or check's grade_unit path)."""
    used = []

    def capture(*args, limits, **kwargs):
        used.append(limits)
        raise GradingError("captured")

    monkeypatch.setattr(grader, "grade", capture)
    monkeypatch.setattr(selfcheck, "check_notebooks", capture)
    assert main(argv) == 2
    (limits,) = used
    return limits


def test_check_and_grade_use_the_one_definition_of_the_grader_limits(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TRANSFORMER_COURSE_CASES_SEED", raising=False)
    grade_argv = ["grade", str(tmp_path), "--out", str(tmp_path / "g.csv")]
    check_argv = ["check", str(tmp_path / "01_x.ipynb")]
    assert _limits_used(grade_argv, monkeypatch) == _limits_used(check_argv, monkeypatch) == Limits()
    text = _subcommand_help("check")
    assert "seconds of CPU time allowed per cell" in text and "on the clock (default: 60, as `grade`)" in text
    # The execution code and the grading functions' own default (limits=None) take the same class.
    assert execute.Limits is grader.Limits is selfcheck.Limits is verdict.Limits is limits_module.Limits

    # Changing the one definition changes both commands (and no other default hides behind it).
    @dataclasses.dataclass(frozen=True)
    class Edited(Limits):
        cell_timeout: float = 7.0
        notebook_timeout: float = 70.0
        memory_limit_mb: int = 700

    monkeypatch.setattr(limits_module, "Limits", Edited)
    assert _limits_used(grade_argv, monkeypatch) == _limits_used(check_argv, monkeypatch) == Edited()
    assert "on the clock (default: 7, as `grade`)" in _subcommand_help("check")
    assert "no limit (default: 700)" in _subcommand_help("grade")


def _subcommand_help(name: str) -> str:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return " ".join(sub.choices[name].format_help().split())


def test_the_guide_lists_every_option_of_grade():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    options = {o for a in sub.choices["grade"]._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
    guide = (ROOT / "book" / "instructor_guide.md").read_text()
    table = guide[guide.index("| option | default | meaning |"):]
    table = table[:table.index("\n\n")]
    listed = set(re.findall(r"^\| `(--[a-z-]+)", table, re.MULTILINE))
    assert listed == options, f"missing from the guide: {sorted(options - listed)}; unknown: {sorted(listed - options)}"


def test_notebooks_selects_a_weeks_release(tmp_path):
    releases = load_releases(ROOT / "exercises", ["03", "01"])
    assert [r.name for r in releases] == ["01_tensor_shapes.ipynb", "03_masking.ipynb"]
    assert parse_notebooks("3, 01,03") == ["01", "03"]
    for bad in ("", "3;4", "week3", "123"):
        with pytest.raises(GradingError, match="expected notebook numbers separated by commas"):
            parse_notebooks(bad)
    with pytest.raises(GradingError, match=r"no released notebook 99_\*.ipynb"):
        load_releases(ROOT / "exercises", ["01", "99"])
    # The command: only notebook 01's exercises, so a student with nothing else handed in has no missing rows.
    submissions = tmp_path / "subs"
    (submissions / "ann").mkdir(parents=True)
    (submissions / "ann" / NAME).write_text(json.dumps(correct()))
    out = tmp_path / "week1.csv"
    assert main(["grade", str(submissions), "--notebooks", "99", "--out", str(out), "--quiet"]) == 2
    assert not out.exists()


# --- preparing a submission (no kernel) -------------------------------------------------------------------


def test_prepared_notebook_restores_checks_and_read_only_cells():
    release = load_release(EXERCISE)
    nb = correct()
    cell(nb, "setup")["source"] = "def check(*args):\n    pass"
    cell(nb, "ex1-task")["source"] = "I rewrote the task."
    nb["cells"].remove(cell(nb, "ex2-check"))
    prepared = prepare(release, json.dumps(nb).encode())
    cells = {c.id: c for c in prepared.nb.cells}
    original = {c.id: c for c in release.nb.cells}
    # the grader's audit cell first, before anything of the learner's (grading/audit.py), then the release's cells
    assert [c.id for c in prepared.nb.cells] == [AUDIT_CELL_ID] + [c.id for c in release.nb.cells]
    assert cells[AUDIT_CELL_ID].source == AUDIT_CELL
    assert cells["setup"].source == original["setup"].source
    assert cells["ex1-task"].source == original["ex1-task"].source
    assert cells["ex2-check"].source == GRADER_CHECK_IMPORT + original["ex2-check"].source
    assert cells["ex1-answer"].source == solution_source("01.1")
    assert prepared.tampered == {"01.2": ["the check cell was deleted"]}
    assert prepared.checks == {"ex1-check": "01.1", "ex2-check": "01.2", "ex3-check": "01.3"}
    assert all(not c.metadata for c in prepared.nb.cells)  # no tags, no learner metadata
    assert all(c.get("outputs", []) == [] for c in prepared.nb.cells)


def test_the_releases_run_all_tag_and_progress_cell_change_nothing_the_grader_runs():
    """The release tags answer and check cells raises-exception (Run All in JupyterLab goes on past a failing
    check) and ends with a progress cell: the prepared notebook carries no tag, the progress cell is no exercise,
    the release's own tag is no tampering, and a tag a learner adds still is."""
    release = load_release(EXERCISE)
    released = {c.id: c for c in release.nb.cells}
    assert "raises-exception" in released["ex1-check"].metadata["tags"]
    assert "raises-exception" in released["ex1-answer"].metadata["tags"]
    assert released["progress"].metadata["transformer_course"] == {"role": "progress"}
    assert [c.exercise for c in release.checks] == ["01.1", "01.2", "01.3"]
    nb = correct()
    cell(nb, "ex2-check")["metadata"]["tags"] = ["raises-exception", "nbval-skip"]
    cell(nb, "progress")["source"] = "print('everything passed')"
    prepared = prepare(release, json.dumps(nb).encode())
    assert all(not c.metadata for c in prepared.nb.cells)
    assert prepared.checks == {"ex1-check": "01.1", "ex2-check": "01.2", "ex3-check": "01.3"}
    assert prepared.tampered == {"01.2": ["nbval tag nbval-skip added to the check cell"]}
    assert prepared.nb.cells[-1].id == "progress" and prepared.nb.cells[-1].source == released["progress"].source


def test_nbval_markers_are_blanked_keeping_line_numbers():
    source = "# NBVAL_SKIP\nx = 1\n  #  NBVAL_RAISES_EXCEPTION\n# a NBVAL_SKIP in prose stays\n"
    assert strip_markers(source) == "#\nx = 1\n  #\n# a NBVAL_SKIP in prose stays\n"


def test_duplicate_and_invalid_ids_of_extra_cells_are_renamed():
    release = load_release(EXERCISE)
    nb = insert_after(correct(), "ex1-check", "x = 1", "ex1-check")  # a copy keeping the check's id
    nb = insert_after(nb, "ex2-check", "y = 2", "bad id!")
    prepared = prepare(release, json.dumps(nb).encode())
    ids = [c.id for c in prepared.nb.cells]
    assert len(ids) == len(set(ids))
    assert "extra-1" in ids and "extra-2" in ids
    assert prepared.tampered == {}


@pytest.mark.parametrize("data, reason", [
    (b"", "not valid JSON (Expecting value at line 1, column 1)"),
    (b"[1, 2]", "not a Jupyter notebook (the JSON is a list, not an object)"),
    (b'{"nbformat": 3, "worksheets": []}', "not a version 4 Jupyter notebook (nbformat 3)"),
    (b'{"nbformat": 4}', "not a Jupyter notebook (it has no list of cells)"),
    (b"\xff\xfe\x00", "the file is not UTF-8 text"),
])
def test_unreadable_notebooks_say_why(data, reason):
    from transformer_course.grading.prepare import UnreadableNotebook

    with pytest.raises(UnreadableNotebook, match=r"^" + re.escape(reason) + "$"):
        prepare(load_release(EXERCISE), data)


def test_both_layouts_are_found_and_stray_files_noted(tmp_path):
    releases = load_releases(ROOT / "exercises")
    (tmp_path / "amy" / "sub").mkdir(parents=True)
    (tmp_path / "amy" / "sub" / NAME).write_text("{}")
    (tmp_path / "amy" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "amy" / ".ipynb_checkpoints" / NAME).write_text("old")
    (tmp_path / f"bo__{NAME}").write_text("{}")
    (tmp_path / f"amy__{NAME}").write_text("second copy")
    (tmp_path / "notes.md").write_text("")
    (tmp_path / "cy__99_unknown.ipynb").write_text("{}")
    students, notes = find_students(tmp_path, releases)
    assert [s.name for s in students] == ["amy", "bo"]
    assert students[0].notebooks[NAME] == b"{}"
    assert notes == [f"ignored amy__{NAME}: amy/{NAME} is graded instead",
                     "ignored cy__99_unknown.ipynb (not STUDENT__NN_topic.ipynb for a released notebook)",
                     "ignored notes.md"]
    with pytest.raises(GradingError):
        find_students(tmp_path / "nope", releases)


def test_row_fields_match_the_documented_columns():
    assert COLUMNS == ["student", "notebook", "exercise", "title", "points", "max_points", "status", "message",
                       "mistake"]
    assert [f for f in GradeRow.__dataclass_fields__] == COLUMNS


# --- the record and its replay outside the kernel (in this process, no kernel) ------------------------------


@pytest.fixture
def toy_exercise(monkeypatch):
    """A registered exercise whose checker draws cases from torch's global generator, some of them after
    calling the learner's function."""
    from transformer_course.checks import REGISTRY
    from transformer_course.checks.core import Case, Exercise, check_function

    def checker(answer):
        first = [Case("first", {"x": torch.randn(3)})]
        n = check_function(answer, lambda x: 2 * x, first)
        later = [Case("drawn after the learner's call", {"x": torch.randn(4)})]
        return n + check_function(answer, lambda x: 2 * x, later)

    monkeypatch.setitem(REGISTRY, "99.1", Exercise("99.1", "Double", 1, checker))
    return "99.1"


def graded_check(tmp_path, monkeypatch, answer, exercise="99.1"):
    """What the grader's check records in a kernel, then what the replay outside it says."""
    from transformer_course.grading import kernel
    from transformer_course.grading.replay import confirm

    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    kernel.recording_check(exercise, answer)
    return confirm(exercise, tmp_path / f"{exercise}.pt")


def test_replay_confirms_a_right_answer_that_uses_the_global_generator(tmp_path, monkeypatch, toy_exercise):
    def noisy_double(x):
        torch.randn(7)  # moves the global generator, as dropout or sampling would
        return 2 * x

    found = graded_check(tmp_path, monkeypatch, noisy_double)
    assert (found.verdict, found.cases) == ("passed", 2)


def test_replay_rejects_what_a_patched_comparison_let_through(tmp_path, monkeypatch, toy_exercise):
    from transformer_course.checks import core

    real_compare = core.compare
    monkeypatch.setattr(core, "compare", lambda *args, **kwargs: None)
    from transformer_course.grading import kernel
    from transformer_course.grading.replay import confirm

    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    kernel.recording_check("99.1", lambda x: 3 * x)  # 'passes' in this (tampered) process
    monkeypatch.setattr(core, "compare", real_compare)
    found = confirm("99.1", tmp_path / "99.1.pt")
    assert found.verdict == "failed" and found.message.startswith("wrong result for first [x (3,)]")


def test_replay_of_opaque_and_missing_records(tmp_path, monkeypatch, toy_exercise):
    from transformer_course.grading.replay import confirm

    class AlwaysEqual:
        def __eq__(self, other):
            return True

    with pytest.raises(CheckFailed):
        graded_check(tmp_path, monkeypatch, lambda x: AlwaysEqual())
    assert confirm("99.1", tmp_path / "99.1.pt").verdict == "no_record"  # a failing check saves nothing
    (tmp_path / "99.1.pt").write_bytes(b"not a torch file")
    assert confirm("99.1", tmp_path / "99.1.pt").verdict == "bad_record"
    torch.save({"exercise": "99.1", "calls": [("value", {"__opaque__": "AlwaysEqual", "repr": "eq"},
                                               torch.get_rng_state())]}, tmp_path / "99.1.pt")
    found = confirm("99.1", tmp_path / "99.1.pt")
    assert found.verdict == "failed" and "expected a torch.Tensor, got AlwaysEqual" in found.message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_record_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, monkeypatch, toy_exercise):
    from transformer_course.grading.replay import confirm

    assert graded_check(tmp_path, monkeypatch, lambda x: 2 * x).verdict == "passed"  # a good record, to link to
    (tmp_path / "99.1.pt").rename(tmp_path / "good.pt")
    os.mkfifo(tmp_path / "99.1.pt")  # opening it for reading would wait for a writer for ever
    result = []
    reader = threading.Thread(target=lambda: result.append(confirm("99.1", tmp_path / "99.1.pt")), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert result and result[0].verdict == "bad_record" and "not a regular file" in result[0].message
    from transformer_course.grading.replay import read_regular_file  # also how the run's result and log are read

    with pytest.raises(ValueError, match="not a regular file"):
        read_regular_file(tmp_path / "99.1.pt", 4000, tail=True)
    assert read_regular_file(tmp_path / "good.pt", 10, tail=True) == (tmp_path / "good.pt").read_bytes()[-10:]
    (tmp_path / "99.1.pt").unlink()
    (tmp_path / "99.1.pt").symlink_to(tmp_path / "good.pt")  # a link to a record (a classmate's, say)
    assert confirm("99.1", tmp_path / "99.1.pt").verdict == "bad_record"


@pytest.mark.parametrize("exercise", ["07.2", "07.3"])
def test_a_module_check_is_re_checked_outside_the_kernel(tmp_path, monkeypatch, exercise):
    """The learner's class is built in the kernel only; the re-check runs the released checker on a stand-in
    with the recorded parameter shapes and forward outputs, so a forged output fails there."""
    from tests.answers.lesson07 import EXERCISES
    from transformer_course.grading.replay import confirm

    right = next(iter(EXERCISES[exercise][1].values()))
    found = graded_check(tmp_path, monkeypatch, right, exercise)
    assert found.verdict == "passed" and found.cases >= 3, found
    record = torch.load(tmp_path / f"{exercise}.pt", weights_only=True)
    kinds = [type(value).__name__ for _, value, _ in record["calls"]]
    assert kinds[0::2] == ["list"] * (len(kinds) // 2) and kinds[1::2] == ["Tensor"] * (len(kinds) // 2)
    forged = [(kind, value + 0.5 if torch.is_tensor(value) else value, rng) for kind, value, rng in record["calls"]]
    torch.save({**record, "calls": forged}, tmp_path / f"{exercise}.pt")
    assert confirm(exercise, tmp_path / f"{exercise}.pt").verdict == "failed"
    renamed = [(kind, [[f"x{n}", shape] for n, shape in value] if isinstance(value, list) else value, rng)
               for kind, value, rng in record["calls"]]
    torch.save({**record, "calls": renamed}, tmp_path / f"{exercise}.pt")
    found = confirm(exercise, tmp_path / f"{exercise}.pt")
    assert found.verdict == "failed" and "the module's parameters must be those of the skeleton" in found.message


@pytest.mark.parametrize("exercise", ["06.1", "06.2"])
def test_checks_that_wrap_the_answer_are_re_checked_too(tmp_path, monkeypatch, exercise):
    from tests.answers.lesson06 import EXERCISES

    right = next(iter(EXERCISES[exercise][1].values()))
    found = graded_check(tmp_path, monkeypatch, right, exercise)
    assert found.verdict == "passed" and found.cases > 0, found


def test_plain_copies_keep_data_and_mark_everything_else():
    from transformer_course.grading.kernel import OPAQUE, plain

    class Sub(torch.Tensor):
        pass

    t = torch.arange(3)
    assert type(plain(torch.nn.Parameter(torch.ones(2)))) is torch.Tensor
    assert plain((t, [1, 2.5], None))[1] == [1, 2.5]
    assert plain(t.as_subclass(Sub))[OPAQUE] == "Sub"
    assert plain({"a": 1})[OPAQUE] == "dict"
    assert "0xADDRESS" in plain(object())["repr"]


def test_review_notes_point_at_code_worth_reading():
    from transformer_course.grading.prepare import review_notes

    assert review_notes(["def f(x):\n    return x @ x.T", "from transformer_course.checks import check"]) == []
    assert review_notes([
        "from transformer_course.multihead import split_heads",
        "import transformer_course.checks.core as core\ncore.compare = None",
        "def check(*args):\n    pass",
        "import sys, builtins\nsys.modules['x'] = None\nget_ipython().set_custom_exc((Exception,), print)",
        "this is not Python",
    ]) == [
        "imports the course's reference code (transformer_course.multihead)",
        "imports the checking code (transformer_course.checks.core)",
        "redefines check",
        "uses builtins, get_ipython, set_custom_exc, sys.modules",
    ]
    # Reading the reference or the cases through the check's objects or the caller's frame, however reached.
    assert review_notes(["def f(x):\n    return check.__globals__['REGISTRY']"]) == ["uses REGISTRY, __globals__"]
    assert review_notes(["import sys\ndef f(x):\n    return sys._getframe(1).f_locals['expected']"]) == [
        "uses _getframe, f_locals"]
    assert review_notes(["import inspect\ndef f(x):\n    return inspect.stack()", "y = torch.stack([x, x])"]) == [
        "uses inspect"]
    assert review_notes(["def f(x):\n    return getattr(f, '__glob' 'als__')"]) == ["uses __globals__"]
    assert review_notes(["import gc\ndef f(x):\n    return gc.get_referrers(x)"]) == ["uses gc, get_referrers"]


def test_a_pass_that_could_not_be_re_checked_carries_a_review_note():
    from transformer_course.grading.execute import CellRecord, RunResult
    from transformer_course.grading.replay import Confirmation
    from transformer_course.grading.verdict import _verdict

    run = RunResult(cells={"ex1-check": CellRecord("ok", confirm=Confirmation("unconfirmed"))})
    status, message = _verdict(None, run, Limits(), "ex1-check", "04.3 Multi-head attention, forward")
    assert status == "passed" and "[review the code: this check could not be re-run outside the kernel]" in message


# --- messages ----------------------------------------------------------------------------------------------


def test_one_sanitiser_makes_messages_the_same_from_run_to_run():
    from transformer_course.grading.messages import sanitize

    raw = ("\x1b[0;31mValueError\x1b[0m: <Foo object at 0x7f3a9c2b1d60> in /tmp/grade-abc/notebook/x.ipynb, "
           'File "/tmp/ipykernel_77/2187431256.py", line 3; 0x10 stays  ')
    assert sanitize(raw, folders={"/tmp/grade-abc": "<grading folder>"}) == (
        "ValueError: <Foo object at 0xADDRESS> in <grading folder>/notebook/x.ipynb, "
        'File "/tmp/ipykernel_77/cell", line 3; 0x10 stays')
    assert sanitize("x" * 100, limit=10) == "xxxxxxx..." and sanitize("x" * 100, limit=None) == "x" * 100
    assert sanitize(None) == ""


# --- the package each notebook imports ------------------------------------------------------------------


def test_each_run_gets_a_copy_of_the_package_and_any_change_to_it_is_seen(tmp_path):
    from transformer_course.grading.snapshot import PACKAGE, Snapshot, environment

    snapshot = Snapshot.of()
    assert "checks/lesson01.py" in snapshot.files and not any("__pycache__" in n for n in snapshot.files)
    folder = snapshot.write(tmp_path / "copy")
    copy = folder / PACKAGE.name
    assert snapshot.changes(folder) == [] and (copy / "checks" / "lesson01.py").read_bytes() == (
        PACKAGE / "checks" / "lesson01.py").read_bytes()
    (copy / "checks" / "__pycache__").mkdir()
    (copy / "checks" / "__pycache__" / "lesson01.cpython-311.pyc").write_bytes(b"planted")  # bytecode counts too
    (copy / "checks" / "core.py").chmod(0o644)
    (copy / "checks" / "core.py").write_text("def check(*args): pass\n")
    (copy / "viz.py").unlink()
    assert snapshot.changes(folder) == ["checks/__pycache__/lesson01.cpython-311.pyc added", "checks/core.py modified",
                                        "viz.py removed"]
    assert environment(folder)["PYTHONPATH"].split(os.pathsep)[0] == str(folder)


# --- gradebook hygiene -------------------------------------------------------------------------------------


def test_cells_a_spreadsheet_would_run_as_formulas_are_escaped_and_read_back(tmp_path):
    from transformer_course.grading.gradebook import write_csv

    rows = [GradeRow("=HYPERLINK(\"http://x\")", NAME, "01.1", "t", 0, 2, "error", "-1 is not a valid id"),
            GradeRow("@bob", NAME, "01.1", "t", 2, 2, "passed", "+ all 5 cases passed"),
            GradeRow("'quoted", NAME, "01.1", "t", 2, 2, "passed", "all 5 cases passed")]
    path = tmp_path / "grades.csv"
    write_csv(rows, path)
    cells = [line.split(",")[0] for line in path.read_text().splitlines()[1:]]
    assert cells == ["\"'=HYPERLINK(\"\"http://x\"\")\"", "'@bob", "''quoted"]  # what a spreadsheet shows as text
    assert "'-1 is not a valid id" in path.read_text() and "'+ all 5" in path.read_text()
    assert read_csv(path) == rows  # merge-grades and regrades see the original text


def test_a_student_named_index_or_class_does_not_replace_the_summary_or_the_class_page(tmp_path):
    from transformer_course.grading.report import write_html

    written = write_html([GradeRow("index", NAME, "01.1", "t", 2, 2, "passed", "ok"),
                          GradeRow("Index", NAME, "01.1", "t", 0, 2, "failed", "no"),
                          GradeRow("class", NAME, "01.1", "t", 0, 2, "failed", "no")], tmp_path)
    assert sorted(p.name for p in written) == ["Index-2.html", "class-2.html", "class-pass-rate.png", "class.html",
                                               "index-3.html", "index.html"]
    assert "<h1>Grades</h1>" in (tmp_path / "index.html").read_text()
    assert "<h1>Class report</h1>" in (tmp_path / "class.html").read_text()



# --- partial credit: checkers that grade by bands (registry.Score) ---------------------------------------------


@pytest.fixture
def banded_exercise(monkeypatch):
    """A registered exercise worth 2 points, graded by bands on what the learner's function returns (0 .. 1)."""
    from transformer_course.checks import REGISTRY
    from transformer_course.checks.core import Case, Exercise, Score, call_answer

    def checker(answer):
        value = call_answer(answer, Case("the value", {}))
        if type(value) is not float:
            raise CheckFailed(f"expected a float, got {type(value).__name__}")
        return Score(2 if value >= 0.9 else 1 if value >= 0.5 else 0, f"measured {value:.2f}", 1)

    monkeypatch.setitem(REGISTRY, "99.2", Exercise("99.2", "Banded", 2, checker))
    return "99.2"


def test_part_of_the_points_is_printed_in_the_kernel_and_re_scored_outside_it(tmp_path, monkeypatch, capsys,
                                                                               banded_exercise):
    found = graded_check(tmp_path, monkeypatch, lambda: 0.7, "99.2")
    assert capsys.readouterr().out == "\u25d1 99.2 Banded: 1/2 points: measured 0.70\n"  # no CheckFailed
    assert found == Confirmation("partial", "1/2 points: measured 0.70", 1, 1)
    found = graded_check(tmp_path, monkeypatch, lambda: 0.95, "99.2")
    assert "public checks passed (2/2 points: measured 0.95)" in capsys.readouterr().out
    assert found == Confirmation("passed", "2/2 points: measured 0.95", 1, 2)
    (tmp_path / "99.2.pt").unlink()
    with pytest.raises(CheckFailed, match=r"^99.2 Banded: 0/2 points: measured 0.20$"):  # no points: a failure
        graded_check(tmp_path, monkeypatch, lambda: 0.2, "99.2")
    assert not (tmp_path / "99.2.pt").exists()


def test_the_points_come_from_the_re_check_not_from_the_kernel(tmp_path, monkeypatch, banded_exercise):
    from transformer_course.grading.replay import confirm

    graded_check(tmp_path, monkeypatch, lambda: 0.95, "99.2")
    record = torch.load(tmp_path / "99.2.pt", weights_only=True)
    for forged, expected in ((0.6, ("partial", 1)), (0.1, ("failed", None))):
        torch.save({**record, "calls": [("value", forged, record["calls"][0][2])]}, tmp_path / "99.2.pt")
        found = confirm("99.2", tmp_path / "99.2.pt")
        assert (found.verdict, found.points) == expected, found


def test_a_partial_row_has_its_points_status_and_measured_result():
    from transformer_course.grading.execute import CellRecord, RunResult
    from transformer_course.grading.prepare import CheckCell, Prepared, Release
    from transformer_course.grading.report import summary
    from transformer_course.grading.verdict import unit_rows

    release = Release("12_x.ipynb", None, [CheckCell("a-check", "12.4", "Capstone", 4),
                                           CheckCell("b-check", "12.5", "Other", 2)])
    partial = Confirmation("partial", "3/4 points: exact 91%", 300, 3)
    run = RunResult(cells={"a-check": CellRecord("ok", confirm=partial),
                           "b-check": CellRecord("ok", confirm=Confirmation("passed", "", 5))})
    prepared = Prepared(None, {"a-check": "12.4", "b-check": "12.5"}, review=["imports num2words"])
    rows = unit_rows("amy", release, prepared, run, Limits())
    assert [(r.points, r.max_points, r.status, r.message) for r in rows] == [
        (3, 4, "partial", "3/4 points: exact 91% [review the code: it imports num2words]"),
        (2, 2, "passed", "all 5 cases passed [review the code: it imports num2words]"),
    ]
    table = summary(rows)
    assert "partial" in table.splitlines()[0] and "5/6 points in all" in table


def test_the_capstone_is_re_scored_outside_the_kernel_from_the_ids_its_model_wrote(tmp_path, monkeypatch):
    """A table of answers, filled before the check, stands in for a trained model (fast, and no library call while
    the check translates): the record holds the token ids; the re-check decodes and scores them itself."""
    from tests.answers.capstone import LookUp
    from transformer_course.checks import capstone
    from transformer_course.grading.replay import DECODED_IN_KERNEL, confirm

    numbers = capstone.held_out_numbers()
    right = {n: capstone._german(n) for n in numbers}
    wrong = set(numbers[::4])  # a quarter of the translations wrong: exact match 75%

    found = graded_check(tmp_path, monkeypatch, LookUp(right.__getitem__), "12.4")
    assert (found.verdict, found.points) == ("passed", 4)
    n = capstone.SAMPLE
    assert found.message == f"4/4 points: exact match 100.0% ({n} of {n} held-out numbers), chrF 100.0"
    # Not the package's Seq2SeqTransformer: the grader cannot rebuild it, so the points rest on the kernel's ids.
    assert not found.rebuilt and found.review == DECODED_IN_KERNEL
    record = torch.load(tmp_path / "12.4.pt", weights_only=True)
    assert "answer" not in record
    (kind, ids, rng), = record["calls"]
    assert kind == "value" and ids.dtype == torch.long and ids.shape[0] == capstone.SAMPLE

    found = graded_check(tmp_path, monkeypatch, LookUp(lambda n: "eins" if n in wrong else right[n]), "12.4")
    assert (found.verdict, found.points) == ("partial", 2) and found.message.startswith("2/4 points: exact match 75.")
    forged = ids.clone()
    forged[:, 0] = 5  # what the kernel recorded decides, not what it printed
    torch.save({**record, "calls": [("value", forged, rng)]}, tmp_path / "12.4.pt")
    assert confirm("12.4", tmp_path / "12.4.pt").verdict in ("partial", "failed")
    torch.save({**record, "calls": [("value", ids.float(), rng)]}, tmp_path / "12.4.pt")
    found = confirm("12.4", tmp_path / "12.4.pt")
    assert found.verdict == "failed" and "the translations recorded are malformed" in found.message


def test_review_notes_flag_the_number_word_generator():
    from transformer_course.grading.prepare import review_notes

    flagged = "uses the number-word generator behind the capstone's answers"
    assert review_notes(["from num2words import num2words"]) == [f"{flagged} (num2words)"]
    assert review_notes(["import num2words.lang_DE as de"]) == [f"{flagged} (num2words)"]
    assert review_notes(["pairs = data.number_examples(data.number_splits().test)"]) == [
        f"{flagged} (number_examples, number_splits)"]
    assert review_notes(["f = getattr(data, 'number_words')"]) == [f"{flagged} (number_words)"]
    # Spelled in pieces (issue 34): joined constants, f-strings, "".join, and a piece of a name joined with a value.
    assert review_notes(['exec("from num" + "2words import num2words")']) == [f"{flagged} (num2words)"]
    pieces = f"{flagged} (number_... (a name built from pieces))"
    assert review_notes(["f = getattr(data, 'number_' + kind)"]) == [pieces]
    assert review_notes(["f = getattr(data, f'number_{kind}')"]) == [pieces]
    assert review_notes(["g = getattr(f, '__glob' + 'als__')"]) == ["uses __globals__"]
    assert review_notes(["g = getattr(f, ''.join(['__glob', 'als__']))"]) == ["uses __globals__"]
    assert review_notes(['import os\nm = os.sys.modules["import" + "lib"]']) == ["uses importlib, sys.modules"]
    # Ordinary strings built from pieces are not names.
    assert review_notes(['print(f"loss {loss:.3f} after {n} steps: " + "done")',
                         'label = "English" + " -> German"']) == []
    # The capstone's solution: the read-only setup cell imported the package's parts; the answer uses them.
    answer = ("model = Seq2SeqTransformer(config)\nhistory = train(model, batches, loss_of, max_steps=300)\n"
              "scores = evaluate_translator(model, valid_pairs)\ntranslator = model")
    assert review_notes([answer]) == []


def test_a_recognised_mistake_travels_from_the_kernel_to_its_row(tmp_path, monkeypatch):
    """The grader's check in the kernel writes the mistake's id, the plugin reads it after the check cell, the
    grader keeps it if it is a well-formed id, and the failed row names it as EXERCISE/ID."""
    from transformer_course.grading import kernel, plugin
    from transformer_course.grading.execute import CellRecord, RunResult
    from transformer_course.grading.prepare import CheckCell, Prepared, Release
    from transformer_course.grading.verdict import unit_rows

    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    with pytest.raises(CheckFailed) as failure:
        kernel.recording_check("01.2", lambda t: (t[..., 1:], t[..., :-1]))
    written = plugin._read_mistake(tmp_path / "01.2.mistake")
    assert written == failure.value.mistake.id == "inputs-targets-swapped"
    with pytest.raises(CheckFailed):
        kernel.recording_check("01.1", lambda t, E, W, b: E[t] @ W.T + 2 * b)  # wrong, but no known mistake
    assert not (tmp_path / "01.1.mistake").exists() and plugin._read_mistake(tmp_path / "01.1.mistake") == ""
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.mistake")
        assert plugin._read_mistake(tmp_path / "fifo.mistake") == ""  # not read, and no wait for a writer

    def failed(mistake):
        return CellRecord.from_json({"state": "error", "ename": "CheckFailed", "evalue": "01.2 T: wrong",
                                     "mistake": mistake})

    assert failed("../../etc/passwd").mistake == failed("x" * 41).mistake == failed(["a"]).mistake == ""
    release = Release("01_x.ipynb", None, [CheckCell("a", "01.2", "T", 2), CheckCell("b", "01.3", "U", 1),
                                           CheckCell("c", "01.4", "V", 1)])
    run = RunResult(cells={"a": failed(written), "b": failed(""), "c": CellRecord("ok", confirm=Confirmation(
        "passed", "", 3))})
    rows = unit_rows("amy", release, Prepared(None, {"a": "01.2", "b": "01.3", "c": "01.4"}), run, Limits())
    assert [(r.status, r.mistake) for r in rows] == [("failed", "01.2/inputs-targets-swapped"), ("failed", ""),
                                                     ("passed", "")]
    tampered = Prepared(None, {"a": "01.2"}, tampered={"01.2": ["the check cell was deleted"]})
    assert unit_rows("amy", Release("01_x.ipynb", None, release.checks[:1]), tampered, run, Limits())[0].mistake == ""


def test_a_failed_check_after_an_answer_cell_that_ran_out_of_time_says_so():
    import nbformat

    from transformer_course.grading.execute import CellRecord, RunResult
    from transformer_course.grading.verdict import _verdict

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(id=i) for i in ("a-answer", "a-check")])
    prepared = Prepared(nb, {"a-check": "12.4"})
    stub = "12.4 Capstone: translator is not implemented yet: build and train your model"
    run = RunResult(cells={"a-answer": CellRecord("timeout"), "a-check": CellRecord("error", "CheckFailed", stub)})
    assert _verdict(prepared, run, Limits(), "a-check", "12.4 Capstone") == (
        "failed",
        "translator is not implemented yet: build and train your model (cell a-answer did not finish in time)")
    run.cells["a-answer"] = CellRecord("ok")
    assert _verdict(prepared, run, Limits(), "a-check", "12.4 Capstone")[1].endswith("train your model")


# What the grader's own process imports after the first notebook started (run in a fresh interpreter, where
# nothing of the course is imported yet): a kernel can rewrite the installed package or plant bytecode in its
# __pycache__, so nothing of the course may be imported from it once a kernel ran; --html included.
LATE_IMPORTS = """
import sys
from transformer_course.cli import main
from transformer_course.grading import grader, verdict

late = []
def unit(student, release, data, limits, snapshot=None):
    late.append(set(sys.modules))
    return verdict.missing_rows(student, release)

grader.grade_unit = unit
code = main(["grade", sys.argv[1], "--release", sys.argv[2], "--out", sys.argv[3], "--html", sys.argv[4], "--quiet"])
assert code == 0 and late, code
print(sorted(m for m in set(sys.modules) - late[0] if m.startswith("transformer_course") or m.startswith("matplotlib")))
"""


def test_the_grader_imports_nothing_of_the_course_after_the_first_notebook_started(tmp_path, release):
    import subprocess
    import sys

    (tmp_path / "submissions" / "amy").mkdir(parents=True)
    (tmp_path / "submissions" / "amy" / NAME).write_text(json.dumps(correct()))
    args = [str(tmp_path / "submissions"), str(release), str(tmp_path / "grades.csv"), str(tmp_path / "html")]
    done = subprocess.run([sys.executable, "-c", LATE_IMPORTS, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    late = done.stdout.strip().splitlines()[-1]  # after the summary that grade prints
    assert late == "[]", f"imported after the first notebook started: {late}"
    assert (tmp_path / "html" / "class.html").exists()


class _SlowStream:
    """A stderr that takes a moment per write, as a busy terminal does: lines written in pieces interleave."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        import time

        time.sleep(0.002)
        self.text += text

    def flush(self):
        pass


def test_progress_lines_of_notebooks_finishing_together_do_not_collide(tmp_path, monkeypatch, release):
    import time

    def unit(student, rel, data, limits, snapshot=None):
        time.sleep(0.05)  # every unit finishes at about the same moment
        return verdict.missing_rows(student, rel)

    for name in ("ann", "ben", "cat", "dan", "eve", "fay", "gus", "hal"):
        (tmp_path / "submissions" / name).mkdir(parents=True)
        (tmp_path / "submissions" / name / NAME).write_text(json.dumps(correct()))
    monkeypatch.setattr(grader, "grade_unit", unit)
    stream = _SlowStream()
    monkeypatch.setattr("sys.stderr", stream)
    assert main(["grade", str(tmp_path / "submissions"), "--release", str(release), "--out",
                 str(tmp_path / "grades.csv"), "--jobs", "8"]) == 0
    lines = [line for line in stream.text.splitlines() if line.startswith("graded") or " graded " in line]
    assert len(lines) == 8, stream.text
    pattern = re.compile(r"graded [a-z]+ / 01_tensor_shapes\.ipynb: 0/5 points \(missing\) in \d+\.\d s")
    assert all(pattern.fullmatch(line) for line in lines), "\n".join(lines)
