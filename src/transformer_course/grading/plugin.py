"""The pytest plugin of a grading run (pytest + nbval, one subprocess per submitted notebook).

nbval executes the prepared notebook cell by cell in a fresh kernel; this plugin records, for every
cell (by cell id), what the kernel's *execute reply* said (``ok``, or ``error`` with the exception's
name and value), whether the cell timed out, and whether the kernel died. It rewrites a small JSON
file after every cell, so a run that is killed half-way still tells the grader what happened up to
that point. It also makes nbval notice a dead kernel within a second (nbval alone waits for the whole
cell timeout) and caps the address space of this process and of the kernel it starts (``RLIMIT_AS``).

The grader loads this file by path (``pytest.main(args, plugins=[module])``), not as
``transformer_course.grading.plugin``: importing the package would import torch, which this process
does not need. So it imports nothing from the course package. ``pytest -p
transformer_course.grading.plugin`` works too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import stat
from pathlib import Path

import pytest

SPEC_ENV = "TRANSFORMER_COURSE_GRADE_SPEC"
MISTAKE_SUFFIX = ".mistake"  # as grading/kernel.py writes it (this file imports nothing from the package)
MISTAKE_BYTES = 100


class _Run:
    def __init__(self, spec: dict):
        self.checks: dict[str, str] = spec["checks"]  # cell id -> exercise id
        self.records = Path(spec["records"])
        self.result = Path(spec["result"])
        self.cells: dict[str, dict] = {}
        self.current: dict | None = None
        self.kernel_pid: int | None = None
        self.kernel_end: dict | None = None  # {"cell": id, "cause": "timeout" | "died" | "died_after" | "stopped"}
        self.last_cell: str | None = None  # the last cell that ran
        self.setup_error: str | None = None
        self.setup_report: str | None = None  # every start attempt, with the kernel's stderr
        self.setup_out_of_memory = False
        self.kernel = None  # nbval's RunningKernel

    def write(self, finished: bool = False) -> None:
        data = {
            "kernel_pid": self.kernel_pid,
            "running": self.current["id"] if self.current else None,
            "cells": self.cells,
            "kernel_end": self.kernel_end,
            "setup_error": self.setup_error,
            "setup_report": self.setup_report,
            "setup_out_of_memory": self.setup_out_of_memory,
            "finished": finished,
        }
        tmp = self.result.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.result)


RUN: _Run | None = None


# --- nbval, made to report execute replies and dead kernels ----------------------------------------


def _sibling(name: str):
    """The module ``name``.py beside this file, loaded by path (importing the package would import torch)."""
    spec = importlib.util.spec_from_file_location(f"_course_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KERNEL_START = _sibling("kernel_start")
KERNEL_ZYGOTE = _sibling("kernel_zygote")
NBVAL_PATCHES = _sibling("nbval_patches")


class _Observer:
    """Keeps what nbval_patches reports about the running cell in ``RUN.current``."""

    def _current(self, msg_id: str) -> dict:
        current = RUN.current if RUN is not None else None
        return current if current is not None and current.get("msg_id") == msg_id else {}

    def kernel_started(self, kernel) -> None:
        RUN.kernel = kernel
        RUN.kernel_pid = NBVAL_PATCHES.kernel_pid(kernel)  # None where the manager does not say: it only helps clean up
        RUN.write()

    def sent(self, msg_id: str) -> None:
        if RUN is not None and RUN.current is not None:
            RUN.current["msg_id"] = msg_id

    def replied(self, msg_id: str, content: dict) -> None:
        self._current(msg_id)["reply"] = {"status": content.get("status"), "ename": str(content.get("ename", "")),
                                          "evalue": str(content.get("evalue", ""))[:2000]}

    def timed_out(self, msg_id: str) -> None:
        self._current(msg_id)["timed_out"] = True

    def died(self, msg_id: str) -> None:
        self._current(msg_id)["died"] = True


# --- pytest hooks ------------------------------------------------------------------------------------


FILE_SIZE_LIMIT = 2**30  # bytes per file written by the kernel


def _limit(which: int, value: int) -> None:
    """Set the soft and the hard limit (so the kernel cannot raise it again) to ``value``, if lower.

    A ``value`` of 0 for RLIMIT_AS means no memory limit.
    """
    if value == 0 and which == resource.RLIMIT_AS:
        return
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def _start_kernel(make_manager, **kwargs):
    """kernel_start.start_kernel; the kernel forked by the grader's zygote when the grader started one."""
    forked = KERNEL_ZYGOTE.forking(make_manager, os.environ.get(KERNEL_ZYGOTE.ADDRESS_ENV))
    return KERNEL_START.start_kernel(forked, **kwargs)


def pytest_configure(config):
    global RUN
    path = os.environ.get(SPEC_ENV)
    if not path:
        return
    spec = json.loads(Path(path).read_text())
    # Inherited by the kernel this process starts: an answer that allocates without bound gets a
    # MemoryError instead of exhausting the machine; one that writes a huge file is stopped.
    _limit(resource.RLIMIT_AS, int(spec.get("memory_limit_mb") or 0) * 2**20)
    _limit(resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT)
    _limit(resource.RLIMIT_CORE, 0)
    RUN = _Run(spec)
    NBVAL_PATCHES.start_kernels_with(_start_kernel)  # private ipc, retried starts, stderr kept
    NBVAL_PATCHES.observe_cells(_Observer())
    RUN.write()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    cell = getattr(item, "cell", None)
    if RUN is None or cell is None:
        yield
        return
    cell_id = cell.get("id")
    exercise = RUN.checks.get(cell_id)
    if exercise:
        (RUN.records / f"{exercise}.pt").unlink(missing_ok=True)
        (RUN.records / f"{exercise}{MISTAKE_SUFFIX}").unlink(missing_ok=True)
    RUN.current = current = {"id": cell_id, "msg_id": None}
    RUN.write()
    outcome = yield
    RUN.current = None
    result = _classify(current, outcome.excinfo)
    kernel = getattr(item.parent, "kernel", None)
    if RUN.kernel_end is None and not (kernel and kernel.is_alive()):
        if result["state"] == "not_run":  # it died between cells (a thread of the learner's, say)
            RUN.kernel_end = {"cell": RUN.last_cell, "cause": "died_after"}
        else:
            cause = {"timeout": "timeout", "died": "died"}.get(result["state"], "stopped")
            RUN.kernel_end = {"cell": cell_id, "cause": cause}
    if result["state"] != "not_run":
        RUN.last_cell = cell_id
    if exercise and result["state"] == "error":
        mistake = _read_mistake(RUN.records / f"{exercise}{MISTAKE_SUFFIX}")
        if mistake:
            result["mistake"] = mistake  # validated by the grader (execute.CellRecord)
    RUN.cells[cell_id] = result
    RUN.write()


def _read_mistake(path: Path) -> str:
    """The id a failed check wrote (grading/kernel.py), read now, before a later cell can change it; '' if there
    is none, or if the path is not a regular file (opened without blocking or following a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        data = os.read(fd, MISTAKE_BYTES)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.decode("ascii", "replace").strip()


def _classify(current: dict, excinfo) -> dict:
    reply = current.get("reply")
    if reply is not None:
        if reply["status"] == "ok":
            return {"state": "ok"}
        return {"state": "error", "ename": reply["ename"], "evalue": reply["evalue"]}
    if current.get("timed_out"):
        return {"state": "timeout"}
    if current.get("died"):
        return {"state": "died"}
    if current.get("msg_id") is None:
        return {"state": "not_run"}
    error = excinfo[1] if excinfo else None
    return {"state": "lost", "evalue": str(error).splitlines()[0][:200] if error else ""}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if RUN is not None and report.when == "setup" and report.failed and RUN.setup_error is None:
        error = call.excinfo.value if call.excinfo else None
        RUN.setup_error = f"{type(error).__name__}: {error}".splitlines()[0][:300] if error else "setup failed"
        if isinstance(error, KERNEL_START.KernelStartError):
            RUN.setup_report = error.report()
            RUN.setup_out_of_memory = error.out_of_memory
        RUN.write()


def pytest_sessionfinish(session, exitstatus):
    if RUN is None:
        return
    RUN.write(finished=True)
    kernel = RUN.kernel
    if kernel is not None and hasattr(kernel, "km"):  # nbval leaves a kernel that died unstopped
        try:
            kernel.kc.stop_channels()
            kernel.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001 - best effort: the grader kills what is left anyway
            pass
