"""The nbval internals the course replaces are there, and the supported range is the one declared."""

from __future__ import annotations

import types
from importlib.metadata import version
from pathlib import Path

import nbval.kernel
import nbval.plugin
import pytest
import tomllib
from packaging.specifiers import SpecifierSet

from transformer_course.grading.nbval_patches import SUPPORTED, NbvalChanged, require

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_nbval_has_everything_replaced():
    require()
    assert version("nbval") in SpecifierSet(SUPPORTED)


def test_pyproject_declares_the_supported_range():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"nbval{SUPPORTED}" in [d.replace(" ", "") for d in dependencies]


def fake(kernel_changes: dict) -> dict:
    # A copy of nbval's two modules with some attributes changed or removed (None).
    kernel = types.SimpleNamespace(**{k: getattr(nbval.kernel, k) for k in
                                      ("start_new_kernel", "KernelManager", "NbvalKernelspecManager")})
    kernel.RunningKernel = type("RunningKernel", (), dict(vars(nbval.kernel.RunningKernel)))
    for name, value in kernel_changes.items():
        owner, _, attr = name.rpartition(".")
        target = kernel.RunningKernel if owner == "RunningKernel" else kernel
        if value is None:
            delattr(target, attr)
        else:
            setattr(target, attr, value)
    return {"nbval.kernel": kernel, "nbval.plugin": nbval.plugin}


def test_a_faithful_copy_passes():
    require(fake({}))


@pytest.mark.parametrize(("change", "message"), [
    ({"RunningKernel.await_reply": None}, "nbval.kernel.RunningKernel.await_reply is missing"),
    ({"start_new_kernel": lambda timeout=60, name="python": None},
     "nbval.kernel.start_new_kernel no longer takes startup_timeout, kernel_name"),
    ({"RunningKernel.execute_cell_input": lambda self, source: None},
     "nbval.kernel.RunningKernel.execute_cell_input no longer takes cell_input, allow_stdin"),
])
def test_a_changed_nbval_is_named_with_the_supported_range(change, message):
    with pytest.raises(NbvalChanged, match="is not the nbval the course was written for") as caught:
        require(fake(change))
    assert message in str(caught.value) and SUPPORTED in str(caught.value)
