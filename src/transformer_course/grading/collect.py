"""Finding what to grade: the released notebooks, the students and their notebooks, the shard.

Two layouts of ``SUBMISSIONS/``, which can be mixed:

- one folder per student, named after the student, holding the notebooks under their released names
  (``alice/01_tensor_shapes.ipynb``; sub-folders are searched too, hidden ones such as
  ``.ipynb_checkpoints`` are not);
- files named ``STUDENT__NN_topic.ipynb`` (two underscores) directly in ``SUBMISSIONS/``.

Every notebook is read into memory when grading starts, so nothing that runs later (a learner's
kernel included) can change another student's submission.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformer_course.grading.prepare import MAX_NOTEBOOK_BYTES, Release, UnreadableNotebook, load_release


class GradingError(Exception):
    """Grading cannot run at all (bad arguments, no release, no submissions): a one-line message."""


@dataclass
class Student:
    name: str
    notebooks: dict[str, bytes | UnreadableNotebook] = field(default_factory=dict)  # release name -> content


def parse_notebooks(text: str) -> list[str]:
    """``"3,04"`` -> ``["03", "04"]``: the two-digit numbers of the released notebooks to grade (``--notebooks``)."""
    numbers = [part.strip() for part in text.split(",")]
    if not numbers or not all(n.isdigit() and 1 <= len(n) <= 2 for n in numbers):
        raise GradingError(f"--notebooks {text}: expected notebook numbers separated by commas, e.g. 03,04")
    return sorted({n.zfill(2) for n in numbers})


def load_releases(folder: str | Path, notebooks: Sequence[str] | None = None) -> list[Release]:
    """The released notebooks in ``folder`` (``NN_topic.ipynb`` with check cells); with ``notebooks``, only those
    whose number NN is listed (a week's assignment), each of which must be there."""
    folder = Path(folder)
    if not folder.is_dir():
        raise GradingError(f"release folder {folder} not found (pass --release FOLDER, e.g. exercises/)")
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if notebooks is not None:
        missing = sorted(set(notebooks) - {p.name[:2] for p in paths})
        if missing:
            raise GradingError(f"--notebooks: no released notebook {', '.join(f'{n}_*.ipynb' for n in missing)} "
                               f"in {folder}")
        paths = [p for p in paths if p.name[:2] in set(notebooks)]
    releases = []
    seen: dict[str, str] = {}
    for path in paths:
        try:
            release = load_release(path)
        except Exception as error:  # noqa: BLE001 - any unreadable release stops grading
            raise GradingError(f"released notebook {path} cannot be read: {error}") from None
        for check in release.checks:
            if check.exercise in seen:
                raise GradingError(f"exercise {check.exercise} is released twice ({seen[check.exercise]}, {path.name})")
            seen[check.exercise] = path.name
        if release.checks:
            releases.append(release)
    if not releases:
        raise GradingError(f"no released exercises in {folder}: no NN_topic.ipynb there has check cells "
                           "(generate them with `transformer-course exercises`)")
    return releases


def _read(path: Path) -> bytes | UnreadableNotebook:
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return UnreadableNotebook(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MB")
        return path.read_bytes()
    except OSError as error:
        return UnreadableNotebook(f"the file cannot be read ({error.strerror or type(error).__name__})")


def _in_folder(folder: Path, names: set[str]) -> dict[str, Path]:
    """The notebooks named ``names`` under ``folder``: the shallowest, then first by path, of each name."""
    found: dict[str, list[tuple[int, str, Path]]] = {}
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            path = Path(top) / name
            if name in names and not path.is_symlink():
                rel = path.relative_to(folder)
                found.setdefault(name, []).append((len(rel.parts), str(rel), path))
    return {name: sorted(options)[0][2] for name, options in found.items()}


def find_students(folder: str | Path, releases: list[Release]) -> tuple[list[Student], list[str]]:
    """The students in ``folder`` (sorted by name) with their notebooks read, and notes on ignored files."""
    folder = Path(folder)
    if not folder.is_dir():
        raise GradingError(f"submissions folder {folder} not found")
    names = {r.name for r in releases}
    students: dict[str, Student] = {}
    notes = []
    entries = sorted(folder.iterdir())
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_dir():
            student = students.setdefault(entry.name, Student(entry.name))
            for name, path in _in_folder(entry, names).items():
                student.notebooks[name] = _read(path)
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_file():
            continue
        match = next((n for n in sorted(names) if entry.name.endswith("__" + n) and len(entry.name) > len(n) + 2),
                     None)
        if match is None:
            hint = " (not STUDENT__NN_topic.ipynb for a released notebook)" if entry.suffix == ".ipynb" else ""
            notes.append(f"ignored {entry.name}{hint}")
            continue
        name = entry.name[: -len(match) - 2]
        student = students.setdefault(name, Student(name))
        if match in student.notebooks:
            notes.append(f"ignored {entry.name}: {name}/{match} is graded instead")
            continue
        student.notebooks[match] = _read(entry)
    if not students:
        raise GradingError(f"no submissions in {folder}: expected one folder per student, or files named "
                           "STUDENT__NN_topic.ipynb")
    return [students[name] for name in sorted(students)], notes


def parse_shard(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise GradingError(f"--shard {text}: expected K/N, e.g. 1/4")
    k, n = int(match.group(1)), int(match.group(2))
    if n < 1 or not 1 <= k <= n:
        raise GradingError(f"--shard {text}: K must be between 1 and N")
    return k, n


def select_shard(students: list[Student], shard: tuple[int, int] | None) -> list[Student]:
    """Shard K of N: every N-th student of the sorted list, starting with the K-th (1-based)."""
    if shard is None:
        return students
    k, n = shard
    return [s for i, s in enumerate(students) if i % n == k - 1]
