"""Slide decks: one reveal.js deck per lesson, generated from the lesson notebook and its stored outputs.

Nothing is re-executed and no deck is kept by hand: :func:`deck_notebook` decides, cell by cell, what a
slide shows, and nbconvert's reveal.js exporter (:class:`nbconvert.SlidesExporter`) renders the result.

What goes on the slides (the rules that :func:`deck_notebook` applies):

- a **title slide**: the lesson's ``# N. Title`` heading, its goals (the markdown cell that starts with
  ``**Goals.**``) and a link to the lesson's page in the book; the rest of the title cell becomes speaker notes;
- a slide per **section**: every markdown cell that opens with a ``## `` heading; the slide shows the heading, the
  first paragraph and what a shown paragraph introduces (one that ends with ":" brings the block after it: an
  equation, a list), and the rest of the cell becomes speaker notes (:func:`section_lead`); a slide that ends
  with ":" introduces code, so the next code cell is shown as if tagged ``slide-code``;
- a slide per **figure**: every image a code cell displays (a cell that draws three figures gives three
  slides), its code hidden;
- a code cell tagged ``slide-code`` gets a slide with its code and its outputs (with its figures, if any);
  one tagged ``slide-output`` gets a slide with its outputs only (a printed table, say);
- every other markdown cell becomes **speaker notes** of the slide before it (press S in a deck);
- every other code cell is left out, and so is any cell tagged ``slide-skip`` or ``remove-cell`` (a figure
  too); a cell tagged ``remove-output`` shows no outputs, as in the book.

The tags live in each cell's ``metadata.tags`` in ``lessons/``, which ``transformer-course execute`` keeps.

Decks run offline: reveal.js (from the PyPI package ``sphinx-revealjs``, which ships reveal.js's
distribution files) and MathJax 3 (from ``django-static-mathjax``, which ships MathJax's ``es5`` build) are
copied next to the decks, into ``_static/``, and nothing is fetched from a CDN.
"""

from __future__ import annotations

import codecs
import copy
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat

from transformer_course.show import TABLE_CSS

TAG_CODE = "slide-code"
TAG_OUTPUT = "slide-output"
TAG_SKIP = "slide-skip"
SLIDE_TAGS = (TAG_CODE, TAG_OUTPUT, TAG_SKIP)

DECK_SUFFIX = ".slides.html"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


# --- which cells become which slides ------------------------------------------------------------------


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _is_section(cell) -> bool:
    lines = [line for line in cell.source.splitlines() if line.strip()]
    return cell.cell_type == "markdown" and bool(lines) and lines[0].startswith("## ")


def _is_goals(cell) -> bool:
    return cell.cell_type == "markdown" and cell.source.lstrip().startswith("**Goals.**")


def _blocks(text: str) -> list[str]:
    """Markdown ``text`` in blocks separated by blank lines; a ``$$`` equation or a fenced block is one block."""
    blocks, current, fence, math = [], [], None, False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped and fence is None and not math:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        current.append(line)
        if fence is not None:
            fence = None if stripped.startswith(fence) else fence
        elif not math and stripped.startswith(("```", ":::")):
            fence = stripped[:3]
        elif stripped.count("$$") % 2:
            math = not math
    if current:
        blocks.append("\n".join(current))
    return blocks


_ITEM = re.compile(r"^(?:[-*+]|\d+[.)]) ")


def _first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence: the first "." followed by a space or the end, outside
    ``$`` maths and backquoted code."""
    math = code = False
    for i, char in enumerate(text):
        if char == "`" and not math:
            code = not code
        elif char == "$" and not code:
            math = not math
        elif char == "." and not (math or code) and (i + 1 == len(text) or text[i + 1].isspace()):
            return text[: i + 1]
    return text


def _list_leads(block: str) -> str:
    """A markdown list with each item cut to its first sentence (items run on over indented lines)."""
    items = []  # [marker, text] per item
    for line in block.splitlines():
        marker = _ITEM.match(line)
        if marker or not items:
            items.append([marker.group() if marker else "", line[marker.end() if marker else 0:].strip()])
        else:
            items[-1][1] += " " + line.strip()
    return "\n".join(marker + _first_sentence(text) for marker, text in items)


def section_lead(source: str) -> tuple[str, str]:
    """A section cell's markdown as (what its slide shows, the speaker notes).

    The slide shows the ``## `` heading and the first block, then each block that the last shown one introduces
    (it ends with ":"); a list shows the first sentence of each item. The notes hold the rest: every block not
    shown, and in full each list that was cut."""
    heading, _, body = source.strip().partition("\n")
    blocks = _blocks(body)
    count = min(1, len(blocks))
    while count < len(blocks) and blocks[count - 1].rstrip().endswith(":"):
        count += 1
    shown, notes = [], []
    for block in blocks[:count]:
        lead = _list_leads(block) if _ITEM.match(block) else block
        shown.append(lead)
        if lead != block:
            notes.append(block)
    return "\n\n".join([heading, *shown]), "\n\n".join([*notes, *blocks[count:]])


def _shown_outputs(cell) -> list:
    """The outputs a slide shows: no stderr, no widget views (their PNG stays), no values stored for ``glue`` (the
    prose shows them), none at all for remove-output."""
    if "remove-output" in _tags(cell):
        return []
    shown = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            continue
        if "scrapbook" in output.get("metadata", {}):
            continue
        if output.get("output_type") in ("display_data", "execute_result"):
            output = copy.deepcopy(output)
            output["data"].pop(WIDGET_VIEW, None)
            if not output["data"]:
                continue
        shown.append(output)
    return shown


def _is_image(output) -> bool:
    return any(kind in output.get("data", {}) for kind in IMAGE_TYPES)


def _split_at_images(outputs: list) -> list[list]:
    """Outputs in groups that hold one image each (the text before an image goes with it, the text after
    the last image with the last); no image: one group."""
    groups, current = [], []
    for output in outputs:
        current.append(output)
        if _is_image(output):
            groups.append(current)
            current = []
    if current:
        if groups:
            groups[-1] += current
        else:
            groups.append(current)
    return groups


def _slideshow(cell, slide_type: str):
    cell.metadata["slideshow"] = {"slide_type": slide_type}
    return cell


def deck_notebook(nb, *, book_page: str, citations: dict[str, tuple[str, str]] | None = None):
    """The lesson notebook ``nb`` as a deck: a new notebook whose cells carry ``metadata.slideshow.slide_type``
    (``slide``, ``-`` for the same slide, ``notes``) for nbconvert's reveal.js exporter, following the rules in
    this module's docstring. ``book_page`` is the URL of the lesson's page in the book (relative to the deck);
    ``citations`` maps a bibliography key to (authors, year) for MyST's ``{cite}`` roles."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    markdown = _MystToMarkdown(nb, citations or {})
    cells = nb.cells
    if not cells or cells[0].cell_type != "markdown" or not cells[0].source.lstrip().startswith("# "):
        raise ValueError("nb: expected a lesson whose first cell is a markdown cell with its '# ' title, "
                         f"got {cells[0].cell_type if cells else 'no cells'}")
    title_lines = cells[0].source.strip().splitlines()
    deck = [_slideshow(nbformat.v4.new_markdown_cell(markdown(title_lines[0])), "slide")]
    intro = "\n".join(title_lines[1:]).strip()
    rest = cells[1:]
    goals = next((c for c in rest if _is_goals(c) and TAG_SKIP not in _tags(c)), None)
    if goals is not None:
        deck.append(_slideshow(nbformat.v4.new_markdown_cell(markdown(goals.source)), "-"))
    deck.append(_slideshow(nbformat.v4.new_markdown_cell(f"[Read this lesson in the book]({book_page})"), "-"))
    if intro:
        deck.append(_slideshow(nbformat.v4.new_markdown_cell(markdown(intro)), "notes"))

    section = None  # the heading of the current section, shown small above its code and figure slides
    introduces = False  # the last section slide ends with ":": the next code cell is shown with its code
    for cell in rest:
        tags = _tags(cell)
        if cell is goals or TAG_SKIP in tags or "remove-cell" in tags:
            continue
        if cell.cell_type == "markdown":
            cell.source = markdown(cell.source)
            if not _is_section(cell):
                deck.append(_slideshow(cell, "notes"))
                continue
            section = cell.source.lstrip().splitlines()[0][3:].strip()
            cell.source, notes = section_lead(cell.source)
            deck.append(_slideshow(cell, "slide"))
            if notes:
                deck.append(_slideshow(nbformat.v4.new_markdown_cell(notes), "notes"))
            introduces = cell.source.rstrip().endswith(":")
        elif cell.cell_type == "code":
            if introduces:
                tags, introduces = tags | {TAG_CODE}, False
            for part in _code_slides(cell, tags):
                if section is not None:
                    deck.append(_slideshow(nbformat.v4.new_markdown_cell(f'<p class="deck-context">{section}</p>'),
                                           "slide"))
                    part.metadata.slideshow.slide_type = "-"
                deck.append(part)
    nb.cells = deck
    return nb


def _code_slides(cell, tags: set[str]) -> list:
    outputs = _shown_outputs(cell)
    show_code = TAG_CODE in tags
    if not (show_code or TAG_OUTPUT in tags or any(map(_is_image, outputs))):
        return []
    slides = []
    for i, group in enumerate(_split_at_images(outputs)):
        part = copy.deepcopy(cell)
        part.outputs = group
        part.execution_count = None
        for output in part.outputs:
            if "execution_count" in output:
                output["execution_count"] = None
        part.metadata = {"tags": sorted(tags)}
        if i > 0:
            part.id = f"{cell.id}-{i}"
        if not (show_code and i == 0):
            part.metadata["transient"] = {"remove_source": True}
        slides.append(_slideshow(part, "slide"))
    return slides


# --- MyST markdown the exporter does not know ----------------------------------------------------------

_ROLE = re.compile(r"\{(cite|cite:p|cite:t|eq)\}`([^`]*)`")
_LABELLED = re.compile(r"(\$\$)(.*?)\$\$[ \t]*\((?P<label>[\w:-]+)\)", re.S)
_LINK = re.compile(r"\]\((?!https?://|#)(?P<path>[^)#\s]+?)\.(?:ipynb|md)(?P<anchor>#[^)]*)?\)")
_GLUE = re.compile(r"\{glue(?::text)?\}`(?P<key>[\w-]+)(?::(?P<spec>[^`]*))?`")


def glued_values(nb) -> dict[str, str]:
    """The ``text/plain`` of every value a cell stored with ``myst_nb.glue``, by its name."""
    values = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                data = output.get("data", {})
                values[name] = data.get("application/papermill.record/text/plain", data.get("text/plain", ""))
    return values


class _MystToMarkdown:
    """Rewrites the MyST that nbconvert renders as plain text: ``{cite}`` roles (as author-year), labelled
    equations ``$$ ... $$ (label)`` (numbered in order, as the book numbers them) and ``{eq}`` references to
    them, ``{glue:text}`` roles (the stored value, formatted as myst-nb formats it), and links to other pages
    of the book (``../exercises/NN_x.ipynb``) as links into the built book."""

    def __init__(self, nb, citations: dict[str, tuple[str, str]], book_root: str = "../html", folder: str = "lessons"):
        self.citations, self.book_root, self.folder = citations, book_root, folder
        labels = []
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                labels += [m.group("label") for m in _LABELLED.finditer(cell.source)]
        self.numbers = {label: i + 1 for i, label in enumerate(dict.fromkeys(labels))}
        self.glued = glued_values(nb)

    def __call__(self, text: str) -> str:
        text = _LABELLED.sub(lambda m: f"$${m.group(2).rstrip()} \\tag{{{self.numbers[m.group('label')]}}}\n$$", text)
        text = _ROLE.sub(self._role, text)
        text = _GLUE.sub(self._glue, text)
        return _LINK.sub(self._link, text)

    def _glue(self, match) -> str:
        key, spec = match.group("key"), match.group("spec")
        if key not in self.glued:
            raise ValueError(f"the notebook quotes {{glue:text}}`{key}`, but no cell glued a value named {key!r}")
        text = self.glued[key].strip("'\"")
        if spec:
            try:
                return format(float(text), spec)  # myst-nb formats a number's text/plain with the spec
            except ValueError:
                pass
        return text

    def _role(self, match) -> str:
        role, target = match.groups()
        if role == "eq":
            return f"({self.numbers[target]})" if target in self.numbers else f"({target})"
        cited = [self.citations.get(key.strip(), (key.strip(), "")) for key in target.split(",")]
        if role == "cite:t":
            return "; ".join(f"{who} ({year})" if year else who for who, year in cited)
        return "(" + "; ".join(f"{who}, {year}" if year else who for who, year in cited) + ")"

    def _link(self, match) -> str:
        path = match.group("path")
        page = f"{self.folder}/{path}" if "/" not in path else str(Path(self.folder, path)).replace("\\", "/")
        parts = []
        for part in page.split("/"):
            if part == ".." and parts:
                parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        return f"]({self.book_root}/{'/'.join(parts)}.html{match.group('anchor') or ''})"


def read_citations(bib: str | Path) -> dict[str, tuple[str, str]]:
    """``{key: (authors, year)}`` from a BibTeX file: "Vaswani et al.", "Press and Wolf", "Shazeer"."""
    import latexcodec  # noqa: F401  (registers the "ulatex" codec: Popovi{\'c} -> Popović)
    from pybtex.database import parse_file

    found = {}
    for key, entry in parse_file(str(bib)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [codecs.decode(" ".join(p.last_names), "ulatex").replace("{", "").replace("}", "") for p in people]
        who = last[0] if len(last) == 1 else " and ".join(last) if len(last) == 2 else f"{last[0]} et al." if last \
            else key
        found[key] = (who, entry.fields.get("year", ""))
    return found


# --- rendering and the offline assets ---------------------------------------------------------------------

# nbconvert's reveal template, with everything it would fetch from a CDN (jQuery, RequireJS, Mermaid, MathJax 2,
# reveal.js) replaced by the copies in _static/: MathJax 3 and reveal.js loaded with plain script tags.
_TEMPLATE = r"""
{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true, processEnvironments: true}
};
</script>
<script defer src="_static/mathjax/tex-mml-chtml.js"></script>
{%- endblock html_head_js_mathjax -%}
{%- block html_head_css -%}
<style>
:root { --jp-code-font-size: 14px; }  /* 120 characters of code fit across a slide */
/* reveal's theme upper-cases headings, and with them the maths in a title: d_k would read D_K. */
.reveal .slides h1, .reveal .slides h2, .reveal .slides h3, .reveal .slides h4, .reveal .slides h5,
.reveal .slides h6 { text-transform: none; }  /* more specific than the theme, which loads after this */
.reveal pre { overflow-x: auto; }
/* A slide taller than the screen scrolls instead of being cut off. */
.reveal .slides > section, .reveal .slides > section > section { height: 100%; overflow-y: auto; }
.reveal .jp-RenderedHTMLCommon h1 { font-size: 1.6em; }
.reveal .jp-RenderedHTMLCommon h2 { font-size: 1.3em; }
/* A figure takes most of the slide's 760 px, whatever size it was drawn at, and keeps its proportions. */
.reveal .jp-OutputArea-output img { display: block; margin: 0 auto; max-width: 100%; height: 540px;
                                    object-fit: contain; }
.reveal p.deck-context { font-size: 0.8em; color: #777; margin: 0 0 0.3em 0; }
{{ table_css }}
</style>
{%- endblock html_head_css -%}
{%- block footer_js -%}
<script src="_static/reveal/dist/reveal.js"></script>
<script src="_static/reveal/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({
  controls: true, progress: true, hash: true, center: false, transition: 'none',
  slideNumber: 'c/t', width: {{ reveal_width }}, height: {{ reveal_height }}, plugins: [RevealNotes]
});
</script>
{%- endblock footer_js -%}
"""

# What a deck loads from the two packages, relative to each package's own folder.
_REVEAL_FILES = ["dist/reveal.js", "dist/reveal.css", "dist/reset.css", "dist/theme/white.css",
                 "dist/theme/fonts/source-sans-pro/source-sans-pro.css", "dist/theme/fonts/source-sans-pro/LICENSE",
                 *[f"dist/theme/fonts/source-sans-pro/source-sans-pro-{style}.woff"
                   for style in ("regular", "italic", "semibold", "semibolditalic")],
                 "plugin/notes/notes.js", "LICENSE"]
# MathJax's tex-mml-chtml component and everything it may load at run time (TeX extensions, CHTML fonts,
# the accessibility and menu modules); the other combined components and the SVG output are left out.
_MATHJAX_ENTRIES = ["tex-mml-chtml.js", "input", "output/chtml", "output/chtml.js", "a11y", "ui", "sre", "adaptors"]


def reveal_dir() -> Path:
    """reveal.js's distribution as the ``sphinx-revealjs`` package ships it."""
    import sphinx_revealjs

    return Path(sphinx_revealjs.__file__).parent / "_static" / "revealjs"


def mathjax_dir() -> Path:
    """MathJax 3's ``es5`` build as the ``django-static-mathjax`` package ships it."""
    import mathjax

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def copy_mathjax(target: str | Path) -> Path:
    """Copy MathJax (``tex-mml-chtml.js`` and what it loads) into the folder ``target``; returns it."""
    target, source = Path(target), mathjax_dir()
    for entry in _MATHJAX_ENTRIES:
        _copy(source / entry, target / entry)
    return target


def copy_assets(out: str | Path) -> Path:
    """Copy reveal.js and MathJax into ``out/_static`` (``reveal/`` and ``mathjax/``); returns that folder."""
    static = Path(out) / "_static"
    for name in _REVEAL_FILES:
        _copy(reveal_dir() / name, static / "reveal" / name)
    copy_mathjax(static / "mathjax")
    return static


@dataclass
class Deck:
    lesson: Path
    path: Path
    slides: int  # sections and figures plus the title slide


def _exporter():
    from jinja2 import DictLoader
    from nbconvert import SlidesExporter

    return SlidesExporter(
        extra_loaders=[DictLoader({"course_slides.html.j2": _TEMPLATE.replace("{{ table_css }}", TABLE_CSS)})],
        template_file="course_slides.html.j2",
        reveal_url_prefix="_static/reveal",
        reveal_theme="white",
        reveal_transition="none",
        reveal_width="1100",
        reveal_height="760",
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )


def build_decks(lessons: list[str | Path], out: str | Path, *, book_root: str = "../html",
                bib: str | Path | None = None) -> list[Deck]:
    """Write one deck per lesson notebook into ``out`` (``NN_topic.slides.html``) and the assets into
    ``out/_static``. ``book_root``: the book's HTML folder relative to ``out`` (``_build/html`` next to
    ``_build/slides``); ``bib``: the bibliography for ``{cite}`` roles (default: references.bib beside lessons/)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    copy_assets(out)
    paths = [Path(p) for p in lessons]
    if bib is None and paths:
        bib = paths[0].resolve().parent.parent / "references.bib"
    citations = read_citations(bib) if bib is not None and Path(bib).exists() else {}
    exporter, decks = _exporter(), []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        deck = deck_notebook(nb, book_page=f"{book_root}/lessons/{path.stem}.html", citations=citations)
        body, _ = exporter.from_notebook_node(deck, resources={"metadata": {"name": _title(nb, path)}})
        target = out / f"{path.stem}{DECK_SUFFIX}"
        target.write_text(body, encoding="utf-8")
        decks.append(Deck(path, target, sum(c.metadata.slideshow.slide_type == "slide" for c in deck.cells)))
    return decks


def _title(nb, path: Path) -> str:
    first = nb.cells[0].source.strip().splitlines()[0] if nb.cells else ""
    return re.sub(r"^#\s+", "", first) or path.stem
