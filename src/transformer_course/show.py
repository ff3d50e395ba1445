"""What the lessons print: aligned tables, and claims of the text checked as they are printed.

A lesson's teaching line should be what a reader sees; these two helpers keep the f-string layout and the
asserts out of it. ``table`` lays out rows; ``claim`` prints a statement of the text next to whether it holds,
and stops the notebook when it does not, so a claim is never printed unproven.

    table(["d", "h", "parameters"], [64, 8, 16_640], [512, 8, 1_050_624])
    claim("the weights of every row sum to 1 within 1e-6", (w.sum(-1) - 1).abs().max() < 1e-6)
"""

from __future__ import annotations

from collections.abc import Sequence


def _text(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"  # 1,050,624: thousands separated, as the prose writes them
    return str(value)


def table(header: Sequence[object], *rows: Sequence[object]) -> None:
    """Print ``rows`` under ``header`` in aligned columns.

    Integers get thousands separators; every other value is printed with ``str`` (format floats before, to the
    digits the claim needs). A column whose values all start with a letter is aligned left, any other right.
    Every row must have as many values as the header.
    """
    text = [[_text(v) for v in row] for row in (header, *rows)]
    for i, row in enumerate(text[1:], start=1):
        if len(row) != len(text[0]):
            raise ValueError(f"table: row {i} has {len(row)} values, expected {len(text[0])} (one per column of "
                             f"the header {list(map(str, header))})")
    widths = [max(len(row[i]) for row in text) for i in range(len(text[0]))]
    words = [all(row[i][:1].isalpha() for row in text[1:] if row[i]) for i in range(len(text[0]))]
    for row in text:
        cells = [v.ljust(w) if left else v.rjust(w) for v, w, left in zip(row, widths, words, strict=True)]
        print("  ".join(cells).rstrip())


def claim(statement: str, holds: object) -> None:
    """Print ``statement: True``, or raise AssertionError naming the statement if ``holds`` is false.

    ``holds`` may be a bool, a 0-d tensor or anything else ``bool()`` accepts.
    """
    holds = bool(holds)
    print(f"{statement}: {holds}")
    if not holds:
        raise AssertionError(f"the claim does not hold: {statement}")
