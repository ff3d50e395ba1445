"""The ``transformer-course`` command: ``exercises`` and ``execute`` for maintainers, ``grade``,
``merge-grades``, ``report``, ``gradescope``, ``export`` and ``slides`` for instructors, ``check`` for learners."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path


def _notebooks(paths: list[str]) -> list[Path]:
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(p.glob("[0-9][0-9]_*.ipynb"))
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise SystemExit(f"error: {p} is neither a notebook nor a folder of notebooks")
    return found


def cmd_exercises(args) -> int:
    from transformer_course.authoring import MarkerError, generate_exercises, stale_exercises

    try:
        if args.check:
            stale = stale_exercises(args.solutions, args.out)
            for name in stale:
                print(f"out of date: {Path(args.out) / name} (run `make exercises`)")
            return 1 if stale else 0
        for path in generate_exercises(args.solutions, args.out):
            print(f"wrote {path}")
    except MarkerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def cmd_execute(args) -> int:
    from nbclient.exceptions import CellExecutionError

    from transformer_course.notebook_execution import execute_in_place

    failed = 0
    for path in _notebooks(args.paths):
        start = time.perf_counter()
        try:
            execute_in_place(path, timeout=args.timeout)
        except CellExecutionError as error:
            failed += 1
            print(f"FAILED {path}: a cell raised an error (notebook left unchanged)\n{error}", file=sys.stderr)
            continue
        print(f"executed {path} in {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


CASES_SEED_ENV = "TRANSFORMER_COURSE_CASES_SEED"  # an instructor's secret, kept out of shell history


def _env_seed() -> int | None:
    text = os.environ.get(CASES_SEED_ENV, "").strip()
    try:
        return int(text) if text else None
    except ValueError:
        raise SystemExit(f"error: ${CASES_SEED_ENV}={text!r}: expected an integer") from None


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _add_limit_options(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--timeout``, ``--notebook-timeout`` and ``--memory-limit``, defaulting to the grader's one definition of
    its limits (:class:`transformer_course.grading.limits.Limits`); ``note`` follows each default in the help."""
    from transformer_course.grading import limits
    from transformer_course.grading.nbval_patches import WAIT_FACTOR

    default = limits.Limits()
    parser.add_argument("--timeout", type=float, default=default.cell_timeout,
                        help=f"seconds of CPU time allowed per cell; a cell that waits instead of computing stops "
                             f"after {WAIT_FACTOR} times this on the clock (default: {default.cell_timeout:g}{note})")
    parser.add_argument("--notebook-timeout", type=float, default=default.notebook_timeout,
                        help=f"seconds allowed per notebook, kernel start included (default: "
                             f"{default.notebook_timeout:g}{note})")
    parser.add_argument("--memory-limit", type=int, default=default.memory_limit_mb,
                        help=f"MiB of address space per kernel; 0 for no limit (default: "
                             f"{default.memory_limit_mb}{note})")


def _limits(args):
    """The limits that ``args`` ask for (``--cases-seed`` only where the command has it); raises GradingError."""
    from transformer_course.grading.collect import GradingError
    from transformer_course.grading.limits import Limits

    try:
        return Limits(args.timeout, args.notebook_timeout, args.memory_limit, getattr(args, "cases_seed", None))
    except (TypeError, ValueError) as error:
        message = str(error)
        for field, option in _LIMIT_OPTIONS.items():
            message = message.replace(f"Limits({field}=...)", option)
        raise GradingError(message) from None


_LIMIT_OPTIONS = {"cell_timeout": "--timeout", "notebook_timeout": "--notebook-timeout",
                  "memory_limit_mb": "--memory-limit", "cases_seed": "--cases-seed"}


def cmd_grade(args) -> int:
    from transformer_course.grading.collect import parse_notebooks
    from transformer_course.grading.gradebook import write_csv
    from transformer_course.grading.grader import GradingError, grade, parse_shard
    from transformer_course.grading.journal import Journal, journal_path
    from transformer_course.grading.report import summary, write_html

    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        return _fail(f"--out {out}: expected a file in an existing folder")

    printing = threading.Lock()  # notebooks finish in worker threads: one whole line at a time

    def progress(student, notebook, rows, seconds):
        points = sum(r.points for r in rows)
        statuses = ", ".join(sorted({r.status for r in rows}))
        line = (f"graded {student} / {notebook}: {points}/{sum(r.max_points for r in rows)} points ({statuses}) "
                f"in {seconds:.1f} s\n")
        with printing:
            sys.stderr.write(line)
            sys.stderr.flush()

    start = time.perf_counter()
    journal = Journal(journal_path(out), resume=args.resume)
    try:
        shard = parse_shard(args.shard) if args.shard is not None else None
        limits = _limits(args)
        notebooks = parse_notebooks(args.notebooks) if args.notebooks is not None else None
        book = grade(args.submissions, release=args.release, limits=limits, jobs=args.jobs, shard=shard,
                     students=args.student or (), progress=None if args.quiet else progress, journal=journal,
                     notebooks=notebooks)
    except GradingError as error:
        journal.close()
        return _fail(str(error))
    journal.close()
    partial = out.with_name(out.name + ".partial")
    write_csv(book.rows, partial)
    partial.replace(out)  # a run killed now leaves the old gradebook or the new one, never half of one
    journal.close(finished=True)
    if args.html:
        write_html(book.rows, args.html)
    print(summary(book.rows))
    if args.html:
        from transformer_course.grading.classpage import class_summary

        print("\n" + class_summary(book.rows))
    extra = f" and feedback pages and the class report (class.html) in {args.html}" if args.html else ""
    resumed = f" ({book.resumed} notebook(s) from the interrupted run's journal)" if book.resumed else ""
    print(f"\nWrote {out}{extra}: {len(book.rows)} rows, {len(book.students)} student(s), "
          f"{time.perf_counter() - start:.1f} s{resumed}.")
    for note in book.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _merged_gradebooks(paths: list[str]):
    """The gradebooks joined as `merge-grades` joins them, its notes printed; None (after the error) if one is bad."""
    from transformer_course.grading.gradebook import BadGradebook, merge, read_csv

    try:
        books = [(name, read_csv(name)) for name in paths]
    except BadGradebook as error:
        _fail(str(error))
        return None
    rows, notes = merge(books)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return rows


def cmd_merge_grades(args) -> int:
    from transformer_course.grading.gradebook import to_csv
    from transformer_course.grading.report import summary, write_html

    rows = _merged_gradebooks(args.gradebooks)
    if rows is None:
        return 2
    text = to_csv(rows)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8", newline="")
    else:
        sys.stdout.write(text)
    if args.html:
        write_html(rows, args.html)
    print(summary(rows), file=sys.stdout if args.out else sys.stderr)
    return 0


def cmd_report(args) -> int:
    from transformer_course.grading.classpage import PAGE, class_summary, write_class_page

    rows = _merged_gradebooks(args.gradebooks)
    if rows is None:
        return 2
    print(class_summary(rows))
    if args.html:
        out = Path(args.html)
        if out.exists() and not out.is_dir():
            return _fail(f"--html {out}: expected a folder")
        write_class_page(rows, out)
        print(f"\nWrote {out / PAGE} (it names no student).")
    return 0


def cmd_export(args) -> int:
    from transformer_course.grading import export

    if not (args.canvas or args.totals):
        return _fail("nothing to write: pass --canvas OUT.csv and/or --totals OUT.csv")
    if args.canvas and not args.roster:
        return _fail("--canvas needs --roster ROSTER.csv (Canvas's gradebook export, for its students' ids)")
    for option, name in (("--canvas", args.canvas), ("--totals", args.totals)):
        if name and (Path(name).is_dir() or not Path(name).parent.is_dir()):
            return _fail(f"{option} {name}: expected a file in an existing folder")
    rows = _merged_gradebooks(args.gradebooks)
    if rows is None:
        return 2
    try:
        roster = export.read_roster(args.roster, args.key) if args.roster else None
    except export.BadRoster as error:
        return _fail(str(error))
    done = []
    if args.canvas:
        done.append((args.canvas, export.canvas(rows, roster, args.key)))
    if args.totals:
        done.append((args.totals, export.totals(rows, roster, args.key)))
    for name, result in done:
        Path(name).write_text(result.text, encoding="utf-8", newline="")
        print(f"wrote {name}: {result.text.count(chr(10)) - 1} rows")
    result = done[0][1]
    if result.not_in_roster:
        print(f"graded but not in the roster ({len(result.not_in_roster)}; in --totals, not in --canvas): "
              f"{', '.join(result.not_in_roster)}", file=sys.stderr)
    if result.not_graded:
        print(f"in the roster but not graded ({len(result.not_graded)}; their points left empty): "
              f"{', '.join(result.not_graded)}", file=sys.stderr)
    return 0


def cmd_check(args) -> int:
    from transformer_course.grading.collect import GradingError
    from transformer_course.grading.selfcheck import check_notebooks, check_report

    try:
        limits = _limits(args)
        checked = check_notebooks(args.notebooks, release=args.release, limits=limits, jobs=args.jobs)
    except GradingError as error:
        return _fail(str(error))
    print("\n\n".join(check_report(c, limits) for c in checked))
    return 0


def cmd_similarity(args) -> int:
    from transformer_course.grading import collect, similarity

    if args.top < 1:
        return _fail(f"--top {args.top}: expected a whole number of pairs >= 1")
    if not 0 < args.threshold <= 1:
        return _fail(f"--threshold {args.threshold:g}: expected a share of the code in (0, 1], e.g. 0.5")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        return _fail(f"--out {args.out}: expected a folder, found a file")
    try:
        releases = collect.load_releases(args.release)
        students, ignored = collect.find_students(args.submissions, releases)
    except collect.GradingError as error:
        return _fail(str(error))
    reports, notes = similarity.compare(releases, students, threshold=args.threshold, top=args.top)
    for path in similarity.write_report(reports, args.out, args.threshold, [*ignored, *notes]):
        print(f"wrote {path}")
    listed = sum(len(r.top) for r in reports)
    print(f"{len(students)} student(s), {len(reports)} exercise(s): {listed} pair(s) listed at "
          f"{args.threshold:.0%} or more (the report names students: share it only with those who grade)")
    return 0


def cmd_gradescope(args) -> int:
    from transformer_course.grading.collect import GradingError
    from transformer_course.grading.gradescope import build_autograder

    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        return _fail(f"--out {out}: expected a file in an existing folder")
    try:
        names = build_autograder(args.release, out, requirements=args.requirements, limits=_limits(args),
                                 notebooks=args.notebook or (), visibility=args.visibility, jobs=args.jobs)
    except GradingError as error:
        return _fail(str(error))
    seed = "hidden cases from the seed given (keep the zip private)" if args.cases_seed is not None else "public cases"
    print(f"Wrote {out} ({out.stat().st_size / 2**20:.1f} MiB): {len(names)} notebook(s), {seed}. Upload it as the "
          "assignment's autograder on Gradescope (Configure Autograder, zip file upload).")
    return 0


def cmd_slides(args) -> int:
    from transformer_course.slides import build_decks

    start = time.perf_counter()
    decks = build_decks(_notebooks(args.paths), args.out)
    for deck in decks:
        print(f"wrote {deck.path}: {deck.slides} slides, {deck.path.stat().st_size / 1024:.0f} KB")
    print(f"{len(decks)} deck(s) in {time.perf_counter() - start:.1f} s; reveal.js and MathJax in {args.out}/_static")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line of every subcommand, with its defaults."""
    parser = argparse.ArgumentParser(prog="transformer-course", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("exercises", help="generate exercises/*.ipynb from solutions/*.ipynb")
    p.add_argument("--solutions", default="solutions", help="folder of solution notebooks (default: solutions)")
    p.add_argument("--out", default="exercises", help="folder for learner notebooks (default: exercises)")
    p.add_argument("--check", action="store_true", help="only report notebooks that are out of date (exit 1)")
    p.set_defaults(func=cmd_exercises)

    p = sub.add_parser("execute", help="re-run notebooks in place from a fresh kernel, storing outputs")
    p.add_argument("paths", nargs="+", help="notebooks or folders of notebooks")
    p.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default: 600)")
    p.set_defaults(func=cmd_execute)

    p = sub.add_parser(
        "grade",
        help="grade learners' notebooks: re-execute them with nbval, write a CSV gradebook",
        description="Grade every student's notebooks in SUBMISSIONS (one folder per student, or files named "
        "STUDENT__NN_topic.ipynb) against the released exercise notebooks: check cells restored, each "
        "notebook re-executed with nbval in a fresh kernel. Exit status 0 whenever grading ran.",
    )
    p.add_argument("submissions", help="folder of submissions")
    p.add_argument("--out", required=True, help="the CSV gradebook to write")
    p.add_argument("--release", default="exercises", help="folder of released exercise notebooks (default: exercises)")
    p.add_argument("--notebooks", metavar="NN[,NN...]",
                   help="grade only these released notebooks, by number (a week's assignment: --notebooks 03,04); "
                        "the gradebook then holds only their exercises (default: every released notebook)")
    p.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                   help="notebooks graded in parallel (default: the number of CPUs, at most 8)")
    _add_limit_options(p)
    p.add_argument("--cases-seed", type=int, metavar="N", default=_env_seed(),
                   help="draw every check's cases from this secret seed (hidden cases: outputs memorised from the "
                        f"public notebooks fail); default: ${CASES_SEED_ENV} if set, else the public cases")
    p.add_argument("--shard", metavar="K/N", help="grade only shard K of N (1 <= K <= N) of the sorted students")
    p.add_argument("--student", action="append", metavar="NAME", help="grade only this student (repeatable)")
    p.add_argument("--html", metavar="REPORT_DIR",
                   help="also write here one feedback page per student, the class report (class.html) and an index")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--resume", action="store_true",
                   help="finish an interrupted run: keep the rows in OUT.journal (written as each notebook "
                        "finishes), grade only the rest; the same options as the interrupted run")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("merge-grades", help="join gradebooks (shards, or a gradebook and a regrade) into one",
                       description="Join CSV gradebooks written by `grade` (shards, weeks graded with --notebooks, "
                       "regrades). A student's rows of a notebook come from the last file that has them, so "
                       "`merge-grades grades.csv regrade.csv` applies a regrade and `merge-grades week1.csv week2.csv` "
                       "joins two weeks.")
    p.add_argument("gradebooks", nargs="+", help="CSV files written by `transformer-course grade`")
    p.add_argument("--out", help="write the merged gradebook here (default: standard output)")
    p.add_argument("--html", metavar="REPORT_DIR", help="also write one feedback page per student here")
    p.set_defaults(func=cmd_merge_grades)

    p = sub.add_parser("report", help="the class report of a gradebook: pass rates, points, the class's mistakes",
                       description="Summarise CSV gradebooks written by `grade` (joined as `merge-grades` joins them): "
                       "per exercise the pass rate, the points, the known mistakes ranked by how many students made "
                       "them, and the exercises where most wrong answers match no known mistake.")
    p.add_argument("gradebooks", nargs="+", help="CSV files written by `transformer-course grade`")
    p.add_argument("--html", metavar="OUT_DIR", help="also write the class page (class.html, with its figure) here; "
                   "it names no student")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="write a gradebook an LMS imports (Canvas), or a plain CSV of totals",
                       description="Turn CSV gradebooks written by `grade` (joined as `merge-grades` joins them) into "
                       "a file for a learning management system: --canvas, Canvas's gradebook import (the roster's "
                       "Student, ID, SIS User ID, SIS Login ID, Section, then the points per notebook); --totals, one "
                       "row per student with the points per notebook and the total. Students missing from the "
                       "roster or from the gradebook are listed.")
    p.add_argument("gradebooks", nargs="+", help="CSV files written by `transformer-course grade`")
    p.add_argument("--roster", metavar="ROSTER.csv", help="the class list: Canvas's gradebook export, or any CSV "
                   "with its columns Student, ID, SIS User ID, SIS Login ID, Section")
    p.add_argument("--key", default="SIS Login ID", metavar="COLUMN",
                   help="the roster column that holds the submissions' student names (default: SIS Login ID)")
    p.add_argument("--canvas", metavar="OUT.csv", help="write Canvas's gradebook import here (needs --roster)")
    p.add_argument("--totals", metavar="OUT.csv", help="write the plain per-student totals here")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("similarity", help="list the most similar pairs of learners' answers, per exercise",
                       description="Compare the students' code for each released exercise (their answer cells and "
                       "the cells they added, the released stub left out) with copydetect, and write "
                       "similarity.html (the closest pairs side by side, shared code highlighted) and similarity.csv "
                       "into --out. It names students: write it where only those who grade read it. Evidence for a "
                       "person to read, not a verdict.")
    p.add_argument("submissions", help="folder of submissions, laid out as for `grade`")
    p.add_argument("--release", required=True, metavar="FOLDER", help="folder of the released notebooks")
    p.add_argument("--out", required=True, metavar="FOLDER",
                   help="folder for similarity.html and similarity.csv, e.g. the one given to `grade --html`")
    p.add_argument("--threshold", type=float, default=0.5,
                   help="list a pair when each student has at least this share of their code in the other's "
                   "(default: 0.5)")
    p.add_argument("--top", type=int, default=5, help="pairs listed per exercise, most similar first (default: 5)")
    p.set_defaults(func=cmd_similarity)

    p = sub.add_parser("check", help="grade your saved notebook exactly as your instructor's grader will",
                       description="Grade saved exercise notebooks as `transformer-course grade` grades a student's: "
                       "read-only and check cells restored from the release, a fresh kernel, the same time limits, "
                       "every pass re-checked outside the kernel. Prints the rows, the total, and what would be "
                       "marked `tampered` or flagged for review. Exit status 0 whenever the check ran.")
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="saved notebooks, e.g. exercises/03_masking.ipynb")
    p.add_argument("--release", metavar="PATH", help="the released notebook, or folder of them, your instructor "
                   "handed out (default: made from solutions/ of this course, as `make exercises` makes it)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="notebooks checked in parallel")
    _add_limit_options(p, note=", as `grade`")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("gradescope", help="write a Gradescope autograder zip that grades a release",
                       description="Write Gradescope's autograder zip (setup.sh, run_autograder, the pinned "
                       "requirements, the course package as a wheel, the released notebooks): each submission is "
                       "graded in its own container by the code path of `grade`, one Gradescope test per exercise.")
    p.add_argument("--release", default="exercises", help="folder of released exercise notebooks (default: exercises)")
    p.add_argument("--out", required=True, help="the zip to write, e.g. autograder.zip")
    p.add_argument("--notebook", action="append", metavar="NAME",
                   help="put only this released notebook in the zip, e.g. 03_masking (repeatable; default: all)")
    p.add_argument("--requirements", default="requirements.txt",
                   help="the course's pinned requirements (default: requirements.txt)")
    p.add_argument("--visibility", default="visible", choices=["visible", "hidden", "after_due_date",
                                                               "after_published"],
                   help="when learners see the results (default: visible)")
    p.add_argument("--jobs", type=int, default=2, help="notebooks graded in parallel in each container (default: 2)")
    _add_limit_options(p, note=", as `grade`")
    p.add_argument("--cases-seed", type=int, metavar="N", default=_env_seed(),
                   help=f"hidden cases from this seed, as `grade` (default: ${CASES_SEED_ENV} if set); the zip "
                        "holds it: upload it to Gradescope only")
    p.set_defaults(func=cmd_gradescope)

    p = sub.add_parser("slides", help="write a reveal.js slide deck for each lesson (stored outputs, no execution)")
    p.add_argument("paths", nargs="*", default=["lessons"], help="lesson notebooks or folders (default: lessons)")
    p.add_argument("--out", default="_build/slides", help="folder for the decks (default: _build/slides)")
    p.set_defaults(func=cmd_slides)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
