"""Reading a submitted notebook and preparing it for execution: checks restored, nbval markers stripped.

The prepared notebook is built from the *released* exercise notebook, cell by cell, in the release's
order: read-only cells (task text, setup code, check cells) come from the release whatever the
learner did to them; answer cells carry the learner's code; the learner's extra cells follow the
released cell they followed in the submission. Submitted cells are matched to released ones by cell
id, then (for notebooks that lost their ids) by exercise metadata, then by identical source.

Nothing of the learner's cells but their type, id and source is kept: no outputs, no metadata, so no
nbval tags (``raises-exception``, ``nbval-skip``, ...), and nbval comment markers (``# NBVAL_SKIP``,
...) are blanked out of the source (the line stays, as ``#``, so line numbers do not move). The release's
cells are rebuilt without their metadata too: the ``raises-exception`` tag that the release puts on answer
and check cells (so that Run All in JupyterLab goes on past a failing check) never reaches nbval, and only a
tag that the release's check cell does not carry counts as tampering.
"""

from __future__ import annotations

import ast
import json
import re
import threading
from dataclasses import dataclass, field

import nbformat

from transformer_course.cell_metadata import METADATA_KEY, exercise_record, is_read_only

MAX_NOTEBOOK_BYTES = 100 * 2**20
GRADER_CHECK_IMPORT = "from transformer_course.grading.kernel import recording_check as check  # the grader's check\n"
# The prepared notebook's first cell, before any of the learner's: the audit hook that records what their code does
# (grading/audit.py). Its id cannot clash with a released or learner's cell (ids never start with "grader-" there).
AUDIT_CELL_ID = "grader-audit"
AUDIT_CELL = ("import transformer_course.grading.audit as _grader_audit\n"
              "import transformer_course.grading.kernel  # what the check cells import, imported before the hook\n"
              "_grader_audit.install()\n"
              "del _grader_audit\n")
NBVAL_MARKERS = {
    "NBVAL_SKIP", "NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION",
    "PYTEST_VALIDATE_IGNORE_OUTPUT",
}
NBVAL_TAGS = {m.lower().replace("_", "-") for m in NBVAL_MARKERS} | {"raises-exception"}
_VALID_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class UnreadableNotebook(ValueError):
    """A submission that is not a readable Jupyter notebook; the message says why, without paths."""


@dataclass(frozen=True)
class CheckCell:
    cell_id: str
    exercise: str
    title: str
    points: int


@dataclass
class Release:
    """One released exercise notebook."""

    name: str  # "01_tensor_shapes.ipynb"
    nb: nbformat.NotebookNode
    checks: list[CheckCell]


@dataclass
class Prepared:
    nb: nbformat.NotebookNode
    checks: dict[str, str]  # cell id -> exercise id, for the plugin
    tampered: dict[str, list[str]] = field(default_factory=dict)  # exercise id -> what changed
    review: list[str] = field(default_factory=list)  # what in the learner's code deserves a look


# --- the release ------------------------------------------------------------------------------------


def load_release(path) -> Release:
    nb = nbformat.read(path, as_version=4)
    checks = []
    for cell in nb.cells:
        meta = exercise_record(cell)
        if cell.cell_type == "code" and meta.get("role") == "check":
            checks.append(CheckCell(cell.id, str(meta["exercise"]), str(meta.get("title", "")),
                                    int(meta.get("points", 0))))
    return Release(path.name, nb, checks)


# --- reading a submission ---------------------------------------------------------------------------


@dataclass
class _Cell:
    cell_type: str
    source: str
    id: str | None
    metadata: dict


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


def read_submission(data: bytes) -> list[_Cell]:
    """The cells of a submitted notebook (JSON read leniently, without nbformat's random ids)."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise UnreadableNotebook(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UnreadableNotebook("the file is not UTF-8 text") from None
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as error:
        raise UnreadableNotebook(f"not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})") from None
    except RecursionError:
        raise UnreadableNotebook("not valid JSON (nested too deeply)") from None
    if not isinstance(nb, dict):
        raise UnreadableNotebook(f"not a Jupyter notebook (the JSON is a {type(nb).__name__}, not an object)")
    if nb.get("nbformat") != 4:
        raise UnreadableNotebook(f"not a version 4 Jupyter notebook (nbformat {nb.get('nbformat')!r:.20})")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise UnreadableNotebook("not a Jupyter notebook (it has no list of cells)")
    out = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            continue
        cell_id = cell.get("id")
        metadata = cell.get("metadata")
        out.append(_Cell(cell["cell_type"], _text(cell.get("source", "")),
                         cell_id if isinstance(cell_id, str) else None,
                         metadata if isinstance(metadata, dict) else {}))
    return out


# --- matching and restoring -------------------------------------------------------------------------


def _match(release: Release, cells: list[_Cell]) -> dict[int, int]:
    """Submitted cell index -> released cell index, one to one."""
    released = release.nb.cells
    by_id = {c.id: i for i, c in enumerate(released)}
    matched: dict[int, int] = {}
    taken: set[int] = set()

    def pair(j: int, i: int) -> None:
        matched[j] = i
        taken.add(i)

    for j, cell in enumerate(cells):  # 1. same id
        i = by_id.get(cell.id)
        if i is not None and i not in taken:
            pair(j, i)
    by_role = {(m.get("role"), m.get("exercise")): i
               for i, c in enumerate(released) if (m := exercise_record(c)).get("role")}
    for j, cell in enumerate(cells):  # 2. same exercise role (a notebook whose ids were lost)
        meta = cell.metadata.get(METADATA_KEY)
        if j in matched or not isinstance(meta, dict) or not meta.get("role"):
            continue
        i = by_role.get((meta.get("role"), meta.get("exercise")))
        if i is not None and i not in taken:
            pair(j, i)
    for j, cell in enumerate(cells):  # 3. same text as a read-only cell
        if j in matched:
            continue
        for i, c in enumerate(released):
            same = c.cell_type == cell.cell_type and c.source.strip() == cell.source.strip()
            if i not in taken and same and is_read_only(c):
                pair(j, i)
                break
    return matched


def strip_markers(source: str) -> str:
    """Blank every nbval comment marker line (keeping the line, so line numbers stay)."""
    lines = source.split("\n")
    for k, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#") and stripped.lstrip("#").strip() in NBVAL_MARKERS:
            lines[k] = line[: len(line) - len(line.lstrip())] + "#"
    return "\n".join(lines)


def _one_line(text: str, limit: int = 80) -> str:
    text = " \u23ce ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tampering(released, submitted: _Cell | None) -> list[str]:
    """What the learner changed in a check cell, in words; [] when nothing that matters."""
    if submitted is None:
        return ["the check cell was deleted"]
    changes = []
    if submitted.cell_type != "code":
        changes.append(f"the check cell was turned into a {submitted.cell_type} cell")
    if submitted.source.strip() != released.source.strip():
        changes.append(f"the check cell was edited to `{_one_line(submitted.source)}`")
    tags = submitted.metadata.get("tags")
    released_tags = set(released.metadata.get("tags", []))  # the release's own raises-exception (Run All in Lab)
    added = sorted(({str(t) for t in tags} & NBVAL_TAGS) - released_tags) if isinstance(tags, list) else []
    if added:
        changes.append(f"nbval tag{'s' if len(added) > 1 else ''} {', '.join(added)} added to the check cell")
    meta = submitted.metadata.get(METADATA_KEY)
    if meta is not None and meta != released.metadata.get(METADATA_KEY):
        changes.append("the check cell's exercise metadata was changed")
    return changes


def prepare(release: Release, data: bytes) -> Prepared:
    """The notebook to execute for a submission (raises UnreadableNotebook)."""
    cells = read_submission(data)
    matched = _match(release, cells)
    released = release.nb.cells
    # Each extra cell follows the released cell that precedes it in the submission.
    extras: dict[int, list[_Cell]] = {}
    anchor = -1
    for j, cell in enumerate(cells):
        if j in matched:
            anchor = matched[j]
        else:
            extras.setdefault(anchor, []).append(cell)
    submitted_for = {i: cells[j] for j, i in matched.items()}
    checks = {c.cell_id: c.exercise for c in release.checks}

    used_ids = {c.id for c in released}
    out = []
    tampered: dict[str, list[str]] = {}

    def extra_cells(i: int):
        for cell in extras.get(i, []):
            cell_id = cell.id if cell.id and _VALID_ID.match(cell.id) and cell.id not in used_ids else None
            if cell_id is None:
                n = 1
                while f"extra-{n}" in used_ids:
                    n += 1
                cell_id = f"extra-{n}"
            used_ids.add(cell_id)
            yield _new_cell(cell.cell_type, strip_markers(cell.source) if cell.cell_type == "code" else cell.source,
                            cell_id)

    out.append(_new_cell("code", AUDIT_CELL, AUDIT_CELL_ID))
    used_ids.add(AUDIT_CELL_ID)
    out.extend(extra_cells(-1))
    for i, rel in enumerate(released):
        sub = submitted_for.get(i)
        if rel.id in checks:
            changes = _tampering(rel, sub)
            if changes:
                tampered[checks[rel.id]] = changes
            out.append(_new_cell("code", GRADER_CHECK_IMPORT + rel.source, rel.id))
        elif is_read_only(rel):
            out.append(_new_cell(rel.cell_type, rel.source, rel.id))
        elif sub is not None:  # an answer cell: the learner's code
            source = strip_markers(sub.source) if sub.cell_type == "code" else sub.source
            out.append(_new_cell(sub.cell_type, source, rel.id))
        out.extend(extra_cells(i))

    nb = nbformat.v4.new_notebook(cells=out, metadata={"kernelspec": release.nb.metadata.get("kernelspec", {})})
    learner_code = [c.source for c in out if c.cell_type == "code" and c.id not in checks and c.id != AUDIT_CELL_ID
                    and not any(c.id == r.id and is_read_only(r) for r in released)]
    return Prepared(nb, checks, tampered, review_notes(learner_code))


def _new_cell(cell_type: str, source: str, cell_id: str):
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell}[cell_type]
    return make(source=source, id=cell_id)


# --- what deserves a human look ---------------------------------------------------------------------

# Attributes through which code can change how checks run or how their failures show, or read what a check
# holds (its reference, its cases) from the check's own objects or from the caller's frame.
_MACHINERY = {
    "showtraceback", "_showtraceback", "set_custom_exc", "input_transformers_post", "input_transformers_cleanup",
    "ast_transformers", "excepthook", "_exit", "settrace", "setprofile", "CALL_RECORDER", "REGISTRY", "run_cell",
    "getppid", "kill", "killpg",
    "__globals__", "__closure__", "__code__", "__wrapped__", "_getframe", "f_back", "f_locals", "f_globals",
    "tb_frame", "gi_frame", "cr_frame", "get_referrers", "get_referents", "get_objects", "currentframe",
}
_MODULES = {"builtins", "ctypes", "importlib", "gc", "inspect"}
# What writes the capstone's answers (lesson 12): the library and the course's functions around it. The check
# switches them off while the learner's model translates; code that uses them at all deserves a look (a model
# trained on the held-out numbers, a translation looked up before the check).
_NUMBER_WORDS = {"num2words", "number_words", "number_examples", "number_splits", "CONVERTER_CLASSES"}
_WATCHED = _MACHINERY | _NUMBER_WORDS | _MODULES  # names whose spelling in pieces is noted too
# CPython 3.11's ast.parse is not thread-safe ("SystemError: AST constructor recursion depth mismatch" when two of
# the grader's threads parse at once, CPython issue 106905): one parse at a time.
_PARSE = threading.Lock()


def _string_pieces(node) -> tuple[list[str], bool]:
    """The constant pieces of a string expression (``"__glob" + "als__"``, f-strings, ``"".join([...])``), and
    whether the expression is made of constants only."""
    if isinstance(node, ast.Constant):
        return ([node.value], True) if isinstance(node.value, str) else ([], False)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = [node.left, node.right]
    elif isinstance(node, ast.JoinedStr):
        parts = node.values
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
          and isinstance(node.func.value, ast.Constant) and node.func.value.value == ""
          and len(node.args) == 1 and isinstance(node.args[0], ast.List | ast.Tuple)):
        parts = node.args[0].elts
    else:
        return [], False
    pieces = [_string_pieces(part) for part in parts]
    return [p for ps, _ in pieces for p in ps], all(constant for _, constant in pieces)


def _built_names(node) -> set[tuple[str, str]]:
    """Watched names that a string expression spells in pieces, as ``(name, what it belongs to)``: a name inside the
    joined constants (``"__glob" + "als__"``, ``"from num" + "2words import ..."``), or a piece of four or more
    characters of a name joined with something else (``"number_" + kind``)."""
    pieces, constant = _string_pieces(node)
    if not pieces or constant and len(pieces) == 1:
        return set()  # no constant, or a plain one: the caller's own rules read it
    if constant:
        whole = "".join(pieces)
        return {(name, name) for name in _WATCHED if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", whole)}
    return {(f"{piece}... (a name built from pieces)", name) for piece in pieces if len(piece) >= 4
            for name in _WATCHED if piece in name and piece != name}


def review_notes(sources: list[str]) -> list[str]:
    """What the learner's own code does that a grader should look at: it uses the course package (whose
    reference implementations pass every check), redefines ``check``, reaches into the machinery
    that runs checks and shows their results, or uses what writes the capstone's answers (``num2words``, the
    course's number-word generator). Best effort, by reading the code: never a verdict."""
    package, checking, machinery, generator, redefined = set(), set(), set(), set(), False
    for source in sources:
        try:
            with _PARSE:
                tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if names == ["transformer_course.checks"] and [(a.name, a.asname) for a in node.names] == [
                    ("check", None)
                ]:
                    continue  # the setup cell's own import, repeated
                for name in names:
                    top = name.split(".")
                    if top[0] == "num2words":
                        generator.add("num2words")
                    if top[0] == "transformer_course":
                        (checking if top[1:2] in (["checks"], ["grading"]) else package).add(name)
                    elif top[0] in _MODULES:
                        machinery.add(top[0])
                redefined |= any((a.asname or a.name) == "check" for a in node.names)
                generator |= {a.name for a in node.names} & _NUMBER_WORDS
            elif isinstance(node, ast.Attribute | ast.Name) and (node.attr if isinstance(node, ast.Attribute)
                                                                  else node.id) in _NUMBER_WORDS:
                generator.add(node.attr if isinstance(node, ast.Attribute) else node.id)
            elif isinstance(node, ast.Attribute):
                if node.attr in _MACHINERY:
                    machinery.add(node.attr)
                elif node.attr == "modules" and (isinstance(node.value, ast.Name) and node.value.id == "sys" or
                                                 isinstance(node.value, ast.Attribute) and node.value.attr == "sys"):
                    machinery.add("sys.modules")  # sys.modules, os.sys.modules
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == "check":
                redefined = True
            elif isinstance(node, ast.Name) and node.id == "check" and isinstance(node.ctx, ast.Store):
                redefined = True
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "TRANSFORMER_COURSE" in node.value:
                machinery.add("the grader's environment")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _MACHINERY:
                machinery.add(node.value)  # reached by name: getattr(f, "__globals__")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _NUMBER_WORDS:
                generator.add(node.value)  # reached by name: importlib.import_module("num2words")
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__import__", "get_ipython"):
                machinery.add(node.id)
            if isinstance(node, ast.BinOp | ast.JoinedStr | ast.Call):  # a name spelled in pieces
                for shown, name in _built_names(node):
                    (generator if name in _NUMBER_WORDS else machinery).add(shown)
    notes = []
    if package:
        notes.append(f"imports the course's reference code ({', '.join(sorted(package))})")
    if checking:
        notes.append(f"imports the checking code ({', '.join(sorted(checking))})")
    if redefined:
        notes.append("redefines check")
    if machinery:
        notes.append(f"uses {', '.join(sorted(machinery))}")
    if generator:
        notes.append(f"uses the number-word generator behind the capstone's answers ({', '.join(sorted(generator))})")
    return notes
