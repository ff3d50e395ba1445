"""Links from the book to the lessons' slide decks (``make slides`` writes them to ``_build/slides/``, next to
the book's ``_build/html/``).

Every lesson page (``lessons/NN_topic``) gets a line under its title that opens the lesson's deck, so no
notebook carries the link in its prose; the directive ``slide-decks`` lists every lesson's deck (the instructor
guide uses it).
"""

import json
import re
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

SLIDES = "slides"  # the decks' folder, a sibling of the HTML folder
LESSON = re.compile(r"^lessons/(\d\d_\w+)$")


def deck_uri(docname: str, lesson: str) -> str:
    """The URL of ``lesson``'s deck relative to the page of ``docname``."""
    return "../" * (docname.count("/") + 1) + f"{SLIDES}/{lesson}.slides.html"


def _deck_link(text: str, uri: str) -> nodes.reference:
    return nodes.reference("", text, refuri=uri, classes=["course-slides-link"])


def _add_deck_link(app, doctree, docname):
    match = LESSON.match(docname)
    section = next(iter(doctree.findall(nodes.section)), None)
    if match is None or section is None:
        return
    paragraph = nodes.paragraph("", "", classes=["course-slides"])
    paragraph += nodes.Text("Teaching this lesson? ")
    paragraph += _deck_link("Present it as slides", deck_uri(docname, match.group(1)))
    paragraph += nodes.Text(" (a reveal.js deck of its sections and figures; see the instructor guide).")
    section.insert(1, paragraph)


def _title(notebook: Path) -> str:
    """The notebook's '# ' heading (its first markdown cell's first line), else its file name."""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            first = "".join(cell["source"]).strip().splitlines()[0]
            return first.lstrip("#").strip() if first.startswith("# ") else notebook.stem
    return notebook.stem


class SlideDecks(SphinxDirective):
    """A bullet list: every lesson in ``lessons/`` with a link to its deck."""

    def run(self):
        items = nodes.bullet_list()
        for lesson in sorted(Path(self.env.srcdir, "lessons").glob("[0-9][0-9]_*.ipynb")):
            text = _title(lesson)
            paragraph = nodes.paragraph()
            paragraph += _deck_link(text, deck_uri(self.env.docname, lesson.stem))
            items += nodes.list_item("", paragraph)
        return [items]


def setup(app):
    app.add_directive("slide-decks", SlideDecks)
    app.connect("doctree-resolved", _add_deck_link)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
