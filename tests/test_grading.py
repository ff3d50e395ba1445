"""`transformer-course grade` on fabricated submissions: every status, every kind of tampering.

The submissions are made here, from the real released notebook (exercises/01) and the real answers
(solutions/01), as JSON dicts edited cell by cell. The expected feedback of a failing check is computed
by running the same answer code through the same check in this process, so the rows asserted below are
exact without copying the checks' messages into this file.
"""

from __future__ import annotations

import copy
import csv
import json
import linecache
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from transformer_course.checks import CheckFailed, check
from transformer_course.cli import main
from transformer_course.grading.collect import GradingError, find_students, load_releases, select_shard
from transformer_course.grading.prepare import GRADER_CHECK_IMPORT, load_release, prepare, strip_markers
from transformer_course.grading.report import COLUMNS, Row, read_csv

ROOT = Path(__file__).resolve().parents[1]
NAME = "01_tensor_shapes.ipynb"
EXERCISE = ROOT / "exercises" / NAME
SOLUTION = ROOT / "solutions" / NAME
TITLES = {"01.1": "Token ids to logits", "01.2": "Inputs and next-token targets",
          "01.3": "Parameters of the embedding and the output head"}
POINTS = {"01.1": 2, "01.2": 2, "01.3": 1}
ANSWER = {"01.1": "ex1-answer", "01.2": "ex2-answer", "01.3": "ex3-answer"}
CHECK = {"01.1": "ex1-check", "01.2": "ex2-check", "01.3": "ex3-check"}
FUNCTION = {"01.1": "token_logits", "01.2": "next_token_pairs", "01.3": "lm_parameter_count"}
CELL_TIMEOUT = 10
LIMITS = ["--timeout", str(CELL_TIMEOUT), "--notebook-timeout", "90", "--memory-limit", "3072"]


# --- building submissions ------------------------------------------------------------------------------


def released() -> dict:
    return json.loads(EXERCISE.read_text())


def solution_source(exercise: str) -> str:
    nb = json.loads(SOLUTION.read_text())
    return "".join(next(c for c in nb["cells"] if c["id"] == ANSWER[exercise])["source"])


def cell(nb: dict, cell_id: str) -> dict:
    return next(c for c in nb["cells"] if c.get("id") == cell_id)


def with_sources(nb: dict | None = None, **sources: str) -> dict:
    """The notebook with the given answer cells (ex1=..., ex2=..., ex3=...) replaced."""
    nb = copy.deepcopy(nb or released())
    for key, source in sources.items():
        cell(nb, f"{key}-answer")["source"] = source
    return nb


def correct(nb: dict | None = None) -> dict:
    return with_sources(nb, ex1=solution_source("01.1"), ex2=solution_source("01.2"), ex3=solution_source("01.3"))


def insert_after(nb: dict, cell_id: str, source: str, new_id: str, cell_type: str = "code") -> dict:
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb["cells"]) if c.get("id") == cell_id)
    new = {"cell_type": cell_type, "id": new_id, "metadata": {}, "source": source}
    if cell_type == "code":
        new.update(outputs=[], execution_count=None)
    nb["cells"].insert(index + 1, new)
    return nb


WRONG_TRANSPOSE = ("def token_logits(tokens, embedding, head_weight, head_bias):\n"
                   "    return embedding[tokens] @ head_weight + head_bias\n")
SWAPPED = "def next_token_pairs(tokens):\n    return tokens[..., 1:], tokens[..., :-1]\n"
NO_HEAD_BIAS = ("def token_logits(tokens, embedding, head_weight, head_bias):\n"
                "    return embedding[tokens] @ head_weight.T\n")
NO_BIAS = ("def lm_parameter_count(vocab_size, d_model, tie_weights):\n"
           "    return (1 if tie_weights else 2) * vocab_size * d_model\n")
ALWAYS_EQUAL = ("class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n\n"
                "def token_logits(tokens, embedding, head_weight, head_bias):\n    return AlwaysEqual()\n")
SNEAKY = ("import torch\n\nclass Sneaky(torch.Tensor):\n    @classmethod\n"
          "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
          "        if func in (torch.isclose, torch.Tensor.__ne__, torch.Tensor.__eq__, torch.allclose):\n"
          "            return True\n"
          "        return super().__torch_function__(func, types, args, kwargs or {})\n\n"
          "def next_token_pairs(tokens):\n    x = tokens.as_subclass(Sneaky)\n    return x, x\n")
SAME = "def next_token_pairs(tokens):\n    return tokens, tokens\n"
HOG = ("def token_logits(tokens, embedding, head_weight, head_bias):\n    blocks = []\n    while True:\n"
       "        blocks.append(bytearray(200_000_000))\n")
LOOP = "def next_token_pairs(tokens):\n    while True:\n        pass\n"
STUBBORN = ("import time\n\ndef token_logits(tokens, embedding, head_weight, head_bias):\n    while True:\n"
            "        try:\n            time.sleep(0.05)\n        except BaseException:\n            pass\n")
EXIT = "import os\n\ndef next_token_pairs(tokens):\n    os._exit(1)\n"
SYNTAX_ERROR = "def lm_parameter_count(vocab_size, d_model, tie_weights)\n    return 0\n"
DISPLAY_TRICKS = (
    "from IPython import get_ipython\n"
    "from IPython.core.interactiveshell import InteractiveShell\n\n"
    "InteractiveShell.showtraceback = lambda self, *args, **kwargs: print('\u2714 public checks passed')\n"
    "get_ipython().set_custom_exc((Exception,), lambda *args, **kwargs: print('\u2714 public checks passed'))\n\n"
    "def check(exercise_id, answer):\n    print(f'\u2714 {exercise_id}: public checks passed (5 cases).')\n"
)
PATCH_COMPARE = ("import transformer_course.checks.core as core\n\n"
                 "core.compare = lambda *args, **kwargs: None  # every comparison 'passes' in this kernel\n")
SKIP_CHECKS = (
    "from IPython import get_ipython\n\n"
    "def _no_checks(lines):\n"
    "    if any('check(' in line for line in lines):\n"
    "        return [\"print('\u2714 public checks passed')\\n\"]\n"
    "    return lines\n\n"
    "get_ipython().input_transformers_post.append(_no_checks)\n"
)
FORGED_RECORD = (
    "import os, sys, types\nimport torch\n\n"
    "fake = types.ModuleType('transformer_course.grading.kernel')\n\n"
    "def _check(exercise_id, answer):\n"
    "    folder = os.environ.get('TRANSFORMER_COURSE_GRADE_RECORDS', '.')\n"
    "    calls = [('value', torch.zeros(2, 3, 5), torch.get_rng_state())] * 5  # well-formed, wrong\n"
    "    torch.save({'exercise': exercise_id, 'calls': calls}, os.path.join(folder, exercise_id + '.pt'))\n"
    "    print('\u2714 public checks passed')\n\n"
    "fake.check = _check\n"
    "sys.modules['transformer_course.grading.kernel'] = fake\n"
)


def feedback(exercise: str, source: str, **overrides) -> str:
    """What `check(exercise, <the function defined by source>)` says here, without the 'id title: ' prefix."""
    filename = f"<answer {exercise} {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"torch": torch, "nn": nn, "__name__": "__main__", **overrides}
    exec(compile(source, filename, "exec"), namespace)
    with pytest.raises(CheckFailed) as failure:
        check(exercise, namespace[FUNCTION[exercise]])
    prefix = f"{exercise} {TITLES[exercise]}: "
    message = str(failure.value)
    assert message.startswith(prefix)
    return message[len(prefix):].strip()  # the grader strips trailing blanks


def stub(exercise: str) -> str:
    return "".join(cell(released(), ANSWER[exercise])["source"])


def _memory_error():
    """A function raising MemoryError whose frame, like the kernel's allocator, is not the learner's."""
    import transformer_course

    namespace = {}
    filename = str(Path(transformer_course.__file__).parent / "<allocator>.py")
    exec(compile("def bytearray(size):\n    raise MemoryError()\n", filename, "exec"), namespace)
    return namespace["bytearray"]


def cases(exercise: str) -> int:
    """How many cases the check of ``exercise`` runs (what it returns for the solution's answer)."""
    from transformer_course.checks import REGISTRY

    namespace = {"torch": torch, "nn": nn}
    exec(solution_source(exercise), namespace)
    return REGISTRY[exercise].checker(namespace[FUNCTION[exercise]])


def passed(exercise: str) -> tuple[str, str]:
    return "passed", f"all {cases(exercise)} cases passed"


def failed(exercise: str, source: str, **overrides) -> tuple[str, str]:
    return "failed", feedback(exercise, source, **overrides)


def tampered(changes: str, result: tuple[str, str]) -> tuple[str, str]:
    return "tampered", f"{changes}. The released check was restored and run: {result[0]}: {result[1]}"


FORGED = ("the check passed inside the kernel, but the results it recorded fail the same check run outside the "
          "kernel, so the checking code was altered: ")
BYPASSED = ("tampered", "the check cell ran without an error but the check never completed: `check` or the checking "
            "code was replaced or bypassed inside the kernel")
TIMED_OUT = ("timeout", f"the check did not finish within the {CELL_TIMEOUT} s cell time limit")
NOT_READ = "the notebook could not be read: "
MISSING = ("missing", f"no {NAME} in the submission")


def fabricate(folder: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """Write the submissions into ``folder``; return the expected (status, message) per student and exercise."""
    expected = {}

    def folder_layout(student: str, nb: dict | bytes) -> None:
        (folder / student).mkdir()
        write(folder / student / NAME, nb)

    def file_layout(student: str, nb: dict | bytes) -> None:
        write(folder / f"{student}__{NAME}", nb)

    def write(path: Path, nb: dict | bytes) -> None:
        path.write_bytes(nb if isinstance(nb, bytes) else json.dumps(nb, indent=1).encode())

    # 1. ada: the solutions' answers in the released notebook.
    folder_layout("ada", correct())
    expected["ada"] = {ex: passed(ex) for ex in TITLES}

    # 2. blank: the released notebook as it is.
    folder_layout("blank", released())
    expected["blank"] = {ex: failed(ex, stub(ex)) for ex in TITLES}

    # 3. bob (STUDENT__NN_topic.ipynb layout): two classic mistakes, one right answer.
    file_layout("bob", with_sources(ex1=WRONG_TRANSPOSE, ex2=SWAPPED, ex3=solution_source("01.3")))
    expected["bob"] = {"01.1": failed("01.1", WRONG_TRANSPOSE), "01.2": failed("01.2", SWAPPED), "01.3": passed("01.3")}

    # 4. carol: check cells edited, deleted, and given nbval markers and tags.
    nb = with_sources(ex2=solution_source("01.2"), ex3=NO_BIAS)
    cell(nb, "ex1-check")["source"] = "print('\u2714 01.1 Token ids to logits: public checks passed (5 cases).')"
    nb["cells"].remove(cell(nb, "ex2-check"))
    cell(nb, "ex3-check")["source"] = '# NBVAL_SKIP\ncheck("01.3", lm_parameter_count)'
    cell(nb, "ex3-check")["metadata"]["tags"] = ["raises-exception"]
    folder_layout("carol", nb)
    expected["carol"] = {
        "01.1": tampered("the check cell was edited to `print('\u2714 01.1 Token ids to logits: public checks passed "
                         "(5 cases).')`", failed("01.1", stub("01.1"))),
        "01.2": tampered("the check cell was deleted", passed("01.2")),
        "01.3": tampered('the check cell was edited to `# NBVAL_SKIP \u23ce check("01.3", lm_parameter_count)`; '
                         "nbval tag raises-exception added to the check cell", failed("01.3", NO_BIAS)),
    }

    # 5. dave: hides tracebacks, swallows every exception, redefines `check`; answers that claim equality.
    nb = insert_after(with_sources(ex1=ALWAYS_EQUAL, ex2=SNEAKY), "setup", DISPLAY_TRICKS, "tricks")
    folder_layout("dave", nb)
    expected["dave"] = {"01.1": failed("01.1", ALWAYS_EQUAL), "01.2": failed("01.2", SNEAKY),
                        "01.3": failed("01.3", stub("01.3"))}

    # 6. frank: makes every comparison pass inside the kernel; wrong answers, one right one.
    nb = insert_after(with_sources(ex1=NO_HEAD_BIAS, ex2=SAME, ex3=solution_source("01.3")), "setup",
                      PATCH_COMPARE, "patch")
    folder_layout("frank", nb)
    expected["frank"] = {"01.1": ("tampered", FORGED + feedback("01.1", NO_HEAD_BIAS)),
                         "01.2": ("tampered", FORGED + feedback("01.2", SAME)),
                         "01.3": ("passed", passed("01.3")[1] + " [review the code: it imports the checking code "
                                                                "(transformer_course.checks.core)]")}

    # 7. grace: an input transformer turns every check cell into a print.
    folder_layout("grace", insert_after(released(), "setup", SKIP_CHECKS, "skip"))
    expected["grace"] = {ex: BYPASSED for ex in TITLES}

    # 8. heidi: replaces the grader's check module and forges its records.
    folder_layout("heidi", insert_after(released(), "setup", FORGED_RECORD, "forge"))
    zeros = "def {}(*args):\n    return torch.zeros(2, 3, 5)\n"
    expected["heidi"] = {ex: ("tampered", FORGED + feedback(ex, zeros.format(FUNCTION[ex]))) for ex in TITLES}

    # 9. ivan: an endless loop in one answer.
    folder_layout("ivan", with_sources(correct(), ex2=LOOP))
    expected["ivan"] = {"01.1": passed("01.1"), "01.2": TIMED_OUT, "01.3": passed("01.3")}

    # 10. judy: an endless loop that ignores interrupts; the kernel has to be stopped.
    folder_layout("judy", with_sources(correct(), ex1=STUBBORN))
    stopped = ("timeout", f"not run: cell ex1-check did not finish within {CELL_TIMEOUT} s and the kernel had to be "
               "stopped")
    expected["judy"] = {"01.1": TIMED_OUT, "01.2": stopped, "01.3": stopped}

    # 11. ken: os._exit inside an answer kills the kernel.
    folder_layout("ken", with_sources(correct(), ex2=EXIT))
    expected["ken"] = {"01.1": ("passed", passed("01.1")[1] + " [review the code: it uses _exit]"),
                       "01.2": ("error", "the kernel died while the check ran (the process exited: os._exit, a crash, "
                                         "or no memory)"),
                       "01.3": ("error", "not run: the kernel died in cell ex2-check (a crash, os._exit, or no memory "
                                         "under --memory-limit 3072 MiB)")}

    # 12. lena: a notebook cut short (not valid JSON).
    data = EXERCISE.read_bytes()[:1000]
    file_layout("lena", data)
    try:
        json.loads(data)
    except json.JSONDecodeError as error:
        reason = f"not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
    expected["lena"] = {ex: ("error", NOT_READ + reason) for ex in TITLES}

    # 13. mallory: a folder without the notebook.
    (folder / "mallory").mkdir()
    (folder / "mallory" / "notes.txt").write_text("I did not do it.")
    expected["mallory"] = {ex: MISSING for ex in TITLES}

    # 14. oscar (file layout): extra cells, nbval markers and tags in answers, a syntax error.
    nb = correct()
    cell(nb, "ex1-answer")["source"] = "# NBVAL_SKIP\n" + solution_source("01.1")
    cell(nb, "ex1-answer")["metadata"]["tags"] = ["nbval-skip"]
    cell(nb, "ex2-answer")["metadata"]["tags"] = ["raises-exception", "nbval-ignore-output"]
    cell(nb, "ex3-answer")["source"] = SYNTAX_ERROR
    nb = insert_after(nb, "title", "My notes: shapes first.", "my-notes", "markdown")
    nb = insert_after(nb, "ex1-check", "token_logits = None  # after its check: changes nothing", "scratch-1")
    nb = insert_after(nb, "ex2-answer", "import math\nprint(math.pi)", "scratch-2")
    file_layout("oscar", nb)
    expected["oscar"] = {"01.1": passed("01.1"), "01.2": passed("01.2"),
                         "01.3": ("error", "NameError: name 'lm_parameter_count' is not defined (cell ex3-answer "
                                           "raised SyntaxError: expected ':' (cell, line 1))")}

    # 15. peggy: an answer that allocates without bound; a check cell moved above its answer cell.
    nb = with_sources(correct(), ex1=HOG)
    moved = cell(nb, "ex2-check")
    nb["cells"].remove(moved)
    nb["cells"].insert(nb["cells"].index(cell(nb, "ex2-answer")), moved)
    folder_layout("peggy", nb)
    expected["peggy"] = {"01.1": failed("01.1", HOG, bytearray=_memory_error()), "01.2": passed("01.2"),
                         "01.3": passed("01.3")}

    # 16. quinn: a notebook saved without cell ids (nbformat 4.4): matched by metadata and by text.
    nb = correct()
    nb["nbformat_minor"] = 4
    for c in nb["cells"]:
        del c["id"]
    folder_layout("quinn", nb)
    expected["quinn"] = {ex: passed(ex) for ex in TITLES}

    # 17. rita: the notebook as Colab saves it: no cell ids, every cell's metadata replaced by Colab's own.
    nb = correct()
    nb["nbformat_minor"], nb["metadata"]["colab"] = 0, {"provenance": []}
    for k, c in enumerate(nb["cells"]):
        del c["id"]
        c["metadata"] = {"id": f"c0lab{k:03d}"}
    folder_layout("rita", nb)
    expected["rita"] = {ex: passed(ex) for ex in TITLES}

    # 18. sam: a check cell made markdown, exercise metadata edited, a check cell duplicated.
    nb = correct()
    cell(nb, "ex1-check")["cell_type"] = "markdown"
    del cell(nb, "ex1-check")["outputs"], cell(nb, "ex1-check")["execution_count"]
    cell(nb, "ex2-check")["metadata"]["transformer_course"]["points"] = 20
    nb = insert_after(nb, "ex3-check", 'check("01.3", lm_parameter_count)', "copy-of-check")
    folder_layout("sam", nb)
    expected["sam"] = {
        "01.1": tampered("the check cell was turned into a markdown cell", passed("01.1")),
        "01.2": tampered("the check cell's exercise metadata was changed", passed("01.2")),
        "01.3": passed("01.3"),
    }

    (folder / "README.txt").write_text("collected on Monday")
    return expected


def expected_rows(expected: dict) -> list[list[str]]:
    rows = []
    for student in sorted(expected):
        for ex in sorted(expected[student]):
            status, message = expected[student][ex]
            points = POINTS[ex] if status == "passed" or (status == "tampered" and "run: passed:" in message) else 0
            rows.append([student, NAME, ex, TITLES[ex], str(points), str(POINTS[ex]), status, message])
    return rows


def read_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("release")
    shutil.copy(EXERCISE, folder / NAME)
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory, release):
    """Grade the fabricated submissions once with the command line, as an instructor would."""
    root = tmp_path_factory.mktemp("class")
    submissions = root / "submissions"
    submissions.mkdir()
    expected = fabricate(submissions)
    out = root / "grades.csv"
    code = main(["grade", str(submissions), "--release", str(release), "--out", str(out), "--jobs", "2",
                 "--html", str(root / "report"), "--quiet", *LIMITS])
    return code, expected, out, root


# --- the gradebook of the fabricated class ---------------------------------------------------------------


@pytest.mark.slow  # grades notebooks end to end
def test_grading_runs_and_exits_zero(graded):
    code, expected, out, _ = graded
    assert code == 0
    assert len(expected) >= 12


@pytest.mark.slow  # grades notebooks end to end
@pytest.mark.parametrize("student", ["ada", "blank", "bob", "carol", "dave", "frank", "grace", "heidi", "ivan",
                                     "judy", "ken", "lena", "mallory", "oscar", "peggy", "quinn", "rita",
                                     "sam"])
def test_rows_of_each_fabricated_submission(graded, student):
    _, expected, out, _ = graded
    rows = [r for r in read_rows(out)[1:] if r[0] == student]
    assert rows == expected_rows({student: expected[student]}), "got:\n" + "\n".join(map(repr, rows))


@pytest.mark.slow  # grades notebooks end to end
def test_the_whole_csv_is_exactly_as_expected(graded):
    _, expected, out, _ = graded
    rows = read_rows(out)
    assert rows[0] == COLUMNS
    assert rows[1:] == expected_rows(expected)


# Starts and stops kernels over TCP in a loop, as another user's notebooks or a second grader would.
KERNEL_CHURN = """
from jupyter_client.manager import start_new_kernel
while True:
    km, kc = start_new_kernel(kernel_name="python3")
    kc.stop_channels()
    km.shutdown_kernel(now=True)
"""


@pytest.mark.slow  # grades notebooks end to end
def test_grading_again_under_load_gives_the_same_gradebook(graded, release, tmp_path):
    """Determinism, and no kernel-start failure, with more jobs than cores while kernels start elsewhere."""
    _, expected, out, root = graded
    churn = subprocess.Popen([sys.executable, "-c", KERNEL_CHURN], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        again = tmp_path / "grades.csv"
        code = main(["grade", str(root / "submissions"), "--release", str(release), "--out", str(again),
                     "--jobs", str(2 * (os.cpu_count() or 1)), "--quiet", *LIMITS])
    finally:
        churn.kill()
        churn.wait()
    assert code == 0
    first, second = read_rows(out), read_rows(again)
    changed = [f"{a}\n  -> {b}" for a, b in zip(first, second, strict=True) if a != b]
    assert not changed, "rows that changed under load:\n" + "\n".join(changed)
    assert again.read_bytes() == out.read_bytes()
    assert not [r for r in read_rows(again) if "the notebook could not be run" in r[-1]]


@pytest.mark.slow  # grades notebooks end to end
def test_every_status_is_covered(graded):
    _, _, out, _ = graded
    assert {r[6] for r in read_rows(out)[1:]} == {"passed", "failed", "error", "timeout", "missing", "tampered"}


@pytest.mark.slow  # grades notebooks end to end
def test_feedback_pages(graded):
    _, expected, out, root = graded
    index = (root / "report" / "index.html").read_text()
    for student in expected:
        page = (root / "report" / f"{student}.html").read_text()
        assert f"Feedback for {student}" in page
        assert f'href="{student}.html"' in index
    carol = (root / "report" / "carol.html").read_text()
    assert "tampered" in carol and "the check cell was deleted" in carol


# --- the notebook time limit, shards and merging, determinism ---------------------------------------------


@pytest.mark.slow  # grades notebooks end to end
def test_notebook_time_limit_kills_the_run_and_keeps_finished_checks(tmp_path, release):
    submissions = tmp_path / "submissions"
    (submissions / "trent").mkdir(parents=True)
    nb = insert_after(correct(), "ex1-check", "import time\ntime.sleep(600)", "nap")
    (submissions / "trent" / NAME).write_text(json.dumps(nb))
    out = tmp_path / "grades.csv"
    assert main(["grade", str(submissions), "--release", str(release), "--out", str(out), "--quiet",
                 "--timeout", "300", "--notebook-timeout", "25"]) == 0
    limit = "not run: the notebook's 25 s time limit ran out while cell nap was running"
    assert [(r.exercise, r.status, r.points, r.message) for r in read_csv(out)] == [
        ("01.1", "passed", 2, "all 5 cases passed"),
        ("01.2", "timeout", 0, limit),
        ("01.3", "timeout", 0, limit),
    ]


@pytest.mark.slow  # grades notebooks end to end
def test_a_kernel_that_cannot_start_for_memory_says_so(tmp_path, release):
    # 300 MiB of address space. Here ipykernel itself cannot start its threads; on CI's machine the kernel
    # started and `import torch` failed ("failed to map segment from shared object"). Either way the row
    # must say that memory ran out and which option to raise.
    submissions = tmp_path / "submissions"
    (submissions / "uma").mkdir(parents=True)
    (submissions / "uma" / NAME).write_text(json.dumps(correct()))
    out = tmp_path / "grades.csv"
    assert main(["grade", str(submissions), "--release", str(release), "--out", str(out), "--quiet",
                 "--memory-limit", "300"]) == 0
    for row in read_csv(out):
        assert row.status == "error"
        assert row.message.endswith("it ran out of memory: raise --memory-limit (now 300 MiB)") or (
            row.message.startswith("not run: the kernel died") and "--memory-limit 300 MiB" in row.message), row.message


@pytest.mark.slow  # grades notebooks end to end
def test_shards_merge_into_the_full_gradebook(tmp_path, release):
    submissions = tmp_path / "submissions"
    for student in ("amy", "ben", "cat"):
        (submissions / student).mkdir(parents=True)
    (submissions / "amy" / NAME).write_text(json.dumps(released()))
    (submissions / "ben" / NAME).write_text("not json")
    args = ["--release", str(release), "--quiet", *LIMITS]
    full, one, two = tmp_path / "full.csv", tmp_path / "one.csv", tmp_path / "two.csv"
    assert main(["grade", str(submissions), "--out", str(full), "--jobs", "2", *args]) == 0
    assert main(["grade", str(submissions), "--out", str(one), "--shard", "1/2", *args]) == 0
    assert main(["grade", str(submissions), "--out", str(two), "--shard", "2/2", *args]) == 0
    assert {r.student for r in read_csv(one)} == {"amy", "cat"}
    assert {r.student for r in read_csv(two)} == {"ben"}
    merged = tmp_path / "merged.csv"
    assert main(["merge-grades", str(two), str(one), "--out", str(merged)]) == 0
    assert merged.read_bytes() == full.read_bytes()  # same rows, same order, same bytes


def test_merge_grades_applies_a_regrade(tmp_path, capsys):
    def book(name, rows):
        path = tmp_path / name
        path.write_text(",".join(COLUMNS) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
        return path

    old = book("grades.csv", [("ann", NAME, "01.1", "t", 0, 2, "failed", "x"), ("bo", NAME, "01.1", "t", 2, 2,
                                                                                  "passed", "y")])
    regrade = book("ann.csv", [("ann", NAME, "01.1", "t", 2, 2, "passed", "z")])
    out = tmp_path / "merged.csv"
    assert main(["merge-grades", str(old), str(regrade), "--out", str(out)]) == 0
    assert [(r.student, r.points, r.message) for r in read_csv(out)] == [("ann", 2, "z"), ("bo", 2, "y")]
    assert "ann: the rows from" in capsys.readouterr().err
    assert main(["merge-grades", str(tmp_path / "nope.csv")]) == 2
    (tmp_path / "bad.csv").write_text("a,b\n")
    assert main(["merge-grades", str(tmp_path / "bad.csv")]) == 2


def test_shards_are_deterministic_and_cover_everyone_once():
    class S:
        def __init__(self, name):
            self.name = name

    students = [S(n) for n in "abcdefg"]
    shards = [[s.name for s in select_shard(students, (k, 3))] for k in (1, 2, 3)]
    assert shards == [["a", "d", "g"], ["b", "e"], ["c", "f"]]


# --- command-line errors --------------------------------------------------------------------------------


def test_bad_arguments_give_a_one_line_error(tmp_path, capsys, release):
    subs = tmp_path / "subs"
    (subs / "amy").mkdir(parents=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = str(tmp_path / "g.csv")
    cases = [
        (["grade", str(subs), "--out", out, "--release", str(tmp_path / "nowhere")], "release folder"),
        (["grade", str(subs), "--out", out, "--release", str(empty)], "no released exercises"),
        (["grade", str(tmp_path / "missing"), "--out", out, "--release", str(release)], "submissions folder"),
        (["grade", str(empty), "--out", out, "--release", str(release)], "no submissions"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--shard", "3/2"], "--shard 3/2"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--shard", "x"], "--shard x"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--jobs", "0"], "--jobs 0"),
        (["grade", str(subs), "--out", out, "--release", str(release), "--student", "zoe"], "no submission from zoe"),
        (["grade", str(subs), "--out", str(tmp_path / "no" / "g.csv"), "--release", str(release)], "--out"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and words in err and "\n" not in err, err
    assert not Path(out).exists()


# --- preparing a submission (no kernel) -------------------------------------------------------------------


def test_prepared_notebook_restores_checks_and_read_only_cells():
    release = load_release(EXERCISE)
    nb = correct()
    cell(nb, "setup")["source"] = "def check(*args):\n    pass"
    cell(nb, "ex1-task")["source"] = "I rewrote the task."
    nb["cells"].remove(cell(nb, "ex2-check"))
    prepared = prepare(release, json.dumps(nb).encode())
    cells = {c.id: c for c in prepared.nb.cells}
    original = {c.id: c for c in release.nb.cells}
    assert [c.id for c in prepared.nb.cells] == [c.id for c in release.nb.cells]
    assert cells["setup"].source == original["setup"].source
    assert cells["ex1-task"].source == original["ex1-task"].source
    assert cells["ex2-check"].source == GRADER_CHECK_IMPORT + original["ex2-check"].source
    assert cells["ex1-answer"].source == solution_source("01.1")
    assert prepared.tampered == {"01.2": ["the check cell was deleted"]}
    assert prepared.checks == {"ex1-check": "01.1", "ex2-check": "01.2", "ex3-check": "01.3"}
    assert all(not c.metadata for c in prepared.nb.cells)  # no tags, no learner metadata
    assert all(c.get("outputs", []) == [] for c in prepared.nb.cells)


def test_nbval_markers_are_blanked_keeping_line_numbers():
    source = "# NBVAL_SKIP\nx = 1\n  #  NBVAL_RAISES_EXCEPTION\n# a NBVAL_SKIP in prose stays\n"
    assert strip_markers(source) == "#\nx = 1\n  #\n# a NBVAL_SKIP in prose stays\n"


def test_duplicate_and_invalid_ids_of_extra_cells_are_renamed():
    release = load_release(EXERCISE)
    nb = insert_after(correct(), "ex1-check", "x = 1", "ex1-check")  # a copy keeping the check's id
    nb = insert_after(nb, "ex2-check", "y = 2", "bad id!")
    prepared = prepare(release, json.dumps(nb).encode())
    ids = [c.id for c in prepared.nb.cells]
    assert len(ids) == len(set(ids))
    assert "extra-1" in ids and "extra-2" in ids
    assert prepared.tampered == {}


@pytest.mark.parametrize("data, reason", [
    (b"", "not valid JSON (Expecting value at line 1, column 1)"),
    (b"[1, 2]", "not a Jupyter notebook (the JSON is a list, not an object)"),
    (b'{"nbformat": 3, "worksheets": []}', "not a version 4 Jupyter notebook (nbformat 3)"),
    (b'{"nbformat": 4}', "not a Jupyter notebook (it has no list of cells)"),
    (b"\xff\xfe\x00", "the file is not UTF-8 text"),
])
def test_unreadable_notebooks_say_why(data, reason):
    from transformer_course.grading.prepare import UnreadableNotebook

    with pytest.raises(UnreadableNotebook, match=r"^" + re.escape(reason) + "$"):
        prepare(load_release(EXERCISE), data)


def test_both_layouts_are_found_and_stray_files_noted(tmp_path):
    releases = load_releases(ROOT / "exercises")
    (tmp_path / "amy" / "sub").mkdir(parents=True)
    (tmp_path / "amy" / "sub" / NAME).write_text("{}")
    (tmp_path / "amy" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "amy" / ".ipynb_checkpoints" / NAME).write_text("old")
    (tmp_path / f"bo__{NAME}").write_text("{}")
    (tmp_path / f"amy__{NAME}").write_text("second copy")
    (tmp_path / "notes.md").write_text("")
    (tmp_path / "cy__99_unknown.ipynb").write_text("{}")
    students, notes = find_students(tmp_path, releases)
    assert [s.name for s in students] == ["amy", "bo"]
    assert students[0].notebooks[NAME] == b"{}"
    assert notes == [f"ignored amy__{NAME}: amy/{NAME} is graded instead",
                     "ignored cy__99_unknown.ipynb (not STUDENT__NN_topic.ipynb for a released notebook)",
                     "ignored notes.md"]
    with pytest.raises(GradingError):
        find_students(tmp_path / "nope", releases)


def test_row_fields_match_the_documented_columns():
    assert COLUMNS == ["student", "notebook", "exercise", "title", "points", "max_points", "status", "message"]
    assert [f for f in Row.__dataclass_fields__] == COLUMNS


# --- the record and its replay outside the kernel (in this process, no kernel) ------------------------------


@pytest.fixture
def toy_exercise(monkeypatch):
    """A registered exercise whose checker draws cases from torch's global generator, some of them after
    calling the learner's function."""
    from transformer_course.checks import REGISTRY
    from transformer_course.checks.core import Case, Exercise, check_function

    def checker(answer):
        first = [Case("first", {"x": torch.randn(3)})]
        n = check_function(answer, lambda x: 2 * x, first)
        later = [Case("drawn after the learner's call", {"x": torch.randn(4)})]
        return n + check_function(answer, lambda x: 2 * x, later)

    monkeypatch.setitem(REGISTRY, "99.1", Exercise("99.1", "Double", 1, checker))
    return "99.1"


def graded_check(tmp_path, monkeypatch, answer, exercise="99.1"):
    """What the grader's check records in a kernel, then what the replay outside it says."""
    from transformer_course.grading import kernel
    from transformer_course.grading.replay import confirm

    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    kernel.check(exercise, answer)
    return confirm(exercise, tmp_path / f"{exercise}.pt")


def test_replay_confirms_a_right_answer_that_uses_the_global_generator(tmp_path, monkeypatch, toy_exercise):
    def noisy_double(x):
        torch.randn(7)  # moves the global generator, as dropout or sampling would
        return 2 * x

    found = graded_check(tmp_path, monkeypatch, noisy_double)
    assert (found.verdict, found.cases) == ("passed", 2)


def test_replay_rejects_what_a_patched_comparison_let_through(tmp_path, monkeypatch, toy_exercise):
    from transformer_course.checks import core

    real_compare = core.compare
    monkeypatch.setattr(core, "compare", lambda *args, **kwargs: None)
    from transformer_course.grading import kernel
    from transformer_course.grading.replay import confirm

    monkeypatch.setenv(kernel.RECORDS_ENV, str(tmp_path))
    kernel.check("99.1", lambda x: 3 * x)  # 'passes' in this (tampered) process
    monkeypatch.setattr(core, "compare", real_compare)
    found = confirm("99.1", tmp_path / "99.1.pt")
    assert found.verdict == "failed" and found.message.startswith("wrong result for first [x (3,)]")


def test_replay_of_opaque_and_missing_records(tmp_path, monkeypatch, toy_exercise):
    from transformer_course.grading.replay import confirm

    class AlwaysEqual:
        def __eq__(self, other):
            return True

    with pytest.raises(CheckFailed):
        graded_check(tmp_path, monkeypatch, lambda x: AlwaysEqual())
    assert confirm("99.1", tmp_path / "99.1.pt").verdict == "no_record"  # a failing check saves nothing
    (tmp_path / "99.1.pt").write_bytes(b"not a torch file")
    assert confirm("99.1", tmp_path / "99.1.pt").verdict == "bad_record"
    torch.save({"exercise": "99.1", "calls": [("value", {"__opaque__": "AlwaysEqual", "repr": "eq"},
                                               torch.get_rng_state())]}, tmp_path / "99.1.pt")
    found = confirm("99.1", tmp_path / "99.1.pt")
    assert found.verdict == "failed" and "expected a torch.Tensor, got AlwaysEqual" in found.message


def test_plain_copies_keep_data_and_mark_everything_else():
    from transformer_course.grading.kernel import OPAQUE, plain

    class Sub(torch.Tensor):
        pass

    t = torch.arange(3)
    assert type(plain(torch.nn.Parameter(torch.ones(2)))) is torch.Tensor
    assert plain((t, [1, 2.5], None))[1] == [1, 2.5]
    assert plain(t.as_subclass(Sub))[OPAQUE] == "Sub"
    assert plain({"a": 1})[OPAQUE] == "dict"
    assert "0xADDRESS" in plain(object())["repr"]


def test_review_notes_point_at_code_worth_reading():
    from transformer_course.grading.prepare import review_notes

    assert review_notes(["def f(x):\n    return x @ x.T", "from transformer_course.checks import check"]) == []
    assert review_notes([
        "from transformer_course.multihead import split_heads",
        "import transformer_course.checks.core as core\ncore.compare = None",
        "def check(*args):\n    pass",
        "import sys, builtins\nsys.modules['x'] = None\nget_ipython().set_custom_exc((Exception,), print)",
        "this is not Python",
    ]) == [
        "imports the course's reference code (transformer_course.multihead)",
        "imports the checking code (transformer_course.checks.core)",
        "redefines check",
        "uses builtins, get_ipython, set_custom_exc, sys.modules",
    ]
