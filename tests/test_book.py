"""The book builds with Sphinx's warnings as errors, and the pages hold their outputs and math."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_book_builds_without_warnings_and_pages_hold_outputs(built_book):
    html = built_book
    for page in ["index", "intro", "book/notation", "book/glossary", "book/instructor_guide", "book/bibliography"]:
        assert (html / f"{page}.html").exists(), page
    for lesson in sorted((ROOT / "lessons").glob("*.ipynb")):
        page = (html / "lessons" / f"{lesson.stem}.html").read_text()
        assert "<img" in page and 'class="cell_output' in page, f"{lesson.stem}: no rendered outputs/figure"
        assert 'class="math' in page, f"{lesson.stem}: no typeset math"
        assert "application/vnd.jupyter.widget-view+json" not in page
        assert (html / "exercises" / f"{lesson.stem}.html").exists()
    # Exercises are rendered blank: no outputs were stored, none were produced.
    for exercise in sorted((ROOT / "exercises").glob("*.ipynb")):
        assert 'class="cell_output' not in (html / "exercises" / f"{exercise.stem}.html").read_text()
    assert "Vaswani" in (html / "book" / "bibliography.html").read_text()
    assert (html / "_static" / "logo.png").stat().st_size > 1000
