"""transformer_course.show: the tables and claims that lessons print."""

from __future__ import annotations

import pytest
import torch

from transformer_course.show import Table, claim, table


def test_table_aligns_words_left_numbers_right_and_separates_thousands(capsys):
    table(["kind", "d", "parameters"], ["encoder", 64, 16_640], ["decoder-only", 512, 1_050_624])
    assert capsys.readouterr().out.splitlines() == [
        "kind            d  parameters",
        "encoder        64      16,640",
        "decoder-only  512   1,050,624",
    ]


def test_table_prints_booleans_and_formatted_floats_as_given(capsys):
    table(["h", "ratio", "lower"], [1, "1.0000", True], [16, "0.9987", False])  # booleans are words: left
    assert capsys.readouterr().out.splitlines() == [" h   ratio  lower", " 1  1.0000  True", "16  0.9987  False"]


def test_a_row_of_the_wrong_length_is_named():
    with pytest.raises(ValueError, match=r"row 2 has 2 values, expected 3"):
        table(["a", "b", "c"], [1, 2, 3], [1, 2])


def test_a_claim_that_holds_is_printed_with_true(capsys):
    claim("rows sum to 1 within 1e-6", torch.tensor(True))
    assert capsys.readouterr().out == "rows sum to 1 within 1e-6: True\n"


@pytest.mark.parametrize("holds", [False, torch.tensor(False), 0, []])
def test_a_false_claim_is_printed_and_stops_the_notebook(holds, capsys):
    with pytest.raises(AssertionError, match="the claim does not hold: the mask is causal"):
        claim("the mask is causal", holds)
    assert capsys.readouterr().out == "the mask is causal: False\n"


def test_a_table_is_also_html_with_the_same_cells_alignment_and_escaping():
    shown = Table(["kind", "d", "note"], ["encoder", 64, "a < b & c"], ["decoder-only", 512, "x"])
    assert str(shown) == "kind            d  note\nencoder        64  a < b & c\ndecoder-only  512  x"
    page = shown._repr_html_()
    assert page.startswith('<table class="course-table"><thead><tr><th style="text-align: left">kind</th>')
    assert '<td style="text-align: right">512</td>' in page and "<td style=\"text-align: left\">a &lt; b &amp; c</td>" \
        in page
    assert page.count("<tr>") == 3 and page.endswith("</tbody></table>")


def test_in_a_notebook_a_table_is_displayed_not_printed(monkeypatch, capsys):
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", shown.append)
    table(["a", "b"], [1, 2])
    assert capsys.readouterr().out == ""
    assert [str(t) for t in shown] == ["a  b\n1  2"] and "<table" in shown[0]._repr_html_()
