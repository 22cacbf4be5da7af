# nbgrader configuration of the course (nbgrader 0.9.6).  Run nbgrader from the repository root.
# solutions/ is the source directory (instructor versions, with solutions and hidden tests) and
# notebooks/ the release directory (what learners open).  The per-class state (gradebook.db, submitted/,
# autograded/, feedback/) is created here too and is ignored by git.  See book/appendix/instructors.md.
c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "transformers-from-scratch"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# nbgrader's exchange (release_assignment, fetch, submit, collect): a folder inside the course, git-ignored,
# never nbgrader's system-wide default (/usr/local/share/nbgrader/exchange); the class's JupyterHub sets its
# shared one (TFMHUB_EXCHANGE, scripts/hub/).  `--Exchange.root=...` on the command line still wins.
import os  # noqa: E402
from pathlib import Path  # noqa: E402

c.Exchange.root = os.environ.get("TFMHUB_EXCHANGE") or str(Path(__file__).resolve().parent / "exchange")
# Only the notebooks are course files; never copy caches or checkpoints into a release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store"]

# The release shows this where a solution was: the learner sees the signature and docstring above it.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# The learners' Validate (nbgrader's plain Execute, unsandboxed): a cell that loops forever is interrupted after
# `timeout` seconds and Validate goes on with the next cell.  Autograding does not use these: it runs in the
# sandbox with the grader's limits (grader/tfmgrader/limits.json: GRADER_CELL_TIMEOUT, 30 s by default, past
# which the kernel is stopped and the submission is "timed out").
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 120
# Every test cell of a deleted or edited test is restored from solutions/ before grading.
c.OverwriteCells.add_missing_cells = True
# A test cell that writes to stderr scores zero in nbgrader; a Python warning (e.g. a deprecation in a
# library) must not cost a correct answer its points, so stderr chunks that are warnings are dropped.
# Test failures are exceptions (error outputs), which this does not touch.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(?m)^\S.*:\d+: \w*Warning: "
# Keep the feedback readable when a submission prints a lot.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 60

# Autograding (plain `nbgrader autograde` and formgrader's Autograde button) always uses the course's
# hardened pipeline: learners' code is scanned, runs in a bubblewrap sandbox, and every test's verdict is
# reached again outside the learner's process (the tfmgrader package: grader/tfmgrader/hardened.py,
# book/appendix/grading.md).
# Without bubblewrap, autograding stops with a message saying how to install it or opt out explicitly.
# Learners' Validate is not affected.
from tfmgrader.hardened import configure_autograde  # noqa: E402

configure_autograde(c)

# `nbgrader export` writes nbgrader's columns plus the grader's status, reason and copy suspicion of every
# submission (grader/tfmgrader/export.py, from the gradebook's verdict table), to grading/export.csv unless
# `--to` says otherwise.
c.ExportApp.plugin_class = "tfmgrader.export.VerdictExportPlugin"

# The learner's feedback (generate_feedback) shows each test's name, points and failure message, not the test's
# code (hidden tests stay hidden), and its math as MathML, with no script from a CDN (tfmgrader/feedback_html.py).
from tfmgrader.feedback_html import configure_feedback  # noqa: E402

configure_feedback(c)
