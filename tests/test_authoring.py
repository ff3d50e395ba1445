"""Generating learner notebooks from solutions: stubs, metadata, read-only cells, marker errors."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from transformer_course.authoring import MarkerError, make_exercise_notebook, stub_source

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


def lesson01(answer=ANSWER, extra=()):
    """A minimal valid solution notebook for lesson 01 (three registered exercises)."""
    cells = [new_markdown_cell("# Exercises"), new_code_cell("from transformer_course.checks import check")]
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
    answer, check_cell = nb.cells[2], nb.cells[3]
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
    assert [c.id for c in nb.cells] == [c.id for c in solution.cells]  # ids survive: grading maps by id
    assert "widgets" not in nb.metadata
    assert nb.metadata["transformer_course"]["generated_from"] == "solutions/01_tensor_shapes.ipynb"
    assert "tokens[..., 1:]" in solution.cells[2].source  # the source notebook is not modified


@pytest.mark.parametrize(
    "notebook, cell, message",
    [
        (lambda: lesson01(extra=[new_markdown_cell("# BEGIN SOLUTION")]), 6, "only allowed in code cells"),
        (lambda: lesson01(extra=[new_code_cell('check("01.9", f)')]), 6, "names no registered exercise"),
        (lambda: lesson01(extra=[new_code_cell('check("02.1", f)')]), 6, "does not belong to lesson 01"),
        (lambda: lesson01(extra=[new_code_cell('check("01.1", f)')]), 6, "checked twice"),
        (lambda: lesson01(extra=[new_code_cell(ANSWER)]), 6, "must come before the check cell"),
        (lambda: lesson01(extra=[new_code_cell('check("01.1", f)\ncheck("01.2", g)')]), 6, "one check per cell"),
        (lambda: lesson01(extra=[new_code_cell('check("01.1", f)  # BEGIN SOLUTION')]), 6, "must not contain"),
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
