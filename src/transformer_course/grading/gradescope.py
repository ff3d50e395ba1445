"""Grading on Gradescope: the autograder zip that ``transformer-course gradescope`` writes, and what runs in it.

Gradescope builds an image once per assignment from the zip (running its ``setup.sh`` as root), then, for
every submission, copies the learner's files to ``/autograder/submission``, runs ``/autograder/run_autograder``
and shows ``/autograder/results/results.json``. The zip holds at its root:

- ``setup.sh``: a virtual environment with the pinned requirements (the CPU build of torch first, as the
  instructor guide's container does), then the course package from the wheel inside the zip, without its
  dependencies: nothing of the course is fetched from a repository;
- ``run_autograder``: ``python -m transformer_course.grading.gradescope``, which grades the submitted notebooks
  with :func:`transformer_course.grading.grader.grade` (the code path of ``transformer-course grade``) and
  writes ``results.json``, one test per exercise; whatever goes wrong, a results file is written;
- ``requirements.txt``, ``transformer_course-VERSION-py3-none-any.whl``, ``release/*.ipynb`` and
  ``config.json`` (the limits, the hidden-cases seed, the tests' visibility, the jobs).

The scripts take the root folder from ``$AUTOGRADER_ROOT`` (default ``/autograder``; the zip is unpacked in
``ROOT/source``), so that a test runs them in a folder of its own.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from transformer_course.grading.collect import GradingError, load_releases
from transformer_course.grading.gradebook import GradeRow
from transformer_course.grading.limits import Limits
from transformer_course.grading.snapshot import Snapshot

ROOT_ENV = "AUTOGRADER_ROOT"
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
LEARNER = "submission"  # the one student of a Gradescope run; the name appears in no learner-facing text
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"  # PyPI's default Linux wheel of torch is a CUDA build
_EPOCH = (1980, 1, 1, 0, 0, 0)  # every member's date: the same release and package give the same zip bytes

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SOURCE="$ROOT/source"
VENV="$ROOT/venv"
PYTHON="${{AUTOGRADER_PYTHON:-python3.11}}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install {torch} --index-url {index}
"$VENV/bin/python" -m pip install -r "$SOURCE/requirements.txt"
"$VENV/bin/python" -m pip install --no-deps --force-reinstall "$SOURCE/{wheel}"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this once per submission; it writes $ROOT/results/results.json.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
exec "$ROOT/venv/bin/python" -m transformer_course.grading.gradescope "$ROOT"
"""


# --- the zip ------------------------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(snapshot: Snapshot, version: str) -> tuple[str, bytes]:
    """The course package as a wheel (file name, bytes): the files of ``snapshot`` (the package the grader
    would use here) with the metadata pip needs, the ``transformer-course`` command included. Its
    dependencies are not declared: ``setup.sh`` installs the pinned requirements first."""
    dist = f"transformer_course-{version}.dist-info"
    files = {f"transformer_course/{name}": data for name, data in snapshot.files.items()}
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: transformer-course\nVersion: {version}\n".encode()
    files[f"{dist}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: transformer-course gradescope\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{dist}/entry_points.txt"] = b"[console_scripts]\ntransformer-course = transformer_course.cli:main\n"
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    return f"transformer_course-{version}-py3-none-any.whl", _zip_bytes(files)


def _zip_bytes(files: dict[str, bytes], executable: Sequence[str] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if name in executable else 0o644) << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def _torch_pin(requirements: str) -> str:
    for line in requirements.splitlines():
        name = line.split("#")[0].strip()
        if name.lower().startswith("torch=="):
            return name
    raise GradingError("--requirements: no torch==VERSION line (the pinned requirements of the course, "
                       "requirements.txt, have one)")


def build_autograder(release: str | Path, out: str | Path, *, requirements: str | Path = "requirements.txt",
                     limits: Limits | None = None, notebooks: Sequence[str] = (), visibility: str = "visible",
                     jobs: int = 2) -> list[str]:
    """Write Gradescope's autograder zip for the released notebooks in ``release`` (those named in
    ``notebooks``, else all) to ``out``; returns the names of the released notebooks in it.
    Raises GradingError (a one-line message) for bad arguments."""
    limits = limits or Limits()
    if visibility not in VISIBILITIES:
        raise GradingError(f"--visibility {visibility}: expected one of {', '.join(VISIBILITIES)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise GradingError(f"--jobs {jobs}: must be at least 1")
    releases = load_releases(release)
    if notebooks:
        known = {r.name for r in releases} | {r.name.removesuffix(".ipynb") for r in releases}
        unknown = [n for n in notebooks if n not in known]
        if unknown:
            raise GradingError(f"--notebook {', '.join(unknown)}: not a released notebook with checks in {release} "
                               f"(expected one of {', '.join(r.name for r in releases)})")
        releases = [r for r in releases if r.name in notebooks or r.name.removesuffix(".ipynb") in notebooks]
    requirements = Path(requirements)
    try:
        pins = requirements.read_text(encoding="utf-8")
    except OSError:
        raise GradingError(f"--requirements {requirements}: not found (the course's pinned requirements.txt; run "
                           "the command in a clone of the course, or pass --requirements)") from None
    wheel_name, wheel_bytes = wheel(Snapshot.of(), metadata.version("transformer-course"))
    config = {"limits": asdict(limits), "visibility": visibility, "jobs": jobs}
    files = {
        "setup.sh": SETUP_SH.format(torch=_torch_pin(pins), index=TORCH_INDEX, wheel=wheel_name).encode(),
        "run_autograder": RUN_AUTOGRADER.encode(),
        "requirements.txt": pins.encode(),
        wheel_name: wheel_bytes,
        "config.json": (json.dumps(config, indent=2, sort_keys=True) + "\n").encode(),
        **{f"release/{r.name}": (Path(release) / r.name).read_bytes() for r in releases},
    }
    Path(out).write_bytes(_zip_bytes(files, executable=("setup.sh", "run_autograder")))
    return [r.name for r in releases]


# --- results.json ---------------------------------------------------------------------------------------


def test_output(row: GradeRow) -> str:
    """What the learner reads under one exercise: the status, the feedback, the known mistake it named."""
    text = f"{row.status}: {row.message}"
    return text + (f"\n(known mistake: {row.mistake})" if row.mistake else "")


def results(rows: Sequence[GradeRow], seconds: float, visibility: str = "visible", notes: Sequence[str] = (),
            expected: Sequence[str] = ()) -> dict:
    """Gradescope's results.json for one learner's rows: one test per exercise, the score their sum."""
    tests = [{"name": f"{r.exercise} {r.title}", "number": r.exercise, "score": float(r.points),
              "max_score": float(r.max_points), "output": test_output(r), "visibility": visibility} for r in rows]
    score = sum(r.points for r in rows)
    lines = [f"Total: {score}/{sum(r.max_points for r in rows)} points."]
    missing = sorted({r.notebook for r in rows if r.status == "missing"})
    if missing:
        lines.append(f"Not found in your submission: {', '.join(missing)} (upload the notebooks under these names: "
                     f"{', '.join(expected)}).")
    lines += notes
    return {"score": float(score), "execution_time": round(seconds), "output": "\n".join(lines),
            "visibility": visibility, "tests": tests}


def failure_results(message: str, seconds: float, release: Path, visibility: str = "visible") -> dict:
    """results.json when grading could not run at all: every released exercise at 0 with the reason."""
    try:
        checks = [c for r in load_releases(release) for c in r.checks]
    except GradingError:
        checks = []
    tests = [{"name": f"{c.exercise} {c.title}", "number": c.exercise, "score": 0.0, "max_score": float(c.points),
              "output": f"error: {message}", "visibility": visibility} for c in checks]
    return {"score": 0.0, "execution_time": round(seconds), "visibility": visibility, "tests": tests,
            "output": f"The autograder could not grade this submission: {message}. Tell your instructor."}


def _config(path: Path) -> tuple[Limits, str, int]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return Limits(**data["limits"]), data["visibility"], int(data["jobs"])


def run_autograder(root: str | Path) -> int:
    """Grade ``ROOT/submission`` against ``ROOT/source/release`` and write ``ROOT/results/results.json``;
    0 when the submission was graded, 1 when only the failure's results file could be written."""
    from transformer_course.grading.grader import grade  # imports the course's checks: only where a run needs them

    root = Path(root)
    source, submission, out = root / "source", root / "submission", root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    visibility, code = "visible", 0

    def progress(student, notebook, rows, seconds):
        print(f"graded {notebook}: {sum(r.points for r in rows)}/{sum(r.max_points for r in rows)} points "
              f"in {seconds:.1f} s", flush=True)

    try:
        limits, visibility, jobs = _config(source / "config.json")
        with tempfile.TemporaryDirectory(prefix="transformer-course-gradescope-") as tmp:
            # The grader's own layout: SUBMISSIONS/STUDENT/..., the learner's files as they were handed in.
            folder = Path(tmp) / "submissions" / LEARNER
            if submission.is_dir():
                shutil.copytree(submission, folder, symlinks=True)  # the grader ignores links
            else:
                folder.mkdir(parents=True)
            book = grade(folder.parent, release=source / "release", limits=limits, jobs=jobs, progress=progress)
        expected = [r.name for r in load_releases(source / "release")]
        data = results(book.rows, time.monotonic() - start, visibility, expected=expected)
    except Exception as error:  # noqa: BLE001 - the learner gets a results file whatever happened
        import traceback

        traceback.print_exc()
        data = failure_results(f"{type(error).__name__}: {error}", time.monotonic() - start, source / "release",
                               visibility if visibility in VISIBILITIES else "visible")
        code = 1
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(data["output"], flush=True)
    return code


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m transformer_course.grading.gradescope AUTOGRADER_ROOT")
    sys.exit(run_autograder(sys.argv[1]))
