"""Grading a folder of submissions: the units (student x notebook), in parallel, into rows."""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
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
from transformer_course.grading.limits import Limits
from transformer_course.grading.prepare import Release, UnreadableNotebook, prepare
from transformer_course.grading.snapshot import Snapshot
from transformer_course.grading.verdict import error_rows, missing_rows, unit_rows

__all__ = ["GradingError", "Limits", "GradeRow", "Gradebook", "grade", "grade_unit", "parse_shard"]


@dataclass
class Gradebook:
    rows: list[GradeRow]
    notes: list[str] = field(default_factory=list)  # files ignored, ...
    students: list[str] = field(default_factory=list)


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
) -> Gradebook:
    """Grade every (selected) student's notebooks against the release; rows sorted, deterministic."""
    limits = limits or Limits()
    if jobs < 1:
        raise GradingError(f"--jobs {jobs}: must be at least 1")
    releases = load_releases(release)
    found, notes = find_students(submissions, releases)
    if students:
        known = {s.name for s in found}
        unknown = sorted(set(students) - known)
        if unknown:
            raise GradingError(f"no submission from {', '.join(unknown)} in {submissions}")
        found = [s for s in found if s.name in set(students)]
    chosen: list[Student] = select_shard(found, shard)
    units = [(s, r) for s in chosen for r in releases]
    # Before any learner's code runs: this process imports every checker it will re-run, and reads the package
    # that every notebook gets a copy of (grading/snapshot.py).
    importlib.import_module("transformer_course.checks")
    snapshot = Snapshot.of()
    rows: list[GradeRow] = []
    changed = ""

    def run(student: Student, rel: Release) -> list[GradeRow]:
        start = time.perf_counter()
        try:
            result = grade_unit(student.name, rel, student.notebooks.get(rel.name), limits, snapshot)
        except Exception as error:  # noqa: BLE001 - one unit's trouble never stops the others
            traceback.print_exc(file=sys.stderr)
            result = error_rows(student.name, rel, f"internal grader error ({type(error).__name__}); see the log")
        if progress:
            progress(student.name, rel.name, result, time.perf_counter() - start)
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        pending = {pool.submit(run, s, r): (s.name, r.name) for s, r in units}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                student, notebook = pending.pop(future)
                rows += future.result()
                if not changed and Snapshot.of().digest != snapshot.digest:
                    changed = f"{student}'s {notebook}"
    if changed:
        notes.append(
            f"WARNING: the course package's files changed on disk while grading (noticed after {changed}). "
            "Every notebook ran against its own copy of the package as it was when grading started, and the "
            "checks were loaded before, so the rows are unaffected; but if nobody edited the files, a learner's "
            "code did: grade in a container where the package is read-only (see the instructor guide)."
        )
    return Gradebook(sort_rows(rows), notes, [s.name for s in chosen])
