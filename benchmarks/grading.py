"""How fast the grader grades a class, beside plain `jupyter nbconvert --execute` of the same notebooks.

A class of N students who each hand in the solutions is graded with `transformer-course grade --jobs J`, and the
same N x notebooks are executed with `jupyter nbconvert --to notebook --execute`, J at a time, with the grader's
environment (one thread per kernel). Printed: seconds and CPU-seconds per student, students per hour, and the
grader's overhead over nbconvert (goal: at most 20%). Then where one notebook's time goes, graded alone: the
grader's own steps (prepare, the run in its subprocess, the replay outside the kernel) against nbconvert's time for
it, and the fixed costs every notebook pays (a fresh interpreter with pytest and nbval, a kernel start, the setup
cell's imports of torch and the course).

    .venv/bin/python benchmarks/grading.py                        # 4 students, solutions 01-11, --jobs 2
    .venv/bin/python benchmarks/grading.py --students 8 --notebooks all

Measured on 2026-11-26: see the closing note of issue 35 (numbers from a shared 2-core machine: read the ratios).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The grader's kernels run with one thread each (grading/execute.py); nbconvert gets the same.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "PYTHONHASHSEED": "0", "MPLBACKEND": "agg"}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(run) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child processes) of ``run()``."""
    cpu, start = children_cpu(), time.perf_counter()
    run()
    return time.perf_counter() - start, children_cpu() - cpu


def nbconvert(path: Path, out: Path) -> None:
    subprocess.run([str(BIN / "jupyter"), "nbconvert", "--to", "notebook", "--execute", "--output",
                    str(out), "--ExecutePreprocessor.timeout=600", str(path)],
                   env=ENV, cwd=path.parent, check=True, capture_output=True)


def class_run(notebooks: list[Path], students: int, jobs: int, work: Path) -> dict[str, tuple[float, float]]:
    submissions = work / "submissions"
    for k in range(students):
        folder = submissions / f"student{k:03d}"
        folder.mkdir(parents=True)
        for path in notebooks:
            shutil.copy(path, folder / path.name)
    release = work / "release"
    release.mkdir()
    for path in notebooks:
        shutil.copy(ROOT / "exercises" / path.name, release / path.name)
    grade = [str(BIN / "transformer-course"), "grade", str(submissions), "--release", str(release), "--out",
             str(work / "grades.csv"), "--jobs", str(jobs), "--quiet"]
    results = {"transformer-course grade": timed(lambda: subprocess.run(grade, check=True, capture_output=True))}
    units = [(folder / path.name, work / "executed" / f"{folder.name}-{path.name}")
             for folder in sorted(submissions.iterdir()) for path in notebooks]
    (work / "executed").mkdir()

    def all_nbconvert():
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda unit: nbconvert(*unit), units))

    results["jupyter nbconvert --execute"] = timed(all_nbconvert)
    return results


def median_of(repeats: int, run) -> float:
    return statistics.median(timed(run)[0] for _ in range(repeats))


def fixed_costs(repeats: int) -> dict[str, float]:
    """Wall seconds of what every graded notebook pays before its own cells, each alone."""
    from jupyter_client.manager import start_new_kernel

    def kernel_start():
        km, kc = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    km, kc = start_new_kernel(kernel_name="python3", env=ENV, stderr=subprocess.DEVNULL)
    try:
        start = time.perf_counter()
        kc.execute_interactive("import torch\nfrom torch import nn\nfrom transformer_course.checks import check",
                               timeout=120)
        imports = time.perf_counter() - start
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    python = [sys.executable, "-c"]
    return {
        "a fresh interpreter importing pytest and nbval, as the grader's subprocess does (execute.BOOT)":
            median_of(repeats, lambda: subprocess.run(
                [*python, "import sys\nsys.modules.setdefault('rfc3987_syntax', None)\nimport pytest, nbval.plugin"],
                check=True)),
        "a fresh interpreter importing nbconvert and nbclient":
            median_of(repeats, lambda: subprocess.run([*python, "import nbconvert, nbclient"], check=True)),
        "a kernel start (and shutdown)": median_of(repeats, kernel_start),
        "the setup cell: import torch and the course, in a started kernel": imports,
    }


def per_notebook(notebooks: list[Path], work: Path) -> list[tuple[str, float, float, float, float, float]]:
    """For each notebook graded alone: (name, prepare, the run's subprocess, the replay outside the kernel and the
    rows, grader total, nbconvert)."""
    from transformer_course.grading import execute
    from transformer_course.grading.collect import load_releases
    from transformer_course.grading.execute import run_notebook
    from transformer_course.grading.limits import Limits
    from transformer_course.grading.prepare import prepare
    from transformer_course.grading.snapshot import Snapshot
    from transformer_course.grading.verdict import unit_rows

    releases = {r.name: r for r in load_releases(ROOT / "exercises")}
    limits, snapshot = Limits(), Snapshot.of()
    replays: list[float] = []  # the re-checks outside the kernel, which run_notebook makes after its subprocess
    confirm = execute.confirm

    def timed_confirm(*args, **kwargs):
        start = time.perf_counter()
        try:
            return confirm(*args, **kwargs)
        finally:
            replays.append(time.perf_counter() - start)

    execute.confirm = timed_confirm
    rows = []
    try:
        for path in notebooks:
            release = releases[path.name]
            replays.clear()
            t0 = time.perf_counter()
            prepared = prepare(release, path.read_bytes())
            t1 = time.perf_counter()
            run = run_notebook(prepared.nb, release.name, prepared.checks, limits, snapshot)
            t2 = time.perf_counter()
            graded = unit_rows("benchmark", release, prepared, run, limits)
            t3 = time.perf_counter()
            assert all(r.status == "passed" for r in graded), [r for r in graded if r.status != "passed"]
            plain, _ = timed(lambda path=path: nbconvert(path, work / f"alone-{path.name}"))
            replay = sum(replays)
            rows.append((path.stem, t1 - t0, t2 - t1 - replay, replay + t3 - t2, t3 - t0, plain))
    finally:
        execute.confirm = confirm
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--notebooks", default="01-11",
                        help="'all', or a range of lesson numbers such as 01-11 (default: 01-11, without the two "
                        "that train a model for most of their time)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    solutions = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if args.notebooks != "all":
        low, high = (int(x) for x in args.notebooks.split("-"))
        solutions = [p for p in solutions if low <= int(p.name[:2]) <= high]
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; {len(solutions)} notebooks a student; "
          f"{args.students} students; --jobs {args.jobs}", flush=True)
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        work = Path(tmp)
        results = class_run(solutions, args.students, args.jobs, work / "class")
        print(f"\n{'':30} {'s / student':>12} {'CPU-s / student':>16} {'students / hour':>16}")
        for name, (wall, cpu) in results.items():
            print(f"{name:30} {wall / args.students:12.1f} {cpu / args.students:16.1f} "
                  f"{3600 * args.students / wall:16.0f}")
        (grade_wall, grade_cpu), (plain_wall, plain_cpu) = results.values()
        print(f"grader overhead over nbconvert: {100 * (grade_wall / plain_wall - 1):+.0f}% wall, "
              f"{100 * (grade_cpu / plain_cpu - 1):+.0f}% CPU (goal: at most +20%)", flush=True)

        print("\nWhat every notebook pays before its own cells (wall seconds, each alone, median):")
        fixed = fixed_costs(args.repeats)
        for name, seconds in fixed.items():
            print(f"  {seconds:6.2f}  {name}")
        grader_fixed = sum(seconds for name, seconds in fixed.items() if "nbconvert" not in name)

        print("\nEach notebook graded alone (wall seconds; own cells: the run less the grader's fixed costs above):")
        print(f"  {'notebook':34} {'prepare':>8} {'run':>8} {'cells, est.':>11} {'replay':>8} {'grader':>8} "
              f"{'nbconvert':>10}")
        (work / "alone").mkdir()
        rows = per_notebook(solutions, work / "alone")
        totals = [sum(r[k] for r in rows) for k in range(1, 6)]
        for name, prepared, run, replay, grader, plain in [*rows, ("all", *totals)]:
            own = run - grader_fixed * (len(rows) if name == "all" else 1)
            print(f"  {name:34} {prepared:8.2f} {run:8.2f} {own:11.2f} {replay:8.2f} {grader:8.2f} {plain:10.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
