"""nbgrader preprocessors of the hardened grading set-up (selected by ``hardened.configure_autograde``).

- ``ScanSubmission`` (sanitising stage): runs ``scan.scan_cells`` on the learner's cells and withholds
  flagged cells from execution, recording why.
- ``SandboxedExecute`` (autograding stage): nbgrader's ``Execute`` in the bubblewrap sandbox kernel, which it
  sets up itself (private kernel spec and socket folder per notebook).  It refuses to run without
  bubblewrap unless the instructor opted out explicitly.  It names each test cell for the trace the kernel
  records, and survives a dead or stuck kernel: the cell that killed or hung it and every later cell get an
  error output (so they score zero and the earlier ones keep their points); output is capped as it arrives.
- ``VerifyOutside``: the verdict of every test cell, reached in the grader's process from the recorded results
  (``verify.replay``): the kernel only records (``tfmcheck.withheld``), so what each test cell shows and
  whether it fails are the replay's.
- ``CapOutput``: truncates what each cell printed to a fixed number of characters.
- ``StderrToStdout``: keeps stderr text (warnings, logging) visible without failing a test cell.

Each adds what it saw to the report of the submission (``report.NotebookReport`` fields, in
``report_directory/<assignment>/<student>.json``, outside the learner's reach): ``record`` keeps it in memory and
``GradingExporter`` writes it once per stage, also when a later step failed; ``report.SubmissionReport.status``
turns it into the submission's status and reason.  What they take from the instructor's notebook is read from the
gradebook once per stage (``source_notebook``).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from time import monotonic

from queue import Empty

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_hook, run_sync
from nbconvert.exporters import NotebookExporter
from nbformat.notebooknode import NotebookNode
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import ClearHiddenTests, Execute, NbGraderPreprocessor, OverwriteCells
from nbgrader.utils import is_grade, is_solution
from traitlets import Bool, Float, Integer, List, Unicode

from tfmcheck import REFUSE_ENV, SECRET_ENV, TRACE_NAME
from tfmgrader.forkserver import ForkServer, ForkServerError, enabled as forkserver_enabled
from tfmgrader.kernelspec import KERNEL_NAME, write_kernelspec
from tfmgrader.library_view import VIEW_ENV, exported_view
from tfmgrader.outside_memory import BASE, PEAK, Sampler, memory_cells, resident
from tfmgrader.lifetime import OWNER_ENV, end_leftovers, owner_tag
from tfmgrader.limits import limit
from tfmgrader.report import Execution, Findings, Kernel, SubmissionReport
from tfmgrader.sandbox_kernel import AUDIT_MARK, FORKSERVER_ENV, WATCH_ENV, read_regular
from tfmgrader.scan import scan_cells
from tfmgrader.submission_files import flag_message, submission_view, write_allowed

UNSAFE_ENV = "TFMLIB_GRADING_UNSAFE"
NO_BWRAP = ("the grading sandbox needs bubblewrap, which is not installed on this machine. Install it "
            "(Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap), or, only if "
            "you trust every submission, opt out explicitly with TFMLIB_GRADING_UNSAFE=1 (learners' code then "
            "runs with your rights and can read and change your files and the gradebook)")


def _ids(resources) -> tuple[str, str, str]:
    nbg = resources.get("nbgrader", {})
    return nbg.get("assignment", "?"), nbg.get("student", "?"), nbg.get("notebook", "?")


def report_folder(directory: str, resources) -> Path | None:
    """``directory``, or else ``grading/reports`` in the course root (three levels above the notebook's
    folder ``autograded/<student>/<assignment>``)."""
    if directory:
        return Path(directory)
    path = Path(resources.get("metadata", {}).get("path") or "").resolve()
    return path.parents[2] / "grading" / "reports" if len(path.parents) > 2 else None


#: The resources' key of a stage's findings (``StageFindings``) and of the instructor's notebook (``SourceNotebook``).
FINDINGS, SOURCE = "tfmlib_findings", "tfmlib_source"


class StageFindings:
    """The findings of one stage of a notebook's grading, ``{(report file, notebook): report.Findings}``, shared by
    the stage's preprocessors through its resources and written when the stage ends (``GradingExporter``)."""

    def __init__(self):
        self.files: dict[tuple[Path, str], Findings] = {}

    def __deepcopy__(self, memo):
        return self         # nbconvert copies the resources before the first preprocessor: this stays shared

    def of(self, path: Path, notebook: str) -> Findings:
        return self.files.setdefault((path, notebook), Findings(path, notebook))

    def write(self) -> None:
        for findings in self.files.values():
            findings.write()


class GradingExporter(NotebookExporter):
    """nbgrader's exporter of the autograde conversions (``Autograde.exporter_class``, set by ``hardened.py``): each
    stage (sanitising, autograding: two conversions, each with its own resources) gets a ``StageFindings``, written
    once when the stage ends, whether it ended well or a preprocessor raised (a scan flag, withheld files, an
    invalid notebook or a setup error found before a later step failed still reach the report).  It is written at
    each stage's end, not once per notebook, because between the two stages nbgrader's own code runs (the sanitised
    notebook written and read back, the next preprocessors made), where a failure reaches none of the course's."""

    def from_notebook_node(self, nb, resources=None, **kw):
        resources = {} if resources is None else resources
        resources[FINDINGS] = stage = StageFindings()
        try:
            return super().from_notebook_node(nb, resources, **kw)
        finally:
            stage.write()


def findings_of(directory: str, resources) -> Findings | None:
    """This notebook's findings in the report of this student and assignment (None without a report folder): the
    stage's, in memory until it ends (``GradingExporter``), else new ones, written by ``record`` at once."""
    directory = report_folder(directory, resources)
    if directory is None:
        return None
    assignment, student, notebook = _ids(resources)
    path = Path(directory) / assignment / f"{student}.json"
    stage = resources.get(FINDINGS)
    return stage.of(path, notebook) if stage is not None else Findings(path, notebook)


def record(directory: str, resources, **found) -> None:
    """Add ``found`` (fields of ``report.NotebookReport``) to the report of this student and assignment."""
    findings = findings_of(directory, resources)
    if findings is not None:
        findings.add(**found)
        _unless_staged(findings, resources)


def start_report(directory: str, resources) -> None:
    """Forget what an earlier run reported for this notebook: the first step of grading it.  ``grade.py`` starts
    each submission's report afresh; plain ``nbgrader autograde`` never did, so a field only written when set (an
    invalid notebook, a setup error, files withheld) stayed on the learner's next, honest submission."""
    findings = findings_of(directory, resources)
    if findings is not None:
        findings.forget()
        _unless_staged(findings, resources)


def _unless_staged(findings: Findings, resources) -> None:
    """Write ``findings`` now when no stage writes them at its end (a preprocessor run outside ``GradingExporter``)."""
    if FINDINGS not in resources:
        findings.write()


def report_so_far(directory: str, resources) -> SubmissionReport | None:
    """The submission's report with what this stage has found so far (not written yet); None without a report
    folder."""
    findings = findings_of(directory, resources)
    return None if findings is None else SubmissionReport.from_json(findings.merged())


def trace_limit() -> int:
    """Bytes of grading trace read back from the kernel's folder."""
    return limit("GRADER_TRACE_MB") * 1024 * 1024


#: The errors SandboxedExecute writes into a cell the kernel did not finish (it then scores zero, as it is).
KERNEL_STOPPED = {"NotRun", "DeadKernelError", "CellTimeoutError"}


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class ScanSubmission(NbGraderPreprocessor):
    """Flag answers that use forbidden shortcuts or rebind library functions; withhold those cells."""

    report_directory = Unicode("", help="Where the grading reports go (outside the learners' reach).").tag(config=True)
    graded_functions = List(Unicode(),
                            help="Names the learners must define (never flagged as rebinding).").tag(config=True)

    def preprocess(self, nb, resources):
        trusted, answers = trusted_cells(resources)
        # The graded names: what the instructor's answer cells define, read as the kernel reads them; never the
        # submission's own reading of its cells (round 21: a cell Python and IPython split into lines differently)
        graded = set(self.graded_functions) | {name for source in answer_sources(resources).values()
                                               for name in _defined_functions(source)}
        learner, setup, tests = {}, [], []
        for i, cell in enumerate(nb.cells):
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code":
                continue
            if gid in trusted and "nbgrader" in cell.metadata:
                (tests if trusted[gid] else setup).append(cell.source)
            else:
                learner[i] = cell.source
        flags = scan_cells(learner, setup, tests, graded)
        for i in sorted({f.cell for f in flags}):
            reasons = "; ".join(f.reason for f in flags if f.cell == i)
            nb.cells[i].source = (
                "raise RuntimeError(" + repr(
                    "This answer was withheld from grading and will be reviewed by an instructor: " + reasons)
                + ")")
        # cells counted from 1, as a reader counts them (and as the line within the cell is)
        record(self.report_directory, resources, flags=[f"cell {f.cell + 1}, line {f.line}: {f.reason}" for f in flags])
        return nb, resources


class RefuseDuplicateIds(NbGraderPreprocessor):
    """A notebook with two cells of the same nbgrader id (a read-only, test or answer cell copied with its
    metadata) is not graded: it is reported as an invalid notebook with the reason, before nbgrader's own
    ``DeduplicateIds`` would strip one of them (which then made ``OverwriteCells`` fail with a KeyError)."""

    report_directory = Unicode("", help="Where the grading reports go.").tag(config=True)

    def preprocess(self, nb, resources):
        from tfmgrader.course import duplicated_ids

        start_report(self.report_directory, resources)
        problem = duplicated_ids(nb)
        if problem:
            notebook = _ids(resources)[2]
            record(self.report_directory, resources, invalid=f"{notebook}.ipynb {problem}")
            raise ValueError(f"{notebook}.ipynb {problem}")
        return nb, resources


#: Cell tags nbclient obeys (round 13: ``skip-execution`` on the setup cell made the kernel skip it, unreported).
EXECUTOR_TAGS = {"skip-execution", "raises-exception"}


class RestoreReadOnlyCells(OverwriteCells):
    """nbgrader's ``OverwriteCells`` (every read-only and test cell restored from the gradebook, and here also a
    read-only cell the submission lacks; the executor's tags removed from every cell), without its
    warning "Attribute 'checksum' for cell ... has changed!" for the change every honest submission has: a test
    cell as released, i.e. the instructor's cell without its hidden tests.  A read-only cell the learner edited
    is restored as before and still warned about."""

    def preprocess_cell(self, cell, resources, cell_index):
        self._as_released = False
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and cell.cell_type == "code":
            try:
                source = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
            except MissingEntry:
                source = None
            if source is not None and source.locked:
                released = NotebookNode(cell_type="code", source=source.source, metadata={})
                ClearHiddenTests()._remove_hidden_test_region(released)
                self._as_released = _lines(released.source) == _lines(cell.source)
        return super().preprocess_cell(cell, resources, cell_index)

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        for cell in nb.cells:       # tags the executor obeys are the instructor's to set, not the submission's
            tags = cell.get("metadata", {}).get("tags")
            if isinstance(tags, list) and set(tags) & EXECUTOR_TAGS:
                cell.metadata["tags"] = [t for t in tags if t not in EXECUTOR_TAGS]
                self.log.warning("cell %s: executor tags removed", cell.metadata.get("nbgrader", {}).get("grade_id"))
        return restore_missing_read_only(nb, resources, self.log), resources

    def report_change(self, name, attr, old, new):
        if attr == "checksum" and getattr(self, "_as_released", False):
            self.log.debug("test cell %s as released (without its hidden tests): restored in full", name)
            return
        super().report_change(name, attr, old, new)


#: Output types a graded notebook keeps: plain text and raster images, which no browser runs as code.
SAFE_OUTPUT_TYPES = {"text/plain", "image/png", "image/jpeg"}


class NeutraliseLearnerMarkup(NbGraderPreprocessor):
    """Nothing a submission wrote is rendered as active HTML where an instructor is logged in: Formgrader shows
    the autograded notebook through nbconvert without sanitising it, so an ``<img onerror=...>`` in a learner's
    Markdown cell ran with the instructor's session and set its own marks (round 11).  Every Markdown or raw cell
    that is not the instructor's own (a read-only cell of the gradebook, with its source as there) is shown as
    its text in a fenced block, attachments dropped; every output keeps only plain text and raster images; and the
    files submitted beside the notebook that a browser would run as a page are renamed to ``.txt`` (``inert_files``)."""

    def preprocess(self, nb, resources):
        source = source_notebook(resources)
        instructors = {name: text for name, kind, locked, text in source.cells
                       if kind != "code" and locked and name not in source.answers}
        folder = resources.get("metadata", {}).get("path")
        inert = inert_files(Path(folder)) if folder else []
        if inert:
            self.log.info("submitted files a browser would run, kept as text: %s", inert)
        changed = []
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                cell.outputs = [safe_output(o) for o in cell.get("outputs", [])]
                continue
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "markdown" and gid in instructors and cell.source == instructors[gid]:
                continue
            text = cell.source
            nb.cells[i] = markdown = NotebookNode(cell_type="markdown", source=as_text_block(text),
                                                  metadata=cell.metadata if cell.cell_type == "markdown" else
                                                  NotebookNode())
            if "id" in cell:
                markdown.id = cell.id
            if text.strip():
                changed.append(i + 1)
        if changed:
            self.log.info("learner's Markdown or raw cells %s shown as text", changed)
        return nb, resources


#: Submitted files a browser runs as a page (round 15: Formgrader serves a submission's files from the instructor's
#: own origin, so a learner's ``my_plot.html`` opened there set its own marks).  They are renamed ``<name>.txt``.
ACTIVE_SUFFIXES = {".html", ".htm", ".xhtml", ".shtml", ".svg", ".svgz", ".xml", ".xsl", ".js", ".mjs"}


def inert_files(folder: Path) -> list[str]:
    """Rename every regular file under ``folder`` (links not followed) whose suffix a browser runs to ``<name>.txt``,
    which Formgrader and the feedback then serve as plain text; the renamed files, relative to ``folder``."""
    renamed = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            path = Path(root) / name
            if path.suffix.lower() in ACTIVE_SUFFIXES and path.is_file() and not path.is_symlink():
                target = path.with_name(name + ".txt")
                try:
                    os.replace(path, target)
                except OSError:
                    path.unlink(missing_ok=True)        # a file that cannot be made inert is not kept
                renamed.append(str(path.relative_to(folder)))
    return renamed


def as_text_block(text: str) -> str:
    """``text`` as a fenced Markdown block that renders it verbatim (a fence longer than any run of backticks
    or tildes in it)."""
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}" if text.strip() else ""


def safe_output(output):
    """``output`` with only ``SAFE_OUTPUT_TYPES`` in its data; streams and errors as they are."""
    if output.get("output_type") not in ("display_data", "execute_result"):
        return output
    data = output.get("data", {})
    dropped = sorted(k for k in data if k not in SAFE_OUTPUT_TYPES)
    for k in dropped:
        del data[k]
    if dropped and "text/plain" not in data:
        data["text/plain"] = f"[output of type {', '.join(dropped)} not shown in the graded notebook]"
    output.pop("metadata", None)
    output["metadata"] = NotebookNode()
    return output


def is_trusted_text(source: str, trusted: str) -> bool:
    """``source`` is the trusted cell's text, or that text after comment lines only: nbgrader puts a test cell the
    submission lacked back behind "# This cell ... was missing" (round 15: deleting exercise 7's memory test cell
    switched the grader's own measurement off)."""
    if source == trusted:
        return True
    if not source.endswith(trusted):
        return False
    head = source[:len(source) - len(trusted)]
    return all(not line.strip() or line.lstrip().startswith("#") for line in head.splitlines())


def restore_missing_read_only(nb, resources, log=None):
    """Every read-only code cell of the instructor's notebook that the submission lacks (the setup cell above
    all), put back where the instructor's order puts it: after the cells that come before it there.  nbgrader
    adds back only test and task cells; without this, deleting the setup cell left the names it binds (``torch``,
    ``check``) to the learner's own code, which the test cells then called (round 11)."""
    source = source_notebook(resources)
    answers, graded, order = source.answers, source.graded, source.cells
    present = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
    for k, (name, kind, locked, text) in enumerate(order):
        if name in present or kind != "code" or not locked or name in answers or name in graded:
            continue
        earlier = {n for n, *_ in order[:k]}
        at = max((i + 1 for i, c in enumerate(nb.cells)
                  if c.metadata.get("nbgrader", {}).get("grade_id") in earlier), default=0)
        cell = NotebookNode(cell_type="code", execution_count=None, outputs=[], source=text,
                            metadata=NotebookNode(deletable=False, editable=False, nbgrader=NotebookNode(
                                grade=False, grade_id=name, locked=True, schema_version=3, solution=False,
                                task=False)))
        if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
            cell.id = f"restored-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
        nb.cells.insert(at, cell)
        present.add(name)
        if log is not None:
            log.warning("read-only cell %s was missing from the submission: restored at position %d", name, at + 1)
    return nb


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines() if line.strip()]


class StripForgedMetadata(NbGraderPreprocessor):
    """Cells whose nbgrader metadata the gradebook does not know (an id it has never seen, or read-only,
    test or answer flags without an id) are the learner's own cells, whatever they claim: their metadata
    is removed before nbgrader acts on it, and the submission is flagged."""

    report_directory = Unicode("", help="Where the grading reports go.").tag(config=True)

    def preprocess(self, nb, resources):
        trusted, answers = trusted_cells(resources)
        known = set(trusted) | answers | markdown_cells(resources)
        forged = []
        for i, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader")
            if meta is None:
                continue
            gid = meta.get("grade_id")
            claims = meta.get("locked") or meta.get("grade") or meta.get("solution") or meta.get("task")
            if (gid is not None and gid not in known) or (gid is None and claims):
                forged.append(f"cell {i + 1} carries nbgrader metadata ({gid or 'no id'}) that is not in the "
                              f"gradebook; it was graded as the learner's own code")
                del cell.metadata["nbgrader"]
        record(self.report_directory, resources, forged=forged)
        return nb, resources


@dataclass(frozen=True)
class SourceNotebook:
    """The instructor's notebook being graded, as the gradebook holds it (never the submission): everything the
    course's preprocessors read of it, read at once (``source_notebook``)."""

    cells: tuple[tuple[str, str, bool, str], ...]   # (grade id, cell type, locked, source), in the instructor's order
    answers: frozenset[str]         # the answer cells
    graded: frozenset[str]          # the cells that score points
    tasks: frozenset[str]
    notebooks: tuple[str, ...]      # every notebook of the assignment

    @cached_property
    def trusted(self) -> dict[str, tuple[str, bool]]:
        """``{grade_id: (source, is_test)}`` of the read-only and test code cells: computed once, shared by every
        caller (none changes it)."""
        return {name: (text, name in self.graded) for name, kind, locked, text in self.cells
                if kind == "code" and name not in self.answers and (locked or name in self.graded)}


def source_notebook(resources) -> SourceNotebook:
    """The instructor's notebook that ``resources`` (a stage's, nbgrader's) grades, read from the gradebook by the
    stage's first preprocessor that needs it and kept in ``resources`` for the others: one gradebook open per
    stage, however many of them ask."""
    if SOURCE not in resources:
        from nbgrader.api import Gradebook

        nbg = resources["nbgrader"]
        with Gradebook(nbg["db_url"]) as gb:
            source = gb.find_notebook(nbg["notebook"], nbg["assignment"])
            resources[SOURCE] = SourceNotebook(
                cells=tuple((c.name, c.cell_type, c.locked, c.source) for c in source.source_cells),
                answers=frozenset(c.name for c in source.solution_cells),
                graded=frozenset(c.name for c in source.grade_cells),
                tasks=frozenset(c.name for c in source.task_cells),
                notebooks=tuple(n.name for n in source.assignment.notebooks))
    return resources[SOURCE]


def markdown_cells(resources) -> set[str]:
    """The instructor's Markdown and raw cells and task cells (``grade_id``s), from the gradebook."""
    source = source_notebook(resources)
    return {name for name, kind, *_ in source.cells if kind != "code"} | source.tasks


def trusted_sources(resources) -> tuple[dict[str, tuple[str, bool]], frozenset[str]]:
    """From the gradebook (the instructor's source, never the submission): ``({grade_id: (source, is_test)} of
    the read-only and test code cells, {grade_ids of the answer cells})``."""
    source = source_notebook(resources)
    return source.trusted, source.answers


def forbidden_groups(resources) -> list[str]:
    """The shortcut groups the notebook's tests forbid: ``SHORTCUTS = (...)`` in the instructor's read-only cells,
    as the gradebook holds them (every exercise's setup cell); none for a notebook without one or no gradebook."""
    import ast

    from tfmgrader.scan import to_python
    try:
        trusted, _ = trusted_sources(resources)
    except Exception:  # noqa: BLE001 - no gradebook entry: the tests' own refusals still apply when they run
        return []
    for source, is_test in trusted.values():
        try:
            tree = ast.parse(to_python(source))
        except Exception:  # noqa: BLE001 - the instructor's cell does not parse: it names no groups
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SHORTCUTS"
                                                    for t in node.targets) and not is_test:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    continue
                return [g for g in (value if isinstance(value, (tuple, list)) else ()) if isinstance(g, str)]
    return []


def answer_sources(resources) -> dict[str, str]:
    """From the gradebook: ``{grade_id: source}`` of the answer cells as the instructor released them (the
    functions' definitions, their bodies left to the learner)."""
    source = source_notebook(resources)
    return {name: text for name, _, _, text in source.cells if name in source.answers}


def trusted_cells(resources) -> tuple[dict[str, bool], frozenset[str]]:
    """``trusted_sources`` without the sources: ``({grade_id: is_test}, {answer grade_ids})``."""
    trusted, answers = trusted_sources(resources)
    return {name: is_test for name, (_, is_test) in trusted.items()}, answers


def assignment_notebooks(resources) -> tuple[str, ...]:
    """The notebooks of the assignment being graded, as the gradebook knows them (none without a gradebook)."""
    nbg = resources.get("nbgrader", {})
    return source_notebook(resources).notebooks if nbg.get("db_url") and nbg.get("assignment") else ()


def _defined_functions(src: str) -> set[str]:
    """The functions and classes a cell defines at its top level, read as the kernel reads the cell."""
    import ast

    from tfmgrader.scan import to_python
    try:
        return {n.name for n in ast.parse(to_python(src)).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    except Exception:  # noqa: BLE001 - a cell that cannot be read defines nothing
        return set()


def isolated_test(source: str, grade_id: str) -> str:
    """A test cell's ``source`` as the graded kernel runs it: through ``tfmcheck.checking.run_test``, in a
    namespace of the test cells' own that the learner's functions cannot see (the replay, ``verify.replay``,
    runs it the same way)."""
    return (f"__import__('tfmcheck.checking').checking.run_test({source!r}, globals(), "
            f"filename={'<' + grade_id + '>'!r})\n")


def machine_idle() -> float:
    """Idle CPU seconds since boot of the cores this process, and so its kernels, may run on, summed (0 where
    unknown)."""
    try:
        import psutil

        per_core = psutil.cpu_times(percpu=True)
        return sum(per_core[i].idle for i in os.sched_getaffinity(0) if i < len(per_core))
    except Exception:  # noqa: BLE001 - no reading: no idle time counted, so a slow kernel is not stopped early
        return 0.0


class SandboxedExecute(Execute):
    """nbgrader's Execute in the sandbox kernel, made robust to kernels that die, hang or flood their output."""

    report_directory = Unicode("", help="Where the grading reports go.").tag(config=True)
    max_output_chars = Integer(20_000, help="Characters of output kept per cell while it arrives.").tag(config=True)
    sandbox = Bool(True, help="Run learners' code in the bubblewrap sandbox. Turning it off needs "
                              "TFMLIB_GRADING_UNSAFE=1 as well.").tag(config=True)
    fork_server = Bool(True, help="Fork each kernel from a warm server in the sandbox that has imported PyTorch "
                                  "(forkserver.py); False: start a sandbox per kernel.").tag(config=True)
    watch_also = List(Unicode(), help="More folders whose files the kernel's audit hook reports when the learner's "
                                      "code opens them (the self-check grades in a copy and adds the real "
                                      "course).").tag(config=True)
    kernel_nproc = Integer(0, help="Each kernel's process limit (RLIMIT_NPROC) when it is not GRADER_NPROC: "
                                   "scripts/grade.py multiplies it by --jobs when kernels graded at once share one "
                                   "uid (a normal user).").tag(config=True)
    patience = Float(3.0, help="A cell runs for ``timeout`` s, and on until its kernel has had ``timeout`` s "
                               "of CPU or could have had them from idle cores: a kernel the machine's load "
                               "slows runs on, for at most this many times ``timeout``.  Stopped there, the "
                               "machine was overloaded (reported as such: the batch grades it again)."
                     ).tag(config=True)

    def _sandboxed(self) -> bool:
        unsafe = os.environ.get(UNSAFE_ENV) == "1"
        if not self.sandbox and not unsafe:
            raise RuntimeError("SandboxedExecute.sandbox = False also needs TFMLIB_GRADING_UNSAFE=1 in the "
                               "environment: grading without the sandbox is never chosen by accident")
        if unsafe:
            self.log.warning("TFMLIB_GRADING_UNSAFE=1: learners' code runs WITHOUT the grading sandbox")
            return False
        if shutil.which("bwrap") is None:
            raise RuntimeError(NO_BWRAP)
        return True

    def preprocess(self, nb, resources=None, km=None):
        self._stopped, self._execution = None, Execution.OK
        self._sizes = {}
        sandboxed = self._sandboxed()
        workdir = Path((resources or {}).get("metadata", {}).get("path") or ".").resolve()
        # The audit hook of the kernel reports files opened in the course outside the learner's own folder.
        from nbgrader.coursedir import CourseDirectory
        watch = {str(Path(CourseDirectory(config=self.config).root).resolve())}
        watch |= {str(workdir.parents[2])} if len(workdir.parents) > 2 else set()
        watch |= {str(Path(w).resolve()) for w in self.watch_also}
        self._end_leftovers(workdir)
        # One view of the course packages for every process of the kernel (library_view.py): the grader's own.
        env = {WATCH_ENV: os.pathsep.join(sorted(watch)), OWNER_ENV: owner_tag(self._course_root(workdir)),
               VIEW_ENV: exported_view()}
        # The tests' random inputs come from a secret drawn now, for this notebook (checking.input_seed): given to
        # the kernel through its environment and to the replay (VerifyOutside) through the resources.
        env[SECRET_ENV] = secret = secrets.token_hex(16)
        # PyTorch's implementations of what the tests forbid are refused in the kernel before any cell runs
        # (tfmcheck.shortcuts): no answer cell runs, copies or captures them before the first test (#31).
        env[REFUSE_ENV] = ",".join(forbidden_groups(resources or {}))
        record(self.report_directory, resources, inputs_secret=hashlib.sha256(secret.encode()).hexdigest()[:12])
        if self.kernel_nproc:       # read by the kernel's launcher (sandbox_kernel.kernel_limits)
            env["GRADER_NPROC"] = str(self.kernel_nproc)
        self._server = self._fork_server(env[WATCH_ENV], env[OWNER_ENV]) if sandboxed else None
        if self._server is not None:    # a kernel forked from this process's warm server (forkserver.py)
            self._private = self._server.new_folder()
            env[FORKSERVER_ENV] = str(self._server.socket)
        else:
            self._private = Path(tempfile.mkdtemp(prefix="tfmlib-grading-"))
        write_kernelspec(self._private / "jupyter", sandboxed=sandboxed, env=env)
        (self._private / "run").mkdir(mode=0o700)
        # Only the files the assignment released reach the kernel; what else was submitted is reported.
        allowed, withheld, stray = submission_view(self.config, resources or {}, workdir,
                                                   assignment_notebooks(resources or {}))
        write_allowed(self._private, allowed)
        record(self.report_directory, resources, withheld=[flag_message(withheld)] if withheld else [])
        record(self.report_directory, resources, stray_files=stray)
        (workdir / TRACE_NAME).unlink(missing_ok=True)      # only what this run records counts
        self._memory_cells, self._memory_base, outside = self._find_memory_cells(resources), -1, {}
        self._outside_memory = outside
        try:
            nb, resources = super().preprocess(nb, resources, km)
            resources["tfmlib_outside_memory"] = outside
            resources["tfmlib_secret"] = secret
            attempts = audit_reports(self._private / "audit.log")
            # The sandboxed kernel worked in a private copy of workdir ("work", see sandbox_kernel.py); the
            # trace is read from there, as data, whatever the kernel left in its place (link, FIFO, ...).
            kernel_dir = self._private / "work"       # the unsandboxed kernel works in such a copy too
            resources["tfmlib_trace"] = read_regular(kernel_dir / TRACE_NAME, trace_limit())
            if not sandboxed:
                (workdir / TRACE_NAME).unlink(missing_ok=True)
        finally:
            shutil.rmtree(self._private, ignore_errors=True)
        kind = Kernel.FORKED if self._server is not None else Kernel.OWN_SANDBOX if sandboxed else Kernel.UNSANDBOXED
        record(self.report_directory, resources, execution=self._execution, stopped=self._stopped or "",
               kernel=kind, attempts=attempts)
        return nb, resources

    _leftovers_ended = False        # once per process: sandboxes a killed grader of this course left running
    _fork_failed = ""               # why this process's fork server could not start (then: a sandbox per kernel)

    def _fork_server(self, watch: str, owner: str):
        """This process's fork server, or None (turned off, or it cannot start here: said once in the log)."""
        if not (self.fork_server and forkserver_enabled()) or SandboxedExecute._fork_failed:
            return None
        try:
            return ForkServer.shared(watch, owner, self.kernel_nproc)
        except ForkServerError as err:
            SandboxedExecute._fork_failed = str(err)
            self.log.warning("grading with a sandbox started per kernel (slower): %s", err)
            return None

    def _course_root(self, workdir: Path) -> str:
        from nbgrader.coursedir import CourseDirectory
        root = CourseDirectory(config=self.config).root
        if Path(root, "nbgrader_config.py").exists() or len(workdir.parents) <= 2:
            return root
        return str(workdir.parents[2])

    def _end_leftovers(self, workdir: Path) -> None:
        if SandboxedExecute._leftovers_ended:
            return
        SandboxedExecute._leftovers_ended = True
        ended = end_leftovers(self._course_root(workdir))
        if ended:
            self.log.warning("ended %d grading process(es) left running by a grader of this course that had "
                             "stopped: %s", len(ended), "; ".join(ended))

    def create_kernel_manager(self):
        from jupyter_client.kernelspec import KernelSpecManager

        specs = KernelSpecManager(kernel_dirs=[str(self._private / "jupyter" / "kernels")], config=self.config)
        self.kernel_name = KERNEL_NAME
        self.km = self.kernel_manager_class(kernel_name=KERNEL_NAME, kernel_spec_manager=specs,
                                            transport="ipc", ip=str(self._private / "run" / "kernel"),
                                            config=self.config)
        return self.km

    async def async_start_new_kernel_client(self):
        """nbclient's, ready as soon as the kernel has answered and its output channel is connected.  Through
        jupyter_client, a kernel that was ready was then watched for 0.2 s more for output nothing here reads:
        a seventh of a submission's time.  The errors say what jupyter_client's do (``grade.py`` reads them)."""
        self.kc = self.km.client()
        await ensure_async(self.kc.start_channels())
        try:
            await self._wait_for_ready(self.startup_timeout)
        except Exception:
            await self._async_cleanup_kernel()
            raise
        self.kc.allow_stdin = False
        await run_hook(self.on_notebook_start, notebook=self.nb)
        return self.kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    async def _wait_for_ready(self, timeout: float) -> None:
        deadline = monotonic() + timeout
        while True:
            self.kc.kernel_info()
            try:
                reply = await ensure_async(self.kc.shell_channel.get_msg(timeout=1))
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:    # any message on IOPub says it is connected (else the next kernel_info tries again)
                    await ensure_async(self.kc.iopub_channel.get_msg(timeout=0.2))
                    return
                except Empty:
                    pass
            if not await ensure_async(self.km.is_alive()):
                raise RuntimeError("Kernel died before replying to kernel_info")
            if monotonic() > deadline:
                raise RuntimeError("Kernel didn't respond in %d seconds" % timeout)

    async def _async_cleanup_kernel(self):
        """Kill the kernel's launcher and wait for it (the kernel and its sandbox go with it) before nbclient's
        clean-up, which would otherwise poll for its end every 0.1 s."""
        process = getattr(getattr(getattr(self, "km", None), "provisioner", None), "process", None)
        if process is not None and self.shutdown_kernel == "immediate" and process.poll() is None:
            try:
                process.kill()
                process.wait(timeout=10)
            except Exception:  # noqa: BLE001 - nbclient's clean-up below tries again
                pass
        await super()._async_cleanup_kernel()

    _cleanup_kernel = run_sync(_async_cleanup_kernel)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped:
            cell.outputs = [error_output("NotRun", f"not run, because {self._stopped}")]
            return cell, self.resources
        original = cell.source
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid and is_grade(cell) and not is_solution(cell):
            # Names the test for the trace the kernel records (removed again below).
            cell.source = f"__import__('tfmcheck.checking').checking.begin_test({gid!r})\n" + original
            cell.source = isolated_test(cell.source, gid)
        started = self._cell_started = (monotonic(), self._kernel_cpu(), machine_idle())
        self._spent = False
        memory = self._memory_cells.get(gid) if gid else None
        memory = memory[0] if memory is not None and is_trusted_text(original, memory[1]) else None
        sampler = Sampler(self._kernel_pids) if memory == PEAK and self._memory_base >= 0 else None
        if sampler is not None:
            sampler.__enter__()
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            if self._spent:        # stopped by _async_check_alive: the cell used up its time
                self._time_out(cell, resources, "")
                return cell, self.resources
            self._execution = Execution.KERNEL_DIED
            self._stopped = ("the kernel died in an earlier cell (os._exit, a crash, or a memory, CPU or "
                             "process limit of the grading sandbox)")
            cell.outputs.append(error_output("DeadKernelError", "the kernel died while running this cell"))
        except CellTimeoutError as err:
            # A time limit reached on a starved machine says nothing about the answer: the report says so, and
            # scripts/grade.py grades the submission again with longer limits instead of keeping this score.
            wall, cpu = monotonic() - started[0], self._kernel_cpu() - started[1]
            if "IOPub" in str(err):
                starved = f"the cell's output did not reach the grader within {self.iopub_timeout} s"
            elif not self._used_up(started):     # the patience ran out first
                starved = f"the kernel got {cpu:.1f} s of CPU in {wall:.0f} s"
            else:
                starved = ""
            self._time_out(cell, resources, starved)
        finally:
            cell.source, self._cell_started = original, None
            if sampler is not None:
                sampler.__exit__(None, None, None)
                if sampler.peak >= 0:
                    self._outside_memory[gid] = max(0, sampler.peak - self._memory_base)
            elif memory == BASE:
                self._memory_base = resident(self._kernel_pids())
        return cell, self.resources

    def _time_out(self, cell, resources, starved: str) -> None:
        """The cell used up its time (``starved``: why the machine's load, not the cell, may be the cause)."""
        self._execution = Execution.TIMED_OUT
        self._stopped = f"a cell ran longer than {self.timeout} s and the kernel was stopped"
        if starved:
            self._stopped += f" (the grading machine was overloaded: {starved})"
            record(self.report_directory, resources, starved=starved)
        cell.outputs.append(error_output("CellTimeoutError", f"this cell ran longer than {self.timeout} s"))

    def _get_timeout(self, cell):
        """nbclient's wall-time limit of a cell: ``patience`` times ``timeout``; ``_async_check_alive`` stops
        the cell earlier when it has used up its time."""
        timeout = super()._get_timeout(cell)
        return None if timeout is None else timeout * self.patience

    def _used_up(self, started: tuple[float, float, float]) -> bool:
        """Whether the cell started at ``started`` (wall, kernel CPU, machine's idle CPU) has used up its time:
        ``timeout`` s of wall time, and ``timeout`` s of its kernel's CPU or, short of them, at least as many
        idle core-seconds on the machine (then the kernel was waiting, not starved: ``time.sleep``)."""
        if monotonic() - started[0] < self.timeout:
            return False
        missing = self.timeout - (self._kernel_cpu() - started[1])
        return missing <= 0 or machine_idle() - started[2] >= missing

    async def _async_check_alive(self) -> None:
        """nbclient's check, every second while a cell runs, that its kernel is alive; also stops the cell
        (DeadKernelError, with ``_spent`` set) once it has used up its time (``_used_up``).  The limit is the
        kernel's computing time, not the machine's load: an endless loop is stopped after as much CPU time on
        a busy machine as on an idle one, and a slow correct cell is not stopped early because other processes
        shared its core (in CI, a correct answer was once stopped so on a loaded machine)."""
        await super()._async_check_alive()
        started = getattr(self, "_cell_started", None)
        if started is not None and self.timeout and self.timeout > 0 and self._used_up(started):
            self._spent = True
            raise DeadKernelError("the cell used up its time")

    def _find_memory_cells(self, resources) -> dict[str, tuple[str, str]]:
        """``{grade_id: (BASE or PEAK, trusted source)}`` (``outside_memory.memory_cells``); none without a
        gradebook (a notebook run outside nbgrader's autograde)."""
        if not (resources or {}).get("nbgrader", {}).get("db_url"):
            return {}
        trusted, _ = trusted_sources(resources)
        return {gid: (kind, trusted[gid][0]) for gid, kind in memory_cells(trusted).items()}

    def _kernel_pids(self) -> list[int]:
        """The kernel's processes: the forked kernel (and what it started), or the sandbox started for it."""
        try:
            if getattr(self, "_server", None) is not None:
                return [p.pid for p in self._server.kernels()]
            import psutil

            root = psutil.Process(self.km.provisioner.process.pid)
            return [root.pid, *(p.pid for p in root.children(recursive=True))]
        except Exception:  # noqa: BLE001 - no kernel (yet, any more): nothing to read
            return []

    def _kernel_cpu(self) -> float:
        """CPU seconds used so far by the kernel's processes (the sandbox and everything in it)."""
        if getattr(self, "_server", None) is not None:
            return self._server.kernel_cpu()
        try:
            import psutil

            root = psutil.Process(self.km.provisioner.process.pid)
            return sum(sum(p.cpu_times()[:4]) for p in [root, *root.children(recursive=True)])
        except Exception:  # noqa: BLE001 - unknown (no kernel yet, process gone): counts as no CPU used
            return 0.0

    def output(self, outs, msg, display_id, cell_index):
        """Drop output past ``max_output_chars`` per cell as it arrives (a flood never fills memory)."""
        size = len(json.dumps(msg.get("content", {}), default=str))
        seen = self._sizes.get(cell_index, 0)
        self._sizes[cell_index] = seen + size
        if seen + size > self.max_output_chars:
            if seen <= self.max_output_chars:
                outs.append(NotebookNode(output_type="stream", name="stdout",
                                         text=f"\n... output truncated at {self.max_output_chars} characters ...\n"))
            return None
        return super().output(outs, msg, display_id, cell_index)


class CapOutput(NbGraderPreprocessor):
    """Truncate each text output to ``max_chars`` (a single 50 MB line included)."""

    max_chars = Integer(20_000, help="Characters kept per text output.").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if "text" in out and len(out.text) > self.max_chars:
                    out.text = out.text[: self.max_chars] + "\n... output truncated ...\n"
                for mime, value in list(out.get("data", {}).items()):
                    if isinstance(value, str) and len(value) > self.max_chars:
                        out.data[mime] = value[: self.max_chars] + "\n... output truncated ...\n"
        return cell, resources


class StderrToStdout(NbGraderPreprocessor):
    """nbgrader scores a test cell zero when it wrote to stderr; a warning is not a failed test.
    Stderr text stays visible, marked, on stdout; failures are exceptions (error outputs)."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream" and out.get("name") == "stderr":
                    out.name = "stdout"
                    out.text = "".join(f"[stderr] {line}" for line in out.text.splitlines(True))
        return cell, resources




def audit_reports(log: Path, limit: int = 20) -> list[str]:
    """What the kernel's audit hook reported (files of the course, processes, sockets, databases)."""
    data, problem = read_regular(log, 4_000_000)
    seen: list[str] = [f"the audit log was tampered with: {problem}"] if problem else []
    for raw in data.decode(errors="replace").splitlines():
        if raw.startswith(AUDIT_MARK):
            what = "the answer's code tried to " + raw[len(AUDIT_MARK):].strip()[:300].replace("opened", "open", 1)
            if what not in seen:
                seen.append(what)
    return seen[:limit] + ([f"... and {len(seen) - limit} more"] if len(seen) > limit else [])


class VerifyOutside(NbGraderPreprocessor):
    """Reach every test cell's verdict in this process, from the results the kernel recorded; the cell's output
    becomes what the replay printed and, when it failed, its error (with the named mistake)."""

    report_directory = Unicode("", help="Where the grading reports go.").tag(config=True)

    def preprocess(self, nb, resources):
        from tfmcheck import trace
        from tfmgrader.verify import replay

        trusted, _ = trusted_sources(resources)
        order = [c.metadata.nbgrader["grade_id"] for c in nb.cells
                 if c.cell_type == "code" and "nbgrader" in c.metadata
                 and c.metadata.nbgrader.get("grade_id") in trusted]
        missing = [name for name in trusted if name not in order and not trusted[name][1]]
        cells = [(name, *trusted[name]) for name in missing + order]
        workdir = Path(resources.get("metadata", {}).get("path") or ".")
        data, problem = resources.pop("tfmlib_trace", None) or read_regular(workdir / TRACE_NAME, trace_limit())
        records, problems = trace.loads(data)
        problems = ([f"the grading trace was tampered with: {problem}"] if problem else []) + problems
        (workdir / TRACE_NAME).unlink(missing_ok=True)
        secret = resources.pop("tfmlib_secret", None)
        if not secret:      # the kernel had none either (its tests failed): the replay fails every call with it
            problems.append("the notebook was run without a grading secret for its tests' inputs")
            secret = secrets.token_hex(16)
        verdicts = replay(cells, records, problems, resources.pop("tfmlib_outside_memory", None), secret=secret)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code" or gid not in verdicts.passed:
                continue
            if any(o.get("output_type") == "error" and o.get("ename") in KERNEL_STOPPED
                   for o in cell.get("outputs", [])):
                continue        # the kernel never finished this cell: it scores zero as it is
            # The kernel only recorded (tfmcheck.withheld): what the test printed and whether it failed are the
            # replay's.
            cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=verdicts.printed[gid])] \
                if verdicts.printed.get(gid) else []
            if not verdicts.passed[gid]:
                cell.outputs.append(error_output(*verdicts.errors[gid]))
        record(self.report_directory, resources, verification=verdicts.problems)
        return nb, resources
