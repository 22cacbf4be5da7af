"""tfmgrader: the course's hardened grader (book/appendix/grading.md).

scan → sandbox (kernel spec, fork server) → preprocessors (nbgrader) → verify (replay outside the learner's
process) → report → batch (sharded, resumable class grading; ``scripts/grade.py`` is its command line).
It imports tfmcheck and tfmlib; neither imports it.
"""
