"""nbgrader configuration for grading learners' submissions safely (load it after nbgrader_config.py).

    nbgrader autograde ASSIGNMENT --config=scripts/grading/grading_config.py   # plain nbgrader
    python scripts/grade.py ASSIGNMENT                                        # the batch command

It selects the ``tfmlib-sandbox`` kernel (bubblewrap, no network, resource limits: see
``sandbox_kernel.py``), adds the scan of the learner's code before anything runs, makes execution
survive dead and stuck kernels, caps output, keeps warnings from failing tests, and restores deleted
test cells.  Reports go to ``$GRADER_REPORTS`` (default ``<course>/grading/reports``), never inside a
learner's folder.
"""
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput,  # noqa: E402
                                    DeduplicateIds, LimitOutput, OverwriteCells, OverwriteKernelspec,
                                    SaveAutoGrades)

from kernelspec import KERNEL_NAME, write_kernelspec  # noqa: E402
from preprocessors import CapOutput, SandboxedExecute, ScanSubmission, StderrToStdout  # noqa: E402

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

# The sandbox kernel spec lives in a private folder put first on JUPYTER_PATH; its Unix sockets
# live in a fresh private runtime folder (the only grader folder bound into the sandbox).
_private = Path(tempfile.mkdtemp(prefix="tfmlib-grading-"))
write_kernelspec(_private / "jupyter")
os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(_private / "jupyter"), os.environ.get("JUPYTER_PATH")]))
(_private / "run").mkdir(mode=0o700)
c.KernelManager.transport = "ipc"
c.KernelManager.ip = str(_private / "run" / "kernel")

reports = os.environ.get("GRADER_REPORTS", str(Path.cwd() / "grading" / "reports"))

c.Autograde.sanitize_preprocessors = [
    ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, ScanSubmission, CheckCellMetadata]
c.Autograde.autograde_preprocessors = [
    SandboxedExecute, StderrToStdout, CapOutput, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
    AssignLatePenalties, CheckCellMetadata]

c.OverwriteCells.add_missing_cells = True
c.ScanSubmission.report_directory = reports
c.SandboxedExecute.report_directory = reports
c.SandboxedExecute.kernel_name = KERNEL_NAME
c.SandboxedExecute.timeout = int(os.environ.get("GRADER_CELL_TIMEOUT", 30))
c.SandboxedExecute.interrupt_on_timeout = False   # a stuck kernel is stopped, not interrupted
c.SandboxedExecute.startup_timeout = 60
c.SandboxedExecute.iopub_timeout = 10
c.SandboxedExecute.raise_on_iopub_timeout = True
c.SandboxedExecute.max_output_chars = 20_000
c.CapOutput.max_chars = 20_000
c.LimitOutput.max_lines = 200
