"""Only what the assignment released reaches the grading kernel: files a learner submits beside the notebook
are withheld and reported (grader/tfmgrader/submission_files.py, book/appendix/grading.md)."""
import csv
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]

from tfmgrader import submission_files as sf  # noqa: E402

A = "03_self_attention"


# --- which files, and what they are -------------------------------------------------------------------

def write_files(folder: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def checkpoint_bytes(tmp_path: Path) -> bytes:
    """What torch.save writes: a zip archive."""
    with zipfile.ZipFile(tmp_path / "ckpt.zip", "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    return (tmp_path / "ckpt.zip").read_bytes()


def test_code_links_and_hidden_files_flag_and_honest_strays_are_listed(tmp_path):
    folder = tmp_path / "sub"
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    write_files(folder, {
        f"{A}.ipynb": "{}", "timestamp.txt": "2026-01-01 00:00:00",
        "helpers.py": "x = 1", "pkg/__init__.py": "", "pkg/mod.py": "y = 2", "evil.pth": "import os\n",
        "sitecustomize.py": "", "usercustomize.py": "", ".hidden": "x", "fast.so": b"\x7fELF",
        "lib.zip": b"PK\x03\x04", "notes": "what is this",
        ".ipynb_checkpoints/03_self_attention-checkpoint.ipynb": "{}", "__pycache__/helpers.cpython-311.pyc": b"\x00",
        ".DS_Store": b"\x00", "model.pt": b"PK\x03\x04", "weights.pth": checkpoint_bytes(tmp_path),
        "scratch.ipynb": "{}", "data/train.csv": "a,b\n1,2\n",
    })
    os.symlink(outside, folder / "link.py")
    os.symlink(outside, folder / "data.txt")             # a link is a link, whatever its name says
    flagged, stray = sf.inventory([folder], {f"{A}.ipynb"})
    assert set(flagged) == {"helpers.py", "pkg/__init__.py", "pkg/mod.py", "evil.pth", "sitecustomize.py",
                            "usercustomize.py", ".hidden", "fast.so", "lib.zip", "notes", "link.py", "data.txt"}
    assert flagged["link.py"] == "a link" and flagged["evil.pth"] == "a Python path-configuration file"
    assert flagged["sitecustomize.py"] == "Python start-up code" and flagged[".hidden"] == "a hidden file"
    assert stray == [".DS_Store", ".ipynb_checkpoints/03_self_attention-checkpoint.ipynb",
                     "__pycache__/helpers.cpython-311.pyc", "data/train.csv", "model.pt", "scratch.ipynb",
                     "weights.pth"]
    message = sf.flag_message(flagged)
    assert "helpers.py (Python code)" in message and "link.py (a link)" in message
    # The notebook itself, submitted as a link, flags too (nbgrader would read whatever it points to).
    (folder / f"{A}.ipynb").unlink()
    os.symlink(outside, folder / f"{A}.ipynb")
    assert sf.inventory([folder], {f"{A}.ipynb"})[0][f"{A}.ipynb"] == "a link"


def test_the_allowed_set_is_the_release_and_the_gradebook_notebooks(tmp_path):
    release = tmp_path / "release"
    write_files(release, {f"{A}.ipynb": "{}", "data/table.csv": "1", ".ipynb_checkpoints/x.ipynb": "{}",
                          "timestamp.txt": "t"})
    allowed = sf.allowed_files(release, [A, "second"], [".ipynb_checkpoints", "*.pyc"])
    assert allowed == {f"{A}.ipynb", "second.ipynb", "data/table.csv"}
    assert sf.allowed_files(tmp_path / "missing", [A]) == {f"{A}.ipynb"}


def test_only_allowed_regular_files_are_copied_never_through_a_link(tmp_path):
    work, scratch, outside = tmp_path / "work", tmp_path / "scratch", tmp_path / "outside"
    write_files(work, {f"{A}.ipynb": "{}", "helpers.py": "x = 1", "data/table.csv": "1"})
    write_files(outside, {"table.csv": "secret", "n.ipynb": "secret"})
    os.symlink(outside, work / "linked")                 # a folder link
    os.symlink(outside / "n.ipynb", work / "n.ipynb")    # a file link with an allowed name
    os.mkfifo(work / "fifo.ipynb")
    scratch.mkdir()
    names = [f"{A}.ipynb", "data/table.csv", "linked/table.csv", "n.ipynb", "fifo.ipynb", "../outside/table.csv",
             "/etc/passwd"]
    assert sf.copy_allowed(work, scratch, names) == [f"{A}.ipynb", "data/table.csv"]
    assert sorted(p.relative_to(scratch).as_posix() for p in scratch.rglob("*")) == \
        ["03_self_attention.ipynb", "data", "data/table.csv"]
    # Without an allow-list (a kernel started outside SandboxedExecute), only the top-level notebooks.
    assert sf.read_allowed(tmp_path / "private", work) == [f"{A}.ipynb", "fifo.ipynb", "n.ipynb"]
    assert sf.copy_allowed(work, tmp_path / "s2", sf.read_allowed(tmp_path / "private", work)) == [f"{A}.ipynb"]


# --- both grading paths, the scan switched off --------------------------------------------------------

# Every way a learner's cell could reach a file submitted beside the notebook; each that works is printed.
PROBE = r"""import builtins, importlib, os, runpy, sys
_reached = []
def _try(name, f):
    try:
        f()
        _reached.append(name)
    except BaseException:
        pass
_try('import', lambda: exec('import helpers'))
_try('from-import', lambda: exec('from helpers import SECRET'))
_try('__import__', lambda: __import__('helpers'))
_try('importlib', lambda: importlib.import_module('helpers'))
_try('package', lambda: importlib.import_module('pkg.mod'))
_try('open', lambda: open('helpers.py').read())
_try('runpy', lambda: runpy.run_path('helpers.py'))
_try('dotfile', lambda: open('.hidden.py').read())
_try('link', lambda: open('outside_link.py').read())
_try('pth-file', lambda: open('evil.pth').read())
_try('sitecustomize', lambda: open('sitecustomize.py').read())
for _flag in ('PWNED_HELPERS', 'PWNED_SITE', 'PWNED_USER', 'PWNED_PTH'):
    _try(_flag, lambda: getattr(builtins, _flag))
print('REACHED', _reached)
print('FOLDER', sorted(n for n in os.listdir('.') if not n.startswith('.tfmlib-grading')))
"""
HOSTILE_FILES = {
    "helpers.py": "import builtins\nbuiltins.PWNED_HELPERS = True\nSECRET = 1\n",
    "pkg/__init__.py": "", "pkg/mod.py": "import builtins\nbuiltins.PWNED_HELPERS = True\n",
    "evil.pth": "import builtins; builtins.PWNED_PTH = True\n",
    "sitecustomize.py": "import builtins\nbuiltins.PWNED_SITE = True\n",
    "usercustomize.py": "import builtins\nbuiltins.PWNED_USER = True\n",
    ".hidden.py": "SECRET = 1\n",
}
HONEST_FILES = {".ipynb_checkpoints/03_self_attention-checkpoint.ipynb": "{}", ".DS_Store": "\0",
                "__pycache__/helpers.cpython-311.pyc": "\0", "model.pt": "PK\x03\x04..."}


def require_sandbox():
    from conftest import require_bwrap
    require_bwrap()


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """One course, three submissions: the probe with every hostile file (its answers wrong), a correct answer
    with an honest learner's stray files, and a plain correct answer; the scan is off on every path."""
    require_sandbox()
    from fixtures.make_class import attack
    from tfmgrader.notebooks import answered
    from test_grading import new_course

    root = tmp_path_factory.mktemp("files")
    env = new_course(root, [A])
    source = nbformat.read(root / "solutions" / A / f"{A}.ipynb", as_version=4)
    good = answered(nbformat.read(root / "notebooks" / A / f"{A}.ipynb", as_version=4), source)
    secret = root / "solutions" / A / "outside.py"
    secret.write_text("SECRET = 'the instructor'\n")
    for student, nb, files in [("s-probe", attack(good, PROBE), HOSTILE_FILES),
                               ("s-honest", good, HONEST_FILES), ("s-plain", good, {})]:
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")
        write_files(folder, files)
    os.symlink(secret, root / "submitted" / "s-probe" / A / "outside_link.py")
    (root / "noscan.py").write_text("c = get_config()\nc.ScanSubmission.enabled = False\n")
    return root, env


def probe_output(root: Path) -> str:
    nb = nbformat.read(root / "autograded" / "s-probe" / A / f"{A}.ipynb", as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def check_probe(root: Path) -> None:
    out = probe_output(root)
    assert "REACHED []" in out, out[-2000:]
    assert f"FOLDER ['{A}.ipynb']" in out, out[-2000:]


def report_of(root: Path, student: str) -> dict:
    return json.loads((root / "reports" / A / f"{student}.json").read_text())


def check_reports(root: Path) -> None:
    probe = report_of(root, "s-probe")[A]
    withheld = " ".join(probe["withheld"])
    for name in [*HOSTILE_FILES, "outside_link.py"]:
        assert name in withheld, (name, probe["withheld"])
    assert "outside_link.py (a link)" in withheld
    honest = report_of(root, "s-honest")[A]
    assert honest["withheld"] == [] and sorted(honest["stray_files"]) == sorted(HONEST_FILES)
    assert report_of(root, "s-plain")[A]["withheld"] == [] == report_of(root, "s-plain")[A]["stray_files"]


@pytest.mark.slow
def test_plain_nbgrader_withholds_and_reports_submitted_files(course):
    from test_grading import autograde, flags_of
    root, env = course
    graded = autograde(root, env, A, "--ScanSubmission.enabled=False")
    check_probe(root)
    check_reports(root)
    assert graded["s-probe"]["score"] < graded["s-probe"]["max_score"]
    assert "withheld from the grading kernel" in graded["s-probe"]["report"][A]["withheld"][0]
    for student in ("s-honest", "s-plain"):
        g = graded[student]
        assert g["score"] == g["max_score"] > 0 and not flags_of(g["report"]), (student, g, graded["_log"])


@pytest.mark.slow
def test_grade_py_withholds_and_lists_submitted_files(course):
    root, env = course
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), A, "--course", str(root),
                           "--extra-config", str(root / "noscan.py"), "--regrade"], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_probe(root)
    check_reports(root)
    with open(root / "grading" / A / "grades.csv") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    probe = rows["s-probe"]
    assert probe["status"] == "flagged" and float(probe["score"]) < float(probe["max_score"])
    for name in ["helpers.py", "pkg/__init__.py", "evil.pth", "sitecustomize.py", ".hidden.py", "outside_link.py"]:
        assert name in probe["reason"], (name, probe["reason"])
    for student in ("s-honest", "s-plain"):
        r = rows[student]
        assert r["status"] == "graded" and r["reason"] == "" and float(r["score"]) == float(r["max_score"]) > 0, r
    listed = json.loads((root / "grading" / A / "reports" / "s-honest.json").read_text())["files"]
    assert listed == {"withheld": [], "stray": sorted(HONEST_FILES)}


@pytest.mark.slow
def test_the_unsandboxed_opt_out_keeps_submitted_files_off_the_import_path(course):
    """TFMLIB_GRADING_UNSAFE=1: the kernel runs with the grader's rights (it could open any file by its full
    path, which only the scan stops), but it too works in a copy holding only the released files."""
    from test_grading import autograde
    root, env = course
    autograde(root, {**env, "TFMLIB_GRADING_UNSAFE": "1"}, A, "--ScanSubmission.enabled=False", "--student=s-probe")
    check_probe(root)
    assert "helpers.py (Python code)" in " ".join(report_of(root, "s-probe")[A]["withheld"])


def test_grade_py_refuses_a_notebook_submitted_as_a_link(tmp_path):
    """nbgrader would read whatever the link points to (here the instructor's solution) as the submission."""
    from tfmgrader import course

    folder = tmp_path / "sub"
    folder.mkdir()
    os.symlink(ROOT / "solutions" / A / f"{A}.ipynb", folder / f"{A}.ipynb")
    problem = course.check_submission(folder, [f"{A}.ipynb"])
    assert problem and "is a link" in problem
    (folder / f"{A}.ipynb").unlink()
    (folder / f"{A}.ipynb").write_bytes((ROOT / "solutions" / A / f"{A}.ipynb").read_bytes())
    assert course.check_submission(folder, [f"{A}.ipynb"]) is None
