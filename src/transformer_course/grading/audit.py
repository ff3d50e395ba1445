"""Runs inside the learner's kernel during grading: a Python audit hook (PEP 578) that records what the learner's
own code *does*, however it is spelled, for the review notes.

The static notes (:func:`.prepare.review_notes`) read the code's text, so ``exec("from num" + "2words import
...")`` or ``os.sys.modules["import" + "lib"]`` can hide from them. The interpreter raises an audit event for
every ``exec``/``compile``, frame access, object walk, process start and file open; the hook that the grader's
first cell installs (it cannot be removed) keeps those that the learner's code caused, once per kind, in
``$TRANSFORMER_COURSE_GRADE_RECORDS/behaviour.jsonl``. The grader turns them into review notes
(:func:`notes`). Like every review note they decide nothing: a learner can write to that file, and Python
audits no plain attribute read (``getattr(f, "__globals__")``).

Who caused an event is read from the frames on the stack. A frame is the *learner's* unless its code comes from
the course package, the standard library or an installed package (cells, and code the learner built with
``exec``, have no such file). Two rules:

- *direct* events (``exec``, ``compile``, frame access, ``gc``'s object walks, tracing, new audit hooks, code
  objects built by hand) count when the learner's code made the call itself (``inspect`` looked through), so that
  a ``namedtuple`` or a dataclass, which compile code for the learner, do not;
- *indirect* events (processes, ``ctypes``, sockets, opening the course package's data, importing the number-word
  library) count when, going out from the event, a learner's frame comes before any of the course's frames:
  ``subprocess.run`` from a cell counts, the check reading its own data does not.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import threading
from pathlib import Path

FILE_NAME = "behaviour.jsonl"
RECORDS_ENV = "TRANSFORMER_COURSE_GRADE_RECORDS"  # kernel.RECORDS_ENV (this module imports nothing of the package)
MAX_RECORDS = 200  # kinds of behaviour kept per notebook; a note names a few of each

# event -> the category of note it raises
DIRECT = {
    "exec": "exec", "compile": "exec",
    "sys._getframe": "frames", "sys._current_frames": "frames", "object.__getattr__": "frames",
    "gc.get_objects": "objects", "gc.get_referrers": "objects", "gc.get_referents": "objects",
    "sys.settrace": "tracing", "sys.setprofile": "tracing", "sys.addaudithook": "tracing",
    "function.__new__": "code", "code.__new__": "code",
}
INDIRECT = {
    "subprocess.Popen": "process", "os.system": "process", "os.exec": "process", "os.posix_spawn": "process",
    "os.spawn": "process", "os.fork": "process", "os.forkpty": "process", "pty.spawn": "process",
    "socket.connect": "network", "socket.getaddrinfo": "network",
}
# Modules whose import by the learner's code deserves a look however it is reached (the capstone's answers come
# from the number-word library; ctypes reaches memory).
WATCHED_IMPORTS = ("num2words", "ctypes")
WHAT = {
    "exec": "ran code built from strings (exec, eval or compile)",
    "frames": "reached into the interpreter's frames or code",
    "objects": "walked the interpreter's objects (gc)",
    "tracing": "traced the interpreter or added an audit hook",
    "code": "built function or code objects by hand",
    "process": "started other processes",
    "network": "used the network",
    "ctypes": "used ctypes",
    "import": "imported",  # + the modules
    "course-files": "opened the course package's files",
    "records": "opened the grader's records",
}


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return tuple(sorted(str(Path(r).resolve()) + os.sep for r in roots if r))


def install(records: str | os.PathLike | None = None) -> None:
    """Add the hook (for the life of this process) that appends to ``records/behaviour.jsonl``.

    The course package is the folder above this file's (this module imports nothing of it, so a test can load it
    by path without torch). Whatever the check cells import should be imported before: the audit cell imports
    the grader's ``check``, so that its import is not a learner's.
    """
    records = Path(records or os.environ[RECORDS_ENV])
    course = str(Path(__file__).resolve().parents[1]) + os.sep
    own_records = str(records.resolve()) + os.sep
    libraries = _library_roots()
    inspect_file = os.sep + "inspect.py"
    fd = os.open(records / FILE_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seen: set[tuple[str, str]] = set()
    local = threading.local()

    def kind(frame) -> str:
        name = frame.f_code.co_filename
        if name.startswith(course):
            return "course"
        if name.startswith("<frozen ") or name.startswith(libraries):
            return "library"
        return "learner"

    def direct(frame) -> bool:
        while frame is not None and frame.f_code.co_filename.endswith(inspect_file):
            frame = frame.f_back
        return frame is not None and kind(frame) == "learner"

    def indirect(frame) -> bool:
        while frame is not None:
            who = kind(frame)
            if who != "library":
                return who == "learner"
            frame = frame.f_back
        return False

    def record(category: str, detail: str) -> None:
        key = (category, detail[:120])
        if key in seen or len(seen) >= MAX_RECORDS:
            return
        seen.add(key)
        os.write(fd, (json.dumps({"category": key[0], "detail": key[1]}) + "\n").encode())

    def hook(event: str, args: tuple) -> None:
        if getattr(local, "busy", False):
            return
        local.busy = True
        try:
            category, detail, rule = None, "", indirect
            if event in DIRECT:
                category, rule = DIRECT[event], direct
                if event == "object.__getattr__":
                    detail = str(args[1]) if len(args) > 1 else ""
                elif category != "exec":  # the note already says exec, eval or compile
                    detail = event
            elif event in INDIRECT:
                category = INDIRECT[event]
                detail = os.path.basename(str(args[0])) if event in ("subprocess.Popen", "os.exec") and args else ""
            elif event.startswith("ctypes."):
                category, detail = "ctypes", event
            elif event == "import" and args and str(args[0]).split(".")[0] in WATCHED_IMPORTS:
                category, detail = "import", str(args[0]).split(".")[0]
            elif event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
                path = os.path.abspath(os.fsdecode(args[0]))
                if path.startswith(own_records):
                    category, detail = "records", os.path.basename(path)
                elif path.startswith(course) and not path.endswith((".py", ".pyc")):
                    category, detail = "course-files", path[len(course):]
            if category is not None and rule(sys._getframe(1)):
                record(category, detail)
        except Exception:  # noqa: BLE001 - the hook must never break the learner's code
            pass
        finally:
            local.busy = False

    sys.addaudithook(hook)


def notes(text: str) -> list[str]:
    """The review notes of a run's ``behaviour.jsonl`` text: one per category, naming up to three details."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        try:
            item = json.loads(line)
            category, detail = item["category"], str(item["detail"])
        except (ValueError, KeyError, TypeError):
            continue
        if category in WHAT and detail not in found.setdefault(category, []):
            found[category].append(detail)
    out = []
    for category, details in found.items():
        named = [d for d in details if d]
        shown = ", ".join(named[:3]) + (", ..." if len(named) > 3 else "")
        if category == "import":
            out.append(f"imported {shown}")
        else:
            out.append(WHAT[category] + (f" ({shown})" if named else ""))
    return out
