#!/usr/bin/env python
"""Where the seconds go when the hardened pipeline grades one submission.

    python grader/tfmgrader/profile_grading.py COURSE ASSIGNMENT [--students a,b,...] [--markdown]

Grades the given submissions (default: all of ``submitted/*/ASSIGNMENT``) one after the other in this process,
exactly as a ``scripts/grade.py`` worker does (the course's configuration, one NbGraderAPI), with timers
around the phases of nbgrader, the sandboxed kernel and the replay, and prints the median seconds per
submission of each phase, and what the worker pays once (its set-up and its fork server, ``forkserver.py``).
``GRADER_FORKSERVER=0`` profiles the sandbox started per kernel instead.  The submissions should not time out (a
30-second limit would dominate).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path


PHASES = [
    ("setup", "nbgrader set-up per submission (gradebook: student, submission; files copied)"),
    ("sanitise", "sanitising: restore cells from the gradebook, scan the learner's code"),
    ("launch", "kernel launch: private folder, kernel spec, copy of the folder, the launcher started"),
    ("ready", "kernel ready: forked from the server (or a fresh Python in bubblewrap), ipykernel started"),
    ("setup_cell", "the read-only setup cell: torch and tfmlib imported in the kernel"),
    ("cells", "the learner's cells and the tests"),
    ("shutdown", "kernel shutdown"),
    ("replay", "the replay of the tests outside the kernel"),
    ("save", "saving the grades in the gradebook"),
    ("other", "other nbgrader work (converter, notebook read and write, other preprocessors)"),
]


class Timers:
    """Seconds per phase of the submission being graded."""

    def __init__(self):
        self.now: dict[str, float] = defaultdict(float)

    def wrap(self, owner, name: str, phase):
        """Time ``owner.name`` into ``phase`` (a name, or a function of the call's arguments)."""
        original = getattr(owner, name)
        timers = self

        def key(args):
            return phase(*args) if callable(phase) else phase

        if asyncio.iscoroutinefunction(original):
            @functools.wraps(original)
            async def timed(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    timers.now[key(args)] += time.perf_counter() - start
        else:
            @functools.wraps(original)
            def timed(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    timers.now[key(args)] += time.perf_counter() - start
        setattr(owner, name, timed)


def cell_phase(self, cell, resources, index) -> str:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return "setup_cell" if meta.get("locked") and not meta.get("grade") and not meta.get("solution") else "cells"


def instrument(timers: Timers) -> None:
    from nbclient import NotebookClient
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import OverwriteCells, SaveAutoGrades

    from tfmgrader import forkserver
    from tfmgrader import preprocessors

    timers.wrap(forkserver.ForkServer, "__init__", "server")
    timers.wrap(Autograde, "init_assignment", "setup")
    for cls in (preprocessors.StripForgedMetadata, OverwriteCells, preprocessors.ScanSubmission):
        timers.wrap(cls, "preprocess", "sanitise")
    timers.wrap(preprocessors.SandboxedExecute, "preprocess", "execute")
    # The synchronous wrappers (nbclient's run_sync keeps a reference to the coroutine functions).
    timers.wrap(NotebookClient, "start_new_kernel", "launch")
    timers.wrap(preprocessors.SandboxedExecute, "start_new_kernel_client", "ready")
    timers.wrap(preprocessors.SandboxedExecute, "preprocess_cell", cell_phase)
    timers.wrap(preprocessors.SandboxedExecute, "_cleanup_kernel", "shutdown")
    timers.wrap(preprocessors.VerifyOutside, "preprocess", "replay")
    timers.wrap(SaveAutoGrades, "preprocess", "save")


def profile(course: Path, assignment: str, students: list[str]) -> tuple[list[dict], float]:
    """Per submission, the seconds of each phase (and ``total``); and the seconds of the per-worker set-up."""
    from tfmgrader.course import api_from_config
    from tfmgrader.run import GradingRun, grade_submission

    run = GradingRun.create(course, assignment, course / "grading" / "profile" / "reports", verdicts=True, retries=0)
    start = time.perf_counter()
    import torch  # noqa: F401 - a grade.py worker has it loaded (the replay needs it)
    apis = {False: api_from_config(run.config())[0]}
    worker = time.perf_counter() - start
    from tfmgrader.selfcheck import ensure
    ensure(course, assignment)      # once per assignment (cached), not part of a submission's time
    timers = Timers()
    instrument(timers)
    rows, server = [], 0.0
    for student in students:
        timers.now.clear()
        start = time.perf_counter()
        result = grade_submission(run, student, apis).result
        row = dict(timers.now)
        started = row.pop("server", 0)      # the worker's fork server, started for its first submission
        server += started
        total = time.perf_counter() - start - started
        inside = sum(row.get(k, 0) for k in ("launch", "ready", "setup_cell", "cells", "shutdown"))
        row["launch"] = row.get("launch", 0) + max(row.pop("execute", 0) - inside - started, 0)  # spec, folders
        row["other"] = total - sum(row.get(k, 0) for k, _ in PHASES if k != "other")
        row["total"], row["success"] = total, bool(result.get("success"))
        rows.append(row)
        print(f"{student:>28}  {total:6.2f} s  " + "  ".join(f"{k} {row.get(k, 0):.2f}" for k, _ in PHASES),
              flush=True)
    return rows, worker, server


def table(rows: list[dict], worker: float, server: float = 0.0) -> str:
    """A markdown table of the median seconds per phase."""
    total = statistics.median(r["total"] for r in rows)
    lines = ["| phase | seconds per submission (median) | share |", "|---|---:|---:|"]
    for key, text in PHASES:
        sec = statistics.median(r.get(key, 0) for r in rows)
        lines.append(f"| {text} | {sec:.2f} | {sec / total:.0%} |")
    lines.append(f"| **one submission** | **{total:.2f}** | 100% |")
    lines.append(f"| once per worker: torch imported, configuration loaded, NbGraderAPI | {worker:.2f} | |")
    lines.append(f"| once per worker: the fork server started (PyTorch imported in the sandbox) | {server:.2f} | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", type=Path)
    parser.add_argument("assignment")
    parser.add_argument("--students", help="comma-separated (default: every submission)")
    args = parser.parse_args(argv)
    course = args.course.resolve()
    students = args.students.split(",") if args.students else sorted(
        p.parent.name for p in (course / "submitted").glob(f"*/{args.assignment}"))
    rows, worker, server = profile(course, args.assignment, students)
    print(f"\n{len(rows)} submission(s) of {args.assignment}; load average {os.getloadavg()[0]:.1f}\n")
    print(table(rows, worker, server))
    return 0 if all(r["success"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
