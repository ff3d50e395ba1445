"""The learner's flow in JupyterLab, in a real browser (headless Chromium, Debian's ``chromium``).

One test, one server, one browser. It starts the server that ``make lab`` starts (the same Makefile target,
so the same course settings in ``lab-settings/``) on a scratch copy of exercises/03 and lessons/03, and does
what a learner does:

- Lab opens with no "get notified about news" pop-up (the course's settings say never);
- lesson 3's mask explorer renders live: moving the n slider redraws the figure, and the valid-length slider
  follows n down;
- in the exercise notebook, the install cell's source is collapsed, a read-only check cell refuses edits, a
  wrong answer gets the named mistake ("Likely mistake: ..."), a right one the pass line;
- Run All goes on past the checks that fail (03.2 and 03.3 are still stubs): every check cell shows its
  verdict and the progress cell at the end lists them, with the total;
- the saved notebook grades as expected with ``transformer-course grade``.

Skipped, with the reason, where Chromium or Playwright is missing; under CI (``CI`` set) it fails instead.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from transformer_course.grading.gradebook import read_csv

pytestmark = pytest.mark.slow  # a Jupyter server, two kernels, a browser and one grading run

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
NAME = "03_masking.ipynb"
WRONG = "def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril(diagonal=-1)\n"
RIGHT = "def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()\n"
WAIT_MS = 60_000  # the longest wait for one thing (a kernel start on a loaded machine); most take < 1 s


def browser_or_skip():
    reason = None
    if not Path(CHROMIUM).exists():
        reason = "no Chromium here: `apt-get install chromium` (Debian) to run the JupyterLab test"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "Playwright is not installed (it is in requirements.txt)"
    if reason and os.environ.get("CI"):
        pytest.fail(f"CI must run the JupyterLab test: {reason}")
    if reason:
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """`make lab` serving a scratch folder (exercises/03, lessons/03) on a free port with a token; yields
    (base URL, token, folder). Jupyter's config, runtime, data and user settings live in tmp_path, so neither
    the user's settings nor earlier runs change what the learner sees."""
    folder = tmp_path / "notebooks"
    for sub in ("exercises", "lessons"):
        (folder / sub).mkdir(parents=True)
        shutil.copy(ROOT / sub / NAME, folder / sub / NAME)
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "PYTHONDONTWRITEBYTECODE": "1"}
    args = f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} --IdentityProvider.token={token}"
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed below
    # -o: never rebuild .venv from here (`make lab` would, were requirements.txt newer than its stamp).
    server = subprocess.Popen(["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed", "lab", f"LAB_DIR={folder}",
                               f"LAB_ARGS={args}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("`make lab` did not start:\n" + (tmp_path / "server.log").read_text()[-3000:])
                time.sleep(0.2)
        yield base, token, folder
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # make and the server; the server shuts its kernels down
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def cell_index(path: Path, cell_id: str) -> int:
    return [c["id"] for c in json.loads(path.read_text())["cells"]].index(cell_id)


def test_the_learners_flow_in_jupyterlab(lab, tmp_path):
    browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    base, token, folder = lab
    exercise, lesson = folder / "exercises" / NAME, folder / "lessons" / NAME
    plugin = "@jupyterlab/apputils-extension:notification"
    with urllib.request.urlopen(f"{base}/lab/api/settings/{plugin}?token={token}") as response:
        notification = json.load(response)
    assert notification["schema"]["properties"]["fetchNews"]["default"] == "false"  # the course's override
    assert notification["settings"] == {}  # nobody's own settings in play

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        def cell(path: Path, cell_id: str):
            return page.locator(f".jp-Notebook .jp-Cell[data-windowed-list-index='{cell_index(path, cell_id)}']")

        def focus(target):
            """Click into the cell's editor and wait until it has the focus (keys typed before would be lost)."""
            target.locator(".cm-content").click()
            expect(target.locator(".cm-editor.cm-focused")).to_have_count(1)

        def run(path: Path, cell_id: str):
            """Click into the cell's editor, run it with Shift+Enter and wait until it has run."""
            target = cell(path, cell_id)
            target.scroll_into_view_if_needed()
            prompt = target.locator(".jp-InputPrompt")
            before = prompt.text_content()
            for attempt in range(3):  # on a loaded machine a key press can reach the editor before its focus does
                focus(target)
                page.keyboard.press("Shift+Enter")
                try:  # the prompt turns to [*] in the page at once, before the kernel answers
                    expect(prompt).not_to_have_text(before, timeout=10_000)
                    break
                except AssertionError:
                    if attempt == 2:
                        raise
            expect(prompt).to_have_text(re.compile(r"\[\d+\]:"))
            return target

        def open_notebook(path: Path):
            page.goto(f"{base}/lab/tree/{path.relative_to(folder).as_posix()}?token={token}&reset")
            page.locator(".jp-Notebook .jp-Cell").first.wait_for()
            expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)

        open_notebook(exercise)
        install = cell(exercise, "install")
        expect(install.locator(".jp-InputPlaceholder")).to_have_count(1)  # collapsed to its first line
        expect(install.locator(".cm-editor")).to_have_count(0)
        run(exercise, "setup")

        # A read-only check cell refuses edits.
        check_1 = cell(exercise, "ex1-check")
        check_1.scroll_into_view_if_needed()
        check_1.locator(".cm-content").click()
        page.keyboard.press("End")
        page.keyboard.type("  # my edit")
        expect(check_1.locator(".cm-content")).to_have_text('check("03.1", causal_mask)')

        # A wrong answer gets the named mistake; a right one the pass line.
        for answer, expected in [(WRONG, "Likely mistake: the diagonal is excluded"),
                                 (RIGHT, "03.1 A causal mask: public checks passed")]:
            answer_1 = cell(exercise, "ex1-answer")
            answer_1.scroll_into_view_if_needed()
            focus(answer_1)
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(answer)
            page.keyboard.press("Shift+Enter")  # runs the answer; the check cell under it is next
            page.keyboard.press("Shift+Enter")  # runs the check
            expect(check_1.locator(".jp-OutputArea")).to_contain_text(expected)

        # Run All goes on past the failing checks: every check shows a verdict, the progress cell lists them.
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        progress = cell(exercise, "progress")
        expect(progress.locator(".jp-OutputArea")).to_contain_text("Total: 1/6 points")
        expect(check_1.locator(".jp-OutputArea")).to_contain_text("public checks passed")
        for check_id, ex in [("ex2-check", "03.2"), ("ex3-check", "03.3")]:
            expect(cell(exercise, check_id).locator(".jp-OutputArea")).to_contain_text(
                f"{ex} {'A padding mask' if ex == '03.2' else 'Masked attention'}")
            expect(cell(exercise, check_id).locator(".jp-OutputArea")).to_contain_text("not implemented yet")
        shown = progress.locator(".jp-OutputArea").text_content()
        for line in ["03.1 A causal mask", "passed", "1/1", "03.2", "failed", "0/2", "03.3", "0/3"]:
            assert line in shown, shown
        page.screenshot(path=str(tmp_path / "run-all.png"), full_page=True)

        # Saved, the notebook goes to the grader (graded while the browser goes on with the explorer).
        page.keyboard.press("Escape")
        page.keyboard.press("Control+s")
        deadline, answer_index = time.monotonic() + 30, cell_index(exercise, "ex1-answer")
        while RIGHT.strip() not in "".join(json.loads(exercise.read_text())["cells"][answer_index]["source"]):
            assert time.monotonic() < deadline, "the notebook was not saved"
            time.sleep(0.2)
        shutdown_kernels(base, token)
        grading = grade(exercise, tmp_path)

        # An explorer renders live: moving n redraws the figure and pulls the valid length down with it.
        open_notebook(lesson)
        widget = run(lesson, "widget")
        expect(widget.locator(".widget-slider .noUi-handle")).to_have_count(2)
        expect(widget.locator(".widget-readout")).to_have_text(["8", "5"])
        image = widget.locator(".jp-OutputArea img").first
        before = image.get_attribute("src")
        widget.locator(".widget-slider .noUi-handle").first.focus()
        for _ in range(4):
            page.keyboard.press("ArrowLeft")
        expect(widget.locator(".widget-readout")).to_have_text(["4", "4"])
        expect(image).not_to_have_attribute("src", before)
        # The news pop-up would be up by now (a few seconds after Lab loads, without the course's settings).
        assert not page.get_by_text("Jupyter news").count(), "the news pop-up showed"
        assert not errors, errors
        browser.close()

    rows = grading()
    assert [(e, rows[e].status, rows[e].points) for e in sorted(rows)] == [
        ("03.1", "passed", 1), ("03.2", "failed", 0), ("03.3", "failed", 0)]
    assert "not implemented yet" in rows["03.2"].message


def shutdown_kernels(base: str, token: str) -> None:
    """Stop the server's kernels (the learner's work is saved): the grader gets the CPU."""
    with urllib.request.urlopen(f"{base}/api/kernels?token={token}") as response:
        kernels = json.load(response)
    for kernel in kernels:
        request = urllib.request.Request(f"{base}/api/kernels/{kernel['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(request).close()


def grade(notebook: Path, tmp_path: Path):
    """Start `transformer-course grade` on ``notebook`` as one learner's submission against the released
    exercises/03; returns a function that waits for it and gives the gradebook's rows by exercise."""
    submissions, release, out = tmp_path / "submissions", tmp_path / "release", tmp_path / "grades.csv"
    (submissions / "learner").mkdir(parents=True)
    release.mkdir()
    shutil.copy(notebook, submissions / "learner" / NAME)
    shutil.copy(ROOT / "exercises" / NAME, release / NAME)
    process = subprocess.Popen([str(Path(sys.executable).parent / "transformer-course"), "grade", str(submissions),
                                "--release", str(release), "--out", str(out), "--jobs", "1", "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def rows():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
        return {r.exercise: r for r in read_csv(out)}

    return rows
