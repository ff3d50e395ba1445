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

Both tests share one build (the session fixture ``built_book``) and live in one file, so that pytest-xdist
(``--dist loadfile``) runs them on one worker.
"""

import functools
import http.server
import os
import re
import shutil
import threading
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
    """The book's pages in reading order: the root, then every chapter of every part."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]


@pytest.fixture(scope="module")
def server(built_book):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    # The build folder: the book in html/, the decks in slides/, as `make book` lays them out.
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Quiet, directory=str(built_book.parent)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def built_decks(built_book):
    """The lessons' slide decks, built as `make slides` builds them, next to the book: ``_build/slides``."""
    from transformer_course.slides import build_decks

    return build_decks(sorted((ROOT / "lessons").glob("*.ipynb")), built_book.parent / "slides")


def expected_deck(lesson: Path) -> tuple[int, int]:
    """(slides, figures) that the deck of ``lesson`` must have, counted from the notebook by the rules of the
    instructor guide: a title slide, one per ``##`` section, one per image of a shown code cell, one per code
    cell tagged ``slide-code`` or ``slide-output`` that has no image."""
    sections = figures = plain = 0
    for cell in nbformat.read(lesson, as_version=4).cells:
        tags = set(cell.metadata.get("tags", []))
        if tags & {"slide-skip", "remove-cell"}:
            continue
        if cell.cell_type == "markdown":
            sections += cell.source.lstrip().startswith("## ")
            continue
        images = 0 if "remove-output" in tags else sum(
            "image/png" in output.get("data", {}) for output in cell.get("outputs", []))
        figures += images
        plain += images == 0 and bool(tags & {"slide-code", "slide-output"})
    return 1 + sections + figures + plain, figures


def test_every_page_in_a_real_browser(built_book, built_decks, server):
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    pages = toc_pages()
    shots = built_book.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    problems, external, failed = [], set(), []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        messages = []
        page.on("console", lambda m: messages.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: messages.append(f"page error: {e}"))
        # A request the browser cancels because the test moved on (net::ERR_ABORTED: a MathJax font still loading
        # when the next page opens) is not a missing file: that shows as a response >= 400 below.
        page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})")
                if r.url.startswith(server) and r.failure != "net::ERR_ABORTED" else None)
        page.on("response", lambda r: failed.append(f"{r.url} ({r.status})") if r.status >= 400 else None)

        def route(request_route):
            url = request_route.request.url
            if url.startswith(server):
                return request_route.continue_()
            external.add(url)  # no network: every other host is blocked
            return request_route.abort()

        page.route("**/*", route)
        for i, name in enumerate(pages):
            messages.clear()
            page.goto(f"{server}html/{name}.html", wait_until="load")
            if page.evaluate("document.querySelector('.math') !== null"):
                page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
                page.evaluate("MathJax.startup.promise")
            page.wait_for_load_state("networkidle")
            text = page.inner_text("main")
            heading = page.inner_text("main h1").replace("#", "").strip()
            found = {
                "console errors": list(messages),
                "raw TeX left": [m for m in ("$$", "\\(", "\\[") if m in text],
                "MathJax errors": page.eval_on_selector_all("mjx-merror", "e => e.length"),
                "images not loaded": page.eval_on_selector_all(
                    "main img", "imgs => imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"),
                "raw widget output": "application/vnd.jupyter.widget-view+json" in text,
                "title": None if page.title().startswith(heading) else f"{page.title()!r} for heading {heading!r}",
                "previous link": _link_problem(page, "a.left-prev", pages[i - 1] if i else None, name),
                "next link": _link_problem(page, "a.right-next", pages[i + 1] if i + 1 < len(pages) else None, name),
                "deck link": _deck_link_problem(page, name, server),
                "MathJax not from the build": page.evaluate(
                    f"[...document.scripts].map(s => s.src).filter(s => /mathjax/i.test(s)"
                    f" && !s.startsWith('{server}html/_static/mathjax/'))"),
            }
            problems += [f"{name}: {what}: {detail}" for what, detail in found.items() if detail]
            page.screenshot(path=str(shots / f"{name.replace('/', '__')}.png"))
        for deck in built_decks:
            messages.clear()
            problems += [f"slides/{deck.path.name}: {what}" for what in _deck_problems(page, deck, server, messages)]
        browser.close()
    assert not problems, "\n".join(problems)
    assert not external, f"pages requested external resources: {sorted(external)}"
    assert not failed, f"failed requests: {failed}"
    assert len(list(shots.glob("*.png"))) == len(pages)


def _deck_problems(page, deck, server: str, messages: list) -> list[str]:
    slides, figures = expected_deck(deck.lesson)
    page.goto(f"{server}slides/{deck.path.name}", wait_until="load")
    page.wait_for_function("window.Reveal && Reveal.isReady() && window.MathJax && MathJax.startup"
                           " && MathJax.startup.promise")
    page.evaluate("MathJax.startup.promise")
    # Fonts MathJax asks for while it typesets are still loading here: leaving the deck before they arrive aborts
    # them (net::ERR_ABORTED), a failure of the test's haste, not of the deck.
    page.wait_for_load_state("networkidle")
    markdown = page.eval_on_selector_all(".reveal .jp-RenderedMarkdown", "els => els.map(e => e.textContent).join(' ')")
    found = {
        "console errors": list(messages),
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
