"""The learner's loop (issue 35): edit an answer, re-run its cell and the test cells, in ONE kernel.

Every named mistake of the catalogue (tests/tfmcheck/test_feedback.py's WRONG) is made in turn in one namespace, the way a
learner works through an exercise: the answer cell is edited and re-run, the failing test cell is re-run first, then
every test cell that can reach the wrong function; the mistake is fixed (sometimes with a test run, sometimes straight
into the next mistake).  Each test cell's message must be the one the same answer gets in a fresh kernel (Run All, as
Validate and `make check` run it): the diagnosis must depend on the functions as they are now, not on results of
versions that are gone.  The test cells that name neither the wrong function nor one built on it run the solution's
code alone: every one of them runs once in the kernel, on the solution, before the first mistake (the rest would
cost exercise 7's memory test, seconds, at every step).

The notebooks are the learner's (the visible tests: hidden tests stripped) and run in this process, like
tests/tfmcheck/test_feedback.py's run_cells: the feedback module sees the notebook's namespace exactly as in a kernel
(a cell's globals are the notebook's), and a fresh kernel is a fresh namespace with the history reset.
"""
from __future__ import annotations

import re

import pytest

from test_exercises import _nbg, make_submission
from test_feedback import ASSIGNMENT, WRONG, reaching

from tfmcheck import feedback

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)


def learner_cells(nb):
    """[(grade_id, source, is_test)] of the code cells of the learner's version of ``nb`` (no hidden tests)."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            meta = _nbg(cell)
            cells.append((meta.get("grade_id", cell.get("id")), HIDDEN.sub("", cell.source), bool(meta.get("grade"))))
    return cells


def outcome(error):
    """What a learner reads from a test cell, without the numbers (unseeded inputs differ from run to run)."""
    if error is None:
        return "passed"
    headline = re.sub(r"[-+]?\d[\d.,e+-]*", "#", str(error).splitlines()[0] if str(error) else "")
    return (type(error).__name__, getattr(error, "mistake", None), tuple(getattr(error, "fix_first", ()) or ()),
            headline)


def run(ns, cells):
    """Execute ``cells`` in the namespace ``ns``; {grade_id: outcome} of the test cells among them."""
    results = {}
    for gid, source, is_test in cells:
        try:
            exec(compile(source, f"<cell {gid}>", "exec"), ns)
        except Exception as error:
            if not is_test:
                raise
            results[gid] = outcome(error)
        else:
            if is_test:
                results[gid] = outcome(None)
    return results


def reaching_tests(cells, function):
    """The test cells among ``cells``, in order, that name ``function`` or a function built on it
    (test_feedback.reaching)."""
    reaches = reaching(function)
    return [c for c in cells if c[2] and reaches.search(c[1])]


def fresh_kernel(cells):
    """The outcomes of Run All in a new kernel; the one kernel's history is left as it was."""
    with feedback.separate_history():
        return run({"__name__": "__main__"}, cells)


@pytest.fixture(autouse=True)
def one_thread(one_torch_thread):
    """One torch thread, as in the grading kernel (conftest.one_torch_thread)."""


@pytest.mark.parametrize("assignment", sorted(set(ASSIGNMENT.values())))
def test_one_kernel_through_the_catalogue_gives_the_fresh_kernels_messages(assignment):
    solution = learner_cells(make_submission(assignment, []))
    tests = [c for c in solution if c[2]]
    mistakes = [(f, m.name) for f, ms in feedback.CATALOGUE.items() if ASSIGNMENT[f] == assignment for m in ms]
    assert mistakes
    feedback.reset_history()  # the kernel starts
    ns = {"__name__": "__main__"}
    assert set(run(ns, solution).values()) == {"passed"}, "the solution fails a visible test"
    edited: dict[str, str] = {}  # grade_id -> source of the answer cells that differ from the solution
    disagreements, previous = [], None
    for i, (function, name) in enumerate(mistakes):
        wrong = learner_cells(make_submission(assignment, WRONG[(function, name)]))
        changed = {gid: src for (gid, src, _), (_, old, _) in zip(wrong, solution) if src != old}
        assert changed, (function, name)
        # fix the previous mistake (every other time with a test run on the fixed answer; else straight into the
        # next mistake, where that one rewrites the same cell), then make this one
        fix_and_test = i % 2 == 1
        run(ns, [(gid, src, False) for gid, src, _ in solution if gid in edited and (fix_and_test or gid not in changed)])
        if fix_and_test:
            fixed = reaching_tests(tests, previous)
            assert set(run(ns, fixed).values()) == {"passed"}, f"the fixed answer fails, before {name}"
        run(ns, [(gid, src, False) for gid, src, _ in wrong if gid in changed])
        edited, previous = changed, function
        # The test cells that can reach the wrong function: the others run the solution's code alone and pass (the
        # solution's run above, in this kernel); exercise 7's memory test would cost seconds per mistake.
        reached = reaching_tests(tests, function)
        expected = fresh_kernel([c for c in wrong if not c[2] or c in reached])
        # the learner's order: the first failing test cell alone (its message may use only what that cell saw of
        # this version), then every test cell that can fail
        first = [c for c in reached if expected[c[0]] != "passed"][:1]
        assert first, f"{function}/{name} fails no visible test that names {function} or a function built on it"
        got = [run(ns, first), run(ns, reached)]
        for attempt in got:
            for gid, seen in attempt.items():
                if seen != expected[gid]:
                    disagreements.append(f"{function}/{name}, {gid}: one kernel {seen}, fresh kernel {expected[gid]}")
    assert not disagreements, "\n".join(disagreements)


# ---------------------------------------------------------------------------------------------------------
# `make validate NN` / `make check NN` in an 80-column terminal (scripts/check.py)
# ---------------------------------------------------------------------------------------------------------
def test_messages_are_wrapped_at_80_columns_not_cut():
    import check as check_script
    message = ("CheckFailure: weights: self_attention gives a wrong result only because your "
               "scaled_dot_product_attention is wrong on these inputs: fix scaled_dot_product_attention first.\n"
               "  values differ (largest difference at index (1, 1, 0): expected 0.5815960168838501, got 0.78)")
    text = check_script.wrapped(message)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert text.split() == message.split(), "every word is kept, in order"
    assert text.splitlines()[0].startswith(" " * 8 + "CheckFailure: weights: self_attention")


@pytest.mark.slow
def test_validate_in_a_terminal_names_the_mistake_first_in_80_columns(tmp_path):
    """`make validate 03` on the learner's notebook with scores not divided by √d_k: no kernel warning, each failed
    test's title then its message (the named mistake first), every line within 80 columns."""
    import subprocess
    import sys

    import nbformat
    from test_feedback import REPO
    nb = make_submission("03_self_attention", WRONG[("scaled_dot_product_attention", "no_scaling")])
    for cell in nb.cells:
        cell.source = HIDDEN.sub("", cell.source)
    path = tmp_path / "03_self_attention.ipynb"
    nbformat.write(nb, str(path))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "check.py"), "--validate", str(path)],
                          capture_output=True, text=True, timeout=600, cwd=str(REPO))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "WARNING" not in out and "TCP" not in out, out
    assert all(len(line) <= 80 for line in out.splitlines()), [line for line in out.splitlines() if len(line) > 80]
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    first = lines.index(next(line for line in lines if line.startswith("FAIL")))
    assert lines[first].startswith("FAIL  Test: scaled_dot_product_attention without a mask"), out
    assert lines[first + 1] == "CheckFailure: weights: Your scores are not divided by √d_k.", out
    assert "VALIDATION FAILED on 3 cell(s)" in out, out   # test_self_attention passes: scored on its own


def test_figure_options_fit_on_one_line_each():
    """MyST reads a directive's options one line each: a continued :alt: cuts the alt text and pushes the rest,
    `:width: 100%` included, into the caption (book/appendix/how_to_take.md's screenshot, issue 35)."""
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    problems = []
    for page in sorted((repo / "book").rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if re.match(r"\s*(```|:::)\{(figure|image)\}", line):
                j = i + 1
                while j < len(lines) and lines[j].lstrip().startswith(":"):
                    j += 1
                if j < len(lines) and lines[j].strip() and j > i + 1:
                    problems.append(f"{page.relative_to(repo)}:{j + 1}: {lines[j].strip()[:60]}")
    assert not problems, "an option continued on the next line:\n" + "\n".join(problems)
