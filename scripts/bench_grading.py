#!/usr/bin/env python
"""Benchmark the hardened grading: a generated class (25 submissions per assignment, 200 in all: correct
ones in several styles, wrong ones, invalid files, then attacks) graded with scripts/grade.py with 1, 2
and N jobs (N: the number of cores), one batch per assignment and job count.

    python scripts/bench_grading.py [--per-assignment 25] [--assignments 03_self_attention ...]
                                    [--jobs 1 2 4] [--keep DIR]

Prints, per job count, the wall time, submissions per minute and the speed-up over one job (measured in
the same run), whether every outcome was as expected (correct: full marks; wrong or hostile: less) and
whether the grades are identical to those of one job, the seconds per submission per core (the median of
the submissions that did not time out, and the core-seconds of the whole run per submission) and the wall
time of 1,200 submissions on this machine; then the projected wall time of a class of 1,200
submissions on 1, 2, 4, 8 and 16 such machines (``--shard``), from the fastest job count.  The grader's
check of each assignment's solution (``grader/tfmgrader/selfcheck.py``) is done before the timed runs.  The whole
class takes about 20 minutes on a 2-core machine (``--jobs 1 2``); not run by the tests
(tests/tfmgrader/test_grading.py and tests/tfmgrader/test_grading_scale.py grade their own classes).
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
sys.path.insert(0, str(ROOT / "grader"))     # the grader and its fixtures (grader/fixtures/) beside this script
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())


CLASS_SIZE = 1200
MACHINES = (1, 2, 4, 8, 16)


def build_class(course: Path, assignments: list[str], per: int, env: dict) -> dict:
    """The course with ``per`` submissions per assignment; returns make_class's expectations."""
    from fixtures.make_class import make_class

    course.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for a in assignments:
        shutil.copytree(ROOT / "solutions" / a, course / "solutions" / a, dirs_exist_ok=True)
        subprocess.run(["nbgrader", "generate_assignment", a, "--force"], cwd=course, env=env, check=True,
                       capture_output=True)
    # Per assignment: every correct style and wrong kind first, then the attacks, in a fixed order (the
    # endless loop, which times out, among the first), up to the size asked for.
    expected = make_class(course, assignments, copies=1)
    rank = {"correct": 0, "wrong": 1, "invalid": 1, "renamed": 1, "attack": 2}
    first = {"attack-endless-loop": 0, "attack-os-exit": 1, "attack-module-attributes": 2}
    for a in assignments:
        mine = sorted((s for s, e in expected.items() if e["assignment"] == a),
                      key=lambda s: (rank[expected[s]["kind"].split("-")[0]], first.get(expected[s]["kind"], 9), s))
        for student in mine[per:]:
            shutil.rmtree(course / "submitted" / student)
            del expected[student]
    return expected


def grade_all(course: Path, assignments: list[str], jobs: int, env: dict) -> tuple[float, dict[str, dict]]:
    """Grade every assignment with ``jobs`` jobs (from scratch); (wall seconds, {student: row})."""
    rows, start = {}, time.monotonic()
    for a in assignments:
        out = course / "bench" / f"jobs{jobs}" / a
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), a, "--course", str(course),
                        "--out", str(out), "--jobs", str(jobs), "--regrade"], env=env, check=True, capture_output=True)
        with open(out / "grades.csv") as f:
            rows.update({r["student_id"]: r for r in csv.DictReader(f)})
    return time.monotonic() - start, rows


def unexpected(rows: dict[str, dict], expected: dict) -> list[str]:
    return [s for s, r in rows.items()
            if (float(r["score"]) == float(r["max_score"])) != (expected[s]["expect"] == "full")]


def same_grades(a: dict[str, dict], b: dict[str, dict]) -> bool:
    strip = lambda rows: {s: {k: v for k, v in r.items() if k != "seconds"} for s, r in rows.items()}  # noqa: E731
    return strip(a) == strip(b)


def per_core(rows: dict[str, dict], wall: float, jobs: int, cores: int) -> tuple[float, float]:
    """(median seconds of one submission that did not time out, as its worker measured it: one core each
    while jobs <= cores; the core-seconds per submission of the whole run: wall time x cores used / count)."""
    own = [float(r["seconds"]) for r in rows.values() if r["status"] not in ("timed out", "invalid notebook")]
    return (statistics.median(own) if own else float("nan")), wall * min(jobs, cores) / max(len(rows), 1)


def projection(per_minute: float, size: int = CLASS_SIZE, machines=MACHINES) -> list[tuple[int, float]]:
    """(machines, minutes) to grade ``size`` submissions when each machine grades ``per_minute``."""
    return [(m, size / (per_minute * m)) for m in machines]


def main(argv=None) -> int:
    cores = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-assignment", type=int, default=25,
                        help="submissions per assignment (default 25: 8 assignments make a class of 200)")
    parser.add_argument("--assignments", nargs="+", default=ASSIGNMENTS, help="default: all eight")
    parser.add_argument("--jobs", type=int, nargs="+", default=sorted({1, 2, cores}),
                        help=f"job counts to measure (default: 1, 2 and the number of cores, {cores})")
    parser.add_argument("--keep", type=Path, help="build the course here and keep it")
    args = parser.parse_args(argv)
    course = args.keep or Path(tempfile.mkdtemp(prefix="bench-grading-"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("GRADER_REPORTS", None)
    expected = build_class(course, args.assignments, args.per_assignment, env)
    n = len(expected)
    print(f"{n} submissions of {len(args.assignments)} assignment(s) in {course}; {cores} cores; "
          f"load average {os.getloadavg()[0]:.1f} before the runs")
    for a in args.assignments:      # the grader's check of each solution, once, before the timed runs
        subprocess.run([sys.executable, str(ROOT / "grader" / "tfmgrader" / "selfcheck.py"), "--course", str(course),
                        "--assignment", a], env=env, check=True, capture_output=True)
    results, failed = {}, False
    for jobs in args.jobs:
        wall, rows = grade_all(course, args.assignments, jobs, env)
        results[jobs] = (wall, rows)
        wrong = unexpected(rows, expected)
        same = same_grades(rows, results[args.jobs[0]][1])
        failed |= bool(wrong) or not same
        print(f"{jobs:2d} job(s): {wall:7.1f} s  {n / wall * 60:6.1f} submissions/min  "
              f"{results[args.jobs[0]][0] / wall:4.2f}x the speed of {args.jobs[0]} job(s)  "
              f"(wall {wall / results[args.jobs[0]][0]:4.2f}x)  unexpected outcomes: {wrong or 'none'}  "
              f"grades identical to {args.jobs[0]} job(s): {'yes' if same else 'NO'}", flush=True)
        median, core_seconds = per_core(rows, wall, jobs, cores)
        print(f"          per submission per core: median {median:.2f} s (those that did not time out), "
              f"{core_seconds:.2f} core-seconds over the whole run; {CLASS_SIZE} submissions on this machine: "
              f"{CLASS_SIZE / (n / wall * 60):.0f} min", flush=True)
    best = min(results, key=lambda j: results[j][0])
    rate = n / results[best][0] * 60
    print(f"projected wall time for {CLASS_SIZE} submissions at {rate:.1f} per minute per machine "
          f"({best} jobs each, with --shard):")
    for machines, minutes in projection(rate):
        print(f"  {machines:2d} machine(s): {minutes:6.1f} min")
    if not args.keep:
        shutil.rmtree(course, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
