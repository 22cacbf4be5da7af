"""Grading a class: which submissions (shards, what a previous run finished), one submission (with retries when
the machine was too busy), a pool of workers, and grades.csv.  ``scripts/grade.py`` is its command line and says
what the run does and writes."""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from pathlib import Path

from tfmgrader.course import api_from_config, check_submission, ensure_course, expected_notebooks, load_config
from tfmgrader.files import write_csv, write_json
from tfmgrader.limits import limit
from tfmgrader.report import Status, SubmissionReport


# --- which submissions: shards, and what a previous run already graded --------------------------------

def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n`` (the index of a Kubernetes Indexed Job or Slurm array)."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {text!r}: expected i/n, e.g. 0/4 (shards are numbered from 0)") from None
    if not 0 <= i < n:
        raise SystemExit(f"--shard {text!r}: need 0 <= i < n (shards are numbered from 0 to n-1)")
    return i, n


def shard_of(student: str, n: int) -> int:
    """The shard (0..n-1) that grades ``student``: a stable hash of the id, the same on every machine and
    in every run (Python's own ``hash()`` of a string changes from one process to the next)."""
    return int.from_bytes(hashlib.sha256(student.encode()).digest()[:8], "big") % n


def grading_settings() -> dict[str, int]:
    """The settings a grade depends on beyond the files: every limit of ``limits.json`` as this run applies it
    (its environment variable, else its default), e.g. ``GRADER_CELL_TIMEOUT``."""
    from tfmgrader.limits import LIMITS

    return {name: limit(name) for name in sorted(LIMITS)}


def settings_changed(before: dict | None, now: dict[str, int]) -> str:
    """What changed between the settings of an earlier grade and these, in words ('' when nothing did)."""
    if before is None:
        return ""
    changed = [f"{k} {before.get(k, 'unset')} -> {now.get(k, 'unset')}" for k in sorted(set(before) | set(now))
               if before.get(k) != now.get(k)]
    return ", ".join(changed)


#: The grading configuration a grade depends on, besides the course's nbgrader_config.py and --extra-config.
CONFIG_FILES = [Path(__file__).with_name(n) for n in ("hardened.py", "grading_config.py", "limits.json")]


def fingerprint(root: Path, files: list[Path], settings: dict | None = None) -> str:
    """A digest of the files' names (relative to ``root``) and contents and of ``settings`` (the limits): a
    completion marker is valid only for what was graded, and under the limits it was graded with."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode() if settings else b"")
    for path in files:
        digest.update(str(path.relative_to(root) if path.is_relative_to(root) else path).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
    return digest.hexdigest()[:32]


class State:
    """Per-submission progress markers in ``<out>/state``: ``<student>.started`` before grading and
    ``<student>.done`` (the grades.csv row and the fingerprint of what was graded) once the grade is saved
    in the gradebook and the report written.  Each is written atomically (a temporary file renamed), so a
    worker or machine killed at any moment leaves either no marker or a complete one."""

    def __init__(self, out: Path):
        self.folder = out / "state"
        self.folder.mkdir(parents=True, exist_ok=True)

    def _write(self, name: str, data: dict) -> None:
        write_json(self.folder / name, data)

    def started(self, student: str) -> bool:
        return (self.folder / f"{student}.started").exists()

    def mark_started(self, student: str) -> None:
        self._write(f"{student}.started", {"pid": os.getpid(), "host": os.uname().nodename, "time": time.time()})

    def done(self, student: str) -> dict | None:
        try:
            return json.loads((self.folder / f"{student}.done").read_text())
        except (OSError, ValueError):
            return None

    def mark_done(self, student: str, row: dict, fp: str, saved: bool = True, too_busy: bool = False,
                  env_error: bool = False) -> None:
        """``saved``: the grade is in the gradebook; ``too_busy``: the machine was too loaded to grade it;
        ``env_error``: its setup cell failed (the environment's fault).  A re-run grades either again."""
        self._write(f"{student}.done", {"row": row, "fingerprint": fp, "saved": saved, "too_busy": too_busy,
                                        "env_error": env_error, "settings": grading_settings()})
        (self.folder / f"{student}.started").unlink(missing_ok=True)


# --- grading one submission (in this process or in a worker) ------------------------------------------

#: Errors of nbgrader and jupyter_client before any of the learner's code ran -> what they say about the machine.
KERNEL_START_FAILURES = {
    "Kernel didn't respond": "the kernel did not start in time",
    "Kernel died before replying to kernel_info": "the kernel died while starting (a process limit of the "
                                                  "sandbox user, shared with other kernels on this machine?)",
    "database is locked": "the gradebook was busy",
    # two graders adding the same new gradebook row at once (SQLite, PostgreSQL): the other one won
    "UNIQUE constraint failed": "another grader added the same gradebook row at the same moment",
    "duplicate key value violates unique constraint": "another grader added the same gradebook row at the same moment",
}

_WORKER: dict = {}       # per-process: the settings and the NbGraderAPI objects, made once per worker


def init_worker(settings: dict) -> None:
    """Set up this process (a worker, or the grader itself with one job) to grade with ``settings``."""
    _WORKER.clear()
    _WORKER.update(settings)
    os.chdir(settings["course"])


def worker_api(patient: bool = False):
    """This process's NbGraderAPI (nbgrader's API is not thread-safe: one per process); ``patient``: with
    the time limits multiplied by GRADER_RETRY_SCALE, for grading a starved submission again."""
    key = "patient_api" if patient else "api"
    if key not in _WORKER:
        config = load_config(Path(_WORKER["course"]), _WORKER["extra_config"], _WORKER["db_url"])
        config.RecordVerdict.write_report = False   # grade_one writes the report, with how the run went
        config.RecordVerdict.copy_detection = False  # the class report compares the whole class (class_report.py)
        if patient:
            for name in ("timeout", "startup_timeout", "iopub_timeout"):
                value = config.SandboxedExecute.get(name)
                if value:
                    config.SandboxedExecute[name] = int(value) * limit("GRADER_RETRY_SCALE")
        _WORKER[key] = api_from_config(config)[0]
    return _WORKER[key]


def overloaded(result: dict, report: SubmissionReport) -> str:
    """Why this result may reflect the machine's load rather than the answer ('' when it does not)."""
    starved = report.starved()
    if starved:
        return "; ".join(starved)
    if result.get("success"):
        return ""
    text = (result.get("error") or "") + (result.get("log") or "")
    for sign, why in KERNEL_START_FAILURES.items():     # before any of the learner's code ran
        if sign in text:
            return why
    return ""


def grade_one(student: str, fp: str, regraded: str = "") -> dict:
    """Grade one submission and mark it done; returns its grades.csv row.  A submission whose kernel was
    starved by the machine's load is graded again with longer limits (``retries`` times); if it is still
    starved it is marked 'timed out' with that reason, never scored as if its tests had failed."""
    w = _WORKER
    assignment, out, state = w["assignment"], Path(w["out"]), State(Path(w["out"]))
    start = time.monotonic()
    state.mark_started(student)
    report_file = Path(w["reports_dir"]) / assignment / f"{student}.json"
    problem = check_submission(Path(w["submitted"]) / student / assignment, w["expected"])
    retried: list[str] = []
    why = ""
    report = SubmissionReport()
    if problem:
        status, reason, result = Status.INVALID, problem, {"success": False}
    else:
        for attempt in range(1 + w["retries"]):
            report_file.unlink(missing_ok=True)
            result = worker_api(patient=attempt > 0).autograde(assignment, student, force=True, create=True)
            report = SubmissionReport.load(report_file)
            status, reason = report.status(result)
            why = overloaded(result, report)
            if not why:
                break
            retried.append(f"attempt {attempt + 1}: {why}")
            if attempt < w["retries"]:
                time.sleep(limit("GRADER_RETRY_PAUSE") * (attempt + 1))
        if why:
            status, reason = Status.TIMED_OUT, (
                f"the grading machine was too busy to grade it ({why}), also with {limit('GRADER_RETRY_SCALE')}x "
                "the time limits; grade it again on a quieter machine")
    from tfmgrader import verdicts
    from tfmgrader.report import GRADE_PY, gradebook_scores, render, write_report

    score, tests = 0.0, []
    if result.get("success"):
        score, _, tests = gradebook_scores(w["db_url"], assignment, student)
    row = {"student_id": student, "assignment": assignment, "score": round(score, 2),
           "max_score": w["max_score"], "status": str(status), "reason": reason,
           "seconds": round(time.monotonic() - start, 2)}
    verdict = {}
    try:        # the verdict in the gradebook's records too (RecordVerdict saved the kernel's; this is final)
        verdicts.save(w["db_url"], assignment, student, status=str(status), reason=reason)
        verdict = verdicts.load(w["db_url"], assignment).get((assignment, student), {})
    except Exception as err:  # noqa: BLE001 - the grade stands; a re-run of the class reports saves it again
        print(f"{student}: could not save the verdict in the gradebook ({type(err).__name__}: {err})", flush=True)
    # the same report as plain `nbgrader autograde` writes (report.render), with how this run went
    write_report(out / "reports", render(
        assignment, student, status=status, reason=reason, score=score, max_score=w["max_score"], tests=tests,
        findings=report, verdict=verdict, graded_by=GRADE_PY,
        run={"seconds": row["seconds"], "retried": retried, "regraded": regraded,
             "nbgrader_log": (result.get("log") or "")[-4000:]}))
    state.mark_done(student, row, fp, saved=bool(result.get("success")), too_busy=bool(why),
                    env_error=status is Status.ENVIRONMENT_ERROR)
    return row


def row_lines(row: dict, width: int = 100) -> list[str]:
    """One submission's line of the run's output; a long reason wraps at ``width`` (between words, never
    cut), its continuation lines indented under the reason's start.  The whole reason is in grades.csv."""
    import textwrap

    head = (f"{row['student_id']:>24}  {row['score']:6.2f}/{row['max_score']:<6g} {row['status']:<16} "
            f"{row['seconds']:5.1f} s  ")
    if not row["reason"]:
        return [head.rstrip()]
    wrap = dict(break_long_words=False, break_on_hyphens=False)
    if len(head) + 30 > width:       # a narrow terminal: the reason on lines of its own
        return [head.rstrip()] + textwrap.wrap(row["reason"], width=max(width, 40), initial_indent=" " * 8,
                                               subsequent_indent=" " * 8, **wrap)
    indent = " " * 8 if len(head) > width // 2 else " " * len(head)
    return textwrap.wrap(row["reason"], width=width, initial_indent=head, subsequent_indent=indent, **wrap)


def print_row(row: dict) -> None:
    import shutil

    print("\n".join(row_lines(row, shutil.get_terminal_size((100, 24)).columns)), flush=True)


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --- the batch ----------------------------------------------------------------------------------------

def plan(students: list[str], fps: dict[str, str], state: State, in_gradebook: set[str],
         regrade: bool) -> tuple[list[str], dict[str, str]]:
    """(what to grade, {student: why it is graded again}); a submission is skipped when a completion marker
    says it was graded from these very files, not on a machine too busy to grade it, and the gradebook has
    its grade (if it had one: an invalid notebook never reaches the gradebook)."""
    todo, regraded = [], {}
    for s in students:
        done = state.done(s)
        valid = done is not None and done["fingerprint"] == fps[s] and not done.get("too_busy") and (
            not done.get("saved", True) or s in in_gradebook) and not done.get("env_error")
        if valid and not regrade:
            continue
        todo.append(s)
        if regrade:
            continue
        if state.started(s):
            regraded[s] = "a previous run started grading it and stopped before it finished"
        elif done is not None and done["fingerprint"] != fps[s]:
            changed = settings_changed(done.get("settings"), grading_settings())
            regraded[s] = (f"the grader's limits changed since it was graded ({changed})" if changed else
                           "the submission, the assignment or the grading configuration changed since it was graded")
        elif done is not None and done.get("too_busy"):
            regraded[s] = "the grading machine was too busy to grade it last time"
        elif done is not None and done.get("env_error"):
            regraded[s] = "its setup cell failed last time (an environment error)"
        elif done is not None:
            regraded[s] = "its grade was missing from the gradebook"
    return todo, regraded


def group_reasons(regraded: dict[str, str]) -> dict[str, list[str]]:
    """{why: [students]} of the submissions graded again (one line per reason, not per student)."""
    groups: dict[str, list[str]] = {}
    for s, why in sorted(regraded.items()):
        groups.setdefault(why, []).append(s)
    return groups


def run_batch(todo: list[str], fps: dict[str, str], regraded: dict[str, str], jobs: int,
              settings: dict) -> tuple[list[dict], str]:
    """Grade ``todo`` with ``jobs`` worker processes (each its own NbGraderAPI and kernel); returns the rows
    and, if a worker died, why (what it was grading has no completion marker and is graded by a re-run)."""
    if jobs <= 1:
        init_worker(settings)
        rows = []
        for s in todo:
            rows.append(grade_one(s, fps[s], regraded.get(s, "")))
            print_row(rows[-1])
        return rows, ""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    import torch  # noqa: F401 - loaded once here, shared by the forked workers (VerifyOutside needs it)
    rows, died = [], ""
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                             initializer=init_worker, initargs=(settings,)) as pool:
        futures = [pool.submit(grade_one, s, fps[s], regraded.get(s, "")) for s in todo]
        try:
            for future in as_completed(futures):
                rows.append(future.result())
                print_row(rows[-1])
        except BrokenProcessPool as err:
            died = f"a grading worker died ({err})"
        except BaseException:       # e.g. the gradebook is unreachable: stop now, a re-run resumes
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return rows, died


def gradebook_facts(coursedir, assignment: str) -> tuple[float, set[str]]:
    """(the assignment's max score, the students with a submission in the gradebook); the course's row is
    created first, before any worker starts (``course.ensure_course``)."""
    from nbgrader.api import Gradebook, MissingEntry

    ensure_course(coursedir.db_url, coursedir.course_id)
    with Gradebook(coursedir.db_url) as gb:
        try:
            max_score = gb.find_assignment(assignment).max_score
        except MissingEntry:
            raise SystemExit(f"{assignment} is not in the gradebook: run `nbgrader generate_assignment "
                             f"{assignment}` first") from None
        return max_score, {s.student_id for s in gb.assignment_submissions(assignment)}


def submissions(course: Path, coursedir, assignment: str, expected: list[str], extra_config: Path | None,
                only: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """(every student who submitted ``assignment``, in order; {student: fingerprint of what is graded}): the
    submission's files, the assignment's source and the configuration.  ``only`` (``--students``) does not
    narrow the class (see ``write_grades``)."""
    submitted = course / coursedir.submitted_directory
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    common = [course / coursedir.source_directory / assignment / n for n in expected]
    common += [p for p in (course / "nbgrader_config.py", extra_config) if p is not None] + CONFIG_FILES
    settings = grading_settings()
    fps = {s: fingerprint(course, common + sorted(p for p in (submitted / s / assignment).rglob("*") if p.is_file()),
                          settings) for s in students}
    return students, fps


def grade(course: Path, assignment: str, out: Path, only: list[str] | None = None,
          extra_config: Path | None = None, jobs: int = 1, shard: tuple[int, int] | None = None,
          db_url: str | None = None, regrade: bool = False, retries: int = 1) -> list[dict]:
    """Grade the submissions of ``assignment`` (those of ``shard`` i/n only, when given) that a previous run
    has not graded, with ``jobs`` workers; write grades.csv once every submission is graded.  Returns the
    rows of this shard's submissions, in student order."""
    course, out = course.resolve(), out.resolve()
    extra_config = extra_config.resolve() if extra_config else None
    os.environ.setdefault("GRADER_REPORTS", str(out / "reports"))
    if jobs > 1 and "GRADER_NPROC" not in os.environ and os.geteuid() != 0:
        # As root each kernel runs as a uid of its own (sandbox_kernel.kernel_uid); as a normal user every
        # kernel is that user, and RLIMIT_NPROC counts all their threads together (a kernel with torch has
        # about 25): N kernels at once get N kernels' worth.
        os.environ["GRADER_NPROC"] = str(limit("GRADER_NPROC") * jobs)
    os.chdir(course)
    from tfmgrader.lifetime import end_leftovers
    ended = end_leftovers(course)       # sandboxes a killed run of this course left running (lifetime.py)
    if ended:
        print(f"ended {len(ended)} grading process(es) left running by an earlier run that was killed", flush=True)
    coursedir = api_from_config(load_config(course, extra_config, db_url))[1]
    expected = expected_notebooks(course, coursedir.source_directory, assignment)
    if not expected:
        raise SystemExit(f"no notebooks in {coursedir.source_directory}/{assignment}")
    max_score, in_gradebook = gradebook_facts(coursedir, assignment)
    submitted = course / coursedir.submitted_directory
    students, fps = submissions(course, coursedir, assignment, expected, extra_config, only)
    selected = set(only) if only else None
    unknown = sorted((selected or set()) - set(students))
    if unknown:     # a typo, or (with several assignments) a student who did not submit this one
        print(f"--students: {len(unknown)} without a submission of {assignment} ({', '.join(unknown[:5])}"
              f"{', ...' if len(unknown) > 5 else ''})", flush=True)
    mine = [s for s in students if (selected is None or s in selected)
            and (shard is None or shard_of(s, shard[1]) == shard[0])]
    state = State(out)
    todo, regraded = plan(mine, fps, state, in_gradebook, regrade)
    jobs = min(jobs, max(len(todo), 1))
    settings = {"course": str(course), "assignment": assignment, "out": str(out), "extra_config": extra_config,
                "db_url": coursedir.db_url, "reports_dir": os.environ["GRADER_REPORTS"],
                "submitted": str(submitted), "expected": expected, "max_score": max_score, "retries": retries}
    print(f"{f'shard {shard[0]}/{shard[1]}: ' if shard else ''}{len(mine)} submissions"
          f"{f' (of {len(students)})' if len(mine) < len(students) else ''}, {len(mine) - len(todo)} "
          f"already graded, {len(todo)} to grade with {jobs} job(s)"
          + (f"; {len(regraded)} graded again" if regraded else ""), flush=True)
    for why, who in group_reasons(regraded).items():
        shown = ", ".join(who[:5]) + (", ..." if len(who) > 5 else "")
        print(f"graded again, {len(who)} submission(s) ({shown}): {why}", flush=True)
    if todo:        # the grader grades the solution first; SystemExit with the reason if it fails
        from tfmgrader.selfcheck import ensure
        ensure(course, assignment, extra_config)
    start = time.monotonic()
    rows, died = run_batch(todo, fps, regraded, jobs, settings)
    wall = time.monotonic() - start
    write_run_report(out, assignment, shard, jobs, mine, todo, rows, regraded, died, wall, ended)
    complete, klass = write_grades(out, students, mine, fps, state, shard, selected)
    if klass and all(s in complete for s in klass):   # copy detection and the class's mistakes
        from tfmgrader.class_report import write_class_reports
        write_class_reports(course, assignment, out, klass, submitted, coursedir.source_directory,
                            coursedir.autograded_directory, coursedir.db_url)
        refresh_reports(out / "reports", coursedir.db_url, assignment, klass)
    if rows:
        seconds = [r["seconds"] for r in rows]
        print(f"{len(rows)} submissions of {assignment} graded in {wall:.1f} s with {jobs} job(s): median "
              f"{statistics.median(seconds):.2f} s each, {len(rows) / wall * 60:.1f} per minute")
    if died:
        raise SystemExit(f"{died}; the submissions it was grading are graded again by a re-run of the same command")
    return [complete[s] for s in mine if s in complete]


def refresh_reports(folder: Path, db_url: str, assignment: str, students: list[str]) -> None:
    """The class's reports with the copy suspicions just found (``report.refresh``); a failure leaves them as
    they were and is reported."""
    from tfmgrader.report import refresh
    try:
        refresh(folder, db_url, assignment, students)
    except Exception as err:  # noqa: BLE001 - the reports are extra; the grades stand without the update
        print(f"could not add the copy suspicions to the reports in {folder} ({type(err).__name__}: {err})")


def write_run_report(out: Path, assignment: str, shard, jobs: int, mine: list[str], todo: list[str],
                     rows: list[dict], regraded: dict[str, str], died: str, wall: float,
                     ended: list[str] = ()) -> None:
    """``run-report.json`` (``run-report-I-of-N.json`` for a shard): what this run graded, skipped (done
    before), graded again and why, retried because the machine was overloaded, whether a worker died, and
    the processes an earlier, killed run had left running that this one ended (``ended_leftovers``)."""
    retried = [r["student_id"] for r in rows
               if json.loads((out / "reports" / f"{r['student_id']}.json").read_text()).get("retried")]
    name = f"run-report-{shard[0]}-of-{shard[1]}.json" if shard else "run-report.json"
    write_json(out / name, {
        "assignment": assignment, "shard": f"{shard[0]}/{shard[1]}" if shard else None, "jobs": jobs,
        "submissions": len(mine), "graded": sorted(r["student_id"] for r in rows),
        "skipped": sorted(set(mine) - set(todo)), "regraded": regraded, "retried": sorted(retried),
        "worker_died": died, "ended_leftovers": list(ended), "wall_seconds": round(wall, 1)})


def write_grades(out: Path, students: list[str], mine: list[str], fps: dict[str, str], state: State,
                 shard, selected: set[str] | None = None) -> tuple[dict[str, dict], list[str]]:
    """Write this shard's rows (``shards/grades-I-of-N.csv``) and, once every submission of the class is done
    (by any shard or run), ``grades.csv``; returns (the rows that are done, the class).

    The class of ``out`` is every submission; with ``--students`` (``selected``), the students selected now
    and those an earlier run graded into ``out``.  Grading some students therefore merges: their rows are
    replaced, every other row of ``grades.csv`` is kept, and the class reports are made for the whole class."""
    done = {s: state.done(s) for s in students}
    complete = {s: d["row"] for s, d in done.items() if d and d["fingerprint"] == fps[s]}
    klass = [s for s in students if selected is None or s in selected or done[s] is not None]
    if shard:
        write_csv(out / "shards" / f"grades-{shard[0]}-of-{shard[1]}.csv", [complete[s] for s in mine if s in complete])
    waiting = [s for s in klass if s not in complete]
    if not waiting:
        write_csv(out / "grades.csv", [complete[s] for s in klass])
        print(f"grades of all {len(klass)} submissions in {out / 'grades.csv'}"
              + (f" ({len(set(mine) & set(klass))} graded or checked by this run, the others as graded before)"
                 if len(mine) < len(klass) else ""))
    else:
        print(f"{len(waiting)} of {len(klass)} submissions not graded yet ({', '.join(waiting[:5])}"
              f"{', ...' if len(waiting) > 5 else ''}); grades.csv is written by the run that grades the last one "
              "(re-run the command without --students to grade what is missing)")
    return complete, klass
