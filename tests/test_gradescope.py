"""`transformer-course gradescope`: the autograder zip, and the zip at work as Gradescope runs it. A folder stands
in for /autograder ($AUTOGRADER_ROOT): the zip is unpacked in ROOT/source, setup.sh installs into a scratch venv
(it sees this .venv's packages, as Gradescope's image would have the pins after setup.sh's own pip install, and
pip may not use an index: nothing is fetched), the course package comes from the wheel in the zip, and
run_autograder grades the solutions, the blank release, a tampered notebook, a broken one and a wrong file name.
Every results.json is validated field by field against Gradescope's documented format.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from fabricated_class import MEMORY_LIMIT_MB, NAME, cell, correct, released

from transformer_course.cli import main
from transformer_course.grading.gradebook import GradeRow
from transformer_course.grading.gradescope import VISIBILITIES, results, wheel
from transformer_course.grading.snapshot import Snapshot

# The grader's limits, with cells given 120 s: the rows must not depend on the machine's load (10 s cells
# timed out at a load of 12 on 2 cores).
LIMITS = ["--timeout", "120", "--notebook-timeout", "600", "--memory-limit", str(MEMORY_LIMIT_MB)]
ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements.txt"

# Gradescope's results.json (https://gradescope-autograders.readthedocs.io/en/latest/specs/): the fields the
# autograder writes, with their types; the other documented fields are allowed but not written here.
TOP_FIELDS = {"score": float, "execution_time": int, "output": str, "visibility": str, "tests": list}
TOP_OPTIONAL = {"stdout_visibility", "extra_data", "output_format", "test_output_format", "test_name_format",
                "leaderboard"}
TEST_FIELDS = {"name": str, "score": float, "max_score": float, "output": str, "visibility": str, "number": str}
TEST_OPTIONAL = {"status", "tags", "extra_data", "name_format", "output_format"}


def format_problems(data) -> list[str]:
    """Everything in ``data`` that breaks Gradescope's results.json format or is inconsistent (empty: valid)."""
    if not isinstance(data, dict):
        return [f"results is a {type(data).__name__}, not an object"]
    problems = [f"unknown field {k!r}" for k in data if k not in TOP_FIELDS and k not in TOP_OPTIONAL]
    for key, kind in TOP_FIELDS.items():
        if key not in data:
            problems.append(f"no {key!r}")
        elif type(data[key]) is not kind:
            problems.append(f"{key!r} is a {type(data[key]).__name__}, expected {kind.__name__}")
    if data.get("visibility") not in VISIBILITIES:
        problems.append(f"visibility {data.get('visibility')!r}")
    tests = data.get("tests") if isinstance(data.get("tests"), list) else []
    for k, test in enumerate(tests):
        if not isinstance(test, dict):
            problems.append(f"test {k} is not an object")
            continue
        problems += [f"test {k}: unknown field {f!r}" for f in test if f not in TEST_FIELDS and f not in TEST_OPTIONAL]
        for key, kind in TEST_FIELDS.items():
            if type(test.get(key)) is not kind:
                problems.append(f"test {k}: {key!r} is {test.get(key)!r}, expected {kind.__name__}")
        if test.get("visibility") not in VISIBILITIES:
            problems.append(f"test {k}: visibility {test.get('visibility')!r}")
        if isinstance(test.get("score"), float) and isinstance(test.get("max_score"), float) \
                and not 0 <= test["score"] <= test["max_score"]:
            problems.append(f"test {k}: score {test['score']} outside [0, {test['max_score']}]")
        if not str(test.get("name", "")).strip():
            problems.append(f"test {k}: empty name")
    if isinstance(data.get("score"), float) and all(isinstance(t, dict) for t in tests) \
            and data["score"] != sum(t.get("score", 0) for t in tests if isinstance(t.get("score"), float)):
        problems.append("score is not the sum of the tests' scores")
    return problems


# --- without a kernel ------------------------------------------------------------------------------------

ROWS = [GradeRow("s", NAME, "01.1", "Token ids to logits", 2, 2, "passed", "all 5 cases passed"),
        GradeRow("s", NAME, "01.2", "Inputs and next-token targets", 0, 2, "failed", "swapped",
                 "01.2/inputs-targets-swapped"),
        GradeRow("s", NAME, "01.3", "Parameters", 0, 1, "missing", f"no {NAME} in the submission")]


def test_results_of_rows_are_valid_and_consistent():
    data = results(ROWS, 12.6, "after_due_date", expected=[NAME])
    assert format_problems(json.loads(json.dumps(data))) == []
    assert data["score"] == 2.0 and data["execution_time"] == 13
    assert [t["number"] for t in data["tests"]] == ["01.1", "01.2", "01.3"]
    assert data["tests"][1]["output"] == "failed: swapped\n(known mistake: 01.2/inputs-targets-swapped)"
    assert {t["visibility"] for t in data["tests"]} == {"after_due_date"}
    assert "Total: 2/5 points." in data["output"]
    assert f"upload the notebooks under these names: {NAME}" in data["output"]


@pytest.mark.parametrize("spoil, problem", [
    (lambda d: d.pop("tests"), "no 'tests'"),
    (lambda d: d.update(score=3), "'score' is a int"),
    (lambda d: d.update(score=5.0), "score is not the sum"),
    (lambda d: d.update(execution_time=1.5), "'execution_time' is a float"),
    (lambda d: d.update(visibility="public"), "visibility 'public'"),
    (lambda d: d.update(grade=1), "unknown field 'grade'"),
    (lambda d: d["tests"][0].pop("max_score"), "test 0: 'max_score' is None"),
    (lambda d: d["tests"][0].update(score=3.0), "outside [0, 2.0]"),
    (lambda d: d["tests"][1].update(number=1.2), "test 1: 'number' is 1.2"),
    (lambda d: d["tests"][2].update(visibility="later"), "test 2: visibility 'later'"),
    (lambda d: d["tests"][2].update(name=" "), "test 2: empty name"),
])
def test_the_format_check_fails_on_wrong_results(spoil, problem):
    data = results(ROWS, 1.0)
    spoil(data)
    assert any(problem in p for p in format_problems(data)), format_problems(data)


def test_the_wheel_holds_the_package_with_a_valid_record():
    snapshot = Snapshot.of()
    name, data = wheel(snapshot, "0.1.0")
    assert name == "transformer_course-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(__import__("io").BytesIO(data)) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    record = members.pop("transformer_course-0.1.0.dist-info/RECORD").decode().splitlines()
    assert record[-1] == "transformer_course-0.1.0.dist-info/RECORD,,"
    for line in record[:-1]:
        path, digest, size = line.rsplit(",", 2)
        expected = base64.urlsafe_b64encode(hashlib.sha256(members[path]).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}" and int(size) == len(members[path]), path
    assert len(record) - 1 == len(members)
    package = {n.removeprefix("transformer_course/"): d for n, d in members.items() if ".dist-info/" not in n}
    assert package == snapshot.files  # every source file of the package, nothing else


def test_zip_layout_and_options(tmp_path, release, capsys):
    out = tmp_path / "autograder.zip"
    assert main(["gradescope", "--release", str(ROOT / "exercises"), "--notebook", "02_attention", "--out", str(out),
                 "--requirements", str(REQUIREMENTS), "--visibility", "hidden", "--timeout", "30"]) == 0
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
        config = json.loads(archive.read("config.json"))
        setup = archive.read("setup.sh").decode()
        assert archive.read("requirements.txt") == REQUIREMENTS.read_bytes()
    assert names == {"setup.sh", "run_autograder", "requirements.txt", "config.json", "release/02_attention.ipynb",
                     "transformer_course-0.1.0-py3-none-any.whl"}
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert config["visibility"] == "hidden" and config["limits"]["cell_timeout"] == 30 and config["jobs"] == 2
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in setup
    assert "git" not in setup and "http" not in setup.replace("https://download.pytorch.org/whl/cpu", "")
    again = tmp_path / "again.zip"
    assert main(["gradescope", "--release", str(ROOT / "exercises"), "--notebook", "02_attention", "--out",
                 str(again), "--requirements", str(REQUIREMENTS), "--visibility", "hidden", "--timeout", "30"]) == 0
    assert again.read_bytes() == out.read_bytes()  # reproducible
    capsys.readouterr()
    for args, message in [(["--notebook", "99_nothing"], "--notebook 99_nothing: not a released notebook"),
                          (["--requirements", str(tmp_path / "none.txt")], "none.txt: not found"),
                          (["--timeout", "0"], "--timeout: expected a positive number"),
                          (["--jobs", "0"], "--jobs 0: must be at least 1")]:
        code = main(["gradescope", "--release", str(release), "--out", str(tmp_path / "x.zip"),
                     "--requirements", str(REQUIREMENTS), *args])
        assert code == 2 and message in capsys.readouterr().err, args
    assert not (tmp_path / "x.zip").exists()


# --- end to end: the zip at work -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def autograder(tmp_path_factory, release):
    """The zip built from the release of exercises/01, unpacked and set up as Gradescope would."""
    root = tmp_path_factory.mktemp("autograder")
    zip_path = root.parent / f"{root.name}.zip"
    assert main(["gradescope", "--release", str(release), "--out", str(zip_path), "--requirements",
                 str(REQUIREMENTS), "--jobs", "1", *LIMITS]) == 0
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):  # zipfile does not restore modes; Gradescope's unzip does
        (root / "source" / name).chmod(0o755)
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # the harness puts it there
    # The scratch venv: this .venv's packages (pip included) visible through a .pth file, so that setup.sh's pip
    # installs find every pin satisfied; the course package is not visible that way (an editable install here).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    purelib = subprocess.run([str(root / "venv" / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "course-test-pins.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable, "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True,
                           timeout=600)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    return root, env


def autograde(autograder, files: dict[str, bytes]) -> dict:
    """Run run_autograder on a submission of ``files``; the results.json it wrote, checked against the format."""
    root, env = autograder
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "submission").mkdir()
    for name, data in files.items():
        (root / "submission" / name).write_bytes(data)
    run = subprocess.run([str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300)
    data = json.loads((root / "results" / "results.json").read_text())
    assert format_problems(data) == [], (data, run.stdout[-2000:], run.stderr[-2000:])
    return data


def scores(data: dict) -> list[tuple[str, float, float]]:
    return [(t["number"], t["score"], t["max_score"]) for t in data["tests"]]


@pytest.mark.slow
def test_setup_installs_the_package_from_the_zip(autograder):
    root, env = autograder
    where = subprocess.run([str(root / "venv" / "bin" / "python"), "-c",
                            "import transformer_course; print(transformer_course.__file__)"], env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(root / "venv"), where
    assert (root / "venv" / "bin" / "transformer-course").exists()


@pytest.mark.slow
def test_solutions_get_full_marks(autograder):
    data = autograde(autograder, {NAME: json.dumps(correct()).encode()})
    assert scores(data) == [("01.1", 2.0, 2.0), ("01.2", 2.0, 2.0), ("01.3", 1.0, 1.0)]
    assert data["score"] == 5.0 and data["output"].startswith("Total: 5/5 points.")
    assert all(t["output"].startswith("passed: all ") for t in data["tests"]), data["tests"]


@pytest.mark.slow
def test_blank_release_scores_zero_with_feedback(autograder):
    data = autograde(autograder, {NAME: json.dumps(released()).encode()})
    assert scores(data) == [("01.1", 0.0, 2.0), ("01.2", 0.0, 2.0), ("01.3", 0.0, 1.0)]
    assert all(t["output"].startswith("failed: ") and "not implemented yet" in t["output"] for t in data["tests"])


@pytest.mark.slow
def test_tampered_and_broken_notebooks_still_give_results(autograder):
    nb = correct()
    cell(nb, "ex2-check")["source"] = "print('all good')"
    data = autograde(autograder, {NAME: json.dumps(nb).encode()})
    assert scores(data) == [("01.1", 2.0, 2.0), ("01.2", 2.0, 2.0), ("01.3", 1.0, 1.0)]  # the released check ran
    assert data["tests"][1]["output"].startswith("tampered: ")
    broken = autograde(autograder, {NAME: b'{"cells": [ not json'})
    assert broken["score"] == 0.0 and len(broken["tests"]) == 3
    assert all(t["output"].startswith("error: the notebook could not be read") for t in broken["tests"])
    misnamed = autograde(autograder, {"01_tensor_shapes (1).ipynb": json.dumps(correct()).encode()})
    assert misnamed["score"] == 0.0 and all(t["output"].startswith("missing: ") for t in misnamed["tests"])
    assert f"upload the notebooks under these names: {NAME}" in misnamed["output"]
