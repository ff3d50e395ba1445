"""Generating learner notebooks from solutions: stubs, metadata, read-only cells, marker errors."""

import re
import textwrap

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from transformer_course.authoring import (
    HOW_TO_WORK,
    RUN_ALL_HOWTO,
    MarkerError,
    make_exercise_notebook,
    stub_source,
)

ANSWER = '''def next_token_pairs(tokens):
    """Docstring stays."""
    # BEGIN SOLUTION
    inputs = tokens[..., :-1]
    return inputs, tokens[..., 1:]
    # END SOLUTION'''


def solution_notebook(*cells):
    nb = new_notebook(cells=list(cells))
    nb.metadata["widgets"] = {"state": "stored widget state is not released"}
    return nb


TITLE = "# Solutions 1: tensor shapes\n\nThese exercises practise lesson 1."
HOW_TO = "**How to read.** This page is exercises 1, solved.\n\nThe checks try float64.\n\nWorth 5 points."


def lesson01(answer=ANSWER, extra=(), title=TITLE, how_to=HOW_TO):
    """A minimal valid solution notebook for lesson 01 (three registered exercises)."""
    cells = [new_markdown_cell(title, id="title"), new_markdown_cell(how_to, id="how-to"),
             new_code_cell("from transformer_course.checks import check")]
    cells += [new_code_cell(answer, outputs=[], execution_count=3), new_code_cell('check("01.2", next_token_pairs)')]
    cells += [new_code_cell('check("01.1", token_logits)'), new_code_cell('check("01.3", lm_parameter_count)')]
    return solution_notebook(*cells, *extra)


def test_stub_replaces_the_fenced_block_at_its_indentation():
    stub = stub_source(ANSWER, "01.2", "nb.ipynb", 0)
    assert stub == (
        'def next_token_pairs(tokens):\n    """Docstring stays."""\n'
        '    raise NotImplementedError("01.2: replace this line with your code")'
    )


def test_several_blocks_in_one_cell():
    source = "# BEGIN SOLUTION\nA = 1\n# END SOLUTION\nB = 2\n# BEGIN SOLUTION\nC = 3\n# END SOLUTION"
    assert stub_source(source, "01.1", "nb", 0).splitlines() == [
        'raise NotImplementedError("01.1: replace this line with your code")',
        "B = 2",
        'raise NotImplementedError("01.1: replace this line with your code")',
    ]


@pytest.mark.parametrize(
    "source, message",
    [
        ("# BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n# END SOLUTION", "line 2: '# END SOLUTION' without a '# BEGIN SOLUTION'"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION", "line 2: '# BEGIN SOLUTION' inside another"),
        ("def f():\n    # BEGIN SOLUTION\n    pass\n# END SOLUTION", "line 4: '# END SOLUTION' is not indented"),
        ("#BEGIN SOLUTION\nx = 1\n# END SOLUTION", "line 1: malformed marker '#BEGIN SOLUTION'"),
        ("# BEGIN SOLUTION here\n# END SOLUTION", "malformed marker"),
    ],
)
def test_malformed_markers_name_notebook_cell_and_line(source, message):
    with pytest.raises(MarkerError, match="solutions/01_x.ipynb, cell 4: ") as error:
        stub_source(source, "01.1", "solutions/01_x.ipynb", 4)
    assert message in str(error.value)


def test_generated_notebook_has_stubs_metadata_and_locks():
    solution = lesson01()
    nb = make_exercise_notebook(solution, "solutions/01_tensor_shapes.ipynb")
    answer, check_cell = nb.cells[3], nb.cells[4]
    assert "raise NotImplementedError" in answer.source and "tokens[..., 1:]" not in answer.source
    assert answer.outputs == [] and answer.execution_count is None
    assert answer.metadata["transformer_course"] == {"role": "answer", "exercise": "01.2"}
    assert answer.metadata["editable"] is True
    assert check_cell.metadata["transformer_course"] == {
        "role": "check", "exercise": "01.2", "title": "Inputs and next-token targets", "points": 2,
    }
    for cell in nb.cells:
        assert cell.metadata["deletable"] is False
        if cell is not answer:
            assert cell.metadata["editable"] is False
    ids = [c.id for c in nb.cells]
    assert ids == [c.id for c in solution.cells] + ["progress-title", "progress"]  # ids survive: grading maps by id
    assert "widgets" not in nb.metadata
    assert nb.metadata["transformer_course"]["generated_from"] == "solutions/01_tensor_shapes.ipynb"
    assert "tokens[..., 1:]" in solution.cells[3].source  # the source notebook is not modified


@pytest.mark.parametrize(
    "notebook, cell, message",
    [
        (lambda: lesson01(extra=[new_markdown_cell("# BEGIN SOLUTION")]), 7, "only allowed in code cells"),
        (lambda: lesson01(extra=[new_code_cell('check("01.9", f)')]), 7, "names no registered exercise"),
        (lambda: lesson01(extra=[new_code_cell('check("02.1", f)')]), 7, "does not belong to lesson 01"),
        (lambda: lesson01(extra=[new_code_cell('check("01.1", f)')]), 7, "checked twice"),
        (lambda: lesson01(extra=[new_code_cell(ANSWER)]), 7, "must come before the check cell"),
        (lambda: lesson01(extra=[new_code_cell('check("01.1", f)\ncheck("01.2", g)')]), 7, "one check per cell"),
        (lambda: lesson01(extra=[new_code_cell('check("01.1", f)  # BEGIN SOLUTION')]), 7, "must not contain"),
        (lambda: solution_notebook(new_code_cell('check("01.1", f)')), None, "without a check cell: 01.2, 01.3"),
    ],
)
def test_notebook_errors_name_the_cell(notebook, cell, message):
    where = "solutions/01_t.ipynb" + ("" if cell is None else f", cell {cell}")
    with pytest.raises(MarkerError, match=f"^{where}: .*{message}"):
        make_exercise_notebook(notebook(), "solutions/01_t.ipynb")


def test_notebook_name_must_carry_the_lesson_number():
    with pytest.raises(MarkerError, match="two-digit lesson number"):
        make_exercise_notebook(lesson01(), "solutions/tensor_shapes.ipynb")


def test_generated_notebook_is_valid_nbformat():
    nbformat.validate(make_exercise_notebook(lesson01(), "solutions/01_tensor_shapes.ipynb"))


def test_run_all_goes_on_past_answers_and_checks_that_raise():
    """JupyterLab runs a cell tagged raises-exception with stop_on_error=False: Run All reaches every check."""
    nb = make_exercise_notebook(lesson01(), "solutions/01_tensor_shapes.ipynb")
    tagged = {c.metadata.get("transformer_course", {}).get("role") for c in nb.cells
              if "raises-exception" in c.metadata.get("tags", [])}
    assert tagged == {"answer", "check"}
    assert all("raises-exception" in c.metadata.get("tags", []) for c in nb.cells
               if c.metadata.get("transformer_course", {}).get("role") in ("answer", "check"))


def test_the_notebook_ends_with_a_read_only_progress_cell():
    nb = make_exercise_notebook(lesson01(), "solutions/01_tensor_shapes.ipynb")
    title, cell = nb.cells[-2:]
    assert title.cell_type == "markdown" and title.source.startswith("## Your progress")
    assert cell.cell_type == "code" and cell.source.endswith('progress("01")')
    assert cell.metadata["transformer_course"] == {"role": "progress"}
    assert cell.metadata["editable"] is False and cell.metadata["deletable"] is False
    assert "tags" not in cell.metadata and cell.outputs == []
    clash = lesson01(extra=[new_code_cell("x = 1", id="progress")])
    with pytest.raises(MarkerError, match="'progress' is reserved for the generated progress cell"):
        make_exercise_notebook(clash, "solutions/01_tensor_shapes.ipynb")


def test_hidden_inputs_are_collapsed_in_lab_and_the_how_to_mentions_run_all():
    install = new_code_cell("import sys", id="install", metadata={"tags": ["hide-input"]})
    nb = make_exercise_notebook(lesson01(extra=[install]), "solutions/01_tensor_shapes.ipynb")
    cells = {c.id: c for c in nb.cells}
    assert cells["install"].metadata["jupyter"] == {"source_hidden": True}
    assert cells["install"].metadata["tags"] == ["hide-input"]  # the book still hides it
    assert "jupyter" not in cells["progress"].metadata
    assert " ".join(cells["how-to"].source.split()).endswith(" ".join(RUN_ALL_HOWTO.split()))


def test_the_solution_says_it_is_one_and_the_exercise_gets_its_own_title_and_how_to():
    """One source: the exercise notebook's title and instructions are made from the solution's."""
    solution = lesson01()
    cells = {c.id: c for c in make_exercise_notebook(solution, "solutions/01_tensor_shapes.ipynb").cells}
    assert cells["title"].source == "# Exercises 1: tensor shapes\n\nThese exercises practise lesson 1."
    assert cells["how-to"].source == "\n\n".join(
        [HOW_TO_WORK, "The checks try float64.", "Worth 5 points.", textwrap.fill(RUN_ALL_HOWTO, 110)])
    assert solution.cells[0].source == TITLE and solution.cells[1].source == HOW_TO  # the solution is not modified


@pytest.mark.parametrize(
    "notebook, message",
    [
        (lambda: lesson01(title="# Exercises 1: tensor shapes"),
         "the title cell must start with '# Solutions 1: ', found '# Exercises 1: tensor shapes'"),
        (lambda: lesson01(title="# Solutions 2: attention"),
         "the title cell must start with '# Solutions 1: ', found '# Solutions 2: attention'"),
        (lambda: lesson01(how_to="**How to work.** Run the cells."),
         "the how-to cell must start with '**How to read.**', found '**How to work.** Run the cells.'"),
        (lambda: solution_notebook(*[new_code_cell("x = 1", id="how-to") if c.id == "how-to" else c
                                     for c in lesson01().cells]),
         "the cell with id 'how-to' must be markdown, got a code cell"),
        (lambda: solution_notebook(*[c for c in lesson01().cells if c.id != "title"]),
         "a solution notebook needs a markdown cell with id 'title', found none"),
    ],
)
def test_a_solution_without_its_title_or_how_to_for_readers_is_refused(notebook, message):
    with pytest.raises(MarkerError, match=f"^solutions/01_t.ipynb: {re.escape(message)}"):
        make_exercise_notebook(notebook(), "solutions/01_t.ipynb")
