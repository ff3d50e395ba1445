"""The grading journal and `grade --resume`: rows journaled as each notebook finishes, a resumed run grading only
what is not done, a notebook that kills the grader found and given error rows. The fast tests grade notebooks that
need no kernel (unreadable or missing); the slow ones kill real runs, at a random point and from a learner's
notebook, and resume them."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fabricated_class import MEMORY_LIMIT_MB, NAME, correct, released, with_sources

from transformer_course.cli import main
from transformer_course.grading.collect import GradingError
from transformer_course.grading.gradebook import read_csv
from transformer_course.grading.grader import KILLED_THE_RUN, grade
from transformer_course.grading.journal import RUN_ENV, Journal, journal_path
from transformer_course.grading.limits import Limits

# The grader's limits, with cells given 120 s: the rows must not depend on the machine's load (10 s cells
# timed out at a load of 12 on 2 cores).
LIMITS = ["--timeout", "120", "--notebook-timeout", "600", "--memory-limit", str(MEMORY_LIMIT_MB)]


def write_class(folder: Path, notebooks: dict[str, bytes | None]) -> Path:
    """One folder per student, holding NAME (or nothing, for None)."""
    for student, data in notebooks.items():
        (folder / student).mkdir(parents=True, exist_ok=True)
        if data is not None:
            (folder / student / NAME).write_bytes(data)
    return folder


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


BROKEN = {"amy": b"not json", "ben": None, "cat": b'{"cells": ['}  # no kernel needed for any of them


@pytest.fixture
def kernelless(tmp_path):
    return write_class(tmp_path / "submissions", BROKEN), tmp_path / "grades.journal"


def test_each_finished_notebook_is_journaled_with_its_rows(kernelless, release):
    submissions, path = kernelless
    book = grade(submissions, release=release, journal=Journal(path))
    entries = lines(path)
    assert entries[0]["journal"] == 1 and set(entries[0]["run"]) == {"release", "package", "limits", "shard",
                                                                     "students"}
    started = [tuple(e["started"]) for e in entries if "started" in e]
    finished = {(e["student"], e["notebook"]): e["rows"] for e in entries if "rows" in e}
    assert started == [(s, NAME) for s in BROKEN] and set(finished) == set(started)
    assert [r for unit in sorted(finished) for r in finished[unit]] == [list(r.__dict__.values()) for r in book.rows]
    order = [("started", *e["started"]) if "started" in e else ("rows", e["student"], e["notebook"])
             for e in entries[1:]]
    assert all(order.index(("started", *u)) < order.index(("rows", *u)) for u in started)
    assert os.environ.get(RUN_ENV) is None  # the run's id left the grader's environment with the run


def test_resume_keeps_finished_rows_and_grades_only_the_rest(kernelless, release):
    submissions, path = kernelless
    full = grade(submissions, release=release, journal=Journal(path))
    entries = path.read_text().splitlines()
    # A run killed while it wrote cat's rows: amy's rows marked (to see that they are not graded again), cat's
    # line cut short.
    amy = next(i for i, line in enumerate(entries) if '"student": "amy"' in line)
    entries[amy] = entries[amy].replace("the notebook could not be read", "JOURNALED")
    cat = next(i for i, line in enumerate(entries) if '"student": "cat"' in line)
    path.write_text("\n".join(entries[:cat]) + "\n" + entries[cat][: len(entries[cat]) // 2])
    graded = []
    book = grade(submissions, release=release, journal=Journal(path, resume=True),
                 progress=lambda student, notebook, rows, seconds: graded.append(student))
    assert graded == ["cat"] and book.resumed == 2
    assert [r.message.startswith("JOURNALED") for r in book.rows] == [r.student == "amy" for r in full.rows]
    assert [r for r in book.rows if r.student != "amy"] == [r for r in full.rows if r.student != "amy"]
    assert any("2 notebook(s) already graded" in note for note in book.notes)
    # A submission that changed since its rows were journaled is graded again.
    (submissions / "amy" / NAME).write_bytes(b"still not json")
    graded.clear()
    grade(submissions, release=release, journal=Journal(path, resume=True),
          progress=lambda student, notebook, rows, seconds: graded.append(student))
    assert graded == ["amy"]


def test_resume_refuses_the_journal_of_another_run(kernelless, release):
    submissions, path = kernelless
    grade(submissions, release=release, journal=Journal(path))
    with pytest.raises(GradingError, match=r"journal of another run \(its limits differ\)"):
        grade(submissions, release=release, limits=Limits(cell_timeout=5), journal=Journal(path, resume=True))
    with pytest.raises(GradingError, match=r"its students differ"):
        grade(submissions, release=release, students=["amy"], journal=Journal(path, resume=True))
    path.write_text("hello\n")
    with pytest.raises(GradingError, match="is not a grading journal"):
        grade(submissions, release=release, journal=Journal(path, resume=True))


def test_the_hidden_cases_seed_stays_out_of_the_journal(kernelless, release):
    submissions, path = kernelless
    grade(submissions, release=release, limits=Limits(cases_seed=80486), journal=Journal(path))
    seed = lines(path)[0]["run"]["limits"]["cases_seed"]
    assert "80486" not in path.read_text() and isinstance(seed, str) and len(seed) == 64


def test_a_notebook_running_when_runs_died_is_graded_alone_first_then_given_error_rows(kernelless, release):
    submissions, path = kernelless
    grade(submissions, release=release, journal=Journal(path))
    header = path.read_text().splitlines()[0]
    started = json.dumps({"started": ["ben", NAME], "alone": False})
    # One run died while ben and cat ran beside each other: both graded again, first, each alone.
    path.write_text("\n".join([header, started, json.dumps({"started": ["cat", NAME], "alone": False})]) + "\n")
    grade(submissions, release=release, journal=Journal(path, resume=True))
    after = lines(path)[3:]
    assert [(e["started"], e["alone"]) for e in after if "started" in e] == [
        (["ben", NAME], True), (["cat", NAME], True), (["amy", NAME], False)]
    # ben was running when a run died, then again when a run died while it ran alone: error rows, not run again.
    path.write_text("\n".join([header, started, json.dumps({"started": ["ben", NAME], "alone": True})]) + "\n")
    book = grade(submissions, release=release, journal=Journal(path, resume=True))
    assert [r.message for r in book.rows if r.student == "ben"] == [KILLED_THE_RUN] * 3
    assert ["ben", NAME] not in [e.get("started") for e in lines(path)[3:]]
    assert any("ben's 01_tensor_shapes.ipynb stopped the grading run twice" in note for note in book.notes)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the run's processes in /proc")
def test_resume_stops_what_every_earlier_run_left_running(kernelless, release):
    submissions, path = kernelless
    grade(submissions, release=release, journal=Journal(path))
    header = lines(path)[0]
    # Two runs died: the first (the header's id) and a resumed one; each left a process behind.
    path.write_text(json.dumps(header) + "\n" + json.dumps({"resumed": "second-run"}) + "\n")
    left = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**os.environ, RUN_ENV: run}) for run in (header["id"], "second-run")]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**os.environ, RUN_ENV: "another-run"})
    try:
        time.sleep(0.5)  # the processes exist (their environment is readable in /proc)
        grade(submissions, release=release, journal=Journal(path, resume=True))
        assert [p.wait(timeout=10) for p in left] == [-signal.SIGKILL] * 2
        assert other.poll() is None  # a process of no earlier run of this journal is left alone
        assert [e["resumed"] for e in lines(path) if "resumed" in e][0] == "second-run"
        assert len([e for e in lines(path) if "resumed" in e]) == 2  # this run's id, for the next resume
    finally:
        for process in [*left, other]:
            process.kill()
            process.wait()


def test_a_new_run_says_that_it_replaced_a_journal(kernelless, release):
    submissions, path = kernelless
    grade(submissions, release=release, journal=Journal(path))
    book = grade(submissions, release=release, journal=Journal(path))
    assert any(n.startswith("replaced the journal of an earlier run") for n in book.notes), book.notes


def test_the_command_removes_the_journal_once_the_gradebook_is_written(kernelless, release, capsys):
    submissions, _ = kernelless
    out = submissions.parent / "grades.csv"
    assert main(["grade", str(submissions), "--release", str(release), "--out", str(out), "--quiet"]) == 0
    assert out.exists() and not journal_path(out).exists() and not out.with_name("grades.csv.partial").exists()
    first = out.read_bytes()
    assert main(["grade", str(submissions), "--release", str(release), "--out", str(out), "--quiet",
                 "--resume"]) == 0
    assert "no journal at" in capsys.readouterr().err and out.read_bytes() == first


# --- killing real runs --------------------------------------------------------------------------------------

# A learner's answer that kills the grader: the first of its kernel's ancestors that runs the course's command.
KILLER = ("import os, signal\n\ndef _parent(pid):\n"
          "    return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n\n"
          "pid = os.getppid()\nwhile pid > 1:\n"
          "    if b'transformer_course.cli' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
          "        with open(os.environ['KILLER_REPORT'], 'a') as report:  # for the test: whose session is whose\n"
          "            print(os.getsid(0), os.getpgrp(), os.getsid(pid), os.getpgid(pid), file=report)\n"
          "        os.kill(pid, signal.SIGKILL)\n"
          "    pid = _parent(pid)\n")


def grader(submissions: Path, release: Path, out: Path, *extra: str, marker: str, **env: str) -> subprocess.Popen:
    """`transformer-course grade` in a process of its own (a session of its own, so that killing it kills no
    test), every process it starts marked with ``marker`` in its environment (and ``env``)."""
    env = {**os.environ, "GRADING_TEST_MARKER": marker, **env}
    return subprocess.Popen([sys.executable, "-m", "transformer_course.cli", "grade", str(submissions), "--release",
                             str(release), "--out", str(out), "--jobs", "1", *LIMITS, *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"GRADING_TEST_MARKER={marker}".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.fixture
def cleanup():
    markers = []
    yield markers.append
    for marker in markers:
        for pid in marked(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


CLASS = {"ada": json.dumps(correct()).encode(), "bob": json.dumps(released()).encode(), "dan": b"not json",
         "eve": None}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, release):
    root = tmp_path_factory.mktemp("uninterrupted")
    submissions = write_class(root / "submissions", CLASS)
    out = root / "grades.csv"
    assert main(["grade", str(submissions), "--release", str(release), "--out", str(out), "--jobs", "1", "--quiet",
                 *LIMITS]) == 0
    statuses = {(r.student, r.status) for r in read_csv(out)}
    assert statuses == {("ada", "passed"), ("bob", "failed"), ("dan", "error"), ("eve", "missing")}, statuses
    return submissions, out.read_bytes()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the run's processes in /proc")
def test_a_run_killed_at_a_random_point_resumes_to_the_same_gradebook(uninterrupted, release, tmp_path, cleanup):
    submissions, expected = uninterrupted
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    # The kill lands while ada's notebook runs (no row yet) or while bob's does (ada's row kept). Bob's notebook
    # takes about 0.6 of ada's (hers includes the kernel zygote's start), so the second kind of draw waits at most
    # half of the time ada's took: the draw stays inside the run on a fast CPU and a slow one alike.
    wait_for, fraction = rng.randrange(2), rng.uniform(0, 1)
    out = tmp_path / "grades.csv"
    journal = journal_path(out)
    cleanup(marker := f"kill-{seed}")
    run = grader(submissions, release, out, marker=marker)
    deadline = time.monotonic() + 300
    started = None
    while (not journal.exists() or journal.read_text().count('"rows"') < wait_for) and time.monotonic() < deadline:
        assert run.poll() is None, f"seed {seed}: the run ended before the kill\n{run.stderr.read()}"
        if started is None and journal.exists():
            started = time.monotonic()
        time.sleep(0.05)
    delay = fraction * (1.5 if wait_for == 0 else 0.5 * (time.monotonic() - (started or time.monotonic())))
    time.sleep(delay)
    ended = run.poll() is not None
    if not ended:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    if ended or out.exists():
        # The kill came after the gradebook was written, or after the run ended: the run's work is whole.
        assert run.returncode in (0, -signal.SIGKILL), (seed, run.returncode, run.stderr.read())
        assert out.read_bytes() == expected, f"seed {seed}: the gradebook written before the kill differs"
        when = "after the run ended" if ended else "after the gradebook was written"
        print(f"seed {seed}: the kill came {when} ({wait_for} notebook(s) + {delay:.2f} s)")
        return
    before = lines(journal)
    kept = {e["student"] for e in before if "rows" in e}
    run_id = before[0]["id"]
    resumed = grader(submissions, release, out, "--resume", marker=marker)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    graded = re.findall(r"^graded (\w+) / ", err, flags=re.M)
    assert sorted(graded) == sorted(set(CLASS) - kept), f"seed {seed}: journal had {kept}, graded again {graded}"
    assert out.read_bytes() == expected, f"seed {seed}: killed after {kept}"
    assert not journal.exists()
    leftovers = [p for p in marked(marker) if f"{RUN_ENV}={run_id}".encode() in Path(f"/proc/{p}/environ").read_bytes()]
    assert not leftovers, f"seed {seed}: processes of the killed run still alive: {leftovers}"
    print(f"seed {seed}: killed after {wait_for} notebook(s) + {delay:.2f} s; the journal had {sorted(kept)}")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the killer finds its grader in /proc")
def test_a_notebook_that_kills_the_grader_cannot_stop_resumed_grading(uninterrupted, release, tmp_path, cleanup):
    submissions, expected = uninterrupted
    killer = write_class(tmp_path / "submissions", {"dan": b"not json",
                                                   "kim": json.dumps(with_sources(correct(), ex1=KILLER)).encode()})
    out = tmp_path / "grades.csv"
    cleanup(marker := f"killer-{os.getpid()}")
    codes = []
    for _ in range(4):  # what the guide's loop does: resume until the run ends by itself
        run = grader(killer, release, out, *(["--resume"] if codes else []), marker=marker,
                     KILLER_REPORT=str(tmp_path / "sessions.txt"))
        run.communicate(timeout=600)
        codes.append(run.returncode)
        if run.returncode == 0:
            break
    assert codes == [-signal.SIGKILL, -signal.SIGKILL, 0]  # killed, killed again alone, then finished
    # Each time, the kernel ran in a session and process group of its own, not the grader's.
    sessions = [line.split() for line in (tmp_path / "sessions.txt").read_text().splitlines()]
    assert len(sessions) == 2 and all(sid != grader_sid and pgid != grader_pgid
                                      for sid, pgid, grader_sid, grader_pgid in sessions), sessions
    rows = out.read_text().splitlines()
    assert [r for r in rows if r.startswith("kim,")] and all(KILLED_THE_RUN in r for r in rows if r.startswith("kim,"))
    dan = [r for r in expected.decode().splitlines() if r.startswith("dan,")]
    assert [r for r in rows if r.startswith("dan,")] == dan  # the others' rows as in any run
