"""Running one prepared notebook: pytest + nbval in a subprocess, with time and memory limits.

Each notebook runs in its own temporary folder (the kernel's working directory holds only the
notebook), its own pytest process (a new session, so the whole process group can be killed) and its
own fresh kernel, started with this very interpreter (``--nbval-current-env``); on Linux, forked from this
process's zygote, which imported torch and ipykernel once (:mod:`.kernel_zygote`). The environment is
pinned for determinism (one thread, ``PYTHONHASHSEED=0``, a private empty IPython profile so no
startup file runs). After the run, every process that still carries the run's token is killed, the
kernel and anything it started included.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import nbformat

from transformer_course.checks.core import MISTAKE_ID, MISTAKE_ID_MAX
from transformer_course.grading import audit, kernel_zygote, plugin
from transformer_course.grading.kernel import CASES_ENV, RECORDS_ENV
from transformer_course.grading.limits import Limits
from transformer_course.grading.messages import sanitize
from transformer_course.grading.plugin import SPEC_ENV
from transformer_course.grading.replay import Confirmation, confirm, read_regular_file
from transformer_course.grading.snapshot import Snapshot
from transformer_course.grading.snapshot import environment as snapshot_environment

RUN_ENV = "TRANSFORMER_COURSE_GRADE_RUN"
# pytest with the grading plugin loaded from its file, so the pytest process does not import the course
# package (and torch): python -c BOOT PLUGIN_FILE PYTEST_ARGS...
BOOT = (
    "import importlib.util, sys\n"
    # nbval imports nbformat, which imports jsonschema, whose IRI format checker (rfc3987-syntax 1.1) compiles
    # about 40 grammars at import: 2 s of CPU per notebook graded. The notebook schema has no IRI field, so this
    # process goes without that checker (an import that fails is one jsonschema expects).
    "sys.modules.setdefault('rfc3987_syntax', None)\n"
    "spec = importlib.util.spec_from_file_location('transformer_course_grading_plugin', sys.argv[1])\n"
    "plugin = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = plugin\n"
    "spec.loader.exec_module(plugin)\n"
    "import pytest\n"
    "sys.exit(pytest.main(sys.argv[2:], plugins=[plugin]))\n"
)
MAX_RESULT_BYTES = 64 * 2**20  # the plugin's record of the cells (a few kB in practice)
MAX_BEHAVIOUR_BYTES = 64 * 2**10  # the audit hook's records: at most audit.MAX_RECORDS short lines
# Replays run in this process, one at a time: some checkers seed torch's global generator.
_REPLAY_LOCK = threading.Lock()


# What the plugin saw of a cell: its execute reply was ok or an error; it ran past the cell time limit; the
# kernel died during it; it was never sent to the kernel; or the run ended without a reply ("lost").
CellState = Literal["ok", "error", "timeout", "died", "not_run", "lost"]
# Why the kernel ended: a cell's timeout, a death during a cell or after one, or it stopped answering.
EndCause = Literal["timeout", "died", "died_after", "stopped"]


@dataclass
class CellRecord:
    state: CellState
    ename: str = ""
    evalue: str = ""
    confirm: Confirmation | None = None  # for a check cell whose reply was ok: the replay outside the kernel
    mistake: str = ""  # for a check cell that failed: the id of the known mistake it recognised, if any

    @classmethod
    def from_json(cls, data) -> CellRecord:
        """From the plugin's JSON; anything unexpected (the file is written by a process we cannot trust
        completely) reads as a lost cell, and a mistake id that is not a well-formed slug as none."""
        if not isinstance(data, dict) or data.get("state") not in get_args(CellState):
            return cls("lost")
        mistake = data.get("mistake")
        well_formed = isinstance(mistake, str) and MISTAKE_ID.fullmatch(mistake) and len(mistake) <= MISTAKE_ID_MAX
        return cls(data["state"], str(data.get("ename", "")), str(data.get("evalue", "")),
                   mistake=mistake if well_formed else "")


@dataclass(frozen=True)
class KernelEnd:
    cell: str | None  # the cell during or after which it happened
    cause: EndCause

    @classmethod
    def from_json(cls, data) -> KernelEnd | None:
        if not isinstance(data, dict) or data.get("cause") not in get_args(EndCause):
            return None
        return cls(data.get("cell"), data["cause"])


@dataclass
class RunResult:
    cells: dict[str, CellRecord] = field(default_factory=dict)  # by cell id
    running: str | None = None  # the cell that was running when the run ended
    kernel_end: KernelEnd | None = None
    setup_error: str | None = None
    setup_out_of_memory: bool = False  # the kernel did not start because memory ran out (its stderr said so)
    finished: bool = False
    killed: bool = False  # the notebook time limit ran out
    exit_code: int | None = None
    log_tail: str = ""
    package_changes: list[str] = field(default_factory=list)  # in the run's copy of the course package
    behaviour: list[str] = field(default_factory=list)  # review notes from what the learner's code did (audit.py)


def _private_folders(root: Path) -> dict[str, str]:
    """Folders under ``root`` for IPython, Jupyter, matplotlib and temporary files, made empty."""
    for sub in ("ipython", "jupyter", "runtime", "mpl", "tmp"):
        (root / sub).mkdir()
    return dict(IPYTHONDIR=str(root / "ipython"), JUPYTER_CONFIG_DIR=str(root / "jupyter"),
                JUPYTER_RUNTIME_DIR=str(root / "runtime"), MPLCONFIGDIR=str(root / "mpl"),
                TMPDIR=str(root / "tmp"))  # the kernel's sockets and anything the notebook writes go away with the run


def _pinned_environment() -> dict[str, str]:
    """This process's environment without what would change a run, and with what keeps runs alike pinned."""
    env = {k: v for k, v in os.environ.items()  # the grader's own variables (run, cases seed) start with the prefix
           if not k.startswith(("TRANSFORMER_COURSE_GRADE", "PYTEST_", "JPY_", "IPY"))
           and k not in ("PYTHONSTARTUP", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR",
                         kernel_zygote.ADDRESS_ENV)}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", JUPYTER_PLATFORM_DIRS="1",
               MPLBACKEND="agg")
    return env


def _environment(root: Path, token: str, spec: Path, records: Path, package: Path,
                 cases_seed: int | None) -> dict[str, str]:
    env = _pinned_environment()
    env.update(
        **_private_folders(root),
        **{SPEC_ENV: str(spec), RECORDS_ENV: str(records), RUN_ENV: token},
        **snapshot_environment(package),
    )
    zygote = _ZYGOTE.address()
    if zygote:
        env[kernel_zygote.ADDRESS_ENV] = zygote
    if cases_seed is not None:
        env[CASES_ENV] = str(cases_seed)
    return env


def _start_zygote():
    root = Path(tempfile.mkdtemp(prefix="transformer-course-zygote-"))
    # As a notebook's processes get it, but with no notebook's package on PYTHONPATH (the zygote imports nothing of
    # the course) and a placeholder run token that each kernel overwrites with its own.
    env = {**_pinned_environment(), **_private_folders(root), RUN_ENV: kernel_zygote.PLACEHOLDER}
    return kernel_zygote.start(env, str(root))  # it removes root when it ends


# One zygote per grading process, started before the first notebook's kernel (kernel_zygote.py): kernels forked
# from it skip importing torch and ipykernel.
_ZYGOTE = kernel_zygote.Shared(_start_zygote)


def run_notebook(nb: nbformat.NotebookNode, name: str, checks: dict[str, str], limits: Limits,
                 snapshot: Snapshot | None = None) -> RunResult:
    """Execute ``nb`` (saved as ``name``) with pytest + nbval; what happened to each cell, by id.

    The run's processes import the course package from a copy of ``snapshot`` (by default, the package as it
    is now) of their own; what changed in that copy by the end of the run is in ``package_changes``.
    """
    snapshot = snapshot or Snapshot.of()
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="transformer-course-grade-") as tmp:
        root = Path(tmp)
        work, records = root / "notebook", root / "records"
        work.mkdir()
        records.mkdir()
        package = snapshot.write(root / "package")
        plugin_file = package / "transformer_course" / "grading" / Path(plugin.__file__).name
        nbformat.write(nb, work / name)
        (root / "pytest.ini").write_text("[pytest]\n")
        spec, result_file = root / "spec.json", root / "result.json"
        spec.write_text(json.dumps({"checks": checks, "records": str(records), "result": str(result_file),
                                    "memory_limit_mb": limits.memory_limit_mb}))
        command = [
            sys.executable, "-c", BOOT, str(plugin_file), "-c", str(root / "pytest.ini"), "--rootdir", str(work),
            "-p", "nbval.plugin", "-p", "no:cacheprovider",
            "-q", "--color=no", "--nbval-lax", "--nbval-current-env",
            "--nbval-cell-timeout", f"{limits.cell_timeout:g}", name,
        ]
        result = RunResult()
        log_path = root / "pytest.log"
        with open(log_path, "wb") as log:
            env = _environment(root, token, spec, records, package, limits.cases_seed)
            process = subprocess.Popen(command, cwd=work, env=env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            try:
                result.exit_code = process.wait(timeout=limits.notebook_timeout)
            except subprocess.TimeoutExpired:
                result.killed = True
                _kill_group(process.pid)
                process.wait()
        try:
            data = json.loads(read_regular_file(result_file, MAX_RESULT_BYTES))
        except (OSError, ValueError):  # missing, unreadable, or not a regular file: the kernel's doing
            data = {}
        _kill_leftovers(token, data.get("kernel_pid"))
        result.package_changes = snapshot.changes(package)  # once nothing of the run is left to change it
        if isinstance(data, dict):
            result.cells = {str(k): CellRecord.from_json(v) for k, v in (data.get("cells") or {}).items()}
            result.running = data.get("running")
            result.kernel_end = KernelEnd.from_json(data.get("kernel_end"))
            result.setup_error = data.get("setup_error")
            result.setup_out_of_memory = bool(data.get("setup_out_of_memory"))
            if data.get("setup_report"):  # the grader's log keeps every attempt and the kernel's stderr
                print(f"kernel start failed for {name}:\n{data['setup_report']}", file=sys.stderr, flush=True)
            result.finished = bool(data.get("finished"))
        try:
            behaviour = read_regular_file(records / audit.FILE_NAME, MAX_BEHAVIOUR_BYTES)
        except (OSError, ValueError):  # none recorded, or not a regular file: the kernel's doing
            behaviour = b""
        result.behaviour = audit.notes(behaviour.decode("utf-8", "replace"))
        for cell_id, exercise in checks.items():
            cell = result.cells.get(cell_id)
            if cell is not None and cell.state == "ok":
                with _REPLAY_LOCK:
                    cell.confirm = confirm(exercise, records / f"{exercise}.pt", limits.cases_seed)
        try:
            result.log_tail = read_regular_file(log_path, 4000, tail=True).decode("utf-8", "replace")
        except (OSError, ValueError):
            result.log_tail = ""
        return _scrub(result, root)


def _scrub(result: RunResult, root: Path) -> RunResult:
    """Messages without this run's temporary paths."""

    def clean(text: str) -> str:
        return sanitize(text, folders={str(root): "<grading folder>"}, limit=None)

    for cell in result.cells.values():
        cell.ename, cell.evalue = clean(cell.ename), clean(cell.evalue)
        if cell.confirm is not None:
            cell.confirm = dataclasses.replace(cell.confirm, message=clean(cell.confirm.message))
    if result.setup_error is not None:
        result.setup_error = clean(result.setup_error)
    return result


# --- processes -----------------------------------------------------------------------------------------


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _carries(pid: int, token: str) -> bool:
    try:
        return f"{RUN_ENV}={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _kill_leftovers(token: str, kernel_pid) -> None:
    """Kill the kernel's process group and, on Linux, every process that still carries ``token``."""
    proc = Path("/proc")
    if isinstance(kernel_pid, int) and kernel_pid > 1:
        if not proc.is_dir() or _carries(kernel_pid, token):
            _kill_group(kernel_pid)  # jupyter_client starts the kernel in a session of its own
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if re.fullmatch(r"\d+", entry.name) and int(entry.name) != os.getpid() and _carries(int(entry.name), token):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
