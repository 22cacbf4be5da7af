#!/usr/bin/env python
"""Grade every submission of one assignment (or of several), safely, and write grades.csv and a report per
submission.

    python scripts/grade.py 03_self_attention [--course .] [--out grading/03_self_attention]
                            [--jobs N] [--shard I/N] [--db-url URL] [--regrade]
    python scripts/grade.py 01_rnn_limits 02_attention ... [--out grading]    # one after the other

Several assignments are graded one after the other by the same process, each as if graded alone, into
``<out>/<assignment>`` (default ``<course>/grading/<assignment>``); the process starts once.  One that cannot
be graded (its solution fails the self-check, it is not in the gradebook) is reported and the others are
graded all the same; the exit status is then 1.

Run from the course root (where ``nbgrader_config.py`` is), after ``nbgrader generate_assignment``
and ``nbgrader collect`` (submissions in ``submitted/<student>/<assignment>/``).  Each submission is
checked (valid notebook JSON, the expected notebook names, untouched nbgrader metadata), then
autograded by nbgrader with ``grader/tfmgrader/grading_config.py``: learner code is scanned first and
runs in the sandbox kernel.  A broken or hostile submission is recorded with its reason and a score;
it never stops the batch.

``--jobs N`` (default: the number of cores) grades N submissions at once, each in its own worker
process (its own NbGraderAPI) and sandboxed kernel.  ``--shard I/N`` grades only the students whose
id hashes to shard I, so that N machines grade one assignment together; they share one gradebook
(``--db-url`` or the course's ``CourseDirectory.db_url``, e.g. PostgreSQL) and one ``--out`` folder.
A submission is marked done (``<out>/state/<student>.done``) once its grade is in the gradebook; a
re-run grades only what is not done, so a killed worker or machine loses nothing and nothing is graded
twice; ``<out>/run-report.json`` lists what was graded, skipped and re-graded (with why).  What a submission was
graded from includes the limits (``grader/tfmgrader/limits.json``, e.g. ``GRADER_CELL_TIMEOUT=60``) and the
grading configuration: a run with other limits grades every submission again and says which limit changed.  A
submission whose kernel was starved by the machine's load (or could not start) is graded again with
longer time limits, or else marked 'timed out' with that reason and graded again by the next run: the
load never changes a score.

Writes ``<out>/grades.csv`` (student_id, score, max_score, status, reason — one row per submission, in
student order, the same with any --jobs or --shard) once every submission is graded, and
``<out>/reports/<student>.json``; prints a summary with the seconds per submission.  ``--students a,b``
grades those students (again, with ``--regrade``) and merges them into ``<out>``: their rows are replaced and
every other row, flag and class report stays as the class's.  Every status and reason, and what copy
detection flagged, is also in the gradebook (``grader/tfmgrader/verdicts.py``: flagged submissions, the
grader's comment, ``nbgrader export``'s status/reason/similar_to columns, Formgrader's ``/formgrader/flags``).
With grades.csv, for
the instructor and changing no score (``grader/tfmgrader/class_report.py``): copy detection (columns
``similar_to`` and ``similarity``, ``similarity.csv``, ``similarity.html``) and the class's mistakes per graded
function (``mistakes.csv``, ``mistakes.png``).
Statuses: graded, flagged, timed out, crashed, invalid notebook, environment error (a read-only setup
cell failed before any learner code ran: not scored, graded again by the next run).  Before the batch the
grader grades the assignment's own solution (``grader/tfmgrader/selfcheck.py``) and grades nothing if that
does not get full marks.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tfmgrader.batch import default_jobs, grade, parse_shard
from tfmgrader.limits import limit


def main(argv=None) -> int:
    import warnings

    from sqlalchemy.exc import SAWarning
    warnings.filterwarnings("ignore", category=SAWarning)  # nbgrader's own session bookkeeping
    summary, _, details = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(description=" ".join(summary.split()), epilog=details.replace("``", ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="+", metavar="assignment")
    parser.add_argument("--course", default=".", type=Path, help="course root (default: .)")
    parser.add_argument("--out", type=Path, help="output folder (default: <course>/grading/<assignment>); with "
                                                 "several assignments, the folder that holds one per assignment")
    parser.add_argument("--students", help="comma-separated student ids: grade only these (those not graded yet, "
                                           "or all of them with --regrade) and merge them into the class's "
                                           "results (default: every submission)")
    parser.add_argument("--extra-config", type=Path, help="an nbgrader config file loaded last (e.g. longer "
                                                           "timeouts for a slow machine)")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="submissions graded at once, each by its own worker process and sandboxed kernel "
                             f"(default: the number of cores, {default_jobs()} here)")
    parser.add_argument("--shard", type=parse_shard, metavar="I/N",
                        help="grade only shard I of N (0 <= I < N; a stable hash of the student id decides), so "
                             "that N machines grade one assignment together into one gradebook (--db-url)")
    parser.add_argument("--db-url", help="the gradebook (default: the course's CourseDirectory.db_url, else "
                                         "sqlite:///<course>/gradebook.db), e.g. "
                                         "postgresql+psycopg://grader@db.example.org/transformers")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again (default: only those no run has finished grading)")
    parser.add_argument("--retries", type=int, default=1,
                        help="times a submission starved by the machine's load is graded again, with "
                             f"{limit('GRADER_RETRY_SCALE')}x "
                             "the time limits (default 1)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if len(set(args.assignments)) < len(args.assignments):
        parser.error("an assignment is named twice")
    several, failed = len(args.assignments) > 1, []
    # Resolved now, against the folder the command was run from.
    course, top = args.course.resolve(), args.out.resolve() if args.out else None
    extra = args.extra_config.resolve() if args.extra_config else None
    reports = os.environ.get("GRADER_REPORTS")      # else each assignment's reports go into its own folder
    for assignment in args.assignments:
        out = (top / assignment if several else top) if top else course / "grading" / assignment
        try:
            grade(course, assignment, out, args.students.split(",") if args.students else None,
                  extra, jobs=args.jobs, shard=args.shard, db_url=args.db_url, regrade=args.regrade,
                  retries=args.retries, reports=Path(reports).resolve() if reports else None)
        except SystemExit as stop:
            if not several or stop.code in (None, 0):
                raise
            print(f"{assignment}: {stop.code}", file=sys.stderr, flush=True)
            failed.append(assignment)
    if failed:
        print(f"not graded, or not completely: {', '.join(failed)} (the messages above say why)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
