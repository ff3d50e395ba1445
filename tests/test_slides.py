"""The rules that pick what a lesson's slide deck shows (transformer_course.slides), on small made-up notebooks,
and the lessons' own tags. The decks themselves are loaded in a browser by tests/test_book.py."""

import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from transformer_course.slides import (
    DECK_SUFFIX,
    SLIDE_TAGS,
    build_decks,
    deck_notebook,
    read_citations,
    section_lead,
)

ROOT = Path(__file__).resolve().parents[1]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="


def figure(text="<Figure>"):
    return new_output("display_data", data={"image/png": PNG, "text/plain": text})


def printed(text):
    return new_output("stream", name="stdout", text=text)


def code(source, outputs=(), tags=(), cell_id=None):
    cell = new_code_cell(source, outputs=list(outputs))
    if tags:
        cell.metadata["tags"] = list(tags)
    if cell_id:
        cell.id = cell_id
    return cell


def lesson(*cells):
    return new_notebook(cells=[new_markdown_cell("# 9. A lesson\n\nWhat it is about."),
                               new_markdown_cell("**Goals.** After this lesson you will\n\n- know"),
                               code("import torch"), *cells])


def kinds(deck):
    """(slide_type, what) per deck cell: 'md:first line', 'code' (source shown) or 'out' (outputs only)."""
    found = []
    for cell in deck.cells:
        if cell.cell_type == "markdown":
            what = "md:" + cell.source.strip().splitlines()[0]
        else:
            what = "out" if cell.metadata.get("transient", {}).get("remove_source") else "code"
        found.append((cell.metadata.slideshow.slide_type, what))
    return found


def slides(deck):
    return sum(cell.metadata.slideshow.slide_type == "slide" for cell in deck.cells)


def test_title_slide_holds_heading_goals_and_book_link_and_the_intro_becomes_notes():
    deck = deck_notebook(lesson(), book_page="../html/lessons/09_x.html")
    assert kinds(deck) == [("slide", "md:# 9. A lesson"), ("-", "md:**Goals.** After this lesson you will"),
                           ("-", "md:[Read this lesson in the book](../html/lessons/09_x.html)"),
                           ("notes", "md:What it is about.")]


def test_sections_figures_and_notes():
    deck = deck_notebook(lesson(
        new_markdown_cell("## 9.1 First\n\nOpening prose."),
        code("x = 1", [printed("1\n")]),  # no figure, no tag: left out
        new_markdown_cell("More prose for the presenter."),
        code("plot()", [figure()]),
        new_markdown_cell("### A subsection stays in the notes"),
        new_markdown_cell("## 9.2 Second"),
    ), book_page="b.html")
    assert kinds(deck)[4:] == [("slide", "md:## 9.1 First"), ("notes", "md:More prose for the presenter."),
                               ("slide", 'md:<p class="deck-context">9.1 First</p>'), ("-", "out"),
                               ("notes", "md:### A subsection stays in the notes"), ("slide", "md:## 9.2 Second")]
    assert slides(deck) == 1 + 2 + 1


def test_tags_choose_code_and_outputs_and_skip():
    deck = deck_notebook(lesson(
        new_markdown_cell("## 9.1 Section"),
        code("def f(): ...", [printed("ok\n")], tags=["slide-code"]),
        code("table()", [printed("a | b\n")], tags=["slide-output"]),
        code("plot()", [figure()], tags=["slide-skip"]),
        code("plot()", [figure()], tags=["remove-cell"]),
        code("plot()", [figure()], tags=["remove-output"]),
        new_markdown_cell("Skipped prose", metadata={"tags": ["slide-skip"]}),
        code("draw()", [figure()], tags=["slide-code", "hide-input"]),
    ), book_page="b.html")
    shown = [k for k in kinds(deck)[4:] if not k[1].startswith("md:")]
    assert shown == [("-", "code"), ("-", "out"), ("-", "code")]
    assert "Skipped prose" not in str(deck.cells)
    assert slides(deck) == 1 + 1 + 3


def test_a_cell_with_three_figures_gives_three_slides_with_the_text_between_them():
    cell = code("for x in xs: show(x)", [printed("before\n"), figure("a"), figure("b"), printed("mid\n"), figure("c"),
                                         printed("after\n")], cell_id="many")
    deck = deck_notebook(lesson(new_markdown_cell("## 9.1 Figures"), cell), book_page="b.html")
    parts = [c for c in deck.cells if c.cell_type == "code"]
    assert [[o.get("text", o.get("data", {}).get("text/plain")) for o in p.outputs] for p in parts] == [
        ["before\n", "a"], ["b"], ["mid\n", "c", "after\n"]]
    assert [p.id for p in parts] == ["many", "many-1", "many-2"]
    assert slides(deck) == 1 + 1 + 3


def test_outputs_lose_stderr_and_widget_views_but_keep_the_figure():
    widget = new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "x"},
                                              "image/png": PNG, "text/plain": "Explorer"})
    nb = lesson(new_markdown_cell("## 9.1 Explore"),
                code("explorer()", [new_output("stream", name="stderr", text="warning\n"), widget]))
    nb.metadata["widgets"] = {"state": {}}
    deck = deck_notebook(nb, book_page="b.html")
    (part,) = [c for c in deck.cells if c.cell_type == "code"]
    assert [sorted(o.get("data", {})) for o in part.outputs] == [["image/png", "text/plain"]]
    assert "widgets" not in deck.metadata and "widgets" in nb.metadata  # the lesson itself is left alone


def test_myst_citations_equation_labels_and_links_become_plain_markdown():
    citations = {"vaswani2017attention": ("Vaswani et al.", "2017"), "press2017using": ("Press and Wolf", "2017")}
    deck = deck_notebook(lesson(new_markdown_cell(
        "## 9.1 Math\n\nAs {cite}`vaswani2017attention` and {cite:t}`press2017using` write,\n\n"
        "$$\na = b\n$$ (eq-a)\n\nby {eq}`eq-a`; see [the exercises](../exercises/09_x.ipynb) and "
        "[the notation](../book/notation.md#shapes) and [lesson 1](01_tensor_shapes.ipynb).")),
        book_page="b.html", citations=citations)
    text = deck.cells[4].source + "\n\n" + deck.cells[5].source  # the slide and its speaker notes
    assert "(Vaswani et al., 2017)" in text and "Press and Wolf (2017)" in text
    assert "a = b \\tag{1}\n$$" in text and "by (1);" in text and "(eq-a)" not in text
    assert "(../html/exercises/09_x.html)" in text and "(../html/book/notation.html#shapes)" in text
    assert "(../html/lessons/01_tensor_shapes.html)" in text


def test_a_notebook_without_a_title_is_refused():
    with pytest.raises(ValueError, match="'# ' title"):
        deck_notebook(new_notebook(cells=[code("x = 1")]), book_page="b.html")


def test_read_citations_names_authors_as_the_book_does():
    citations = read_citations(ROOT / "references.bib")
    assert citations["vaswani2017attention"] == ("Vaswani et al.", "2017")
    assert citations["press2017using"] == ("Press and Wolf", "2017")
    assert citations["popovic2015chrf"] == ("Popović", "2015")


def test_a_deck_loads_nothing_from_the_network(tmp_path):
    source = tmp_path / "lessons" / "09_x.ipynb"
    source.parent.mkdir()
    nbformat.write(lesson(new_markdown_cell("## 9.1 Section $x^2$"), code("plot()", [figure()])), source)
    (deck,) = build_decks([source], tmp_path / "slides")
    html = deck.path.read_text()
    assert deck.path.name == "09_x" + DECK_SUFFIX and deck.slides == 3
    loaded = re.findall(r'<(?:script|link)[^>]*(?:src|href)="([^"]+)"', html)
    assert loaded and not [url for url in loaded if "//" in url], loaded
    assert {"_static/mathjax/tex-mml-chtml.js", "_static/reveal/dist/reveal.js"} <= set(loaded)
    for url in loaded:
        assert (deck.path.parent / url).exists(), url
    assert (deck.path.parent / "_static/reveal/dist/theme/fonts/source-sans-pro/source-sans-pro-regular.woff").exists()


def test_the_lessons_use_only_known_slide_tags_on_code_cells():
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            tags = {t for t in cell.metadata.get("tags", []) if t.startswith("slide")}
            assert tags <= set(SLIDE_TAGS), f"{path.name} {cell.id}: unknown tags {tags - set(SLIDE_TAGS)}"
            if tags - {"slide-skip"}:
                assert cell.cell_type == "code", f"{path.name} {cell.id}: {tags} on a {cell.cell_type} cell"


def glued(name, value):
    """The output ``myst_nb.glue(name, value, display=False)`` stores."""
    return new_output("display_data", data={"text/plain": repr(value)},
                      metadata={"scrapbook": {"name": name, "mime_prefix": ""}})


def test_glued_numbers_are_pasted_into_the_deck_as_the_book_formats_them():
    deck = deck_notebook(lesson(new_markdown_cell("## 9.1 Results\n\n{glue:text}`accuracy:.1%` after "
                                                  "{glue:text}`steps` steps ({glue:text}`accuracy:.3f`)."),
                                code("glue(...)", outputs=[printed("trained\n"), glued("accuracy", 0.9234),
                                                           glued("steps", 300)],
                                     tags=["slide-code"])),  # shown: its code and print, not its stored values
                         book_page="b.html")
    text = next(c.source for c in deck.cells if c.source.startswith("## 9.1"))
    assert "92.3% after 300 steps (0.923)." in text and "{glue" not in text
    shown = next(c for c in deck.cells if c.cell_type == "code" and c.source == "glue(...)")
    assert [o.get("text") for o in shown.outputs] == ["trained\n"]
    with pytest.raises(ValueError, match="no cell glued a value named 'missing'"):
        deck_notebook(lesson(new_markdown_cell("## 9.1\n\n{glue:text}`missing`")), book_page="b.html")


def test_no_lesson_deck_keeps_a_raw_glue_role():
    for path in sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb")):
        deck = deck_notebook(nbformat.read(path, as_version=4), book_page="b.html")
        raw = [c.source for c in deck.cells if c.cell_type == "markdown" and "{glue" in c.source]
        assert not raw, f"{path.name}: {raw[0][:200]}"


def test_a_section_slide_shows_its_lead_and_the_rest_becomes_notes():
    shown, notes = section_lead(
        "## 9.1 Lead\n\nThe first paragraph,\nover two lines.\n\n$$\na = b\n\n+ c\n$$\n\nMore prose.\n\n"
        "### A subsection\n\nIts prose.")
    assert shown == "## 9.1 Lead\n\nThe first paragraph,\nover two lines."
    assert notes == "$$\na = b\n\n+ c\n$$\n\nMore prose.\n\n### A subsection\n\nIts prose."  # the equation whole
    # A block that ends with ":" brings the one it introduces, and so on down a chain.
    shown, notes = section_lead("## 9.2 Chain\n\nIt reads:\n\n$$\nx = 1\n$$\n\nand so:\n\n```python\nf()\n\ng()\n```"
                                "\n\nLeft for the notes.")
    assert shown == "## 9.2 Chain\n\nIt reads:\n\n$$\nx = 1\n$$"
    assert notes == "and so:\n\n```python\nf()\n\ng()\n```\n\nLeft for the notes."
    # A list shows the first sentence of each item; the notes keep it whole.
    items = ("- One $a. b$ and `x. y` stay whole. Cut here.\n  Still the first item.\n"
             "- Two, one sentence\n  over two lines.\n1. Three.")
    shown, notes = section_lead(f"## Summary\n\n{items}")
    assert shown == "## Summary\n\n- One $a. b$ and `x. y` stay whole.\n- Two, one sentence over two lines.\n1. Three."
    assert notes == items
    assert section_lead("## 9.3 Only a heading") == ("## 9.3 Only a heading", "")


def test_a_slide_that_ends_with_a_colon_shows_the_code_it_introduces():
    deck = deck_notebook(lesson(
        new_markdown_cell("## 9.1 Recipe\n\nHere it is as a loop:"),
        code("for x in xs: f(x)", [printed("done\n")]),  # no tag: shown because the slide introduces it
        code("y = 2"),  # left out, as before
        new_markdown_cell("## 9.2 Plain\n\nNo colon here."),
        code("z = 3", [printed("3\n")]),
    ), book_page="b.html")
    assert kinds(deck)[4:] == [("slide", "md:## 9.1 Recipe"), ("slide", 'md:<p class="deck-context">9.1 Recipe</p>'),
                               ("-", "code"), ("slide", "md:## 9.2 Plain")]


def _slides_of(deck) -> list[list]:
    slides = []
    for cell in deck.cells:
        kind = cell.metadata.slideshow.slide_type
        if kind == "slide":
            slides.append([cell])
        elif kind == "-":
            slides[-1].append(cell)
    return slides


def colons_left_hanging(deck) -> list[str]:
    """The slides whose text ends with ":" while the next slide shows no code or output."""
    slides, found = _slides_of(deck), []
    for i, slide in enumerate(slides):
        last = slide[-1]
        if last.cell_type == "markdown" and last.source.rstrip().endswith(":"):
            following = slides[i + 1] if i + 1 < len(slides) else []
            if not any(c.cell_type == "code" for c in following):
                found.append(f"slide {i + 1} ends {last.source[-60:]!r}")
    return found


def test_a_colon_left_hanging_is_caught():
    deck = deck_notebook(lesson(new_markdown_cell("## 9.1 Recipe\n\nHere it is:"),
                                code("f()", [printed("1\n")], tags=["slide-skip"]),
                                new_markdown_cell("## 9.2 Next")), book_page="b.html")
    assert colons_left_hanging(deck) == ["slide 2 ends '## 9.1 Recipe\\n\\nHere it is:'"]


@pytest.mark.parametrize("path", sorted((ROOT / "lessons").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_lesson_slide_that_ends_with_a_colon_is_followed_by_what_it_introduces(path):
    assert not colons_left_hanging(deck_notebook(nbformat.read(path, as_version=4), book_page="b.html"))
