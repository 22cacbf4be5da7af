"""The grader checks itself first (grader/tfmgrader/selfcheck.py) and its sandbox sees the course library however
it was installed (grader/tfmgrader/library_view.py)."""
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]

from tfmgrader.batch import State, plan  # noqa: E402
from tfmgrader.report import SubmissionReport  # noqa: E402
from tfmgrader.library_view import plan_view  # noqa: E402
from tfmgrader.selfcheck import describe, setup_failure  # noqa: E402

A = "01_rnn_limits"
VENV_SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
PACKAGE_FOLDERS = ("tfmlib", "grader/tfmcheck", "grader/tfmgrader")   # what pyproject.toml installs


from conftest import require_bwrap  # noqa: E402  (fail under CI, skip elsewhere)


# --- what the sandbox sees (no kernel needed) ---------------------------------------------------------

def test_library_view_of_each_installation(tmp_path):
    prefix, base = tmp_path / "venv", tmp_path / "base"
    site = prefix / "lib" / "python3.11" / "site-packages"
    checkout, other_site, elsewhere = tmp_path / "checkout", tmp_path / "deps" / "site-packages", tmp_path / "x"
    for folder in (site / "tfmlib", checkout / "tfmlib", other_site, elsewhere, base):
        folder.mkdir(parents=True)
    stdlib = [str(base)]
    # A regular install: nothing beyond the installation.
    view = plan_view(stdlib + [str(site)], [], str(site / "tfmlib"), [str(prefix), str(base)], [str(site)])
    assert view.binds == [] and view.pythonpath == []
    # PYTHONPATH to a checkout: the checkout is never bound; PYTHONPATH is exactly the folder that holds tfmlib.
    view = plan_view([str(checkout), str(elsewhere)] + stdlib + [str(site)], [str(checkout), str(elsewhere)],
                     str(checkout / "tfmlib"), [str(prefix), str(base)], [str(site)])
    assert view.binds == [] and view.pythonpath == [str(checkout)]
    # A site folder outside the installation (added by a .pth file): bound, and the .pth adds it again.
    view = plan_view(stdlib + [str(site), str(other_site)], [], str(site / "tfmlib"), [str(prefix), str(base)],
                     [str(site)])
    assert view.binds == [str(other_site)] and view.pythonpath == []
    # The same folder on PYTHONPATH: bound and kept on the kernel's PYTHONPATH.
    view = plan_view([str(other_site)] + stdlib + [str(site)], [str(other_site)], str(checkout / "tfmlib"),
                     [str(prefix), str(base)], [str(site)])
    assert view.binds == [str(other_site)] and view.pythonpath == [str(checkout), str(other_site)]


def test_sandbox_shows_only_tfmlib_of_a_checkout(tmp_path):
    """With PYTHONPATH to a checkout (and to its scripts/ folder, for tfmcheck), the sandbox binds the folders of
    tfmlib and tfmcheck alone and sets PYTHONPATH to their parents, where nothing else (the solutions, the
    grader beside tfmcheck) exists."""
    checkout = tmp_path / "checkout"
    for package in ("tfmlib", "grader/tfmcheck", "grader/tfmgrader"):
        shutil.copytree(ROOT / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / "solutions").mkdir()
    run = tmp_path / "private" / "run"
    run.mkdir(parents=True, mode=0o700)
    conn = tmp_path / "private" / "kernel.json"
    conn.write_text(json.dumps({"transport": "ipc", "ip": str(run / "kernel")}))
    grading = ROOT / "grader" / "tfmgrader"
    code = (f"import sys; sys.argv = [{str(grading / 'sandbox_kernel.py')!r}]\n"
            "import json\nfrom tfmgrader import sandbox_kernel\n"
            f"print(json.dumps(sandbox_kernel.bwrap_command({str(conn)!r}, {str(tmp_path)!r})))")
    proc = subprocess.run([sys.executable, "-c", code],
                          env={**os.environ, "PYTHONPATH": f"{checkout}:{checkout / 'grader'}"},
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cmd = json.loads(proc.stdout)
    binds = {(cmd[i + 1], cmd[i + 2]) for i, arg in enumerate(cmd) if arg in ("--ro-bind", "--bind")}
    assert (str(checkout / "tfmlib"), str(checkout / "tfmlib")) in binds
    assert (str(checkout / "grader" / "tfmcheck"), str(checkout / "grader" / "tfmcheck")) in binds
    assert not any(src in (str(checkout), str(checkout / "solutions"), str(checkout / "scripts"), str(checkout / "grader"),
                           str(checkout / "grader" / "tfmgrader")) for src, _ in binds), binds
    env = {cmd[i + 1]: cmd[i + 2] for i, arg in enumerate(cmd) if arg == "--setenv"}
    assert env["PYTHONPATH"] == f"{checkout}:{checkout / 'grader'}"


# --- the per-submission guard and the resumable state -----------------------------------------------

def code_cell(gid, source, outputs=(), locked=True, grade_cell=False):
    cell = nbformat.v4.new_code_cell(source)
    if gid:
        cell.metadata["nbgrader"] = {"grade_id": gid, "locked": locked, "grade": grade_cell, "solution": False}
    cell.outputs = [nbformat.NotebookNode(o) for o in outputs]
    return cell


MISSING = {"output_type": "error", "ename": "ModuleNotFoundError", "evalue": "No module named 'tfmlib'",
           "traceback": []}


def test_a_failed_setup_cell_is_the_environments_fault_only_before_learner_code():
    trusted = {"setup": False, "test1": True}
    nb = nbformat.v4.new_notebook(cells=[code_cell("setup", "import tfmlib", [MISSING]),
                                         code_cell("answer", "def f(): pass", locked=False),
                                         code_cell("test1", "f()", grade_cell=True)])
    assert setup_failure(nb, trusted) == ("the read-only setup cell 'setup' failed: tfmlib cannot be imported "
                                          "inside the sandbox: ModuleNotFoundError: No module named 'tfmlib'")
    # A learner's cell moved (or added) above the setup cell: whatever fails after it is graded as usual.
    nb.cells.insert(0, code_cell(None, "import sys"))
    assert setup_failure(nb, trusted) == ""
    assert describe("DeadKernelError", "died").startswith("the kernel died")


def test_an_environment_error_is_never_graded_and_graded_again(tmp_path):
    report = {"nb": {"execution": "ok", "setup_error": "the read-only setup cell 'setup' failed: x"}}
    status, reason = SubmissionReport.from_json(report).status({"success": False, "error": "EnvironmentProblem"})
    assert status == "environment error" and "setup cell" in reason
    state = State(tmp_path)
    state.mark_done("a", {"student_id": "a"}, "fp", saved=False, env_error=True)
    state.mark_done("b", {"student_id": "b"}, "fp", saved=False)
    todo, regraded = plan(["a", "b"], {"a": "fp", "b": "fp"}, state, set(), regrade=False)
    assert todo == ["a"] and "environment error" in regraded["a"]


# --- the check itself, through the whole pipeline --------------------------------------------------------

def base_env(cache: Path) -> dict:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GRADER_SELFCHECK_CACHE": str(cache)}
    for name in ("GRADER_REPORTS", "PYTHONPATH", "GRADER_SELFCHECK"):
        env.pop(name, None)
    return env


def make_course(path: Path, env: dict, setup_line: str = "") -> Path:
    """A course with one small assignment (``setup_line`` added to its read-only setup cell), generated, and
    two submissions: a correct and a wrong one."""
    from fixtures.make_class import make_class

    path.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", path)
    (path / "scripts").symlink_to(ROOT / "scripts")    # the course's grading code, whatever the install
    (path / "grader").symlink_to(ROOT / "grader")
    shutil.copytree(ROOT / "solutions" / A, path / "solutions" / A)
    if setup_line:
        source = path / "solutions" / A / f"{A}.ipynb"
        nb = nbformat.read(source, as_version=4)
        setup = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked")
                     and c.cell_type == "code" and not c.metadata["nbgrader"].get("grade"))
        setup.source = setup_line + "\n" + setup.source
        nbformat.write(nb, source)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", A, "--force"], cwd=path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    make_class(path, [A], kinds={A: {"correct-plain", "wrong-first"}})
    return path


def run_grade(python: str, course: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(ROOT / "scripts" / "grade.py"), A, "--course", str(course), "--jobs", "1",
                           *args], env=env, capture_output=True, text=True, timeout=1800)


def grades_of(course: Path) -> dict[str, dict]:
    with open(course / "grading" / A / "grades.csv") as f:
        return {r["student_id"]: r for r in csv.DictReader(f)}


@pytest.mark.slow
def test_a_broken_environment_stops_the_batch_and_is_graded_again_once_fixed(tmp_path):
    """The setup cell imports a helper the grader finds on PYTHONPATH but the sandbox does not (a folder the
    sandbox never shows): grade.py and plain nbgrader grade nothing and say why; without the check every
    submission is an 'environment error', never 'graded'; once the helper is installed where the sandbox
    sees it, the next run grades them."""
    require_bwrap()
    env = base_env(tmp_path / "cache")
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "course_helpers.py").write_text("ANSWER = 42\n")
    course = make_course(tmp_path / "course", env, "import course_helpers")
    broken = {**env, "PYTHONPATH": str(helpers)}
    why = "course_helpers cannot be imported inside the sandbox: ModuleNotFoundError"

    proc = run_grade(sys.executable, course, broken)
    assert proc.returncode != 0 and why in proc.stderr and "Nothing was graded" in proc.stderr, proc.stderr[-3000:]
    assert not (course / "grading" / A / "grades.csv").exists()
    assert not list((course / "grading" / A / "state").glob("*.done"))

    plain = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", A, "--force"], cwd=course, env=broken,
                           capture_output=True, text=True, timeout=1800)
    assert plain.returncode != 0 and why in plain.stdout + plain.stderr, (plain.stdout + plain.stderr)[-3000:]
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert gb.assignment_submissions(A) == [], "nbgrader stopped before the first submission"

    unchecked = run_grade(sys.executable, course, {**broken, "GRADER_SELFCHECK": "0"})
    assert unchecked.returncode == 0, unchecked.stdout[-3000:] + unchecked.stderr[-3000:]
    rows = grades_of(course)
    assert {r["status"] for r in rows.values()} == {"environment error"}, rows
    assert all(why in r["reason"] for r in rows.values()), rows

    fixed_site = tmp_path / "fixed" / "site-packages"      # installed where the sandbox sees it
    fixed_site.mkdir(parents=True)
    shutil.copy(helpers / "course_helpers.py", fixed_site)
    fixed = run_grade(sys.executable, course, {**env, "PYTHONPATH": str(fixed_site)})
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]
    assert "gets full marks" in fixed.stdout and "2 to grade" in fixed.stdout, fixed.stdout
    report = json.loads((course / "grading" / A / "run-report.json").read_text())
    assert set(report["regraded"]) == set(rows) and all("environment error" in w for w in report["regraded"].values())
    rows = grades_of(course)
    assert rows["01c0-correct-plain"]["status"] == "graded"
    assert float(rows["01c0-correct-plain"]["score"]) == float(rows["01c0-correct-plain"]["max_score"]) > 0
    assert rows["01c0-wrong-first"]["status"] == "graded"
    assert float(rows["01c0-wrong-first"]["score"]) < float(rows["01c0-wrong-first"]["max_score"])


def new_venv(folder: Path, *flags: str) -> str:
    """A virtual environment of the base interpreter whose dependencies (torch, nbgrader, ...) come from the
    course's environment through a .pth file, without tfmlib; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    (Path(site) / "course-deps.pth").write_text(str(VENV_SITE) + "\n")
    return str(python)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """tfmlib built as a wheel, offline, from a copy of the sources (the checkout stays untouched)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for package in PACKAGE_FOLDERS:
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(work / "dist"), str(src)], check=True, capture_output=True)
    return next((work / "dist").glob("tfmlib-*.whl"))


def install(python: str, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["regular", "pythonpath", "conda-style"])
def test_the_solution_is_graded_in_every_installation(setup, wheel, tmp_path_factory):
    """The assignment's solution gets full marks through the whole pipeline (grade.py's self-check) whether
    tfmlib is a regular install into another environment, a checkout on PYTHONPATH, or installed in a prefix with
    system site packages (as a conda environment).  The editable install (the course's .venv) is the one the
    other self-check tests of this file grade with, and each passes the check there ("gets full marks")."""
    require_bwrap()
    work = tmp_path_factory.mktemp(setup)
    env = base_env(work / "cache")
    course = make_course(work / "course", env)
    python = sys.executable
    if setup in ("regular", "conda-style"):
        python = new_venv(work / "env", *(["--system-site-packages"] if setup == "conda-style" else []))
        install(python, wheel)
    elif setup == "pythonpath":
        python = new_venv(work / "env")
        checkout = work / "checkout"
        for package in PACKAGE_FOLDERS:
            shutil.copytree(ROOT / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__"))
        env["PYTHONPATH"] = f"{checkout}:{checkout / 'grader'}"     # tfmlib, and tfmcheck and tfmgrader
    where = subprocess.run([python, "-c", "import tfmlib, tfmcheck, tfmgrader, sys; print(tfmlib.__file__, sys.prefix, "
                            "tfmcheck.__file__, tfmgrader.__file__)"], env=env,
                           cwd=work, capture_output=True, text=True, check=True).stdout.split()
    expected_home = {"regular": str(work / "env"), "pythonpath": str(work / "checkout"),
                     "conda-style": str(work / "env")}[setup]
    assert all(w.startswith(expected_home) for w in where[:1] + where[2:]), (setup, where)
    proc = subprocess.run([python, str(ROOT / "grader" / "tfmgrader" / "selfcheck.py"), "--course", str(course),
                           "--assignment", A], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (setup, proc.stdout[-3000:], proc.stderr[-3000:])
    result = json.loads(proc.stdout)
    assert result["ok"] and result["score"] == result["max_score"] > 0 and result["status"] == "graded", result


# --- another course folder than the installed checkout ---------------------------------------------------

def test_the_check_passes_only_a_graded_unflagged_solution(tmp_path):
    """Full marks are not enough: a flagged solution (here, the kernel opening files of the course) fails the check
    and the message says the environment is at fault and what to change."""
    from tfmgrader.report import Status
    from tfmgrader.selfcheck import problem_of

    opened = "the answer's code tried to open /course/grader/tfmcheck/checking.py"
    assert problem_of(Status.GRADED, "", [], tmp_path, {}, 10.0) == ""
    flagged = problem_of(Status.FLAGGED, opened, [], tmp_path, {}, 10.0)
    assert flagged.startswith("The grader flags the solution itself: " + opened)
    assert "the grading environment is at fault" in flagged and "pip install -e ." in flagged
    assert "not 'graded'" in problem_of(Status.INVALID, "no notebook", [], tmp_path, {}, 10.0)
    assert "none of its tests scored" in problem_of(Status.GRADED, "", [], tmp_path, {}, 0.0)


def test_the_launcher_uses_the_view_the_grader_hands_down(tmp_path):
    """The kernel launcher is another interpreter that may find the course packages elsewhere than the grader did
    (an editable install maps it to the installed checkout): with VIEW_ENV it binds, puts on the kernel's path and
    lets the audit hook open exactly the grader's folders; a malformed view stops it."""
    from tfmgrader.library_view import VIEW_ENV

    clone = tmp_path / "clone"
    for package in ("tfmlib", "grader/tfmcheck"):
        (clone / package).mkdir(parents=True)
    view = {"packages": [str(clone / "tfmlib"), str(clone / "grader" / "tfmcheck")], "binds": [],
            "pythonpath": [str(clone), str(clone / "grader")]}
    code = ("import json\nfrom tfmgrader import sandbox_kernel as s\nfrom tfmgrader.library_view import exported_view\n"
            "print(json.dumps([s.own_folders('/w'), s.python_binds(), s.base_env().get('PYTHONPATH'), "
            "json.loads(exported_view())]))")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, VIEW_ENV: json.dumps(view)},
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    own, binds, pythonpath, exported = json.loads(proc.stdout)
    assert set(view["packages"]) <= set(own.split(os.pathsep)) and str(ROOT / "tfmlib") not in own.split(os.pathsep)
    assert all(p in binds for p in view["packages"]) and str(ROOT / "tfmlib") not in binds
    assert pythonpath == os.pathsep.join(view["pythonpath"]) and exported == view
    bad = subprocess.run([sys.executable, "-c", code], env={**os.environ, VIEW_ENV: '{"packages": ["tfmlib"]}'},
                         capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode != 0 and f"{VIEW_ENV} is malformed" in bad.stderr


@pytest.mark.slow
def test_a_course_folder_that_is_not_the_installed_checkout_grades_unflagged(tmp_path):
    """A copy of the course (as `git clone` of the repository for a new term) graded with the .venv installed from
    this checkout: `python scripts/grade.py` there imports the installed grader, which grades the copy's
    course folder.  The self-check and the worked solution both come out 'graded', unflagged."""
    require_bwrap()
    env = base_env(tmp_path / "cache")
    course = tmp_path / "course2"
    for package in ("tfmlib", "scripts", "grader"):
        shutil.copytree(ROOT / package, course / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / A, course / "solutions" / A)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", A, "--force"], cwd=course, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from fixtures.make_class import make_class
    make_class(course, [A], kinds={A: {"correct-plain"}})
    env["GRADER_SELFCHECK"] = "1"
    proc = subprocess.run([sys.executable, str(course / "scripts" / "grade.py"), A, "--course", str(course), "--jobs",
                           "1"], env=env, capture_output=True, text=True, timeout=1800, cwd=course)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "gets full marks" in proc.stdout, proc.stdout[-3000:]
    row = grades_of(course)["01c0-correct-plain"]
    assert (row["status"], row["reason"]) == ("graded", ""), row
    assert float(row["score"]) == float(row["max_score"]) > 0, row
