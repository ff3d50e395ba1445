"""A class of fabricated submissions of exercises/01 for the grader's end-to-end tests.

Each student is made by one small builder (a function named after the student) that writes the
submission into a folder and returns the (status, message) expected for each exercise. The submissions
are made from the real released notebook (exercises/01) and the real answers (solutions/01), as JSON
dicts edited cell by cell. The expected feedback of a failing check is computed by running the same
answer code through the same check in this process, so the rows are exact without copying the checks'
messages into this file.
"""

from __future__ import annotations

import copy
import csv
import json
import linecache
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from transformer_course.checks import CheckFailed, check

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
# peggy's answer touches all the address space the kernel has left before MemoryError (bytearray zeroes its
# pages): under 3072 MiB that took 3.5 s of CPU on this machine kind and, with more jobs than cores and notebooks
# running beside the grader, more than the 10 s cell limit (a timeout instead of MemoryError); 2048 MiB: 1 s.
MEMORY_LIMIT_MB = 2048
LIMITS = ["--timeout", str(CELL_TIMEOUT), "--notebook-timeout", "90", "--memory-limit", str(MEMORY_LIMIT_MB)]


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
# Computes, and ignores the interrupt: the kernel must be stopped. (It computes rather than sleeps: a cell's limit
# counts CPU time, and a sleeping cell would run WAIT_FACTOR times as long; tests/test_nbval_patches.py covers that.)
# SIGINT is ignored, not caught: a loop that catches KeyboardInterrupt in a `try` lets one through when the signal
# is handled between its statements (seen once in a hundred-odd gradings under load; the row then said "passed").
STUBBORN = ("import signal\n\n\ndef token_logits(tokens, embedding, head_weight, head_bias):\n"
            "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n        sum(range(100_000))\n")
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
    "fake.recording_check = _check\n"
    "sys.modules['transformer_course.grading.kernel'] = fake\n"
)


def feedback(exercise: str, source: str, **overrides) -> str:
    """What `check(exercise, <the function defined by source>)` says here, without the 'id title: ' prefix."""
    return feedback_and_mistake(exercise, source, **overrides)[0]


def feedback_and_mistake(exercise: str, source: str, **overrides) -> tuple[str, str]:
    """:func:`feedback`, and the gradebook's name of the mistake the check recognised ('' if none)."""
    filename = f"<answer {exercise} {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"torch": torch, "nn": nn, "__name__": "__main__", **overrides}
    exec(compile(source, filename, "exec"), namespace)
    with pytest.raises(CheckFailed) as failure:
        check(exercise, namespace[FUNCTION[exercise]])
    prefix = f"{exercise} {TITLES[exercise]}: "
    message = str(failure.value)
    assert message.startswith(prefix)
    mistake = f"{exercise}/{failure.value.mistake.id}" if failure.value.mistake else ""
    return message[len(prefix):].strip(), mistake  # the grader strips trailing blanks


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


def failed(exercise: str, source: str, **overrides) -> tuple[str, str, str]:
    """A failed row: its message and the mistake column."""
    return "failed", *feedback_and_mistake(exercise, source, **overrides)


def tampered(changes: str, result: tuple[str, str]) -> tuple[str, str]:
    return "tampered", f"{changes}. The released check was restored and run: {result[0]}: {result[1]}"


FORGED = ("the check passed inside the kernel, but the results it recorded fail the same check run outside the "
          "kernel, so the checking code was altered: ")
BYPASSED = ("tampered", "the check cell ran without an error but the check never completed: `check` or the checking "
            "code was replaced or bypassed inside the kernel")
TIMED_OUT = ("timeout", f"the check did not finish within the {CELL_TIMEOUT} s cell time limit")
NOT_READ = "the notebook could not be read: "
MISSING = ("missing", f"no {NAME} in the submission")


Expected = dict[str, tuple[str, ...]]  # exercise -> (status, message) or, for a failed row, (status, message, mistake)
STUDENTS: dict[str, Callable[[Path], Expected]] = {}


def student(builder: Callable[[Path], Expected]) -> Callable[[Path], Expected]:
    STUDENTS[builder.__name__] = builder
    return builder


def write(path: Path, nb: dict | bytes) -> None:
    path.write_bytes(nb if isinstance(nb, bytes) else json.dumps(nb, indent=1).encode())


def folder_layout(folder: Path, name: str, nb: dict | bytes) -> None:
    """SUBMISSIONS/STUDENT/NN_topic.ipynb"""
    (folder / name).mkdir()
    write(folder / name / NAME, nb)


def file_layout(folder: Path, name: str, nb: dict | bytes) -> None:
    """SUBMISSIONS/STUDENT__NN_topic.ipynb"""
    write(folder / f"{name}__{NAME}", nb)


@student
def ada(folder: Path) -> Expected:
    """The solutions' answers in the released notebook."""
    folder_layout(folder, "ada", correct())
    return {ex: passed(ex) for ex in TITLES}


@student
def blank(folder: Path) -> Expected:
    """The released notebook as it is."""
    folder_layout(folder, "blank", released())
    return {ex: failed(ex, stub(ex)) for ex in TITLES}


@student
def bob(folder: Path) -> Expected:
    """Two classic mistakes, one right answer, and a cell that runs code built from a string, which only the
    kernel's audit hook sees (grading/audit.py). (STUDENT__NN_topic.ipynb layout)"""
    nb = with_sources(ex1=WRONG_TRANSPOSE, ex2=SWAPPED, ex3=solution_source("01.3"))
    file_layout(folder, "bob", insert_after(nb, "ex3-answer", 'exec("answer = " + "42")', "built"))
    return {"01.1": failed("01.1", WRONG_TRANSPOSE), "01.2": failed("01.2", SWAPPED),
            "01.3": ("passed", passed("01.3")[1] + " [review the code: it ran code built from strings (exec, eval or "
                                                   "compile)]")}


@student
def carol(folder: Path) -> Expected:
    """Check cells edited, deleted, and given nbval markers and tags."""
    nb = with_sources(ex2=solution_source("01.2"), ex3=NO_BIAS)
    cell(nb, "ex1-check")["source"] = "print('\u2714 01.1 Token ids to logits: public checks passed (5 cases).')"
    nb["cells"].remove(cell(nb, "ex2-check"))
    cell(nb, "ex3-check")["source"] = '# NBVAL_SKIP\ncheck("01.3", lm_parameter_count)'
    cell(nb, "ex3-check")["metadata"]["tags"] = ["raises-exception", "nbval-skip"]  # the release's tag and one more
    folder_layout(folder, "carol", nb)
    return {
        "01.1": tampered("the check cell was edited to `print('\u2714 01.1 Token ids to logits: public checks passed "
                         "(5 cases).')`", failed("01.1", stub("01.1"))),
        "01.2": tampered("the check cell was deleted", passed("01.2")),
        "01.3": tampered('the check cell was edited to `# NBVAL_SKIP \u23ce check("01.3", lm_parameter_count)`; '
                         "nbval tag nbval-skip added to the check cell", failed("01.3", NO_BIAS)),
    }


@student
def dave(folder: Path) -> Expected:
    """Hides tracebacks, swallows every exception, redefines `check`; answers that claim equality."""
    nb = insert_after(with_sources(ex1=ALWAYS_EQUAL, ex2=SNEAKY), "setup", DISPLAY_TRICKS, "tricks")
    folder_layout(folder, "dave", nb)
    return {"01.1": failed("01.1", ALWAYS_EQUAL), "01.2": failed("01.2", SNEAKY),
            "01.3": failed("01.3", stub("01.3"))}


@student
def frank(folder: Path) -> Expected:
    """Makes every comparison pass inside the kernel; wrong answers, one right one."""
    nb = insert_after(with_sources(ex1=NO_HEAD_BIAS, ex2=SAME, ex3=solution_source("01.3")), "setup",
                      PATCH_COMPARE, "patch")
    folder_layout(folder, "frank", nb)
    return {"01.1": ("tampered", FORGED + feedback("01.1", NO_HEAD_BIAS)),
            "01.2": ("tampered", FORGED + feedback("01.2", SAME)),
            "01.3": ("passed", passed("01.3")[1] + " [review the code: it imports the checking code "
                                                   "(transformer_course.checks.core)]")}


@student
def grace(folder: Path) -> Expected:
    """An input transformer turns every check cell into a print."""
    folder_layout(folder, "grace", insert_after(released(), "setup", SKIP_CHECKS, "skip"))
    return {ex: BYPASSED for ex in TITLES}


@student
def heidi(folder: Path) -> Expected:
    """Replaces the grader's check module and forges its records."""
    folder_layout(folder, "heidi", insert_after(released(), "setup", FORGED_RECORD, "forge"))
    zeros = "def {}(*args):\n    return torch.zeros(2, 3, 5)\n"
    return {ex: ("tampered", FORGED + feedback(ex, zeros.format(FUNCTION[ex]))) for ex in TITLES}


@student
def ivan(folder: Path) -> Expected:
    """An endless loop in one answer."""
    folder_layout(folder, "ivan", with_sources(correct(), ex2=LOOP))
    return {"01.1": passed("01.1"), "01.2": TIMED_OUT, "01.3": passed("01.3")}


@student
def judy(folder: Path) -> Expected:
    """An endless loop that ignores interrupts; the kernel has to be stopped."""
    folder_layout(folder, "judy", with_sources(correct(), ex1=STUBBORN))
    stopped = ("timeout", f"not run: cell ex1-check did not finish within {CELL_TIMEOUT} s and the kernel had to be "
               "stopped")
    return {"01.1": TIMED_OUT, "01.2": stopped, "01.3": stopped}


@student
def ken(folder: Path) -> Expected:
    """Os._exit inside an answer kills the kernel."""
    folder_layout(folder, "ken", with_sources(correct(), ex2=EXIT))
    return {"01.1": ("passed", passed("01.1")[1] + " [review the code: it uses _exit]"),
            "01.2": ("error", "the kernel died while the check ran (the process exited: os._exit, a crash, "
                              "or no memory)"),
            "01.3": ("error", "not run: the kernel died in cell ex2-check (a crash, os._exit, or no memory "
                              f"under --memory-limit {MEMORY_LIMIT_MB} MiB)")}


@student
def lena(folder: Path) -> Expected:
    """A notebook cut short (not valid JSON)."""
    data = EXERCISE.read_bytes()[:1000]
    file_layout(folder, "lena", data)
    try:
        json.loads(data)
    except json.JSONDecodeError as error:
        reason = f"not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
    return {ex: ("error", NOT_READ + reason) for ex in TITLES}


@student
def mallory(folder: Path) -> Expected:
    """A folder without the notebook."""
    (folder / "mallory").mkdir()
    (folder / "mallory" / "notes.txt").write_text("I did not do it.")
    return {ex: MISSING for ex in TITLES}


@student
def oscar(folder: Path) -> Expected:
    """Extra cells, nbval markers and tags in answers, a syntax error. (file layout)"""
    nb = correct()
    cell(nb, "ex1-answer")["source"] = "# NBVAL_SKIP\n" + solution_source("01.1")
    cell(nb, "ex1-answer")["metadata"]["tags"] = ["nbval-skip"]
    cell(nb, "ex2-answer")["metadata"]["tags"] = ["raises-exception", "nbval-ignore-output"]
    cell(nb, "ex3-answer")["source"] = SYNTAX_ERROR
    nb = insert_after(nb, "title", "My notes: shapes first.", "my-notes", "markdown")
    nb = insert_after(nb, "ex1-check", "token_logits = None  # after its check: changes nothing", "scratch-1")
    nb = insert_after(nb, "ex2-answer", "import math\nprint(math.pi)", "scratch-2")
    file_layout(folder, "oscar", nb)
    return {"01.1": passed("01.1"), "01.2": passed("01.2"),
            "01.3": ("error", "NameError: name 'lm_parameter_count' is not defined (cell ex3-answer "
                              "raised SyntaxError: expected ':' (cell, line 1))")}


@student
def peggy(folder: Path) -> Expected:
    """An answer that allocates without bound; a check cell moved above its answer cell."""
    nb = with_sources(correct(), ex1=HOG)
    moved = cell(nb, "ex2-check")
    nb["cells"].remove(moved)
    nb["cells"].insert(nb["cells"].index(cell(nb, "ex2-answer")), moved)
    folder_layout(folder, "peggy", nb)
    return {"01.1": failed("01.1", HOG, bytearray=_memory_error()), "01.2": passed("01.2"),
            "01.3": passed("01.3")}


@student
def quinn(folder: Path) -> Expected:
    """A notebook saved without cell ids (nbformat 4.4): matched by metadata and by text."""
    nb = correct()
    nb["nbformat_minor"] = 4
    for c in nb["cells"]:
        del c["id"]
    folder_layout(folder, "quinn", nb)
    return {ex: passed(ex) for ex in TITLES}


@student
def rita(folder: Path) -> Expected:
    """The notebook as Colab saves it: no cell ids, every cell's metadata replaced by Colab's own."""
    nb = correct()
    nb["nbformat_minor"], nb["metadata"]["colab"] = 0, {"provenance": []}
    for k, c in enumerate(nb["cells"]):
        del c["id"]
        c["metadata"] = {"id": f"c0lab{k:03d}"}
    folder_layout(folder, "rita", nb)
    return {ex: passed(ex) for ex in TITLES}


@student
def sam(folder: Path) -> Expected:
    """A check cell made markdown, exercise metadata edited, a check cell duplicated."""
    nb = correct()
    cell(nb, "ex1-check")["cell_type"] = "markdown"
    del cell(nb, "ex1-check")["outputs"], cell(nb, "ex1-check")["execution_count"]
    cell(nb, "ex2-check")["metadata"]["transformer_course"]["points"] = 20
    nb = insert_after(nb, "ex3-check", 'check("01.3", lm_parameter_count)', "copy-of-check")
    folder_layout(folder, "sam", nb)
    return {
        "01.1": tampered("the check cell was turned into a markdown cell", passed("01.1")),
        "01.2": tampered("the check cell's exercise metadata was changed", passed("01.2")),
        "01.3": passed("01.3"),
    }


REWRITE_PACKAGE = (
    "import os\nimport transformer_course.checks.lesson01 as lesson01\n\n"
    "os.chmod(lesson01.__file__, 0o644)  # the grader's copy is read-only: a speed bump, not the defence\n"
    "with open(lesson01.__file__, 'a') as f:\n"
    "    f.write('\\nREGISTRY_CHANGED = True\\n')\n"
)


@student
def trudy(folder: Path) -> Expected:
    """Rewrites the checking code in the package its kernel imports; right answers otherwise."""
    folder_layout(folder, "trudy", insert_after(correct(), "setup", REWRITE_PACKAGE, "rewrite"))
    changed = ("tampered", "the notebook changed the course package its kernel imported (checks/lesson01.py "
               "modified), so no check of this run can be trusted")
    return {ex: changed for ex in TITLES}


# Sleeps 12 s on its first call, longer than the cell limit, without computing; right otherwise.
SLEEPY = ("import time\n_pairs, _slept = next_token_pairs, []\n\n\ndef next_token_pairs(tokens):\n"
          "    if not _slept:\n        _slept.append(time.sleep(12))\n    return _pairs(tokens)\n")


@student
def arthur(folder: Path) -> Expected:
    """Waits longer than the cell limit without computing: a cell's limit counts the kernel's CPU time, and a waiting
    cell only stops at WAIT_FACTOR times the limit, so every check passes. (Had the grader read the wall clock, or
    failed to find the kernel's process, 01.2 would be a timeout.) Second by name, so graded among the first: his wait
    overlaps the class's computing instead of ending the grading with idle cores (the grader takes students in
    the order of their names)."""
    folder_layout(folder, "arthur", insert_after(correct(), "ex2-answer", SLEEPY, "nap"))
    return {ex: passed(ex) for ex in TITLES}


def fabricate(folder: Path) -> dict[str, Expected]:
    """Write every student's submission into ``folder``; return what each one's rows must say."""
    expected = {name: build(folder) for name, build in STUDENTS.items()}
    (folder / "README.txt").write_text("collected on Monday")
    return expected


def expected_rows(expected: dict) -> list[list[str]]:
    rows = []
    for student in sorted(expected):
        for ex in sorted(expected[student]):
            status, message, *mistake = expected[student][ex]
            points = POINTS[ex] if status == "passed" or (status == "tampered" and "run: passed:" in message) else 0
            mistake = mistake[0] if mistake else ""
            rows.append([student, NAME, ex, TITLES[ex], str(points), str(POINTS[ex]), status, message, mistake])
    return rows


def read_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))



# --- a class of gradebook rows, for the class report (no notebook is run) --------------------------------------

# Names that no check's message contains, so that a test can assert that none reaches the class page.
CLASS = ["Aurelio", "Brunhilde", "Cosimo", "Dagny", "Evander", "Fenella", "Gideon", "Honoria", "Ignatius",
         "Jessamy", "Kasimir", "Leocadia"]
CLASS_NOTEBOOKS = {"01": NAME, "02": "02_attention.ipynb", "03": "03_masking.ipynb"}


def _stub(*args):
    raise NotImplementedError("replace this line with your code")


def _named_error(student: str):
    def answer(n):
        raise ValueError(f"{student}'s mask is not ready")  # a message that carries the student's name

    return answer


# Per exercise, the answers handed in by the class, in the order of CLASS: None for a right answer (passed),
# a function (the check's real message and mistake), or a status with no check run ("missing", "error").
RIGHT, ABSENT, BROKEN = None, "missing", "error"
TRANSPOSE = lambda t, E, W, b: E[t] @ W + b  # noqa: E731  01.1/head-not-transposed
NO_BIAS_LOGITS = lambda t, E, W, b: E[t] @ W.T  # noqa: E731  01.1/head-bias-missing
DOUBLE_BIAS = lambda t, E, W, b: E[t] @ W.T + 2 * b  # noqa: E731  no known mistake
SWAP = lambda t: (t[..., 1:], t[..., :-1])  # noqa: E731  01.2/inputs-targets-swapped
NAIVE = lambda x, dim: x.exp() / x.exp().sum(dim, keepdim=True)  # noqa: E731  02.1/no-max-subtracted
HALF = lambda x, dim: torch.softmax(x, dim=dim) / 2  # noqa: E731  no known mistake
NO_DIAGONAL = lambda n: torch.ones(n, n).tril(-1).bool()  # noqa: E731  03.1/diagonal-excluded
INVERTED = lambda n: ~torch.ones(n, n).tril().bool()  # noqa: E731  03.1/polarity-inverted
CLASS_ANSWERS = {
    "01.1": [RIGHT] * 5 + [TRANSPOSE] * 4 + [NO_BIAS_LOGITS] * 2 + [DOUBLE_BIAS],
    "01.2": [RIGHT] * 8 + [SWAP] * 3 + [_stub],
    "02.1": [RIGHT] * 2 + [NAIVE] * 2 + [HALF] * 6 + [BROKEN] * 2,
    "03.1": [RIGHT] * 3 + [NO_DIAGONAL] * 5 + [INVERTED, "named error", "named error", ABSENT],
}
# What the class report must find: passed; known mistakes (most students first, ties by id); wrong answers that
# match no known mistake; stubs.
CLASS_EXPECTED = {
    "01.1": (5, [("01.1/head-not-transposed", 4), ("01.1/head-bias-missing", 2)], 1, 0),
    "01.2": (8, [("01.2/inputs-targets-swapped", 3)], 0, 1),
    "02.1": (2, [("02.1/no-max-subtracted", 2)], 6, 0),
    "03.1": (3, [("03.1/diagonal-excluded", 5), ("03.1/polarity-inverted", 1)], 2, 0),
}


def class_rows() -> list:
    """The gradebook rows of the fabricated class: messages and mistakes as the real checks give them."""
    from transformer_course.checks import REGISTRY
    from transformer_course.grading.gradebook import GradeRow, sort_rows

    rows = []
    for exercise, answers in CLASS_ANSWERS.items():
        ex = REGISTRY[exercise]
        notebook = CLASS_NOTEBOOKS[ex.lesson]
        for student, answer in zip(CLASS, answers, strict=True):
            if answer is RIGHT:
                rows.append(GradeRow(student, notebook, exercise, ex.title, ex.points, ex.points, "passed",
                                "all 5 cases passed"))
                continue
            if answer == ABSENT:
                rows.append(GradeRow(student, notebook, exercise, ex.title, 0, ex.points, "missing",
                                f"no {notebook} in the submission"))
                continue
            if answer == BROKEN:
                rows.append(GradeRow(student, notebook, exercise, ex.title, 0, ex.points, "error",
                                "NameError: name 'softmax' is not defined"))
                continue
            if answer == "named error":
                answer = _named_error(student)
            with pytest.raises(CheckFailed) as failure:
                check(exercise, answer)
            message = str(failure.value)[len(f"{exercise} {ex.title}: "):].strip()
            mistake = f"{exercise}/{failure.value.mistake.id}" if failure.value.mistake else ""
            rows.append(GradeRow(student, notebook, exercise, ex.title, 0, ex.points, "failed", message, mistake))
    return sort_rows(rows)
