"""Warm kernels: one sandboxed fork server per grading process, one fresh forked kernel per submission.

Where a submission's seconds went (``profile_grading.py``): four fifths in starting its kernel, a fresh
Python that imports ipykernel and then PyTorch, for every submission again.  The fork server pays that once
per grading process.  It is a Python process in the same bubblewrap sandbox as a kernel (no network, the
system and the Python installation read-only, no other folder of the grader's), that has imported PyTorch,
the course library and ipykernel, keeps a few capabilities only to set up each kernel, and never runs a
learner's code.  For each submission the kernel launcher (``sandbox_kernel.py``, started by nbgrader as
before) asks it over a Unix socket for a kernel; it forks one, which gets its own mount, IPC and PID
namespaces, only its own two folders, a fresh ``/tmp``, no capabilities, its own uid (as root) and the
limits, before the audit hook and ipykernel start (``forkserver_inside.py``).  The launcher stands for the
kernel towards jupyter_client: signals are forwarded, its end ends the kernel, the kernel's end ends it.

Nothing of one submission reaches the next: each kernel is a new process made from the server, which ran none of the
learner's code, and no folder it can write is shown to another kernel (``tests/tfmgrader/test_forkserver.py`` leaves
a file, a changed module, an environment variable, a thread and a process behind and looks for them in the next
kernel).  When the server cannot start here (an old bubblewrap, no user namespaces, no
capabilities inside the sandbox), grading falls back to a sandbox started per kernel, and says so in the log.
``GRADER_FORKSERVER=0`` chooses that fallback.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tfmgrader.lifetime import OWNER_ENV, set_death_signal
from tfmgrader.limits import limit

ENABLE_ENV = "GRADER_FORKSERVER"      # "0": a sandbox per kernel, as before
INSIDE = Path(__file__).resolve().with_name("forkserver_inside.py")
CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL")   # the server's; no kernel keeps any


class ForkServerError(RuntimeError):
    pass


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") != "0"


class ForkServer:
    """The fork server of this process (``shared``), its private home (mode 0700) and the kernels' folders."""

    _shared: ForkServer | None = None

    def __init__(self, watch: str, owner: str, nproc: int = 0):
        from tfmgrader.forkserver_inside import HOME_ENV, KEEP_ENV, STASH, TMP_BYTES_ENV
        from tfmgrader.sandbox_kernel import base_env, parent_dirs, python_binds, sandbox_command

        self.pid, self.key, self.nproc = os.getpid(), (watch, owner), nproc
        self.home = Path(tempfile.mkdtemp(prefix="tfmlib-grading-forks-"))
        self.socket = self.home / "server.sock"
        binds = python_binds()
        keep = [binds[i + 2] for i, arg in enumerate(binds) if arg == "--ro-bind" and
                (binds[i + 2] + "/").startswith("/tmp/")]
        env = {**base_env(watch), HOME_ENV: str(self.home), KEEP_ENV: os.pathsep.join(keep),
               TMP_BYTES_ENV: str(limit("GRADER_FILE_MB") * 1024 * 1024)}
        cmd = sandbox_command(env) + parent_dirs(str(self.home)) + ["--bind", str(self.home), str(self.home),
                                                                     "--dir", STASH, "--cap-drop", "ALL"]
        for cap in CAPS:
            cmd += ["--cap-add", cap]
        cmd += [sys.executable, "-c", INSIDE.read_text(), str(self.socket)]
        self.log = self.home / "server.log"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                            env={**os.environ, OWNER_ENV: owner}, preexec_fn=set_death_signal)
        self.info = self._ready()
        self.own = {p.pid for p in self._processes()}     # bwrap and the server: not a kernel's CPU
        atexit.register(self.close)
        self._probe()

    def _probe(self) -> None:
        """Make one kernel's namespaces, folders and privileges and stop before the kernel: if that fails here
        (no user namespaces, a kernel that refuses a mount), the grader uses a sandbox per kernel instead."""
        from tfmgrader.sandbox_kernel import FD_ENV, KERNEL_CONNECTION, kernel_limits, kernel_uid

        folder = self.new_folder()
        for name in ("run", "work"):
            (folder / name).mkdir(mode=0o700)
        request = {"folders": [str(folder / "run"), str(folder / "work")], "workdir": str(folder / "work"),
                   "uid": kernel_uid() if os.geteuid() == 0 else None, "limits": kernel_limits(self.nproc), "env": {},
                   "fd_env": FD_ENV, "connection_file": KERNEL_CONNECTION, "connection": "", "launcher": "",
                   "probe": True}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(60)
        code = None
        try:
            with open(os.devnull, "wb") as null, open(self.log, "ab") as log:
                conn.connect(str(self.socket))
                socket.send_fds(conn, [json.dumps(request).encode()], [null.fileno(), log.fileno(), log.fileno()])
            buffer = b""
            while code is None:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                buffer += chunk
                for line in buffer.split(b"\n")[:-1]:
                    code = json.loads(line).get("exit", code)
                buffer = buffer.rsplit(b"\n", 1)[-1]
        except (OSError, ValueError) as err:
            self.close()
            raise ForkServerError(f"the fork server did not answer: {err}") from None
        finally:
            conn.close()
            shutil.rmtree(folder, ignore_errors=True)
        if code != 0:
            tail = self.log_tail()
            self.close()
            raise ForkServerError(f"the fork server cannot make a kernel here (exit {code}): {tail}")

    def _ready(self) -> dict:
        deadline = time.monotonic() + limit("GRADER_FORKSERVER_START")
        line = b""
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            ready, _, _ = select.select([self.process.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
        try:
            info = json.loads(line.decode())
        except ValueError:
            info = {}
        if not info.get("ready"):
            self.close()
            raise ForkServerError(f"the fork server did not start: {self.log_tail()}")
        if info.get("threads", 1) != 1:
            self.close()
            raise ForkServerError(f"the fork server has {info['threads']} threads after its imports; forking it "
                                  "would not be safe")
        return info

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-1000:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    @classmethod
    def shared(cls, watch: str, owner: str, nproc: int = 0) -> ForkServer:
        """This process's server for ``watch`` and ``owner`` (started now if there is none, it died, or it was
        started by the process this one was forked from); ``nproc``: the kernels' process limit, when it is not
        ``GRADER_NPROC`` (``sandbox_kernel.kernel_limits``)."""
        server = cls._shared
        if server is None or server.pid != os.getpid() or server.key != (watch, owner) or not server.alive():
            if server is not None and server.pid == os.getpid():
                server.close()
            cls._shared = None
            cls._shared = cls(watch, owner, nproc)
        return cls._shared

    def alive(self) -> bool:
        return self.process.poll() is None and self.socket.exists()

    def new_folder(self) -> Path:
        """A private folder (0700) for one kernel's spec, sockets, logs and working copy, inside the home."""
        return Path(tempfile.mkdtemp(prefix="kernel-", dir=self.home))

    def _processes(self) -> list:
        import psutil
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def kernels(self) -> list:
        """The processes of this server's kernels that are still running (psutil), not the server's own."""
        return [p for p in self._processes() if p.pid not in self.own]

    def kernel_cpu(self) -> float:
        """CPU seconds used so far by the kernels of this server that are still running."""
        total = 0.0
        for p in self.kernels():
            try:
                total += sum(p.cpu_times()[:4])
            except Exception:  # noqa: BLE001 - ended meanwhile
                pass
        return total

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        shutil.rmtree(self.home, ignore_errors=True)
