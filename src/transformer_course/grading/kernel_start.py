"""Starting a Jupyter kernel without the port race, retried, and saying why when it still fails.

Over TCP the *client* picks the kernel's five ports (bind to port 0, read the number, close) and writes them
into the connection file; the kernel binds them a moment later, and in between any other process may take
one. Measured on a 2-core machine with 8 processes starting kernels in a loop beside 2 busy loops: 3 of 800
TCP starts died with ``zmq.error.ZMQError: Address already in use`` (the grader's rare "Kernel died before
replying to kernel_info"); over the ``ipc`` transport, 0 of 800. So every kernel the course starts (nbval in
``make test``, the grader, ``make execute``) talks over Unix sockets in a private temporary directory, whose
names no other process can take. A start that fails anyway is retried: no learner's code has run yet. The
error after the last attempt carries the kernel's own stderr and exit status, and says "memory" only when
the kernel's stderr or the signal that ended it shows memory ran out.

This module imports nothing from the course package (the grader's pytest plugin loads it by path, in a
process that must not import torch).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from collections.abc import Callable

ATTEMPTS = 3
BACKOFF_S = 0.5  # before attempt k + 1: k * BACKOFF_S seconds
STDERR_LINES = 20  # of a failed kernel's stderr, kept in the error
# What a kernel that ran out of its address space prints (measured under RLIMIT_AS from 100 to 1000 MiB:
# "RuntimeError: can't start new thread" most often, MemoryError or an allocation failure otherwise; a kernel
# that starts but cannot load torch's shared libraries raises "ImportError: ...: failed to map segment").
MEMORY_SIGNS = ("MemoryError", "can't start new thread", "Cannot allocate memory", "std::bad_alloc",
                "out of memory", "failed to map segment")
_NOISE = "Kernel is running over TCP without encryption"  # ipykernel's warning, not a cause


class KernelStartError(RuntimeError):
    """The kernel did not start in ``ATTEMPTS`` tries; ``attempts`` holds what each try saw."""

    def __init__(self, attempts: list[dict]):
        self.attempts = attempts
        last = attempts[-1]
        self.out_of_memory = any(a["out_of_memory"] for a in attempts)
        cause = last["stderr"][-1] if last["stderr"] else "no output on stderr"
        super().__init__(f"the kernel did not start in {len(attempts)} attempts (ipc transport, private "
                         f"directory); last attempt: {last['error']}, kernel {last['ended']}: {cause}")

    def report(self) -> str:
        """Every attempt with the first lines of the kernel's stderr, for a log."""
        lines = [str(self)]
        for i, a in enumerate(self.attempts, 1):
            lines.append(f"attempt {i}: {a['error']}; kernel {a['ended']}")
            lines += [f"    {line}" for line in a["stderr"]]
        return "\n".join(lines)


def use_private_ipc(km) -> str:
    """Make ``km`` (a ``KernelManager`` not yet started) use Unix sockets in a new private folder.

    Returns the folder; it is removed when ``km`` is garbage-collected or the process exits. On Windows,
    where zmq has no ipc transport, the kernel stays on TCP and only the retries guard against the race.
    """
    folder = tempfile.mkdtemp(prefix="course-kernel-")  # mode 0700: no other user can use or take the names
    weakref.finalize(km, shutil.rmtree, folder, True)
    if sys.platform == "win32":
        return folder
    km.transport = "ipc"
    km.ip = os.path.join(folder, "kernel")  # the sockets are kernel-<port>
    km.connection_file = os.path.join(folder, "connection.json")
    return folder


def start_kernel(make_manager: Callable, *, startup_timeout: float = 60, attempts: int = ATTEMPTS,
                 sleep: Callable[[float], None] = time.sleep, **start_kwargs):
    """Start a kernel from ``make_manager()`` over private ipc; return ``(km, kc)``, ready for requests.

    ``start_kwargs`` go to ``km.start_kernel`` (``cwd``, ``env``, ...). The kernel's stderr goes to a
    file in its private folder and is read only if the start fails. Each failed attempt is shut down and
    the next one starts with a new manager and new sockets, after a short pause; after ``attempts``
    failures, :class:`KernelStartError`.
    """
    start_kwargs.pop("stderr", None)  # ours is kept, a caller's /dev/null would lose the cause
    failures: list[dict] = []
    for attempt in range(1, attempts + 1):
        km = make_manager()
        folder = use_private_ipc(km)
        kc = None
        with open(os.path.join(folder, "stderr.txt"), "w+") as stderr:
            try:
                km.start_kernel(stderr=stderr, **start_kwargs)
                kc = km.client()
                kc.start_channels()
                kc.wait_for_ready(timeout=startup_timeout)
                return km, kc
            except Exception as error:  # noqa: BLE001 - any failure before the first cell is safe to retry
                failures.append(_describe(km, stderr, error, folder))
                _stop(km, kc)
        if attempt < attempts:
            sleep(attempt * BACKOFF_S)
    raise KernelStartError(failures)


def _describe(km, stderr, error: Exception, folder: str) -> dict:
    process = getattr(getattr(km, "provisioner", None), "process", None)
    code = None
    if process is not None:
        try:
            code = process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - still running (a kernel that never answered)
            code = None
    if code is None:
        ended = "still running" if process is not None else "never launched"
    elif code < 0:
        ended = f"killed by {signal.Signals(-code).name}"
    else:
        ended = f"exited with status {code}"
    stderr.flush()
    stderr.seek(0)
    # Without the private folder's random name, so that a message is the same from run to run.
    text = [line.rstrip().replace(folder, "<kernel folder>") for line in stderr.read().splitlines()
            if line.strip() and _NOISE not in line]
    return {
        "error": f"{type(error).__name__}: {error}".splitlines()[0][:200],
        "ended": ended,
        "stderr": text[:STDERR_LINES - 1] + text[-1:] if len(text) > STDERR_LINES else text,
        # The kernel hit its address-space limit, or the system's OOM killer sent SIGKILL.
        "out_of_memory": code == -signal.SIGKILL or any(s in line for line in text for s in MEMORY_SIGNS),
    }


def _stop(km, kc) -> None:
    try:
        if kc is not None:
            kc.stop_channels()
        km.shutdown_kernel(now=True)
    except Exception:  # noqa: BLE001 - a kernel that never started has nothing to shut down
        pass
