"""Warm kernels (grader/tfmgrader/forkserver.py): each submission's kernel is forked from a server in the sandbox
that has imported PyTorch, and nothing one kernel does reaches the next; a kernel has no privileges, sees only
its own folders, and ends with its launcher; grades are those of a sandbox started per kernel."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

A = "03_self_attention"


@pytest.fixture(scope="module")
def server():
    from conftest import require_bwrap
    require_bwrap()
    from tfmgrader.forkserver import ForkServer
    srv = ForkServer(watch="/nonexistent-course", owner=f"{os.getpid()}:None:/nonexistent-course")
    yield srv
    srv.close()


class Kernel:
    """A kernel of ``server`` started as SandboxedExecute starts one (its kernel spec, the launcher)."""

    def __init__(self, server, workdir: Path):
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager
        from tfmgrader.kernelspec import KERNEL_NAME, write_kernelspec
        from tfmgrader.sandbox_kernel import FORKSERVER_ENV

        self.private = server.new_folder()
        write_kernelspec(self.private / "jupyter", env={FORKSERVER_ENV: str(server.socket)})
        (self.private / "run").mkdir(mode=0o700)
        specs = KernelSpecManager(kernel_dirs=[str(self.private / "jupyter" / "kernels")])
        self.km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs, transport="ipc",
                                ip=str(self.private / "run" / "kernel"))
        self.km.start_kernel(cwd=str(workdir))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(self, code: str) -> str:
        """What ``code`` printed; an error in it fails the test."""
        out, errors = [], []

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                errors.append("\n".join(msg["content"]["traceback"]))

        self.kc.execute_interactive(code, timeout=60, output_hook=hook)
        assert not errors, errors
        return "".join(out)

    def stop(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def kernel_pids(server) -> set[int]:
    return {p.pid for p in server._processes()} - server.own


LEAVE_BEHIND = r"""
import os, sys, json, threading, time, subprocess, resource
import torch, tfmlib
open('left.txt', 'w').write('A')
open('/tmp/left.txt', 'w').write('A')
tfmlib.LEFT = 'A'
import math
math.pi = 3.0
torch.manual_seed(1234)
torch.set_num_threads(1)
os.environ['LEFT'] = 'A'
sys.modules['left_module'] = type(sys)('left_module')
threading.Thread(target=lambda: time.sleep(600), name='left-thread', daemon=False).start()
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
try:
    from multiprocessing import shared_memory
    shared_memory.SharedMemory(name='left', create=True, size=16)
    shm = 'made'
except OSError as err:
    shm = type(err).__name__
print(math.pi, child, shm)
"""

LOOK_FOR_IT = r"""
import os, sys, json, threading, resource
import torch, tfmlib
found = {
    'file': os.path.exists('left.txt'), 'tmp': os.path.exists('/tmp/left.txt'),
    'module': hasattr(tfmlib, 'LEFT') or 'left_module' in sys.modules, 'math': __import__('math').pi == 3.0,
    'env': 'LEFT' in os.environ, 'thread': any(t.name == 'left-thread' for t in threading.enumerate()),
    'processes': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
    'nofile': resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    'seed': torch.initial_seed(),
}
try:
    from multiprocessing import shared_memory
    shared_memory.SharedMemory(name='left')
    found['shm'] = True
except (OSError, ValueError):
    found['shm'] = False
print(json.dumps(found))
"""


def test_nothing_of_one_kernel_reaches_the_next(server, tmp_path):
    """A kernel leaves a file (in its folder and in /tmp), changed modules, an environment variable, a thread, a
    process, a lowered limit, a seed and (if it may) shared memory; the next kernel of the same server sees none of it."""
    from tfmgrader.sandbox_kernel import kernel_limits

    first = Kernel(server, tmp_path)
    try:
        printed = first.run(LEAVE_BEHIND)
        assert printed.split()[0] == "3.0", printed      # the changes really happened in the first kernel
        left = kernel_pids(server)
        assert len(left) >= 3, left                        # between-process, kernel and its forked child
    finally:
        first.stop()
    deadline = time.monotonic() + 10
    while kernel_pids(server) & left and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kernel_pids(server) & left, "a process of the first kernel outlived it"
    second = Kernel(server, tmp_path)
    try:
        found = json.loads(second.run(LOOK_FOR_IT).strip().splitlines()[-1])
    finally:
        second.stop()
    assert found["processes"] == [1], found        # its own PID namespace: nothing of the first kernel in it
    assert found["nofile"] == kernel_limits()["nofile"]
    assert found["seed"] != 1234
    leaked = [k for k in ("file", "tmp", "module", "math", "env", "thread", "shm") if found[k]]
    assert not leaked, f"the second kernel saw what the first left: {leaked}"


PRIVILEGES = r"""
import os, json, resource, socket, sys
status = dict(line.split(':\t', 1) for line in open('/proc/self/status').read().splitlines() if ':\t' in line)
def writable(path):
    try:
        with open(path, 'w') as f:
            f.write('x')
        return True
    except OSError:
        return False
try:
    socket.create_connection(('127.0.0.1', 80), timeout=2)
    net = True
except OSError:
    net = False
print(json.dumps({
    'uid': os.getuid(), 'pid': os.getpid(), 'cwd': os.getcwd(),
    'caps': [status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],
    'nnp': status['NoNewPrivs'].strip(), 'net': net,
    'limits': {name: resource.getrlimit(getattr(resource, 'RLIMIT_' + name.upper()))[0]
               for name in ('as', 'nproc', 'cpu', 'fsize', 'nofile', 'core')},
    'server_socket': os.path.exists(SERVER), 'home': sorted(os.listdir(HOME)),
    'write_prefix': writable(os.path.join(sys.prefix, 'left.txt')), 'write_cwd': writable('mine.txt'),
}))
"""


def test_a_kernel_has_no_privileges_and_sees_only_its_own_folders(server, tmp_path):
    from tfmgrader.sandbox_kernel import KERNEL_UIDS, kernel_limits

    kernel = Kernel(server, tmp_path)
    try:
        code = f"SERVER = {str(server.socket)!r}\nHOME = {str(server.home)!r}\n" + PRIVILEGES
        seen = json.loads(kernel.run(code).strip().splitlines()[-1])
    finally:
        kernel.stop()
    assert seen["caps"] == ["0000000000000000"] * 5 and seen["nnp"] == "1", seen
    assert seen["pid"] == 1 and not seen["net"], seen
    if os.geteuid() == 0:
        assert KERNEL_UIDS[0] <= seen["uid"] < KERNEL_UIDS[1], seen
    assert seen["limits"] == kernel_limits(), seen
    # Of the server's home: only its own folder, nothing of other kernels and not the server's socket.
    assert not seen["server_socket"] and seen["home"] == [kernel.private.name], seen
    assert seen["cwd"] == str(kernel.private / "work") and seen["write_cwd"] and not seen["write_prefix"], seen


def test_a_kernel_ends_with_its_launcher(server, tmp_path):
    """SIGKILL to the launcher (what jupyter_client does to a kernel that will not stop) ends the kernel and
    everything it started."""
    kernel = Kernel(server, tmp_path)
    kernel.run("import os, time\nif os.fork() == 0:\n    time.sleep(600)\n    os._exit(0)\n")
    mine = kernel_pids(server)
    assert mine
    os.kill(kernel.km.provisioner.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while kernel_pids(server) & mine and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kernel_pids(server) & mine, "the kernel outlived its launcher"
    kernel.kc.stop_channels()
    kernel.km.cleanup_resources()


def test_grades_are_those_of_a_sandbox_per_kernel(tmp_path):
    """The same class graded by scripts/grade.py with warm kernels and with a sandbox started per kernel
    (GRADER_FORKSERVER=0): the same grades, statuses and reasons."""
    from conftest import require_bwrap
    from test_grading import new_course
    from fixtures.make_class import make_class

    require_bwrap()
    course = tmp_path / "course"
    course.mkdir()
    env = new_course(course, [A])
    kinds = {"correct-plain", "wrong-first", "attack-os-exit", "attack-alloc-4gb", "attack-audit-fd-close",
             "attack-fifo-trace"}
    students = make_class(course, [A], kinds={A: kinds})
    rows = {}
    for mode in ("1", "0"):
        out = tmp_path / f"grades-{mode}"
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), A, "--course", str(course),
                               "--out", str(out), "--jobs", "1", "--regrade"],
                              env={**env, "GRADER_FORKSERVER": mode, "GRADER_REPORTS": str(out / "reports")},
                              capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        with open(out / "grades.csv") as f:
            rows[mode] = [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)]
        used = {json.loads((out / "reports" / A / f"{s}.json").read_text())[f"{A}"]["kernel"] for s in students
                if (out / "reports" / A / f"{s}.json").exists()}
        assert used == {"forked from the fork server" if mode == "1" else "a sandbox of its own"}, used
    assert len(rows["1"]) == len(kinds)
    assert rows["1"] == rows["0"]


def test_a_server_that_cannot_make_kernels_means_a_sandbox_per_kernel(monkeypatch):
    """Where the fork server cannot start or cannot make a kernel (an old bubblewrap, no user namespaces),
    SandboxedExecute says so once in the log and starts a sandbox per kernel, without asking again."""
    from tfmgrader import preprocessors
    from tfmgrader.forkserver import ForkServerError

    calls = []

    def refuse(cls, watch, owner, nproc=0):
        calls.append(watch)
        raise ForkServerError("the fork server cannot make a kernel here (exit 70): no user namespaces")

    monkeypatch.setattr(preprocessors.SandboxedExecute, "_fork_failed", "")
    monkeypatch.setattr(preprocessors.ForkServer, "shared", classmethod(refuse))
    execute = preprocessors.SandboxedExecute()
    warnings = []
    monkeypatch.setattr(execute.log, "warning", lambda text, *args: warnings.append(text % args))
    assert execute._fork_server("/course", "1:2:/course") is None
    assert execute._fork_server("/course", "1:2:/course") is None
    assert calls == ["/course"] and len(warnings) == 1 and "no user namespaces" in warnings[0], (calls, warnings)
    monkeypatch.setenv("GRADER_FORKSERVER", "0")
    monkeypatch.setattr(preprocessors.SandboxedExecute, "_fork_failed", "")
    assert execute._fork_server("/course", "1:2:/course") is None and calls == ["/course"]
