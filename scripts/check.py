"""Self-check an exercise with its visible AND hidden tests, the way it is graded: `make check 03`.

The learner's answers come from their notebook (notebooks/03_*/03_*.ipynb by default, or --notebook PATH), every
test cell from solutions/ (where the hidden tests live), as nbgrader's autograde does it: the learner's answer
cells and their own extra cells are kept, every read-only and test cell is the instructor's.  The notebook runs
top to bottom in a fresh kernel (nbclient, the course's cell timeout) in the learner notebook's folder; nothing
is written back.  It prints each test with its points and, for a failure, the test's message (the same feedback
the notebook shows, naming the mistake when the course recognises it), then the total.  Exit status 0 when every
test passed, 1 otherwise (2: usage error).

    python scripts/check.py 03                  # or 03_self_attention, or a path to a notebook
    python scripts/check.py 03 --notebook my_copy.ipynb
    python scripts/check.py --validate 03       # nbgrader's Validate (visible tests only), exit 1 on failure

`--validate` exists because `nbgrader validate` itself exits 0 even when it reports "VALIDATION FAILED".
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENTS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir() and re.match(r"\d\d_", p.name))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
WIDTH = 80  # a terminal's usual width: messages are wrapped to it, never cut


def wrapped(text: str, indent: int = 8) -> str:
    """``text`` indented by ``indent`` spaces and wrapped at WIDTH columns, each line's own indentation kept (a
    continuation goes two spaces further in)."""
    out = []
    for line in text.splitlines() or [""]:
        own = len(line) - len(line.lstrip(" "))
        first, rest = " " * (indent + own), " " * (indent + own + 2)
        out.extend(textwrap.wrap(line.strip(), WIDTH, initial_indent=first, subsequent_indent=rest,
                                 break_on_hyphens=False) or [""])
    return "\n".join(out)


@contextlib.contextmanager
def quiet_stderr():
    """The kernel's start-up warnings (it inherits this process's stderr) are not the learner's: file descriptor 2
    goes to /dev/null meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _nbg(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def find_assignment(selector: str) -> tuple[str, Path]:
    """(assignment, learner notebook) for '03', '3', '03_self_attention' or a notebook path."""
    path = Path(selector)
    if path.suffix == ".ipynb" and path.exists():
        name = path.stem
        if name not in ASSIGNMENTS:
            raise SystemExit(f"{path}: the file name must be an exercise's ({', '.join(ASSIGNMENTS)})")
        return name, path
    key = selector.strip().lower()
    matches = [a for a in ASSIGNMENTS if a == key or a.split("_")[0] == key.zfill(2) or a.startswith(key)]
    if len(matches) != 1:
        raise SystemExit(f"unknown exercise {selector!r}; one of: {', '.join(a[:2] for a in ASSIGNMENTS)} "
                         f"({', '.join(ASSIGNMENTS)})")
    a = matches[0]
    return a, REPO / "notebooks" / a / f"{a}.ipynb"


def merge(source, learner):
    """The notebook to run: the instructor's cells, with the learner's answer cells and their extra cells."""
    import nbformat

    answers = {_nbg(c)["grade_id"]: c for c in learner.cells if _nbg(c).get("solution") and "grade_id" in _nbg(c)}
    # the learner's own cells (no nbgrader metadata), kept after the graded cell they follow
    extra, after = {}, None
    for c in learner.cells:
        gid = _nbg(c).get("grade_id")
        if gid:
            after = gid
        elif c.cell_type == "code":
            extra.setdefault(after, []).append(c)
    out = nbformat.v4.new_notebook(metadata=source.metadata)
    cells = extra.get(None, [])[:]
    for c in source.cells:
        gid = _nbg(c).get("grade_id")
        cells.append(answers.get(gid, c) if _nbg(c).get("solution") and gid in answers else c)
        cells.extend(extra.get(gid, []))
    # an answer cell the learner's notebook lacks gets the release's stub: the instructor's solution never runs
    out.cells = [_stub(c) if _nbg(c).get("solution") and _nbg(c).get("grade_id") not in answers else c
                 for c in cells]
    for c in out.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return out


def _stub(cell):
    import copy
    c = copy.deepcopy(cell)
    c.source = re.sub(r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION",
                      lambda m: m.group(1) + "# YOUR CODE HERE\n" + m.group(1) + "raise NotImplementedError()",
                      c.source, flags=re.S)
    return c


def _config():
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()


def run_checks(assignment: str, notebook: Path) -> int:
    import nbformat
    from nbclient import NotebookClient

    source = nbformat.read(str(REPO / "solutions" / assignment / f"{assignment}.ipynb"), as_version=4)
    learner = nbformat.read(str(notebook), as_version=4)
    nb = merge(source, learner)
    timeout = int(_config().Execute.get("timeout", 60))
    print(wrapped(f"Checking {notebook} with the visible and hidden tests of {assignment} ...", 0), flush=True)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
                            resources={"metadata": {"path": str(notebook.resolve().parent)}})
    try:
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's own start-up warnings are not the learner's
    except Exception as error:  # noqa: BLE001 - the kernel died: the cells not run count as failed
        print(f"The kernel stopped: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")

    rows, earned, total, failed = [], 0, 0, 0
    for cell in nb.cells:
        g = _nbg(cell)
        if cell.cell_type != "code" or not g.get("grade") or "points" not in g:
            continue
        points = g["points"]
        total += points
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        ran = cell.get("execution_count") is not None or cell.get("outputs")
        if ran and not errors:
            earned += points
            rows.append((g["grade_id"], points, points, None))
        else:
            failed += 1
            if errors:
                e = errors[0]
                message = f"{e['ename']}: {ANSI.sub('', e['evalue'])}"
                if e["ename"] == "NotImplementedError":
                    message = ("NotImplementedError: an answer this test needs is not written yet "
                               "(replace `raise NotImplementedError()` with your code)")
            else:
                message = "not run (an earlier cell stopped the kernel or timed out)"
            rows.append((g["grade_id"], 0, points, message))

    width = max(len(r[0]) for r in rows) if rows else 10
    print()
    for gid, got, points, message in rows:
        print(f"  {'PASS' if message is None else 'FAIL'}  {gid:<{width}}  {got}/{points}")
        if message:
            print(wrapped(message))
    print(f"\nTotal: {earned}/{total} points" + ("" if not failed else f"; {failed} test(s) failed."))
    if not failed:
        print(wrapped("Every test passed, the hidden ones included. Compare your code with the solution in "
                      f"solutions/{assignment}/.", 0))
    return 0 if not failed else 1


def validate(notebook: Path) -> int:
    """nbgrader's Validate on the learner's notebook; exit status 1 when validation fails.  Each failed test as the
    Lab's dialog shows it: the message (the named mistake) first, wrapped at 80 columns; then what to do next."""
    sys.path.insert(0, str(REPO / "scripts" / "lab"))
    from course_lab import SPLIT, MessageFirstValidator

    validator = MessageFirstValidator(config=_config())
    print(wrapped(f"Validating {notebook} with its visible tests ...", 0), flush=True)
    with quiet_stderr():
        result = validator.validate(str(notebook))
    if result.get("type_changed") or result.get("changed"):  # a read-only cell was edited: nbgrader's own report
        validator.validate = lambda filename: result  # print what was found, without running the notebook again
        validator.validate_and_print(str(notebook))
        return 1
    failed = result.get("failed", [])
    print()
    for cell in failed:
        title = next((line.lstrip("# ").strip() for line in cell["source"].splitlines() if line.strip()), "a cell")
        raw = ANSI.sub("", cell.get("raw_error", ""))
        message = raw.split(SPLIT, 1)[0].strip() if SPLIT in raw else raw.strip()
        if message.startswith("NotImplementedError"):
            message = ("NotImplementedError: an answer this test needs is not written yet (replace "
                       "`raise NotImplementedError()` with your code)")
        print(wrapped(f"FAIL  {title}", 2))
        print(wrapped(message or "this cell failed", 8))
        print()
    if failed:
        print(wrapped(f"VALIDATION FAILED on {len(failed)} cell(s). Fix the first failure first: a later test often "
                      f"fails because of it. Then run `make validate` again, or `make check` for the hidden tests "
                      f"too.", 0))
        return 1
    print(wrapped("Success! Your notebook passes all the visible tests. `make check` runs the hidden tests too.", 0))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exercise", nargs="?", help="03, 03_self_attention, or a path to a notebook")
    parser.add_argument("--notebook", type=Path, help="the learner notebook (default: notebooks/NN_*/NN_*.ipynb)")
    parser.add_argument("--validate", action="store_true", help="run nbgrader's Validate instead (visible tests)")
    args = parser.parse_args(argv)
    if not args.exercise:
        parser.print_usage()
        print(f"exercises: {', '.join(ASSIGNMENTS)}")
        return 2
    assignment, notebook = find_assignment(args.exercise)
    notebook = args.notebook or notebook
    if not notebook.exists():
        print(f"{notebook} does not exist")
        return 2
    return validate(notebook) if args.validate else run_checks(assignment, notebook)


if __name__ == "__main__":
    sys.exit(main())
