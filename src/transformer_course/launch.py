"""Notebooks that run outside a clone of the course: Colab and Binder.

The book's launch buttons open a notebook in Colab or on Binder, straight from the course repository
named in the book's ``_config.yml`` (``repository.url``, ``repository.branch``). Binder builds its
environment from ``binder/`` and has the package; Colab has PyTorch but not the package. So every
lesson, solution and exercise notebook starts with an *install cell*: where ``transformer_course``
cannot be imported it pip-installs it from the repository at ``repository.ref``, a release tag or a
commit (never a branch, so that a later push cannot change what a class runs); everywhere else it does
nothing.

The repository is the publisher's to set: the course must not install code from an address that it does
not control. While ``repository.url`` is empty the book shows no launch buttons and the install cell
installs nothing: it says how to get the package instead.

The cell's text is generated here from ``_config.yml``, so that setting the repository is one edit plus
``make execute`` (which rewrites the cell in lessons and solutions) and ``make exercises``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from transformer_course.cell_metadata import INSTALL_CELL_ID, add_tag, collapse_in_lab

CONFIG = "_config.yml"
_GITHUB = re.compile(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")  # Colab and Binder need GitHub
# A commit (7 to 40 hex digits) or a release tag such as v1.2 or 2026.1: names that a push does not move.
_PINNED = re.compile(r"[0-9a-f]{7,40}|v?\d+(\.\d+)+([-+.][0-9A-Za-z.]+)?")


@dataclass(frozen=True)
class Repository:
    url: str  # https://github.com/OWNER/REPO
    branch: str  # what the launch buttons open
    ref: str  # what the install cell installs: a release tag or a commit


def find_config(notebook: str | Path) -> Path | None:
    """The book's ``_config.yml`` in the notebook's folder or above it, or None outside a book."""
    for folder in Path(notebook).resolve().parents:
        if (folder / CONFIG).is_file():
            return folder / CONFIG
    return None


def repository(config: str | Path) -> Repository | None:
    """The course repository named in the book configuration ``config``, or None while it is not set."""
    import yaml

    repo = (yaml.safe_load(Path(config).read_text()) or {}).get("repository") or {}
    url, branch, ref = (str(repo.get(key) or "").strip() for key in ("url", "branch", "ref"))
    if not url:
        return None
    url = url.rstrip("/")
    if not _GITHUB.fullmatch(url):
        raise ValueError(f"{config}: repository.url must be https://github.com/OWNER/REPO (Colab and Binder open "
                         f"GitHub repositories), got {url!r}")
    if not _PINNED.fullmatch(ref):
        raise ValueError(f"{config}: repository.ref must be a release tag (such as v1.0) or a commit of {url}, "
                         f"so that a later push cannot change what a class installs; got {ref!r}")
    return Repository(url, branch or "main", ref)


def requirement(repo: Repository) -> str:
    """The pip requirement that installs the package from the repository, e.g.
    ``transformer-course @ git+https://github.com/org/repo@v1.0``."""
    return f"transformer-course @ git+{repo.url}@{repo.ref}"


_NOT_SET = """# The course package is not installed here, and this copy of the course names no repository to install it
# from (repository.url and repository.ref in the book's _config.yml are not set), so this cell installs nothing.
import importlib.util
import sys

if importlib.util.find_spec("transformer_course") is None:
    raise RuntimeError("The course package (transformer_course) is not installed. Run this notebook in a clone of "
                       "the course set up with `make lab`, or install the package there with `pip install -e .`.")"""

_INSTALL = """# In Colab (or any Python without the course package) this installs the package from the course
# repository at {ref}; in a clone set up with `make lab`, or on Binder, it does nothing.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("transformer_course") is None:
    package = "{requirement}"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        raise RuntimeError(f"pip could not install {{package}}:\\n{{pip.stderr[-3000:]}}")
    importlib.invalidate_caches()"""

_COLAB = """
if "google.colab" in sys.modules:  # Colab draws ipywidgets 8 only through its custom widget manager
    from google.colab import output
    output.enable_custom_widget_manager()"""


def install_cell_source(repo: Repository | None) -> str:
    """The text of the install cell for the course repository ``repo`` (None: not set)."""
    # pip's own output goes to the kernel's terminal, not to the notebook: on failure, the cell shows it.
    # --no-deps: Colab's own PyTorch, numpy, matplotlib, ipywidgets and tqdm are what the package imports;
    # its pinned dependencies would replace Colab's GPU build of PyTorch with a download of several GB.
    body = _NOT_SET if repo is None else _INSTALL.format(ref=repo.ref, requirement=requirement(repo))
    return body + _COLAB


def sync_install_cell(nb: nbformat.NotebookNode, source: str) -> bool:
    """Make ``nb``'s install cell hold ``source``, adding it before the first code cell if it has none, with its
    source hidden in the book (the ``hide-input`` tag) and collapsed in JupyterLab (which ignores the tag).

    Returns True if ``nb`` changed.
    """
    cells = nb.cells
    cell = next((c for c in cells if c.get("id") == INSTALL_CELL_ID), None)
    if cell is None:
        cell = nbformat.v4.new_code_cell(source, id=INSTALL_CELL_ID)
        first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
        cells.insert(first_code, cell)
    elif cell.cell_type != "code":
        raise ValueError(f"cell {INSTALL_CELL_ID!r} must be a code cell, it is a {cell.cell_type} cell")
    before = (cell.source, json.dumps(cell.metadata, sort_keys=True))
    cell.source = source
    add_tag(cell, "hide-input")
    collapse_in_lab(cell)
    return before != (cell.source, json.dumps(cell.metadata, sort_keys=True))


def install_cell_for(notebook: str | Path) -> str | None:
    """The install cell that ``notebook`` should hold, or None when it is not part of a course book."""
    config = find_config(notebook)
    return None if config is None else install_cell_source(repository(config))
