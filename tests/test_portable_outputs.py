"""Compared outputs print no floating-point noise (DESIGN.md, "Portable outputs").

nbval re-executes every lesson and solution on the reader's machine and compares what a cell prints with the
stored output. Another CPU, vector unit, thread count or BLAS path changes the last bits of a float result,
so an output that shows those bits fails there although the lesson is right. This test reads the stored
outputs that nbval compares (cells without ``nbval-ignore-output``) and fails on the forms that show noise:

- a number below 1e-5 in scientific notation (``1.0e-07``): the size of a rounding difference;
- a decimal number with more than four significant digits (``2.8569``, ``0.580423``);
- a negative zero at the printed precision (``-0.000``): its sign is noise;
- a float tensor whose entries all print as whole numbers (``tensor([1., 1.])``, ``tensor([1.000, 1.000])``):
  PyTorch switches between the two forms when a sum of 1 is off by one ulp.

A cell whose printed digits do not depend on rounding although they match a form above (integer arithmetic,
fixed inputs, float64 results, exact zeros of a mask) says so with the tag ``portable-output``; a cell whose
numbers depend on the machine gets ``nbval-ignore-output`` (its asserts still run). `make test-portable` then
proves the outputs under other numerics by re-executing every lesson and solution.
"""

import configparser
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = [*sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb")),
             *sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))]
NOT_COMPARED = {"nbval-ignore-output", "nbval-skip", "portable-output"}
# The mime types nbval leaves out of its comparison (nbval.plugin.IPyNbFile.skip_compare).
SKIPPED_DATA = {"image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json"}

TINY = re.compile(r"(?<![\w.])-?\d\.\d+e-0*(?:[5-9]|[1-9]\d)\b")
DECIMAL = re.compile(r"(?<![\w.])-?(\d+)\.(\d+)(?![\d.e])")
NEGATIVE_ZERO = re.compile(r"(?<![\w.])-0\.0+(?![\d.e])")
TENSOR = re.compile(r"tensor\((\[[^()]*?\])(?:\)|,\s*[a-z_]+=)")
WHOLE = re.compile(r"^-?\d+\.(0*)$")


def _significant(whole: str, fraction: str) -> int:
    # Trailing zeros do not count: 1.0000 or 1000.0 sits far from the rounding boundaries of its last digit.
    return len((whole + fraction.rstrip("0")).lstrip("0"))


def noise(text: str) -> list[str]:
    """The noise-showing numbers in ``text``, each with its reason; ``[]`` if there are none."""
    found = [f"{m.group()} (scientific notation below 1e-5)" for m in TINY.finditer(text)]
    plain = TINY.sub(" ", text)
    found += [f"{m.group()} (more than four significant digits)" for m in DECIMAL.finditer(plain)
              if _significant(m.group(1), m.group(2)) > 4]
    found += [f"{m.group()} (negative zero)" for m in NEGATIVE_ZERO.finditer(plain)]
    for m in TENSOR.finditer(text):
        entries = [e for e in re.split(r"[\s,\[\]]+", m.group(1)) if e and e != "..."]
        if entries and any("." in e for e in entries) and all(WHOLE.match(e) for e in entries):
            found.append(f"tensor([{', '.join(entries[:4])}{', ...' if len(entries) > 4 else ''}]) "
                         "(a float tensor of whole numbers: one ulp off prints it in another form)")
    return found


def _sanitizers():
    config = configparser.ConfigParser()
    config.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return [(re.compile(config[s]["regex"]), config[s]["replace"]) for s in config.sections()]


def compared_text(cell) -> str:
    """What nbval compares of a code cell's outputs, after the sanitizers ran."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts += [v for k, v in out.data.items() if k not in SKIPPED_DATA and isinstance(v, str)]
    text = "\n".join(parts)
    for pattern, replacement in _sanitizers():
        text = pattern.sub(replacement, text)
    return text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_compared_outputs_print_no_floating_point_noise(path):
    problems = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or NOT_COMPARED & set(cell.metadata.get("tags", [])):
            continue
        for reason in noise(compared_text(cell)):
            problems.append(f"cell {cell.get('id')}: {reason}")
    assert not problems, (
        f"{path.name}: outputs that nbval compares show floating-point noise, which another machine prints "
        "differently. Print the claim instead (`< 1e-6`, fewer digits), tag the cell `nbval-ignore-output` "
        "if its numbers depend on the machine, or `portable-output` if its digits do not depend on rounding:\n  "
        + "\n  ".join(problems))


NOISY = [
    "max abs difference from PyTorch: 1.0e-07",
    "weights (2, 4, 10, 10): max abs difference 6.0e-08",
    "norm of the Jacobian 4.1e-09",
    "masked loss (real tokens only): 2.8569",
    "largest weight 0.580423",
    "change of the mean: -0.000",
    "row sums of the weights: tensor([1.000, 1.000, 1.000])",
    "row sums: tensor([1., 1., 1.])",
    "tensor([[1., 1.],\n        [1., 1.]])",
    "tensor([[0.000, 0.000, 0.000],\n        [0.000, 0.000, 1.000]], dtype=torch.float64)",
    "exp([-100, -104]) = tensor([3.784e-44, 0.000e+00])",
]
QUIET = [
    "max abs difference from PyTorch < 1e-6",
    "equal within 1e-5: True",
    "largest float32: 3.403e+38 = exp(88.72)",
    "loss 2.857, weights between 0.023 and 0.246",
    "2,865,409,024 scores; 137,438,953,472 multiply-adds",
    "weights tensor([0.731, 0.269, 0.000, 0.000])",
    "tensor([[0.000, 0.000, 0.000],\n        [0.000, 0.618, 0.382]])",
    "tokens: tensor([[ 1,  4,  6,  8, 10]])",
    "mask tensor([0., 0., -inf, -inf])",
    "dates from 1950-01-01 to 2049-12-31, version 2.13.0",
    "change at real positions: 0.000",
    "x = [1000.0, 1001.0, 1002.0]; cos(0) = +1.0000",
]


@pytest.mark.parametrize("text", NOISY)
def test_noise_is_found(text):
    assert noise(text), text


@pytest.mark.parametrize("text", QUIET)
def test_claims_and_exact_numbers_pass(text):
    assert noise(text) == [], text
