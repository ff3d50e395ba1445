"""The grader's audit hook (grading/audit.py): what the learner's code does is recorded however it is spelled, and
what libraries do for the learner (a namedtuple, a dataclass, an import) is not.

Each snippet runs as a "cell" (a file outside every library folder, as ipykernel's cell files are) in a fresh
interpreter that loaded audit.py by path and installed the hook, as the grader's first cell does in the kernel.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from transformer_course.grading import audit

ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "src" / "transformer_course" / "grading" / "audit.py"
CHECKPOINT = ROOT / "src" / "transformer_course" / "checkpoints" / "shakespeare" / "model.pt"

RUN = """
import importlib.util, runpy, sys
spec = importlib.util.spec_from_file_location("audit", sys.argv[1])
audit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(audit)
audit.install(sys.argv[2])
runpy.run_path(sys.argv[3])
"""


def notes_of(tmp_path: Path, code: str) -> list[str]:
    cell = tmp_path / "cell.py"
    cell.write_text(textwrap.dedent(code))
    records = tmp_path / "records"
    records.mkdir()
    result = subprocess.run([sys.executable, "-c", RUN, str(AUDIT), str(records), str(cell)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return audit.notes((records / audit.FILE_NAME).read_text())


# The spellings that hid from the notes read from the code's text (issue 34), and other ways to the same ends.
RECORDED = {
    "exec of a string that imports the number-word library": (
        'exec("from num" + "2words import num2words")',
        ["ran code built from strings (exec, eval or compile)", "imported num2words"]),
    "importlib reached through os.sys.modules": (
        'import os\nos.sys.modules["import" + "lib"].import_module("num2" + "words")',
        ["imported num2words"]),
    "a subprocess that runs Python": (
        'import subprocess, sys\nsubprocess.run([sys.executable, "-c", "pass"], check=True)',
        ["started other processes (python"]),
    "os.system": ('import os\nos.system("true")', ["started other processes"]),
    "the caller's frame": ("import sys\nsys._getframe(0)", ["reached into the interpreter's frames or code"]),
    "a traceback's frame": ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    e.__traceback__.tb_frame",
                            ["reached into the interpreter's frames or code (tb_frame)"]),
    "inspect.currentframe": ("import inspect\ninspect.currentframe()", ["reached into the interpreter's frames"]),
    "gc's objects": ("import gc\ngc.get_objects()", ["walked the interpreter's objects (gc)"]),
    "eval": ('eval("1 + 1")', ["ran code built from strings"]),
    "the course's checkpoint opened directly": (
        f"open({str(CHECKPOINT)!r}, 'rb').read(16)",
        ["opened the course package's files (checkpoints/shakespeare/model.pt)"]),
    "ctypes": ("import ctypes\nctypes.CDLL(None)", ["used ctypes"]),
}

NOT_RECORDED = {
    "a namedtuple (compiled by the standard library)": (
        "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\nPoint(1, 2)"),
    "a dataclass": "from dataclasses import dataclass\n@dataclass\nclass A:\n    x: int = 1\nA()",
    "an enum and a typed NamedTuple": (
        "import enum, typing\nColor = enum.Enum('Color', 'RED GREEN')\n"
        "class P(typing.NamedTuple):\n    x: int\nP(1)"),
    "imports and ordinary code": "import json, math\njson.dumps({'a': math.pi})",
    "an error caught": "try:\n    {}['x']\nexcept KeyError:\n    pass",
}


@pytest.mark.parametrize("name", RECORDED)
def test_what_the_learners_code_does_is_recorded_however_it_is_spelled(tmp_path, name):
    code, expected = RECORDED[name]
    notes = notes_of(tmp_path, code)
    for start in expected:
        assert any(n.startswith(start) for n in notes), f"{name}: expected a note starting {start!r}, got {notes}"


@pytest.mark.parametrize("name", NOT_RECORDED)
def test_what_libraries_do_for_the_learner_is_not_recorded(tmp_path, name):
    assert notes_of(tmp_path, NOT_RECORDED[name]) == []


def test_notes_ignore_what_is_not_a_record():
    text = ('not json\n{"category": "nonsense", "detail": "x"}\n{"category": "process", "detail": "sh"}\n[1, 2]\n'
            '{"category": "process", "detail": "sh"}\n{"category": "import", "detail": "num2words"}\n')
    assert audit.notes(text) == ["started other processes (sh)", "imported num2words"]
    assert audit.notes("") == []


def test_the_hook_reads_the_records_folder_the_grader_names():
    """audit.py imports nothing of the package, so it spells the kernel's environment variable itself."""
    from transformer_course.grading import kernel

    assert audit.RECORDS_ENV == kernel.RECORDS_ENV
