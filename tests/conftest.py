"""Fixtures shared by the tests: the book, built once per session; a release folder for the grader."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """Build the book with warnings as errors into a temporary folder; returns the HTML folder."""
    from transformer_course.viz import draw_logo

    logo = ROOT / "book" / "_static" / "logo.png"  # a build artefact, as `make book` makes it
    logo.parent.mkdir(exist_ok=True)
    draw_logo(str(logo))
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "-n", "--keep-going", "--path-output",
         str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out / "_build" / "html"


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """A release folder holding the released exercises/01 notebook, as an instructor hands it out."""
    folder = tmp_path_factory.mktemp("release")
    shutil.copy(ROOT / "exercises" / "01_tensor_shapes.ipynb", folder)
    return folder
