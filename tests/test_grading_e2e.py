"""`transformer-course grade` end to end on a fabricated class (tests/fabricated_class.py): every status, every
kind of tampering, the time and memory limits, shards, determinism under load. Each test grades real notebooks
in real kernels, so every test here is marked slow (make test runs them; make test-fast does not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from fabricated_class import (
    LIMITS,
    NAME,
    correct,
    expected_rows,
    fabricate,
    insert_after,
    read_rows,
    released,
    with_sources,
)

from transformer_course.checks import check
from transformer_course.cli import main
from transformer_course.grading.gradebook import COLUMNS, read_csv

pytestmark = pytest.mark.slow  # every test grades notebooks in kernels


# Starts and stops kernels over TCP in a loop, as another user's notebooks or a second grader would: about one
# kernel every three seconds, each taking ports while the grader's kernels pick theirs (without the pause, the loop
# alone took half a core for the whole grading).
KERNEL_CHURN = """
import time
from jupyter_client.manager import start_new_kernel
while True:
    km, kc = start_new_kernel(kernel_name="python3")
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    time.sleep(2)
"""


class Beside(NamedTuple):
    process: subprocess.Popen
    out: Path
    log: Path  # the grader's stderr

    def rows(self):
        """The gradebook, once the grader has finished with exit status 0."""
        assert self.process.wait(timeout=600) == 0, self.log.read_text()[-4000:]
        return read_csv(self.out)


@pytest.fixture(scope="module")
def beside(tmp_path_factory, release):
    """Gradings that mostly wait (a notebook asleep until its time limit; a kernel retried until it gives up for want
    of memory), each by a grader process of its own, started before the class's grading so that the waits overlap
    it rather than follow it. The tests below read their gradebooks."""
    root = tmp_path_factory.mktemp("beside")
    runs = {}
    for student, nb, options in [
        ("trent", insert_after(correct(), "ex1-check", "import time\ntime.sleep(600)", "nap"),
         ["--timeout", "300", "--notebook-timeout", "40"]),  # asleep well within the class's grading
        ("uma", correct(), ["--memory-limit", "300"]),
    ]:
        (root / student / "submissions" / student).mkdir(parents=True)
        (root / student / "submissions" / student / NAME).write_text(json.dumps(nb))
        out, log = root / student / "grades.csv", root / student / "grader.log"
        command = [sys.executable, "-m", "transformer_course.cli", "grade", str(root / student / "submissions"),
                   "--release", str(release), "--out", str(out), "--quiet", *options]
        with open(log, "wb") as stderr:
            runs[student] = Beside(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr), out, log)
    yield runs
    for run in runs.values():
        run.process.kill()
        run.process.wait()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, release, beside):
    """Grade the fabricated submissions once with the command line, as an instructor would, and under load: twice
    as many jobs as cores while another program starts and stops kernels. The rows are then compared with what each
    submission must get (tests below), so a row that depends on the load (a cell timed out, a kernel that failed to
    start, a record replayed late) shows as a wrong row."""
    root = tmp_path_factory.mktemp("class")
    submissions = root / "submissions"
    submissions.mkdir()
    expected = fabricate(submissions)
    out = root / "grades.csv"
    churn = subprocess.Popen([sys.executable, "-c", KERNEL_CHURN], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        code = main(["grade", str(submissions), "--release", str(release), "--out", str(out),
                     "--jobs", str(2 * (os.cpu_count() or 1)), "--html", str(root / "report"), "--quiet", *LIMITS])
    finally:
        churn.kill()
        churn.wait()
    return code, expected, out, root


# --- the gradebook of the fabricated class ---------------------------------------------------------------


def test_grading_runs_and_exits_zero(graded):
    code, expected, out, _ = graded
    assert code == 0
    assert len(expected) >= 12
    assert not [r for r in read_rows(out)[1:] if "the notebook could not be run" in r[-2]]  # every kernel started


@pytest.mark.parametrize("student", ["ada", "arthur", "blank", "bob", "carol", "dave", "frank", "grace", "heidi",
                                     "ivan", "judy", "ken", "lena", "mallory", "oscar", "peggy", "quinn", "rita",
                                     "sam", "trudy"])
def test_rows_of_each_fabricated_submission(graded, student):
    _, expected, out, _ = graded
    rows = [r for r in read_rows(out)[1:] if r[0] == student]
    assert rows == expected_rows({student: expected[student]}), "got:\n" + "\n".join(map(repr, rows))


def test_the_whole_csv_is_exactly_as_expected(graded):
    _, expected, out, _ = graded
    rows = read_rows(out)
    assert rows[0] == COLUMNS
    assert rows[1:] == expected_rows(expected)


def test_every_status_is_covered(graded):
    _, _, out, _ = graded
    assert {r[6] for r in read_rows(out)[1:]} == {"passed", "failed", "error", "timeout", "missing", "tampered"}


def test_feedback_pages(graded):
    _, expected, out, root = graded
    index = (root / "report" / "index.html").read_text()
    for student in expected:
        page = (root / "report" / f"{student}.html").read_text()
        assert f"Feedback for {student}" in page
        assert f'href="{student}.html"' in index
    carol = (root / "report" / "carol.html").read_text()
    assert "tampered" in carol and "the check cell was deleted" in carol
    # The class report beside them counts bob's two recognised mistakes (the gradebook's mistake column).
    assert 'href="class.html"' in index
    page = (root / "report" / "class.html").read_text()
    assert "01.1/head-not-transposed</code></td><td>1<" in page and "01.2/inputs-targets-swapped" in page


# --- the notebook time limit, shards and merging, determinism ---------------------------------------------


def test_notebook_time_limit_kills_the_run_and_keeps_finished_checks(beside):
    limit = "not run: the notebook's 40 s time limit ran out while cell nap was running"
    assert [(r.exercise, r.status, r.points, r.message) for r in beside["trent"].rows()] == [
        ("01.1", "passed", 2, "all 5 cases passed"),
        ("01.2", "timeout", 0, limit),
        ("01.3", "timeout", 0, limit),
    ]


def test_a_kernel_that_cannot_start_for_memory_says_so(beside):
    # 300 MiB of address space. Here ipykernel itself cannot start its threads; on CI's machine the kernel
    # started and `import torch` failed ("failed to map segment from shared object"). Either way the row
    # must say that memory ran out and which option to raise.
    for row in beside["uma"].rows():
        assert row.status == "error"
        assert row.message.endswith("it ran out of memory: raise --memory-limit (now 300 MiB)") or (
            row.message.startswith("not run: the kernel died") and "--memory-limit 300 MiB" in row.message), row.message


MEMORISED = (
    "import torch\nfrom transformer_course.checks.lesson01 import _logits_cases\n\n"
    "_TABLE = {}\nfor _case in _logits_cases():  # the public cases, read from the package\n"
    "    _t, _E, _W, _b = _case.fresh_args()\n"
    "    _TABLE[tuple(_t.flatten().tolist())] = _E[_t] @ _W.T + _b\n\n"
    "def token_logits(tokens, embedding, head_weight, head_bias):\n"
    "    return _TABLE[tuple(tokens.flatten().tolist())]  # outputs memorised for the public cases\n"
)


def test_hidden_cases_fail_memorised_outputs_and_pass_right_answers(tmp_path, release, capsys):
    namespace = {}
    exec(MEMORISED, namespace)
    check("01.1", namespace["token_logits"])  # the memorised outputs pass the public cases (no kernel needed)
    assert "public checks passed" in capsys.readouterr().out
    submissions = tmp_path / "submissions"
    (submissions / "mia").mkdir(parents=True)
    (submissions / "mia" / NAME).write_text(json.dumps(with_sources(correct(), ex1=MEMORISED)))
    hidden = tmp_path / "hidden.csv"
    args = [str(submissions), "--release", str(release), "--quiet", *LIMITS]
    assert main(["grade", *args, "--out", str(hidden), "--cases-seed", "4242"]) == 0
    rows = read_csv(hidden)
    assert [r.status for r in rows] == ["failed", "passed", "passed"], rows  # re-checked on the same hidden cases
    assert "your code raised KeyError" in rows[0].message


def test_shards_merge_into_the_full_gradebook(tmp_path, release):
    submissions = tmp_path / "submissions"
    for student in ("amy", "ben", "cat"):
        (submissions / student).mkdir(parents=True)
    (submissions / "amy" / NAME).write_text(json.dumps(released()))
    (submissions / "ben" / NAME).write_text("not json")
    args = ["--release", str(release), "--quiet", *LIMITS]
    full, one, two = tmp_path / "full.csv", tmp_path / "one.csv", tmp_path / "two.csv"
    assert main(["grade", str(submissions), "--out", str(full), "--jobs", "2", *args]) == 0
    assert main(["grade", str(submissions), "--out", str(one), "--shard", "1/2", *args]) == 0
    assert main(["grade", str(submissions), "--out", str(two), "--shard", "2/2", *args]) == 0
    assert {r.student for r in read_csv(one)} == {"amy", "cat"}
    assert {r.student for r in read_csv(two)} == {"ben"}
    merged = tmp_path / "merged.csv"
    assert main(["merge-grades", str(two), str(one), "--out", str(merged)]) == 0
    assert merged.read_bytes() == full.read_bytes()  # same rows, same order, same bytes


def test_a_week_graded_alone_has_only_its_exercises(tmp_path):
    """`--notebooks 01` against the whole release: the gradebook holds notebook 01's rows, no `missing` ones for the
    notebooks of weeks to come, and the journal of the run knows which notebooks it graded."""
    from fabricated_class import ROOT, TITLES

    submissions = tmp_path / "submissions"
    (submissions / "ann").mkdir(parents=True)
    (submissions / "ann" / NAME).write_text(json.dumps(correct()))
    out = tmp_path / "week1.csv"
    assert main(["grade", str(submissions), "--release", str(ROOT / "exercises"), "--notebooks", "1", "--out",
                 str(out), "--quiet", *LIMITS]) == 0
    rows = read_csv(out)
    assert [(r.exercise, r.status) for r in rows] == [(ex, "passed") for ex in sorted(TITLES)]
