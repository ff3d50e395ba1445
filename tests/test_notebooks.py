"""The notebooks as committed: exercises in sync, stubs failing, solutions passing, lessons complete.

nbval (run by `make test` on lessons/ and solutions/) proves the stored outputs still come out of the
code; these tests check what nbval does not: the learner's notebooks, and the shape of every lesson.
"""

import re
from pathlib import Path

import nbformat
import pytest
import yaml

from transformer_course.authoring import stale_exercises
from transformer_course.cell_metadata import METADATA_KEY
from transformer_course.notebook_execution import execute_cells, read_for_execution

pytestmark = pytest.mark.slow  # executes every exercise notebook

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = LESSONS + SOLUTIONS


def read(path):
    return nbformat.read(path, as_version=4)


def check_cells(cells):
    return [c for c in cells if c.metadata.get(METADATA_KEY, {}).get("role") == "check"]


def test_there_is_a_lesson_and_exercises_for_each_topic():
    assert LESSONS, "no lesson notebooks found"
    assert [p.name for p in SOLUTIONS] == [p.name for p in EXERCISES]
    assert {p.name for p in SOLUTIONS} <= {p.name for p in LESSONS}


def test_exercises_are_in_sync_with_solutions():
    assert stale_exercises(ROOT / "solutions", ROOT / "exercises") == [], "run `make exercises`"


@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_executed_in_order_without_errors(path):
    nb = read(path)
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: run `make execute` (counts {counts})"
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            tags = cell.metadata.get("tags", [])
            assert out.output_type != "error" or "raises-exception" in tags, f"cell {i} has an error output"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_check_passes_in_the_committed_solutions(path):
    exercise_nb = read(ROOT / "exercises" / path.name)
    by_id = {c.id: c for c in read(path).cells}
    cells = check_cells(exercise_nb.cells)
    assert cells, f"{path.name} has no check cell"
    for cell in cells:
        text = "".join(o.get("text", "") for o in by_id[cell.id].outputs)
        assert "public checks passed" in text, f"check {cell.metadata[METADATA_KEY]['exercise']} did not pass"


@pytest.fixture(scope="module")
def executed_stubs() -> dict[str, list]:
    """Every exercise notebook as released, executed top to bottom: the cells of each, by notebook name.

    They run one after the other in one kernel, each from an empty namespace (``%reset -f`` before it): starting
    a kernel and importing torch cost about 2.5 CPU-s, twelve times more in thirteen fresh kernels. The install
    cell is added as in `make execute`; the grader runs stubs in fresh kernels (tests/test_grading_release.py).
    """
    combined, spans = nbformat.v4.new_notebook(), {}
    for path in EXERCISES:
        nb = read_for_execution(path)
        combined.cells.append(nbformat.v4.new_code_cell("%reset -f"))
        spans[path.name] = (len(combined.cells), len(combined.cells) + len(nb.cells))
        combined.cells += nb.cells
    execute_cells(combined, ROOT / "exercises", timeout=120, allow_errors=True)
    return {name: combined.cells[start:end] for name, (start, end) in spans.items()}


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_every_stub_fails_every_check_with_a_short_message(path, executed_stubs):
    cells = check_cells(executed_stubs[path.name])
    assert cells
    for cell in cells:
        exercise = cell.metadata[METADATA_KEY]["exercise"]
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert len(errors) == 1, f"check {exercise} did not fail on the stub"
        error = errors[0]
        assert error.ename == "CheckFailed"
        assert "not implemented yet" in error.evalue and error.evalue.startswith(exercise)
        # Rendered as the message alone: one entry, no traceback frames.
        assert len(error.traceback) == 1 and "Traceback" not in error.traceback[0]
        assert "public checks passed" not in str(cell.outputs)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_follows_the_template(path):
    nb = read(path)
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert re.match(r"# \d+\. \S", markdown[0]), "first cell: '# N. Title'"
    assert sum(line.startswith("# ") for m in markdown for line in m.splitlines()) == 1, "one '#' title"
    text = "\n".join(markdown)
    for required in ("**Goals", "**Prerequisites", "## Summary", "## Exercises"):
        assert required in text, f"{path.name} lacks {required}"
    if (ROOT / "exercises" / path.name).exists():
        assert f"](../exercises/{path.name})" in text, "link to the lesson's exercises"


NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_the_points_stated_are_the_registered_ones(path):
    """'The three exercises are worth 8 points.' must count the exercises and points that the checks register."""
    from transformer_course.checks import REGISTRY

    points = [e.points for e in REGISTRY.values() if e.lesson == path.name[:2]]
    text = " ".join(c.source for c in read(path).cells if c.cell_type == "markdown").replace("\n", " ")
    stated = re.search(r"The (\w+) exercises are worth (\d+) points( each)?\.", text)
    assert stated, f"{path.name}: no sentence 'The N exercises are worth P points.'"
    count, total, each = NUMBERS.get(stated[1]), int(stated[2]), bool(stated[3])
    assert count == len(points), f"{path.name} says {stated[1]} exercises; the checks register {len(points)}"
    assert (set(points) == {total}) if each else (total == sum(points)), (
        f"{path.name} says '{stated[0]}'; the checks register {points} points")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_exercises_link_back_to_their_lesson(path):
    text = "\n".join(c.source for c in read(path).cells if c.cell_type == "markdown")
    assert f"](../lessons/{path.name})" in text, "the exercise notebook links to its lesson"


def test_table_of_contents_lists_every_notebook_in_the_readers_order():
    """Each lesson is a chapter whose sections are its exercises and their solutions, so the book's previous and
    next links go lesson N, exercises N, solutions N, lesson N + 1."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = {p["caption"]: p["chapters"] for p in toc["parts"]}
    chapters = parts["Lessons, exercises and solutions"]
    assert [c["file"] for c in chapters] == [f"lessons/{p.stem}" for p in LESSONS]
    assert [[s["file"] for s in c["sections"]] for c in chapters] == [
        [f"exercises/{p.stem}", f"solutions/{p.stem}"] for p in LESSONS]
    assert [p.stem for p in EXERCISES] == [p.stem for p in SOLUTIONS] == [p.stem for p in LESSONS]
    assert "Instructor guide" in parts
