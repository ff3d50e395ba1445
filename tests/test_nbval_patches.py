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

from transformer_course.grading.nbval_patches import (
    SUPPORTED,
    WAIT_FACTOR,
    CellClock,
    NbvalChanged,
    process_tree_cpu_seconds,
    require,
)

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


def test_torch_log_lines_leave_stderr_and_nothing_else():
    import nbformat

    from transformer_course.grading.nbval_patches import without_torch_log_lines

    log = ("W1126 12:04:52.990000 24743 torch/utils/cpp_extension.py:183] No CUDA runtime is found, using "
           "CUDA_HOME='/usr/local'\n")
    stream = nbformat.v4.new_output("stream", name="stderr", text=log)
    shown = nbformat.v4.new_output("stream", name="stdout", text=log)  # the same text on stdout is the cell's own
    assert without_torch_log_lines([stream, shown]) == [shown]
    mixed = without_torch_log_lines([nbformat.v4.new_output("stream", name="stderr", text=log + "UserWarning: x\n")])
    assert [o.text for o in mixed] == ["UserWarning: x\n"] and mixed[0].name == "stderr"  # attributes, as nbval reads
    other = nbformat.v4.new_output("stream", name="stderr", text="W1126 my own line torch/x.py:1] no\n")
    assert without_torch_log_lines([other]) == [other]


def test_nbval_compares_outputs_without_torch_log_lines(tmp_path):
    """In a real nbval run: a stored cell without output passes though its run logs a torch line on stderr, and
    a cell whose stderr differs otherwise still fails."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    log = "W1126 12:04:52.990000 1 torch/utils/cpp_extension.py:183] No CUDA runtime is found\\n"
    nb.cells = [nbformat.v4.new_code_cell(f"import sys\n_ = sys.stderr.write('{log}')", id="logs"),
                nbformat.v4.new_code_cell("import sys\n_ = sys.stderr.write('other\\n')", id="other")]
    for count, cell in enumerate(nb.cells, 1):
        cell.execution_count = count  # stored as run, with no output: nbval compares only cells that ran
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    # The same call as the repository's conftest.py makes.
    (tmp_path / "conftest.py").write_text("from transformer_course.grading.nbval_patches import "
                                          "compare_without_torch_log_lines\ncompare_without_torch_log_lines()\n")
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-m", "pytest", str(path), "--nbval", "--nbval-current-env", "-q",
                             "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert "1 failed, 1 passed" in result.stdout, result.stdout[-3000:]


class FakeClocks:
    """A wall clock and a kernel's CPU clock that the test advances."""

    def __init__(self):
        self.wall = 100.0
        self.cpu = 7.0

    def run(self, wall, cpu):
        self.wall += wall
        self.cpu += cpu


def clock_for(clocks, limit=10, pid=1234):
    return CellClock(pid, limit, cpu_seconds=lambda pid: clocks.cpu, now=lambda: clocks.wall)


def test_a_cell_on_a_busy_machine_is_timed_by_its_cpu_time():
    clocks = FakeClocks()
    clock = clock_for(clocks)
    clocks.run(wall=25, cpu=9.9)  # a quarter of a core for 25 s: 9.9 s of computing, within 10
    assert not clock.expired()
    clocks.run(wall=1, cpu=0.1)
    assert clock.expired()


def test_a_cell_that_computes_stops_at_its_limit_and_one_that_waits_at_the_wait_factor():
    clocks = FakeClocks()
    busy = clock_for(clocks)
    clocks.run(wall=10, cpu=10)
    assert busy.expired()
    clocks = FakeClocks()
    sleeping = clock_for(clocks)
    clocks.run(wall=WAIT_FACTOR * 10 - 0.5, cpu=0.01)
    assert not sleeping.expired()
    clocks.run(wall=0.5, cpu=0)
    assert sleeping.expired()


def test_without_the_kernels_cpu_time_the_wall_clock_counts():
    clocks = FakeClocks()
    no_pid = CellClock(None, 10, now=lambda: clocks.wall)

    def unreadable(pid):
        raise ProcessLookupError(pid)

    gone = CellClock(1234, 10, cpu_seconds=unreadable, now=lambda: clocks.wall)
    clocks.run(wall=9.9, cpu=0)
    assert not no_pid.expired() and not gone.expired()
    clocks.run(wall=0.1, cpu=0)
    assert no_pid.expired() and gone.expired()


def test_the_cpu_time_of_a_process_tree_counts_its_running_children():
    """A cell that computes in a subprocess uses its limit too (the child's time counts before it ends)."""
    import os
    import subprocess
    import sys
    import time

    start = process_tree_cpu_seconds(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 1.0: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 30
        while process_tree_cpu_seconds(os.getpid()) - start < 0.9:
            assert child.poll() is None and time.monotonic() < deadline, "the child's CPU time was not counted"
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()
