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

from tfmgrader import verdicts
from tfmgrader.course import api_from_config, check_submission, ensure_course, expected_notebooks, load_config
from tfmgrader.files import write_csv, write_json
from tfmgrader.limits import LIMITS, limit
from tfmgrader.report import GRADE_PY, Status, SubmissionReport, gradebook_scores, render, write_report
from tfmgrader.run import GradingRun, grade_submission


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
    """The settings a grade depends on beyond the files: every limit of ``limits.json`` as the environment sets
    it now (its variable, else its default), e.g. ``GRADER_CELL_TIMEOUT``; a run keeps them (``GradingRun.limits``)."""
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
                  env_error: bool = False, settings: dict | None = None) -> None:
        """``saved``: the grade is in the gradebook; ``too_busy``: the machine was too loaded to grade it;
        ``env_error``: its setup cell failed (the environment's fault).  A re-run grades either again."""
        self._write(f"{student}.done", {"row": row, "fingerprint": fp, "saved": saved, "too_busy": too_busy,
                                        "env_error": env_error,
                                        "settings": grading_settings() if settings is None else settings})
        (self.folder / f"{student}.started").unlink(missing_ok=True)


# --- grading one submission (in this process or in a worker) ------------------------------------------

_WORKER: dict = {}       # per-process: the run, the batch's facts and the NbGraderAPI objects, made once per worker


def init_worker(run: GradingRun, batch: dict) -> None:
    """Set up this process (a worker, or the grader itself with one job) to grade ``run``; ``batch``: where
    the submissions are (``submitted``), the notebooks they must hold (``expected``), the output folder
    (``out``) and the assignment's ``max_score``."""
    _WORKER.clear()
    _WORKER.update(batch, run=run, apis={})


def grade_one(student: str, fp: str, regraded: str = "") -> dict:
    """Grade one submission (``run.grade_submission``) and mark it done; returns its grades.csv row.  A submission
    still starved by the machine's load after its retries is marked 'timed out' with that reason, never scored as
    if its tests had failed."""
    w = _WORKER
    run: GradingRun = w["run"]
    assignment, out, state = run.assignment, Path(w["out"]), State(Path(w["out"]))
    start = time.monotonic()
    state.mark_started(student)
    problem = check_submission(Path(w["submitted"]) / student / assignment, w["expected"])
    graded = None
    if problem:
        status, reason, result, findings, retried = Status.INVALID, problem, {"success": False}, SubmissionReport(), []
    else:
        graded = grade_submission(run, student, w["apis"])
        status, reason, result, findings, retried = (graded.status, graded.reason, graded.result, graded.report,
                                                     graded.retried)
        if graded.starved:
            status, reason = Status.TIMED_OUT, (
                f"the grading machine was too busy to grade it ({graded.starved}), also with "
                f"{run.limit('GRADER_RETRY_SCALE')}x the time limits; grade it again on a quieter machine")
    db_url = run.db_url
    score, tests = 0.0, []
    if result.get("success"):
        score, _, tests = gradebook_scores(db_url, assignment, student)
    row = {"student_id": student, "assignment": assignment, "score": round(score, 2),
           "max_score": w["max_score"], "status": str(status), "reason": reason,
           "seconds": round(time.monotonic() - start, 2)}
    verdict = {}
    try:        # the verdict in the gradebook's records too (RecordVerdict saved the kernel's; this is final)
        verdicts.save(db_url, assignment, student, status=str(status), reason=reason)
        verdict = verdicts.load(db_url, assignment).get((assignment, student), {})
    except Exception as err:  # noqa: BLE001 - the grade stands; a re-run of the class reports saves it again
        print(f"{student}: could not save the verdict in the gradebook ({type(err).__name__}: {err})", flush=True)
    # the same report as plain `nbgrader autograde` writes (report.render), with how this run went
    write_report(out / "reports", render(
        assignment, student, status=status, reason=reason, score=score, max_score=w["max_score"], tests=tests,
        findings=findings, verdict=verdict, graded_by=GRADE_PY,
        run={"seconds": row["seconds"], "retried": retried, "regraded": regraded,
             "nbgrader_log": (result.get("log") or "")[-4000:]}))
    state.mark_done(student, row, fp, saved=bool(result.get("success")), too_busy=bool(graded and graded.starved),
                    env_error=status is Status.ENVIRONMENT_ERROR, settings=run.limits)
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
         regrade: bool, settings: dict[str, int] | None = None) -> tuple[list[str], dict[str, str]]:
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
            changed = settings_changed(done.get("settings"), grading_settings() if settings is None else settings)
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


def run_batch(todo: list[str], fps: dict[str, str], regraded: dict[str, str], jobs: int, run: GradingRun,
              batch: dict) -> tuple[list[dict], str]:
    """Grade ``todo`` with ``jobs`` worker processes (each its own NbGraderAPI and kernel); returns the rows
    and, if a worker died, why (what it was grading has no completion marker and is graded by a re-run)."""
    if jobs <= 1:
        init_worker(run, batch)
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
                             initializer=init_worker, initargs=(run, batch)) as pool:
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
                only: list[str] | None, settings: dict[str, int] | None = None) -> tuple[list[str], dict[str, str]]:
    """(every student who submitted ``assignment``, in order; {student: fingerprint of what is graded}): the
    submission's files, the assignment's source and the configuration.  ``only`` (``--students``) does not
    narrow the class (see ``write_grades``)."""
    submitted = course / coursedir.submitted_directory
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    common = [course / coursedir.source_directory / assignment / n for n in expected]
    common += [p for p in (course / "nbgrader_config.py", extra_config) if p is not None] + CONFIG_FILES
    settings = grading_settings() if settings is None else settings
    fps = {s: fingerprint(course, common + sorted(p for p in (submitted / s / assignment).rglob("*") if p.is_file()),
                          settings) for s in students}
    return students, fps


def grade(course: Path, assignment: str, out: Path, only: list[str] | None = None,
          extra_config: Path | None = None, jobs: int = 1, shard: tuple[int, int] | None = None,
          db_url: str | None = None, regrade: bool = False, retries: int = 1,
          reports: Path | None = None) -> list[dict]:
    """Grade the submissions of ``assignment`` (those of ``shard`` i/n only, when given) that a previous run
    has not graded, with ``jobs`` workers; write grades.csv once every submission is graded.  Returns the
    rows of this shard's submissions, in student order.  ``reports``: where the grading steps write what they
    find (default ``<out>/reports``, where the batch writes each submission's report too)."""
    course, out = course.resolve(), out.resolve()
    extra_config = extra_config.resolve() if extra_config else None
    from tfmgrader.lifetime import end_leftovers
    ended = end_leftovers(course)       # sandboxes a killed run of this course left running (lifetime.py)
    if ended:
        print(f"ended {len(ended)} grading process(es) left running by an earlier run that was killed", flush=True)
    coursedir = api_from_config(load_config(course, extra_config, db_url))[1]
    run = GradingRun.create(course, assignment, reports or out / "reports", jobs=jobs, extra_config=extra_config,
                            db_url=coursedir.db_url, retries=retries)
    expected = expected_notebooks(course, coursedir.source_directory, assignment)
    if not expected:
        raise SystemExit(f"no notebooks in {coursedir.source_directory}/{assignment}")
    max_score, in_gradebook = gradebook_facts(coursedir, assignment)
    submitted = course / coursedir.submitted_directory
    students, fps = submissions(course, coursedir, assignment, expected, extra_config, only, run.limits)
    selected = set(only) if only else None
    unknown = sorted((selected or set()) - set(students))
    if unknown:     # a typo, or (with several assignments) a student who did not submit this one
        print(f"--students: {len(unknown)} without a submission of {assignment} ({', '.join(unknown[:5])}"
              f"{', ...' if len(unknown) > 5 else ''})", flush=True)
    mine = [s for s in students if (selected is None or s in selected)
            and (shard is None or shard_of(s, shard[1]) == shard[0])]
    state = State(out)
    todo, regraded = plan(mine, fps, state, in_gradebook, regrade, run.limits)
    jobs = min(jobs, max(len(todo), 1))
    batch = {"out": str(out), "submitted": str(submitted), "expected": expected, "max_score": max_score}
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
    rows, died = run_batch(todo, fps, regraded, jobs, run, batch)
    wall = time.monotonic() - start
    write_run_report(out, assignment, shard, jobs, mine, todo, rows, regraded, died, wall, ended)
    def class_reports(klass: list[str], rows: list[dict]) -> dict[str, dict]:
        """Copy detection and the class's mistakes, once every submission is graded; grades.csv's columns."""
        from tfmgrader.class_report import write_class_reports
        return write_class_reports(course, assignment, out, klass, submitted, coursedir.source_directory,
                                   coursedir.autograded_directory, coursedir.db_url, rows)[1]

    complete, klass = write_grades(out, students, mine, fps, state, shard, selected, class_reports)
    if klass and all(s in complete for s in klass):
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
                 shard, selected: set[str] | None = None, class_reports=None) -> tuple[dict[str, dict], list[str]]:
    """Write this shard's rows (``shards/grades-I-of-N.csv``) and, once every submission of the class is done
    (by any shard or run), ``grades.csv``; returns (the rows that are done, the class).

    The class of ``out`` is every submission; with ``--students`` (``selected``), the students selected now
    and those an earlier run graded into ``out``.  Grading some students therefore merges: their rows are
    replaced, every other row of ``grades.csv`` is kept, and the class reports are made for the whole class.
    ``class_reports(class, rows)``: called once the class is complete, before grades.csv is written (once), with
    the columns it returns ({student: {column: value}}) in each row."""
    done = {s: state.done(s) for s in students}
    complete = {s: d["row"] for s, d in done.items() if d and d["fingerprint"] == fps[s]}
    klass = [s for s in students if selected is None or s in selected or done[s] is not None]
    if shard:
        write_csv(out / "shards" / f"grades-{shard[0]}-of-{shard[1]}.csv", [complete[s] for s in mine if s in complete])
    waiting = [s for s in klass if s not in complete]
    if not waiting:
        rows = [dict(complete[s]) for s in klass]
        if class_reports is not None:
            try:
                extra = class_reports(klass, rows)
            except Exception as err:  # noqa: BLE001 - the grades stand without the class reports
                print(f"the class reports failed ({type(err).__name__}: {err}); grades.csv has no similarity")
                extra = {s: {"similar_to": "", "similarity": ""} for s in klass}
            for row in rows:
                row.update(extra.get(row["student_id"], {}))
        write_csv(out / "grades.csv", rows)
        print(f"grades of all {len(klass)} submissions in {out / 'grades.csv'}"
              + (f" ({len(set(mine) & set(klass))} graded or checked by this run, the others as graded before)"
                 if len(mine) < len(klass) else ""))
    else:
        print(f"{len(waiting)} of {len(klass)} submissions not graded yet ({', '.join(waiting[:5])}"
              f"{', ...' if len(waiting) > 5 else ''}); grades.csv is written by the run that grades the last one "
              "(re-run the command without --students to grade what is missing)")
    return complete, klass
