"""nbgrader preprocessors of the hardened grading set-up (selected by ``grading_config.py``).

- ``ScanSubmission`` (sanitising stage): runs ``scan.scan_cells`` on the learner's cells and
  withholds flagged cells from execution, recording why.
- ``SandboxedExecute`` (autograding stage): nbgrader's ``Execute`` that survives a dead or stuck
  kernel: the cell that killed or hung the kernel and every later cell get an error output (so they
  score zero and the earlier ones keep their points), and output is capped while it arrives.
- ``CapOutput``: truncates what each cell printed to a fixed number of characters.
- ``StderrToStdout``: keeps stderr text (warnings, logging) visible without failing a test cell.

Each writes what it saw to ``GradingReport.directory/<assignment>/<student>.json`` (outside the
learner's reach); the batch command ``scripts/grade.py`` turns those into the per-submission report.
"""
from __future__ import annotations

import json
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_locked, is_solution
from traitlets import Integer, List, Unicode

from scan import scan_cells


def _ids(resources) -> tuple[str, str, str]:
    nbg = resources.get("nbgrader", {})
    return nbg.get("assignment", "?"), nbg.get("student", "?"), nbg.get("notebook", "?")


def record(directory: str, resources, key: str, value) -> None:
    """Merge ``{notebook: {key: value}}`` into the report file of this student and assignment."""
    if not directory:
        return
    assignment, student, notebook = _ids(resources)
    path = Path(directory) / assignment / f"{student}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    report = json.loads(path.read_text()) if path.exists() else {}
    report.setdefault(notebook, {})[key] = value
    path.write_text(json.dumps(report, indent=1))


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class ScanSubmission(NbGraderPreprocessor):
    """Flag answers that use forbidden shortcuts or rebind library functions; withhold those cells."""

    report_directory = Unicode("", help="Where the grading reports go (outside the learners' reach).").tag(config=True)
    graded_functions = List(Unicode(), help="Names the learners must define (never flagged as rebinding).").tag(config=True)

    def preprocess(self, nb, resources):
        learner, setup, tests, graded = {}, [], [], set(self.graded_functions)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if is_solution(cell) or not (is_locked(cell) or is_grade(cell)):
                learner[i] = cell.source
                graded |= _defined_functions(cell.source) if is_solution(cell) else set()
            else:
                (tests if is_grade(cell) else setup).append(cell.source)
        flags = scan_cells(learner, setup, tests, graded)
        for i in sorted({f.cell for f in flags}):
            reasons = "; ".join(f.reason for f in flags if f.cell == i)
            nb.cells[i].source = (
                "raise RuntimeError(" + repr(
                    "This answer was withheld from grading and will be reviewed by an instructor: " + reasons)
                + ")")
        record(self.report_directory, resources, "flags", [str(f) for f in flags])
        return nb, resources


def _defined_functions(src: str) -> set[str]:
    import ast
    try:
        return {n.name for n in ast.parse(src).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    except SyntaxError:
        return set()


class SandboxedExecute(Execute):
    """nbgrader's Execute, made robust to kernels that die, hang or flood their output."""

    report_directory = Unicode("", help="Where the grading reports go.").tag(config=True)
    max_output_chars = Integer(20_000, help="Characters of output kept per cell while it arrives.").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._stopped = None
        self._sizes = {}
        nb, resources = super().preprocess(nb, resources, km)
        record(self.report_directory, resources, "execution", self._stopped or "ok")
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped:
            cell.outputs = [error_output("NotRun", f"not run, because {self._stopped}")]
            return cell, self.resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._stopped = ("the kernel died in an earlier cell (os._exit, a crash, or a memory, CPU or "
                             "process limit of the grading sandbox)")
            cell.outputs.append(error_output("DeadKernelError", "the kernel died while running this cell"))
        except CellTimeoutError:
            self._stopped = f"a cell ran longer than {self.timeout} s and the kernel was stopped"
            cell.outputs.append(error_output("CellTimeoutError", f"this cell ran longer than {self.timeout} s"))
        return cell, self.resources

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
