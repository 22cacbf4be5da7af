"""The per-submission report: what the preprocessors found, typed, and the status it gives the submission.

The preprocessors (``preprocessors.py``, ``selfcheck.SetupCheck``) each add what they found to one report file per
student and assignment, ``<reports>/<assignment>/<student>.json``: ``{notebook: NotebookReport}``.  The batch
grader (``batch.py``) and the self-check read it back as a ``SubmissionReport`` and derive the submission's
``Status`` and reason from its fields, never from the wording of a message.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import os
from dataclasses import dataclass, field
from pathlib import Path


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

    @staticmethod
    def add(path: Path, notebook: str, **found) -> None:
        """Add ``found`` (``NotebookReport`` fields) to ``notebook``'s entry of the report file ``path``."""
        unknown = set(found) - {f.name for f in dataclasses.fields(NotebookReport)}
        if unknown:
            raise ValueError(f"not fields of NotebookReport: {sorted(unknown)}")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(path.read_text()) if path.exists() else {}
        data.setdefault(notebook, {}).update(found)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)

    def status(self, result: dict) -> tuple[Status, str]:
        """(status, reason) from nbgrader's ``result`` (``NbGraderAPI.autograde``) and this report."""
        nbs = self.notebooks.values()
        flags = list(dict.fromkeys(f for nb in nbs for f in nb.problems()))  # submitted files: once, not per notebook
        setup = [nb.setup_error for nb in nbs if nb.setup_error]
        if setup:       # the environment's failure, not the learner's: never scored (selfcheck.SetupCheck)
            return Status.ENVIRONMENT_ERROR, "; ".join(setup + flags)
        invalid = [nb.invalid for nb in nbs if nb.invalid]
        if invalid:
            return Status.INVALID, "; ".join(invalid)
        if not result.get("success"):
            error = (result.get("error") or result.get("log") or "").strip().splitlines()
            return Status.CRASHED, "nbgrader could not grade it: " + (error[-1] if error else "unknown error")
        stopped = [nb for nb in nbs if nb.execution is not Execution.OK]
        if flags:     # what the learner's code attempted comes first, even if it also crashed or hung
            return Status.FLAGGED, "; ".join(flags + [nb.stopped for nb in stopped])
        for nb in stopped:
            return (Status.TIMED_OUT if nb.execution is Execution.TIMED_OUT else Status.CRASHED), nb.stopped
        return Status.GRADED, ""

    def starved(self) -> list[str]:
        """Why the machine's load, not the answer, stopped a notebook (empty when it did not)."""
        return [nb.starved for nb in self.notebooks.values() if nb.starved]

    def submitted_files(self) -> dict:
        """``withheld`` (flagged: code, links, hidden files; never reached the kernel) and ``stray`` (listed
        only: checkpoints, data): what the learner submitted beside the notebook."""
        nbs = self.notebooks.values()
        return {"withheld": sorted({w for nb in nbs for w in nb.withheld}),
                "stray": sorted({f for nb in nbs for f in nb.stray_files})}
