"""The book: it builds with Sphinx's warnings as errors, its pages hold their outputs and math, and every
page works in a real headless Chromium (Debian's ``chromium``).

In the browser, for each page: no console errors or page errors, MathJax typeset every equation (no raw
``$$`` or ``\\(`` left, no MathJax error), every image loaded with a non-zero size, the title is the page's
heading, and the previous/next links follow the table of contents. A screenshot of each page is saved
under the build folder (``screenshots/``) for people to look at.

The machine has no internet, so the one CDN script the book uses, MathJax, is served from a local copy
of the same npm release (fetched with npm into ``.cache/``), by intercepting its URL.

Both tests share one build (the session fixture ``built_book``) and live in one file, so that pytest-xdist
(``--dist loadfile``) runs them on one worker.
"""

import functools
import http.server
import os
import re
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path

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
MATHJAX = "mathjax@3.2.2"  # the release Sphinx 7's default MathJax URL (mathjax@3) resolves to today
MATHJAX_URL = "https://cdn.jsdelivr.net/npm/mathjax@3/"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def chromium_or_skip():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium: .ci/run installs Debian's chromium")
        pytest.skip("no Chromium here: `apt-get install chromium` (Debian) to run the browser test")


@pytest.fixture(scope="module")
def mathjax():
    """A local copy of MathJax's npm package (``package/`` inside the tarball)."""
    cache = ROOT / ".cache" / MATHJAX.replace("@", "-")
    if not (cache / "package" / "es5" / "tex-mml-chtml.js").exists():
        if not shutil.which("npm"):
            pytest.skip("npm is needed once to fetch MathJax for the offline browser test")
        cache.mkdir(parents=True, exist_ok=True)
        name = subprocess.run(["npm", "pack", MATHJAX, "--silent"], cwd=cache, capture_output=True, text=True,
                              timeout=300, check=True).stdout.strip().splitlines()[-1]
        with tarfile.open(cache / name) as archive:
            archive.extractall(cache, filter="data")
    return cache / "package"


def toc_pages():
    """The book's pages in reading order: the root, then every chapter of every part."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]


@pytest.fixture(scope="module")
def server(built_book):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(built_book)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()


def test_every_page_in_a_real_browser(built_book, server, mathjax):
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    pages = toc_pages()
    shots = built_book.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    problems, external = [], set()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        messages = []
        page.on("console", lambda m: messages.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: messages.append(f"page error: {e}"))

        def route(request_route):
            url = request_route.request.url
            if url.startswith(MATHJAX_URL):
                return request_route.fulfill(path=str(mathjax / url[len(MATHJAX_URL):].split("?")[0]))
            if url.startswith(server):
                return request_route.continue_()
            external.add(url)
            return request_route.abort()

        page.route("**/*", route)
        for i, name in enumerate(pages):
            messages.clear()
            page.goto(f"{server}{name}.html", wait_until="load")
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
            }
            problems += [f"{name}: {what}: {detail}" for what, detail in found.items() if detail]
            page.screenshot(path=str(shots / f"{name.replace('/', '__')}.png"))
        browser.close()
    assert not problems, "\n".join(problems)
    assert not external, f"pages requested external resources: {sorted(external)}"
    assert len(list(shots.glob("*.png"))) == len(pages)


def _link_problem(page, selector: str, expected: str | None, current: str) -> str | None:
    links = page.eval_on_selector_all(selector, "links => links.map(a => a.href)")
    if expected is None:
        return f"unexpected {links}" if links else None
    if len(links) != 1 or not links[0].split("#")[0].endswith(f"/{expected}.html"):
        return f"expected a link to {expected}.html, got {links} (on {current})"
    return None
