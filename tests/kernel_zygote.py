"""nbval's kernels in `make test`, forked from a process that has already imported torch and ipykernel.

A lesson's kernel spends about 2 CPU-s before its first cell, most of it importing torch; `make test` and `make
test-portable` start 27 and 54 of them. Forked from a *zygote* that imported torch and ipykernel once, a kernel does
the rest of a lesson's imports and its first torch operation in about 0.3 CPU-s (measured on this machine kind: 1.9-2.0
CPU-s from a fresh process). The kernel is otherwise as fresh: it imported nothing of the course, ran no torch
operation before the fork (no thread pool, no BLAS state), reseeds Python's ``random``, and gets the environment, the
working directory and the standard streams that jupyter_client gave the process it launched.

That process is a *stub* (this file with ``--launch``, standard library only): it passes its request and its
standard streams to the zygote over a Unix socket, forwards the signals it gets (an interrupt, a termination) to the
kernel, and exits with the kernel's exit status. If the stub is killed (a shutdown with ``now=True``), the kernel sees
its connection close and exits too. The zygote (``--serve``) forks one kernel per request and ends when its parent,
the pytest process, closes its standard input.

Only the nbval runs of `make test` and `make test-portable` use it (the root conftest.py); the grader, `make execute`
and the learner's Jupyter start kernels as usual. ``COURSE_FORK_KERNELS=0`` turns it off.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time

_HEADER = struct.Struct("!I")


def _send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _receive(sock: socket.socket, with_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (None when the peer closed first) and up to ``with_fds`` file descriptors sent with it."""
    fds: list[int] = []
    if with_fds:
        data, fds, _flags, _address = socket.recv_fds(sock, 1 << 20, with_fds)
    else:
        data = sock.recv(1 << 20)
    if not data:
        return None, fds
    (size,) = _HEADER.unpack_from(data)
    body = data[_HEADER.size:]
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            return None, fds
        body += more
    return json.loads(body), fds


# --- the stub: the process jupyter_client launches -------------------------------------------------------------


def launch(address: str, kernel_args: list[str]) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(600):  # the zygote binds its socket within a second of starting, or 60 s under heavy load
        try:
            sock.connect(address)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.1)
    else:
        sock.connect(address)  # raises: the zygote never listened
    _send(sock, {"args": kernel_args, "cwd": os.getcwd(), "env": dict(os.environ)}, [0, 1, 2])
    started, _ = _receive(sock)
    if started is None:
        print("the kernel zygote closed the connection before starting a kernel", file=sys.stderr)
        return 1
    pid = started["pid"]

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    while True:
        try:
            ended, _ = _receive(sock)
            break
        except InterruptedError:  # a forwarded signal arrived while waiting
            continue
    if ended is None:
        return 1
    code = ended["status"]
    if code < 0:  # ended by a signal: end the same way, so that jupyter_client sees what it would have seen
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


# --- the zygote ---------------------------------------------------------------------------------------------


def _run_kernel(request: dict, fds: list[int], connection: socket.socket) -> None:
    """In the forked child: become the kernel that ``python -m ipykernel_launcher ARGS`` would have started."""
    import atexit
    import random
    import runpy

    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
    # Generators seeded when the zygote imported them would give every kernel the same numbers: seed them anew, as a
    # fresh interpreter does (torch's default generator, Python's and NumPy's global ones).
    random.seed()
    sys.modules["torch"].seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()

    def lifeline():  # the stub closed the connection: it was killed, so the kernel goes too
        try:
            while connection.recv(1 << 12):
                pass
        except OSError:
            pass
        os._exit(1)

    threading.Thread(target=lifeline, daemon=True).start()
    code = 0
    try:
        sys.argv = ["ipykernel_launcher", *request["args"]]
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - report it on the kernel's stderr, as a fresh interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(address: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    import ipykernel.ipkernel  # noqa: F401 - the imports every kernel would repeat
    import ipykernel.kernelapp  # noqa: F401
    import torch  # noqa: F401

    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")
    kernels: dict[int, socket.socket] = {}
    while True:
        for key, _events in selector.select(timeout=0.2):
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 1 << 12):  # the pytest process ended
                    for pid in kernels:
                        os.kill(pid, signal.SIGKILL)
                    return
            else:
                connection, _ = listener.accept()
                request, fds = _receive(connection, with_fds=3)
                if request is None or len(fds) != 3:
                    connection.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other in kernels.values():
                        other.close()
                    _run_kernel(request, fds, connection)
                for fd in fds:
                    os.close(fd)
                kernels[pid] = connection
                _send(connection, {"pid": pid})
        while kernels:  # reap the kernels that ended and tell their stubs
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = kernels.pop(pid, None)
            if connection is not None:
                try:
                    _send(connection, {"status": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                connection.close()


# --- pytest's side ------------------------------------------------------------------------------------------

_zygote = None


def enabled() -> bool:
    return os.environ.get("COURSE_FORK_KERNELS", "1") != "0" and hasattr(socket, "send_fds")


def forking(make_manager):
    """``make_manager`` whose managers launch the stub (and through it a forked kernel) instead of a fresh kernel."""
    import copy
    import subprocess
    import tempfile

    def make():
        global _zygote
        if _zygote is None:
            folder = tempfile.mkdtemp(prefix="kernel-zygote-")
            address = os.path.join(folder, "socket")
            process = subprocess.Popen([sys.executable, __file__, "--serve", address], stdin=subprocess.PIPE)
            _zygote = (process, address)
        km = make_manager()
        spec = copy.copy(km.kernel_spec)
        spec.argv = [sys.executable, "-S", __file__, "--launch", _zygote[1], *spec.argv[spec.argv.index("-f"):]]
        km._kernel_spec = spec
        return km

    return make


if __name__ == "__main__":
    role, address, *rest = sys.argv[1:]
    if role == "--serve":
        serve(address)
    else:
        sys.exit(launch(address, rest))
