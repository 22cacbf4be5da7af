"""A killed grader leaves nothing running: every sandboxed kernel dies with the grader that started it, and a
re-run ends what an earlier crash left (grader/tfmgrader/lifetime.py)."""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tfmgrader import lifetime  # noqa: E402
from tfmgrader.sandbox_kernel import KERNEL_UIDS  # noqa: E402

A = "03_self_attention"
KINDS = {"correct-plain", "correct-stripped", "wrong-first", "wrong-last"}
TAG = "TFMLIB_TEST_ORPHANS"        # marks every process a test starts (the kernel's launcher and bwrap inherit it)


def require_root_and_bwrap():
    from conftest import require_bwrap, require_root
    require_bwrap()
    require_root("orphaned sandboxes", "the sandboxes run as uids of their own only when grading as root")


# --- the death signal and the record, without a grader ------------------------------------------------

def test_the_death_signal_survives_exec_and_a_late_launcher_stops():
    """PR_SET_PDEATHSIG set by die_with_grader is kept across exec: the exec'd program dies with its parent;
    a launcher whose grader is already gone does not start anything."""
    code = ("import os, sys, subprocess\nfrom tfmgrader import lifetime\n"
            "child = os.fork()\n"
            "if child == 0:\n"
            "    os.environ[lifetime.OWNER_ENV] = lifetime.owner_tag('/nowhere', os.getppid())\n"
            "    lifetime.die_with_grader()\n"
            "    os.execvp('sleep', ['sleep', '60'])\n"
            "print(child, flush=True)\nimport time; time.sleep(1)\nos._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    child = int(out.stdout.split()[0])
    deadline = time.monotonic() + 5
    while lifetime.start_time(child) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lifetime.start_time(child) is None, "the exec'd program outlived its parent"
    gone = subprocess.Popen(["true"])
    gone.wait()
    late = subprocess.run([sys.executable, "-c", "from tfmgrader import lifetime; "
                           "lifetime.die_with_grader(); print('started')"],
                          env={**os.environ, lifetime.OWNER_ENV: f"{gone.pid}:1:/nowhere"}, capture_output=True,
                          text=True, timeout=30)
    assert late.returncode != 0 and "started" not in late.stdout and "already stopped" in late.stderr


def test_leftovers_are_only_those_of_a_stopped_grader_of_this_course(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead, live = lifetime.owner_tag(tmp_path, gone.pid), lifetime.owner_tag(tmp_path)
    other = lifetime.owner_tag(tmp_path / "other", gone.pid)
    procs = {name: subprocess.Popen(["sleep", "60"], env={**os.environ, lifetime.OWNER_ENV: tag})
             for name, tag in [("dead", dead), ("live", live), ("other", other)]}
    try:
        assert lifetime.leftovers(tmp_path) == [procs["dead"].pid]
        ended = lifetime.end_leftovers(tmp_path)
        assert len(ended) == 1 and ended[0].startswith(f"{procs['dead'].pid} uid") and "sleep 60" in ended[0]
        assert procs["dead"].wait(timeout=5) == -signal.SIGKILL
        assert procs["live"].poll() is None and procs["other"].poll() is None
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


# --- killing real graders -----------------------------------------------------------------------------

def tagged(tag: str) -> list[int]:
    """Processes started by the run tagged ``tag`` (launchers, bwrap, unsandboxed kernels), and every process
    under a sandbox uid below one of them (the sandboxed kernels, whose environment bwrap clears)."""
    marked = {int(p) for p in os.listdir("/proc") if p.isdigit() and lifetime.environ_of(int(p)).get(TAG) == tag}
    found = set(marked)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uid = int(status.split("\nUid:")[1].split()[0])
        if KERNEL_UIDS[0] <= uid < KERNEL_UIDS[1] and ancestors(int(entry)) & marked:
            found.add(int(entry))
    return sorted(p for p in found if lifetime.start_time(p) is not None)


def ancestors(pid: int) -> set[int]:
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return seen


def wait_for(predicate, timeout: float, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def nothing_left(tag: str, timeout: float = 10) -> list[str]:
    """What of the tagged run is still running ``timeout`` seconds from now (described), else []."""
    wait_for(lambda: not tagged(tag), timeout)
    left = [lifetime.describe(p) for p in tagged(tag)]
    for pid in tagged(tag):          # never leave them for the next test
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def launcher_of(tag: str) -> int | None:
    """A kernel launcher of the tagged run that has not exec'd bwrap yet (the window that used to leak)."""
    for pid in tagged(tag):
        try:
            if b"sandbox_kernel.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            pass
    return None


def running_kernel(tag: str) -> int | None:
    """A sandboxed kernel of the tagged run (a process under a sandbox uid)."""
    for pid in tagged(tag):
        try:
            uid = int(Path(f"/proc/{pid}/status").read_text().split("\nUid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        if uid >= KERNEL_UIDS[0]:
            return pid
    return None


def worker_of_a_kernel(tag: str, batch: int) -> int | None:
    """A grade.py worker (not the batch's main process, nor the self-check before the batch) whose kernel runs."""
    for pid in tagged(tag):
        try:
            uid = int(Path(f"/proc/{pid}/status").read_text().split("\nUid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        if uid < KERNEL_UIDS[0]:
            continue
        for p in ancestors(pid) - {batch}:
            try:
                if b"grade.py" in Path(f"/proc/{p}/cmdline").read_bytes():
                    return p
            except OSError:
                pass
    return None


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    require_root_and_bwrap()
    from fixtures.make_class import make_class
    from test_grading import new_course

    root = tmp_path_factory.mktemp("orphans") / "course"
    root.mkdir()
    env = new_course(root, [A])
    make_class(root, [A], kinds={A: KINDS})
    return root, env


def fresh(template, path: Path) -> tuple[Path, dict, str]:
    root, env = template
    shutil.copytree(root, path, symlinks=True)
    tag = uuid.uuid4().hex
    return path, {**env, "GRADER_REPORTS": str(path / "reports"), TAG: tag}, tag


def grade_cmd(course: Path, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / "grade.py"), A, "--course", str(course), *args]


def grades(course: Path) -> list[dict]:
    with open(course / "grading" / A / "grades.csv") as f:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def sequential(template, tmp_path_factory):
    course, env, _ = fresh(template, tmp_path_factory.mktemp("sequential") / "course")
    proc = subprocess.run(grade_cmd(course, "--jobs", "1"), env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return grades(course)


def leftover_sandbox(course: Path, env: dict) -> subprocess.Popen:
    """What a grader killed before this fix left: a bwrap sandbox (its own PID namespace, a process under a
    sandbox uid) recorded for a grader of ``course`` that is gone, re-parented away from any grader."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    uid = KERNEL_UIDS[1] - 1 - os.getpid() % 1000
    return subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                             "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "600"],
                            env={**env, lifetime.OWNER_ENV: lifetime.owner_tag(course, gone.pid)},
                            start_new_session=True)


@pytest.mark.slow
def test_a_killed_batch_leaves_no_sandbox_and_a_rerun_ends_leftovers(template, sequential, tmp_path):
    """SIGKILL to the batch's process group while a kernel's launcher is still setting up (the moment that
    used to leave sandboxes running for good): nothing of it remains; a re-run ends a sandbox an older crash
    left, reports it in run-report.json, and the grades are those of a sequential run."""
    course, env, tag = fresh(template, tmp_path / "course")
    batch = subprocess.Popen(grade_cmd(course, "--jobs", "2"), env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: launcher_of(tag), 600, step=0.01), "no kernel was started"
    finally:
        os.killpg(batch.pid, signal.SIGKILL)
        batch.wait()
    assert nothing_left(tag) == []

    leftover = leftover_sandbox(course, env)
    assert wait_for(lambda: running_kernel(tag), 10), "the simulated leftover sandbox did not start"
    proc = subprocess.run(grade_cmd(course, "--jobs", "2"), env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert leftover.wait(timeout=10) == -signal.SIGKILL
    report = json.loads((course / "grading" / A / "run-report.json").read_text())
    ended = report["ended_leftovers"]       # bwrap, its PID 1 inside the namespace, and what runs there
    assert any(e.startswith(f"{leftover.pid} uid 0 bwrap") for e in ended), ended
    assert all("sleep" in e for e in ended), "only the leftover was ended"
    assert f"ended {len(ended)} grading process(es)" in proc.stdout
    assert nothing_left(tag) == []
    assert grades(course) == sequential


@pytest.mark.slow
def test_a_killed_worker_takes_its_sandbox_with_it(template, sequential, tmp_path):
    """(``sequential`` first: the grader's self-check of the assignment is then cached, and the first kernel
    seen is a worker's.)"""
    course, env, tag = fresh(template, tmp_path / "course")
    batch = subprocess.Popen(grade_cmd(course, "--jobs", "2"), env=env, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        worker = wait_for(lambda: worker_of_a_kernel(tag, batch.pid), 900)
        assert worker, "no worker was seen running a sandboxed kernel"
        os.kill(worker, signal.SIGKILL)
        output = batch.communicate(timeout=600)[0]
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)
            batch.wait()
    assert batch.returncode != 0 and "re-run" in output, output[-3000:]
    assert nothing_left(tag) == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_plain_nbgrader_autograde_stopped_leaves_no_sandbox(template, tmp_path, sig):
    """Ctrl-C reaches the foreground process group (nbgrader), never the kernels, which jupyter_client starts
    in sessions of their own; whatever nbgrader does then, nothing of the sandboxes remains."""
    course, env, tag = fresh(template, tmp_path / "course")
    run = subprocess.Popen(["nbgrader", "autograde", A, "--force"], cwd=course, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: running_kernel(tag), 600), "no sandboxed kernel was seen"
        os.killpg(run.pid, sig)
        run.wait(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert nothing_left(tag) == []
