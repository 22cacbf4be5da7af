"""The last step of the autograde pipeline: the grader's verdict of the notebook just graded, saved in the
gradebook's records (``verdicts.py``), what copy detection finds against the course's own code, and the
instructor's report of the submission."""
from __future__ import annotations

from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Unicode

from tfmgrader import report
from tfmgrader.preprocessors import _ids, report_so_far
from tfmgrader.verdicts import load, save


class RecordVerdict(NbGraderPreprocessor):
    """The last autograde preprocessor: the status and reason that this notebook's report gives the submission
    (``report.SubmissionReport.status``), saved as the submission's verdict (``save``), and the instructor's report
    of the submission (``report.render``) in ``grading/<assignment>/reports/``.  ``scripts/grade.py`` saves its own
    verdict and report after it (a retry, a status only the batch knows, how the run went)."""

    report_directory = Unicode("", help="Where the grading reports go.").tag(config=True)
    write_report = Bool(True, help="Write the instructor's report of the submission (scripts/grade.py writes its "
                                   "own).").tag(config=True)
    copy_detection = Bool(True, help="Compare the submission's graded functions with the course's own code "
                                     "(tfmlib, the worked solutions, the site) and keep what is flagged in the verdict "
                                     "(scripts/grade.py compares the whole class instead).").tag(config=True)

    def preprocess(self, nb, resources):
        findings = report_so_far(self.report_directory, resources)     # this stage's: written when it ends
        assignment, student, notebook = _ids(resources)
        answers = [c.metadata.nbgrader.get("grade_id") for c in nb.cells
                   if c.metadata.get("nbgrader", {}).get("solution")]
        db_url = resources.get("nbgrader", {}).get("db_url")
        if findings is None or not db_url:
            return nb, resources
        status, reason = findings.status({"success": True})
        try:
            save(db_url, assignment, student, comment_cell=(notebook, answers[0]) if answers else None,
                 status=str(status), reason=reason)
        except Exception as err:  # noqa: BLE001 - the grade stands; the batch saves the verdict again
            self.log.warning("could not save the grader's verdict of %s/%s: %s", student, assignment, err)
        path = Path(resources.get("metadata", {}).get("path") or "").resolve()
        if self.copy_detection and len(path.parents) > 2:      # <course>/submitted/<student>/<assignment>
            self._copy_detection(nb, path.parents[2], db_url, assignment, student)
        if self.write_report and len(path.parents) > 2:      # <course>/autograded/<student>/<assignment>
            try:
                score, max_score, tests = report.gradebook_scores(db_url, assignment, student)
                report.write_report(report.report_folder_of(path.parents[2], assignment), report.render(
                    assignment, student, status=status, reason=reason, score=score, max_score=max_score,
                    tests=tests, findings=findings, verdict=load(db_url, assignment).get((assignment, student))))
            except Exception as err:  # noqa: BLE001 - the grade stands without its report
                self.log.warning("could not write the report of %s/%s: %s", student, assignment, err)
        return nb, resources

    def _copy_detection(self, nb, course, db_url: str, assignment: str, student: str) -> None:
        """The notebook's cells as the kernel ran them, compared with the course's code
        (``similarity.against_course``); a flagged function and its source saved in the verdict, which flags the
        submission."""
        from tfmgrader import similarity             # here: only plain `nbgrader autograde` compares
        from tfmgrader.class_report import copy_suspicions

        try:
            source_dir = self.config.CourseDirectory.get("source_directory") or "source"
            analysis = similarity.against_course(course, assignment, student, [c.source for c in nb.cells],
                                                 source_dir)
            points = report.gradebook_scores(db_url, assignment, student)[0]
            save(db_url, assignment, student,
                 **copy_suspicions(analysis, [student], [student] if points and points > 0 else [])[student])
        except Exception as err:  # noqa: BLE001 - the grade stands; the submission is flagged for review
            self.log.warning("copy detection failed for %s/%s: %s", student, assignment, err)
            try:
                save(db_url, assignment, student, similarity="",
                     similar_to=f"copy detection failed ({type(err).__name__}): review by hand")
            except Exception as err2:  # noqa: BLE001
                self.log.warning("could not flag %s/%s: %s", student, assignment, err2)
