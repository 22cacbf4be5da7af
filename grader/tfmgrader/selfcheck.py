"""The grader checks itself before it grades anyone.

Before the first submission of an assignment is graded (``scripts/grade.py`` before its batch; plain
``nbgrader autograde`` and formgrader through ``Autograde.pre_convert_hook``, set by ``hardened.py``), the
assignment's own solution is graded through the same pipeline (the course's configuration, the scan, the
sandbox, the replay), with the same interpreter and environment, in a throw-away copy of the course (its
own gradebook: the real one never sees it), by the grader's own code (the child process imports the packages
this process imported, ``same_packages``) and with the kernel's audit hook watching the real course too.  If the
solution does not get full marks with status ``graded`` (unflagged), nothing is graded and the instructor reads
why, e.g. ``tfmlib cannot be imported inside the sandbox: ModuleNotFoundError: ...``.
A passed check is remembered for this process and, for a day, in a cache keyed by the assignment's files,
the grading code, the course library and the environment (``~/.cache/tfmlib-grading``, or
``$GRADER_SELFCHECK_CACHE``); a failed one is never remembered.

Each submission is guarded too (``SetupCheck``): when a read-only setup cell fails before any of the
learner's code ran, the submission is not scored; ``grade.py`` reports it as ``environment error`` and grades
it again on its next run.

    python grader/tfmgrader/selfcheck.py --course COURSE --assignment A [--extra-config FILE]

runs the check (in a child process of its own, as the hook does) and prints the verdict.
``GRADER_SELFCHECK=0`` skips the check (the per-submission guard stays on).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from tfmgrader.course import api_from_config
from tfmgrader.limits import limit
from tfmgrader.report import Status
from tfmgrader.run import GradingRun, grade_submission

SKIP_ENV = "GRADER_SELFCHECK"            # "0": do not check (not recommended)
ACTIVE_ENV = "TFMLIB_SELFCHECK_ACTIVE"   # set in the checking process: its own grading is not checked again
CACHE_ENV = "GRADER_SELFCHECK_CACHE"
CACHE_SECONDS = 24 * 3600
STUDENT = "selfcheck-solution"
RESULT_MARK = "SELFCHECK-RESULT "

_PASSED: set[tuple[str, str]] = set()    # (course, assignment) checked in this process (inherited by workers)


class SelfCheckFailed(SystemExit):
    """The grading environment cannot grade this assignment's solution: stops nbgrader and grade.py (a
    SystemExit, so that nbgrader's per-submission error handling does not swallow it)."""


class EnvironmentProblem(RuntimeError):
    """A read-only setup cell failed before any learner code ran: this submission is not scored."""


# --- the per-submission guard -----------------------------------------------------------------------------

class SetupCheck(NbGraderPreprocessor):
    """After the notebook ran: if a read-only setup cell failed before any of the learner's cells ran, the
    failure is the environment's, not the learner's; record it and stop, so that no score is saved."""

    report_directory = Unicode("", help="Where the grading reports go.").tag(config=True)

    def preprocess(self, nb, resources):
        from tfmgrader.preprocessors import record, trusted_cells

        trusted, _ = trusted_cells(resources)
        problem = setup_failure(nb, trusted)
        if problem:
            record(self.report_directory, resources, setup_error=problem)
            raise EnvironmentProblem(f"environment error: {problem}")
        return nb, resources


def setup_failure(nb, trusted: dict[str, bool]) -> str:
    """Why a read-only setup cell (``trusted[id] is False``) that ran before any learner or test cell
    failed ('' when none did)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid not in trusted or trusted[gid]:
            return ""           # the learner's code or a test runs from here on: failures are graded
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                why = describe(out.get("ename", ""), out.get("evalue", ""))
                return f"the read-only setup cell '{gid}' failed: {why}"
    return ""


def describe(ename: str, evalue: str) -> str:
    """An error of the setup cell in plain words."""
    evalue = " ".join(str(evalue).split())[:400]
    missing = re.match(r"No module named '([\w.]+)'", evalue)
    if ename in ("ModuleNotFoundError", "ImportError") and missing:
        return f"{missing.group(1).split('.')[0]} cannot be imported inside the sandbox: {ename}: {evalue}"
    if ename == "DeadKernelError":
        return f"the kernel died while running it (a memory, CPU or process limit of the sandbox?): {evalue}"
    return f"{ename}: {evalue}"


# --- the check of the solution ----------------------------------------------------------------------------

def enabled() -> bool:
    return os.environ.get(SKIP_ENV, "1") != "0" and not os.environ.get(ACTIVE_ENV)


def fingerprint(course: Path, assignment: str, source_directory: str, extra: Path | None) -> str:
    """What the check's verdict depends on: the assignment's files, the course's configuration, the grading
    code, the course library, the interpreter and the environment variables that reach the grading."""
    import tfmcheck
    import tfmgrader
    import tfmlib

    digest = hashlib.sha256()
    files = sorted((course / source_directory / assignment).rglob("*"))
    files += [course / "nbgrader_config.py"] + ([extra] if extra else [])
    for package in (tfmgrader, tfmcheck, tfmlib):
        files += sorted(Path(package.__file__).resolve().parent.rglob("*.py"))
    for path in files:
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith(("GRADER_", "TFMLIB_", "JUPYTER_", "PYTHON")) and k != "GRADER_REPORTS")
    facts = [assignment, sys.executable, sys.prefix, os.path.realpath(sys.base_prefix), sys.version,
             str(Path(tfmlib.__file__).resolve()), str(os.geteuid()), str(shutil.which("bwrap")), json.dumps(env)]
    digest.update("\0".join(facts).encode())
    return digest.hexdigest()[:32]


def cache_folder() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfmlib-grading", "selfcheck")
    return Path(base)


def cached(fp: str) -> bool:
    try:
        entry = json.loads((cache_folder() / f"{fp}.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(entry.get("ok")) and time.time() - float(entry.get("time", 0)) < CACHE_SECONDS


def remember(fp: str, result: dict) -> None:
    try:
        from tfmgrader.files import write_json

        write_json(cache_folder() / f"{fp}.json", {**result, "time": time.time()})
    except OSError:
        pass                    # no cache: the next run checks again


def source_directory(course: Path, extra: Path | None) -> str:
    from tfmgrader.course import load_config

    return load_config(course, extra).CourseDirectory.get("source_directory") or "source"


def ensure(course: Path, assignment: str, extra: Path | None = None, log=print) -> None:
    """Check the grader on ``assignment``'s solution unless this process (or the cache) already did; raise
    ``SelfCheckFailed`` with the reason when the solution does not get full marks with status ``graded`` (no flag:
    a flag on the worked solution would be noise on every honest submission)."""
    course = Path(course).resolve()
    key = (str(course), assignment)
    if not enabled() or key in _PASSED:
        return
    fp = fingerprint(course, assignment, source_directory(course, extra), extra)
    if cached(fp):
        _PASSED.add(key)
        return
    log(f"checking the grader on the solution of {assignment} first ...")
    result = run_check(course, assignment, extra)
    if not result.get("ok"):
        raise SelfCheckFailed(failure_message(assignment, result))
    log(f"the solution of {assignment} gets full marks ({result['score']:g}/{result['max_score']:g}) in "
        f"{result['seconds']:.1f} s: the grading environment works")
    remember(fp, result)
    _PASSED.add(key)


def failure_message(assignment: str, result: dict) -> str:
    return (f"Nothing was graded: the grading environment cannot grade the assignment's own solution "
            f"({assignment}), so every submission would get a wrong grade. {result.get('problem', 'unknown problem')}. "
            f"Fix the environment and run again (set {SKIP_ENV}=0 to grade anyway, not recommended).")


def run_check(course: Path, assignment: str, extra: Path | None) -> dict:
    """Grade the solution in a child process (the same interpreter and environment); its verdict."""
    cmd = [sys.executable, "-m", "tfmgrader.selfcheck", "--child", "--course", str(course), "--assignment", assignment]
    if extra:
        cmd += ["--extra-config", str(extra)]
    try:
        proc = subprocess.run(cmd, env={**os.environ, ACTIVE_ENV: "1", "PYTHONPATH": same_packages()},
                              capture_output=True, text=True, timeout=limit("GRADER_SELFCHECK_TIMEOUT"))
    except subprocess.TimeoutExpired:
        return {"ok": False, "problem": f"grading the solution took longer than {limit('GRADER_SELFCHECK_TIMEOUT')} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"ok": False, "problem": f"the check itself failed ({tail})"}


def same_packages() -> str:
    """``PYTHONPATH`` for the check's child: the folders holding the grader (``tfmgrader``) and the course packages
    as this process found them first, so that the child grades with exactly this grader's code.  (Run by its path,
    ``selfcheck.py`` would find them as its own folder does: from a course folder other than the checkout the
    packages were installed from, ``python scripts/grade.py`` uses the course folder's grader while an editable
    install maps a fresh interpreter to the installed checkout.)"""
    from tfmgrader.library_view import KERNEL_PACKAGES, library_folder

    folders = [str(Path(__file__).resolve().parents[1])]
    folders += [str(Path(library_folder(name)).parent) for name in KERNEL_PACKAGES]
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(folders + rest))


def grade_solution(course: Path, assignment: str, extra: Path | None) -> dict:
    """In the child: grade the solution in a throw-away copy of the course (``run.grade_submission``, as the batch
    grades a submission); the verdict as a dict."""
    import nbformat
    from nbgrader.api import Gradebook

    from tfmgrader.notebooks import answered

    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="tfmlib-selfcheck-"))
    try:
        run = checking_run(course, assignment, extra, work)
        config = run.config()
        source = config.CourseDirectory.get("source_directory") or "source"
        release = config.CourseDirectory.get("release_directory") or "release"
        shutil.copytree(course / source / assignment, work / source / assignment,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        generated = api_from_config(config)[0].generate_assignment(assignment, force=True)
        if not generated["success"]:
            return {"ok": False, "problem": "nbgrader could not generate the assignment: "
                                            + _last_line((generated.get("log") or "") + (generated.get("error") or ""))}
        folder = work / "submitted" / STUDENT / assignment
        shutil.copytree(work / release / assignment, folder)
        for nb_path in sorted(folder.glob("*.ipynb")):
            solved = answered(nbformat.read(nb_path, as_version=4),
                              nbformat.read(work / source / assignment / nb_path.name, as_version=4))
            nbformat.write(solved, nb_path)
        graded = grade_submission(run, STUDENT)
        result, status, reason = graded.result, graded.status, graded.reason
        verdict = {"ok": False, "status": status, "seconds": round(time.monotonic() - start, 1)}
        if result.get("success"):
            with Gradebook(run.db_url) as gb:
                grades = [g for nb in gb.find_submission(assignment, STUDENT).notebooks for g in nb.grades]
                verdict["score"] = sum(g.auto_score or 0 for g in grades if g.auto_score is not None)
                verdict["max_score"] = sum(g.max_score for g in grades if g.auto_score is not None)
                failed = [g.name for g in grades if g.auto_score is not None and g.auto_score < g.max_score]
        else:
            verdict["score"], verdict["max_score"], failed = 0, 0, []
        verdict["problem"] = problem_of(status, reason, failed, work / "autograded" / STUDENT / assignment, result,
                                        verdict["max_score"])
        verdict["ok"] = not verdict["problem"]
        return verdict
    finally:
        shutil.rmtree(work, ignore_errors=True)


def checking_run(course: Path, assignment: str, extra: Path | None, work: Path) -> GradingRun:
    """The course's grading, in the throw-away course ``work`` with a gradebook of its own, without the hook (no
    check of the check) and with the reports kept there.  The kernel's audit hook watches the real ``course`` as
    well, as it does when a submission is graded there: a kernel that opens files of the course (its own library,
    when the packages are found in the course folder but not shown to the kernel as its own) flags the solution
    here, and nothing is graded.  A solution starved by the machine's load is graded once more, with longer
    limits, as the batch grades a submission."""
    return GradingRun.create(course, assignment, work / "reports", root=work, extra_config=extra,
                             db_url=f"sqlite:///{work / 'gradebook.db'}", retries=1, check_first=False,
                             watch_also=(str(course),))


def _last_line(text) -> str:
    """The last exception line of ``text`` (e.g. ``ModuleNotFoundError: ...``), else its last line."""
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"[\w.]*(Error|Exception): ", line)
              and not line.startswith("nbgrader.converters.base.NbGraderException")]
    return (errors or lines or ["no details"])[-1][:500]


def problem_of(status: str, reason: str, failed: list[str], autograded: Path, result: dict, max_score: float) -> str:
    """Why the graded solution does not pass the check ('' when it passes): it must get full marks, some of them,
    and the status ``graded``: unflagged, with nothing left to review."""
    problem = explain(status, reason, failed, autograded, result)
    if not problem and status != Status.GRADED:
        problem = f"The solution came out '{status}', not 'graded': {reason[:1000]}"
    if not problem and not max_score > 0:
        problem = "the solution was graded but none of its tests scored"
    return problem


def explain(status: str, reason: str, failed: list[str], autograded: Path, result: dict) -> str:
    """The check's problem in plain words ('' when the solution got full marks and nothing was flagged)."""
    if status == Status.ENVIRONMENT_ERROR:
        return reason[0].upper() + reason[1:]
    if status == Status.FLAGGED:
        advice = ""
        if "tried to open" in reason:
            advice = (" (the kernel itself opened these files while it ran the worked solution: the grading "
                      "environment is at fault, not a learner; the course packages tfmlib and tfmcheck the kernel "
                      "imports must be those the grader imports: run the grader with the interpreter of this "
                      "course's installation, e.g. after `pip install -e .` in the course folder)")
        return f"The grader flags the solution itself: {reason[:1000]}{advice}"
    if status == Status.CRASHED:
        return f"Grading the solution crashed: {reason[:1000]}"
    if status == Status.TIMED_OUT:
        return f"Grading the solution timed out: {reason[:1000]}"
    if failed:
        return f"The solution fails {len(failed)} test(s): " + "; ".join(
            f"{name} ({test_error(autograded, name)})" for name in failed[:5])
    return ""


def test_error(autograded: Path, grade_id: str) -> str:
    """The first error a test cell of the graded solution printed."""
    import nbformat

    for path in sorted(autograded.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
                for out in cell.get("outputs", []):
                    if out.get("output_type") == "error":
                        return describe(out.get("ename", ""), out.get("evalue", ""))
    return "no error output"


# --- nbgrader's hook -------------------------------------------------------------------------------------

def pre_convert_hook(assignment=None, student=None, notebooks=(), **_) -> None:
    """``Autograde.pre_convert_hook``: called by nbgrader before each submission is graded (after nothing of
    it was written); checks the grader once per assignment and process."""
    if not enabled():
        return
    course, name = locate(list(notebooks or []), assignment)
    ensure(course, name, log=lambda text: print(f"[selfcheck] {text}", file=sys.stderr, flush=True))


def locate(notebooks: list, assignment) -> tuple[Path, str]:
    """(course root, assignment) of the submission nbgrader is about to grade: its notebooks are
    ``<root>/submitted/<student>/<assignment>/*.ipynb``."""
    if notebooks:
        path = Path(notebooks[0]).resolve()
        if len(path.parents) > 3 and (path.parents[3] / "nbgrader_config.py").exists():
            return path.parents[3], path.parent.name
    if assignment and re.fullmatch(r"[\w.-]+", str(assignment)):
        return Path.cwd().resolve(), str(assignment)
    raise SelfCheckFailed(f"the grader's self-check cannot tell which assignment {notebooks[:1]} belongs to; "
                          f"run nbgrader from the course root, or set {SKIP_ENV}=0 to skip the check")


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Grade an assignment's solution to check the grading environment.")
    parser.add_argument("--course", type=Path, default=Path("."))
    parser.add_argument("--assignment", required=True)
    parser.add_argument("--extra-config", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    course, extra = args.course.resolve(), args.extra_config.resolve() if args.extra_config else None
    if args.child:
        import warnings

        warnings.filterwarnings("ignore")
        try:
            verdict = grade_solution(course, args.assignment, extra)
        except Exception as err:  # noqa: BLE001 - reported to the parent as the check's problem
            verdict = {"ok": False, "problem": f"the check could not run: {type(err).__name__}: {err}"}
        print(RESULT_MARK + json.dumps(verdict), flush=True)
        return 0
    result = run_check(course, args.assignment, extra)
    print(json.dumps(result, indent=1))
    if not result.get("ok"):
        print(failure_message(args.assignment, result), file=sys.stderr)
        return 1
    remember(fingerprint(course, args.assignment, source_directory(course, extra), extra), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
