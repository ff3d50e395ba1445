"""Kernel starts (transformer_course.grading.kernel_start): no port race, retried, and the cause kept.

The failures are forced: a TCP port taken before the kernel binds it (the race seen under load), a launcher
that fails on its first try, kernels that die for lack of memory or for another reason.
"""

from __future__ import annotations

import socket
import sys

import pytest
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager

from transformer_course.grading.execute import CellRecord, RunResult
from transformer_course.grading.kernel_start import KernelStartError, start_kernel
from transformer_course.grading.limits import Limits
from transformer_course.grading.verdict import _not_run, _verdict

pytestmark = pytest.mark.slow  # starts kernels

KERNEL = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]


def launcher(*commands: str | None):
    """A ``make_manager`` whose i-th kernel runs ``python -c commands[i]`` first (None: a real kernel)."""
    made: list[KernelManager] = []

    class Spec(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            code = commands[min(len(made) - 1, len(commands) - 1)]
            argv = KERNEL if code is None else [sys.executable, "-c", code]
            return KernelSpec(argv=argv, display_name="test", language="python")

    def make_manager():
        made.append(KernelManager(kernel_name="test", kernel_spec_manager=Spec()))
        return made[-1]

    return make_manager, made


def run_and_stop(km, kc) -> None:
    try:
        reply = kc.execute_interactive("x = 6 * 7", timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_taken_tcp_port_kills_a_plain_start_but_not_ours():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # What happens under load: the kernel finds its shell port taken and dies.
        plain, _ = launcher(None)
        km = plain()
        km.cache_ports = False  # keep the port we give (jupyter_client otherwise picks its own)
        km.shell_port = port
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        with pytest.raises(RuntimeError, match="Kernel died"):
            kc.wait_for_ready(timeout=30)
        kc.stop_channels()
        km.shutdown_kernel(now=True)

        def same_port():
            km = plain()
            km.cache_ports = False
            km.shell_port = port
            return km

        km, kc = start_kernel(same_port, attempts=1)  # ipc: the port number is only a file name's suffix
        assert km.transport == "ipc"
        run_and_stop(km, kc)


def test_a_start_that_fails_once_is_retried():
    fail_once = "import sys; sys.stderr.write('zmq.error.ZMQError: Address already in use\\n'); sys.exit(1)"
    make_manager, made = launcher(fail_once, None)
    pauses = []
    km, kc = start_kernel(make_manager, startup_timeout=30, sleep=pauses.append)
    run_and_stop(km, kc)
    assert len(made) == 2 and pauses == [0.5]


def test_without_retries_the_error_says_what_the_kernel_said():
    fail = "import sys; sys.stderr.write('Traceback\\nzmq.error.ZMQError: Address already in use\\n'); sys.exit(1)"
    make_manager, made = launcher(fail)
    with pytest.raises(KernelStartError) as caught:
        start_kernel(make_manager, startup_timeout=30, attempts=2, sleep=lambda s: None)
    error = caught.value
    assert len(made) == 2 and len(error.attempts) == 2
    assert "did not start in 2 attempts" in str(error)
    assert "exited with status 1: zmq.error.ZMQError: Address already in use" in str(error)
    assert not error.out_of_memory
    assert error.report().count("Traceback") == 2  # the log keeps every attempt's stderr


@pytest.mark.parametrize(("code", "ended", "memory"), [
    ("import sys; sys.stderr.write(\"RuntimeError: can't start new thread\\n\"); sys.exit(1)",
     "exited with status 1", True),
    ("raise MemoryError", "exited with status 1", True),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL", True),
    ("raise ImportError('No module named ipykernel')", "exited with status 1", False),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", "killed by SIGTERM", False),
])
def test_memory_is_blamed_only_when_the_kernel_shows_it(code, ended, memory):
    make_manager, _ = launcher(code)
    with pytest.raises(KernelStartError) as caught:
        start_kernel(make_manager, startup_timeout=30, attempts=1)
    assert caught.value.attempts[0]["ended"] == ended
    assert caught.value.out_of_memory is memory


@pytest.mark.parametrize("memory", [False, True])
def test_the_row_suggests_a_memory_limit_only_for_memory(memory):
    run = RunResult(setup_error="KernelStartError: the kernel did not start in 3 attempts", setup_out_of_memory=memory)
    status, message = _not_run(run, Limits(), "ex1-check")
    assert status == "error"
    assert message.startswith("the notebook could not be run: KernelStartError: the kernel did not start")
    assert ("--memory-limit" in message) is memory
    assert message.endswith("raise --memory-limit (now 4096 MiB)") is memory


class _Prepared:  # the one attribute of grading.prepare.Prepared that a verdict on an error reads
    def __init__(self, code_ids):
        self.nb = type("Nb", (), {"cells": [type("Cell", (), {"id": i, "cell_type": "code"}) for i in code_ids]})
        self.checks = {"ex1-check"}


@pytest.mark.parametrize(("ename", "evalue", "memory"), [
    # A kernel that starts under a tight limit and then cannot load torch (seen on CI under 300 MiB).
    ("ImportError", "libtorch_cpu.so: failed to map segment from shared object", True),
    ("MemoryError", "", True),
    ("ImportError", "No module named 'torhc'", False),
    ("NameError", "name 'token_logits' is not defined", False),
])
def test_an_error_in_a_cell_suggests_a_memory_limit_only_for_memory(ename, evalue, memory):
    failed = CellRecord("error", ename, evalue)
    run = RunResult(cells={"setup": failed, "ex1-check": failed})
    status, message = _verdict(_Prepared(["setup", "ex1-check"]), run, Limits(memory_limit_mb=300), "ex1-check",
                               "01.1 Token ids to logits")
    assert status == "error" and message.startswith(f"{ename}: {evalue}".rstrip(": "))
    assert f"(cell setup raised {ename}" in message
    assert message.endswith("; it ran out of memory: raise --memory-limit (now 300 MiB)") is memory
