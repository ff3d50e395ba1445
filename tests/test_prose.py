"""Numbers in a lesson's prose come from its outputs: a test that flags numbers a run produces quoted as literals.

A number that a run produces (an accuracy, a loss, a timing, a speed-up, a parameter count that a cell computes)
reaches a lesson's Markdown through myst-nb's glue: `glue("name", value, display=False)` in the cell that computes
it and {glue:text}`name` (or {glue:text}`name:.1f`) in the text, so that re-executing the notebook on any machine
rewrites the text with the outputs. This test finds the literals that look like such numbers and are not glued.

What counts as a quoted result (``suspects``): a percentage (``92%``), a multiple (``3.1x``, ``7.5 times``), a
time (``70 s``, ``0.2 ms``), a number with a decimal point (``0.062``) and a number grouped by thousands
(``239,246``). Integers without a unit (``d = 64``, ``8 heads``, ``300 steps``) are sizes chosen in the text and are
not suspects. What is allowed:

- glue references, citations and other roles, link targets, inline code and the numbers of sections, lessons and
  exercises (``section 10.7``, ``sections 4.3 to 4.5``, ``exercise 05.2``);
- a number that also appears as a literal in the lesson's code, comments excluded (``lr = 7e-3`` allows ``0.007``;
  ``0.75`` or ``75`` allows ``75%``; ``2_048`` allows ``2,048``): a constant of the task, chosen in code;
- the constants of the paper and of arithmetic listed in ``ALLOWED`` per lesson, each with the reason it is not a
  result (``log2(10) = 3.32``, the 4,000 warm-up steps of the 2017 paper).
"""

import io
import json
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Per lesson: literal -> why it is not a number that a run produces.
ALLOWED = {
    "01": {"15%": "BERT's masking rate, from the BERT paper"},
    "02": {"3.4": "the largest float32, 3.4e38", "1.2": "float32's machine epsilon, 1.2e-7",
           "2.77": "log 16, arithmetic", "1.5": "4 / sqrt(7), arithmetic in the text"},
    "03": {"65,504": "the largest float16"},
    "04": {"2,053": "4d + 5 at the paper's d = 512, arithmetic in the text",
           "1.7%": "35 / 2,053, the limit of the formula in the text at d = 512, h = 8"},
    "06": {"6.3": "2 pi, arithmetic", "0.1": "an angle of the worked example", "0.01": "an angle of the example"},
    "07": {"4,000": "the 2017 paper's warm-up steps"},
    "08": {"1.5": "GPT-2's largest size, 1.5 billion parameters (the GPT-2 paper)",
           "12,704": "12d^2 + 13d at d = 32, arithmetic in the text", "4,096": "the widest model of the figure"},
    "09": {"20.07": "a date written with dots, 20.07.1969, an example of the task's input",
           "90%": "the training share of data.date_splits (5% validation, 5% test)",
           "2,400": "12 formats x 200 test dates"},
    "10": {"3.32": "log2(10), arithmetic", "40,000": "the number of draws of exercise 10.2's check"},
    "11": {"4,000": "the 2017 paper's warm-up steps"},
    "12": {"9,000": "the task's training split, about 9,000 numbers (data.number_splits)",
           "9,001": "the task's training split's exact size (data.number_splits: fixed, not a run's result)",
           "100,000": "the 2017 paper's training steps", "0.98": "the 2017 paper's Adam beta_2",
           "0.999": "PyTorch's AdamW default beta_2", "0.01": "PyTorch's AdamW default weight decay",
           "84%": "quoted from benchmarks/capstone_recipe.py dropout: 79-84% validation exact match, p = 0",
           "99%": "quoted from benchmarks/capstone_recipe.py dropout: the small set's fit with p = 0.3",
           "98.0%": "quoted from benchmarks/capstone_recipe.py schedule: the cosine's exact match, seed 1",
           "98.8%": "quoted from benchmarks/capstone_recipe.py schedule: the cosine's exact match, seed 0",
           "96.6%": "quoted from benchmarks/capstone_recipe.py schedule: the paper's decay, seed 1",
           "94.2%": "quoted from benchmarks/capstone_recipe.py schedule: the paper's decay, seed 0",
           "6.4": "the smoothed loss's optimal logit margin for eps = 0.1, |V| = 64: a formula",
           "0.25": "the translator's parameter count in millions (243,584: fixed by the configuration)"},
    "13": {"1.47": "nanoGPT's published validation loss for its GPU Shakespeare-char configuration (its README)",
           "1.88": "nanoGPT's published validation loss for its CPU configuration (its README)",
           "10.7": "nanoGPT's GPU Shakespeare-char model, 10.7M parameters (its README)",
           "5,000": "nanoGPT's max_iters for its GPU Shakespeare-char configuration",
           "2,000": "nanoGPT's max_iters for its CPU configuration"},
}

# The lessons whose prose is checked.
LESSONS = ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13"]

NUMBER = re.compile(r"""
    (?<![\w.,{\\])                                   # not inside a word, a longer number or a LaTeX command
    (?P<num>\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?   # 239,246 (or 2{,}053 in LaTeX)
       |\d+\.\d+                                     # 0.062
       |\d+)                                         # 42
    (?P<unit>\s?\\?%                                 # 92%, 92\% in LaTeX
       |\s?(?:x|×|times)(?![\w])                     # 3.1x, 7.5 times
       |\s?(?:ms|µs|us|ns|s|min|seconds?|milliseconds?|microseconds?)(?![\w])
    )?
    (?![\w.]\d)                                      # not a date such as 20.07.1969 cut short
""", re.X)
SKIP = [
    re.compile(r"\{glue(?::\w+)?\}`[^`]*`"),  # glue references: what the test asks for
    re.compile(r"\{[\w:-]+\}`[^`]*`"),  # other roles: citations, references
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"`[^`\n]*`"),  # inline code: names and constants of the code
    re.compile(r"^#+ +\d+(?:\.\d+)*", re.M),  # the number in a heading
    re.compile(r"(?i)\b(?:sections?|exercises?|chapters?|lessons?|§)\s*\[?\d+(?:\.\d+)*\]?"
               r"(?:\s*(?:,|and|to|or|-|–)\s*\[?\d+(?:\.\d+)*\]?)*"),  # section, lesson and exercise numbers
]


def code_values(cells) -> set[float]:
    """The values of the number literals in the code cells, comments excluded, and of the numbers in strings."""
    values = set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        except (tokenize.TokenError, IndentationError, SyntaxError):
            continue
        for token in tokens:
            if token.type == tokenize.NUMBER:
                text = token.string.replace("_", "").rstrip("jJ")
                values.add(round(float(int(text, 0) if text[:2].lower() in ("0x", "0o", "0b") else text), 12))
            elif token.type == tokenize.STRING:
                values.update(round(float(m.replace(",", "")), 12)
                              for m in re.findall(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?", token.string))
    return values


def unglued_numbers(cells, allowed=None) -> list[tuple[str, str, str]]:
    """(cell id, literal, context) for each number in the Markdown cells that looks like a result and is neither
    glued, nor a literal of the code, nor in ``allowed`` (literal -> reason)."""
    allowed = allowed or {}
    values = code_values(cells)
    found = []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        for pattern in SKIP:
            text = pattern.sub(" ", text)
        for match in NUMBER.finditer(text):
            literal, unit = match["num"].replace("{,}", ","), (match["unit"] or "").strip().lstrip("\\")
            if not (unit or "." in literal or "," in literal):
                continue  # an integer without a unit: a size chosen in the text
            value = round(float(literal.replace(",", "")), 12)
            if value in values or (unit == "%" and round(value / 100, 12) in values):
                continue
            if literal in allowed or literal + unit in allowed:
                continue
            context = text[max(0, match.start() - 50):match.end() + 20].replace("\n", " ")
            found.append((cell.get("id", "?"), match.group().strip(), context))
    return found


def lesson(number: str) -> dict:
    [path] = (ROOT / "lessons").glob(f"{number}_*.ipynb")
    return json.loads(path.read_text())


@pytest.mark.parametrize("number", LESSONS)
def test_numbers_in_prose_are_glued(number):
    found = unglued_numbers(lesson(number)["cells"], ALLOWED.get(number))
    assert not found, (f"lesson {number} quotes {len(found)} number(s) that look like results and are not glued "
                       f"(glue them, or add a constant to ALLOWED with its reason):\n"
                       + "\n".join(f"  {cell}: {literal!r} in ...{context}..." for cell, literal, context in found))


def test_every_allowed_literal_is_still_quoted():
    # An allow-list entry that no lesson needs any more would hide a stale number later: remove it.
    for number, allowed in ALLOWED.items():
        markdown = " ".join("".join(c["source"]) for c in lesson(number)["cells"] if c["cell_type"] == "markdown")
        for literal in allowed:
            assert literal.rstrip("%") in markdown.replace("{,}", ","), f"lesson {number}: {literal!r} no longer in it"


def markdown_cell(text: str, cell_id: str = "md") -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": [text]}


def code_cell(text: str) -> dict:
    return {"cell_type": "code", "id": "code", "metadata": {}, "source": [text], "outputs": []}


@pytest.mark.parametrize("text, literal", [
    ("The model reaches 92.4% exact match.", "92.4%"),
    ("It ends at a validation loss of 0.062.", "0.062"),
    ("The cache makes generation 3.1x faster.", "3.1x"),
    ("Seven and a half: 7.5 times fewer FLOPs.", "7.5 times"),
    ("On two cores the run takes about 70 s.", "70 s"),
    ("A call of 0.2 ms slips in between.", "0.2 ms"),
    ("A 239,246-parameter model.", "239,246"),
    ("In math: $35 / 2{,}048 \\approx 1.7\\%$.", "1.7\\%"),
])
def test_an_unglued_result_is_flagged(text, literal):
    code = "steps, n = 300, 2_048\nlr = 3e-3  # 92.4% in one run: comments do not count"
    cells = [code_cell(code), markdown_cell(text)]
    found = unglued_numbers(cells)
    assert [f[1] for f in found] == [literal]


@pytest.mark.parametrize("text", [
    "The model reaches {glue:text}`accuracy:.1%` exact match.",
    "It ends at a validation loss of {glue:text}`loss:.3f`, {glue}`loss`.",
    "Training for 300 steps at a learning rate of 0.003 reaches 75% or more.",  # literals of the code
    "Sections 10.7 to 10.9 time it; exercise 05.2 writes it; see section 4.10 and lesson 9.",
    "With $d = 64$, $h = 8$ heads and $4d$ in the FFN (the paper of 2017).",  # integers without a unit
    "The `lr=0.125` and `4.5` are quoted code.",
    "See [the notebook](../lessons/01_x.ipynb#1.5) and {cite}`vaswani2017attention`.",
    "The paper warms up over 4,000 steps.",  # allowed below with its reason
])
def test_glue_code_constants_and_references_pass(text):
    cells = [code_cell("steps = 300\nlr = 3e-3\nassert accuracy > 0.75"), markdown_cell(text)]
    assert unglued_numbers(cells, {"4,000": "the 2017 paper's warm-up steps"}) == []
