"""Authoring tools: learner notebooks generated from solutions, and notebooks executed in place.

``solutions/NN_topic.ipynb`` is the single source of each exercise notebook. In its code cells the
answer is fenced::

    def softmax(x, dim=-1):
        # BEGIN SOLUTION
        x = x - x.amax(dim, keepdim=True)
        ...
        # END SOLUTION

and each exercise has one check cell, ``check("02.1", softmax)``. :func:`make_exercise_notebook`
replaces every fence with ``raise NotImplementedError(...)``, clears outputs, records each exercise's
id, title and points (from the check registry) in cell metadata, and makes every cell but the answer
cells read-only in Jupyter. :func:`execute_notebook` re-runs a notebook top to bottom in a fresh
kernel and stores the outputs and widget state in place, with the install cell that lets it run in
Colab (:mod:`transformer_course.launch`).
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import nbformat

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
CHECK_CALL = re.compile(r"""^check\(\s*["'](?P<id>\d{2}\.\d+)["']""", re.MULTILINE)
METADATA_KEY = "transformer_course"  # cell metadata: {"role": "answer" | "check", "exercise": "02.1", ...}


class MarkerError(ValueError):
    """A solution notebook whose solution fences or check cells are malformed."""

    def __init__(self, notebook: str | Path, cell_index: int | None, message: str):
        where = f"{notebook}" if cell_index is None else f"{notebook}, cell {cell_index}"
        super().__init__(f"{where}: {message}")


def stub_source(source: str, exercise_id: str, notebook: str | Path, cell_index: int) -> str:
    """Replace every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block by a NotImplementedError stub."""
    out, begin_indent = [], None
    for lineno, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        marker = stripped in (BEGIN, END)
        if not marker and ("BEGIN SOLUTION" in stripped or "END SOLUTION" in stripped):
            raise MarkerError(
                notebook, cell_index, f"line {lineno}: malformed marker {stripped!r} (write {BEGIN!r} or {END!r})"
            )
        indent = line[: len(line) - len(line.lstrip())]
        if stripped == BEGIN:
            if begin_indent is not None:
                raise MarkerError(notebook, cell_index, f"line {lineno}: {BEGIN!r} inside another solution block")
            begin_indent = indent
            out.append(f'{indent}raise NotImplementedError("{exercise_id}: replace this line with your code")')
        elif stripped == END:
            if begin_indent is None:
                raise MarkerError(notebook, cell_index, f"line {lineno}: {END!r} without a {BEGIN!r} before it")
            if indent != begin_indent:
                raise MarkerError(notebook, cell_index, f"line {lineno}: {END!r} is not indented like its {BEGIN!r}")
            begin_indent = None
        elif begin_indent is None:
            out.append(line)
    if begin_indent is not None:
        raise MarkerError(notebook, cell_index, f"{BEGIN!r} is never closed by {END!r}")
    return "\n".join(out)


def _has_fence(source: str) -> bool:
    return "BEGIN SOLUTION" in source or "END SOLUTION" in source


def _lesson_of(path: Path) -> str:
    match = re.match(r"(\d{2})_", path.name)
    if not match:
        raise MarkerError(path, None, "notebook names must start with a two-digit lesson number, e.g. 02_attention")
    return match.group(1)


def make_exercise_notebook(solution: nbformat.NotebookNode, path: str | Path) -> nbformat.NotebookNode:
    """The learner's notebook for the solution notebook ``solution`` (read from ``path``)."""
    from transformer_course.checks import REGISTRY

    path = Path(path)
    lesson = _lesson_of(path)
    nb = copy.deepcopy(solution)
    nb.metadata.pop("widgets", None)
    nb.metadata[METADATA_KEY] = {"generated_from": f"solutions/{path.name}", "lesson": path.stem}

    # Pass 1: find the check cells, in order.
    checks: dict[int, str] = {}
    for i, cell in enumerate(nb.cells):
        ids = CHECK_CALL.findall(cell.source) if cell.cell_type == "code" else []
        if cell.cell_type != "code" and _has_fence(cell.source):
            raise MarkerError(path, i, "solution markers are only allowed in code cells")
        if len(ids) > 1:
            raise MarkerError(path, i, f"one check per cell, found {len(ids)}: {', '.join(ids)}")
        if ids:
            (exercise_id,) = ids
            if _has_fence(cell.source):
                raise MarkerError(path, i, "a check cell must not contain solution markers")
            if not exercise_id.startswith(lesson + "."):
                raise MarkerError(path, i, f"exercise {exercise_id} does not belong to lesson {lesson}")
            if exercise_id not in REGISTRY:
                raise MarkerError(path, i, f"check({exercise_id!r}, ...) names no registered exercise")
            if exercise_id in checks.values():
                raise MarkerError(path, i, f"exercise {exercise_id} is checked twice")
            checks[i] = exercise_id
    missing = sorted(set(ex for ex in REGISTRY if ex.startswith(lesson + ".")) - set(checks.values()))
    if missing:
        raise MarkerError(path, None, f"registered exercise(s) without a check cell: {', '.join(missing)}")

    # Pass 2: stub the answers, lock everything else, label the exercise cells.
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
        if i in checks:
            ex = REGISTRY[checks[i]]
            cell.metadata[METADATA_KEY] = {"role": "check", "exercise": ex.id, "title": ex.title, "points": ex.points}
            cell.metadata.update(editable=False, deletable=False)
        elif cell.cell_type == "code" and _has_fence(cell.source):
            following = [c for c in checks if c > i]
            if not following:
                raise MarkerError(path, i, "a solution block must come before the check cell of its exercise")
            exercise_id = checks[following[0]]
            cell.source = stub_source(cell.source, exercise_id, path, i)
            cell.metadata[METADATA_KEY] = {"role": "answer", "exercise": exercise_id}
            cell.metadata.update(editable=True, deletable=False)
        else:
            cell.metadata.update(editable=False, deletable=False)
    return nb


def generate_exercises(solutions_dir: str | Path = "solutions", exercises_dir: str | Path = "exercises") -> list[Path]:
    """Write ``exercises_dir/NN_topic.ipynb`` for every solution notebook; returns the paths written."""
    solutions_dir, exercises_dir = Path(solutions_dir), Path(exercises_dir)
    exercises_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(solutions_dir.glob("[0-9][0-9]_*.ipynb")):
        nb = make_exercise_notebook(nbformat.read(source, as_version=4), source)
        target = exercises_dir / source.name
        nbformat.write(nb, target)
        written.append(target)
    return written


def stale_exercises(solutions_dir: str | Path = "solutions", exercises_dir: str | Path = "exercises") -> list[str]:
    """Names of exercise notebooks that are missing or differ from what their solution generates."""
    solutions_dir, exercises_dir = Path(solutions_dir), Path(exercises_dir)
    stale = []
    for source in sorted(solutions_dir.glob("[0-9][0-9]_*.ipynb")):
        expected = make_exercise_notebook(nbformat.read(source, as_version=4), source)
        target = exercises_dir / source.name
        if not target.exists() or nbformat.read(target, as_version=4) != expected:
            stale.append(source.name)
    extra = {p.name for p in exercises_dir.glob("*.ipynb")} - {p.name for p in solutions_dir.glob("*.ipynb")}
    return stale + sorted(f"{name} (no solution notebook)" for name in extra)


# --- executing notebooks -------------------------------------------------------------------------


def current_env_kernel_manager():
    """A kernel manager that starts ipykernel with this very interpreter (the .venv), whatever
    kernelspecs the machine has installed elsewhere, over private ipc sockets."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class CurrentEnv(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            return KernelSpec(argv=argv, display_name="Python 3 (ipykernel)", language="python")

    from transformer_course.grading.kernel_start import use_private_ipc

    km = KernelManager(kernel_name="python3", kernel_spec_manager=CurrentEnv())
    use_private_ipc(km)  # Unix sockets in a private folder: no TCP port another process can take first
    return km


def execute_notebook(path: str | Path, *, timeout: int = 600, allow_errors: bool = False) -> nbformat.NotebookNode:
    """Run ``path`` top to bottom in a fresh kernel (cwd = its folder) and return the executed notebook.

    A notebook inside the course book first gets the install cell of the book's repository
    (:mod:`transformer_course.launch`). Widget state is stored in the notebook's metadata so the book can
    render widgets.
    """
    from nbclient import NotebookClient

    from transformer_course.launch import install_cell_for, sync_install_cell

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    if (install := install_cell_for(path)) is not None:
        sync_install_cell(nb, install)
    client = NotebookClient(
        nb,
        km=current_env_kernel_manager(),
        timeout=timeout,
        allow_errors=allow_errors,
        store_widget_state=True,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    client.execute()
    return nb


def execute_in_place(path: str | Path, *, timeout: int = 600) -> None:
    """Execute ``path`` from a fresh kernel and write the outputs back to it."""
    nb = execute_notebook(path, timeout=timeout)
    nbformat.write(nb, path)
