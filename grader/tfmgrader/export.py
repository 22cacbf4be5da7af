"""``nbgrader export`` with the grader's verdicts: the course's export plugin (set in ``nbgrader_config.py``).

Each row is nbgrader's own (assignment, due date, timestamp, student, names, e-mail, raw score, late penalty,
score, max score) plus the grader's ``status`` and ``reason`` and what copy detection flagged (``similar_to``,
``similarity``), from the gradebook's verdict table (``verdicts.py``).  A submission that never reached the
gradebook (an invalid notebook) has a row too, with its status and reason and a score of 0.  Without ``--to``
the export goes to ``grading/export.csv`` (the course's ``grading/`` folder is not tracked by git).  The export
also brings each exported submission's report (``grading/<assignment>/reports/<student>.json`` and ``.md``, written by
``scripts/grade.py`` or plain ``nbgrader autograde`` in one layout, ``report.render``) up to date with the gradebook:
manual grades, copy suspicion (``report.refresh``).
"""
from __future__ import annotations

import csv
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins.export import ExportPlugin

from tfmgrader import verdicts

NBGRADER_KEYS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                 "raw_score", "late_submission_penalty", "score", "max_score"]
KEYS = NBGRADER_KEYS + verdicts.COLUMNS
DEFAULT_DESTINATION = Path("grading") / "export.csv"


def export_rows(gradebook: Gradebook, assignments: list[str] = (), students: list[str] = ()) -> list[dict]:
    """One row per assignment and student (as nbgrader's CSV export), with the verdict's columns."""
    found = verdicts.load(gradebook.engine.url.render_as_string(hide_password=False))
    rows, seen = [], set()
    for assignment in gradebook.assignments:
        if assignments and assignment.name not in assignments:
            continue
        for student in gradebook.students:
            if students and student.id not in students:
                continue
            row = {"assignment": assignment.name, "duedate": assignment.duedate, "student_id": student.id,
                   "last_name": student.last_name, "first_name": student.first_name, "email": student.email,
                   "max_score": assignment.max_score, "timestamp": "", "raw_score": 0.0,
                   "late_submission_penalty": 0.0, "score": 0.0}
            try:
                submission = gradebook.find_submission(assignment.name, student.id)
            except MissingEntry:
                pass
            else:
                penalty = submission.late_submission_penalty or 0.0
                row.update(timestamp=submission.timestamp, raw_score=submission.score,
                           late_submission_penalty=penalty, score=max(0.0, submission.score - penalty))
            verdict = found.get((assignment.name, student.id), {})
            row.update({k: verdict.get(k, "") for k in verdicts.COLUMNS})
            rows.append(row)
            seen.add((assignment.name, student.id))
    for (assignment, student), verdict in sorted(found.items()):     # never in the gradebook (invalid notebook)
        if (assignment, student) in seen or (assignments and assignment not in assignments) \
                or (students and student not in students):
            continue
        try:
            max_score = gradebook.find_assignment(assignment).max_score
        except MissingEntry:
            continue
        rows.append({"assignment": assignment, "duedate": "", "timestamp": "", "student_id": student,
                     "last_name": "", "first_name": "", "email": "", "raw_score": 0.0,
                     "late_submission_penalty": 0.0, "score": 0.0, "max_score": max_score,
                     **{k: verdict.get(k, "") for k in verdicts.COLUMNS}})
    return rows


class VerdictExportPlugin(ExportPlugin):
    """nbgrader's CSV export with the grader's status, reason and copy suspicion of every submission."""

    def export(self, gradebook: Gradebook) -> None:
        dest = Path(self.to) if self.to else DEFAULT_DESTINATION
        dest.parent.mkdir(parents=True, exist_ok=True)
        rows = export_rows(gradebook, [str(a) for a in self.assignment], [str(s) for s in self.student])
        with open(dest, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=KEYS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        self.log.info("Exported %d rows (with the grader's verdicts) to %s", len(rows), dest)
        self.refresh_reports(gradebook, rows)

    def refresh_reports(self, gradebook: Gradebook, rows: list[dict]) -> None:
        from tfmgrader.report import refresh, report_folder_of

        coursedir = getattr(self.parent, "coursedir", None)
        course = Path(coursedir.root) if coursedir is not None else Path.cwd()
        db_url = gradebook.engine.url.render_as_string(hide_password=False)
        by_assignment: dict[str, list[str]] = {}
        for row in rows:
            by_assignment.setdefault(row["assignment"], []).append(row["student_id"])
        for assignment, students in sorted(by_assignment.items()):
            folder = report_folder_of(course, assignment)
            if not folder.is_dir():
                continue
            try:
                done = refresh(folder, db_url, assignment, students)
            except Exception as err:  # noqa: BLE001 - the export stands without the update
                self.log.warning("could not update the reports in %s: %s", folder, err)
            else:
                self.log.info("Updated %d report(s) of %s in %s", len(done), assignment, folder)
