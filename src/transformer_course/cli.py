"""The ``transformer-course`` command: ``exercises`` and ``execute`` for maintainers."""

from __future__ import annotations

import argparse
import sys
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

    from transformer_course.authoring import execute_in_place

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


def main(argv: list[str] | None = None) -> int:
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

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
