"""The journal of a grading run: nothing finished is lost when the run dies, and ``grade --resume`` goes on.

``transformer-course grade --out grades.csv`` appends one JSON line to ``grades.csv.journal`` as each notebook
finishes (its rows and the SHA-256 of the submission it graded), flushed and synced to disk before the next
notebook's rows count as done; the first line says what the run is (the release, the course package, the limits,
the students chosen). ``--resume`` reads the journal back: a notebook whose submission is unchanged keeps its
rows and is not run again; the rest are graded; the gradebook is the one an uninterrupted run writes (the rows
are sorted, and grading is deterministic). A run that differs (another release, package or limits) is refused,
not mixed in. The last line of a run killed while writing is cut short: it is ignored and that notebook graded
again. The CSV is written once every notebook is done, and the journal removed after it.

A learner's code runs as the grader's user and can kill the grader itself. So the journal also records each
notebook as it starts: a notebook that was running when a run died is graded first, alone, by the next
``--resume``; one that was running alone when a run died gets error rows instead of a third run. A loop of
``--resume`` therefore always ends (the instructor guide's "A run that dies").

Every process of a run (pytest, the kernels, what they start) carries the run's id in its environment
(``RUN_ENV``), and the journal the id of every run that wrote to it, so that ``--resume`` can first stop what
the killed runs left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import astuple, dataclass, field
from pathlib import Path

from transformer_course.grading.collect import GradingError
from transformer_course.grading.gradebook import COLUMNS, STATUSES, GradeRow

RUN_ENV = "TRANSFORMER_COURSE_JOURNAL_RUN"
VERSION = 1

Unit = tuple[str, str]  # (student, notebook)


def journal_path(out: str | Path) -> Path:
    """Where the journal of a run writing the gradebook ``out`` lives."""
    out = Path(out)
    return out.with_name(out.name + ".journal")


def submission_digest(data) -> str:
    """What a unit graded: the SHA-256 of the notebook's bytes, ``missing``, or why it could not be read."""
    if data is None:
        return "missing"
    if isinstance(data, bytes | bytearray):
        return hashlib.sha256(data).hexdigest()
    return f"unreadable: {data}"


def _row(values) -> GradeRow:
    if not isinstance(values, list) or len(values) != len(COLUMNS):
        raise ValueError
    row = GradeRow(*values)
    if not all(isinstance(getattr(row, c), str) for c in ("student", "notebook", "exercise", "title", "message",
                                                           "mistake")) \
            or not all(type(getattr(row, c)) is int for c in ("points", "max_points")) or row.status not in STATUSES:
        raise ValueError
    return row


@dataclass
class Record:
    """What earlier runs of the journal did: the units they finished, unit -> (submission digest, rows); and for
    the units they started but never finished (the run died), how many times, and how many times alone."""

    done: dict[Unit, tuple[str, list[GradeRow]]] = field(default_factory=dict)
    deaths: Counter = field(default_factory=Counter)
    deaths_alone: Counter = field(default_factory=Counter)
    runs: list[str] = field(default_factory=list)  # the ids of the runs that wrote it, first to last


class Journal:
    """An append-only record of the units a run finished. ``start`` before grading, ``record`` each unit."""

    def __init__(self, path: str | Path, resume: bool = False):
        self.path = Path(path)
        self.resume = resume
        self._file = None
        self._lock = threading.Lock()  # units start in the grader's worker threads
        self.notes: list[str] = []

    def start(self, run: dict, run_id: str) -> Record:
        """Open the journal for the run described by ``run`` (JSON-able); with ``resume``, return what the
        earlier runs with the same description did. Raises GradingError if the journal is from another run."""
        record = Record()
        if self.resume and self.path.exists():
            header, record = self._read()
            if header.get("run") != run:
                changed = sorted(k for k in set(run) | set(header.get("run") or {})
                                 if run.get(k) != (header.get("run") or {}).get(k))
                raise GradingError(f"--resume: {self.path} is the journal of another run (its {', '.join(changed)} "
                                   "differ); grade again without --resume, or with what that run used")
            for earlier in record.runs:
                stop_leftovers(earlier)
            self.notes.append(f"resumed from {self.path}: {len(record.done)} notebook(s) already graded")
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            self._write({"resumed": run_id})
        else:
            if self.resume:
                self.notes.append(f"--resume: no journal at {self.path}; graded everything")
            elif self.path.exists():
                self.notes.append(f"replaced the journal of an earlier run at {self.path} (--resume keeps its rows)")
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
            self._write({"journal": VERSION, "id": run_id, "run": run})
        return record

    def _read(self) -> tuple[dict, Record]:
        lines = self.path.read_text(encoding="utf-8", errors="replace").split("\n")
        try:
            header = json.loads(lines[0])
            if not isinstance(header, dict) or header.get("journal") != VERSION:
                raise ValueError
        except ValueError:
            raise GradingError(f"--resume: {self.path} is not a grading journal") from None
        record = Record(runs=[header.get("id")])
        started: list[tuple[Unit, bool]] = []
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                if "resumed" in entry:
                    record.runs.append(entry["resumed"])
                    continue
                if "started" in entry:
                    student, notebook = entry["started"]
                    if isinstance(student, str) and isinstance(notebook, str):
                        started.append(((student, notebook), entry.get("alone") is True))
                    continue
                unit = (entry["student"], entry["notebook"])
                if not all(isinstance(x, str) for x in unit) or not isinstance(entry["submission"], str):
                    raise ValueError
                record.done[unit] = (entry["submission"], [_row(r) for r in entry["rows"]])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by the kill: that notebook is graded again
        for unit, alone in started:  # every run ends what it starts, unless it dies
            if unit not in record.done:
                record.deaths[unit] += 1
                record.deaths_alone[unit] += alone
        return header, record

    def _write(self, entry: dict) -> None:
        with self._lock:
            self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def started(self, unit: Unit, alone: bool) -> None:
        """A unit's notebook is about to run (``alone``: nothing else runs beside it)."""
        self._write({"started": list(unit), "alone": alone})

    def record(self, unit: Unit, submission: str, rows: Iterable[GradeRow]) -> None:
        self._write({"student": unit[0], "notebook": unit[1], "submission": submission,
                     "rows": [list(astuple(r)) for r in rows]})

    def close(self, finished: bool = False) -> None:
        """Close the file; when the gradebook is written (``finished``), remove the journal."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if finished:
            self.path.unlink(missing_ok=True)


def stop_leftovers(run_id) -> int:
    """Kill every process (pytest, kernels) still running for the run ``run_id`` (Linux); how many."""
    proc = Path("/proc")
    if not isinstance(run_id, str) or not run_id or not proc.is_dir():
        return 0
    marker = f"{RUN_ENV}={run_id}".encode()
    killed = 0
    for entry in proc.iterdir():
        if not re.fullmatch(r"\d+", entry.name) or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed
