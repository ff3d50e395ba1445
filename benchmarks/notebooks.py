"""Execution time of every lesson and solution notebook from a fresh kernel (nothing is written back).

Goals: every notebook <= 60 s (the training lessons 09-11 <= 120 s), the whole course <= 10 minutes.

    .venv/bin/python benchmarks/notebooks.py
"""

from __future__ import annotations

import time
from pathlib import Path

from transformer_course.notebook_execution import execute_notebook

ROOT = Path(__file__).resolve().parents[1]


def main():
    total, rows = 0.0, []
    for path in sorted((ROOT / "lessons").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb")):
        start = time.perf_counter()
        execute_notebook(path)
        seconds = time.perf_counter() - start
        total += seconds
        rows.append((seconds, path.relative_to(ROOT)))
        print(f"{seconds:7.1f} s  {path.relative_to(ROOT)}", flush=True)
    slowest = max(rows)
    print(f"\ncourse total {total:.0f} s ({total / 60:.1f} min); slowest {slowest[1]} at {slowest[0]:.1f} s")


if __name__ == "__main__":
    main()
