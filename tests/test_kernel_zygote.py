"""Kernels forked from the zygote (transformer_course/grading/kernel_zygote.py) are what a kernel started from scratch
would be, for what the grader and nbval rely on: the process they see, its environment as /proc shows it, its paths,
limits, session and signals, its end."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from transformer_course.grading import kernel_zygote
from transformer_course.grading.execute import RUN_ENV
from transformer_course.grading.kernel_start import KernelStartError, start_kernel
from transformer_course.grading.nbval_patches import FORKED_PID_FILE, kernel_pid

pytestmark = [pytest.mark.slow,  # starts kernels
              pytest.mark.skipif(not kernel_zygote.available(), reason="kernels are forked on Linux only")]

TOKEN = RUN_ENV  # the grader's run token, which kernel_zygote.STAMPED names too (it cannot import execute)

PROBE = """
import json, os, resource, signal, sys, tempfile, threading
print(json.dumps(dict(
    path=sys.path, argv=sys.argv[1:2], cwd=os.getcwd(), flags=str(sys.flags), hash=hash("abc"),
    sigint=str(signal.getsignal(signal.SIGINT)), sigpipe=str(signal.getsignal(signal.SIGPIPE)),
    sigchld=str(signal.getsignal(signal.SIGCHLD)), tmp=tempfile.gettempdir(),
    threads=sorted(t.name.split(" ")[0].rstrip("-0123456789") for t in threading.enumerate()),
    limit=resource.getrlimit(resource.RLIMIT_AS), leader=os.getsid(0) == os.getpid(), pid=os.getpid(),
    environ=[v for v in open("/proc/self/environ", "rb").read().split(b"\\0") if v.startswith(b"TOKEN=")][0].decode(),
    course=[m for m in sys.modules if m.startswith("transformer_course")],
)))
""".replace("TOKEN", TOKEN)


class _Manager:
    """A KernelManager factory with the course's own kernel spec (this interpreter)."""

    def __call__(self):
        from jupyter_client.manager import KernelManager

        km = KernelManager(kernel_name="python3")
        km.kernel_spec.argv[0] = sys.executable
        return km


@pytest.fixture(scope="module")
def zygote():
    env = {**os.environ, TOKEN: kernel_zygote.PLACEHOLDER, "PYTHONHASHSEED": "0"}
    process, address = kernel_zygote.start(env)
    yield address
    kernel_zygote.stop(process, address)


def _start(address, tmp_path, *, env=None, **kwargs):
    make = kernel_zygote.forking(_Manager(), address)
    return start_kernel(make, env={**os.environ, **(env or {})}, cwd=str(tmp_path), **kwargs)


def _run(kc, code: str, timeout: float = 60) -> tuple[dict, str]:
    out = []
    reply = kc.execute_interactive(code, timeout=timeout,
                                   output_hook=lambda m: out.append(m["content"].get("text", "")))
    return reply["content"], "".join(out)


def _probe(address, tmp_path, env) -> tuple[int, dict]:
    """(the pid of the process the manager launched, what PROBE printed in the kernel)"""
    km, kc = _start(address, tmp_path, env=env, preexec_fn=_limited)
    try:
        content, out = _run(kc, PROBE)
        assert content["status"] == "ok", content
        return km.provisioner.process.pid, json.loads(out)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _limited():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, resource.RLIM_INFINITY))  # as the grader's plugin limits


def test_a_forked_kernel_is_what_a_new_one_would_be(zygote, tmp_path):
    token = "a" * 32
    (tmp_path / "package").mkdir()
    env = {TOKEN: token, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tmp_path / "package"), "TMPDIR": str(tmp_path)}
    launched, fresh = _probe(None, tmp_path, env)
    assert fresh.pop("pid") == launched
    launched, forked = _probe(zygote, tmp_path, env)
    assert forked.pop("pid") != launched  # the manager launched the stub, not the kernel
    assert fresh["environ"] == f"{TOKEN}={token}"  # what the grader's search for leftovers reads
    assert fresh["path"][0] == str(tmp_path / "package") and fresh["limit"] == [8 * 2**30, -1]
    assert fresh["tmp"] == str(tmp_path) and fresh["leader"] and not fresh["course"]
    assert forked == fresh


def test_the_stub_names_the_kernel_and_passes_on_interrupts_and_its_end(zygote, tmp_path):
    km, kc = _start(zygote, tmp_path)
    try:
        with open(os.path.join(os.path.dirname(km.connection_file), FORKED_PID_FILE)) as f:
            pid = int(f.read())

        class Kernel:  # what nbval_patches.kernel_pid reads of nbval's RunningKernel
            pass

        kernel = Kernel()
        kernel.km = km
        assert kernel_pid(kernel) == pid != km.provisioner.process.pid
        _, out = _run(kc, "import os; print(os.getpid())")
        assert int(out) == pid
        kc.execute("import time; time.sleep(60)")
        time.sleep(1)
        started = time.monotonic()
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=20)
        assert reply["content"]["ename"] == "KeyboardInterrupt" and time.monotonic() - started < 10
        deadline = time.monotonic() + 30
        while km.is_alive() and time.monotonic() < deadline:
            # Sent again if it was dropped: ipykernel aborts the requests that arrive just after an error (the
            # interrupt above), which on a loaded machine this one can do.
            kc.execute("import os; os._exit(3)")
            for _ in range(30):
                if not km.is_alive():
                    break
                time.sleep(0.1)
        assert not km.is_alive() and km.provisioner.process.wait(5) == 3
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_killing_the_stub_kills_the_kernel_and_its_group(zygote, tmp_path):
    km, kc = _start(zygote, tmp_path)
    try:
        _, out = _run(kc, "import os, subprocess, sys\n"
                          "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                          "print(os.getpid(), child.pid)")
        pids = [int(p) for p in out.split()]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)  # SIGKILL to the stub's process group
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _running(p)]


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_memory_limit_below_the_zygote_fails_the_start_as_memory(zygote, tmp_path):
    import resource

    def limited():  # what the zygote has mapped (torch) is more than this
        resource.setrlimit(resource.RLIMIT_AS, (300 * 2**20, resource.RLIM_INFINITY))

    with pytest.raises(KernelStartError) as error:
        _start(zygote, tmp_path, startup_timeout=20, attempts=1, preexec_fn=limited)
    assert error.value.out_of_memory and "below what the kernel needs to start" in str(error.value)


def test_without_a_zygote_the_stub_starts_an_ordinary_kernel(tmp_path):
    missing = str(tmp_path / "no-zygote" / "socket")
    started = time.monotonic()
    km, kc = _start(missing, tmp_path)
    try:
        _, out = _run(kc, "import os; print(os.getpid())")
        assert int(out) == km.provisioner.process.pid  # the stub became the kernel
        assert time.monotonic() - started < 30
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


STARTER = """
import sys, time
sys.path.insert(0, sys.argv[1])
import kernel_zygote
process, address = kernel_zygote.start()
print(process.pid, address, flush=True)
time.sleep(600)
"""


def test_a_killed_process_group_leaves_no_zygote_and_no_folder(tmp_path):
    """kill -9 of the grader's process group (what an instructor does to a hung run): the zygote, in a session of its
    own, sees its standard input close, and ends and removes its folder."""
    import signal
    import subprocess

    starter = subprocess.Popen([sys.executable, "-c", STARTER, os.path.dirname(kernel_zygote.__file__)],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    pid, address = starter.stdout.readline().split()
    pid, folder = int(pid), os.path.dirname(address)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not os.path.exists(address):  # imports done, listening
        time.sleep(0.1)
    os.killpg(starter.pid, signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_running(pid) or os.path.exists(folder)):
        time.sleep(0.1)
    alive = _running(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive and not os.path.exists(folder), (alive, os.listdir(folder) if os.path.exists(folder) else None)
