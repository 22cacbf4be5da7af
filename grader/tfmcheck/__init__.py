"""tfmcheck: the checks the graded exercises' test cells run, in the learner's kernel and again in the grader.

- ``tfmcheck.checking`` (imported as ``check`` by every exercise's read-only setup cell): trusted comparisons,
  the shortcut guard, the memory measure, and the hooks the grader's replay uses (``begin_test``, ``replay``).
- ``tfmcheck.trace``: the data-only record of the learner's results, replayed outside the learner's process.
- ``tfmcheck.feedback``: the catalogue of named mistakes and the diagnosis that names one in a failure.

It imports torch, the standard library and the teaching library ``tfmlib``; never the grader (``tfmgrader``).
"""

# Where a graded kernel records the learner's results (``trace``): shared with the grader, which sets the variable
# and reads the file back.  Defined here, not in ``trace``, so that the grader's kernel launcher can read them
# without importing PyTorch.
TRACE_ENV = "TFMLIB_GRADING_TRACE"
TRACE_NAME = ".tfmlib-grading-trace.jsonl"
# The secret the grader draws for each notebook it grades, from which the tests' random inputs are derived
# (``checking.input_seed``); the kernel reads it at import and removes it from its environment.
SECRET_ENV = "TFMLIB_GRADING_SECRET"
# The shortcut groups the notebook's tests forbid (its setup cell's ``SHORTCUTS``, read by the grader from the
# gradebook), comma-separated: the graded kernel's launcher refuses them before any cell runs (``shortcuts.refuse``).
REFUSE_ENV = "TFMLIB_GRADING_REFUSE"
