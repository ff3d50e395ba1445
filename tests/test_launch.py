"""Notebooks that run outside a clone: the install cell every notebook starts with (Colab), the Binder
environment, and the install cell kept in sync with the repository named in ``_config.yml``.

The launch links themselves are tested on the built pages, in tests/test_book.py.
"""

import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from packaging.requirements import Requirement

from transformer_course import launch
from transformer_course.notebook_execution import execute_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for folder in ("lessons", "solutions", "exercises") for p in (ROOT / folder).glob("[0-9]*.ipynb"))
CONFIGURED = launch.repository(ROOT / "_config.yml")  # None while the publisher has not set it
# A repository for the tests of the cell that installs: nothing is ever installed from it.
REPO = launch.Repository("https://github.com/someone/course", "main", "v1.2")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_notebook_starts_with_the_install_cell_of_the_configured_repository(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.id == launch.INSTALL_CELL_ID, f"{path.name}: the first code cell is {first.id!r}; run `make execute`"
    assert first.source == launch.install_cell_source(CONFIGURED), f"{path.name}: stale install cell; `make execute`"
    assert [c.id for c in nb.cells].count(launch.INSTALL_CELL_ID) == 1
    assert "hide-input" in first.metadata.get("tags", []), f"{path.name}: the book must hide the install cell"
    assert first.metadata.get("jupyter", {}).get("source_hidden") is True, \
        f"{path.name}: JupyterLab must collapse the install cell's 17 lines; `make execute`"
    if path.parent.name == "exercises":
        assert first.metadata.get("editable") is False, "learners must not edit the install cell"


def test_the_requirement_pins_the_configured_ref_and_pyproject_agrees():
    req = Requirement(launch.requirement(REPO))
    assert req.name == "transformer-course" and req.url == "git+https://github.com/someone/course@v1.2"
    urls = [line for line in (ROOT / "pyproject.toml").read_text().splitlines()
            if line.startswith(("Repository =", "Issues ="))]
    if CONFIGURED is None:  # nothing may name a repository the project does not control
        assert urls == []
    else:
        assert urls == [f'Repository = "{CONFIGURED.url}"', f'Issues = "{CONFIGURED.url}/issues"']


def test_the_buttons_are_on_exactly_when_the_repository_is_set():
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    html, launch_buttons = config["html"], config["launch_buttons"]
    assert html["use_repository_button"] is html["use_issues_button"] is (CONFIGURED is not None)
    expected = ("https://mybinder.org", "https://colab.research.google.com") if CONFIGURED else ("", "")
    assert (launch_buttons["binderhub_url"], launch_buttons["colab_url"]) == expected


def run_install_cell(monkeypatch, *, installed: bool, colab: bool, pip_error: str = "", repo=REPO):
    """Run the install cell's code with pip and Colab stubbed out; returns (pip commands, Colab calls)."""
    import importlib.util

    pip, colab_calls = [], []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real_find_spec(name, *a) if installed or name != "transformer_course"
                                          else None))

    def fake_pip(cmd, **kwargs):
        pip.append((cmd, kwargs))
        return subprocess.CompletedProcess(cmd, 1 if pip_error else 0, stdout="", stderr=pip_error)

    monkeypatch.setattr(subprocess, "run", fake_pip)
    if colab:
        output = types.SimpleNamespace(enable_custom_widget_manager=lambda: colab_calls.append("widgets"))
        monkeypatch.setitem(sys.modules, "google.colab", types.SimpleNamespace(output=output))
        monkeypatch.setitem(sys.modules, "google", types.SimpleNamespace(colab=sys.modules["google.colab"]))
    exec(launch.install_cell_source(repo), {})
    return pip, colab_calls


def test_install_cell_installs_the_package_only_where_it_is_missing(monkeypatch):
    pip, colab = run_install_cell(monkeypatch, installed=False, colab=True)
    assert pip == [([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", launch.requirement(REPO)],
                    {"capture_output": True, "text": True})]
    assert colab == ["widgets"]


def test_without_a_configured_repository_the_cell_installs_nothing_and_says_how(monkeypatch):
    with pytest.raises(RuntimeError, match=r"not installed\. Run this notebook in a clone of the course set up "
                                           r"with `make lab`"):
        run_install_cell(monkeypatch, installed=False, colab=True, repo=None)
    monkeypatch.undo()
    pip, colab = run_install_cell(monkeypatch, installed=True, colab=True, repo=None)
    assert pip == [] and colab == ["widgets"]
    assert "subprocess" not in launch.install_cell_source(None) and "http" not in launch.install_cell_source(None)


def test_install_cell_shows_why_pip_failed(monkeypatch):
    error = "ERROR: Could not find a version that satisfies the requirement\n"
    package = re.escape(launch.requirement(REPO))
    with pytest.raises(RuntimeError, match=f"pip could not install {package}:\n{error}"):
        run_install_cell(monkeypatch, installed=False, colab=False, pip_error=error)


@pytest.mark.parametrize("colab", [False, True])
def test_install_cell_does_nothing_where_the_package_is_installed(monkeypatch, colab):
    pip, colab_calls = run_install_cell(monkeypatch, installed=True, colab=colab)
    assert pip == [] and colab_calls == (["widgets"] if colab else [])


@pytest.mark.slow  # pip builds and installs the package
def test_the_package_installs_from_its_source_without_the_repository_around_it(tmp_path):
    """What the install cell asks pip for: a non-editable build of the package, importable on its own."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(source)], check=True, timeout=300, capture_output=True)
    modules = "checks, widgets, models, training, generation, data, viz"
    code = f"import transformer_course; from transformer_course import {modules}; print(transformer_course.__file__)"
    env = {**os.environ, "PYTHONPATH": str(target)}
    # -S skips site-packages' .pth files (the editable install of this checkout); torch and the rest then
    # come from the venv's site-packages, appended after the target.
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    env["PYTHONPATH"] += os.pathsep + site_packages
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()).is_relative_to(target), out.stdout


def test_binder_installs_the_pinned_requirements_with_cpu_pytorch_and_the_package():
    requirements = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    assert "-r ../requirements.txt" in requirements
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in requirements
    assert "torch==2.13.0" in (ROOT / "requirements.txt").read_text().splitlines()
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    post_build = ROOT / "binder" / "postBuild"
    assert os.access(post_build, os.X_OK) and "pip install --no-deps -e ." in post_build.read_text()


def test_binder_gives_its_lab_the_course_lab_settings(tmp_path, monkeypatch):
    """postBuild, run with a stand-in pip and a scratch Lab directory, puts lab-settings/ where that Lab's
    default application settings directory reads it: no news pop-up on Binder either."""
    from jupyterlab.labapp import LabApp
    from jupyterlab_server.settings_utils import _get_overrides

    shims = tmp_path / "bin"
    shims.mkdir()
    for name, body in (("pip", "exit 0"), ("python", f'exec "{sys.executable}" "$@"')):
        (shims / name).write_text(f"#!/bin/sh\n{body}\n")
        (shims / name).chmod(0o755)
    monkeypatch.setenv("JUPYTERLAB_DIR", str(tmp_path / "lab"))
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([str(ROOT / "binder" / "postBuild")], cwd=ROOT, env=env, check=True, timeout=60)
    overrides, error = _get_overrides(LabApp().app_settings_dir)
    assert not error
    assert overrides["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}


# --- keeping the cell in sync -------------------------------------------------------------------------


def test_sync_adds_the_cell_before_the_first_code_cell_then_updates_it():
    nb = new_notebook(cells=[new_markdown_cell("# Title"), new_code_cell("x = 1")])
    assert launch.sync_install_cell(nb, "print('old')")
    assert [c.id for c in nb.cells][1] == launch.INSTALL_CELL_ID and nb.cells[2].source == "x = 1"
    assert nb.cells[1].metadata["tags"] == ["hide-input"] and nb.cells[1].metadata["jupyter"] == {"source_hidden": True}
    assert not launch.sync_install_cell(nb, "print('old')")
    del nb.cells[1].metadata["jupyter"]  # a cell from before JupyterLab collapsed it gets the metadata back
    assert launch.sync_install_cell(nb, "print('old')") and nb.cells[1].metadata["jupyter"] == {"source_hidden": True}
    assert launch.sync_install_cell(nb, "print('new')") and nb.cells[1].source == "print('new')"
    assert len(nb.cells) == 3


def test_sync_refuses_a_markdown_cell_with_the_install_id():
    nb = new_notebook(cells=[new_markdown_cell("text")])
    nb.cells[0].id = launch.INSTALL_CELL_ID
    with pytest.raises(ValueError, match="'install' must be a code cell, it is a markdown cell"):
        launch.sync_install_cell(nb, "pass")


@pytest.mark.parametrize("config, message", [
    ("repository:\n  url: git@github.com:a/b.git\n  ref: v1.0\n", "must be https://github.com/OWNER/REPO"),
    ("repository:\n  url: https://gitlab.com/a/b\n  ref: v1.0\n", "got 'https://gitlab.com/a/b'"),
    ("repository:\n  url: https://github.com/a/b\n", "repository.ref must be a release tag"),
    ("repository:\n  url: https://github.com/a/b\n  ref: main\n", "so that a later push cannot change what a class "
                                                                 "installs; got 'main'"),
])
def test_a_set_repository_must_be_on_github_and_pinned(tmp_path, config, message):
    (tmp_path / "_config.yml").write_text(config)
    with pytest.raises(ValueError, match=re.escape(message)):
        launch.repository(tmp_path / "_config.yml")


@pytest.mark.parametrize("config", ["title: x\n", "repository:\n  url: ''\n  branch: main\n  ref: ''\n"])
def test_an_unset_repository_is_none(tmp_path, config):
    (tmp_path / "_config.yml").write_text(config)
    assert launch.repository(tmp_path / "_config.yml") is None


@pytest.mark.parametrize("ref", ["v1.0", "2026.1", "v0.3.1-rc1", "3f2c1ab", "3f2c1ab" * 5 + "12345"])
def test_tags_and_commits_pin_the_install(tmp_path, ref):
    (tmp_path / "_config.yml").write_text(f"repository:\n  url: https://github.com/a/b/\n  ref: '{ref}'\n")
    assert launch.repository(tmp_path / "_config.yml") == launch.Repository("https://github.com/a/b", "main", ref)


def test_executing_a_book_notebook_gives_it_the_install_cell(tmp_path):
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://github.com/someone/course/\n  branch: dev\n"
                                          "  ref: v1.2\n")
    (tmp_path / "lessons").mkdir()
    path = tmp_path / "lessons" / "01_x.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# 1. X"), new_code_cell("print(6 * 7)")]), path)
    nb = execute_notebook(path, timeout=60)
    install = nb.cells[1]
    assert install.source == launch.install_cell_source(launch.Repository("https://github.com/someone/course", "dev",
                                                                          "v1.2"))
    assert "git+https://github.com/someone/course@v1.2" in install.source
    assert install.outputs == [] and install.execution_count == 1  # the package is here: nothing to do
    assert nb.cells[2].outputs[0].text == "42\n"
    assert launch.install_cell_for(tmp_path.parent / "elsewhere.ipynb") is None


def test_executing_a_notebook_stops_its_kernel(tmp_path):
    """`make execute` runs every notebook in one process: each kernel, with the models its lesson trained, must be
    gone before the next starts (nbclient leaves running a kernel whose manager it was given)."""
    path = tmp_path / "x.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("import os\nprint(os.getpid())")]), path)
    pid = int(execute_notebook(path, timeout=60).cells[0].outputs[0].text)
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not merely told to stop
        os.kill(pid, 0)
