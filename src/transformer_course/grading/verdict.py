"""From what happened in a notebook's run to one gradebook row per released exercise.

The status of an exercise comes from its *released* check cell only, found by cell id:

- ``passed``: the execute reply was ``ok`` and the results the check recorded pass the check again
  outside the kernel (or, for a checker that cannot be replayed, the kernel's verdict); for the capstone, the
  grader decodes the model itself from its recorded weights when it is the course's Seq2SeqTransformer
  (:mod:`.replay`), and otherwise the row's review note says that its points rest on the kernel's translations;
- ``partial``: an exercise graded by bands (the capstone): scored again outside the kernel, the answer earns
  some of the points but not all; the message gives the points and what was measured;
- ``failed``: the check raised ``CheckFailed`` (the message is the check's feedback), or it passed in the kernel
  but the answer the grader rebuilt from its recorded data (the capstone's model, from its weights) fails it;
- ``error``: the check could not reach a verdict: another exception (e.g. ``NameError`` because the
  answer cell failed), the kernel died, or the notebook could not be read;
- ``timeout``: the check cell, or a cell before it that had to be stopped, ran out of time;
- ``missing``: the student handed in no such notebook;
- ``tampered``: the check cell had been edited or deleted (it was restored and the released check
  decided the points), or the check passed inside the kernel but not outside it (0 points).

A ``failed`` row also names the known mistake the check recognised, if any (``03.1/diagonal-excluded``): the id
the kernel's check wrote for the plugin (:mod:`.kernel`), as a label only; it never changes a row's points.
"""

from __future__ import annotations

from transformer_course.grading.execute import RunResult
from transformer_course.grading.gradebook import GradeRow, Status
from transformer_course.grading.kernel_start import MEMORY_SIGNS
from transformer_course.grading.limits import Limits
from transformer_course.grading.messages import sanitize as clean
from transformer_course.grading.prepare import Prepared, Release


def missing_rows(student: str, release: Release) -> list[GradeRow]:
    return [GradeRow(student, release.name, c.exercise, c.title, 0, c.points, "missing",
                f"no {release.name} in the submission") for c in release.checks]


def error_rows(student: str, release: Release, message: str) -> list[GradeRow]:
    return [GradeRow(student, release.name, c.exercise, c.title, 0, c.points, "error", clean(message))
            for c in release.checks]


def _memory_advice(limits: Limits) -> str:
    return f"; it ran out of memory: raise --memory-limit (now {limits.memory_limit_mb} MiB)"


def _first_line(text: str) -> str:
    lines = [line for line in clean(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


def _context(prepared: Prepared, run: RunResult, cell_id: str) -> str:
    """' (cell X raised E: ...)' for the first cell since the previous check that failed, or ''."""
    if prepared is None or prepared.nb is None:
        return ""
    order = [c.id for c in prepared.nb.cells if c.cell_type == "code"]
    section = []
    for cid in order:
        if cid == cell_id:
            break
        section = [] if cid in prepared.checks else section + [cid]
    for cid in section:
        cell = run.cells.get(cid)
        if cell is not None and cell.state == "error":
            what = f"{cell.ename}: {_first_line(cell.evalue)}".rstrip(": ")
            return f" (cell {cid} raised {what})"
        if cell is not None and cell.state == "timeout":
            return f" (cell {cid} did not finish in time)"
    return ""


def _not_run(run: RunResult, limits: Limits, cell_id: str) -> tuple[Status, str]:
    if run.killed:
        if run.running == cell_id:
            return "timeout", f"the check did not finish before the notebook's {limits.notebook_timeout:g} s time limit"
        where = f" while cell {run.running} was running" if run.running else ""
        return "timeout", f"not run: the notebook's {limits.notebook_timeout:g} s time limit ran out{where}"
    end = run.kernel_end
    if end is not None and end.cause == "timeout":
        return "timeout", (f"not run: cell {end.cell} did not finish within {limits.cell_timeout:g} s and the "
                           "kernel had to be stopped")
    if end is not None and end.cause == "died":
        limit = f" under --memory-limit {limits.memory_limit_mb} MiB" if limits.memory_limit_mb else ""
        return "error", f"not run: the kernel died in cell {end.cell} (a crash, os._exit, or no memory{limit})"
    if end is not None and end.cause == "died_after":
        return "error", f"not run: the kernel died after cell {end.cell}"
    if end is not None and end.cell:
        return "error", f"not run: the kernel stopped responding after cell {end.cell}"
    if run.setup_error:
        advice = _memory_advice(limits) if run.setup_out_of_memory else ""
        return "error", f"the notebook could not be run: {_first_line(run.setup_error)}{advice}"
    where = f" while cell {run.running} was running" if run.running else ""
    return "error", f"not run: the grader's pytest process ended early (exit code {run.exit_code}){where}"


def _verdict(prepared: Prepared, run: RunResult, limits: Limits, cell_id: str, title: str) -> tuple[Status, str]:
    """(status, message) of one check cell, before any tampering of the cell itself is reported."""
    cell = run.cells.get(cell_id)
    state = cell.state if cell else None
    if state is None or state == "not_run":
        return _not_run(run, limits, cell_id)
    if state == "ok":
        verdict = cell.confirm.verdict if cell.confirm else None
        detail = clean(cell.confirm.message) if cell.confirm else ""
        if verdict == "passed":
            return "passed", detail or f"all {cell.confirm.cases} cases passed"
        if verdict == "partial":
            return "partial", detail
        if verdict == "unconfirmed":
            return "passed", ("passed (the kernel's verdict) [review the code: this check could not be re-run "
                              "outside the kernel]")
        if verdict == "failed" and cell.confirm.rebuilt:  # what the kernel ran is not what its weights do alone
            return "failed", ("the check passed inside the kernel, but the grader decoded the answer rebuilt from "
                              f"its recorded weights, with no learner code running: {detail}")
        if verdict == "failed":
            return "tampered", ("the check passed inside the kernel, but the results it recorded fail the same "
                                f"check run outside the kernel, so the checking code was altered: {detail}")
        if verdict == "bad_record":
            return "tampered", f"the check passed inside the kernel, but its record of results was altered ({detail})"
        return "tampered", ("the check cell ran without an error but the check never completed: `check` or the "
                            "checking code was replaced or bypassed inside the kernel")
    if state == "error":
        ename, evalue = cell.ename, clean(cell.evalue)
        if ename == "CheckFailed":
            # "not implemented yet" after the answer cell ran out of time says why: the cell that failed first.
            message = evalue[len(title) + 2:] if evalue.startswith(f"{title}: ") else evalue
            return "failed", message + _context(prepared, run, cell_id)
        message = f"{ename}: {evalue}".rstrip(": ") + _context(prepared, run, cell_id)
        # Under a tight --memory-limit even `import torch` fails (its libraries cannot be mapped).
        memory = limits.memory_limit_mb and any(sign in message for sign in MEMORY_SIGNS)
        return "error", message + (_memory_advice(limits) if memory else "")
    if state == "timeout":
        return "timeout", f"the check did not finish within the {limits.cell_timeout:g} s cell time limit"
    if state == "died":
        return "error", "the kernel died while the check ran (the process exited: os._exit, a crash, or no memory)"
    return "error", f"the check cell could not be run ({clean(cell.evalue)})"


def _earned(run: RunResult, cell_id: str, max_points: int) -> int:
    """The points of a check that passed or earned part of its points: those of the re-check outside the kernel
    for a checker that grades by bands, else all of them."""
    confirm = run.cells[cell_id].confirm
    if confirm is None or confirm.points is None:
        return max_points
    return max(0, min(confirm.points, max_points))


def unit_rows(student: str, release: Release, prepared: Prepared, run: RunResult, limits: Limits) -> list[GradeRow]:
    if run.package_changes:
        shown = "; ".join(run.package_changes[:5]) + ("; ..." if len(run.package_changes) > 5 else "")
        return [GradeRow(student, release.name, c.exercise, c.title, 0, c.points, "tampered",
                    clean(f"the notebook changed the course package its kernel imported ({shown}), so no check "
                          "of this run can be trusted")) for c in release.checks]
    rows = []
    for check in release.checks:
        status, message = _verdict(prepared, run, limits, check.cell_id, f"{check.exercise} {check.title}")
        points = _earned(run, check.cell_id, check.points) if status in ("passed", "partial") else 0
        changes = prepared.tampered.get(check.exercise)
        if changes:
            message = f"{'; '.join(changes)}. The released check was restored and run: {status}: {message}"
            status = "tampered"
        cell = run.cells.get(check.cell_id)
        how = [cell.confirm.review] if cell and cell.confirm and cell.confirm.review else []
        review = [*prepared.review, *run.behaviour, *how]
        if points and review:
            message = f"{clean(message)} [review the code: it {'; '.join(review)}]"
        mistake = f"{check.exercise}/{cell.mistake}" if status == "failed" and cell and cell.mistake else ""
        rows.append(GradeRow(student, release.name, check.exercise, check.title, points, check.points, status,
                        clean(message), mistake))
    return rows
