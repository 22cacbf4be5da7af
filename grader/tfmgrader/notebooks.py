"""The solution as a learner would submit it: the release notebook with every answer cell filled in from the
source notebook (the self-check of ``selfcheck.py`` grades it; the tests' class generator, grader/fixtures/, starts
from it)."""
from __future__ import annotations

import copy
import re

SOLUTION_RE = re.compile(r"[ \t]*### BEGIN SOLUTION\n(.*?)[ \t]*### END SOLUTION\n?", re.S)


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def answered(release, source):
    """The release notebook with every answer cell filled in from the source (markers removed)."""
    answers = {grade_id(c): c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")}
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        gid = grade_id(cell)
        if cell.metadata.get("nbgrader", {}).get("solution") and gid in answers:
            cell.source = SOLUTION_RE.sub(lambda m: m.group(1), answers[gid])
    return nb
