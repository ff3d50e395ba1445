"""The course package as the grader read it before any learner's code ran, and a fresh copy per notebook.

A learner's kernel runs as the same user as the grader, so it can rewrite the installed package's files or
plant bytecode in its ``__pycache__``; a notebook graded later would then import the altered package. So the
grader reads every file of the package into memory once, before the first kernel starts, and gives each
notebook's processes (pytest, its plugin, the kernel) a copy of their own written from memory, first on their
``PYTHONPATH``, without bytecode (the run writes none: ``PYTHONDONTWRITEBYTECODE``). After the run the copy is
compared with the snapshot, byte for byte and file for file, bytecode included: a notebook whose copy changed
is graded ``tampered``. (``PYTHONPYCACHEPREFIX`` would keep bytecode out too, but it applies to every module:
each kernel would compile torch from source, 10 s and more on a busy machine.)
Nothing a kernel does reaches another notebook's copy or the grader's own process, which imported the
checks before any kernel started.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import transformer_course

PACKAGE = Path(transformer_course.__file__).resolve().parent


def _files(package: Path) -> dict[str, bytes]:
    """Every file below ``package`` (bytecode caches excluded: the snapshot holds sources only), by relative path."""
    found = {}
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package)
        if "__pycache__" in relative.parts or path.suffix == ".pyc" or not path.is_file():
            continue
        found[relative.as_posix()] = path.read_bytes()
    return found


def _digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


@dataclass(frozen=True)
class Snapshot:
    files: dict[str, bytes]  # path below the package folder -> contents
    digest: str

    @classmethod
    def of(cls, package: Path = PACKAGE) -> Snapshot:
        files = _files(package)
        return cls(files, _digest(files))

    def write(self, folder: Path) -> Path:
        """Write the package into ``folder/transformer_course`` (read-only files); return ``folder``, the entry
        for ``PYTHONPATH``."""
        root = folder / PACKAGE.name
        for name, data in self.files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(0o444)
        return folder

    def changes(self, folder: Path) -> list[str]:
        """What differs in ``folder/transformer_course`` from the snapshot: every file, bytecode included."""
        root = folder / PACKAGE.name
        present = {}
        for path in sorted(root.rglob("*")) if root.is_dir() else []:
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                present[path.relative_to(root).as_posix()] = None  # a link, a FIFO: never ours
            elif path.is_file():
                present[path.relative_to(root).as_posix()] = path.read_bytes()
        changed = [f"{name} added" for name in present if name not in self.files]
        changed += [f"{name} removed" for name in self.files if name not in present]
        changed += [f"{name} modified" for name, data in present.items()
                    if name in self.files and data != self.files[name]]
        return sorted(changed)


def environment(folder: Path) -> dict[str, str]:
    """The variables that make a process import the copy in ``folder`` before any installed one."""
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}
