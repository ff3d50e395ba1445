"""The one sanitiser of the grader's messages (gradebook rows, recorded reprs, replay results).

A message must read the same from run to run and from machine to machine, so that two gradings of the same
submissions give the same gradebook: no colour codes, no memory addresses, no temporary paths, no per-cell
file names of the kernel, and a bounded length.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_MESSAGE = 1500
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")  # an object's address in a repr; short hex numbers are kept
_CELL_FILE = re.compile(r"\b\d{6,}\.py\b")  # ipykernel's name for a cell's code in tracebacks


def sanitize(text: str | None, *, folders: Mapping[str, str] | None = None, limit: int | None = MAX_MESSAGE) -> str:
    """``text`` without colour codes, addresses or cell file names, each folder in ``folders`` replaced by
    its placeholder, stripped and cut to ``limit`` characters ("..." marks a cut; None: not cut)."""
    text = _ANSI.sub("", text or "")
    for folder, placeholder in (folders or {}).items():
        text = text.replace(folder, placeholder)
    text = _CELL_FILE.sub("cell", _ADDRESS.sub("0xADDRESS", text)).strip()
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."
