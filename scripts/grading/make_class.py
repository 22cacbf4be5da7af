"""Generate a class of submissions — correct, wrong and hostile — for testing and benchmarking the grader.

    python scripts/grading/make_class.py COURSE_DIR ASSIGNMENT [ASSIGNMENT ...] [--copies N]

``COURSE_DIR`` is a course whose ``solutions/`` (source) and ``notebooks/`` (release) hold the
assignments.  Submissions go to ``COURSE_DIR/submitted/<student>/<assignment>/``; the expected
outcome of each is returned by ``make_class`` and written to ``COURSE_DIR/expected.json``:
``full`` (must get full marks) or ``less`` (must get less than full marks).

Correct styles: the answers as written; the answers reformatted with comments stripped, extra
learner cells that print and warn, and a deleted test cell; the answers inside a notebook saved
with other JSON formatting.  Wrong: the unanswered release; one answer broken.  Hostile: every
attack the issue lists, each paired with a wrong answer so that it would only score if it worked.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import re
from pathlib import Path

import nbformat

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


def answer_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]


def defined_functions(src: str) -> list[str]:
    return [n.name for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)]


def with_answer(nb, index: int, source: str):
    nb = copy.deepcopy(nb)
    nb.cells[index].source = source
    return nb


def stripped(nb):
    """Same answers, reformatted by ast.unparse (no comments, other layout)."""
    nb = copy.deepcopy(nb)
    for i in answer_cells(nb):
        nb.cells[i].source = ast.unparse(ast.parse(nb.cells[i].source))
    return nb


def chatty(nb):
    """Extra learner cells, prints and a warning inside an answer; one test cell deleted."""
    nb = copy.deepcopy(nb)
    first = answer_cells(nb)[0]
    src = nb.cells[first].source
    name = defined_functions(src)[0]
    nb.cells[first].source = (src + f"\n\n_{name}_impl = {name}\n\ndef {name}(*args, **kwargs):\n"
                              f"    import warnings\n    warnings.warn('a learner warning', UserWarning)\n"
                              f"    return _{name}_impl(*args, **kwargs)\n")
    nb.cells.insert(first + 1, nbformat.v4.new_markdown_cell("My notes: trying things out."))
    nb.cells.insert(first + 2, nbformat.v4.new_code_cell("print('exploring', 1 + 1)\nimport math\nmath.sqrt(2)"))
    tests = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade")
             and c.cell_type == "code"]
    del nb.cells[tests[-1]]
    return nb


def broken(nb, which: int):
    """One answer replaced by a plausible but wrong one: every function returns its first argument."""
    idx = answer_cells(nb)[which]
    names = defined_functions(nb.cells[idx].source)
    wrong = "\n".join(f"def {n}(*args, **kwargs):\n    return args[0] if args else None\n" for n in names)
    return with_answer(nb, idx, wrong)


def attack(nb, code: str):
    """Every answer wrong (functions return their first argument), with ``code`` after the first one."""
    nb = copy.deepcopy(nb)
    for k, idx in enumerate(answer_cells(nb)):
        names = defined_functions(nb.cells[idx].source)
        wrong = "\n".join(f"def {n}(*args, **kwargs):\n    return args[0] if args else None\n" for n in names)
        nb.cells[idx].source = wrong + ("\n" + code if k == 0 else "")
    return nb


def attacks(course: Path, assignment: str, first_student: str) -> dict[str, str]:
    solution = course / "solutions" / assignment / f"{assignment}.ipynb"
    other = course / "submitted" / first_student / assignment / f"{assignment}.ipynb"
    return {
        "rebind_allclose": "import torch\ntorch.allclose = lambda *a, **k: True\n"
                           "torch.all = lambda *a, **k: torch.tensor(True)\n"
                           "torch.equal = lambda *a, **k: True\ntorch.isclose = lambda *a, **k: torch.tensor(True)",
        "library_shortcut": "import torch.nn.functional as F\n_shortcut = F.scaled_dot_product_attention\n"
                            "_mha = torch.nn.MultiheadAttention",
        "read_solution_json": f"import json\n_nb = json.load(open({str(solution)!r}))\n"
                              "for _c in _nb['cells']:\n    if _c['cell_type'] == 'code':\n"
                              "        exec(''.join(_c['source']))",
        "read_solution_numpy": f"import numpy as np\n_text = np.genfromtxt({str(solution)!r}, dtype=str, "
                               "delimiter='\\x01')\nfor _line in _text:\n    pass",
        "tensor_subclass": "import torch\nclass Liar(torch.Tensor):\n"
                           "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                           "        return True\n",
        "sqlite_gradebook": f"import sqlite3\n_db = sqlite3.connect({str(course / 'gradebook.db')!r})\n"
                            "_db.execute('update grade set manual_score = 1000')\n_db.commit()",
        "interrupt_swallowing_loop": "while True:\n    try:\n        pass\n    except KeyboardInterrupt:\n        pass",
        "os_exit": "import os\nos._exit(3)",
        "fork_bomb": "import os\nwhile True:\n    os.fork()",
        "alloc_4gb": "import torch\n_big = torch.empty(4 * 1024 ** 3, dtype=torch.uint8)\n_big.fill_(1)",
        "output_50mb": "print('x' * 50_000_000)",
        "socket": "import socket\n_s = socket.create_connection(('10.255.255.1', 80), timeout=2)",
        "write_other_student": f"import torch\ntorch.save({{'owned': True}}, {str(other)!r})",
    }


def make_class(course: Path, assignments: list[str], copies: int = 1, kinds=None) -> dict[str, dict]:
    """Write the submissions; return ``{student: {"assignment": a, "expect": "full"|"less", "kind": k}}``.

    ``kinds`` (optional) maps an assignment to the kinds to write (e.g. ``{"correct-plain", "attack-os-exit"}``);
    by default every kind is written.
    """
    expected: dict[str, dict] = {}
    for assignment in assignments:
        source = nbformat.read(course / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
        release = nbformat.read(course / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)
        good = answered(release, source)
        n_answers = len(answer_cells(good))
        prefix = assignment.split("_")[0]
        for copy_no in range(copies):
            tag = f"{prefix}c{copy_no}"
            first = f"{tag}-correct-plain"
            subs = {
                first: ("full", good),
                f"{tag}-correct-stripped": ("full", stripped(good)),
                f"{tag}-correct-chatty": ("full", chatty(good)),
                f"{tag}-wrong-unanswered": ("less", release),
                f"{tag}-wrong-first": ("less", broken(good, 0)),
                f"{tag}-wrong-last": ("less", broken(good, n_answers - 1)),
            }
            for kind, code in attacks(course, assignment, first).items():
                subs[f"{tag}-attack-{kind.replace('_', '-')}"] = ("less", attack(good, code))
            wanted = (kinds or {}).get(assignment)
            keep = (lambda student: wanted is None or student.split("-", 1)[1] in wanted)
            for student, (expect, nb) in subs.items():
                if not keep(student):
                    continue
                folder = course / "submitted" / student / assignment
                folder.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, folder / f"{assignment}.ipynb")
                expected[student] = {"assignment": assignment, "expect": expect, "kind": student.split("-", 1)[1]}
            # Files nbformat would refuse to write: a broken file, a renamed notebook, other JSON layout.
            for student, expect, writer in [
                (f"{tag}-invalid-json", "less", lambda f: (f / f"{assignment}.ipynb").write_text('{"cells": [')),
                (f"{tag}-renamed", "less", lambda f: nbformat.write(good, f / "my_answers.ipynb")),
                (f"{tag}-correct-compact", "full",
                 lambda f: (f / f"{assignment}.ipynb").write_text(json.dumps(good, separators=(",", ":")))),
            ]:
                if not keep(student):
                    continue
                folder = course / "submitted" / student / assignment
                folder.mkdir(parents=True, exist_ok=True)
                writer(folder)
                expected[student] = {"assignment": assignment, "expect": expect, "kind": student.split("-", 1)[1]}
    (course / "expected.json").write_text(json.dumps(expected, indent=1))
    return expected


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", type=Path)
    parser.add_argument("assignments", nargs="+")
    parser.add_argument("--copies", type=int, default=1)
    args = parser.parse_args(argv)
    expected = make_class(args.course, args.assignments, args.copies)
    print(f"{len(expected)} submissions written under {args.course / 'submitted'}")


if __name__ == "__main__":
    main()
