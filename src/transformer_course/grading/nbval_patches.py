"""Every replacement of nbval internals, in one place, checked before anything is replaced.

nbval's options and pytest's hooks cover most of what the course needs (cell timeouts, output
sanitising, cell names: see ``conftest.py``), but not these:

- starting the kernel: nbval 0.11 starts it over TCP (a port can be taken before the kernel binds it)
  and sends its stderr to /dev/null; :func:`start_kernels_with` makes it use ``kernel_start``;
- in the grader, the execute *reply* of each cell (``ok``, or the exception's name and value: nbval
  only compares outputs), a timeout told apart from a dead kernel within a second, and the kernel
  itself, for its pid: :func:`observe_cells` reports them to an observer;
- comparing outputs without PyTorch's own log lines on stderr (a CUDA build of torch on a machine without a
  GPU logs "No CUDA runtime is found" when ``torch.utils.benchmark`` is imported): they say something about
  the machine, not the notebook; :func:`compare_without_torch_log_lines`.

These are internals, so ``pyproject.toml`` pins nbval to the range below, and :func:`require` fails with
a message naming what is missing when an installed nbval no longer has one of them. Both patching
functions call it first.

Imports nothing from the course package (the grader's plugin loads it by path, without torch).
"""

from __future__ import annotations

import inspect
import os
import re
import time
from collections.abc import Callable
from queue import Empty
from typing import Protocol

SUPPORTED = ">=0.11,<0.12"  # the same range as pyproject.toml's dependency (a test keeps them equal)

# (module, attribute path, parameters it must accept): what the replacements call or stand in for.
NEEDED = [
    ("nbval.kernel", "start_new_kernel", ("startup_timeout", "kernel_name")),
    ("nbval.kernel", "KernelManager", ()),
    ("nbval.kernel", "NbvalKernelspecManager", ()),
    ("nbval.kernel", "RunningKernel.execute_cell_input", ("cell_input", "allow_stdin")),
    ("nbval.kernel", "RunningKernel.await_reply", ("msg_id", "timeout")),
    ("nbval.kernel", "RunningKernel.get_message", ("stream", "timeout")),
    ("nbval.kernel", "RunningKernel.is_alive", ()),
    ("nbval.plugin", "IPyNbFile.setup", ()),
    ("nbval.plugin", "IPyNbCell.compare_outputs", ("test", "ref", "skip_compare")),
]


class NbvalChanged(RuntimeError):
    """The installed nbval lacks something the course replaces."""


def require(modules: dict | None = None) -> None:
    """Raise :class:`NbvalChanged` unless every entry of :data:`NEEDED` exists with its parameters.

    ``modules`` maps module names to modules (for tests); by default they are imported.
    """
    import importlib

    problems = []
    for module_name, path, parameters in NEEDED:
        try:
            target = modules[module_name] if modules is not None else importlib.import_module(module_name)
            for part in path.split("."):
                target = getattr(target, part)
        except (AttributeError, KeyError, ImportError):
            problems.append(f"{module_name}.{path} is missing")
            continue
        if parameters:
            accepted = inspect.signature(target).parameters
            absent = [p for p in parameters if p not in accepted]
            if absent:
                problems.append(f"{module_name}.{path} no longer takes {', '.join(absent)}")
    if problems:
        version = _version()
        raise NbvalChanged(f"nbval {version} is not the nbval the course was written for ({SUPPORTED}): "
                           + "; ".join(problems) + f". Install a supported one: pip install 'nbval{SUPPORTED}'")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nbval")
    except PackageNotFoundError:
        return "(not installed)"


# --- the replacements ---------------------------------------------------------------------------------


def start_kernels_with(start_kernel: Callable) -> None:
    """Make nbval start its kernels with ``start_kernel(make_manager, startup_timeout=..., **kwargs)``.

    ``make_manager()`` gives a new, unstarted manager of nbval's kind; see ``kernel_start.start_kernel``.
    """
    require()
    from nbval import kernel as nbk

    def start_new_kernel(startup_timeout=60, kernel_name="python", **kwargs):
        def make_manager():
            return nbk.KernelManager(kernel_name=kernel_name, kernel_spec_manager=nbk.NbvalKernelspecManager())

        return start_kernel(make_manager, startup_timeout=startup_timeout, **kwargs)

    nbk.start_new_kernel = start_new_kernel


POLL_SECONDS = 0.25  # how often a running cell's kernel is checked: alive, and within its time limit
WAIT_FACTOR = 3  # a cell that waits instead of computing (a sleep, a blocked read) stops at this many times its limit


FORKED_PID_FILE = "kernel.pid"  # kernel_zygote.PID_FILE (this module imports nothing of the package)


def kernel_pid(kernel) -> int | None:
    """The process id of nbval's ``RunningKernel``'s kernel, or None where its manager does not say.

    For a kernel forked by a zygote (``kernel_zygote``), the process the manager launched is a stub that waits for
    the kernel; the kernel's pid is in the file the stub wrote beside the connection file. It is read once, at the
    first call (when the kernel has started, before any cell ran: the kernel could rewrite the file later).
    """
    if getattr(kernel, "_course_kernel_pid", None) is None:
        kernel._course_kernel_pid = _kernel_pid(kernel)
    return kernel._course_kernel_pid


def _kernel_pid(kernel) -> int | None:
    try:
        with open(os.path.join(os.path.dirname(kernel.km.connection_file), FORKED_PID_FILE)) as f:
            return int(f.read())
    except (AttributeError, OSError, TypeError, ValueError):
        pass
    try:
        return int(kernel.km.provisioner.process.pid)
    except (AttributeError, TypeError, ValueError):
        return None


def process_tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``, its children that ended, and those running."""
    import psutil

    process = psutil.Process(pid)
    times = process.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in process.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.Error:  # it ended meanwhile: its time moves to children_* at the next reading
            continue
        total += child_times.user + child_times.system
    return total


class CellClock:
    """How much of one cell's time limit is used.

    A cell's limit counts the CPU time its kernel (and the processes it started) spends from the moment the
    cell is sent, not wall-clock time: on a machine busy with other notebooks, other graders or other users a
    cell gets less of the CPU per second, and its grade must not depend on that. A cell that waits instead of
    computing uses no CPU time, so it also stops once ``WAIT_FACTOR`` times the limit has passed on the wall
    clock. Where the kernel's CPU time cannot be read (no pid, no psutil, the process gone), the wall clock
    alone counts, against the limit itself.
    """

    def __init__(self, pid: int | None, limit: float, *, cpu_seconds: Callable[[int], float] | None = None,
                 now: Callable[[], float] = time.monotonic):
        self.limit, self.pid, self.now = limit, pid, now
        self.cpu_seconds = cpu_seconds or process_tree_cpu_seconds
        self.started = now()
        self.cpu_started = self._cpu()

    def _cpu(self) -> float | None:
        if self.pid is None:
            return None
        try:
            return self.cpu_seconds(self.pid)
        except Exception:  # noqa: BLE001 - no psutil, no such process, no permission: the wall clock counts
            return None

    def expired(self) -> bool:
        """Whether the cell has used its limit: CPU time, or the wall-clock time a waiting cell is allowed."""
        wall = self.now() - self.started
        if self.cpu_started is None:
            return wall >= self.limit
        cpu = self._cpu()
        if cpu is None:
            return wall >= self.limit
        return cpu - self.cpu_started >= self.limit or wall >= WAIT_FACTOR * self.limit


class KernelDied(RuntimeError):
    """The kernel process ended while a cell was running."""


class CellObserver(Protocol):
    """What :func:`observe_cells` reports; ``msg_id`` identifies one cell's execute request."""

    def kernel_started(self, kernel) -> None: ...  # nbval's RunningKernel (``kernel.km``: its manager)
    def sent(self, msg_id: str) -> None: ...
    def replied(self, msg_id: str, content: dict) -> None: ...  # the execute reply's content
    def timed_out(self, msg_id: str) -> None: ...
    def died(self, msg_id: str) -> None: ...


def observe_cells(observer: CellObserver) -> None:
    """Report every execute request, its reply, a timeout or a dead kernel, and each started kernel."""
    require()
    from nbval import kernel as nbk
    from nbval import plugin as nbp

    execute_cell_input = nbk.RunningKernel.execute_cell_input
    setup = nbp.IPyNbFile.setup

    def execute_and_report(self, cell_input, allow_stdin=None):
        msg_id = execute_cell_input(self, cell_input, allow_stdin=allow_stdin)
        observer.sent(msg_id)
        return msg_id

    def await_reply(self, msg_id, timeout=None):
        """nbval's await_reply (it waits for the reply on the shell channel), checking four times a second that
        the kernel is alive (nbval alone waits for the whole cell timeout) and within its limit (a
        :class:`CellClock`), and reporting the reply."""
        clock = None if timeout is None else CellClock(kernel_pid(self), timeout)
        while True:
            if clock is not None and clock.expired():
                observer.timed_out(msg_id)
                raise Empty
            try:
                msg = self.get_message(stream="shell", timeout=POLL_SECONDS)
            except Empty:
                if not self.is_alive():
                    observer.died(msg_id)
                    raise KernelDied("the kernel died") from None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                observer.replied(msg_id, msg["content"])
                if msg["content"].get("status") == "aborted":
                    raise RuntimeError("Kernel aborted execution request")
                return

    def setup_and_report(self):
        setup(self)
        observer.kernel_started(self.kernel)

    nbk.RunningKernel.execute_cell_input = execute_and_report
    nbk.RunningKernel.await_reply = await_reply
    nbp.IPyNbFile.setup = setup_and_report


# "W1126 12:04:52.990000 24743 torch/utils/cpp_extension.py:183] No CUDA runtime is found, ...": torch's log format.
TORCH_LOG_LINE = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ torch/\S+:\d+\] .*(\n|$)", re.MULTILINE)


def without_torch_log_lines(outputs: list) -> list:
    """A cell's ``outputs`` with PyTorch's log lines taken out of its stderr; a stderr left empty is dropped."""
    kept = []
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            text = TORCH_LOG_LINE.sub("", output.get("text", ""))
            if not text:
                continue
            output = type(output)({**output, "text": text})  # a NotebookNode again: nbval reads attributes
        kept.append(output)
    return kept


def compare_without_torch_log_lines() -> None:
    """Make nbval compare a cell's outputs with its stored ones after :func:`without_torch_log_lines` on both."""
    require()
    from nbval import plugin as nbp

    compare_outputs = nbp.IPyNbCell.compare_outputs

    def compare(self, test, ref, skip_compare=None):
        return compare_outputs(self, without_torch_log_lines(test), without_torch_log_lines(ref), skip_compare)

    nbp.IPyNbCell.compare_outputs = compare
