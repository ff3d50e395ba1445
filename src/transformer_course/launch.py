"""Notebooks that run outside a clone of the course: Colab and Binder.

The book's launch buttons open a notebook in Colab or on Binder, straight from the course repository
named in the book's ``_config.yml`` (``repository.url`` and ``repository.branch``). Binder builds its
environment from ``binder/`` and has the package; Colab has PyTorch but not the package. So every
lesson, solution and exercise notebook starts with an *install cell*: where ``transformer_course``
cannot be imported it pip-installs it from the repository, and everywhere else it does nothing.

The cell's text is generated here from ``_config.yml``, so that changing the repository is one edit
plus ``make execute`` (which rewrites the cell in lessons and solutions; ``make exercises`` copies it
into the exercises).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

INSTALL_CELL_ID = "install"
CONFIG = "_config.yml"


def find_config(notebook: str | Path) -> Path | None:
    """The book's ``_config.yml`` in the notebook's folder or above it, or None outside a book."""
    for folder in Path(notebook).resolve().parents:
        if (folder / CONFIG).is_file():
            return folder / CONFIG
    return None


def repository(config: str | Path) -> tuple[str, str]:
    """``(url, branch)`` of the course repository named in the book configuration ``config``."""
    import yaml

    repo = (yaml.safe_load(Path(config).read_text()) or {}).get("repository") or {}
    url, branch = repo.get("url"), repo.get("branch", "main")
    if not url or not str(url).startswith("https://"):
        raise ValueError(f"{config}: repository.url must be the course's https:// repository URL, got {url!r}")
    return str(url).rstrip("/"), str(branch)


def requirement(url: str, branch: str) -> str:
    """The pip requirement that installs the package from the repository, e.g.
    ``transformer-course @ git+https://github.com/org/repo@main``."""
    return f"transformer-course @ git+{url}@{branch}"


def install_cell_source(url: str, branch: str) -> str:
    """The text of the install cell for the repository ``url`` at ``branch``."""
    # pip's own output goes to the kernel's terminal, not to the notebook: on failure, the cell shows it.
    # --no-deps: Colab's own PyTorch, numpy, matplotlib, ipywidgets and tqdm are what the package imports;
    # its pinned dependencies would replace Colab's GPU build of PyTorch with a download of several GB.
    return f'''# In Colab (or any Python without the course package) this installs the package from the course
# repository; in a clone set up with `make lab`, or on Binder, it does nothing.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("transformer_course") is None:
    package = "{requirement(url, branch)}"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        raise RuntimeError(f"pip could not install {{package}}:\\n{{pip.stderr[-3000:]}}")
    importlib.invalidate_caches()
if "google.colab" in sys.modules:  # Colab draws ipywidgets 8 only through its custom widget manager
    from google.colab import output
    output.enable_custom_widget_manager()'''


def sync_install_cell(nb: nbformat.NotebookNode, source: str) -> bool:
    """Make ``nb``'s install cell hold ``source``, adding it before the first code cell if it has none.

    Returns True if ``nb`` changed.
    """
    cells = nb.cells
    cell = next((c for c in cells if c.get("id") == INSTALL_CELL_ID), None)
    if cell is not None:
        if cell.cell_type != "code":
            raise ValueError(f"cell {INSTALL_CELL_ID!r} must be a code cell, it is a {cell.cell_type} cell")
        changed, cell.source = cell.source != source, source
        return changed
    cell = nbformat.v4.new_code_cell(source, id=INSTALL_CELL_ID, metadata={"tags": ["hide-input"]})
    first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    cells.insert(first_code, cell)
    return True


def install_cell_for(notebook: str | Path) -> str | None:
    """The install cell that ``notebook`` should hold, or None when it is not part of a course book."""
    config = find_config(notebook)
    return None if config is None else install_cell_source(*repository(config))
