"""What the lessons show: tables, and claims of the text checked as they are printed.

A lesson's teaching line should be what a reader sees; these two helpers keep the f-string layout and the
asserts out of it. ``table`` lays out rows (an HTML table in a notebook, with the aligned text that nbval
compares; the aligned text elsewhere); ``claim`` prints a statement of the text next to whether it holds,
and stops the notebook when it does not, so a claim is never printed unproven.

    table(["d", "h", "parameters"], [64, 8, 16_640], [512, 8, 1_050_624])
    claim("the weights of every row sum to 1 within 1e-6", (w.sum(-1) - 1).abs().max() < 1e-6)
"""

from __future__ import annotations

import html
from collections.abc import Sequence


def _text(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"  # 1,050,624: thousands separated, as the prose writes them
    return str(value)


# How the HTML form of a table looks in the book (book/_ext/course_html.py writes it as _static/course-tables.css)
# and in the decks (slides.py): compact rows, figures in columns, headers that wrap instead of widening the table.
TABLE_CSS = """
table.course-table { border-collapse: collapse; margin: 0.4em 0; font-size: 0.9em; max-width: 100%;
                     font-variant-numeric: tabular-nums; }
table.course-table th, table.course-table td { padding: 0.15em 0.7em; vertical-align: bottom; }
table.course-table thead th { border-bottom: 1px solid #888; font-weight: 600; }
table.course-table tbody tr:nth-child(even) { background: rgba(127, 127, 127, 0.08); }
"""


class Table:
    """Aligned rows under a header: text (``str``, what nbval compares and a terminal shows) and an HTML table
    (``_repr_html_``, what the book, the decks and JupyterLab show, its headers wrapping to fit the column)."""

    def __init__(self, header: Sequence[object], *rows: Sequence[object]):
        text = [[_text(v) for v in row] for row in (header, *rows)]
        for i, row in enumerate(text[1:], start=1):
            if len(row) != len(text[0]):
                raise ValueError(f"table: row {i} has {len(row)} values, expected {len(text[0])} (one per column of "
                                 f"the header {list(map(str, header))})")
        self.cells = text
        self.left = [all(row[i][:1].isalpha() for row in text[1:] if row[i]) for i in range(len(text[0]))]

    def __str__(self) -> str:
        widths = [max(len(row[i]) for row in self.cells) for i in range(len(self.cells[0]))]
        return "\n".join("  ".join(v.ljust(w) if left else v.rjust(w)
                                   for v, w, left in zip(row, widths, self.left, strict=True)).rstrip()
                         for row in self.cells)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        def row(tag: str, values: list[str]) -> str:
            return "<tr>" + "".join(f'<{tag} style="text-align: {"left" if left else "right"}">{html.escape(v)}</{tag}>'
                                    for v, left in zip(values, self.left, strict=True)) + "</tr>"

        head, *body = self.cells
        return ('<table class="course-table"><thead>' + row("th", head) + "</thead><tbody>"
                + "".join(row("td", values) for values in body) + "</tbody></table>")


def table(header: Sequence[object], *rows: Sequence[object]) -> None:
    """Show ``rows`` under ``header`` as a table: in a notebook an HTML table (with the aligned text beside it),
    elsewhere the aligned text, printed.

    Integers get thousands separators; every other value is shown with ``str`` (format floats before, to the
    digits the claim needs). A column whose values all start with a letter is aligned left, any other right.
    Every row must have as many values as the header.
    """
    shown = Table(header, *rows)
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        from IPython.display import display

        display(shown)
    else:
        print(shown)


def claim(statement: str, holds: object) -> None:
    """Print ``statement: True``, or raise AssertionError naming the statement if ``holds`` is false.

    ``holds`` may be a bool, a 0-d tensor or anything else ``bool()`` accepts.
    """
    holds = bool(holds)
    print(f"{statement}: {holds}")
    if not holds:
        raise AssertionError(f"the claim does not hold: {statement}")
