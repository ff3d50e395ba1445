"""``transformer-course check NOTEBOOK``: a learner grades a saved notebook exactly as the instructor's grader will.

The same code path as ``transformer-course grade`` for one student (:func:`.grader.grade_unit`): the notebook is
rebuilt on top of the released one (check and read-only cells restored, what changed noted), run in a fresh
kernel under the grader's time and memory limits, and every pass re-checked outside the kernel. The rows are
printed with the total, and a row the grader would mark ``tampered`` or flag for review says so plainly.

The released notebook is what the read-only cells are restored from, so it cannot be the learner's own copy.
Without ``--release``, it is made the way ``make exercises`` makes it, from the solution notebook of the same
name in the course's ``solutions/`` folder (beside the notebook's folder, or in the current folder).
"""

from __future__ import annotations

import importlib
import tempfile
import textwrap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from transformer_course.grading.collect import GradingError, load_releases
from transformer_course.grading.gradebook import GradeRow
from transformer_course.grading.layout import text_table
from transformer_course.grading.limits import Limits
from transformer_course.grading.prepare import MAX_NOTEBOOK_BYTES, Release, load_release

LEARNER = "you"  # the student name of the rows


@dataclass
class Checked:
    notebook: Path
    release_from: str  # where the released notebook came from, in words
    rows: list[GradeRow]

    @property
    def tampered(self) -> list[GradeRow]:
        return [r for r in self.rows if r.status == "tampered"]

    @property
    def review(self) -> list[GradeRow]:
        return [r for r in self.rows if "[review the code:" in r.message]


def _released_from_solutions(notebook: Path) -> tuple[Release, str] | None:
    import nbformat

    from transformer_course.authoring import make_exercise_notebook

    for folder in (notebook.resolve().parent.parent / "solutions", Path.cwd() / "solutions"):
        solution = folder / notebook.name
        if solution.is_file():
            nb = make_exercise_notebook(nbformat.read(solution, as_version=4), solution)
            with tempfile.TemporaryDirectory(prefix="transformer-course-check-") as tmp:
                path = Path(tmp) / notebook.name
                nbformat.write(nb, path)
                return load_release(path), f"made from {solution} as `make exercises` makes it"
    return None


def find_release(notebook: Path, release: str | Path | None = None) -> tuple[Release, str]:
    """The released notebook that ``notebook`` is graded against, and where it came from in words.

    ``release``: a released notebook, or a folder of them (an instructor's release); None: the notebook that
    ``make exercises`` makes from ``solutions/<name>``. Raises GradingError with a one-line reason.
    """
    if release is not None:
        path = Path(release)
        if path.is_dir():
            found = [r for r in load_releases(path) if r.name == notebook.name]
            if not found:
                raise GradingError(f"--release {path}: no released {notebook.name} there")
            path = path / notebook.name
        elif not path.is_file():
            raise GradingError(f"--release {path}: expected a released notebook or a folder of them")
        if path.resolve() == notebook.resolve():
            raise GradingError(f"--release {path} is the notebook being checked: pass the notebook as it was "
                               "released (your instructor's copy), not your own, so that edited read-only cells show")
        try:
            loaded = load_release(path)
        except Exception as error:  # noqa: BLE001 - any unreadable release stops the check
            raise GradingError(f"released notebook {path} cannot be read: {error}") from None
        if not loaded.checks:
            raise GradingError(f"released notebook {path} has no check cells")
        return loaded, str(path)
    made = _released_from_solutions(notebook)
    if made is None:
        raise GradingError(f"no solutions/{notebook.name} beside {notebook.parent} or in the current folder to make "
                           "the released notebook from: pass --release with the notebook (or folder) your "
                           "instructor released")
    if not made[0].checks:
        raise GradingError(f"{notebook.name} has no exercises to check")
    return made


def check_notebooks(notebooks: Sequence[str | Path], *, release: str | Path | None = None,
                    limits: Limits | None = None, jobs: int = 1) -> list[Checked]:
    """Grade each notebook as ``transformer-course grade`` would grade it for one student."""
    from transformer_course.grading.grader import grade_unit
    from transformer_course.grading.snapshot import Snapshot

    limits = limits or Limits()
    units = []
    for name in notebooks:
        path = Path(name)
        if path.suffix != ".ipynb" or not path.is_file():
            raise GradingError(f"{path}: expected a saved notebook (.ipynb)")
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise GradingError(f"{path}: larger than {MAX_NOTEBOOK_BYTES // 2**20} MB")
        units.append((path, *find_release(path, release)))
    importlib.import_module("transformer_course.checks")  # as the grader: the checks are loaded before any run
    snapshot = Snapshot.of()

    def run(unit) -> Checked:
        path, rel, where = unit
        return Checked(path, where, grade_unit(LEARNER, rel, path.read_bytes(), limits, snapshot))

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(run, units))


def check_report(checked: Checked, limits: Limits) -> str:
    """What the learner reads: the rows, the total, and any row the grader would mark or flag."""
    rows = checked.rows
    out = [f"{checked.notebook}: graded as the instructor's grader will (read-only cells restored from the release "
           f"{checked.release_from}; {limits.cell_timeout:g} s per cell, {limits.notebook_timeout:g} s for the "
           "notebook; every pass re-checked outside your kernel).", ""]
    body = [[r.exercise, r.title, f"{r.points}/{r.max_points}", r.status] for r in rows]
    out += text_table(["exercise", "title", "points", "status"], body, right={2})
    points, max_points = sum(r.points for r in rows), sum(r.max_points for r in rows)
    out += ["", f"Total: {points}/{max_points} points."]
    for r in rows:
        if r.status != "passed" or "[review the code:" in r.message:
            out += ["", f"{r.exercise} {r.title} ({r.status}):", textwrap.indent(r.message, "  ")]
    if checked.tampered:
        out += ["", f"TAMPERED: the grader will mark {', '.join(r.exercise for r in checked.tampered)} as `tampered` "
                "(see the messages above): restore the check cells as released, or download a fresh copy of the "
                "notebook and paste your answers into it."]
    if checked.review:
        out += ["", f"FLAGGED FOR REVIEW: the points of {', '.join(r.exercise for r in checked.review)} stand, but "
                "your instructor will be asked to read the code (see `[review the code: ...]` above)."]
    if not checked.tampered and not checked.review:
        out += ["", "Nothing would be marked `tampered` or flagged for review."]
    if limits.cases_seed is None:
        out += ["", "These are the public cases, the ones your notebook's checks run; your instructor may grade on "
                "hidden ones (--cases-seed), which code that is right for every input passes too."]
    return "\n".join(out)
