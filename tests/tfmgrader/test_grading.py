"""The hardened grading set-up (grader/tfmgrader): sandbox, scan, and a whole class graded in batches."""
import atexit
import copy
import csv
import hashlib
import json
import re
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]

from tfmgrader.scan import scan_cells  # noqa: E402

ASSIGNMENTS = ["01_rnn_limits", "02_attention", "03_self_attention", "04_multi_head", "05_positions",
               "06_encoder_decoder", "07_efficiency", "08_scaling_laws", "09_modern_gpt"]


from conftest import require_bwrap, require_root  # noqa: E402  (fail under CI, skip elsewhere)


# --- the scan ---------------------------------------------------------------------------------------

SETUP = ["import torch\nimport torch.nn.functional as F\nfrom tfmcheck import checking as check\nSEED = 0\n"]
TESTS = ["out = f(torch.ones(2))\ncheck.assert_close('f', out, torch.ones(2))\ndef _ref(x):\n    return x\n"]


@pytest.mark.parametrize("code, reason", [
    ("torch.allclose = lambda *a, **k: True", "assigns to 'torch.allclose'"),
    ("check.assert_close = print", "assigns to 'check.assert_close'"),
    ("check = None", "rebinds 'check'"),
    ("def _ref(x):\n    return 0", "rebinds '_ref'"),
    ("def f(q):\n    return F.scaled_dot_product_attention(q, q, q)", "library implementation"),
    ("def f(q):\n    return torch.nn.functional.layer_norm(q, q.shape[-1:])", "library implementation"),
    ("from torch.nn.functional import scaled_dot_product_attention as s", "library implementation"),
    ("import tfmlib\nf = tfmlib.scaled_dot_product_attention", "imports 'tfmlib'"),
    ("class T(torch.Tensor):\n    pass", "subclasses 'torch.Tensor'"),
    ("def __torch_function__(*a):\n    return True", "'__torch_function__'"),
    ("x = getattr(F, 'scaled_' + 'dot_product_attention')", "uses 'getattr'"),
    ("import os\nos._exit(0)", "imports 'os'"),
    ("data = open('/etc/passwd').read()", "uses 'open'"),
    ("import sqlite3", "imports 'sqlite3'"),
    ("import socket", "imports 'socket'"),
    ("!cat /etc/passwd", "magics or shell escapes"),
    ("globals()['check'] = None", "uses 'globals'"),
    ("torch.Tensor.__eq__ = lambda a, b: True", "'__eq__'"),
    ("vars(check)['assert_close'] = print", "uses 'vars'"),
    ("y = check.ref", "uses 'check'"),
    ("def f(x):\n    return out", "a variable of the test cells"),
    ("t = torch\nt.allclose = print", "assigns to 't.allclose'"),
    ("x = torch.load('gradebook.db')", "torch.load"),
    ("x = torch._C", "private part"),
    ("range = lambda *a: []", "rebinds the built-in 'range'"),
    ("exec('x = 1')", "uses 'exec'"),
    ("\uff45\uff58\uff45\uff43('x = 1')", "uses 'exec'"),
    ("s = '{0.__class__}'.format(torch)", "format string"),
    ("x = type('X', (), {})", "uses 'type'"),
    ("import importlib", "imports 'importlib'"),
    # frames reach the notebook's globals and built-ins without a dunder (found by a blind red team)
    ("def g():\n    yield\ndef f(x):\n    return g().gi_frame.f_globals['expected']", "'gi_frame'"),
    ("def g():\n    yield\nb = g().gi_frame.f_builtins", "'f_builtins'"),
    ("def f(x):\n    try:\n        1 / 0\n    except Exception as e:\n        return e.__traceback__", "'__traceback__'"),
    ("def f(e):\n    return e.tb_frame.f_back", "'tb_frame'"),
    ("def f(fn):\n    return fn.func_globals", "'func_globals'"),
    ("def f(x):\n    return x.some_private_handle", "the attribute 'some_private_handle'"),
    ("def f(d):\n    return d['__import__']('os')", "'__import__'"),
])
def test_scan_flags_attacks(code, reason):
    flags = scan_cells({5: code}, SETUP, TESTS, {"f"})
    assert any(reason in f.reason for f in flags), [str(f) for f in flags]
    assert all(f.cell == 5 for f in flags)


# The scan must read what the kernel runs (IPython's own transformer), in every layout: an attack hidden
# behind blank lines, comments, decorators, nested functions, continuations or magics is still found.
HIDDEN = "check.assert_close = print"


@pytest.mark.parametrize("layout", [
    "def f(x):\n    y = x\n\n    {attack}\n\n    return y\n",
    "def f(x):\n    # a comment\n\n    # another\n    {attack}\n    return x\n",
    "@torch.no_grad()\ndef f(x):\n\n    {attack}\n    return x\n",
    "def f(x):\n    def inner():\n\n        {attack}\n    inner()\n    return x\n",
    "def f(x):\n    y = (x +\n         x)\n    z = 1 + \\\n        2\n    {attack}\n    return y\n",
    "%time y = 1\n{attack}\n",
    "def f(x):\n    %time y = 1\n\n    {attack}\n    return x\n",
    "x = 1\r{attack}\r",
    "class A(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n\n        {attack}\n",
    "lambda_ = [lambda: None for _ in range(2)]\nif True:\n\n    {attack}\n",
])
def test_scan_reads_every_layout(layout):
    flags = scan_cells({5: layout.format(attack=HIDDEN)}, SETUP, TESTS, {"f"})
    assert any("check.assert_close" in f.reason for f in flags), [str(f) for f in flags]


@pytest.mark.parametrize("code", [
    "def f(x)\n    return x",                   # a syntax error: withheld, never skipped
    "x = 1\x00",
    "%%bash\nls",
    "exec?",
])
def test_scan_fails_closed(code):
    assert scan_cells({5: code}, SETUP, TESTS, {"f"}), "a cell the scan cannot accept must be flagged"


@pytest.mark.parametrize("code", [
    "def f(q, k, v, mask=None):\n    d = q.shape[-1]\n    s = q @ k.transpose(-2, -1) / d ** 0.5\n"
    "    if mask is not None:\n        s = s.masked_fill(~mask, float('-inf'))\n"
    "    w = torch.softmax(s, dim=-1)\n    return w @ v, w",
    "import math\nimport torch\nimport torch.nn.functional as F\n"
    "def f(x):\n    out = F.softmax(x, -1)  # softmax is allowed\n    return out * math.sqrt(2)",
    "def f(x):\n    expected = 3  # a test's plain variable name is the learner's to use\n    return x",
    "def f(x):\n    \"\"\"Unlike scaled_dot_product_attention in PyTorch, this is mine.\"\"\"\n    return x",
    "from typing import Optional\nfrom torch import Tensor\n\n\ndef f(x: Tensor, m: Optional[Tensor] = None) -> Tensor:\n"
    "    import math\n\n    return x / math.sqrt(2)",
    "def _softmax(s):\n    e = (s - s.amax(-1, keepdim=True)).exp()\n    return e / e.sum(-1, keepdim=True)\n\n"
    "@torch.no_grad()\ndef f(x):\n    return torch.where(x > 0, _softmax(x), torch.einsum('ij->ij', x))",
    "class Head(torch.nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
    "        self.w = torch.nn.Parameter(torch.randn(d, d))\n\n    def forward(self, x):\n        return x @ self.w",
    "print(f(torch.ones(2)))\nout",
    "import numpy as np\ndef f(x):\n    return float(np.log(np.asarray(x)).mean())",
    "def f(x):\n    return x\n\nif __name__ == '__main__':\n    print(f(torch.ones(2)))",
    "from dataclasses import dataclass\n@dataclass\nclass Cfg:\n    heads: int = 2\n"
    "def f(x, cfg=Cfg()):\n    b, t, d = x.shape\n    return x.view(b, t, cfg.heads, d // cfg.heads).transpose(1, 2)",
    "def f(x):\n    m = torch.finfo(x.dtype).min\n    vals, idx = x.max(dim=-1)\n    return x.masked_fill(x < 0, m).T, vals, idx",
    "class Lin(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.proj = torch.nn.Linear(2, 2)\n"
    "    def forward(self, x):\n        return x @ self.proj.weight.mT + self.proj.bias",
])
def test_scan_accepts_honest_answers(code):
    assert scan_cells({5: code}, SETUP, TESTS, {"f"}) == []


def test_a_reason_of_thousands_of_findings_stays_readable_in_grades_csv(tmp_path):
    """Red-team round 39 wrote 20,000 names the scan flags: the reason listing each one was too long for Python's csv
    module to read grades.csv back.  The reason keeps the first findings and counts the rest."""
    from tfmgrader.files import write_csv
    from tfmgrader.report import MAX_REASON_CHARS, joined

    flags = scan_cells({5: "def f(x):\n" + "".join(f"    x = x + c{i}\n" for i in range(20000)) + "    return x"},
                       SETUP, TESTS, {"f"})
    reasons = list(dict.fromkeys(str(f) for f in flags))
    assert len(reasons) == 20000
    reason = joined(reasons)
    assert len(reason) <= MAX_REASON_CHARS + 20 and reason.startswith(reasons[0] + "; " + reasons[1])
    kept = reason.count("; ")       # the findings listed (none holds "; "), then "and N more"
    assert reason.endswith(f"; and {20000 - kept} more"), reason[-60:]
    assert joined(reasons[:3]) == "; ".join(reasons[:3])
    path = tmp_path / "grades.csv"
    write_csv(path, [{"student_id": "s", "reason": reason}])
    with path.open(newline="") as f:
        assert next(csv.DictReader(f))["reason"] == reason


def test_scan_accepts_every_correct_style():
    """Every model solution and every answer of the correct-style corpus passes the scan unflagged."""
    import re

    from fixtures.answers import STYLES
    marker = re.compile(r"[ \t]*### (BEGIN|END) SOLUTION\n")
    for a in ASSIGNMENTS:
        nb = nbformat.read(ROOT / "solutions" / a / f"{a}.ipynb", as_version=4)
        meta = [(i, c, c.metadata.get("nbgrader", {})) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        setup = [c.source for _, c, m in meta if not m.get("grade") and not m.get("solution")]
        tests = [c.source for _, c, m in meta if m.get("grade")]
        answers = {i: marker.sub("", c.source) for i, c, m in meta if m.get("solution")}
        assert scan_cells(answers, setup, tests, set()) == [], a
        ids = {m["grade_id"]: i for i, _, m in meta if m.get("solution")}
        for style, cells in STYLES.get(a, {}).items():
            learner = {**answers, **{ids[g]: src for g, src in cells.items()}}
            assert scan_cells(learner, setup, tests, set()) == [], (a, style)
    assert set(STYLES) == set(ASSIGNMENTS), "every assignment has answers in other styles"


def test_scan_accepts_the_independent_answers_of_the_similarity_corpus():
    """The correct answers written independently for copy detection (grader/fixtures/similarity_corpus/correct: other
    learners' ways, e.g. torch.isin, complex rotations, lstsq's solution) pass the scan unflagged, each after the
    worked solution's answers, as a learner's extra cell that defines the function again."""
    import re

    from fixtures.answers import EXTRA_CORRECT
    marker = re.compile(r"[ \t]*### (BEGIN|END) SOLUTION\n")
    flagged = []
    for a, named in EXTRA_CORRECT.items():
        nb = nbformat.read(ROOT / "solutions" / a / f"{a}.ipynb", as_version=4)
        meta = [(i, c, c.metadata.get("nbgrader", {})) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        setup = [c.source for _, c, m in meta if not m.get("grade") and not m.get("solution")]
        tests = [c.source for _, c, m in meta if m.get("grade")]
        answers = {i: marker.sub("", c.source) for i, c, m in meta if m.get("solution")}
        for name, cells in named.items():
            extra = {1000 + k: src for k, src in enumerate(cells.values())}
            reasons = [f.reason for f in scan_cells({**answers, **extra}, setup, tests, set())]
            if reasons:
                flagged.append((a, name, reasons[:2]))
    assert not flagged, flagged


# --- the sandbox kernel -------------------------------------------------------------------------------

def run_in_sandbox(cells, workdir, timeout=30):
    """Execute ``cells`` in the tfmlib-sandbox kernel (as grading does) and return the notebook."""
    from nbclient import NotebookClient
    from traitlets.config import Config

    from tfmgrader.kernelspec import KERNEL_NAME, write_kernelspec

    private = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    write_kernelspec(private / "jupyter")
    (private / "run").mkdir(mode=0o700)
    env_before = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(private / "jupyter")
    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(private / "run" / "kernel")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=timeout, allow_errors=True, config=config,
                            resources={"metadata": {"path": str(workdir)}})
    error = None
    try:
        client.execute()
    except Exception as err:  # noqa: BLE001 - returned to the test, which decides
        error = err
    finally:
        if env_before is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = env_before
        shutil.rmtree(private, ignore_errors=True)
    nb.metadata["error"] = type(error).__name__ if error else None
    return nb


def text_of(cell):
    return "".join(o.get("text", "") + o.get("ename", "") + ": " + o.get("evalue", "") for o in cell.outputs)


@pytest.mark.slow
def test_sandbox_confines_the_kernel(tmp_path):
    require_bwrap()
    course = tmp_path / "course"
    secret = course / "solutions" / "secret.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("the instructor's answers")
    other = course / "submitted" / "alice" / "a" / "a.ipynb"
    other.parent.mkdir(parents=True)
    other.write_text("{}")
    work = course / "autograded" / "bob" / "a"
    work.mkdir(parents=True)
    nb = run_in_sandbox([
        "import torch, os, tempfile\nprint('uid', os.getuid(), 'tmp', tempfile.gettempdir())",
        f"print(open({str(secret)!r}).read())",
        f"open({str(other)!r}, 'w').write('owned')",
        f"open({str(course / 'new.txt')!r}, 'w').write('x')",
        "open('mine.txt', 'w').write('ok'); print(open('mine.txt').read())",
        "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)",
        "import torch\nx = torch.empty(4 * 1024 ** 3, dtype=torch.uint8)\nx.fill_(1)",
        "print('x' * 100)",
    ], work)
    out = [text_of(c) for c in nb.cells]
    assert "uid" in out[0] and "tmp /tmp" in out[0], out[0]
    if os.geteuid() == 0:
        uid = int(out[0].split("uid", 1)[1].split()[0])
        assert uid >= 200_000, "as root, learners' code runs as an unprivileged uid of its own"
    assert "FileNotFoundError" in out[1] and "instructor" not in out[1]
    assert "Error" in out[2] and other.read_text() == "{}"
    assert "Error" in out[3] and not (course / "new.txt").exists()
    # the kernel writes in a private copy of its folder: the real one, where the grader writes, is untouched
    assert "ok" in out[4] and not (work / "mine.txt").exists()
    assert "OSError" in out[5] or "unreachable" in out[5] or "refused" in out[5], out[5]
    assert "RuntimeError" in out[6] or "MemoryError" in out[6], out[6]
    assert "xxx" in out[7]


@pytest.mark.slow
def test_sandbox_limits_processes_and_survives_exit(tmp_path):
    require_bwrap()
    fork_bomb = ("import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                 "            import time; time.sleep(60); os._exit(0)\n        n += 1\n"
                 "except OSError as err:\n    print('stopped after', n, 'processes')")
    nb = run_in_sandbox([fork_bomb, "print('alive')", "import os\nos._exit(1)", "print('never')"], tmp_path)
    out = [text_of(c) for c in nb.cells]
    assert "stopped after" in out[0], out[0]
    assert int(out[0].split("stopped after")[1].split()[0]) <= 128
    assert "alive" in out[1]
    assert nb.metadata["error"] == "DeadKernelError" and out[3] == ""


# --- a whole class, graded in one batch per assignment ----------------------------------------------

CI_KINDS_DEFAULT = {"correct-plain", "correct-chatty", "wrong-unanswered", "wrong-first", "wrong-last",
                    "attack-rebind-allclose", "invalid-json"}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    require_bwrap()
    missing = [a for a in ASSIGNMENTS if not (ROOT / "solutions" / a / f"{a}.ipynb").exists()]
    assert not missing, f"assignments missing from solutions/: {missing}"
    from fixtures.make_class import graded_end_to_end, make_class

    course = tmp_path_factory.mktemp("class")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    code = ("from nbgrader.apps import NbGraderAPI\nfrom nbgrader.coursedir import CourseDirectory\n"
            "from traitlets.config.loader import PyFileConfigLoader\n"
            "cfg = PyFileConfigLoader('nbgrader_config.py', path='.').load_config()\n"
            "cfg.CourseDirectory.root = '.'\n"
            "api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)\n"
            f"for a in {ASSIGNMENTS!r}:\n    r = api.generate_assignment(a, force=True)\n"
            "    assert r['success'], r.get('error')\n")
    subprocess.run([sys.executable, "-c", code], cwd=course, env=env, check=True, capture_output=True)
    from fixtures.answers import STYLES
    kinds = {a: CI_KINDS_DEFAULT | {f"correct-style-{s}" for s in STYLES.get(a, {})} for a in ASSIGNMENTS}
    kinds["03_self_attention"] = graded_end_to_end   # every style, and the attacks only a run can judge, on one
    kinds["09_modern_gpt"] |= {"attack-rms-norm-alias", "attack-gqa-torch-sdpa", "attack-rope-tfmlib"}
    expected = make_class(course, ASSIGNMENTS, copies=1, kinds=kinds)
    victim = course / "submitted" / "03c0-correct-plain" / "03_self_attention" / "03_self_attention.ipynb"
    victim_hash = hashlib.sha256(victim.read_bytes()).hexdigest()
    rows = {}
    students = [s for s in expected if "sqlite" not in s]
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), *ASSIGNMENTS, "--course", str(course),
                           "--students", ",".join(students)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for a in ASSIGNMENTS:           # one process graded them one after the other, each into its own folder
        with open(course / "grading" / a / "grades.csv") as f:
            rows.update({r["student_id"]: r for r in csv.DictReader(f)})
        assert f"of {a} graded in" in proc.stdout, a
    # The gradebook attack last, after a snapshot of every other row.
    db = course / "gradebook.db"
    snapshot = sqlite3.connect(db).execute("select * from grade order by id").fetchall()
    attacker = "03c0-attack-sqlite-gradebook"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "03_self_attention",
                           "--course", str(course), "--students", attacker, "--out",
                           str(course / "grading" / "sqlite")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(course / "grading" / "sqlite" / "grades.csv") as f:
        rows.update({r["student_id"]: r for r in csv.DictReader(f)})
    after = sqlite3.connect(db).execute("select * from grade order by id").fetchall()
    return {"course": course, "expected": expected, "rows": rows, "snapshot": snapshot, "after": after,
            "victim": (victim, victim_hash)}


@pytest.mark.slow
def test_class_every_submission_is_graded_as_expected(graded_class):
    expected, rows = graded_class["expected"], graded_class["rows"]
    assert len(expected) >= 60
    assert set(rows) == set(expected), "every submission has exactly one row in the export"
    seconds = [float(r["seconds"]) for r in rows.values() if r["status"] != "invalid notebook"]
    print(f"\n{len(rows)} submissions graded; median {statistics.median(seconds):.2f} s, "
          f"total {sum(seconds):.0f} s")
    for student, e in expected.items():
        r = rows[student]
        score, best = float(r["score"]), float(r["max_score"])
        assert best > 0
        if e["expect"] == "full":
            assert score == best and r["status"] == "graded", (student, r)
        else:
            assert score < best, (student, r)
        if e["expect"] == "flag":
            assert r["status"] == "flagged" and r["reason"], (student, r)


@pytest.mark.slow
def test_class_statuses_and_reasons(graded_class):
    rows = graded_class["rows"]
    status = {s: r["status"] for s, r in rows.items()}
    for s in rows:
        if s.endswith("invalid-json") or s.endswith("renamed"):
            assert status[s] == "invalid notebook"
        if "rebind-allclose" in s or "library-shortcut" in s or "tensor-subclass" in s or "fork-bomb" in s \
                or "sqlite-gradebook" in s or "read-solution" in s or "socket" in s:
            assert status[s] == "flagged" and rows[s]["reason"], rows[s]
    assert status["03c0-attack-endless-loop"] == "timed out"
    assert sum(k.startswith("03c0-attack-") for k in rows) >= 30, "the attacks only a run can judge, and samples"
    assert "renamed" in rows["03c0-renamed"]["reason"]


@pytest.mark.slow
def test_class_reports_copy_detection_and_mistakes(graded_class):
    """grades.csv gains the closest source and its similarity; every assignment gets similarity.html and the
    class mistake report (CSV + figure); a verbatim copy of the solution is flagged, its score unchanged."""
    course, rows = graded_class["course"], graded_class["rows"]
    assert all("similar_to" in r and "similarity" in r for r in rows.values())
    for a in ASSIGNMENTS:
        folder = course / "grading" / a
        for name in ("similarity.csv", "similarity.html", "mistakes.csv", "mistakes.png"):
            assert (folder / name).stat().st_size > 0, (a, name)
        with open(folder / "mistakes.csv") as f:
            kinds = {r["kind"] for r in csv.DictReader(f)}
        assert {"failed", "no named cause", "flagged for similarity"} <= kinds, a
    plain = rows["03c0-correct-plain"]
    assert "solutions/03_self_attention: scaled_dot_product_attention" in plain["similar_to"]
    assert float(plain["similarity"]) >= 0.9 and float(plain["score"]) == float(plain["max_score"])


@pytest.mark.slow
def test_one_assignment_that_cannot_be_graded_leaves_the_others_graded(graded_class, tmp_path):
    """grade.py with several assignments: one it cannot grade is reported, the others are graded all the same,
    and the run ends with status 1."""
    course = graded_class["course"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "no_such_assignment",
                           "03_self_attention", "--course", str(course), "--students", "03c0-correct-plain",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no_such_assignment: no notebooks in solutions/no_such_assignment" in proc.stderr, proc.stderr[-3000:]
    assert "not graded, or not completely: no_such_assignment" in proc.stderr
    with open(tmp_path / "03_self_attention" / "grades.csv") as f:
        (row,) = csv.DictReader(f)
    assert row["student_id"] == "03c0-correct-plain" and row["status"] == "graded"
    assert (tmp_path / "03_self_attention" / "reports" / "03c0-correct-plain.json").exists()


@pytest.mark.slow
def test_class_nobody_else_is_touched(graded_class):
    before, after = set(graded_class["snapshot"]), set(graded_class["after"])
    assert before <= after, "grading the gradebook attacker changed other students' grade rows"
    # The only new rows are the attacker's own grades, one per graded test cell of that assignment.
    course = graded_class["course"]
    n_cells = sqlite3.connect(course / "gradebook.db").execute(
        "select count(*) from grade_cells join base_cell on grade_cells.id = base_cell.id "
        "join notebook on base_cell.notebook_id = notebook.id "
        "join assignment on notebook.assignment_id = assignment.id where assignment.name = ?",
        ("03_self_attention",)).fetchone()[0]
    assert len(after - before) == n_cells > 0
    victim, digest = graded_class["victim"]
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == digest
    flood = course / "autograded" / "03c0-attack-output-50mb" / "03_self_attention" / "03_self_attention.ipynb"
    assert flood.stat().st_size < 1_000_000, "a 50 MB output line must be cut"


# --- the verdicts recorded before issue 34's refactor --------------------------------------------------------

RECORDED = Path(__file__).with_name("recorded_verdicts.json")
RECORD_ENV = "TFMLIB_RECORD_VERDICTS"


def same_as_recorded(path: str, verdicts: dict[str, tuple[float, float, str, str]]) -> None:
    """``verdicts`` (``{student: (score, max_score, status, reason)}`` of one grading path) are those recorded in
    recorded_verdicts.json; with ``TFMLIB_RECORD_VERDICTS=1`` they are recorded there instead, and the change is
    reviewed as a diff of that file before it is committed."""
    found = {s: list(v) for s, v in sorted(verdicts.items())}
    recorded = json.loads(RECORDED.read_text())
    if os.environ.get(RECORD_ENV) == "1":
        recorded[path] = found
        RECORDED.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
        return
    before = recorded[path]
    changed = {s: {"recorded": before.get(s), "now": found.get(s)} for s in sorted(set(before) | set(found))
               if before.get(s) != found.get(s)}
    assert not changed, (f"{len(changed)} verdicts of the {path} path differ from those recorded at "
                         f"{recorded['recorded_at']}:\n" + json.dumps(changed, indent=1, ensure_ascii=False)[:6000])


@pytest.mark.slow
def test_class_verdicts_are_those_recorded_before_the_refactor(graded_class):
    """Grades, statuses and reasons of the whole class through scripts/grade.py (every assignment's correct,
    wrong and hostile submissions, and the gradebook attacker) are those the grader gave before issue 34
    rearranged it: equal, not just on the same side of full marks."""
    same_as_recorded("grade.py", {s: (float(r["score"]), float(r["max_score"]), r["status"], r["reason"])
                                  for s, r in graded_class["rows"].items()})


def class_records(folder: Path) -> dict:
    """What grade.py wrote about a class, less the seconds each submission took: grades.csv's rows, the
    copy detection's entries and the mistakes' counts."""
    def read(name):
        with open(folder / name) as f:
            return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)]
    return {name: read(name) for name in ("grades.csv", "similarity.csv", "mistakes.csv")}


def flagged_in_gradebook(course: Path, assignment: str) -> dict[str, int]:
    """{student: nbgrader's flag of their submitted notebook} of one assignment."""
    with sqlite3.connect(course / "gradebook.db") as db:
        return dict(db.execute(
            "select submitted_assignment.student_id, max(submitted_notebook.flagged) from submitted_notebook "
            "join submitted_assignment on submitted_notebook.assignment_id = submitted_assignment.id "
            "join assignment on submitted_assignment.assignment_id = assignment.id where assignment.name = ? "
            "group by submitted_assignment.student_id", (assignment,)).fetchall())


@pytest.mark.slow
def test_grading_some_students_merges_into_the_class(graded_class):
    """grade.py --students (with --regrade) grades those students again and leaves every other row, flag,
    similarity entry and mistakes count of the class as it was."""
    course, a = graded_class["course"], "03_self_attention"
    folder = course / "grading" / a
    before, flags = class_records(folder), flagged_in_gradebook(course, a)
    student = "03c0-attack-rebind-allclose"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), a, "--course", str(course),
                           "--students", student, "--regrade"], env=env, capture_output=True, text=True)
    print(f"\none student graded again and merged into a class of {len(before['grades.csv'])} in "
          f"{time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^1 submissions \(of \d+\), 0 already graded, 1 to grade", proc.stdout, re.M), proc.stdout[-2000:]
    assert f"grades of all {len(before['grades.csv'])} submissions" in proc.stdout, proc.stdout[-2000:]
    after = class_records(folder)
    for name in before:
        assert after[name] == before[name], name
    assert flagged_in_gradebook(course, a) == flags
    assert flags[student] == 1 and [r["status"] for r in after["grades.csv"] if r["student_id"] == student] == ["flagged"]


@pytest.mark.slow
def test_verdicts_in_the_gradebook_and_its_export(graded_class, tmp_path):
    """Every verdict is in nbgrader's records: a submission the grader flagged, or whose code copy detection
    flagged, is flagged in the gradebook (with the grader's reason as a comment), and `nbgrader export` (the
    course's plugin) shows each student's status, reason and copy suspicion."""
    from tfmgrader.verdicts import COMMENT_MARK
    course, rows = graded_class["course"], graded_class["rows"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["nbgrader", "export", "--to", str(tmp_path / "export.csv")], cwd=course, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "export.csv") as f:
        exported = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(f)}
    assert {"status", "reason", "similar_to", "similarity"} <= set(next(iter(exported.values())))
    for student, row in rows.items():
        e = exported[(row["assignment"], student)]
        assert (e["status"], e["reason"]) == (row["status"], row["reason"]), (student, e, row)
        if row["status"] != "invalid notebook":
            assert float(e["score"]) == float(row["score"]), (student, e, row)
        assert ("(flagged)" in row["similar_to"]) == bool(e["similar_to"]), (student, e, row)
    for a in ASSIGNMENTS:
        flagged = flagged_in_gradebook(course, a)
        for (assignment, student), e in exported.items():
            if assignment == a and student in flagged:
                assert flagged[student] == (e["status"] != "graded" or bool(e["similar_to"])), (student, e)
    assert "03c0-attack-rebind-allclose" in {s for (a, s), e in exported.items() if e["status"] == "flagged"}
    with sqlite3.connect(course / "gradebook.db") as db:
        comments = [c for (c,) in db.execute(
            "select comment.auto_comment from comment join submitted_notebook on comment.notebook_id = "
            "submitted_notebook.id join submitted_assignment on submitted_notebook.assignment_id = "
            "submitted_assignment.id where submitted_assignment.student_id = ?", ("03c0-attack-rebind-allclose",))]
    import json
    honest = json.loads((course / "grading" / "01_rnn_limits" / "reports" / "01c0-correct-plain.json").read_text())
    assert "has changed" not in honest["nbgrader_log"], "an honest submission's grading warns of nothing"
    reason = rows["03c0-attack-rebind-allclose"]["reason"]
    assert any(c and c.startswith(f"{COMMENT_MARK}: flagged") and reason in c for c in comments), comments


def test_a_changed_limit_grades_again_and_says_why(tmp_path, monkeypatch):
    """The fingerprint of what was graded holds the grader's limits: a submission graded with
    GRADER_CELL_TIMEOUT=30 is graded again when it is 60, and the reason names the limit and both values."""
    from tfmgrader.batch import State, plan, submissions
    from tfmgrader.course import api_from_config, load_config
    a = "03_self_attention"
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    shutil.copytree(ROOT / "solutions" / a, tmp_path / "solutions" / a)
    for student in ("ada", "bob"):
        shutil.copytree(ROOT / "notebooks" / a, tmp_path / "submitted" / student / a)
    coursedir = api_from_config(load_config(tmp_path))[1]
    monkeypatch.delenv("GRADER_CELL_TIMEOUT", raising=False)
    students, fps = submissions(tmp_path, coursedir, a, [f"{a}.ipynb"], None, None)
    state = State(tmp_path / "out")
    for s in students:
        state.mark_done(s, {"student_id": s}, fps[s])
    assert plan(students, fps, state, set(students), regrade=False) == ([], {})
    monkeypatch.setenv("GRADER_CELL_TIMEOUT", "60")
    _, changed = submissions(tmp_path, coursedir, a, [f"{a}.ipynb"], None, None)
    todo, why = plan(students, changed, state, set(students), regrade=False)
    assert todo == ["ada", "bob"]
    assert why["ada"] == "the grader's limits changed since it was graded (GRADER_CELL_TIMEOUT 30 -> 60)"
    monkeypatch.setenv("GRADER_CELL_TIMEOUT", "30")     # the same value, set explicitly: nothing to grade
    assert plan(students, submissions(tmp_path, coursedir, a, [f"{a}.ipynb"], None, None)[1], state,
                set(students), regrade=False) == ([], {})


# --- the default path: plain `nbgrader autograde` with the course's nbgrader_config.py ----------------

_GENERATED: dict[tuple[str, ...], Path] = {}     # assignments -> a course this test process generated them in


def new_course(root: Path, assignments: list[str]) -> dict:
    """A course folder with the repository's configuration and the given assignments generated (by `nbgrader
    generate_assignment`, once per test process: later courses get a copy of that course's files and gradebook)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GRADER_REPORTS": str(root / "reports")}
    key = tuple(assignments)
    if key not in _GENERATED:
        template = Path(tempfile.mkdtemp(prefix="tfm-generated-"))
        atexit.register(shutil.rmtree, template, True)
        shutil.copy(ROOT / "nbgrader_config.py", template)
        for a in assignments:
            shutil.copytree(ROOT / "solutions" / a, template / "solutions" / a)
            proc = subprocess.run(["nbgrader", "generate_assignment", a, "--force"], cwd=template, env=env,
                                  capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr[-2000:]
        _GENERATED[key] = template
    shutil.copytree(_GENERATED[key], root, dirs_exist_ok=True)
    return env


def autograde(root: Path, env: dict, assignment: str, *flags: str) -> dict[str, dict]:
    """Run plain `nbgrader autograde` and return {student: {score, max_score, report}}."""
    import json

    from nbgrader.api import Gradebook
    proc = subprocess.run(["nbgrader", "autograde", assignment, "--force", *flags], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1800)   # a hung batch fails, never stalls CI
    out = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(assignment):
            report = root / "reports" / assignment / f"{sub.student_id}.json"
            out[sub.student_id] = {"score": sub.score, "max_score": sub.max_score,
                                   "report": json.loads(report.read_text()) if report.exists() else {}}
    out["_log"] = proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def flags_of(report: dict) -> list[str]:
    return [f for nb in report.values()
            for f in nb.get("forged", []) + nb.get("flags", []) + nb.get("attempts", [])
             + nb.get("verification", [])]


@pytest.mark.slow
def test_default_autograde_grades_the_whole_suite(tmp_path):
    """The adversarial suite and the correct styles through plain `nbgrader autograde`, no extra flag."""
    require_bwrap()
    from fixtures.make_class import graded_end_to_end, make_class
    a = "03_self_attention"
    env = new_course(tmp_path, [a])
    expected = make_class(tmp_path, [a], kinds={a: graded_end_to_end})
    for student in [s for s in expected if "invalid-json" in s or "renamed" in s]:
        del expected[student]       # nbgrader alone cannot read these; scripts/grade.py reports them
        shutil.rmtree(tmp_path / "submitted" / student)
    graded = autograde(tmp_path, env, a)
    for student, e in expected.items():
        g = graded.get(student)
        assert g is not None, (student, graded["_log"])
        if e["expect"] == "full":
            assert g["score"] == g["max_score"] > 0 and not flags_of(g["report"]), (student, g)
        else:
            assert g["score"] < g["max_score"], (student, g)
        if e["expect"] == "flag":
            assert flags_of(g["report"]), (student, g)
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("select count(*) from grade where manual_score is not null").fetchone()[0] == 0
    # Formgrader's flag column: what the grader flagged is flagged in the gradebook, and so is a copy that copy
    # detection found (this path compares each notebook with the course's own code: red-team round 23 pasted the
    # worked solution and graded it here); an honest answer is not
    from tfmgrader import verdicts
    flagged = flagged_in_gradebook(tmp_path, a)
    found = verdicts.load(f"sqlite:///{tmp_path / 'gradebook.db'}", a)
    copies = {s for (_, s), v in found.items() if v["similar_to"]}
    for student, e in expected.items():
        if e["expect"] in ("flag", "full"):
            assert flagged[student] == (e["expect"] == "flag" or student in copies), (student, e)
    plain = found[(a, "03c0-correct-plain")]       # the worked solution, pasted
    assert "scaled_dot_product_attention ~ solutions/03_self_attention" in plain["similar_to"], plain
    assert plain["status"] == "graded" and float(plain["similarity"]) >= 0.9, plain
    honest = [s for s in expected if "correct-style-" in s]
    assert len([s for s in honest if s not in copies]) >= len(honest) - 1, (honest, copies)
    # and every grade, status and reason is the one recorded before issue 34's refactor
    same_as_recorded("nbgrader", {s: (g["score"], g["max_score"], found[(a, s)]["status"], found[(a, s)]["reason"])
                                  for s, g in graded.items() if s != "_log"})


TAMPERING = ["module-attributes", "namespace-dict", "vars", "setattr", "sys-modules", "code-object",
             "fake-check-object", "builtins-isinstance", "tensor-eq", "alias-tensor-class", "exception-hook",
             "rebind-allclose", "exec-string", "importlib", "dunder-import", "test-variable-in-function",
             "trace-forgery", "blank-line-body", "print-forgery", "frame-globals", "symlink-notebook", "fifo-trace",
             "audit-fd-close", "profile-off", "redteam1-class-body-test-module", "redteam1-match-private-attribute",
             "redteam1-nested-class-foreign-self", "redteam1-test-module-top-level"]


@pytest.mark.slow
@pytest.mark.parametrize("path", ["nbgrader", "grade.py"])
def test_verdicts_hold_when_the_scan_is_off(tmp_path, path):
    """Defence in depth: with the scan switched off, tampering inside the learner's kernel still cannot
    turn a wrong answer into marks, because the verdicts are reached again outside it."""
    require_bwrap()
    from fixtures.make_class import make_class
    a = "03_self_attention"
    env = new_course(tmp_path, [a])
    # Each tampering attack on one path (alternately, to keep CI lean): both paths run nbgrader's Autograde with the
    # course's hardened pipeline (nbgrader_config.py); the honest answers and the shortcut on both.
    half = TAMPERING[["nbgrader", "grade.py"].index(path)::2]
    wanted = {"correct-plain", "correct-style-einsum-where", "attack-shortcut-called", *(f"attack-{k}" for k in half)}
    expected = make_class(tmp_path, [a], kinds={a: wanted})
    if path == "nbgrader":
        graded = autograde(tmp_path, env, a, "--ScanSubmission.enabled=False")
        scores = {s: (g["score"], g["max_score"], flags_of(g["report"])) for s, g in graded.items() if s != "_log"}
    else:
        cfg = tmp_path / "noscan.py"
        cfg.write_text("c = get_config()\nc.ScanSubmission.enabled = False\n")
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), a, "--course", str(tmp_path),
                               "--extra-config", str(cfg)], env=env, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        with open(tmp_path / "grading" / a / "grades.csv") as f:
            scores = {r["student_id"]: (float(r["score"]), float(r["max_score"]), [r["reason"]] if r["status"] == "flagged" else [])
                      for r in csv.DictReader(f)}
    caught = 0
    for student, e in expected.items():
        score, best, flags = scores[student]
        if e["expect"] == "full":
            assert score == best > 0 and not flags, (student, scores[student])
        else:
            assert score < best, (student, scores[student])
            caught += bool(flags)
        if student.endswith("attack-shortcut-called"):   # the guard refused a call: not the answer switching it off
            assert not any("switch the check" in f for f in flags), (student, flags)
        if student.endswith("attack-exec-string"):       # the kernel's audit hook: code run from a string (round 20)
            assert any("run code from a string (exec," in f for f in flags), (student, flags)
    # The kernel decides nothing (tfmcheck.withheld): rebinding its checks changes no verdict and is not reported;
    # tampering with the record or the audit channel, and switching the shortcut check off, are.
    assert caught >= 2, (f"tampering with the trace, the audit channel or the shortcut check is reported as flagged "
                         f"({caught} of this half flagged)")


def test_autograde_refuses_to_run_unsandboxed(monkeypatch):
    """Without bubblewrap, autograding stops with a message saying how to install it or opt out."""
    from tfmgrader.preprocessors import NO_BWRAP, SandboxedExecute
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("TFMLIB_GRADING_UNSAFE", raising=False)
    with pytest.raises(RuntimeError, match="bubblewrap"):
        SandboxedExecute()._sandboxed()
    assert "apt-get install bubblewrap" in NO_BWRAP and "TFMLIB_GRADING_UNSAFE=1" in NO_BWRAP
    monkeypatch.setenv("TFMLIB_GRADING_UNSAFE", "1")
    assert SandboxedExecute()._sandboxed() is False
    monkeypatch.delenv("TFMLIB_GRADING_UNSAFE")
    with pytest.raises(RuntimeError, match="TFMLIB_GRADING_UNSAFE"):
        SandboxedExecute(sandbox=False)._sandboxed()


def test_course_config_uses_the_hardened_pipeline_for_autograde_only():
    """The course's nbgrader_config.py selects the hardened pipeline for Autograde and leaves Validate alone. It names
    the pipeline's classes and hook without importing them: loading it (every nbgrader command, the learners'
    JupyterLab) imports neither PyTorch nor the grading pipeline, and each name is one nbgrader can import."""
    from nbconvert.preprocessors import Preprocessor
    from nbgrader.converters import Autograde
    from traitlets.config.loader import PyFileConfigLoader
    from traitlets.utils.importstring import import_item
    code = ("import sys\nfrom traitlets.config.loader import PyFileConfigLoader\n"
            f"PyFileConfigLoader('nbgrader_config.py', path={str(ROOT)!r}).load_config()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tfmcheck')"
            " or m in ('tfmgrader.preprocessors', 'tfmgrader.scan', 'tfmgrader.selfcheck')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"loading the configuration imported {loaded}"
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    names = [p.rsplit(".", 1)[1] for p in cfg.Autograde.autograde_preprocessors]
    assert names[:2] == ["SandboxedExecute", "VerifyOutside"]
    assert "ScanSubmission" in [p.rsplit(".", 1)[1] for p in cfg.Autograde.sanitize_preprocessors]
    for name in cfg.Autograde.autograde_preprocessors + cfg.Autograde.sanitize_preprocessors:
        assert issubclass(import_item(name), Preprocessor), name
    converter = Autograde(config=cfg)
    assert converter.exporter_class.__name__ == "GradingExporter"
    assert converter.pre_convert_hook.__module__ == "tfmgrader.selfcheck"
    assert "Validator" not in cfg and "KernelManager" not in cfg, "Validate keeps nbgrader's own kernel"


# --- the multi-user exchange: release -> fetch -> submit -> collect -> autograde -> feedback ----------

def as_user(user, argv, cwd, env_extra=None):
    """Run ``argv`` as the Unix account ``user`` (we are root): a bubblewrap view of the system in
    which root's home is replaced by an empty folder holding only the Python installation, so the
    student can run the course's Python but not read root's files."""
    base = os.path.realpath(sys.base_prefix)
    home = f"/home/{user}"
    env = {"HOME": home, "USER": user, "LOGNAME": user, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
           "LANG": "C.UTF-8", **(env_extra or {})}
    if str(ROOT / "scripts" / "hub") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts" / "hub"))
    from course_spawner import python_view     # the same view the class's JupyterHub starts servers in
    cmd = ["bwrap", *python_view(base), "--chdir", str(cwd), "--clearenv"]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    cmd += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"] + argv
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.slow
def test_exchange_round_trip_with_two_student_accounts():
    require_bwrap()
    require_root("nbgrader exchange", "the exchange round trip creates two Unix accounts")
    import pwd

    students = ["tfm_student1", "tfm_student2"]
    for s in students:
        try:
            pwd.getpwnam(s)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", s], check=True)
    assignment = "03_self_attention"
    work = Path(tempfile.mkdtemp(prefix="exchange-test-"))
    exchange = work / "exchange"
    exchange.mkdir()
    os.chmod(work, 0o755)
    os.chmod(exchange, 0o777)
    course = work / "instructor"
    course.mkdir(mode=0o700)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / assignment, course / "solutions" / assignment)
    flags = [f"--Exchange.root={exchange}", "--CourseDirectory.course_id=tfm-test"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def instructor(*args):
        proc = subprocess.run(["nbgrader", *args, *flags], cwd=course, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc

    def student(user, *args):
        home = Path(f"/home/{user}")
        proc = as_user(user, ["nbgrader", *args, *flags], home)
        assert proc.returncode == 0, (user, args, proc.stdout[-2000:], proc.stderr[-2000:])
        return proc

    instructor("generate_assignment", assignment, "--force")
    instructor("release_assignment", assignment, "--force")
    from tfmgrader.notebooks import answered
    source = nbformat.read(course / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    for user in students:
        home = Path(f"/home/{user}")
        shutil.rmtree(home / assignment, ignore_errors=True)
        student(user, "fetch_assignment", assignment)
        fetched = home / assignment / f"{assignment}.ipynb"
        assert fetched.exists() and fetched.stat().st_uid == pwd.getpwnam(user).pw_uid
        nb = nbformat.read(fetched, as_version=4)
        if user == students[0]:
            nb = answered(nb, source)           # the first student answers everything
        staged = work / f"{user}.ipynb"
        nbformat.write(nb, staged)
        os.chmod(staged, 0o644)
        proc = as_user(user, ["cp", str(staged), str(fetched)], home)
        assert proc.returncode == 0, proc.stderr
        student(user, "submit", assignment)
    # The second student cannot see the first one's submission in the exchange.
    peek = as_user(students[1], ["ls", str(exchange / "tfm-test" / "inbound")], Path(f"/home/{students[1]}"))
    assert peek.returncode != 0 or students[0] not in peek.stdout

    instructor("collect", assignment)
    for user in students:
        assert (course / "submitted" / user / assignment / f"{assignment}.ipynb").exists()
    for run in range(2):    # a submission the machine was too busy to grade is 'timed out'; the guide's
        proc = subprocess.run(  # remedy is to run grade.py again, which grades only that one
            [sys.executable, str(ROOT / "scripts" / "grade.py"), assignment, "--course", str(course)],
            env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        with open(course / "grading" / assignment / "grades.csv") as f:
            grades = {r["student_id"]: r for r in csv.DictReader(f)}
        if all(g["status"] != "timed out" for g in grades.values()):
            break
    for user in students:                   # feedback exists only for a graded submission
        assert grades[user]["status"] == "graded", (user, grades[user], proc.stdout[-3000:])
    assert float(grades[students[0]]["score"]) == float(grades[students[0]]["max_score"]) > 0
    assert float(grades[students[1]]["score"]) == 0
    instructor("generate_feedback", assignment, "--force")
    instructor("release_feedback", assignment)
    for user in students:
        fetch = student(user, "fetch_feedback", assignment)
        html = list((Path(f"/home/{user}") / assignment / "feedback").rglob("*.html"))
        released = sorted(p.name for p in (exchange / "tfm-test" / "feedback").glob("*.html"))
        assert html, (f"no feedback fetched for {user}", released, fetch.stdout[-2000:], fetch.stderr[-2000:])
        text = html[0].read_text()
        assert grades[user]["max_score"].rstrip("0").rstrip(".") in text
    shutil.rmtree(work, ignore_errors=True)


def test_mistakes_count_cascades_and_withheld_answers_on_their_own_rows(tmp_path):
    """mistakes.csv: a failure the feedback blames on another function ("fix ... first") counts against that
    function, not as "no named cause"; a withheld answer has a row of its own."""
    from tfmcheck.feedback import CATALOGUE, fix_first
    from tfmcheck import checking as check
    from tfmgrader import mistakes
    source = ROOT / "solutions" / "03_self_attention" / "03_self_attention.ipynb"
    first = CATALOGUE["scaled_dot_product_attention"][0]
    cascade = str(fix_first(check.CheckFailure("out: values differ"), "out", "self_attention",
                            ["scaled_dot_product_attention"], cause="only"))

    def graded(name, outputs):
        nb = nbformat.read(source, as_version=4)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid in outputs:
                cell.outputs = [nbformat.v4.new_output("error", ename=e, evalue=v, traceback=[])
                                for e, v in [outputs[gid]]]
        nbformat.write(nb, tmp_path / name)
        return [tmp_path / name]
    withheld = graded("withheld.ipynb", {
        "sdpa": ("RuntimeError", f"{mistakes.WITHHELD} and will be reviewed by an instructor: assigns to 'x'"),
        "test_sdpa_values": ("NameError", "name 'scaled_dot_product_attention' is not defined")})
    wrong = graded("wrong.ipynb", {"test_sdpa_values": ("CheckFailure", f"weights: {first.sentence}"),
                                   "test_self_attention": ("CheckFailure", cascade)})
    rows = mistakes.aggregate("03_self_attention", [source], {"s1": withheld, "s2": wrong})
    got = {(r["function"], r["kind"], r["mistake"]): r["students"] for r in rows}
    assert got[("scaled_dot_product_attention", "failed", "")] == 2
    assert got[("scaled_dot_product_attention", "answer withheld", "")] == 1
    assert got[("scaled_dot_product_attention", "named mistake", first.name)] == 1
    assert got[("scaled_dot_product_attention", "no named cause", "")] == 0
    assert got[("self_attention", "caused by another function", "scaled_dot_product_attention")] == 1
    assert got[("self_attention", "no named cause", "")] == 0
    mistakes.plot(tmp_path / "mistakes.png", "03_self_attention", rows)


def test_a_long_reason_wraps_between_words():
    from tfmgrader.batch import row_lines
    reason = "cell 4, line 5: assigns to 'torch.allclose' (answers may only set attributes of their own objects)"
    lines = row_lines({"student_id": "s", "score": 0, "max_score": 11, "status": "flagged", "seconds": 1.0,
                       "reason": reason * 2}, width=80)
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines), lines
    assert " ".join(" ".join(line.split()) for line in lines).endswith(" ".join((reason * 2).split()))
    for width in (100, 200):
        lines = row_lines({"student_id": "s", "score": 0, "max_score": 11, "status": "flagged", "seconds": 1.0,
                           "reason": reason}, width=width)
        assert all(len(line) <= width for line in lines), lines


def test_grade_help_is_complete(capsys):
    """grade.py --help: the whole first sentence, every option, and the docstring's details to the end."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import grade
    with pytest.raises(SystemExit):
        grade.main(["--help"])
    text = capsys.readouterr().out
    assert "and write grades.csv and a report per submission." in text
    assert "--students" in text and "merge them into the class's results" in text
    assert text.rstrip().endswith("does not get full marks.")
    assert "GRADER_CELL_TIMEOUT=60" in text and "``" not in text


def test_some_students_merge_into_the_rows_of_the_class(tmp_path):
    """write_grades: with --students, the class of an output folder is those selected now plus those graded into
    it before; every row of that class is written, the others as they were."""
    from tfmgrader.batch import State, write_grades
    students, fps = ["ada", "bob", "eve"], {"ada": "1", "bob": "2", "eve": "3"}
    state = State(tmp_path)
    for s in students:
        state.mark_done(s, {"student_id": s, "score": 1.0, "status": "graded", "reason": ""}, fps[s])
    complete, klass = write_grades(tmp_path, students, ["bob"], fps, state, None, {"bob"})
    assert klass == students and set(complete) == set(students)
    with open(tmp_path / "grades.csv") as f:
        assert [r["student_id"] for r in csv.DictReader(f)] == students
    fresh = State(tmp_path / "fresh")       # a new folder: the class is the students selected
    fresh.mark_done("bob", {"student_id": "bob"}, fps["bob"])
    assert write_grades(tmp_path / "fresh", students, ["bob"], fps, fresh, None, {"bob"})[1] == ["bob"]
    stale = {**fps, "eve": "changed"}       # eve's submission changed since: grades.csv waits for her
    (tmp_path / "grades.csv").unlink()
    assert write_grades(tmp_path, students, ["bob"], stale, state, None, {"bob"})[1] == students
    assert not (tmp_path / "grades.csv").exists()


def test_grades_csv_is_written_once_with_the_class_reports_columns(tmp_path):
    """Issue 34: the class reports run before grades.csv is written, and it is written once, with their columns;
    reports that fail leave the grades with empty columns."""
    from tfmgrader.batch import State, write_grades
    students, fps = ["ada", "bob"], {"ada": "1", "bob": "2"}
    state = State(tmp_path)
    for s in students:
        state.mark_done(s, {"student_id": s, "score": 1.0, "status": "graded", "reason": ""}, fps[s])
    seen = []

    def reports(klass, rows):
        seen.append((klass, [r["student_id"] for r in rows], (tmp_path / "grades.csv").exists()))
        return {"bob": {"similar_to": "f ~ tfmlib (0.95)", "similarity": "0.95"},
                "ada": {"similar_to": "", "similarity": ""}}

    write_grades(tmp_path, students, students, fps, state, None, None, reports)
    assert seen == [(students, students, False)]
    with open(tmp_path / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["student_id"], r["similarity"]) for r in rows] == [("ada", ""), ("bob", "0.95")]

    def broken(klass, rows):
        raise RuntimeError("no similarity today")

    write_grades(tmp_path, students, students, fps, state, None, None, broken)
    with open(tmp_path / "grades.csv") as f:
        assert [(r["student_id"], r["score"], r["similar_to"]) for r in csv.DictReader(f)] == \
            [("ada", "1.0", ""), ("bob", "1.0", "")]


def test_verdicts_flag_the_gradebook_and_reach_export_and_formgrader(tmp_path):
    """verdicts.save: a flagged status flags the submission with the grader's comment; a later clean grade
    clears both; an instructor's own flag is kept; a copy suspicion flags without a comment; the export plugin
    and Formgrader's flags page show them all."""
    from nbgrader.api import Gradebook
    from tfmgrader import verdicts
    from tfmgrader.export import export_rows
    from tfmgrader.formgrader_page import render, review_rows
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("a1")
        gb.add_notebook("nb", "a1")
        gb.add_solution_cell("answer", "nb", "a1")
        gb.add_grade_cell("test", "nb", "a1", max_score=2, cell_type="code")
        for s, (first, last) in {"ada": ("Ada", "L"), "bob": ("Bob", "B"), "eve": ("Eve", "E")}.items():
            gb.add_student(s, first_name=first, last_name=last)
            gb.add_submission("a1", s)

    def state(student):
        with Gradebook(url) as gb:
            nb = gb.find_submission_notebook("nb", "a1", student)
            return nb.flagged, nb.comments[0].auto_comment
    verdicts.save(url, "a1", "ada", comment_cell=("nb", "answer"), status="flagged", reason="assigns to 'x'")
    verdicts.save(url, "a1", "bob", comment_cell=("nb", "answer"), status="graded", reason="")
    verdicts.save_many(url, "a1", {"eve": {"similar_to": "f ~ tfmlib: f (0.97)", "similarity": "0.97"},
                                   "bob": {"similar_to": "", "similarity": ""}})
    assert state("ada") == (True, f"{verdicts.COMMENT_MARK}: flagged. assigns to 'x'")
    assert state("bob") == (False, None) and state("eve") == (True, None)
    rows = {r["student_id"]: r for r in export_rows(Gradebook(url))}
    assert (rows["ada"]["status"], rows["ada"]["reason"], rows["eve"]["similar_to"]) == (
        "flagged", "assigns to 'x'", "f ~ tfmlib: f (0.97)")
    page = render(review_rows(url), "/user/i/")
    assert "Ada L (ada)" in page and "assigns to &#39;x&#39;" in page and "f ~ tfmlib: f (0.97)" in page
    assert 'data-student="ada"' in page and 'data-student="bob"' not in page
    verdicts.save(url, "a1", "ada", status="graded", reason="")        # graded again, clean: unflagged
    assert state("ada") == (False, None)
    with Gradebook(url) as gb:                                          # the instructor flags bob by hand
        gb.find_submission_notebook("nb", "a1", "bob").flagged = True
        gb.db.commit()
    verdicts.save(url, "a1", "bob", status="graded", reason="")
    assert state("bob")[0] is True


def test_one_report_layout_refreshed_from_the_gradebook(tmp_path, monkeypatch):
    """report.render is the one layout of a submission's report (grade.py and plain autograde alike, compared end to end
    in tests/tfmgrader/test_instructor_walkthrough.py); refresh brings a written report up to date with the gradebook (each
    test's score, the verdict's copy suspicion) and keeps what the grading run found.  nbgrader's own tables are
    stood in for (creating a gradebook costs seconds): the verdict table is real."""
    import json

    from tfmgrader import report as reports
    from tfmgrader import verdicts
    from tfmgrader.report import FIELDS, NotebookReport, Status, SubmissionReport, refresh, render, write_report
    tests = [{"notebook": "a1.ipynb", "test": "test_f", "score": 2.0, "max_score": 3.0}]
    import contextlib

    import nbgrader.api
    monkeypatch.setattr(verdicts, "mark", lambda *args: None)       # the gradebook's flag: tested with a gradebook
    monkeypatch.setattr(nbgrader.api, "Gradebook", contextlib.nullcontext)
    monkeypatch.setattr(reports, "gradebook_scores", lambda db, a, s, gb=None: (2.0, 5.0, tests))
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    findings = SubmissionReport({"a1.ipynb": NotebookReport(flags=["cell 3, line 2: rebinds '_ref'"],
                                                            stray_files=["data.csv"])})
    status, reason = findings.status({"success": True})
    folder = tmp_path / "grading" / "a1" / "reports"
    write_report(folder, render("a1", "s1", status=status, reason=reason, score=0, max_score=5, tests=[],
                                findings=findings))
    verdicts.save(db, "a1", "s1", status=str(status), reason=reason, similar_to="f ~ s2 (0.97)", similarity="0.97")
    assert refresh(folder, db, "a1") == ["s1"]
    report = json.loads((folder / "s1.json").read_text())
    assert list(report) == FIELDS and report["status"] == str(Status.FLAGGED) == "flagged"
    assert (report["similar_to"], report["similarity"]) == ("f ~ s2 (0.97)", "0.97")
    assert (report["score"], report["tests"]) == (2.0, tests)
    assert report["notes"]["scan"] == ["cell 3, line 2: rebinds '_ref'"] and report["files"]["stray"] == ["data.csv"]
    page = (folder / "s1.md").read_text()
    assert "Copy detection flagged it" in page and "rebinds '_ref'" in page and "| a1.ipynb | test_f | 2 / 3 |" in page


@pytest.mark.slow
def test_a_deleted_setup_cell_comes_back_and_learner_markup_is_shown_as_text(tmp_path):
    """Rounds 11 and 13 of the blind red team.  (1) A submission without its read-only setup cell gets it back where the
    instructor's notebook has it: an honest one keeps full marks, and the setup's names stay protected (a learner's
    own ``torch`` is flagged, as with the cell present).  (2) Formgrader shows the autograded notebook through
    nbconvert without sanitising it: a learner's Markdown or raw cell holding HTML or script is shown there as
    text, the instructor's own cells as they were, and no output keeps a type a browser would run.  (3) A
    ``skip-execution`` tag on the setup cell is dropped.  (4) A resubmission's report starts afresh on plain
    nbgrader autograde (an earlier run's 'invalid' once stuck to the honest notebook that followed).  (5) A page
    submitted beside the notebook (``.html``, ``.svg``) is kept as ``.txt`` in the autograded folder (round 15)."""
    require_bwrap()
    from nbconvert import HTMLExporter

    a = "03_self_attention"
    env = new_course(tmp_path, [a])
    release = nbformat.read(tmp_path / "notebooks" / a / f"{a}.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / a / f"{a}.ipynb", as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    honest = copy.deepcopy(release)
    for c in honest.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            c.source = answers[gid]
    setup = next(i for i, c in enumerate(honest.cells) if c.cell_type == "code" and
                 c.metadata.get("nbgrader", {}).get("locked") and not c.metadata["nbgrader"].get("grade"))
    payload = '<img src="x" onerror="document.title=\'owned\'"><script>document.title="owned"</script>'
    students = {}
    students["no-setup"] = copy.deepcopy(honest)
    del students["no-setup"].cells[setup]
    students["no-setup-own-torch"] = copy.deepcopy(students["no-setup"])
    students["no-setup-own-torch"].cells.insert(0, nbformat.v4.new_code_cell("import numpy as torch"))
    students["markup"] = copy.deepcopy(honest)
    students["markup"].cells.insert(setup + 1, nbformat.v4.new_markdown_cell(f"My notes.\n\n{payload}\n```\nx\n```"))
    students["markup"].cells.insert(setup + 1, nbformat.v4.new_raw_cell(payload, metadata={"format": "text/html"}))
    students["tags"] = copy.deepcopy(honest)            # round 13: tags nbclient obeys, set by the learner
    students["tags"].cells[setup].metadata["tags"] = ["skip-execution"]
    students["resubmits"] = copy.deepcopy(honest)       # first a notebook with a test cell twice: invalid
    test_cell = next(c for c in honest.cells if c.metadata.get("nbgrader", {}).get("grade"))
    students["resubmits"].cells.append(copy.deepcopy(test_cell))
    for student, nb in students.items():
        dest = tmp_path / "submitted" / student / a
        dest.mkdir(parents=True)
        nbformat.write(nb, dest / f"{a}.ipynb")
    (tmp_path / "submitted" / "markup" / a / "my_plot.html").write_text(payload)      # round 15: a page beside it
    graded = autograde(tmp_path, env, a)
    for student in ("no-setup", "markup", "tags"):
        g = graded[student]
        assert g["score"] == g["max_score"] > 0 and not flags_of(g["report"]), (student, g)
    report = tmp_path / "reports" / a / "resubmits.json"
    assert any(nb.get("invalid") for nb in json.loads(report.read_text()).values())
    nbformat.write(honest, tmp_path / "submitted" / "resubmits" / a / f"{a}.ipynb")     # then the honest one
    again = autograde(tmp_path, env, a, "--student", "resubmits")["resubmits"]
    assert again["score"] == again["max_score"] and not any(nb.get("invalid") for nb in again["report"].values()), \
        "plain nbgrader autograde starts the report afresh: nothing of the earlier run sticks"
    g = graded["no-setup-own-torch"]
    assert any("rebinds 'torch'" in f for f in flags_of(g["report"])), g
    restored = nbformat.read(tmp_path / "autograded" / "no-setup" / a / f"{a}.ipynb", as_version=4)
    assert [c.source for c in restored.cells if c.cell_type == "code"][:1] == [release.cells[setup].source]
    shown = nbformat.read(tmp_path / "autograded" / "markup" / a / f"{a}.ipynb", as_version=4)
    page, _ = HTMLExporter().from_notebook_node(shown)
    assert not re.search(r"<img[^>]*onerror", page) and "&lt;img" in page, "the learner's HTML is shown as text"
    assert not re.search(r"<script>document\.title", page) and "My notes." in page
    instructors = [c.source for c in release.cells if c.cell_type == "markdown"]
    assert [c.source for c in shown.cells if c.cell_type == "markdown" and c.source in instructors] == instructors
    assert all(set(o.get("data", {})) <= {"text/plain", "image/png", "image/jpeg"}
               for c in shown.cells if c.cell_type == "code" for o in c.outputs)
    # Formgrader serves a submission's files from the instructor's origin: a page is kept only as text there
    autograded = tmp_path / "autograded" / "markup" / a
    assert not (autograded / "my_plot.html").exists() and (autograded / "my_plot.html.txt").read_text() == payload
    assert (tmp_path / "submitted" / "markup" / a / "my_plot.html").exists(), "the submission itself is untouched"
