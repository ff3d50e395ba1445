"""Grading a folder of submissions: the units (student x notebook), in parallel, into rows."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transformer_course.grading.collect import (
    GradingError,
    Student,
    find_students,
    load_releases,
    parse_shard,
    select_shard,
)
from transformer_course.grading.execute import run_notebook
from transformer_course.grading.gradebook import GradeRow, sort_rows
from transformer_course.grading.journal import RUN_ENV, Journal, submission_digest
from transformer_course.grading.limits import Limits
from transformer_course.grading.prepare import Release, UnreadableNotebook, prepare
from transformer_course.grading.snapshot import Snapshot
from transformer_course.grading.verdict import error_rows, missing_rows, unit_rows

KILLED_THE_RUN = ("not graded: the grading run was stopped (its process killed) twice while this notebook ran, the "
                  "second time while it ran alone; the notebook's code may kill other processes")

__all__ = ["GradingError", "Limits", "GradeRow", "Gradebook", "grade", "grade_unit", "parse_shard"]


@dataclass
class Gradebook:
    rows: list[GradeRow]
    notes: list[str] = field(default_factory=list)  # files ignored, ...
    students: list[str] = field(default_factory=list)
    resumed: int = 0  # notebooks whose rows came from the journal of an interrupted run, not graded again


# Imported lazily by modules of the grader, and so imported here before any notebook runs.
LAZY_IMPORTS = ("matplotlib.figure", "matplotlib.backends.backend_agg")  # the class chart (grading/classpage.py)


def import_the_grader() -> None:
    """Import the checks and every module of the grader (and what they import lazily) into this process.

    A learner's kernel runs as the same user as the grader and can rewrite the installed package's files or plant
    bytecode in its ``__pycache__`` (and put them back afterwards). Every notebook imports its own copy of the
    package (grading/snapshot.py); this keeps the grader's own process from importing anything of the course
    after the first kernel started (the gradebook, the feedback pages and the class page included).
    """
    import pkgutil

    import transformer_course.grading as grading

    importlib.import_module("transformer_course.checks")
    for module in pkgutil.iter_modules(grading.__path__, f"{grading.__name__}."):
        importlib.import_module(module.name)
    for name in LAZY_IMPORTS:
        importlib.import_module(name)


def grade_unit(student: str, release: Release, data, limits: Limits,
               snapshot: Snapshot | None = None) -> list[GradeRow]:
    """The rows of one student's notebook (``data``: its bytes, None when missing), run against a copy of
    ``snapshot`` (by default, the course package as it is now)."""
    if data is None:
        return missing_rows(student, release)
    try:
        if isinstance(data, UnreadableNotebook):
            raise data
        prepared = prepare(release, data)
    except UnreadableNotebook as error:
        return error_rows(student, release, f"the notebook could not be read: {error}")
    run = run_notebook(prepared.nb, release.name, prepared.checks, limits, snapshot)
    return unit_rows(student, release, prepared, run, limits)


def grade(
    submissions: str | Path,
    *,
    release: str | Path = "exercises",
    limits: Limits | None = None,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    students: Sequence[str] = (),
    progress: Callable[[str, str, list[GradeRow], float], None] | None = None,
    journal: Journal | None = None,
    notebooks: Sequence[str] | None = None,
) -> Gradebook:
    """Grade every (selected) student's notebooks against the release (or only its ``notebooks``, numbers such as
    ``"03"``); rows sorted, deterministic. With a
    ``journal``, each notebook's rows are recorded as it finishes, and a resumed journal's are not graded again."""
    limits = limits or Limits()
    if jobs < 1:
        raise GradingError(f"--jobs {jobs}: must be at least 1")
    releases = load_releases(release, notebooks)
    found, notes = find_students(submissions, releases)
    if students:
        known = {s.name for s in found}
        unknown = sorted(set(students) - known)
        if unknown:
            raise GradingError(f"no submission from {', '.join(unknown)} in {submissions}")
        found = [s for s in found if s.name in set(students)]
    chosen: list[Student] = select_shard(found, shard)
    units = [(s, r) for s in chosen for r in releases]
    # Before any learner's code runs: this process imports every checker it will re-run and all of the grader it
    # may use afterwards, and reads the package that every notebook gets a copy of (grading/snapshot.py).
    import_the_grader()
    snapshot = Snapshot.of()
    rows: list[GradeRow] = []
    changed = ""
    digests = {(s.name, r.name): submission_digest(s.notebooks.get(r.name)) for s, r in units}
    done: dict = {}
    suspects: list = []
    if journal is not None:
        run_id = uuid.uuid4().hex
        record = journal.start(_describe(releases, snapshot, limits, shard, students), run_id)
        done = {u: unit_rows for u, (digest, unit_rows) in record.done.items() if digests.get(u) == digest}
        for unit_rows in done.values():
            rows += unit_rows
        units = [(s, r) for s, r in units if (s.name, r.name) not in done]
        # A notebook that was running when a run died, and again when a run died while it ran alone, stopped the
        # grader twice: it gets error rows instead of a third run. The others that were running are graded
        # first, alone, so that a notebook which kills the grader is found by the next resume.
        for s, r in [(s, r) for s, r in units if record.deaths_alone.get((s.name, r.name))]:
            killed = error_rows(s.name, r, KILLED_THE_RUN)
            journal.record((s.name, r.name), digests[(s.name, r.name)], killed)
            rows += killed
            notes.append(f"{s.name}'s {r.name} stopped the grading run twice (the second time alone): error rows; "
                         "read its code")
        units = [(s, r) for s, r in units if not record.deaths_alone.get((s.name, r.name))]
        suspects = [(s, r) for s, r in units if record.deaths.get((s.name, r.name))]
        units = [u for u in units if u not in suspects]
        notes += journal.notes

    def run(student: Student, rel: Release, alone: bool) -> list[GradeRow]:
        if journal is not None:
            journal.started((student.name, rel.name), alone)
        start = time.perf_counter()
        try:
            result = grade_unit(student.name, rel, student.notebooks.get(rel.name), limits, snapshot)
        except Exception as error:  # noqa: BLE001 - one unit's trouble never stops the others
            traceback.print_exc(file=sys.stderr)
            result = error_rows(student.name, rel, f"internal grader error ({type(error).__name__}); see the log")
        if journal is not None:  # on disk before the unit counts as done
            journal.record((student.name, rel.name), digests[(student.name, rel.name)], result)
        if progress:
            progress(student.name, rel.name, result, time.perf_counter() - start)
        return result

    def run_all(batch: list[tuple[Student, Release]], workers: int, alone: bool) -> None:
        nonlocal changed
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pending = {pool.submit(run, s, r, alone): (s.name, r.name) for s, r in batch}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    student, notebook = pending.pop(future)
                    rows.extend(future.result())
                    if not changed and Snapshot.of().digest != snapshot.digest:
                        changed = f"{student}'s {notebook}"

    saved = os.environ.get(RUN_ENV)
    if journal is not None:  # every process of the run carries its id: --resume stops what a killed run left
        os.environ[RUN_ENV] = run_id
    try:
        run_all(suspects, 1, alone=True)
        run_all(units, jobs, alone=False)
    finally:
        if journal is not None:
            if saved is None:
                os.environ.pop(RUN_ENV, None)
            else:
                os.environ[RUN_ENV] = saved
    if changed:
        notes.append(
            f"WARNING: the course package's files changed on disk while grading (noticed after {changed}). "
            "Every notebook ran against its own copy of the package as it was when grading started, and the "
            "checks were loaded before, so the rows are unaffected; but if nobody edited the files, a learner's "
            "code did: grade in a container where the package is read-only (see the instructor guide)."
        )
    return Gradebook(sort_rows(rows), notes, [s.name for s in chosen], len(done))


def _describe(releases: Sequence[Release], snapshot: Snapshot, limits: Limits, shard, students: Sequence[str]) -> dict:
    """What makes two runs the same run, for the journal: the released files graded, the package, the limits (the
    hidden-cases seed only as a digest: the journal is no place for the secret) and the students chosen."""
    digest = hashlib.sha256()
    for release in releases:
        content = json.dumps(release.nb, sort_keys=True).encode()
        digest.update(release.name.encode() + b"\0" + hashlib.sha256(content).digest())
    chosen = asdict(limits)
    seed = chosen.pop("cases_seed")
    # A slow hash: the seed is a small integer, and a fast one could be inverted by trying them all.
    chosen["cases_seed"] = None if seed is None else hashlib.pbkdf2_hmac(
        "sha256", str(seed).encode(), b"transformer-course journal", 200_000).hex()
    return {"release": digest.hexdigest(), "package": snapshot.digest, "limits": chosen,
            "shard": list(shard) if shard else None, "students": sorted(students)}
