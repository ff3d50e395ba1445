"""Kernels forked from a process that has already imported torch and ipykernel (a *zygote*).

A kernel spends about 2 CPU-s before its first cell, most of it importing torch; the grader starts one per notebook
and `make test` about a hundred. Forked from a zygote that imported torch and ipykernel once, a kernel starts in a
fraction of that. It is otherwise as fresh as a kernel started from scratch: the zygote imported nothing of the course
and ran no torch operation (no thread pool, no BLAS state), and the child takes, from the process that asked for it,
the environment, the working directory, ``sys.path`` (the working directory, then ``PYTHONPATH``), the standard
streams, the resource limits and the random seeds a new interpreter would have, in a session of its own.

jupyter_client launches a *stub* in place of ``python -m ipykernel_launcher`` (this file with ``--launch``, standard
library only). It passes its request and its standard streams to the zygote over a Unix socket, writes the kernel's
pid to ``kernel.pid`` beside the connection file (the cell time limit counts the kernel's CPU time:
``nbval_patches.kernel_pid`` reads it), forwards the signals it gets (an interrupt, a termination) to the kernel's
process group, and exits as the kernel did. When the stub is killed (a shutdown), the zygote kills the kernel's
process group. When the zygote cannot be reached, the stub becomes an ordinary kernel (``exec``). The zygote
(``--serve``) ends, killing the kernels it forked, when the process that started it closes its standard input or ends.

The grader's run token (``TRANSFORMER_COURSE_GRADE_RUN``, by which it finds and kills what a notebook left running)
has to show in ``/proc/PID/environ``, which is the environment the process was *started* with. So the grader starts
the zygote with a placeholder value of the token's length in that variable, and each child writes its own token over
the placeholder in place (:func:`_stamp_environ`).

Linux only (``fork`` after importing torch is not safe on macOS; Windows has no fork). ``COURSE_FORK_KERNELS=0``
turns it off. This module imports nothing from the course package: the grader's pytest plugin loads it by path.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ADDRESS_ENV = "TRANSFORMER_COURSE_KERNEL_ZYGOTE"  # the zygote's socket, for the process that starts kernels
PID_FILE = "kernel.pid"  # beside the connection file: the forked kernel's pid
ZYGOTE_PID_FILE = "zygote.pid"  # beside the zygote's socket
STAMPED = ("TRANSFORMER_COURSE_GRADE_RUN",)  # variables a child writes into its start-up environment (see above)
PLACEHOLDER = "0" * 32  # their value in the zygote's environment: as long as a uuid4().hex token
LIMITS = ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NOFILE")  # copied from the stub to the kernel
CONNECT_S = 60  # how long a stub waits for the zygote's socket before it starts a kernel of its own
_HEADER = struct.Struct("!I")


def available() -> bool:
    """Whether kernels can be forked here: Linux, file descriptors over Unix sockets, and not turned off."""
    return (sys.platform == "linux" and hasattr(socket, "send_fds")
            and os.environ.get("COURSE_FORK_KERNELS", "1") != "0")


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
    if len(data) < _HEADER.size:
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


def _connect(address: str) -> socket.socket | None:
    """A connection to the zygote at ``address``; None if there is none to wait for: its folder is gone, it ended
    (its socket appears once it has imported torch and listens), or it did not listen within CONNECT_S seconds."""
    folder = os.path.dirname(address)
    deadline = time.monotonic() + CONNECT_S
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
            return sock
        except FileNotFoundError:
            sock.close()
            if time.monotonic() > deadline or not _alive(os.path.join(folder, ZYGOTE_PID_FILE)):
                return None
            time.sleep(0.05)
        except OSError:  # refused: nothing listens any more
            sock.close()
            return None


def _alive(pid_file: str) -> bool:
    try:
        with open(pid_file) as f:
            os.kill(int(f.read()), 0)
        return True
    except (OSError, ValueError):
        return False


def launch(address: str, kernel_args: list[str]) -> int:
    """Have the zygote fork a kernel with ``kernel_args``; wait for it, forwarding signals; its exit status."""
    import resource

    sock = _connect(address)
    env = {k: v for k, v in os.environ.items() if k != ADDRESS_ENV}
    if sock is None:  # no zygote: an ordinary kernel, in this process
        os.execve(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *kernel_args], env)
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in LIMITS}
    _send(sock, {"args": kernel_args, "cwd": os.getcwd(), "env": env, "limits": limits}, [0, 1, 2])
    started, _ = _receive(sock)
    if started is None:
        print("the kernel zygote closed the connection before starting a kernel", file=sys.stderr)
        return 1
    pid = started["pid"]
    if "-f" in kernel_args:
        with open(os.path.join(os.path.dirname(kernel_args[kernel_args.index("-f") + 1]), PID_FILE), "w") as f:
            f.write(str(pid))

    def forward(signum, _frame):
        try:
            os.killpg(pid, signum)  # the kernel leads a session of its own, as this stub did
        except (ProcessLookupError, PermissionError):
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    parent = os.getppid()
    sock.settimeout(1.0)
    while True:  # PEP 475: a forwarded signal does not interrupt the wait
        try:
            ended, _ = _receive(sock)
            break
        except TimeoutError:
            if os.getppid() != parent:  # the process that launched this one ended: so does the kernel, as a new
                return 1  # kernel polling its parent would (the zygote sees the connection close)
    if ended is None:
        return 1
    code = ended["status"]
    if code < 0:  # ended by a signal: end the same way, so that jupyter_client sees what it would have seen
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


# --- the zygote ---------------------------------------------------------------------------------------------


def _stamp_environ(old: dict[str, str], new: dict[str, str]) -> None:
    """Write each variable of :data:`STAMPED` that ``new`` sets into this process's start-up environment (what
    ``/proc/self/environ`` shows), over the zygote's placeholder of the same length."""
    import ctypes

    wanted = [(f"{k}={old[k]}".encode(), f"{k}={new[k]}".encode()) for k in STAMPED
              if k in new and old.get(k) == PLACEHOLDER and len(new[k]) == len(PLACEHOLDER)]
    if not wanted:
        return
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()  # from field 3 (state) on
    start, end = int(fields[50 - 3]), int(fields[51 - 3])  # env_start, env_end (proc(5))
    area = b"\0" + ctypes.string_at(start, end - start)
    for before, after in wanted:
        at = area.find(b"\0" + before + b"\0")
        if at >= 0:
            ctypes.memmove(start + at, after, len(after))


def _refuse_below_address_space(limit) -> None:
    """Exit as a kernel out of memory would, if the address-space limit is below what this process already maps
    (torch and ipykernel, imported by the zygote): a kernel started from scratch would have failed importing them."""
    if not limit or limit[0] < 0:  # RLIM_INFINITY
        return
    with open("/proc/self/status") as f:
        size_kb = next((int(line.split()[1]) for line in f if line.startswith("VmSize:")), 0)
    if size_kb * 1024 > limit[0]:
        print(f"MemoryError: the memory limit ({limit[0] >> 20} MiB of address space) is below what the kernel "
              f"needs to start ({size_kb >> 10} MiB)", file=sys.stderr, flush=True)
        os._exit(1)


def _run_kernel(request: dict, fds: list[int], zygote_env: dict[str, str], zygote_path: list[str]) -> None:
    """In the forked child: become the kernel that ``python -m ipykernel_launcher ARGS`` would have started."""
    import atexit
    import importlib
    import random
    import resource
    import runpy

    code = 1
    try:
        os.setsid()  # a session and process group of its own, as jupyter_client gives the process it launches
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter has it
        _refuse_below_address_space(request.get("limits", {}).get("RLIMIT_AS"))
        for name, (soft, hard) in request.get("limits", {}).items():
            if name in LIMITS:
                resource.setrlimit(getattr(resource, name), (soft, hard))
        os.chdir(request["cwd"])
        _stamp_environ(zygote_env, request["env"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from TMPDIR
        # `python -m` puts the working directory first, then PYTHONPATH's folders, then the interpreter's own.
        own = [p for p in zygote_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        given = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *[os.path.abspath(p) for p in given],
                       *[p for p in zygote_path[1:] if p not in own and os.path.abspath(p) not in own]]
        importlib.invalidate_caches()
        # A new interpreter seeds these from the system's entropy; the zygote's would give every kernel the same.
        random.seed()
        sys.modules["torch"].seed()
        if "numpy.random" in sys.modules:
            sys.modules["numpy.random"].seed()
        # ipykernel reads JPY_PARENT_PID when it is imported (a trait's default), so the zygote's value would stay:
        # this kernel's goes on the command line. (The kernel then watches its parent, as a new kernel does.)
        parent = [f"--IPKernelApp.parent_handle={int(os.environ.get('JPY_PARENT_PID') or 0)}"]
        sys.argv = ["ipykernel_launcher", *request["args"], *parent]
        code = 0
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - report it on the kernel's stderr, as a new interpreter would
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


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):  # its group (it called setsid), and the kernel itself if it had not yet
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def serve(address: str) -> None:
    """Listen on ``address`` and fork a kernel for each stub that connects, until standard input closes; then
    remove the socket's folder."""
    import shutil

    try:
        _serve(address)
    finally:
        shutil.rmtree(os.path.dirname(address), ignore_errors=True)


def _serve(address: str) -> None:
    zygote_env, zygote_path = dict(os.environ), list(sys.path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is for the grader; the zygote ends after it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".tmp")
    import ipykernel.ipkernel  # noqa: F401 - the imports every kernel would repeat
    import ipykernel.kernelapp  # noqa: F401
    import torch  # noqa: F401

    assert not [m for m in sys.modules if m.split(".")[0] == "transformer_course"], "the zygote imported the course"
    listener.listen(64)
    os.rename(address + ".tmp", address)  # stubs connect once the imports are done
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    kernels: dict[int, socket.socket] = {}  # pid -> its stub's connection
    while True:
        for key, _events in selector.select(timeout=0.1):
            if key.fileobj is sys.stdin:
                if not os.read(sys.stdin.fileno(), 1 << 12):  # the process that started the zygote ended
                    for pid in kernels:
                        _kill(pid)
                    return
            elif key.fileobj is listener:
                connection, _ = listener.accept()
                try:
                    connection.settimeout(10)
                    request, fds = _receive(connection, with_fds=3)
                    connection.settimeout(None)
                except (OSError, ValueError):
                    request, fds = None, []
                if request is None or len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    connection.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    connection.close()
                    for other in kernels.values():
                        other.close()
                    _run_kernel(request, fds, zygote_env, zygote_path)
                for fd in fds:
                    os.close(fd)
                kernels[pid] = connection
                selector.register(connection, selectors.EVENT_READ, pid)
                try:
                    _send(connection, {"pid": pid})
                except OSError:
                    pass
            else:  # a stub's connection: closed means the stub was killed, so its kernel goes too
                try:
                    gone = not key.fileobj.recv(1 << 12)
                except OSError:
                    gone = True
                if gone:
                    selector.unregister(key.fileobj)
                    _kill(key.data)
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
                    selector.unregister(connection)
                except (KeyError, ValueError):
                    pass
                try:
                    _send(connection, {"status": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                connection.close()


# --- the side that starts kernels -----------------------------------------------------------------------------


def start(env: dict[str, str] | None = None, folder: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start a zygote with ``env`` (by default this process's environment); (the process, its socket's address).

    Its socket goes in ``folder`` (by default a new private one), which the zygote removes when it ends: when the
    returned process's standard input is closed, or this process ends.
    """
    folder = folder or tempfile.mkdtemp(prefix="kernel-zygote-")  # mode 0700: no other user can connect
    address = os.path.join(folder, "socket")
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", address],
                               stdin=subprocess.PIPE, env=env, cwd=folder,
                               # A kill of the starter's process group (kill -9 -PGID) leaves the zygote to see its
                               # standard input close, kill its kernels and remove its folder.
                               start_new_session=True)
    with open(os.path.join(folder, ZYGOTE_PID_FILE), "w") as f:  # for the stubs: a zygote still importing, or gone
        f.write(str(process.pid))
    return process, address


def stop(process: subprocess.Popen, address: str) -> None:
    """End the zygote (and any kernel it still runs) and remove its folder."""
    import shutil

    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    shutil.rmtree(os.path.dirname(address), ignore_errors=True)


class Shared:
    """The zygote a process shares between the kernels it starts: ``starter()`` (:func:`start` or a wrapper that
    sets its environment) runs at the first :meth:`address` call, and again if the zygote died; stopped at exit."""

    def __init__(self, starter=start):
        import threading

        self._starter, self._zygote, self._lock = starter, None, threading.Lock()

    def address(self) -> str | None:
        """The zygote's socket; None where kernels are not forked (:func:`available`)."""
        import atexit

        if not available():
            return None
        with self._lock:
            if self._zygote is None or self._zygote[0].poll() is not None:
                self._zygote = self._starter()
                atexit.register(stop, *self._zygote)
            return self._zygote[1]


def forking(make_manager, address: str | None):
    """``make_manager`` whose managers launch the stub (and through it a kernel forked by the zygote at
    ``address``) instead of ``python -m ipykernel_launcher``; ``make_manager`` itself where ``address`` is None."""
    import copy

    if not address:
        return make_manager

    def make():
        km = make_manager()
        spec = copy.copy(km.kernel_spec)
        if spec.argv[1:3] == ["-m", "ipykernel_launcher"]:  # another kind of kernel starts as it would
            spec.argv = [sys.executable, "-S", os.path.abspath(__file__), "--launch", address, *spec.argv[3:]]
            km._kernel_spec = spec
        return km

    return make


if __name__ == "__main__":
    role, where, *rest = sys.argv[1:]
    if role == "--serve":
        serve(where)
    else:
        sys.exit(launch(where, rest))
