"""Authoring: learner notebooks generated from solutions.

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
cells read-only in Jupyter. For JupyterLab it also tags the answer and check cells ``raises-exception``
(Run All goes on past a failing check, so every check shows its verdict), collapses the source of the
cells the book hides (``hide-input``), and ends the notebook with a progress cell that lists every
exercise's status and points (:mod:`transformer_course.checks.progress`). What it writes in cell metadata is
defined in :mod:`transformer_course.cell_metadata`.

A solution notebook is a page of the book too, so it says what it is: its first cell (id ``title``) is headed
``# Solutions N: topic`` and its ``how-to`` cell opens with a paragraph ``**How to read.** ...`` for a reader of
solutions. The exercise notebook gets the heading ``# Exercises N: topic`` and, in place of that paragraph, the
instructions of :data:`HOW_TO_WORK` and :data:`RUN_ALL_HOWTO`; the how-to cell's other paragraphs (what the
checks try, the rules, the points) are the same in both.
"""

from __future__ import annotations

import copy
import re
import textwrap
from pathlib import Path

import nbformat

from transformer_course.cell_metadata import (
    METADATA_KEY,
    PROGRESS_IDS,
    RUN_PAST_ERRORS,
    add_tag,
    collapse_in_lab,
    protect,
)

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
CHECK_CALL = re.compile(r"""^check\(\s*["'](?P<id>\d{2}\.\d+)["']""", re.MULTILINE)
TITLE_ID, HOWTO_ID = "title", "how-to"
HOW_TO_READ = "**How to read.**"
HOW_TO_WORK = """\
**How to work.** Run the two cells below first: the install cell, which installs the course package where it is
missing (in Colab, for instance) and does nothing elsewhere, then the setup cell. Then, for each exercise:

1. Read the task: it names what to write, its arguments and what it returns.
2. In the answer cell, replace the line `raise NotImplementedError(...)` with your code, and run the cell.
3. Run the check cell under it (it is read-only). It runs your code on several inputs and compares the results with a
   reference. When an input gives a wrong result, it tells you which input failed, what it expected and what it got,
   and, where it recognises it, which mistake you made. When every input matches, it prints "public checks passed".

Re-run the answer cell after each change, or the check tests your previous version. You may add cells of your own
to try things out."""
RUN_ALL_HOWTO = (
    "In JupyterLab, **Run All** (menu *Run > Run All Cells*) runs every cell and goes on past a check that fails, "
    "so each check shows its verdict. The last cell of the notebook then lists every exercise with its status "
    "(passed, partly passed, failed with the likely mistake, or not checked yet) and its points, and the total; "
    "run it again whenever you like."
)


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

    for cell_id in (TITLE_ID, HOWTO_ID):
        _cell(nb, cell_id, path)

    # Pass 2: stub the answers, lock everything else, label the exercise cells.
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
        collapse_in_lab(cell)
        if cell.get("id") == TITLE_ID:
            cell.source = exercise_title(cell, lesson, path)
        elif cell.get("id") == HOWTO_ID:
            cell.source = exercise_how_to(cell, path)
        if i in checks:
            ex = REGISTRY[checks[i]]
            cell.metadata[METADATA_KEY] = {"role": "check", "exercise": ex.id, "title": ex.title, "points": ex.points}
            protect(cell, editable=False)
            add_tag(cell, RUN_PAST_ERRORS)
        elif cell.cell_type == "code" and _has_fence(cell.source):
            following = [c for c in checks if c > i]
            if not following:
                raise MarkerError(path, i, "a solution block must come before the check cell of its exercise")
            exercise_id = checks[following[0]]
            cell.source = stub_source(cell.source, exercise_id, path, i)
            cell.metadata[METADATA_KEY] = {"role": "answer", "exercise": exercise_id}
            protect(cell, editable=True)
            add_tag(cell, RUN_PAST_ERRORS)  # an answer that raises (a syntax error, say) does not stop Run All
        else:
            protect(cell, editable=False)
    taken = [c.get("id") for c in nb.cells if c.get("id") in PROGRESS_IDS]
    if taken:
        raise MarkerError(path, None, f"cell id {taken[0]!r} is reserved for the generated progress cell")
    nb.cells.extend(progress_cells(lesson))
    return nb


def _cell(nb: nbformat.NotebookNode, cell_id: str, path: Path) -> nbformat.NotebookNode:
    cells = [c for c in nb.cells if c.get("id") == cell_id]
    if not cells:
        raise MarkerError(path, None, f"a solution notebook needs a markdown cell with id {cell_id!r}, found none")
    if cells[0].cell_type != "markdown":
        raise MarkerError(path, None, f"the cell with id {cell_id!r} must be markdown, got a {cells[0].cell_type} cell")
    return cells[0]


def exercise_title(cell: nbformat.NotebookNode, lesson: str, path: str | Path) -> str:
    """The exercise notebook's title cell: the solution's, headed ``# Exercises N:`` instead of ``# Solutions N:``."""
    heading = f"# Solutions {int(lesson)}: "
    if not cell.source.startswith(heading):
        first = cell.source.partition("\n")[0]
        raise MarkerError(path, None, f"the title cell must start with {heading!r}, found {first!r}")
    return f"# Exercises {int(lesson)}: " + cell.source.removeprefix(heading)


def exercise_how_to(cell: nbformat.NotebookNode, path: str | Path) -> str:
    """The exercise notebook's how-to cell: the solution's first paragraph (``**How to read.** ...``, for a reader
    of solutions) replaced by :data:`HOW_TO_WORK`, its other paragraphs kept, :data:`RUN_ALL_HOWTO` appended."""
    if not cell.source.startswith(HOW_TO_READ):
        first = cell.source.partition("\n")[0]
        raise MarkerError(path, None, f"the how-to cell must start with {HOW_TO_READ!r}, found {first!r}")
    _, _, shared = cell.source.partition("\n\n")
    parts = [HOW_TO_WORK, shared.strip(), textwrap.fill(RUN_ALL_HOWTO, 110)]
    return "\n\n".join(part for part in parts if part)


def progress_cells(lesson: str) -> list[nbformat.NotebookNode]:
    """The notebook's last two cells: a heading and the read-only cell that shows the learner's progress."""
    text = ("The cell below lists every exercise of this notebook with the result of its last check in this "
            "session (passed, partly passed, failed with the likely mistake, or not checked yet), its points and the "
            "total. Run it after your checks, or run everything with **Run All**: it goes on past a check that fails "
            "and ends here. These are the public checks; your grade comes from the same checks run again by the "
            "grader.")
    title = nbformat.v4.new_markdown_cell("## Your progress\n\n" + textwrap.fill(text, 110), id=PROGRESS_IDS[0])
    code = nbformat.v4.new_code_cell(
        "from transformer_course.checks.progress import progress\n\n"
        f'progress("{lesson}")', id=PROGRESS_IDS[1])
    protect(title, editable=False)
    code.metadata[METADATA_KEY] = {"role": "progress"}
    protect(code, editable=False)
    return [title, code]


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
