"""The course's autograding pipeline, applied to an nbgrader configuration object.

``nbgrader_config.py`` at the course root calls ``configure_autograde(c)``, so that plain
``nbgrader autograde`` and formgrader's *Autograde* button use it with no extra flag; ``scripts/grade.py``
applies it too.  It changes only the ``Autograde`` converter and the grading preprocessors: the learners'
*Validate* (nbgrader's ``Validator`` with the plain ``Execute``) stays fast and unsandboxed.

Sanitising: clear outputs, drop nbgrader metadata the gradebook does not know, restore every read-only
and test cell from the gradebook (``RestoreReadOnlyCells``: quiet about test cells as released), scan the
learner's cells (flagged cells are withheld).  Autograding: run in the sandbox kernel (``SandboxedExecute``),
decide every test again outside the learner's process (``VerifyOutside``), stop a submission whose read-only setup
cell failed before any learner code ran (``selfcheck.SetupCheck``), cap output, save the grades, save the status
and reason in the gradebook (``record_verdict.RecordVerdict``: flagged, comment, the course's verdict table; with what
copy detection finds against the course's own code).  Before the first submission of an assignment, the grader
grades the assignment's own solution and stops if that does not get full marks (``selfcheck.pre_convert_hook``).
Reports go to ``$GRADER_REPORTS`` (default ``<course root>/grading/reports``), never inside a learner's folder,
written once per stage (``preprocessors.GradingExporter``).
"""
from __future__ import annotations

import os


def configure_autograde(c) -> None:
    from tfmgrader.limits import limit

    # The preprocessors, the exporter and the hook are named, not imported: nbgrader imports them when it autogrades
    # (nbconvert's ``register_preprocessor``, traitlets' ``Type`` and nbgrader's ``pre_convert_hook`` take dotted
    # names), so the nbgrader commands that load this configuration and do not autograde (fetch, submit, Validate,
    # the learners' JupyterLab) never import PyTorch, the scan or the sandbox for it.
    nbgrader_pp, ours = "nbgrader.preprocessors.", "tfmgrader.preprocessors."
    # nbgrader's own session bookkeeping when it adds a new student's submission (SQLAlchemy's "Object of type
    # <SubmittedAssignment> not in session ..."): harmless, and printed once per new student.
    import warnings

    warnings.filterwarnings("ignore", message=r"Object of type <Submitted\w+> not in session")
    c.Autograde.sanitize_preprocessors = [
        nbgrader_pp + "ClearOutput", ours + "RefuseDuplicateIds", nbgrader_pp + "DeduplicateIds",
        nbgrader_pp + "OverwriteKernelspec", ours + "StripForgedMetadata", ours + "RestoreReadOnlyCells",
        ours + "ScanSubmission", nbgrader_pp + "CheckCellMetadata"]
    c.Autograde.autograde_preprocessors = [
        ours + "SandboxedExecute", ours + "VerifyOutside", "tfmgrader.selfcheck.SetupCheck", ours + "StderrToStdout",
        ours + "CapOutput", "nbconvert.preprocessors.ClearMetadataPreprocessor", nbgrader_pp + "LimitOutput",
        nbgrader_pp + "SaveAutoGrades", nbgrader_pp + "AssignLatePenalties", nbgrader_pp + "CheckCellMetadata",
        "tfmgrader.record_verdict.RecordVerdict", ours + "NeutraliseLearnerMarkup"]
    c.OverwriteCells.add_missing_cells = True       # RestoreReadOnlyCells is an OverwriteCells: it reads this
    # What the preprocessors find is kept in memory and written once per stage, also when a later step failed.
    c.Autograde.exporter_class = ours + "GradingExporter"
    # The grader grades the assignment's own solution first (once per assignment and process) and stops if it
    # does not get full marks; a submission whose read-only setup cell failed is not scored (selfcheck.py).
    c.Autograde.pre_convert_hook = "tfmgrader.selfcheck.pre_convert_hook"
    if os.environ.get("GRADER_REPORTS"):     # default: <course root>/grading/reports
        for name in ("RefuseDuplicateIds", "StripForgedMetadata", "ScanSubmission", "SandboxedExecute", "VerifyOutside",
                     "SetupCheck", "RecordVerdict"):
            c[name].report_directory = os.environ["GRADER_REPORTS"]
    c.SandboxedExecute.timeout = limit("GRADER_CELL_TIMEOUT")
    c.SandboxedExecute.interrupt_on_timeout = False   # a stuck kernel is stopped, not interrupted
    c.SandboxedExecute.startup_timeout = limit("GRADER_STARTUP_TIMEOUT")
    # The kernel is killed when the notebook is done: nothing is lost (the trace and the audit log are written as
    # they happen) and a graceful shutdown only waited for a kernel whose work was over.
    c.SandboxedExecute.shutdown_kernel = "immediate"
    # After a cell's reply, its last outputs may lag on a loaded machine: wait for them (a lost error output
    # would change a verdict) and, past this, report the submission as starved rather than failed.
    c.SandboxedExecute.iopub_timeout = limit("GRADER_IOPUB_TIMEOUT")
    c.SandboxedExecute.raise_on_iopub_timeout = True
    c.SandboxedExecute.max_output_chars = c.CapOutput.max_chars = limit("GRADER_OUTPUT_CHARS")
    c.LimitOutput.max_lines = 200
