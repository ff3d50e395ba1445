"""Grading a folder of submissions: the units (student x notebook), in parallel, into rows."""

from __future__ import annotations

import hashlib
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
from transformer_course.grading.execute import Limits, run_notebook
from transformer_course.grading.prepare import Release, UnreadableNotebook, prepare
from transformer_course.grading.report import Row, sort_rows
from transformer_course.grading.verdict import error_rows, missing_rows, unit_rows

__all__ = ["GradingError", "Limits", "Row", "Gradebook", "grade", "grade_unit", "parse_shard"]


@dataclass
class Gradebook:
    rows: list[Row]
    notes: list[str] = field(default_factory=list)  # files ignored, ...
    students: list[str] = field(default_factory=list)


def grade_unit(student: str, release: Release, data, limits: Limits) -> list[Row]:
    """The rows of one student's notebook (``data``: its bytes, None when missing)."""
    if data is None:
        return missing_rows(student, release)
    try:
        if isinstance(data, UnreadableNotebook):
            raise data
        prepared = prepare(release, data)
    except UnreadableNotebook as error:
        return error_rows(student, release, f"the notebook could not be read: {error}")
    run = run_notebook(prepared.nb, release.name, prepared.checks, limits)
    return unit_rows(student, release, prepared, run, limits)


def _package_digest() -> str:
    """A digest of the course package's source, to notice a learner's kernel rewriting it."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def grade(
    submissions: str | Path,
    *,
    release: str | Path = "exercises",
    limits: Limits | None = None,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    students: Sequence[str] = (),
    progress: Callable[[str, str, list[Row], float], None] | None = None,
) -> Gradebook:
    """Grade every (selected) student's notebooks against the release; rows sorted, deterministic."""
    limits = limits or Limits()
    if jobs < 1:
        raise GradingError(f"--jobs {jobs}: must be at least 1")
    if limits.cell_timeout <= 0 or limits.notebook_timeout <= 0:
        raise GradingError("time limits must be positive")
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
    baseline = _package_digest()
    rows: list[Row] = []
    changed = ""

    def run(student: Student, rel: Release) -> list[Row]:
        start = time.perf_counter()
        try:
            result = grade_unit(student.name, rel, student.notebooks.get(rel.name), limits)
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
                if not changed and _package_digest() != baseline:
                    changed = f"{student}'s {notebook}"
    if changed:
        notes.append(
            f"WARNING: the course package's files changed on disk while grading (noticed after {changed}). "
            "If nobody edited them, a learner's code did, and the rows graded after it cannot be trusted: "
            "grade in a container where the package is read-only (see the instructor guide)."
        )
    return Gradebook(sort_rows(rows), notes, [s.name for s in chosen])
