"""Grading a big class: parallel jobs, shards across machines, re-runs, a PostgreSQL gradebook, and grades
that do not depend on the machine's load (scripts/grade.py, book/appendix/grading.md "A class of 1,200")."""
import csv
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tfmgrader import batch, course as course_config  # noqa: E402
from tfmgrader import run as grading_run  # noqa: E402
from tfmgrader.report import SubmissionReport  # noqa: E402
from tfmgrader.run import GradingRun  # noqa: E402

A = "03_self_attention"
# Ten submissions: correct ones in four forms, wrong ones, a tampering attack, a killed kernel, a broken file.
KINDS = {"correct-plain", "correct-stripped", "correct-chatty", "correct-compact", "wrong-unanswered",
         "wrong-first", "wrong-last", "attack-rebind-allclose", "attack-os-exit", "invalid-json"}
GUIDE = ROOT / "book" / "appendix" / "grading.md"
PG_BIN = Path("/usr/lib/postgresql/15/bin")


from conftest import require, require_bwrap  # noqa: E402  (fail under CI, skip elsewhere)


def env_for(course: Path) -> dict:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "GRADER_REPORTS": str(course / "grading" / A / "reports")}


def make_course(path: Path, db_url: str | None = None) -> Path:
    """A course folder with the repository's configuration, the assignment generated (into ``db_url``, else
    the SQLite gradebook) and the ten submissions."""
    from fixtures.make_class import make_class

    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", path)
    shutil.copytree(ROOT / "solutions" / A, path / "solutions" / A)
    flags = [f"--CourseDirectory.db_url={db_url}"] if db_url else []
    proc = subprocess.run(["nbgrader", "generate_assignment", A, "--force", *flags], cwd=path, env=env_for(path),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    make_class(path, [A], kinds={A: KINDS})
    return path


def run_grade(course: Path, *args: str, check: bool = True, **popen) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), A, "--course", str(course), *args],
                          env=env_for(course), capture_output=True, text=True, **popen)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def grades(course: Path) -> list[dict]:
    """grades.csv without the seconds (the only column that may differ between runs)."""
    with open(course / "grading" / A / "grades.csv") as f:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)]


def reports(course: Path) -> dict[str, dict]:
    """The per-submission reports, without timings, nbgrader's log and the notes of retries after a starved
    kernel (which depend on the machine's load; the outcome must not)."""
    folder = course / "grading" / A / "reports"
    skip = ("seconds", "nbgrader_log", "retried")
    return {p.stem: {k: v for k, v in json.loads(p.read_text()).items() if k not in skip}
            for p in sorted(folder.glob("*.json"))}


def export(db_url: str) -> list[tuple]:
    """Every grade in the gradebook: (student, notebook, cell, auto score, manual score, max score)."""
    from nbgrader.api import Gradebook

    rows = []
    with Gradebook(db_url, course_id="transformers-from-scratch") as gb:
        for sub in gb.assignment_submissions(A):
            for nb in sub.notebooks:
                rows += [(sub.student_id, nb.name, g.name, g.auto_score, g.manual_score, g.max_score)
                         for g in nb.grades]
    return sorted(rows)


def sqlite_url(course: Path) -> str:
    return f"sqlite:///{course / 'gradebook.db'}"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """The course before grading (copied for each run)."""
    require_bwrap()
    return make_course(tmp_path_factory.mktemp("template") / "course")


def fresh(template: Path, path: Path) -> Path:
    shutil.copytree(template, path, symlinks=True)
    return path


@pytest.fixture(scope="module")
def sequential(template, tmp_path_factory):
    """The reference: one job, an idle machine, the SQLite gradebook."""
    course = fresh(template, tmp_path_factory.mktemp("sequential") / "course")
    run_grade(course, "--jobs", "1")
    return {"course": course, "grades": grades(course), "reports": reports(course),
            "export": export(sqlite_url(course))}


# --- pure functions ------------------------------------------------------------------------------------

def test_shards_are_stable_and_cover_every_student():
    students = [f"student{i:04d}" for i in range(1200)]
    shards = [[s for s in students if batch.shard_of(s, 4) == i] for i in range(4)]
    assert sorted(sum(shards, [])) == students, "every student in exactly one shard"
    assert all(250 <= len(s) <= 350 for s in shards), [len(s) for s in shards]
    code = "from tfmgrader.batch import shard_of; print(shard_of('alice', 7))"
    runs = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert runs == {f"{batch.shard_of('alice', 7)}\n"}, "the same shard in every process"
    assert batch.parse_shard("0/4") == (0, 4) and batch.parse_shard("3/4") == (3, 4)
    for bad in ("4/4", "-1/4", "1", "a/b"):
        with pytest.raises(SystemExit):
            batch.parse_shard(bad)


def test_plan_grades_only_what_is_missing(tmp_path):
    state = batch.State(tmp_path)
    fps = {s: "fp-" + s for s in ("a", "b", "c", "d", "e", "f", "g")}
    row = lambda s, status="graded": {"student_id": s, "status": status}  # noqa: E731
    state.mark_done("a", row("a"), fps["a"])                    # finished
    state.mark_started("b")                                      # a worker died grading it
    state.mark_done("c", row("c"), "an older fingerprint")       # resubmitted since
    state.mark_done("d", row("d"), fps["d"])                     # finished, but not in this gradebook
    state.mark_done("e", row("e", "invalid notebook"), fps["e"], saved=False)  # never in a gradebook
    state.mark_done("f", row("f", "timed out"), fps["f"], too_busy=True)       # the machine was too busy
    todo, regraded = batch.plan(sorted(fps), fps, state, {"a", "c", "f"}, regrade=False)
    assert todo == ["b", "c", "d", "f", "g"]
    assert set(regraded) == {"b", "c", "d", "f"} and "stopped" in regraded["b"] and "busy" in regraded["f"]
    assert batch.plan(sorted(fps), fps, state, {"a", "c"}, regrade=True) == (sorted(fps), {})
    assert not any(p.name.endswith(".tmp") for p in state.folder.iterdir()), "markers are renamed into place"


# --- parallel, loaded, killed --------------------------------------------------------------------------

@pytest.mark.slow
def test_sequential_reference_is_as_expected(sequential):
    expected = json.loads((sequential["course"] / "expected.json").read_text())
    rows = {r["student_id"]: r for r in sequential["grades"]}
    assert set(rows) == set(expected)
    for student, e in expected.items():
        r = rows[student]
        assert (float(r["score"]) == float(r["max_score"]) > 0) == (e["expect"] == "full"), r
    assert rows["03c0-invalid-json"]["status"] == "invalid notebook"


def busy(n: int) -> list[subprocess.Popen]:
    """``n`` processes that keep one core each busy."""
    return [subprocess.Popen([sys.executable, "-c", "while True:\n    pass"]) for _ in range(n)]


@pytest.mark.slow
def test_jobs_on_a_busy_machine_give_the_same_grades(template, sequential, tmp_path):
    """Two jobs while every core is kept busy (one spinning process per core): slower, but grades.csv, the
    reports and the gradebook are those of the sequential run on an idle machine."""
    course = fresh(template, tmp_path / "course")
    spinners = busy(batch.default_jobs())
    try:
        proc = run_grade(course, "--jobs", "2")
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert "with 2 job(s)" in proc.stdout
    assert grades(course) == sequential["grades"]
    assert reports(course) == sequential["reports"]
    assert export(sqlite_url(course)) == sequential["export"]
    # A re-run has nothing left to do and grades nothing twice.
    again = run_grade(course, "--jobs", "2")
    assert "10 already graded, 0 to grade" in again.stdout, again.stdout
    assert grades(course) == sequential["grades"]


def loop_for(seconds: float) -> str:
    """A learner's cell that computes for about ``seconds`` of CPU time on this machine (a counted loop: an
    answer may not import ``time``)."""
    n, started = 10**6, time.process_time()
    code = "_n = 0\nfor _k in range({}):\n    _n += _k\n"
    exec(code.format(n), {})
    rate = n / max(time.process_time() - started, 1e-3)
    return code.format(int(rate * seconds))


@pytest.mark.slow
def test_a_cell_slowed_by_the_load_keeps_its_time_and_a_loop_is_still_stopped(tmp_path):
    """A cell's limit is its kernel's computing time, not the machine's load.  Plain `nbgrader autograde` on one
    core that two spinning processes share with it (the kernel gets about a third of it), with a 3-second limit:
    a correct submission with an extra cell that computes for 2 s of CPU (about 6 s of wall time here) is graded
    in full, status graded; one with an endless loop is stopped, status timed out."""
    require_bwrap()
    from nbgrader.api import Gradebook

    path = tmp_path / "course"
    path.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", path)
    shutil.copytree(ROOT / "solutions" / A, path / "solutions" / A)
    env = {**env_for(path), "GRADER_REPORTS": str(path / "reports"), "GRADER_CELL_TIMEOUT": "3",
           "GRADER_SELFCHECK": "0"}
    subprocess.run(["nbgrader", "generate_assignment", A, "--force"], cwd=path, env=env, check=True,
                   capture_output=True)
    for student, extra in {"slow": loop_for(2.0), "loop": "while True:\n    pass\n"}.items():
        nb = json.loads((ROOT / "solutions" / A / f"{A}.ipynb").read_text())
        nb["cells"].append({"cell_type": "code", "metadata": {}, "source": extra, "outputs": [],
                            "execution_count": None})
        (path / "submitted" / student / A).mkdir(parents=True)
        (path / "submitted" / student / A / f"{A}.ipynb").write_text(json.dumps(nb))
    core = str(min(os.sched_getaffinity(0)))
    spinners = [subprocess.Popen(["taskset", "-c", core, sys.executable, "-c", "while True:\n    pass"])
                for _ in range(2)]
    try:
        proc = subprocess.run(["taskset", "-c", core, "nbgrader", "autograde", A, "--force",
                               "--SandboxedExecute.patience=10"], cwd=path, env=env,
                              capture_output=True, text=True, timeout=600)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    found = {}
    with Gradebook(f"sqlite:///{path / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(A):
            report = json.loads((path / "reports" / A / f"{sub.student_id}.json").read_text())[A]
            found[sub.student_id] = (sub.score, sub.max_score, report["execution"], report["stopped"])
    log = proc.stdout[-2000:] + proc.stderr[-2000:]
    assert found["slow"][:3] == (found["slow"][1], found["slow"][1], "ok") and found["slow"][1] > 0, (found, log)
    assert found["loop"][2] == "timed out", (found, log)
    assert found["loop"][3].startswith("a cell ran longer than 3 s and the kernel was stopped"), found


def test_a_cell_has_used_up_its_time_when_its_kernel_computed_or_waited_for_it(monkeypatch):
    """Past the limit's wall time, a cell is stopped when its kernel has had the limit's CPU time, or could have
    had what it lacks from the idle cores it may run on (it was waiting); a kernel the load kept from running
    is not stopped (it is, at ``patience`` times the limit, as starved)."""
    from tfmgrader import preprocessors

    ex = preprocessors.SandboxedExecute(timeout=3)
    cpu, idle = [0.0], [0.0]
    monkeypatch.setattr(preprocessors.SandboxedExecute, "_kernel_cpu", lambda self: cpu[0])
    monkeypatch.setattr(preprocessors, "machine_idle", lambda: idle[0])
    late, early = (time.monotonic() - 4, 0.0, 0.0), (time.monotonic() - 2, 0.0, 0.0)
    for used, idle_since, started, done in [(3.0, 0.0, late, True),     # computed for 3 s
                                            (1.0, 2.5, late, True),     # 1 s, and idle cores it did not use
                                            (1.0, 0.5, late, False),    # 1 s on a machine with no core to spare
                                            (0.0, 0.0, late, False),    # not run at all: starved
                                            (5.0, 9.0, early, False)]:  # two threads: not yet 3 s of wall time
        cpu[0], idle[0] = used, idle_since
        assert ex._used_up(started) is done, (used, idle_since)
    assert ex._get_timeout(None) == 3 * ex.patience


class FakeAPI:
    """Stands in for NbGraderAPI.autograde: writes the preprocessors' report that each attempt would."""

    def __init__(self, reports_dir: Path, executions: list[dict]):
        self.reports_dir, self.executions, self.calls = reports_dir, executions, []

    def autograde(self, assignment, student, force, create):
        report = self.executions[len(self.calls)]
        self.calls.append(student)
        if "error" in report:                   # nbgrader failed before the notebook ran
            return {"success": False, "error": report["error"], "log": ""}
        path = self.reports_dir / assignment / f"{student}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"nb": report}))
        return {"success": False, "error": "stop before the gradebook", "log": ""}


STARVED = {"execution": "timed out",
           "stopped": "a cell ran longer than 30 s and the kernel was stopped (the grading machine was "
                        "overloaded: the kernel got 0.4 s of CPU in 30 s)",
           "starved": "the kernel got 0.4 s of CPU in 30 s"}
LOOP = {"execution": "timed out", "stopped": "a cell ran longer than 30 s and the kernel was stopped"}
NO_KERNEL = {"error": "RuntimeError: Kernel died before replying to kernel_info"}


@pytest.mark.parametrize("attempts, retried, status", [
    ([STARVED, {"execution": "ok"}], 1, "graded"),      # starved, then graded normally on the retry
    ([STARVED, STARVED], 2, "timed out"),               # starved twice: timed out, saying why
    ([LOOP], 0, "timed out"),                           # a real endless loop is not graded again
    ([NO_KERNEL, {"execution": "ok"}], 1, "graded"),    # no kernel (a limit shared with other kernels)
])
def test_a_starved_submission_is_graded_again(tmp_path, monkeypatch, attempts, retried, status):
    folder = tmp_path / "submitted" / "s1" / A
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / A / f"{A}.ipynb", folder)
    fake = FakeAPI(tmp_path / "reports", attempts)
    run = GradingRun(course=tmp_path, assignment=A, reports=tmp_path / "reports", db_url="sqlite://",
                     limits={"GRADER_RETRY_PAUSE": 0, "GRADER_RETRY_SCALE": 3}, retries=1)
    batch.init_worker(run, {"out": str(tmp_path / "out"), "submitted": str(tmp_path / "submitted"),
                            "expected": [f"{A}.ipynb"], "max_score": 11})
    configs = []
    monkeypatch.setattr(grading_run, "api_from_config", lambda config: (configs.append(config) or fake, None))
    monkeypatch.setattr(GradingRun, "config", lambda self, patient=False: patient)
    monkeypatch.setattr(SubmissionReport, "status", lambda report, result: (
        ("crashed", result["error"]) if not report.notebooks else
        ("timed out", report.notebooks["nb"].stopped) if report.notebooks["nb"].execution != "ok" else ("graded", "")))
    row = batch.grade_one("s1", "fp")
    report = json.loads((tmp_path / "out" / "reports" / "s1.json").read_text())
    assert len(fake.calls) == len(attempts) and len(report["retried"]) == retried
    assert configs == [False, True][:len(attempts)], "a retry is graded with the patient configuration"
    assert row["status"] == status
    if retried == 2:
        assert "too busy" in row["reason"] and "quieter machine" in row["reason"]
    marker = batch.State(tmp_path / "out").done("s1")
    assert marker["row"] == row and marker["too_busy"] == (retried == 2), "still starved: a re-run tries again"


@pytest.mark.slow
def test_a_killed_worker_loses_nothing(template, sequential, tmp_path):
    course = fresh(template, tmp_path / "course")
    state = course / "grading" / A / "state"
    cmd = [sys.executable, str(ROOT / "scripts" / "grade.py"), A, "--course", str(course), "--jobs", "2"]
    proc = subprocess.Popen(cmd, env=env_for(course), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if len(list(state.glob("*.done"))) >= 2:
            for started in state.glob("*.started"):
                try:
                    victim = (started.stem, json.loads(started.read_text())["pid"])
                except (OSError, ValueError):
                    continue
                break
    assert victim is not None, "no worker was seen grading a submission"
    os.kill(victim[1], signal.SIGKILL)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode != 0 and "re-run" in output, output[-3000:]
    unfinished = {p.stem for p in state.glob("*.started")}
    assert victim[0] in unfinished
    done_before = {p.stem for p in state.glob("*.done")}
    rerun = run_grade(course, "--jobs", "2")
    report = json.loads((course / "grading" / A / "run-report.json").read_text())
    assert set(report["regraded"]) == unfinished, (report, unfinished)
    assert not set(report["graded"]) & done_before, "nothing that was finished is graded twice"
    assert re.search(rf"graded again, \d+ submission\(s\) \([^)]*{victim[0]}[^)]*\): a previous run started grading it",
                     rerun.stdout), rerun.stdout[-3000:]
    assert grades(course) == sequential["grades"]
    assert export(sqlite_url(course)) == sequential["export"]


# --- the PostgreSQL gradebook: a server started for these tests ------------------------------------

def pg_bin() -> Path | None:
    """The folder of Debian's PostgreSQL server programs (the newest installed), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Postgres:
    """A throw-away PostgreSQL server on localhost, in a temporary folder.  PostgreSQL refuses to run as
    root, so as root the server runs as the `postgres` system user (Debian's package creates it)."""

    def __init__(self, bin_dir: Path):
        import socket
        import tempfile

        self.bin = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="grading-pg-"))
        self.data = self.folder / "data"
        self.as_owner = []
        if os.geteuid() == 0:
            import pwd
            owner = pwd.getpwnam("postgres")
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
            self.as_owner = ["runuser", "-u", "postgres", "--"]
        with socket.socket() as s:
            s.bind(("localhost", 0))
            self.port = s.getsockname()[1]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"), "-w", "-t", "120", "-o",
                  f"-p {self.port} -c listen_addresses=localhost -k {self.folder} -c fsync=off", "start")
        self.client("createuser", "grader")

    def _run(self, program: str, *args: str) -> None:
        proc = subprocess.run([*self.as_owner, str(self.bin / program), *args], capture_output=True, text=True)
        assert proc.returncode == 0, (program, proc.stdout[-2000:], proc.stderr[-2000:])

    def client(self, program: str, *args: str) -> None:
        self._run(program, "-h", "localhost", "-p", str(self.port), "-U", "postgres", *args)

    def database(self, name: str) -> str:
        """A new database owned by `grader`; its SQLAlchemy URL (the psycopg driver)."""
        self.client("createdb", "--owner", "grader", name)
        return f"postgresql+psycopg://grader@localhost:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run([*self.as_owner, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres():
    bin_dir = pg_bin()
    require(bin_dir is not None, "shared PostgreSQL gradebook", "PostgreSQL's server, which the tests start on "
            "localhost", "postgresql")
    pytest.importorskip("psycopg", reason="the psycopg driver is in the 'test' extra: pip install -e '.[test]'")
    server = Postgres(bin_dir)
    yield server
    server.stop()


# --- the instructor guide: what it shows is what runs -----------------------------------------------

def guide_blocks(lang: str, containing: str) -> list[str]:
    text = GUIDE.read_text()
    section = text[text.index("## A class of 1,200"):]
    blocks = re.findall(r"^```" + lang + r"\n(.*?)^```", section, re.S | re.M)
    return [b for b in blocks if containing in b]


def guide_commands() -> dict[str, str]:
    """The grading commands of the guide's Kubernetes Job, Slurm script and final check."""
    import yaml

    job = yaml.safe_load(guide_blocks("yaml", "kind: Job")[0])
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["bash", "-c"]
    slurm = guide_blocks("bash", "#SBATCH")[0].strip().splitlines()[-1]
    check = [b for b in guide_blocks("bash", "grade.py") if "--shard" not in b and "/opt/course" in b][0].strip()
    return {"job": container["args"][0], "slurm": slurm, "check": check,
            "env": {e["name"]: e.get("value") for e in container["env"]},
            "completions": job["spec"]["completions"]}


def here(command: str, course: Path) -> str:
    """A guide command with the image's and the volume's paths replaced by this checkout and test course."""
    return command.replace("/opt/course", str(ROOT)).replace("/srv/nbgrader/course", str(course))


def test_guide_nbgrader_configuration_loads(tmp_path, monkeypatch):
    import yaml
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    # The lines the guide adds to the course's nbgrader_config.py.
    course = tmp_path / "course"
    course.mkdir()
    lines = guide_blocks("python", "NBGRADER_DB_URL")
    assert len(lines) == 1
    (course / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text() + "\n" + lines[0])
    url = "postgresql+psycopg://grader:secret@gradebook.example.org:5432/transformers"
    monkeypatch.setenv("NBGRADER_DB_URL", url)
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    assert cfg.CourseDirectory.db_url == url
    assert cfg.Autograde.autograde_preprocessors[:1] == ["tfmgrader.preprocessors.SandboxedExecute"]
    assert course_config.load_config(course).CourseDirectory.db_url == url, "grade.py uses the course's gradebook"
    monkeypatch.delenv("NBGRADER_DB_URL")
    monkeypatch.chdir(course)
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    assert cfg.CourseDirectory.db_url == f"sqlite:///{course / 'gradebook.db'}", "SQLite stays the default"

    # The Zero to JupyterHub config.yaml: the servers' nbgrader configuration and the hub's per-user uid.
    values = yaml.safe_load(guide_blocks("yaml", "singleuser:")[0])
    files = values["singleuser"]["extraFiles"]["nbgrader-config"]
    assert files["mountPath"] == "/etc/jupyter/nbgrader_config.py"
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "nbgrader_config.py").write_text(files["stringData"])
    server = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path / "hub")).load_config()
    mounts = values["singleuser"]["storage"]["extraVolumeMounts"]
    assert server.Exchange.root == mounts[0]["mountPath"] == "/srv/nbgrader/exchange"
    assert server.CourseDirectory.course_id == "transformers-from-scratch"
    c = Config()
    for code in values["hub"]["extraConfig"].values():
        exec(compile(code, "extraConfig", "exec"), {"c": c})
    users = [type("User", (), {"id": i}) for i in (1, 2)]
    uids = {c.KubeSpawner.uid(type("Spawner", (), {"user": u})) for u in users}
    assert len(uids) == 2 and min(uids) >= 100000, "one uid per user, none of them the image's 1000"


def test_guide_jobs_match_the_shards():
    commands = guide_commands()
    assert commands["env"]["SHARDS"] == str(commands["completions"]), "SHARDS must equal the Job's completions"
    for name in ("job", "slurm"):
        args = shlex.split(commands[name])
        assert args[1] == "/opt/course/scripts/grade.py" and "--shard" in args and "--db-url" in args, args
        assert args[args.index("--jobs") + 1] == "2"


@pytest.mark.slow
def test_two_shards_into_one_postgres_gradebook(postgres, sequential, tmp_path):
    """The guide's Kubernetes Job command (shard 0/2) and Slurm command (shard 1/2), each with 2 jobs, run
    at the same time into one PostgreSQL gradebook: the exported grades are those of the sequential SQLite
    run, no row lost, duplicated or changed."""
    url = postgres.database("shards")
    course = make_course(tmp_path / "course", db_url=url)
    commands = guide_commands()
    base = {**env_for(course), "ASSIGNMENT": A, "SHARDS": "2", "NBGRADER_DB_URL": url}
    runs = [subprocess.Popen(["bash", "-c", here(commands["job"], course)], env={**base, "JOB_COMPLETION_INDEX": "0"},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
            subprocess.Popen(["bash", "-c", here(commands["slurm"], course)],
                             env={**base, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    outputs = [p.communicate(timeout=900)[0] for p in runs]
    for p, out in zip(runs, outputs):
        assert p.returncode == 0, out[-3000:]
    assert "shard 0/2" in outputs[0] and "shard 1/2" in outputs[1]
    shards = [list(csv.DictReader(open(course / "grading" / A / "shards" / f"grades-{i}-of-2.csv"))) for i in (0, 1)]
    assert all(shards) and sorted(r["student_id"] for s in shards for r in s) == \
        [r["student_id"] for r in sequential["grades"]], "each student in exactly one shard"
    assert grades(course) == sequential["grades"]
    assert export(url) == sequential["export"]
    check = subprocess.run(["bash", "-c", here(commands["check"], course)], env=base, capture_output=True, text=True)
    assert check.returncode == 0 and "0 to grade" in check.stdout, check.stdout[-2000:] + check.stderr[-2000:]


def test_a_new_gradebook_gets_its_course_row_before_the_workers_start(tmp_path):
    """Two workers on a gradebook without the course's row both added it; one failed ("UNIQUE constraint
    failed: course.id") and its submission came out 'crashed' (seen in CI). grade.py now adds the row first,
    and a worker that still loses such a race is retried, never scored."""
    from nbgrader.api import Gradebook
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    course_config.ensure_course(url, "some-course")
    course_config.ensure_course(url, "some-course")          # a second grader (or shard) finds it
    from nbgrader.api import Course
    with Gradebook(url, "some-course") as gb:
        assert [c.id for c in gb.db.query(Course)] == ["some-course"]
    for text in ("sqlite3.IntegrityError) UNIQUE constraint failed: course.id",
                 "psycopg.errors.UniqueViolation: duplicate key value violates unique constraint \"course_pkey\""):
        assert grading_run.overloaded({"success": False, "error": text}, SubmissionReport()), text
