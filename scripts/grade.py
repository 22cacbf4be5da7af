#!/usr/bin/env python
"""Grade every submission of one assignment, safely, and write grades.csv and a report per submission.

    python scripts/grade.py 03_self_attention [--course .] [--out grading/03_self_attention]

Run from the course root (where ``nbgrader_config.py`` is), after ``nbgrader generate_assignment``
and ``nbgrader collect`` (submissions in ``submitted/<student>/<assignment>/``).  Each submission is
checked (valid notebook JSON, the expected notebook names, untouched nbgrader metadata), then
autograded by nbgrader in this one process with ``scripts/grading/grading_config.py``: learner code
is scanned first and runs in the sandbox kernel.  A broken or hostile submission is recorded with
its reason and a score; it never stops the batch.

Writes ``<out>/grades.csv`` (student_id, score, max_score, status, reason — one row per submission)
and ``<out>/reports/<student>.json``; prints a summary with the seconds per submission.
Statuses: graded, flagged, timed out, crashed, invalid notebook.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GRADING_CONFIG = HERE / "grading" / "grading_config.py"


def expected_notebooks(course: Path, source_dir: str, assignment: str) -> list[str]:
    return sorted(p.name for p in (course / source_dir / assignment).glob("*.ipynb"))


def check_submission(folder: Path, expected: list[str]) -> str | None:
    """Why the submission cannot be graded, or None when it can."""
    import nbformat

    found = sorted(p.name for p in folder.glob("*.ipynb"))
    missing = [n for n in expected if n not in found]
    if missing:
        extra = [n for n in found if n not in expected]
        hint = f"; found {', '.join(extra)} (renamed?)" if extra else ""
        return f"missing notebook {', '.join(missing)}{hint}"
    for name in expected:
        path = folder / name
        try:
            nb = nbformat.read(path, as_version=4)
            nbformat.validate(nb)
        except Exception as err:  # noqa: BLE001 - any unreadable file is reported, not raised
            return f"{name} is not a valid notebook: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        versions = {c.metadata.get("nbgrader", {}).get("schema_version") for c in nb.cells
                    if "nbgrader" in c.metadata}
        if versions - {3}:
            return f"{name} has altered nbgrader metadata (schema versions {sorted(map(str, versions))})"
    return None


def load_api(course: Path):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config() \
        if (course / "nbgrader_config.py").exists() else None
    grading = PyFileConfigLoader(GRADING_CONFIG.name, path=str(GRADING_CONFIG.parent)).load_config()
    if config is None:
        config = grading
    else:
        config.merge(grading)
    config.CourseDirectory.root = str(course)
    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config), coursedir


def status_of(result: dict, report: dict) -> tuple[str, str]:
    """(status, reason) from nbgrader's result and the preprocessors' report."""
    executions = [nb.get("execution", "ok") for nb in report.values()]
    flags = [f for nb in report.values() for f in nb.get("flags", [])]
    if not result.get("success"):
        error = (result.get("error") or result.get("log") or "").strip().splitlines()
        return "crashed", "nbgrader could not grade it: " + (error[-1] if error else "unknown error")
    for e in executions:
        if e != "ok":
            return ("timed out" if "longer than" in e else "crashed"), e
    if flags:
        return "flagged", "; ".join(flags)
    return "graded", ""


def grade(course: Path, assignment: str, out: Path, only: list[str] | None = None) -> list[dict]:
    course, out = course.resolve(), out.resolve()
    os.environ.setdefault("GRADER_REPORTS", str(out / "reports"))
    reports_dir = Path(os.environ["GRADER_REPORTS"])
    os.chdir(course)
    api, coursedir = load_api(course)
    expected = expected_notebooks(course, coursedir.source_directory, assignment)
    if not expected:
        raise SystemExit(f"no notebooks in {coursedir.source_directory}/{assignment}")
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(coursedir.db_url) as gb:
        try:
            max_score = gb.find_assignment(assignment).max_score
        except MissingEntry:
            raise SystemExit(f"{assignment} is not in the gradebook: run `nbgrader generate_assignment "
                             f"{assignment}` first") from None
    submitted = course / coursedir.submitted_directory
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    if only:
        students = [s for s in students if s in set(only)]
    rows, seconds = [], []
    for student in students:
        start = time.monotonic()
        report_file = reports_dir / assignment / f"{student}.json"
        report_file.unlink(missing_ok=True)
        problem = check_submission(submitted / student / assignment, expected)
        if problem:
            status, reason, result = "invalid notebook", problem, {"success": False}
        else:
            result = api.autograde(assignment, student, force=True, create=True)
            report = json.loads(report_file.read_text()) if report_file.exists() else {}
            status, reason = status_of(result, report)
        score = 0.0
        if result.get("success"):
            with Gradebook(coursedir.db_url) as gb:
                score = gb.find_submission(assignment, student).score
        seconds.append(time.monotonic() - start)
        rows.append({"student_id": student, "assignment": assignment, "score": round(score, 2),
                     "max_score": max_score, "status": status, "reason": reason,
                     "seconds": round(seconds[-1], 2)})
        (out / "reports").mkdir(parents=True, exist_ok=True)
        (out / "reports" / f"{student}.json").write_text(json.dumps(
            {**rows[-1], "nbgrader_log": (result.get("log") or "")[-4000:]}, indent=1))
        print(f"{student:>24}  {score:6.2f}/{max_score:<6g} {status:<16} {seconds[-1]:5.1f} s  {reason[:90]}",
              flush=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["student_id"])
        writer.writeheader()
        writer.writerows(rows)
    if seconds:
        print(f"{len(rows)} submissions of {assignment}: median {statistics.median(seconds):.2f} s, "
              f"total {sum(seconds):.1f} s; grades in {out / 'grades.csv'}")
    return rows


def main(argv=None) -> int:
    import warnings

    from sqlalchemy.exc import SAWarning
    warnings.filterwarnings("ignore", category=SAWarning)  # nbgrader's own session bookkeeping
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment")
    parser.add_argument("--course", default=".", type=Path, help="course root (default: .)")
    parser.add_argument("--out", type=Path, help="output folder (default: <course>/grading/<assignment>)")
    parser.add_argument("--students", help="comma-separated student ids (default: every submission)")
    args = parser.parse_args(argv)
    out = args.out or args.course / "grading" / args.assignment
    grade(args.course, args.assignment, out, args.students.split(",") if args.students else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
