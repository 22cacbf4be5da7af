"""One verdict everywhere (issue 35): every test cell passes or fails alike for the learner's visible tests, Validate,
`make check` and grading, for every correct answer (the solutions and every style of grader/fixtures/styles) and every
named mistake of the catalogue (tests/tfmcheck/test_feedback.py's WRONG).  A mistake that passes the visible tests and
Validate ("Success!") but loses points in `make check` or grading is a broken promise; so is a correct style that a
hidden test fails.

Each submission runs three times in this process (exec of the cells in order, as tests/tfmcheck/test_feedback.py does):
- the learner's notebook, hidden tests stripped: the visible tests in the Lab and nbgrader's Validate, which runs
  exactly those cells in a fresh kernel and fails a cell that raises;
- every cell with its hidden tests, no reseeding: `make check` (scripts/check.py runs the instructor's cells on the
  learner's answers in a fresh kernel);
- the same cells the way the hardened grader runs them: each test cell reseeded (``check.begin_test``) while the
  learner's results are recorded (``check.recording``), then the trusted cells replayed on that trace by
  ``tfmgrader.verify.replay``; a test passes when it passed in the kernel and in the replay.
The diagnosis that names a mistake is switched off here: it only rewrites the message of a failure already
decided (grader/tfmcheck/feedback), so it cannot change a verdict and only costs time.  `make check` has a run of
its own: the graded kernel only records the calls of the withheld tests (tfmcheck.withheld), so its run cannot stand
for one that decides in the kernel.  A named mistake runs only the test cells that can reach the function it gets
wrong (``touching``).  One torch thread, as in the grading kernel.
"""
from __future__ import annotations

import os
import re

import pytest

from fixtures.answers import STYLES
from test_exercises import _nbg, _read, _source, make_submission
from test_feedback import ASSIGNMENT, WRONG, reaching

from tfmcheck import checking as check
from tfmcheck import feedback, trace
from tfmgrader.verify import replay

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)


def with_style(assignment, answers):
    nb = _read(_source(assignment))
    for cell in nb.cells:
        gid = _nbg(cell).get("grade_id")
        if _nbg(cell).get("solution") and gid in answers:
            cell.source = answers[gid]
    return nb


def cells_of(nb, hidden=True):
    """[(grade_id, source, kind)] of the code cells; kind: "test", "answer" or "locked"."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = _nbg(cell)
        kind = "test" if meta.get("grade") else "answer" if meta.get("solution") else "locked"
        out.append((meta.get("grade_id", cell.get("id")), cell.source if hidden else HIDDEN.sub("", cell.source), kind))
    return out


def _global_rng():
    import random

    import numpy
    import torch
    return torch.random.get_rng_state(), random.getstate(), numpy.random.get_state()[1].tobytes()


def _same_rng(a, b):
    return bool((a[0] == b[0]).all()) and a[1:] == b[1:]


def run(cells, reseed=False):
    """{test grade_id: passed} of ``cells`` run in order in a fresh namespace (a fresh kernel).  With ``reseed``
    (the grader's kernel), also whether a test cell drew from a global random generator: when none did, the
    reseeding changed nothing and a run without it (`make check`) would have reached the same verdicts."""
    feedback.reset_history()
    ns, passed, drew = {"__name__": "__main__"}, {}, False
    tests = check.TestNamespace()       # the grader's kernel runs each test cell in the tests' own namespace
    for gid, source, kind in cells:
        if kind == "test" and reseed:
            check.begin_test(gid)
            seeded = _global_rng()
        try:
            if kind == "test" and reseed:
                check.run_test(source, ns, tests, f"<cell {gid}>")
            else:
                exec(compile(source, f"<cell {gid}>", "exec"), ns)
        except Exception:  # noqa: BLE001 - a failing cell
            if kind == "test":
                passed[gid] = False
        else:
            if kind == "test":
                passed[gid] = True
        if kind == "test" and reseed:
            drew = drew or not _same_rng(seeded, _global_rng())
    return (passed, drew) if reseed else passed


def graded(cells, tmp_path):
    """{test grade_id: passed} as the hardened grader decides: the kernel's run recorded, the trusted cells replayed."""
    path = tmp_path / "trace.jsonl"
    path.unlink(missing_ok=True)
    with check.recording(path) as recorder:
        in_kernel, drew = run(cells, reseed=True)
    os.close(recorder.fd)
    records, problems = trace.loads(path.read_bytes())
    verdicts = replay([(gid, src, kind == "test") for gid, src, kind in cells if kind != "answer"], records, problems)
    assert not verdicts.problems, verdicts.problems
    return {gid: ok and verdicts.passed.get(gid, False) for gid, ok in in_kernel.items()}, in_kernel, drew


def touching(cells, function):
    """``cells`` without the test cells that can only reach the solution's own code when ``function`` is the one
    mistake: those that name neither ``function`` nor a function built on it (``reaching``).  Each of them
    runs the solution's answers alone, and so reaches the solution's verdict, checked with the solution itself;
    exercise 7's memory test is the one that costs seconds, three runs for each of its ten mask mistakes."""
    reaches = reaching(function)
    return [(gid, src, kind) for gid, src, kind in cells if kind != "test" or reaches.search(src)]


def verdicts(nb, tmp_path, mistake=None):
    """{where: {test grade_id: passed}}; ``mistake``: the one function the submission gets wrong (``touching``)."""
    keep = (lambda cells: cells) if mistake is None else (lambda cells: touching(cells, mistake))
    everything = keep(cells_of(nb))
    grading, in_kernel, drew = graded(everything, tmp_path)
    return {"visible tests and Validate": run(keep(cells_of(nb, hidden=False))),
            # `make check` runs the same cells without the reseeding, and decides in the kernel: its own run (the
            # graded kernel only records, tfmcheck.withheld)
            "make check": run(everything),
            "grading": grading}


# Wrong answers right only on 3-D inputs (issue 35): the visible tests must catch them as the hidden ones do.
THREE_D_ONLY = {"softmax over dim=2": ("sub", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=2)"),
                "k.transpose(1, 2)": ("sub", "k.transpose(-2, -1)", "k.transpose(1, 2)")}


def submissions(assignment):
    yield "solution", make_submission(assignment, [])
    for style, answers in STYLES.get(assignment, {}).items():
        yield f"style {style}", with_style(assignment, answers)
    for (function, name), edits in WRONG.items():
        if ASSIGNMENT[function] == assignment:
            yield f"mistake {function}/{name}", make_submission(assignment, edits)
    if assignment == "03_self_attention":
        for name, edit in THREE_D_ONLY.items():
            yield f"mistake {name}", make_submission(assignment, [edit])


@pytest.fixture(autouse=True)
def one_thread(one_torch_thread):
    """One torch thread, as in the grading kernel (conftest.one_torch_thread)."""


@pytest.mark.parametrize("assignment", sorted(set(ASSIGNMENT.values())))
def test_one_verdict_per_test_everywhere(assignment, tmp_path, monkeypatch):
    monkeypatch.setattr(feedback, "diagnose", lambda *args, **kwargs: None)
    disagreements, correct = [], 0
    for label, nb in submissions(assignment):
        mistake = label.removeprefix("mistake ").split("/")[0] if label.startswith("mistake ") else None
        seen = verdicts(nb, tmp_path, mistake if mistake in ASSIGNMENT else None)
        reference = seen["grading"]
        for where, passed in seen.items():
            if passed != reference:
                diff = {gid: (passed.get(gid), reference.get(gid)) for gid in reference if passed.get(gid) != reference.get(gid)}
                disagreements.append(f"{label}: {where} vs grading (passed?): {diff}")
        if not label.startswith("mistake"):
            correct += 1
            failed = sorted(gid for gid, ok in reference.items() if not ok)
            assert not failed, f"{assignment} {label} is correct and fails {failed}"
        else:
            assert not all(reference.values()), f"{assignment} {label} passes every test"
    assert correct >= 2, "the solution and at least one other style"
    assert not disagreements, "\n".join(disagreements)
