#!/usr/bin/env python
"""Benchmark the hardened grading: a generated class of 200 submissions (25 per assignment: correct
ones in four styles, wrong ones, every attack, invalid files) graded with scripts/grade.py, one batch
per assignment.

    python scripts/bench_grading.py [--per-assignment 25] [--keep DIR]

Prints, per assignment, the median and total seconds per submission and whether every outcome was as
expected (correct: full marks; wrong or hostile: less), then the class totals.  Takes about 20 minutes
on a 2-core machine; not run by the tests (tests/test_grading.py grades a 74-submission class).
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "grading"))
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())


def main(argv=None) -> int:
    from make_class import make_class

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-assignment", type=int, default=25,
                        help="submissions per assignment (default 25: 8 assignments make a class of 200)")
    parser.add_argument("--keep", type=Path, help="build the course here and keep it")
    args = parser.parse_args(argv)
    course = args.keep or Path(tempfile.mkdtemp(prefix="bench-grading-"))
    course.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions", dirs_exist_ok=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for a in ASSIGNMENTS:
        subprocess.run(["nbgrader", "generate_assignment", a, "--force"], cwd=course, env=env, check=True,
                       capture_output=True)
    # make_class writes 22 kinds per copy; take whole copies, then trim each assignment to the size asked
    # for, keeping the kinds in the order they were written (every kind once before any repeats).
    per = args.per_assignment
    expected = make_class(course, ASSIGNMENTS, copies=-(-per // 22))
    for a in ASSIGNMENTS:
        mine = sorted((s for s, e in expected.items() if e["assignment"] == a), key=lambda s: (s.split("-")[0], s))
        for student in mine[per:]:
            shutil.rmtree(course / "submitted" / student)
            del expected[student]
    print(f"{len(expected)} submissions in {course}")
    all_seconds, wrong, start = [], [], time.monotonic()
    for a in ASSIGNMENTS:
        t0 = time.monotonic()
        subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), a, "--course", str(course)],
                       env=env, check=True, capture_output=True)
        wall = time.monotonic() - t0
        with open(course / "grading" / a / "grades.csv") as f:
            rows = list(csv.DictReader(f))
        seconds = [float(r["seconds"]) for r in rows]
        for r in rows:
            full = float(r["score"]) == float(r["max_score"])
            if full != (expected[r["student_id"]]["expect"] == "full"):
                wrong.append(r["student_id"])
        all_seconds += seconds
        print(f"{a:<20} {len(rows):3d} submissions  median {statistics.median(seconds):5.2f} s  "
              f"batch {wall:6.1f} s (start-up {wall - sum(seconds):4.1f} s)")
    total = time.monotonic() - start
    print(f"class: {len(all_seconds)} submissions, median {statistics.median(all_seconds):.2f} s per submission, "
          f"total {total:.0f} s; unexpected outcomes: {wrong or 'none'}")
    if not args.keep:
        shutil.rmtree(course, ignore_errors=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
