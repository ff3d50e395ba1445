"""The book builds with Sphinx's warnings as errors, and the pages hold their outputs and math."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_book_builds_without_warnings(tmp_path):
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run(
        [str(jupyter_book), "build", "-W", "-n", "--keep-going", "--path-output", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    html = tmp_path / "_build" / "html"
    for page in ["index", "book/notation", "book/instructor_guide", "book/bibliography"]:
        assert (html / f"{page}.html").exists(), page
    for lesson in sorted((ROOT / "lessons").glob("*.ipynb")):
        page = (html / "lessons" / f"{lesson.stem}.html").read_text()
        assert "<img" in page and 'class="cell_output' in page, f"{lesson.stem}: no rendered outputs/figure"
        assert 'class="math' in page, f"{lesson.stem}: no typeset math"
        assert (html / "exercises" / f"{lesson.stem}.html").exists()
    # Exercises are rendered blank: no outputs were stored, none were produced.
    for exercise in sorted((ROOT / "exercises").glob("*.ipynb")):
        assert 'class="cell_output' not in (html / "exercises" / f"{exercise.stem}.html").read_text()
    assert "Vaswani" in (html / "book" / "bibliography.html").read_text()
