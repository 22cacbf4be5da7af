"""One way to grade one submission: ``grade_submission(run, student)``.

``scripts/grade.py`` (``batch.grade_one``, in each worker) and the grader's check of itself
(``selfcheck.grade_solution``, on the worked solution) both call it.  Everything a grade depends on besides the
files is in the ``GradingRun`` it is given: the course and its nbgrader configuration, the gradebook, where the
reports go, the limits (read from the environment once, by the command line: ``GradingRun.create``), the
retries.  Nothing here writes ``os.environ`` or changes the working folder: nbgrader is given the course's root
in its configuration (``course.load_config``), and the kernels their process limit through their own
environment (``SandboxedExecute.kernel_nproc``).

A submission whose kernel the machine's load starved, or whose kernel did not start (``overloaded``), is graded
again with the time limits multiplied by ``GRADER_RETRY_SCALE``, ``retries`` times; the caller decides what a
result still starved becomes (the batch: ``timed out`` with the reason; the check: a failed check).
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from tfmgrader.course import api_from_config, load_config
from tfmgrader.limits import LIMITS, limit
from tfmgrader.report import Status, SubmissionReport

#: nbgrader's time limits of a cell and of a kernel's start, scaled on a retry.
TIME_LIMITS = ("timeout", "startup_timeout", "iopub_timeout")

#: Errors of nbgrader and jupyter_client before any of the learner's code ran -> what they say about the machine.
KERNEL_START_FAILURES = {
    "Kernel didn't respond": "the kernel did not start in time",
    "Kernel died before replying to kernel_info": "the kernel died while starting (a process limit of the "
                                                  "sandbox user, shared with other kernels on this machine?)",
    "database is locked": "the gradebook was busy",
    # two graders adding the same new gradebook row at once (SQLite, PostgreSQL): the other one won
    "UNIQUE constraint failed": "another grader added the same gradebook row at the same moment",
    "duplicate key value violates unique constraint": "another grader added the same gradebook row at the same moment",
}


@dataclasses.dataclass(frozen=True)
class GradingRun:
    """What grading one assignment depends on besides the submissions' files.

    ``course``: the course whose ``nbgrader_config.py`` (and ``extra_config``) configure the grading; ``root``:
    the course folder graded in (the self-check grades in a throw-away copy of ``course``); ``reports``: where the
    grading preprocessors write their per-submission findings; ``limits``: every limit of ``limits.json`` as this
    run applies it; ``kernel_nproc``: each kernel's process limit when it differs from ``GRADER_NPROC`` (as a
    normal user, kernels graded at once share one uid); ``verdicts``: the last preprocessor saves the verdict
    and compares the notebook with the course's code (off in the batch, which does both for the whole class,
    and in the self-check); ``check_first``: the pipeline grades the solution before the first submission."""

    course: Path
    assignment: str
    reports: Path
    root: Path | None = None
    extra_config: Path | None = None
    db_url: str | None = None
    limits: dict[str, int] = dataclasses.field(default_factory=dict)
    retries: int = 1
    kernel_nproc: int = 0
    verdicts: bool = False
    check_first: bool = True
    watch_also: tuple[str, ...] = ()

    @classmethod
    def create(cls, course: Path, assignment: str, reports: Path, jobs: int = 1, **fields) -> GradingRun:
        """A run with the limits as the environment sets them now (``limits.limit``), read here once.  As root each
        kernel runs as a uid of its own (``sandbox_kernel.kernel_uid``); as a normal user every kernel is that
        user, and RLIMIT_NPROC counts all their threads together (a kernel with torch has about 25): ``jobs``
        kernels at once get ``jobs`` kernels' worth, unless ``GRADER_NPROC`` is set."""
        limits = {name: limit(name) for name in sorted(LIMITS)}
        if jobs > 1 and not os.environ.get("GRADER_NPROC") and os.geteuid() != 0:
            fields.setdefault("kernel_nproc", limits["GRADER_NPROC"] * jobs)
        return cls(course=Path(course).resolve(), assignment=assignment, reports=Path(reports).resolve(),
                   limits=limits, **fields)

    def limit(self, name: str) -> int:
        return self.limits[name] if name in self.limits else LIMITS[name][0]

    def config(self, patient: bool = False):
        """The nbgrader configuration of this run; ``patient``: the time limits multiplied by
        ``GRADER_RETRY_SCALE``, for grading a starved submission again."""
        config = load_config(self.course, self.extra_config, self.db_url)
        config.CourseDirectory.root = str(self.root or self.course)
        for name in ("RefuseDuplicateIds", "StripForgedMetadata", "ScanSubmission", "SandboxedExecute",
                     "VerifyOutside", "SetupCheck", "RecordVerdict"):
            config[name].report_directory = str(self.reports)
        config.RecordVerdict.write_report = self.verdicts
        config.RecordVerdict.copy_detection = self.verdicts
        if not self.check_first:
            config.Autograde.pre_convert_hook = None
        if self.watch_also:
            config.SandboxedExecute.watch_also = list(self.watch_also)
        if self.kernel_nproc:
            config.SandboxedExecute.kernel_nproc = self.kernel_nproc
        if patient:
            for name in TIME_LIMITS:
                value = config.SandboxedExecute.get(name)
                if value:
                    config.SandboxedExecute[name] = int(value) * self.limit("GRADER_RETRY_SCALE")
        return config

    def report_file(self, student: str) -> Path:
        return self.reports / self.assignment / f"{student}.json"


@dataclasses.dataclass
class Graded:
    """What ``grade_submission`` found: nbgrader's ``result``, the grading report, the status and reason it
    gives, the retries (``"attempt N: why"``) and, when the last attempt was still starved, why (``starved``)."""

    result: dict
    report: SubmissionReport
    status: Status
    reason: str
    retried: list[str]
    starved: str = ""


def overloaded(result: dict, report: SubmissionReport) -> str:
    """Why this result may reflect the machine's load rather than the answer ('' when it does not)."""
    starved = report.starved()
    if starved:
        return "; ".join(starved)
    if result.get("success"):
        return ""
    text = (result.get("error") or "") + (result.get("log") or "")
    for sign, why in KERNEL_START_FAILURES.items():     # before any of the learner's code ran
        if sign in text:
            return why
    return ""


def grade_submission(run: GradingRun, student: str, apis: dict | None = None) -> Graded:
    """Autograde ``student``'s submission of ``run.assignment`` (nbgrader's API, the course's pipeline),
    again with longer time limits while the machine's load starves it (``run.retries`` times).  ``apis``: a
    cache of this process's NbGraderAPI objects (nbgrader's API is not thread-safe: one per process)."""
    apis = {} if apis is None else apis
    retried: list[str] = []
    for attempt in range(1 + run.retries):
        patient = attempt > 0
        if patient not in apis:
            apis[patient] = api_from_config(run.config(patient))[0]
        run.report_file(student).unlink(missing_ok=True)     # only what this attempt found counts
        result = apis[patient].autograde(run.assignment, student, force=True, create=True)
        report = SubmissionReport.load(run.report_file(student))
        status, reason = report.status(result)
        why = overloaded(result, report)
        if not why:
            return Graded(result, report, status, reason, retried)
        retried.append(f"attempt {attempt + 1}: {why}")
        if attempt < run.retries:
            time.sleep(run.limit("GRADER_RETRY_PAUSE") * (attempt + 1))
    return Graded(result, report, status, reason, retried, starved=why)
