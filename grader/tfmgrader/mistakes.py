"""The class's mistakes in one report: per graded function, how many learners made which named mistake.

After a batch, ``scripts/grade.py`` reads every autograded notebook of the class (the test cells' error outputs,
which is how nbgrader scored them) and counts, per graded function: the submissions graded, those that failed
at least one of the function's tests, each mistake of the feedback catalogue (``tfmcheck.feedback``) that a
failure message named, each other function a failure message says to fix first (a cascade: the failure is
counted against the function the feedback names, ``tfmcheck.feedback.fix_first``), the answers the grader
withheld (the scan flagged them: their tests fail because the answer never ran), the failures with no named
cause, and the submissions whose function the copy detection flagged (``similarity.py``).  It writes
``mistakes.csv`` and ``mistakes.png`` (one bar chart) next to ``grades.csv``.  A learner counts once per function
and mistake, however many tests showed it.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

FIELDS = ["assignment", "function", "kind", "mistake", "students", "of", "sentence"]


def test_functions(source_notebooks: list[Path]) -> dict[str, str]:
    """``{test cell grade_id: graded function}``: the function the cell passes to ``check.call`` (or
    ``check.peak_numel``), else the last function the answer cells above it define."""
    import nbformat

    from tfmgrader.verify import called_names

    out, last = {}, ""
    for path in source_notebooks:
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code":
                continue
            if meta.get("solution"):
                try:
                    names = [n.name for n in ast.parse(cell.source).body if isinstance(n, ast.FunctionDef)]
                except SyntaxError:
                    names = []
                last = names[-1] if names else last
            elif meta.get("grade"):
                called = sorted(called_names([cell.source]))
                out[meta["grade_id"]] = called[0] if len(called) == 1 else last
    return out


def answer_functions(source_notebooks: list[Path]) -> dict[str, list[str]]:
    """``{answer cell grade_id: the functions (and classes) it defines}``."""
    import nbformat

    out = {}
    for path in source_notebooks:
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("solution"):
                try:
                    out[meta["grade_id"]] = [n.name for n in ast.parse(cell.source).body
                                             if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
                except SyntaxError:
                    out[meta["grade_id"]] = []
    return out


#: What a withheld answer cell raises (``preprocessors.ScanSubmission``).
WITHHELD = "This answer was withheld from grading"
#: How the feedback names another function to fix first (``tfmcheck.feedback.fix_first``).
FIX_FIRST = re.compile(r"fix ([\w ]+?) first")


def blamed(text: str, function: str) -> set[str]:
    """The other functions a failure message of ``function`` says to fix first."""
    return {name for m in FIX_FIRST.finditer(text) for name in m.group(1).split(" and ")
            if name and name != function and name.isidentifier()}


def catalogue() -> dict[str, list[tuple[str, str]]]:
    """``{function: [(mistake name, sentence)]}`` of the feedback catalogue."""
    from tfmcheck.feedback import CATALOGUE

    return {f: [(m.name, m.sentence) for m in ms] for f, ms in CATALOGUE.items()}


def named_mistakes(text: str, function: str, known: dict[str, list[tuple[str, str]]]) -> set[str]:
    """The catalogued mistakes whose sentence a failure message contains: the function's own (``name``), or,
    when a message blames another function (a failure that cascades), ``other_function.name``."""
    own = {name for name, sentence in known.get(function, []) if sentence in text}
    if own:
        return own
    return {f"{f}.{name}" for f, ms in known.items() if f != function for name, sentence in ms if sentence in text}


def failures(notebook: Path, tests: dict[str, str],
             answers: dict[str, list[str]] | None = None) -> tuple[dict[str, list[str]], set[str]]:
    """(``{function: [error text of each failing test cell]}``, the functions whose answer cell the grader
    withheld) of one autograded notebook."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    out: dict[str, list[str]] = {}
    withheld: set[str] = set()
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code":
            continue
        errors = [f"{o.get('ename', '')}: {o.get('evalue', '')}" for o in cell.get("outputs", [])
                  if o.get("output_type") == "error"]
        if gid in (answers or {}) and any(WITHHELD in e for e in errors):
            withheld.update(answers[gid])
        if gid in tests and errors:
            out.setdefault(tests[gid], []).append("\n".join(errors))
    return out, withheld


def aggregate(assignment: str, source_notebooks: list[Path], autograded: dict[str, list[Path]],
              flagged: dict[str, set[str]] | None = None) -> list[dict]:
    """The rows of mistakes.csv.  ``autograded``: ``{student: their autograded notebooks}`` (the graded class);
    ``flagged``: ``{function: students the copy detection flagged}``."""
    tests = test_functions(source_notebooks)
    answers = answer_functions(source_notebooks)
    functions = list(dict.fromkeys(tests.values()))
    known = catalogue()
    sentences = {name: s for ms in known.values() for name, s in ms}
    sentences.update({f"{f}.{name}": s for f, ms in known.items() for name, s in ms})
    graded = {f: 0 for f in functions}
    failed = {f: 0 for f in functions}
    unnamed = {f: 0 for f in functions}
    withheld = {f: 0 for f in functions}
    named: dict[str, dict[str, int]] = {f: {} for f in functions}
    cascades: dict[str, dict[str, int]] = {f: {} for f in functions}
    for student, notebooks in sorted(autograded.items()):
        fails: dict[str, list[str]] = {}
        held: set[str] = set()
        for nb in notebooks:
            try:
                found_fails, found_held = failures(nb, tests, answers)
            except Exception:  # noqa: BLE001 - an unreadable notebook counts as not graded
                continue
            for f, texts in found_fails.items():
                fails.setdefault(f, []).extend(texts)
            held |= found_held
        for f in functions:
            graded[f] += 1
            if f not in fails:
                continue
            failed[f] += 1
            if f in held:       # its answer never ran: no mistake of its own to name
                withheld[f] += 1
                continue
            found = set().union(*(named_mistakes(t, f, known) for t in fails[f]))
            others = set().union(*(blamed(t, f) for t in fails[f]))
            if not found and not others:
                unnamed[f] += 1
            for name in found:
                named[f][name] = named[f].get(name, 0) + 1
            for g in others:
                cascades[f][g] = cascades[f].get(g, 0) + 1
    rows = []
    for f in functions:
        n = graded[f]
        rows.append(_row(assignment, f, "failed", "", failed[f], n))
        for name, count in sorted(named[f].items(), key=lambda kv: (-kv[1], kv[0])):
            rows.append(_row(assignment, f, "named mistake", name, count, n, sentences.get(name, "")))
        for g, count in sorted(cascades[f].items(), key=lambda kv: (-kv[1], kv[0])):
            rows.append(_row(assignment, f, "caused by another function", g, count, n,
                             f"the feedback says to fix {g} first"))
        rows.append(_row(assignment, f, "answer withheld", "", withheld[f], n,
                         "the scan withheld the answer: its tests failed without running it"))
        rows.append(_row(assignment, f, "no named cause", "", unnamed[f], n))
        rows.append(_row(assignment, f, "flagged for similarity", "", len((flagged or {}).get(f, set())), n))
    return rows


def _row(assignment, function, kind, mistake, students, of, sentence=""):
    return {"assignment": assignment, "function": function, "kind": kind, "mistake": mistake,
            "students": students, "of": of, "sentence": sentence}


COLOURS = {"failed": "#999999", "named mistake": "#d95f02", "caused by another function": "#e6ab02",
           "answer withheld": "#e7298a", "no named cause": "#7570b3", "flagged for similarity": "#1b9e77"}


def plot(path: Path, assignment: str, rows: list[dict]) -> None:
    """One horizontal bar chart: for each graded function, the learners who failed it, each named mistake,
    the failures with no named cause and the similarity flags."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = rows
    labels = [f"{r['function']}: " + (f"fix {r['mistake']} first" if r["kind"] == "caused by another function"
                                      else r["mistake"] or r["kind"]) for r in bars]
    counts = [r["students"] for r in bars]
    total = max((r["of"] for r in rows), default=0)
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(bars) + 1.6))
    ax.barh(range(len(bars)), counts, color=[COLOURS[r["kind"]] for r in bars])
    ax.set_yticks(range(len(bars)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"learners (of {total} graded submissions)")
    ax.set_ylabel("graded function: what happened")
    ax.set_title(f"{assignment}: the class's mistakes")
    ax.xaxis.get_major_locator().set_params(integer=True)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
