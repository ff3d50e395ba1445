"""`transformer-course export`: Canvas's gradebook import and a plain totals CSV from a gradebook and a roster;
students missing on either side listed, never dropped. No kernel: the gradebooks are written here."""

from __future__ import annotations

import csv
import io

import pytest

from transformer_course.cli import main
from transformer_course.grading.export import BadRoster, canvas, read_roster, totals
from transformer_course.grading.gradebook import GradeRow, write_csv

A, B = "01_tensor_shapes.ipynb", "02_attention.ipynb"


def rows_of(student: str, a: tuple[int, int], b: tuple[int, int]) -> list[GradeRow]:
    """Two exercises of A and one of B; ``a`` the points of A's two exercises, ``b`` (points, max) of B's."""
    return [GradeRow(student, A, "01.1", "t", a[0], 2, "passed" if a[0] == 2 else "failed", "m"),
            GradeRow(student, A, "01.2", "t", a[1], 3, "passed" if a[1] == 3 else "failed", "m"),
            GradeRow(student, B, "02.1", "t", b[0], b[1], "passed" if b[0] == b[1] else "missing", "m")]


ROSTER = ("Student,ID,SIS User ID,SIS Login ID,Section,Some Assignment (12)\n"
          "    Points Possible,,,,,10\n"
          "\"Lovelace, Ada\",101,u101,ada,Sec 1,\n"
          "\"Hopper, Grace\",102,u102,grace,Sec 2,7\n"
          "\"=cmd(), Eve\",103,u103,eve,Sec 1,\n")


@pytest.fixture
def files(tmp_path):
    grades = tmp_path / "grades.csv"
    write_csv(rows_of("ada", (2, 3), (4, 4)) + rows_of("eve", (0, 1), (0, 4)) + rows_of("zed", (2, 0), (0, 4)),
              grades)
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    return grades, roster


def table(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_canvas_layout_points_and_both_kinds_of_missing(files, tmp_path, capsys):
    grades, roster = files
    out = tmp_path / "canvas.csv"
    assert main(["export", str(grades), "--roster", str(roster), "--canvas", str(out)]) == 0
    assert table(out.read_text()) == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_tensor_shapes", "02_attention"],
        ["Points Possible", "", "", "", "", "5", "4"],
        ["Lovelace, Ada", "101", "u101", "ada", "Sec 1", "5", "4"],
        ["Hopper, Grace", "102", "u102", "grace", "Sec 2", "", ""],  # not graded: left empty, Canvas keeps hers
        ["'=cmd(), Eve", "103", "u103", "eve", "Sec 1", "1", "0"],  # a formula-like name is written as text
    ]
    err = capsys.readouterr().err
    assert "graded but not in the roster (1; in --totals, not in --canvas): zed" in err
    assert "in the roster but not graded (1; their points left empty): Hopper, Grace (SIS Login ID grace)" in err


def test_totals_with_and_without_a_roster(files, tmp_path):
    grades, roster = files
    out = tmp_path / "totals.csv"
    assert main(["export", str(grades), "--roster", str(roster), "--totals", str(out)]) == 0
    assert table(out.read_text()) == [
        ["SIS Login ID", "Student", "ID", "SIS User ID", "Section", "01_tensor_shapes", "02_attention", "total",
         "max_points"],
        ["ada", "Lovelace, Ada", "101", "u101", "Sec 1", "5", "4", "9", "9"],
        ["eve", "'=cmd(), Eve", "103", "u103", "Sec 1", "1", "0", "1", "9"],
        ["zed", "", "", "", "", "2", "0", "2", "9"],  # graded, not in the roster: kept
        ["grace", "Hopper, Grace", "102", "u102", "Sec 2", "", "", "", "9"],  # in the roster, not graded: kept
    ]
    assert main(["export", str(grades), "--totals", str(out)]) == 0
    assert table(out.read_text())[0] == ["student", "01_tensor_shapes", "02_attention", "total", "max_points"]
    assert [r[0] for r in table(out.read_text())[1:]] == ["ada", "eve", "zed"]


def test_every_student_is_accounted_for_on_either_side():
    rows = rows_of("ada", (2, 3), (4, 4)) + rows_of("zed", (0, 0), (0, 4))
    roster = read_roster_text(ROSTER)
    result = canvas(rows, roster)
    written = {r[3] for r in table(result.text)[2:]}
    assert written | set(result.not_in_roster) >= {"ada", "zed"}
    assert {e["SIS Login ID"] for e in roster} == written
    assert [n.split(" (")[0] for n in result.not_graded] == ["Hopper, Grace", "=cmd(), Eve"]
    assert totals(rows, roster).not_in_roster == ["zed"]


def read_roster_text(text: str, key: str = "SIS Login ID"):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "roster.csv"
        path.write_text(text)
        return read_roster(path, key)


def test_another_key_column():
    roster = read_roster_text("Student,ID,SIS User ID,SIS Login ID,Section,GitHub\n"
                              "\"Lovelace, Ada\",101,u101,ada,Sec 1,gh-a\n"
                              "\"Hopper, Grace\",102,u102,grace,Sec 2,gh-g\n",
                              key="GitHub")
    result = canvas(rows_of("gh-a", (2, 3), (4, 4)), roster, key="GitHub")
    assert table(result.text)[2:] == [["Lovelace, Ada", "101", "u101", "ada", "Sec 1", "5", "4"],
                                      ["Hopper, Grace", "102", "u102", "grace", "Sec 2", "", ""]]
    assert result.not_graded == ["Hopper, Grace (GitHub gh-g)"] and result.not_in_roster == []


@pytest.mark.parametrize("text, message", [
    ("Student,ID,SIS User ID,Section\nA,1,u1,S\n", "no column 'SIS Login ID'"),
    ("Student,ID,SIS User ID,SIS Login ID,Section\nA,1,u1,a,S\nB,2,u2,a,S\n", "'a' is on rows 2 and 3"),
])
def test_bad_rosters_are_refused(text, message):
    with pytest.raises(BadRoster, match=message):
        read_roster_text(text)


def test_command_errors(files, tmp_path, capsys):
    grades, roster = files
    assert main(["export", str(grades)]) == 2
    assert "nothing to write" in capsys.readouterr().err
    assert main(["export", str(grades), "--canvas", str(tmp_path / "c.csv")]) == 2
    assert "--canvas needs --roster" in capsys.readouterr().err
    assert main(["export", str(grades), "--roster", str(tmp_path / "none.csv"), "--totals",
                 str(tmp_path / "t.csv")]) == 2
    assert "cannot be read" in capsys.readouterr().err
    roster.write_text("name,id\n")
    assert main(["export", str(grades), "--roster", str(roster), "--totals", str(tmp_path / "t.csv")]) == 2
    assert "no column 'Student'" in capsys.readouterr().err
    assert not (tmp_path / "c.csv").exists() and not (tmp_path / "t.csv").exists()
