"""Imports run one way: the import-linter contracts of pyproject.toml hold for the package (``make test-fast`` runs
``lint-imports`` too), each contract catches what it is there for on a fake copy of the package with one bad import
planted, and no module imports another module's private names."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "transformer_course"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = {c["id"]: c for c in
             tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}


def lint_imports(cwd: Path, *contract_ids: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """``lint-imports`` with the pyproject.toml in ``cwd`` (only the contracts ``contract_ids``, if any), on the
    package found first on ``pythonpath``."""
    env = dict(os.environ, COLUMNS="200")  # rich wraps the report at the terminal's width
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    args = [str(LINT_IMPORTS), "--no-cache"] + [a for cid in contract_ids for a in ("--contract", cid)]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_package_keeps_every_import_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


# --- the contracts bite: a fake package with the real one's layout, and one bad import planted ------------------


def _layer_modules() -> list[str]:
    """The top-level modules the layers contract names (optional ones included)."""
    names = []
    for layer in CONTRACTS["layers"]["layers"]:
        names += [name.strip().strip("()") for name in re.split(r"[|:]", layer)]
    return names


@pytest.fixture
def fake(tmp_path):
    """A package named transformer_course with every module of the layers contract (``checks`` and ``grading`` as
    packages of two modules), importing nothing, beside a copy of pyproject.toml; returns a function that plants
    ``source`` in one of its modules."""
    package = tmp_path / "src" / "transformer_course"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in _layer_modules():
        if name in ("checks", "grading"):
            (package / name).mkdir()
            for module in ("__init__", "core", "progress"):
                (package / name / f"{module}.py").write_text("")
        else:
            (package / f"{name}.py").write_text("")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")

    def plant(module: str, source: str) -> None:
        path = package.joinpath(*module.split(".")).with_suffix(".py")
        path.write_text(source + "\n")

    plant.root = tmp_path
    return plant


def _lint(fake, *contract_ids):
    return lint_imports(fake.root, *contract_ids, pythonpath=fake.root / "src")


def test_the_fake_package_without_a_planted_import_keeps_every_contract(fake):
    result = _lint(fake)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("plants, contract", [
    # authoring <-> launch, as before issue 30: a cycle, and launch importing a layer above it.
    ({"launch": "from transformer_course import authoring", "authoring": "from transformer_course import launch"},
     "no-cycles"),
    ({"launch": "from transformer_course import authoring"}, "layers"),
    # checks.core <-> checks.progress: a cycle inside a package.
    ({"checks.core": "from transformer_course.checks import progress",
      "checks.progress": "from transformer_course.checks.core import check"}, "no-cycles"),
    # Model code that imports the checks, directly or through a module that does.
    ({"multihead": "from transformer_course.checks import core"}, "model-code-without-tooling"),
    ({"multihead": "from transformer_course.checks import core"}, "layers"),
    ({"blocks": "import transformer_course.viz"}, "model-code-without-tooling"),
    # probes is model code.
    ({"probes": "import transformer_course.grading.core"}, "layers"),
    ({"probes": "import transformer_course.grading.core"}, "model-code-without-tooling"),
    # A new module that no layer names.
    ({"helpers": "x = 1"}, "layers"),
])
def test_each_contract_catches_the_import_it_forbids(fake, plants, contract):
    for module, source in plants.items():
        fake(module, source)
    result = _lint(fake, contract)
    assert result.returncode == 1 and "0 kept, 1 broken" in result.stdout, result.stdout + result.stderr


# --- private names --------------------------------------------------------------------------------------------


def private_imports(package: Path) -> set[tuple[str, str, str]]:
    """(importer, module, name) for every ``from module import _name`` between modules of ``package`` where
    ``_name`` is not itself a module (the package's private modules, such as ``_validate``, are its to share)."""
    found = set()
    for path in sorted(package.rglob("*.py")):
        importer = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(package.name):
                continue
            folder = package.parent.joinpath(*node.module.split("."))
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                is_module = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
                if private and not is_module:
                    found.add((importer, node.module, alias.name))
    return found


def test_no_module_imports_another_modules_private_names():
    assert private_imports(PACKAGE) == set()


def test_a_private_import_is_found(tmp_path):
    package = tmp_path / "transformer_course"
    (package / "grading").mkdir(parents=True)
    (package / "_validate.py").write_text("")
    (package / "grading" / "report.py").write_text("def _page(): pass\n")
    (package / "grading" / "classpage.py").write_text(
        "from transformer_course import _validate\nfrom transformer_course.grading.report import _page\n")
    assert private_imports(package) == {
        ("transformer_course.grading.classpage", "transformer_course.grading.report", "_page")}
