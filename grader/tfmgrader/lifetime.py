"""Every grading kernel dies with the grader that started it; a new run ends what a crashed one left.

Why kernels outlived a killed batch: jupyter_client starts the kernel's launcher (``sandbox_kernel.py``) in a
session of its own, so a signal to the grader's process group never reaches it.  bubblewrap's
``--die-with-parent`` then ties the sandbox to the launcher's parent, but only from the moment bwrap runs:
the launcher first spends a second or more in Python (it copies the working folder and imports the course
library), and a worker killed in that window left it re-parented to PID 1, so that bwrap tied the sandbox to
PID 1, which never dies.

Two measures:

- ``die_with_grader`` (the launcher's first act): ``PR_SET_PDEATHSIG = SIGKILL`` on the launcher, which
  is kept across the ``exec`` of bwrap (not set-uid) and of the unsandboxed kernel, and then checks that
  its parent is still the grader that started it (``OWNER_ENV``, written into the kernel spec): if it is
  already gone, the launcher stops before starting anything.  Inside, bwrap's ``--die-with-parent`` kills
  the sandbox's PID 1 with bwrap, and with it its whole PID namespace: the kernel and everything it
  started, whatever uid they run as.
- ``end_leftovers``: processes whose environment carries ``OWNER_ENV`` for this course, whose grader is
  gone, are killed (bwrap's own processes keep the launcher's environment; killing them ends their
  namespace).  ``scripts/grade.py`` does it before a batch and lists them in ``run-report.json``;
  ``SandboxedExecute`` does it once per process (plain ``nbgrader autograde``) and logs them.

The death signal goes to the launcher when the *thread* that started it ends: jupyter_client starts kernels
from the grader's main thread (or an event loop's thread that lives as long as the grader).
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

import psutil

OWNER_ENV = "TFMLIB_GRADER_OWNER"     # "<pid>:<start time>:<course root>" of the grader that started the kernel
PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> float | None:
    """The start time of process ``pid`` (seconds since the epoch, as psutil reads it from the kernel), or None if
    there is no such process or it has ended (a zombie): with the pid, it names a process even after the pid is
    reused."""
    try:
        process = psutil.Process(pid)
        return None if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else process.create_time()
    except psutil.Error:
        return None


def owner_tag(course: str | os.PathLike, pid: int | None = None) -> str:
    """``OWNER_ENV``'s value for this process (the grader) and ``course``."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid)}:{os.path.realpath(course)}"


def parse_owner(tag: str) -> tuple[int, float | None, str] | None:
    try:
        pid, start, course = tag.split(":", 2)
        return int(pid), (None if start == "None" else float(start)), course
    except ValueError:
        return None


# psutil adds the boot time, which the kernel recomputes from the wall clock on every read (/proc/stat's whole
# seconds): a clock adjustment moves it by a second, and the same process then seemed to have started a second later
# (a kernel refused to start, its grader taken for stopped, once in CI).  A start within a second is the same process.
SAME_START_S = 1.0


def alive(pid: int, start: float | None) -> bool:
    now = start_time(pid)
    return now is not None and (start is None or abs(now - start) <= SAME_START_S)


def set_death_signal() -> None:
    """This process gets SIGKILL when its parent dies (kept across exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise SystemExit(f"tfmlib-sandbox: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")


def die_with_grader() -> None:
    """Ask the kernel (SIGKILL) to die with the process that started it, and stop now if that process is not
    the grader named in ``OWNER_ENV`` any more (it died before this line ran)."""
    set_death_signal()
    owner = parse_owner(os.environ.get(OWNER_ENV, ""))
    if owner is not None and (os.getppid() != owner[0] or not alive(owner[0], owner[1])):
        raise SystemExit("tfmlib-sandbox: the grader that asked for this kernel has already stopped")


def environ_of(pid: int) -> dict[str, str]:
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def describe(pid: int) -> str:
    """``pid uid command`` of a process (the command cut to 120 characters)."""
    try:
        process = psutil.Process(pid)
        uid, cmd = process.uids().real, " ".join(process.cmdline())
    except psutil.Error:
        return f"{pid}"
    return f"{pid} uid {uid} {cmd[:120]}"


def leftovers(course: str | os.PathLike) -> list[int]:
    """Processes started for a grader of ``course`` that is no longer running (its kernels' launchers,
    bwrap and unsandboxed kernels)."""
    course, found = os.path.realpath(course), []
    for pid in psutil.pids():
        if pid == os.getpid():
            continue
        owner = parse_owner(environ_of(pid).get(OWNER_ENV, ""))
        if owner is not None and owner[2] == course and not alive(owner[0], owner[1]):
            found.append(pid)
    return sorted(found)


def end_leftovers(course: str | os.PathLike, wait: float = 5.0) -> list[str]:
    """Kill (SIGKILL) what ``leftovers`` finds and wait until it is gone; returns what was ended.  Each is
    described before any is killed: a sandbox's inner processes die with its bwrap, and a dead process that is
    not yet reaped has no command line left to describe."""
    ended = []
    for pid, text in [(pid, describe(pid)) for pid in leftovers(course)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        ended.append(text)
    deadline = time.monotonic() + wait
    while ended and leftovers(course) and time.monotonic() < deadline:
        time.sleep(0.1)
    return ended


def kernel_processes(uids: tuple[int, int]) -> list[str]:
    """Every process whose real uid is in ``[uids[0], uids[1])`` (the sandboxes' uids), described."""
    found = []
    for process in psutil.process_iter(["uids"]):
        uid = process.info["uids"].real if process.info["uids"] else None
        if uid is not None and uids[0] <= uid < uids[1]:
            found.append(describe(process.pid))
    return found
