"""The per-submission report: what the preprocessors found, typed, and the status it gives the submission.

The preprocessors (``preprocessors.py``, ``selfcheck.SetupCheck``) each add what they found to one findings file
per student and assignment, ``<reports>/<assignment>/<student>.json``: ``{notebook: NotebookReport}``, kept in
memory (``Findings``) and written once per stage of nbgrader's conversion (``preprocessors.GradingExporter``).  The
batch grader (``batch.py``) and the self-check read it back as a ``SubmissionReport`` and derive the submission's
``Status`` and reason from its fields, never from the wording of a message.

The instructor's report of a submission is rendered from it by one function, ``render``, whichever way it was
graded: ``scripts/grade.py`` (``batch.grade_one``) and plain ``nbgrader autograde``
(``record_verdict.RecordVerdict``) both write ``grading/<assignment>/reports/<student>.json`` (``<out>/reports``
for ``grade.py --out``) and its readable ``.md`` beside it, with the same fields (``FIELDS``): score and status,
reason, the score of every test, copy suspicion, the files withheld or listed, every note of the scan, the sandbox
and the replay, and how it was graded.
Copy detection (``class_report``) and ``nbgrader export`` (``export.py``) bring the reports up to date with the
gradebook (``refresh``).
"""
from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

from tfmgrader.files import write_json


class Status(str, enum.Enum):
    """A submission's status in grades.csv."""
    GRADED = "graded"
    FLAGGED = "flagged"                     # the scan, the sandbox or the replay found something to review
    TIMED_OUT = "timed out"
    CRASHED = "crashed"
    INVALID = "invalid notebook"            # not graded: the files cannot be read as the assignment's notebooks
    ENVIRONMENT_ERROR = "environment error"  # not scored: a read-only setup cell failed (graded again next run)

    def __str__(self) -> str:
        return self.value


class Execution(str, enum.Enum):
    """How the notebook's cells ran in the kernel."""
    OK = "ok"
    TIMED_OUT = "timed out"                 # a cell ran past the time limit; the kernel was stopped
    KERNEL_DIED = "kernel died"             # os._exit, a crash, or a limit of the sandbox


class Kernel(str, enum.Enum):
    """Which kind of kernel ran the notebook (``SandboxedExecute``)."""
    FORKED = "forked from the fork server"
    OWN_SANDBOX = "a sandbox of its own"
    UNSANDBOXED = "unsandboxed"


@dataclass
class NotebookReport:
    """What the grader found in one notebook of a submission."""
    execution: Execution = Execution.OK
    stopped: str = ""                       # the sentence saying why the run stopped (with ``execution``)
    starved: str = ""                       # the time limit was reached on a starved machine: why it was starved
    kernel: Kernel | None = None
    forged: list[str] = field(default_factory=list)        # nbgrader metadata the learner altered (restored)
    flags: list[str] = field(default_factory=list)         # what the scan refused
    attempts: list[str] = field(default_factory=list)      # what the audit hook saw the kernel try
    verification: list[str] = field(default_factory=list)  # verdicts the replay outside the kernel disagreed with
    withheld: list[str] = field(default_factory=list)      # files submitted beside the notebook and withheld
    stray_files: list[str] = field(default_factory=list)   # files listed only (checkpoints, data)
    setup_error: str = ""                   # a read-only setup cell failed before any learner code ran
    inputs_secret: str = ""                 # sha256 prefix of the secret the tests' inputs came from (one per run)
    invalid: str = ""                       # why the notebook cannot be graded (preprocessors.RefuseDuplicateIds)

    def problems(self) -> list[str]:
        """Everything that flags the submission, in the order it is reported."""
        return self.forged + self.flags + self.attempts + self.verification + self.withheld

    @classmethod
    def from_json(cls, data: dict) -> NotebookReport:
        known = {f.name for f in dataclasses.fields(cls)}
        report = cls(**{k: v for k, v in data.items() if k in known})
        report.execution = Execution(report.execution)
        report.kernel = Kernel(report.kernel) if report.kernel else None
        return report


MAX_REASON_CHARS = 8000   # the course's longest reason is about 2,900; Python's csv module reads at most 131,072


def joined(reasons: list[str]) -> str:
    """``reasons`` joined by "; ", those past MAX_REASON_CHARS counted instead of listed (red-team round 39's 20,000
    flagged names made a reason that Python's csv module could not read back from grades.csv)."""
    text, kept = "", 0
    for reason in reasons:
        longer = f"{text}; {reason}" if kept else reason
        if len(longer) > MAX_REASON_CHARS:
            break
        text, kept = longer, kept + 1
    if not kept and reasons:            # one reason longer than the limit: its beginning
        text, kept = f"{reasons[0][:MAX_REASON_CHARS]}…", 1
    left = len(reasons) - kept
    return f"{text}; and {left} more" if left else text


@dataclass
class SubmissionReport:
    """The report of one submission: ``{notebook name: NotebookReport}``."""
    notebooks: dict[str, NotebookReport] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> SubmissionReport:
        return cls({name: NotebookReport.from_json(nb) for name, nb in data.items()})

    @classmethod
    def load(cls, path: Path) -> SubmissionReport:
        """The report file ``path`` (an empty report when there is none: nothing ran)."""
        return cls.from_json(json.loads(Path(path).read_text()) if Path(path).exists() else {})

    def status(self, result: dict) -> tuple[Status, str]:
        """(status, reason) from nbgrader's ``result`` (``NbGraderAPI.autograde``) and this report."""
        nbs = self.notebooks.values()
        flags = list(dict.fromkeys(f for nb in nbs for f in nb.problems()))  # submitted files: once, not per notebook
        setup = [nb.setup_error for nb in nbs if nb.setup_error]
        if setup:       # the environment's failure, not the learner's: never scored (selfcheck.SetupCheck)
            return Status.ENVIRONMENT_ERROR, joined(setup + flags)
        invalid = [nb.invalid for nb in nbs if nb.invalid]
        if invalid:
            return Status.INVALID, "; ".join(invalid)
        if not result.get("success"):
            error = (result.get("error") or result.get("log") or "").strip().splitlines()
            return Status.CRASHED, "nbgrader could not grade it: " + (error[-1] if error else "unknown error")
        stopped = [nb for nb in nbs if nb.execution is not Execution.OK]
        if flags:     # what the learner's code attempted comes first, even if it also crashed or hung
            return Status.FLAGGED, joined(flags + [nb.stopped for nb in stopped])
        for nb in stopped:
            return (Status.TIMED_OUT if nb.execution is Execution.TIMED_OUT else Status.CRASHED), nb.stopped
        return Status.GRADED, ""

    def starved(self) -> list[str]:
        """Why the machine's load, not the answer, stopped a notebook (empty when it did not)."""
        return [nb.starved for nb in self.notebooks.values() if nb.starved]

    def notes(self) -> dict[str, list[str]]:
        """What the grader noted, by kind (each list empty when there is nothing to say)."""
        nbs = self.notebooks.values()

        def every(attr):
            return list(dict.fromkeys(x for nb in nbs for x in getattr(nb, attr)))

        return {"scan": every("flags"), "attempts": every("attempts"), "verification": every("verification"),
                "forged": every("forged"), "stopped": [nb.stopped for nb in nbs if nb.stopped],
                "starved": self.starved(), "setup_error": [nb.setup_error for nb in nbs if nb.setup_error]}

    def submitted_files(self) -> dict:
        """``withheld`` (flagged: code, links, hidden files; never reached the kernel) and ``stray`` (listed
        only: checkpoints, data): what the learner submitted beside the notebook."""
        nbs = self.notebooks.values()
        return {"withheld": sorted({w for nb in nbs for w in nb.withheld}),
                "stray": sorted({f for nb in nbs for f in nb.stray_files})}


class Findings:
    """What the grader found in one notebook during one stage of grading it, kept in memory and written to the
    report file ``path`` at once (``write``): the preprocessors of a stage share one (``preprocessors.record``), so
    the file is written once per stage instead of once per finding."""

    def __init__(self, path: Path, notebook: str):
        self.path, self.notebook = Path(path), notebook
        self.found: dict = {}
        self.afresh = False         # the notebook's entry is replaced, not added to (``forget``)

    def add(self, **found) -> None:
        """Add ``found`` (``NotebookReport`` fields) to the notebook's entry."""
        unknown = set(found) - {f.name for f in dataclasses.fields(NotebookReport)}
        if unknown:
            raise ValueError(f"not fields of NotebookReport: {sorted(unknown)}")
        self.found.update(found)

    def forget(self) -> None:
        """Start the notebook's entry afresh: what an earlier run wrote there is gone once this is written."""
        self.found, self.afresh = {}, True

    def merged(self) -> dict:
        """The report file's contents once this is written (its other notebooks as they are)."""
        data = json.loads(self.path.read_text()) if self.path.exists() else {}
        if self.afresh:
            data.pop(self.notebook, None)
        if self.found:
            data.setdefault(self.notebook, {}).update(self.found)
        return data

    def write(self) -> None:
        """Write the report file with this notebook's findings (nothing to do when there are none)."""
        if self.found or self.afresh:
            write_json(self.path, self.merged())


# --- the instructor's report of one submission: one layout for every way of grading -------------------------

#: The report's fields, in order (``render``): the same for ``scripts/grade.py`` and plain ``nbgrader autograde``.
FIELDS = ["student_id", "assignment", "score", "max_score", "status", "reason", "similar_to", "similarity", "tests",
          "files", "notes", "graded_by", "seconds", "retried", "regraded", "nbgrader_log"]
#: Fields that say how this run went, not what the submission earned (they differ between two runs of one file).
RUN_FIELDS = ["graded_by", "seconds", "retried", "regraded", "nbgrader_log"]
GRADE_PY, AUTOGRADE = "scripts/grade.py", "nbgrader autograde"


def report_folder_of(course: Path, assignment: str) -> Path:
    """Where both ways of grading put the reports of ``assignment`` by default (``grade.py``'s ``--out``)."""
    return Path(course) / "grading" / assignment / "reports"


def gradebook_scores(db_url: str, assignment: str, student: str, gb=None) -> tuple[float, float, list[dict]]:
    """(score, max score, ``[{notebook, test, score, max_score}]``) of the submission in the gradebook (``gb``, an
    open ``nbgrader.api.Gradebook``, or the one at ``db_url``); the test rows in notebook order (none when the
    submission is not in the gradebook: an invalid notebook)."""
    from nbgrader.api import Gradebook, MissingEntry

    if gb is None:
        with Gradebook(db_url) as gb:
            return gradebook_scores(db_url, assignment, student, gb)
    try:
        submission = gb.find_submission(assignment, student)
        max_score = gb.find_assignment(assignment).max_score
    except MissingEntry:
        try:
            return 0.0, gb.find_assignment(assignment).max_score, []
        except MissingEntry:
            return 0.0, 0.0, []
    tests = []
    for nb in sorted(submission.notebooks, key=lambda n: n.name):
        order = {c.name: i for i, c in enumerate(nb.notebook.source_cells)} if nb.notebook else {}
        for grade in sorted(nb.grades, key=lambda g: (order.get(g.name, len(order)), g.name)):
            tests.append({"notebook": nb.name, "test": grade.name, "score": round(float(grade.score or 0), 2),
                          "max_score": float(grade.max_score or 0)})
    return round(float(submission.score or 0), 2), float(max_score), tests


def render(assignment: str, student: str, *, status, reason: str, score: float, max_score: float, tests: list[dict],
           findings: SubmissionReport, verdict: dict | None = None, graded_by: str = AUTOGRADE,
           run: dict | None = None) -> dict:
    """The report of one submission (``FIELDS``, in order).  ``verdict``: the gradebook's verdict (``verdicts.py``),
    for the copy suspicion; ``run``: how ``grade.py`` graded it (``seconds``, ``retried``, ``regraded``,
    ``nbgrader_log``), empty for plain ``nbgrader autograde``."""
    verdict, run = verdict or {}, run or {}
    report = {"student_id": student, "assignment": assignment, "score": round(float(score), 2),
              "max_score": float(max_score), "status": str(status), "reason": reason or "",
              "similar_to": verdict.get("similar_to") or "", "similarity": verdict.get("similarity") or "",
              "tests": tests, "files": findings.submitted_files(), "notes": findings.notes(), "graded_by": graded_by,
              "seconds": run.get("seconds"), "retried": list(run.get("retried") or []),
              "regraded": run.get("regraded") or "", "nbgrader_log": run.get("nbgrader_log") or ""}
    assert list(report) == FIELDS
    return report


def markdown(report: dict) -> str:
    """The report as a page an instructor reads (``<student>.md``)."""
    lines = [f"# {report['assignment']}: {report['student_id']}", "",
             f"**{report['score']:g} / {report['max_score']:g}** points, status **{report['status']}**"
             + (f": {report['reason']}" if report["reason"] else "."), ""]
    if report["similar_to"]:
        lines += [f"Copy detection flagged it for review (no score changed): {report['similar_to']} "
                  f"(similarity {report['similarity']}).", ""]
    if report["tests"]:
        lines += ["| notebook | test | points |", "|---|---|---|"]
        lines += [f"| {t['notebook']} | {t['test']} | {t['score']:g} / {t['max_score']:g} |" for t in report["tests"]]
        lines.append("")
    else:
        lines += ["Not in the gradebook: no test was scored.", ""]
    named = {"withheld": "Files withheld from grading", "stray": "Other files submitted (listed only)"}
    notes = {"scan": "Withheld by the scan", "attempts": "What the code tried in the sandbox",
             "verification": "Where the replay outside the kernel disagreed", "forged": "Altered nbgrader metadata",
             "stopped": "Why the run stopped", "starved": "The machine's load", "setup_error": "A setup cell failed"}
    for key, title in named.items():
        if report["files"].get(key):
            lines += [f"{title}:", *(f"- {x}" for x in report["files"][key]), ""]
    for key, title in notes.items():
        if report["notes"].get(key):
            lines += [f"{title}:", *(f"- {x}" for x in report["notes"][key]), ""]
    how = f"Graded by {report['graded_by']}"
    if report["seconds"] is not None:
        how += f" in {report['seconds']:g} s"
    if report["retried"]:
        how += f"; retried ({'; '.join(report['retried'])})"
    if report["regraded"]:
        how += f"; graded again: {report['regraded']}"
    return "\n".join(lines + [how + "."]) + "\n"


def write_report(folder: Path, report: dict) -> Path:
    """``<folder>/<student>.json`` and its readable ``<student>.md``; returns the JSON's path."""
    from tfmgrader.files import write_atomic, write_json

    path = Path(folder) / f"{report['student_id']}.json"
    write_json(path, report)
    write_atomic(path.with_suffix(".md"), markdown(report))
    return path


def refresh(folder: Path, db_url: str, assignment: str, students: list[str] | None = None) -> list[str]:
    """Bring the reports in ``folder`` up to date with the gradebook: each test's score (an instructor's manual
    grade included), the total, and the verdict's status, reason and copy suspicion (``verdicts.py``).  What the
    grading run found (files, notes, how it ran) stays.  Returns the students whose report was rewritten."""
    from nbgrader.api import Gradebook

    from tfmgrader import verdicts

    found = verdicts.load(db_url, assignment)
    done = []
    with Gradebook(db_url) as gb:
        for path in sorted(Path(folder).glob("*.json")):
            if _refresh_one(path, db_url, assignment, students, found, gb):
                done.append(path.stem)
    return done


def _refresh_one(path: Path, db_url: str, assignment: str, students, found: dict, gb) -> bool:
    """``refresh`` of one report file; False when it is not a report of ``assignment`` to refresh."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(report, dict) or list(report) != FIELDS or report.get("assignment") != assignment \
            or (students is not None and report.get("student_id") not in students):
        return False
    student = report["student_id"]
    verdict = found.get((assignment, student))
    if verdict is not None:
        report.update(status=verdict["status"] or report["status"], reason=verdict["reason"],
                      similar_to=verdict["similar_to"], similarity=verdict["similarity"])
    if report["status"] not in (str(Status.INVALID), str(Status.CRASHED)):     # else not scored: 0, as graded
        report["score"], report["max_score"], report["tests"] = gradebook_scores(db_url, assignment, student, gb)
    write_report(path.parent, report)
    return True
