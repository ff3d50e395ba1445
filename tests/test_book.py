"""The book: it builds with Sphinx's warnings as errors, its pages hold their outputs and math, and every
page works in a real headless Chromium (Debian's ``chromium``); so does every lesson's slide deck.

In the browser, with every request to a host other than the local server blocked (the book and the decks
carry their MathJax, reveal.js and fonts; nothing may come from a CDN), for each page: no failed request, no
console errors or page errors, MathJax typeset every equation (no raw ``$$`` or ``\\(`` left, no MathJax
error), every image loaded with a non-zero size, the title is the page's heading, the previous/next links
follow the table of contents, and a lesson page links to its deck. A screenshot of each page is saved under
the build folder (``screenshots/``) for people to look at. For each deck (``make slides``, built here next to
the book as ``_build/slides``): the same checks, as many slides as the notebook has sections and figures on
shown cells (counted here from the notebook, not by the generator), and the right arrow key moves on.

The browser keeps its cache from page to page, and waits on each page for what the checks need (the load
event, MathJax's typesetting, the fonts, every request to the server answered), not for a quiet network; a
page that does everything wrong shows that the checks catch it. The tests share one build (the session
fixture ``built_book``) and live in one file, so that pytest-xdist (``--dist loadfile``) runs them on one worker.
"""

import contextlib
import functools
import http.server
import os
import re
import shutil
import threading
import time
from pathlib import Path

import nbformat
import pytest
import yaml

from transformer_course.launch import repository

pytestmark = pytest.mark.slow  # builds the book, drives a browser

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
    # Noise stays out of the book: progress bars ("train:  83%|#### | 500/600") and stderr (warnings).
    for page in toc_pages():
        text = (html / f"{page}.html").read_text()
        assert not re.search(r"\d+%\|[^|<]*\| *\d+/\d+", text), f"{page}: a progress bar is rendered"
        assert "output stderr" not in text, f"{page}: stderr output is rendered"
    # Exercises are rendered blank: no outputs were stored, none were produced.
    for exercise in sorted((ROOT / "exercises").glob("*.ipynb")):
        assert 'class="cell_output' not in (html / "exercises" / f"{exercise.stem}.html").read_text()
    assert "Vaswani" in (html / "book" / "bibliography.html").read_text()
    assert (html / "_static" / "logo.png").stat().st_size > 1000


def test_notebook_pages_launch_only_from_the_configured_repository(built_book):
    """With the repository set, every notebook page has Colab, Binder, GitHub and issue links to it; while it is
    not set, no page links anywhere to launch or install from (the install cell installs nothing either)."""
    repo = repository(ROOT / "_config.yml")
    notebooks = [page for page in toc_pages() if (ROOT / f"{page}.ipynb").exists()]
    assert len(notebooks) == 3 * len(list((ROOT / "lessons").glob("*.ipynb"))), notebooks
    for page in notebooks:
        hrefs = set(re.findall(r'href="(https://[^"]+)"', (built_book / f"{page}.html").read_text()))
        if repo is None:
            # Launch links, and the repository buttons' links (to jupyter-book's own repository by default).
            launches = {h for h in hrefs if h.startswith(("https://colab.research.google.com/", "https://mybinder.org/",
                                                          "https://github.com/executablebooks/jupyter-book",
                                                          "https://github.com/transformer-course/"))}
            assert not launches, f"{page}: links a repository nobody configured: {sorted(launches)}"
            continue
        owner_repo = repo.url.removeprefix("https://github.com/")
        expected = {
            f"https://colab.research.google.com/github/{owner_repo}/blob/{repo.branch}/{page}.ipynb",
            f"https://mybinder.org/v2/gh/{owner_repo}/{repo.branch}?urlpath=lab/tree/{page}.ipynb",
            repo.url,
        }
        assert expected <= hrefs, f"{page}: missing {sorted(expected - hrefs)}"
        assert any(h.startswith(f"{repo.url}/issues/new?") for h in hrefs), f"{page}: no issue link"


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def chromium_or_skip():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium: .ci/run installs Debian's chromium")
        pytest.skip("no Chromium here: `apt-get install chromium` (Debian) to run the browser test")


def toc_pages():
    """The book's pages in reading order: the root, then every chapter of every part, each followed by its sections."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [page for part in toc["parts"] for chapter in part["chapters"]
                            for page in [chapter["file"], *(s["file"] for s in chapter.get("sections", []))]]


def readers_path() -> list[str]:
    """The pages of the notebooks in the order a learner takes them: lesson N, exercises N, solutions N, lesson N+1."""
    return [f"{folder}/{lesson.stem}" for lesson in sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
            for folder in ("lessons", "exercises", "solutions")]


# What a reader must never see in a page's prose: a Markdown table row that did not become a table (a blank line in
# the table breaks it), and a backslash-escape or TeX command printed as text ("\_", "\texttt{pad\_id}").
RAW_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.MULTILINE)
LITERAL_ESCAPE = re.compile(r"\\[A-Za-z_{}#*`|]")


# MathJax typesets the argument of \text{...} and its kin as plain text (the book loads no textmacros), so a backslash
# in it shows: \texttt{pad\_id} reads "pad\_id" on the page, where \mathtt{pad\_id} reads "pad_id".
TEXT_MODE = re.compile(r"\\(?:text|texttt|textrm|textit|textbf|textsf|mbox)\s*\{")


def text_mode_backslashes(tex: str) -> list[str]:
    """The ``\\text{...}``-like groups of ``tex`` with a backslash inside, which MathJax would print."""
    found = []
    for match in TEXT_MODE.finditer(tex):
        depth, end = 1, match.end()
        while end < len(tex) and depth:
            depth += {"{": 1, "}": -1}.get(tex[end], 0)
            end += 1
        if "\\" in tex[match.end():end - 1]:
            found.append(tex[match.start():end])
    return found


def _tree(html):
    """A parsed page (lxml: bs4 and its CSS selectors took 20 s of CPU for the book's pages)."""
    import lxml.html

    return lxml.html.fromstring(html) if isinstance(html, str) else html


def _with_class(name: str) -> str:
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


def prose_text(html) -> str:
    """The text of a page's article that is prose: code, cell outputs and typeset math left out (``html``: text, or
    a parsed page, which this changes)."""
    article = next(iter(_tree(html).xpath("//article")), None)
    if article is None:
        return ""
    left_out = [".//pre", ".//code", ".//script", ".//style",
                *(f".//*[{_with_class(c)}]" for c in ("math", "cell_output", "highlight"))]
    for element in article.xpath(" | ".join(left_out)):
        element.drop_tree()  # the text after it stays
    return "\n".join(article.itertext())


def prose_problems(html) -> list[str]:
    """Raw table rows and literal backslash-escapes in a page's prose, and text-mode backslashes in its math
    (``html``: text, or a parsed page, which this changes)."""
    tree = _tree(html)
    maths = [m.text_content() for m in tree.xpath(f"//article//*[{_with_class('math')}]")]
    text = prose_text(tree)
    rows = [f"raw table row {m.group().strip()[:60]!r}" for m in RAW_TABLE_ROW.finditer(text)]
    escapes = [f"literal {m.group()!r} in {text[max(m.start() - 25, 0):m.end() + 25]!r}"
               for m in LITERAL_ESCAPE.finditer(text)]
    typeset = [f"literal backslash in math {group!r}" for tex in maths for group in text_mode_backslashes(tex)]
    return rows + escapes + typeset


def test_the_prose_checks_catch_raw_table_rows_and_literal_escapes():
    """A page with the two defects in its text is caught; the same characters in code, outputs and math are not."""
    page = ("<article><p>The rows:</p><p>| class forgery | caught |<br>| --cases-seed | kept |</p>"
            "<p>pad id: \\texttt{pad\\_id}, and snake\\_case.</p>"
            "<pre>| a | b |</pre><p><code>\\_x</code> <span class='math'>\\(\\mathtt{pad\\_id}\\)</span></p>"
            "<div class='cell_output'><p>| 1 | 2 |</p></div>"
            "<div class='math'>\\[ \\texttt{pad\\_id} + \\mathtt{pad\\_id} + \\text{a {b \\_} c} \\]</div></article>")
    found = prose_problems(page)
    assert [f for f in found if f.startswith("raw table row")] == [
        "raw table row '| class forgery | caught |'", "raw table row '| --cases-seed | kept |'"]
    assert [f.split(" in ")[0] for f in found if f.startswith("literal '")] == [
        "literal '\\\\t'", "literal '\\\\_'", "literal '\\\\_'"]
    assert [f for f in found if "in math" in f] == [
        "literal backslash in math '\\\\texttt{pad\\\\_id}'", "literal backslash in math '\\\\text{a {b \\\\_} c}'"]
    assert prose_problems(page.replace("|", "").replace("\\", "")) == []
    cites = ('<article><p>As <a href="book/bibliography.html#vaswani2017">[Vaswani et al., 2017]</a> and '
             '<a href="../book/bibliography.html#wu2016">Wu2016</a> show.</p></article>')
    assert citation_problems(cites, {"vaswani2017": "VSP+17", "wu2016": "Wu2016"}) == [
        "cites '[Vaswani et al., 2017]', which the bibliography labels 'VSP+17'"]


def citation_problems(html: str, labels: dict[str, str]) -> list[str]:
    """Citations whose text is not the label under which the bibliography (``labels``: entry id -> label) lists
    the work: the text and the bibliography must name a work the same way."""
    problems = []
    for link in _tree(html).xpath('//article//a[contains(@href, "bibliography.html#")]'):
        target, text = link.get("href").split("#")[1], link.text_content()
        if text != labels.get(target):
            problems.append(f"cites {text!r}, which the bibliography labels {labels.get(target)!r}")
    return problems


def bibliography_labels(html: str) -> dict[str, str]:
    from bs4 import BeautifulSoup

    entries = BeautifulSoup(html, "html.parser").select("div.citation")
    return {e["id"]: e.select_one("span.label").get_text().strip("[]") for e in entries}


BOOK_COLUMN_PX = 784  # the width of the book's text column at a 1400 px window: a wider figure is shown shrunk


def test_the_architecture_map_is_readable_at_the_books_width():
    """Every label of the course map is at least 12 px high where the book shows it, and no two labels overlap."""
    import io
    import itertools

    from PIL import Image

    from transformer_course import viz

    fig = viz.architecture_map()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100, bbox_inches="tight")  # what the notebook's inline backend stores
    shown = min(1.0, BOOK_COLUMN_PX / Image.open(png).size[0])
    texts = [t for ax in fig.axes for t in [*ax.texts, ax.title] if t.get_text()]
    small = [(t.get_text(), round(t.get_fontsize() * 100 / 72 * shown, 1)) for t in texts
             if t.get_fontsize() * 100 / 72 * shown < 12]
    assert not small, f"labels under 12 px in the book: {small}"
    renderer = fig.canvas.get_renderer()
    extents = [(t.get_text(), (t.get_bbox_patch() or t).get_window_extent(renderer)) for t in texts]
    overlapping = [(a, b) for (a, ea), (b, eb) in itertools.combinations(extents, 2) if ea.overlaps(eb)]
    assert not overlapping, overlapping


def _link(html: str, css_class: str) -> str | None:
    found = re.findall(rf'<a class="{css_class}"\s+href="([^"#]+)', html)
    return found[0] if found else None


def test_pages_say_what_they_are_and_follow_the_readers_path(built_book):
    """Solution pages are titled "Solutions N", exercise pages "Exercises N"; the previous/next links of every page
    follow the table of contents, which takes each lesson's notebooks in the reader's order; no page's prose shows a
    raw table row or a literal backslash-escape; every citation reads as the work's label in the bibliography."""
    pages = toc_pages()
    labels = bibliography_labels((built_book / "book" / "bibliography.html").read_text())
    assert "VSP+17" in labels.values(), labels
    path = readers_path()
    assert pages[pages.index(path[0]):pages.index(path[0]) + len(path)] == path, "the toc is not in the reader's order"
    problems = []
    for i, name in enumerate(pages):
        html = (built_book / f"{name}.html").read_text()
        folder = (built_book / name).parent
        for css_class, expected in (("left-prev", pages[i - 1] if i else None),
                                    ("right-next", pages[i + 1] if i + 1 < len(pages) else None)):
            href = _link(html, css_class)
            got = None if href is None else (folder / href).resolve().relative_to(built_book.resolve()).as_posix()
            if got != (None if expected is None else f"{expected}.html"):
                problems.append(f"{name}: {css_class} goes to {got}, expected {expected}")
        heading = re.search(r"<h1>(.*?)(<a|</h1>)", html, re.S)[1].strip()
        kind = name.split("/")[0]
        if kind in ("exercises", "solutions"):
            want = f"{kind.capitalize()} {int(Path(name).name[:2])}: "
            if not heading.startswith(want):
                problems.append(f"{name}: heading {heading!r}, expected it to start with {want!r}")
            title = re.search(r"<title>(.*?)</title>", html, re.S)[1]
            if not title.startswith(want):
                problems.append(f"{name}: title {title!r}, expected it to start with {want!r}")
        tree = _tree(html)
        cited = citation_problems(tree, labels)  # before prose_problems takes the code and maths out of it
        problems += [f"{name}: {problem}" for problem in prose_problems(tree) + cited]
    assert not problems, "\n".join(problems)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send_head(self):
        # Browsers ask every site for /favicon.ico (the book declares none); a 404 would show as a console error.
        if self.path == "/favicon.ico":
            self.send_response(204)
            self.end_headers()
            return None
        return super().send_head()


@contextlib.contextmanager
def serve(folder: Path):
    """Serve ``folder`` over HTTP on a free local port; yields the root URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/"
    finally:
        httpd.shutdown()


@pytest.fixture(scope="module")
def server(built_book):
    # The build folder: the book in html/, the decks in slides/, as `make book` lays them out.
    with serve(built_book.parent) as url:
        yield url


@pytest.fixture(scope="module")
def built_decks(built_book):
    """The lessons' slide decks, built as `make slides` builds them, next to the book: ``_build/slides``."""
    from transformer_course.slides import build_decks

    return build_decks(sorted((ROOT / "lessons").glob("*.ipynb")), built_book.parent / "slides")


def expected_deck(lesson: Path) -> tuple[int, int]:
    """(slides, figures) that the deck of ``lesson`` must have, counted from the notebook by the rules of the
    instructor guide: a title slide, one per ``##`` section, one per image of a shown code cell, one per code
    cell tagged ``slide-code`` or ``slide-output`` that has no image, or that a section's slide introduces (its
    shown text ends with ":")."""
    from transformer_course.slides import section_lead

    sections = figures = plain = 0
    introduces = False
    for cell in nbformat.read(lesson, as_version=4).cells:
        tags = set(cell.metadata.get("tags", []))
        if tags & {"slide-skip", "remove-cell"}:
            continue
        if cell.cell_type == "markdown":
            if cell.source.lstrip().startswith("## "):
                sections += 1
                introduces = section_lead(cell.source)[0].rstrip().endswith(":")
            continue
        images = 0 if "remove-output" in tags else sum(
            "image/png" in output.get("data", {}) for output in cell.get("outputs", []))
        figures += images
        plain += images == 0 and (introduces or bool(tags & {"slide-code", "slide-output"}))
        introduces = False
    return 1 + sections + figures + plain, figures


class Tab:
    """One browser tab that records what goes wrong while it shows a page: console and page errors, requests that
    failed or got an error status, and requests to any host but the local server (the browser resolves no other
    host, see ``BLOCK_OTHER_HOSTS``). :meth:`visit` opens a page; :meth:`settle` waits until everything the page
    asked the server for has arrived."""

    def __init__(self, page, server: str):
        self.page, self.server = page, server
        self.messages, self.failed, self.external, self.pending = [], [], set(), set()
        page.on("console", lambda m: self.messages.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.messages.append(f"page error: {e}"))
        page.on("request", self._request)
        page.on("requestfinished", lambda r: self.pending.discard(r))
        page.on("requestfailed", self._request_failed)
        page.on("response", lambda r: self.failed.append(f"{r.url} ({r.status})") if r.status >= 400 else None)

    def _request(self, request):
        if request.url.startswith(self.server):
            self.pending.add(request)
        else:
            self.external.add(request.url)  # data: URLs make no request event; anything else is another host

    def _request_failed(self, request):
        self.pending.discard(request)
        # Every failure counts, net::ERR_ABORTED too: no visit leaves a page with requests in flight (settle), so
        # moving on to the next page cancels none.
        if request.url.startswith(self.server):
            self.failed.append(f"{request.url} ({request.failure})")

    def visit(self, url: str) -> None:
        self.messages.clear()
        self.pending.clear()
        self.page.goto(url, wait_until="load")  # the load event: every image and script of the HTML is in

    def settle(self, timeout_s: float = 30) -> None:
        """Wait for the fonts the laid-out page uses (MathJax's, once it has typeset) and for every request to
        the server the page has made so far (a font, a MathJax component loaded on demand) to finish."""
        self.page.evaluate("document.body.offsetHeight; document.fonts.ready.then(() => null)")
        deadline = time.monotonic() + timeout_s
        while self.pending:
            assert time.monotonic() < deadline, f"requests still in flight after {timeout_s} s: " + \
                str(sorted(r.url for r in self.pending))
            self.page.wait_for_timeout(10)


# Every host name and address resolves to nothing, except the local server's: the book and the decks must carry
# their MathJax, reveal.js and fonts. (Blocking with page.route would also turn off the browser's cache, and every
# page would download and compile MathJax and the theme's scripts again: 4 MB a page.)
BLOCK_OTHER_HOSTS = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"


def test_the_browser_checks_catch_a_broken_page(tmp_path):
    """The machinery of the browser test on a page that does everything wrong: it asks two other hosts (by name
    and by address), a missing image, a missing file by fetch(), and logs an error."""
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    (tmp_path / "broken.html").write_text(
        '<html><body><img src="https://cdn.example.org/a.png"><img src="http://93.184.216.34/b.png">'
        '<img src="missing.png"><script>console.error("boom"); fetch("late.json")</script>'
        "</body></html>")
    with serve(tmp_path) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, BLOCK_OTHER_HOSTS])
        tab = Tab(browser.new_page(), url)
        tab.visit(f"{url}broken.html")
        tab.settle()  # late.json may still be in flight after the load event: fetch() does not delay it
        browser.close()
    assert tab.external == {"https://cdn.example.org/a.png", "http://93.184.216.34/b.png"}
    assert sorted(tab.failed) == [f"{url}late.json (404)", f"{url}missing.png (404)"]
    assert "boom" in tab.messages
    assert not tab.pending


# The lessons' tables (show.table's HTML form) that are wider than the page's text column: they would scroll.
TABLES_TOO_WIDE = ("[...document.querySelectorAll('main table.course-table')]"
                   ".filter(t => t.offsetWidth > t.closest('article').clientWidth).map(t => t.offsetWidth)")


def test_the_table_check_catches_a_table_wider_than_the_page(tmp_path):
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    from transformer_course.show import TABLE_CSS, Table

    wide = Table([f"column {i}" for i in range(30)], [10**9 + i for i in range(30)])._repr_html_()
    narrow = Table(["a", "b"], [1, 2])._repr_html_()
    (tmp_path / "page.html").write_text(f"<html><head><style>{TABLE_CSS}</style></head><body><main><article "
                                        f'style="width: 600px">{narrow}{wide}</article></main></body></html>')
    with serve(tmp_path) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, BLOCK_OTHER_HOSTS])
        page = browser.new_page()
        page.goto(f"{url}page.html")
        too_wide = page.evaluate(TABLES_TOO_WIDE)
        browser.close()
    assert len(too_wide) == 1 and too_wide[0] > 600


def test_the_deck_checks_catch_upper_cased_headings_and_small_figures(tmp_path):
    """A deck whose styles upper-case a heading (and the maths in it) and shrink its figure: the deck checks of
    the browser test name both, and nothing else."""
    chromium_or_skip()
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
    from playwright.sync_api import sync_playwright

    from transformer_course.slides import build_decks

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
    figure = new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})
    lesson = tmp_path / "lessons" / "09_x.ipynb"
    lesson.parent.mkdir()
    nbformat.write(new_notebook(cells=[
        new_markdown_cell("# 9. A lesson"), new_markdown_cell("## 9.1 Why divide by $\\sqrt{d_k}$\n\nBecause."),
        new_code_cell("plot()", outputs=[figure])]), lesson)
    (deck,) = build_decks([lesson], tmp_path / "slides", bib=tmp_path / "none.bib")
    deck.path.write_text(deck.path.read_text().replace("</head>", "<style>.reveal .slides h2 { text-transform: "
                                                       "uppercase !important; } .reveal .jp-OutputArea img { height: "
                                                       "100px !important; }</style></head>"))
    with serve(tmp_path) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, BLOCK_OTHER_HOSTS])
        problems = _deck_problems(Tab(browser.new_page(viewport={"width": 1280, "height": 900}), url), deck)
        browser.close()
    assert problems == ["upper-cased headings: ['9.1 Why divide by dk¶']",
                        "figures under half the slide's height: [100]"], problems


def test_every_page_in_a_real_browser(built_book, built_decks, server):
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    pages = toc_pages()
    shots = built_book.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, BLOCK_OTHER_HOSTS])
        tab = Tab(browser.new_page(viewport={"width": 1280, "height": 900}), server)
        page = tab.page
        for i, name in enumerate(pages):
            tab.visit(f"{server}html/{name}.html")
            if page.evaluate("document.querySelector('.math') !== null"):
                page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
                page.evaluate("MathJax.startup.promise")  # resolves once MathJax has typeset the page
            tab.settle()
            text = page.inner_text("main")
            heading = page.inner_text("main h1").replace("#", "").strip()
            found = {
                "console errors": list(tab.messages),
                "raw TeX left": [m for m in ("$$", "\\(", "\\[") if m in text],
                "MathJax errors": page.eval_on_selector_all("mjx-merror", "e => e.length"),
                "images not loaded": page.eval_on_selector_all(
                    "main img", "imgs => imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"),
                "raw widget output": "application/vnd.jupyter.widget-view+json" in text,
                "title": None if page.title().startswith(heading) else f"{page.title()!r} for heading {heading!r}",
                "previous link": _link_problem(page, "a.left-prev", pages[i - 1] if i else None, name),
                "next link": _link_problem(page, "a.right-next", pages[i + 1] if i + 1 < len(pages) else None, name),
                "deck link": _deck_link_problem(page, name, server),
                "tables wider than the page": page.evaluate(TABLES_TOO_WIDE),
                "MathJax not from the build": page.evaluate(
                    f"[...document.scripts].map(s => s.src).filter(s => /mathjax/i.test(s)"
                    f" && !s.startsWith('{server}html/_static/mathjax/'))"),
            }
            problems += [f"{name}: {what}: {detail}" for what, detail in found.items() if detail]
            page.screenshot(path=str(shots / f"{name.replace('/', '__')}.png"))
            tab.settle()  # whatever the checks or the screenshot set off arrives before the next page
        for deck in built_decks:
            problems += [f"slides/{deck.path.name}: {what}" for what in _deck_problems(tab, deck)]
        browser.close()
    assert not problems, "\n".join(problems)
    assert not tab.external, f"pages requested external resources: {sorted(tab.external)}"
    assert not tab.failed, f"failed requests: {tab.failed}"
    assert len(list(shots.glob("*.png"))) == len(pages)


def _deck_problems(tab: Tab, deck) -> list[str]:
    page, server = tab.page, tab.server
    slides, figures = expected_deck(deck.lesson)
    tab.visit(f"{server}slides/{deck.path.name}")
    page.wait_for_function("window.Reveal && Reveal.isReady() && window.MathJax && MathJax.startup"
                           " && MathJax.startup.promise")
    page.evaluate("MathJax.startup.promise")
    tab.settle()  # the fonts MathJax asked for while it typeset
    markdown = page.eval_on_selector_all(".reveal .jp-RenderedMarkdown", "els => els.map(e => e.textContent).join(' ')")
    found = {
        "console errors": list(tab.messages),
        "slides": None if page.evaluate("Reveal.getTotalSlides()") == slides else
        f"{page.evaluate('Reveal.getTotalSlides()')}, expected {slides} (title, sections, figures, tagged cells)",
        "figures": None if page.eval_on_selector_all(".reveal .jp-OutputArea img", "e => e.length") == figures else
        f"expected {figures}",
        "images not loaded": page.eval_on_selector_all(
            ".reveal img", "imgs => imgs.filter(i => !i.complete || i.naturalWidth === 0).length"),
        "no typeset math": page.eval_on_selector_all("mjx-container", "e => e.length") == 0,
        "raw TeX left": [m for m in ("$$", "\\(", "\\[") if m in markdown],
        "MathJax errors": page.eval_on_selector_all("mjx-merror", "e => e.length"),
        "link to the book": None if page.eval_on_selector_all(
            f'a[href="../html/lessons/{deck.lesson.stem}.html"]', "e => e.length") else "missing",
    }
    # Every slide laid out (reveal.js shows only those near the current one), to measure the figures.
    page.evaluate("Reveal.configure({viewDistance: 1000})")
    found["upper-cased headings"] = page.eval_on_selector_all(
        ".reveal .slides h1, .reveal .slides h2, .reveal .slides h3",
        "hs => hs.filter(h => getComputedStyle(h).textTransform !== 'none').map(h => h.textContent.slice(0, 40))")
    found["figures under half the slide's height"] = page.eval_on_selector_all(
        ".reveal .jp-OutputArea img",
        "imgs => imgs.filter(i => i.offsetHeight < Reveal.getConfig().height / 2).map(i => i.offsetHeight)")
    page.keyboard.press("ArrowRight")
    found["arrow key"] = None if page.evaluate("Reveal.getIndices().h") == 1 else "did not move to slide 2"
    return [f"{what}: {detail}" for what, detail in found.items() if detail]


def _deck_link_problem(page, name: str, server: str) -> str | None:
    links = page.eval_on_selector_all("a.course-slides-link", "links => links.map(a => a.href)")
    if name.startswith("lessons/"):
        expected = [f"{server}slides/{name.removeprefix('lessons/')}.slides.html"]
    elif name == "book/instructor_guide":
        lessons = sorted((ROOT / "lessons").glob("*.ipynb"))
        expected = [f"{server}slides/{lesson.stem}.slides.html" for lesson in lessons]
    else:
        expected = []
    return None if links == expected else f"links {links}, expected {expected}"


def _link_problem(page, selector: str, expected: str | None, current: str) -> str | None:
    links = page.eval_on_selector_all(selector, "links => links.map(a => a.href)")
    if expected is None:
        return f"unexpected {links}" if links else None
    if len(links) != 1 or not links[0].split("#")[0].endswith(f"/{expected}.html"):
        return f"expected a link to {expected}.html, got {links} (on {current})"
    return None
