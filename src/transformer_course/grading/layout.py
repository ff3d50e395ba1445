"""Plain-text tables and HTML pages, as the grader prints and writes them: shared by the gradebook's summary and
feedback pages (:mod:`.report`), the class report (:mod:`.classpage`) and ``transformer-course check``
(:mod:`.selfcheck`)."""

from __future__ import annotations

import html


def text_table(header: list[str], body: list[list[str]], right: set[int]) -> list[str]:
    """The lines of a table with a rule under ``header``, its columns padded to width (those in ``right``
    aligned right)."""
    widths = [max(len(str(x)) for x in column) for column in zip(header, *body, strict=True)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if k in right else str(c).ljust(w) for k, (c, w) in
                         enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(b) for b in body]


_RIGHT = ' class="num"'  # a right-aligned cell (the page style's td.num)


def html_table(header: list[str], body: list[list[str]], right: set[int]) -> str:
    """:func:`text_table`'s table as HTML: its cells escaped, the columns in ``right`` aligned right."""

    def cells(tag: str, values: list[str]) -> str:
        return "".join(f"<{tag}{_RIGHT if k in right else ''}>{html.escape(str(v))}</{tag}>"
                       for k, v in enumerate(values))

    return "\n".join(["<table>", f"<tr>{cells('th', header)}</tr>", *(f"<tr>{cells('td', b)}</tr>" for b in body),
                      "</table>"])


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .4em .6em; text-align: left; vertical-align: top; }
th.num, td.num { text-align: right; }
pre { white-space: pre-wrap; margin: 0; font-size: .9em; }
.passed { color: #11702b; } .partial { color: #7a5c00; }
.failed, .error, .timeout, .missing { color: #a3120e; } .tampered { color: #8a4b00; }
.status { font-weight: bold; }
"""


def html_page(title: str, body: str) -> str:
    """A whole HTML page: ``title`` (escaped) and ``body`` (HTML), in the grader's style."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")
