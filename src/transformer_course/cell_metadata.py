"""What the course writes in notebook cells' metadata, in one place: the exercise record, the tags, the read-only
flags and the reserved cell ids. Read by :mod:`.authoring` (which writes them into exercise notebooks),
:mod:`.launch` (the install cell) and :mod:`transformer_course.grading` (which grades by them). Imports nothing of
the course, so that each of them can import it."""

from __future__ import annotations

METADATA_KEY = "transformer_course"  # cell metadata: {"role": "answer" | "check" | "progress", "exercise": "02.1", ...}
# A cell with this tag may raise: JupyterLab then executes it with stop_on_error=False (its OutputArea.execute),
# so the kernel does not drop the cells queued after it and Run All reaches every check. nbval and nbclient
# accept an error from such a cell too; the grader gives no weight to it (grading/prepare.py rebuilds every
# cell without the learner's or the release's metadata and grades by each check's execute reply).
RUN_PAST_ERRORS = "raises-exception"
# The book's tags that hide part of a cell, and the JupyterLab metadata that collapses the same part.
LAB_HIDDEN = {"hide-input": {"source_hidden": True}, "hide-output": {"outputs_hidden": True},
              "hide-cell": {"source_hidden": True, "outputs_hidden": True}}
INSTALL_CELL_ID = "install"  # the cell that installs the package where it is missing (launch.py)
PROGRESS_IDS = ("progress-title", "progress")  # the generated progress cells at the end of an exercise notebook


def add_tag(cell, tag: str) -> None:
    """Give ``cell`` the tag ``tag`` (once)."""
    tags = cell.metadata.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def collapse_in_lab(cell) -> None:
    """JupyterLab ignores the book's hide-* tags: collapse the same parts with its own metadata."""
    for tag in cell.metadata.get("tags", []):
        if tag in LAB_HIDDEN:
            cell.metadata.setdefault("jupyter", {}).update(LAB_HIDDEN[tag])


def protect(cell, *, editable: bool) -> None:
    """Jupyter's flags for a cell of an exercise notebook: it cannot be deleted, and can be edited only if
    ``editable`` (the answer cells)."""
    cell.metadata.update(editable=editable, deletable=False)


def exercise_record(cell) -> dict:
    """The course's record in ``cell`` (role, exercise id, title, points), or {} when it has none or a malformed one.
    ``cell`` may be a notebook node or a plain dict read from JSON."""
    value = cell.get("metadata", {}).get(METADATA_KEY, {})
    return value if isinstance(value, dict) else {}


def is_read_only(cell) -> bool:
    """A cell the learner cannot edit in Jupyter: read-only, or a check cell."""
    return cell.get("metadata", {}).get("editable", True) is False or exercise_record(cell).get("role") == "check"
