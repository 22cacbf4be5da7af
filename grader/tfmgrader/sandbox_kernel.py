"""Start an IPython kernel for a learner's notebook inside a bubblewrap sandbox.

Used as the ``argv`` of the ``tfmlib-sandbox`` kernel spec that the grading configuration selects
(see ``kernelspec.py``).  The kernel:

- sees only the system's programs and libraries, the Python installation, the course packages
  ``tfmlib`` and ``tfmcheck`` (read-only) and its own working folder, plus a private ``/tmp``.  The working folder is a
  private *copy* of the student's ``autograded/<student>/<assignment>`` (``scratch_folder``) holding only
  the files the assignment released (``make_scratch``, ``submission_files.py``), mounted at
  that folder's path: nothing the kernel writes, links or replaces there is ever touched by the grader,
  which keeps running as root after the kernel ends (it reads back only the trace, see ``read_regular``);
- has no network (a new, empty network namespace), its own process and IPC namespaces, and no
  capabilities; when the grader runs as root it runs as an unprivileged uid of its own (``kernel_uid``);
- runs under resource limits: address space, processes, CPU seconds, file size, open files.

Because the sandbox has no network, the kernel talks to the grader over Unix sockets: the grading
configuration sets ``KernelManager.transport = 'ipc'`` and a fresh ``JUPYTER_RUNTIME_DIR``, which is
the one other folder bound into the sandbox.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import sys
from pathlib import Path

from tfmcheck import REFUSE_ENV, SECRET_ENV, TRACE_ENV, TRACE_NAME
from tfmgrader.library_view import grader_view, library_folder, library_folders
from tfmgrader.lifetime import die_with_grader
from tfmgrader.limits import limit

AUDIT_MARK = "TFMLIB-AUDIT "
WATCH_ENV, OWN_ENV, FD_ENV = "TFMLIB_AUDIT_WATCH", "TFMLIB_AUDIT_OWN", "TFMLIB_AUDIT_FD"
FORKSERVER_ENV = "TFMLIB_FORKSERVER"        # the fork server's socket, when the grader has one (forkserver.py)
KERNEL_CONNECTION = "/tmp/.tfmlib-kernel.json"    # where a forked kernel finds its connection file (its own /tmp)

# Runs in the kernel before ipykernel starts: a Python audit hook (which cannot be removed once added)
# reports, on a file descriptor it inherits (audit.log beside the sockets, which the grader reads; not
# the kernel's stdout or stderr, which ipykernel forwards to the notebook), every attempt to open a file under the
# watched folders (the course) outside the learner's own folder, to start a process, to use a socket or
# to open an SQLite database, and code run from a string or raw memory reached through ctypes by the answer's own
# code (round 20).  The sandbox stops the first ones; the hook makes sure the instructor hears of them all.
AUDIT_LAUNCHER = """
import os, platform, sys
platform.uname().processor     # asked of 'uname' by debugpy at start-up: answered before the hook is on
try:
    import tfmcheck.lockdown   # sparse tensors' internals refused for every thread, before any cell runs
    _groups = [g for g in os.environ.pop(%(refuse)r, '').split(',') if g]
    if os.environ.get(%(trace)r):      # graded, from the start: no raw memory, nor the implementations its tests forbid
        tfmcheck.lockdown.guard_raw_memory()
        import tfmcheck.shortcuts
        tfmcheck.shortcuts.refuse(_groups)
except ImportError:
    pass                       # no tfmcheck in this environment: the setup cell meets and reports it
_fd0 = int(os.environ.pop(%(fd)r, '2'))
_st0 = os.fstat(_fd0)
def _audit(event, args, _write=os.write, _fd=_fd0, _ident=(_st0.st_dev, _st0.st_ino), _fstat=os.fstat,
           _exit=os._exit, _abspath=os.path.abspath, _sep=os.sep, _mark=%(mark)r,
           _watch=tuple(w for w in os.environ.pop(%(watch)r, '').split(os.pathsep) if w),
           _own=tuple(w for w in os.environ.pop(%(own)r, '').split(os.pathsep) if w),
           _frame=sys._getframe, _modules=sys.modules, _guard=os.sep + os.path.join('tfmcheck', 'checking.py'),
           _installed=tuple({os.path.join(q, '') for p in (sys.prefix, sys.base_prefix)
                             for q in (p, os.path.realpath(p))}),
           _libraries=tuple({os.path.join(q, '') for p in sys.path if p and os.path.isdir(p)
                             and os.path.realpath(p) != os.path.realpath(os.getcwd())
                             for q in (p, os.path.realpath(p))})):
    try:
        if event == 'open' and isinstance(args[0], (str, bytes)):
            p = _abspath(args[0] if isinstance(args[0], str) else args[0].decode(errors='replace'))
            if not any(p == w or p.startswith(w + _sep) for w in _watch) or \
                    any(p == w or p.startswith(w + _sep) for w in _own):
                return
            what = 'opened ' + p
        elif event in ('socket.connect', 'socket.bind', 'socket.sendto', 'socket.sendmsg'):
            what = event + ' ' + repr(args[1])[:200]
        elif event in ('subprocess.Popen', 'os.system', 'os.exec', 'os.posix_spawn', 'os.spawn', 'os.fork',
                       'os.forkpty', 'pty.spawn'):
            what = 'start a process (' + event + ' ' + repr(args[0])[:120] + ')'
        elif event in ('sys.setprofile', 'sys.settrace'):
            caller = _frame(1).f_code.co_filename
            if caller.endswith(_guard) or caller.startswith(_installed):
                return      # tfmcheck.checking's guard against shortcuts, or the installation's own code (ipykernel)
            refusing = getattr(_modules.get('tfmcheck.checking'), '_REFUSING', None)
            if event == 'sys.setprofile' and type(refusing) is list and refusing:
                refusing.clear()
                return      # CPython removing the guard's hook after it refused a shortcut: not the answer's doing
            what = 'switch the check for library shortcuts off (' + event + ')'
        elif event in ('exec', 'compile') or event.startswith('ctypes.'):
            caller = _frame(1).f_code.co_filename
            if caller.endswith(_guard) or caller.startswith(_installed + _libraries) or caller.startswith('<frozen '):
                return      # the test cells' runner, IPython running a cell, a library's own code, an import
            what = ('run code from a string (' + event + ', in ' + caller[-80:] + ')') if event in ('exec', 'compile') \
                else ('reach raw memory through ctypes (' + event + ', in ' + caller[-80:] + ')')
        elif event == 'tfmcheck.raw_memory':     # tfmcheck.lockdown.guard_raw_memory refused a call (round 22)
            what = 'reach raw memory (' + str(args[0])[:120] + ')'
        elif event == 'sqlite3.connect' and args and str(args[0]) != ':memory:':
            what = 'opened the SQLite database ' + str(args[0])[:200]
        else:
            return
    except Exception:
        return
    try:    # the channel must still be the one the grader gave: closed or replaced, the kernel stops here
        st = _fstat(_fd)
        if (st.st_dev, st.st_ino) != _ident:
            raise OSError
        _write(_fd, (_mark + what + chr(10)).encode())
    except Exception:
        _exit(86)
sys.addaudithook(_audit)
del _audit, _fd0, _st0
import runpy
sys.argv[0] = 'ipykernel_launcher'
runpy.run_module('ipykernel_launcher', run_name='__main__', alter_sys=True)
""" % {"mark": AUDIT_MARK, "watch": WATCH_ENV, "own": OWN_ENV, "fd": FD_ENV, "trace": TRACE_ENV,
       "refuse": REFUSE_ENV}

#: The kernel's IPython: no history file; no automagic and no autocall, which would run a line the scan reads as
#: Python (``run -m operator``, ``f [1]``) as a magic or a call; no output cache (``_5``: what cell 5 displayed)
#: (forkserver_inside.py passes the same).
KERNEL_OPTIONS = ["--HistoryManager.hist_file=:memory:", "--InteractiveShell.automagic=False",
                  "--InteractiveShell.autocall=0", "--InteractiveShell.cache_size=0"]

KERNEL_UIDS = (200_000, 4_194_304)   # each kernel its own unprivileged uid (and gid), from this range


def kernel_uid(pid: int | None = None) -> int:
    """The uid the learner's kernel runs as when grading as root: 200000 + the launcher's process id, so
    two kernels running at once never share one (RLIMIT_NPROC counts per uid, and a kernel cannot signal
    another one), and no uid of the machine's accounts is used."""
    return KERNEL_UIDS[0] + (os.getpid() if pid is None else pid) % (KERNEL_UIDS[1] - KERNEL_UIDS[0])


def system_binds() -> list[str]:
    """Read-only views of the operating system: /usr and the /bin, /lib… entries (symlinks kept)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group",
              "/etc/localtime"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    return args


def parent_dirs(path: str) -> list[str]:
    """``--dir`` arguments creating the ancestors of ``path`` with mode 0755, so that the sandbox
    user can reach a folder bound below them (bwrap would create them 0700, root-only)."""
    args, parts = [], Path(path).parts[1:-1]
    for i in range(len(parts)):
        args += ["--perms", "0755", "--dir", "/" + "/".join(parts[: i + 1])]
    return args


def python_binds() -> list[str]:
    """Read-only: the Python installation, the virtual environment and the tfmlib package."""
    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), sys.prefix,
             *library_folders(), *grader_view().binds}   # see library_view.py
    args = []
    for p in sorted(paths, key=len):
        if not p.startswith("/usr/"):
            args += parent_dirs(p) + ["--ro-bind", p, p]
    return args


def socket_dir(conn: dict) -> str:
    """The folder of the kernel's Unix sockets (``ip`` of an ipc connection), which must be absolute."""
    ip = conn.get("ip", "")
    if conn.get("transport") != "ipc" or not os.path.isabs(ip):
        raise SystemExit("tfmlib-sandbox: the kernel has no network; the grading config must set "
                         "KernelManager.transport = 'ipc' and an absolute KernelManager.ip")
    folder = os.path.dirname(ip)
    if os.stat(folder).st_mode & 0o077:
        # It is bound into the sandbox and handed to the sandbox user: it must be a private folder.
        raise SystemExit(f"tfmlib-sandbox: the socket folder {folder} must be private (mode 0700)")
    return folder


def bwrap_command(connection_file: str, workdir: str, audit_fd: int = 2, scratch: str | None = None) -> list[str]:
    """The sandbox; ``scratch`` (a private copy of ``workdir``) is what the kernel sees and writes at
    ``workdir``'s path (None: ``workdir`` itself)."""
    conn = json.loads(Path(connection_file).read_text())
    sockets = socket_dir(conn)
    cmd = sandbox_command(kernel_env(workdir, audit_fd))
    cmd += parent_dirs(sockets) + ["--bind", sockets, sockets]
    cmd += parent_dirs(connection_file) + ["--ro-bind", connection_file, connection_file]
    cmd += parent_dirs(workdir) + ["--bind", scratch or workdir, workdir, "--chdir", workdir]
    if os.geteuid() == 0:   # never run learners' code as root
        cmd += ["/usr/bin/setpriv", f"--reuid={kernel_uid()}", f"--regid={kernel_uid()}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all"]
    cmd += ["/usr/bin/prlimit"] + [f"--{name}={value}" for name, value in kernel_limits().items()] + ["--"]
    cmd += [sys.executable, "-c", AUDIT_LAUNCHER, "-f", connection_file, *KERNEL_OPTIONS]
    return cmd


def base_env(watch: str | None = None) -> dict[str, str]:
    """The environment of the sandbox (the kernel's, without what depends on its working folder); ``watch``: the
    folders the audit hook watches (default: this launcher's ``WATCH_ENV``, which ``SandboxedExecute`` set)."""
    env = {
        "PATH": f"{sys.prefix}/bin:/usr/bin:/bin", "HOME": "/tmp", "USER": "student", "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp", "IPYTHONDIR": "/tmp/.ipython", "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "TFMLIB_DEVICE": "cpu", "OMP_NUM_THREADS": "1",
        "JUPYTER_RUNTIME_DIR": "/tmp", "PYTHONWARNINGS": "ignore",
        WATCH_ENV: os.environ.get(WATCH_ENV, "") if watch is None else watch,
    }
    if grader_view().pythonpath:    # the course library where the grader found it (library_view.py)
        env["PYTHONPATH"] = os.pathsep.join(grader_view().pythonpath)
    return env


def kernel_env(workdir: str, audit_fd: int) -> dict[str, str]:
    """The kernel's environment: ``base_env``, where it records results and reports what it opens, the secret its
    tests' inputs come from (``SECRET_ENV``, drawn by ``SandboxedExecute``; without it they fail) and the shortcut
    groups its launcher refuses before any cell runs (``REFUSE_ENV``)."""
    secret = {name: os.environ[name] for name in (SECRET_ENV, REFUSE_ENV) if os.environ.get(name)}
    return {**base_env(),
            TRACE_ENV: os.path.join(workdir, TRACE_NAME),   # tfmcheck.checking records the learner's results here
            OWN_ENV: own_folders(workdir), FD_ENV: str(audit_fd), **secret}


def sandbox_command(env: dict[str, str]) -> list[str]:
    """bwrap's namespaces, environment and read-only views of the system and the Python installation, with a
    private /tmp; the caller adds its own folders and the command."""
    # New network, process, IPC and host-name namespaces; a user namespace only when not root
    # (as root, the kernel drops to an unprivileged user instead).
    cmd = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--clearenv"]
    if os.geteuid() != 0:
        cmd.insert(1, "--unshare-user")
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    # /tmp first, so that an installation or course living under /tmp is bound on top of it.  Its size is capped as
    # one file is (GRADER_FILE_MB): a tmpfs's files are memory no process maps, which the memory held does not count
    # (red-team round 8 kept exercise 7's score matrix in files), and an uncapped one could fill the machine's RAM.
    tmp_bytes = limit("GRADER_FILE_MB") * 1024 * 1024
    cmd += system_binds() + ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(tmp_bytes),
                             "--tmpfs", "/tmp"]
    return cmd + python_binds() + withheld_binds()


def withheld_binds() -> list[str]:
    """Nothing worth stealing in the kernel (``tfmcheck.withheld``): the course library's folder covered by an
    empty one, and the feedback catalogue (whose builders compute correct answers) replaced by its inert
    stand-in.  The graded kernel only records; the grader's own process computes references and diagnoses."""
    check_dir = library_folder("tfmcheck")
    return ["--perms", "0555", "--tmpfs", library_folder("tfmlib"),
            "--ro-bind", os.path.join(check_dir, "feedback_withheld"), os.path.join(check_dir, "feedback")]


def kernel_limits(nproc: int = 0) -> dict[str, int]:
    """prlimit's names and values of the kernel's resource limits (``limits.LIMITS``); ``nproc``: the process limit
    when it is not ``GRADER_NPROC`` (``SandboxedExecute.kernel_nproc``)."""
    mb = 1024 * 1024
    return {"as": limit("GRADER_MEMORY_MB") * mb, "nproc": nproc or limit("GRADER_NPROC"),
            "cpu": limit("GRADER_CPU_SECONDS"), "fsize": limit("GRADER_FILE_MB") * mb,
            "nofile": limit("GRADER_NOFILE"), "core": 0}


def scratch_folder(connection_file: str) -> Path:
    """``work`` beside the socket folder, inside the grader's private folder (mode 0700, never bound into
    the sandbox itself): where the kernel's copy of its working folder lives.  The grader reads the trace
    from here (``SandboxedExecute``) and deletes it with the private folder."""
    return Path(log_folder(connection_file)) / "work"


def make_scratch(connection_file: str, workdir: str) -> str:
    """A fresh folder for the kernel to work in, holding copies of only the files of ``workdir`` that the
    assignment released (the allow-list ``SandboxedExecute`` wrote beside the logs; without one, the
    notebooks): whatever else a learner submitted never reaches the kernel (``submission_files.py``)."""
    from tfmgrader.submission_files import copy_allowed, read_allowed

    scratch = scratch_folder(connection_file)
    shutil.rmtree(scratch, ignore_errors=True)     # a restarted kernel starts from the submission again
    scratch.mkdir(mode=0o700)
    copy_allowed(Path(workdir), scratch, read_allowed(Path(log_folder(connection_file)), Path(workdir)))
    os.chmod(scratch, 0o700)
    return str(scratch)


def hand_over(connection_file: str, scratch: str) -> None:
    """As root, give the sandbox user its working copy, the socket folder and the connection file."""
    if os.geteuid() != 0:
        return
    sockets = Path(socket_dir(json.loads(Path(connection_file).read_text())))
    for p in [sockets, Path(scratch), *Path(scratch).rglob("*")]:
        os.chown(p, kernel_uid(), kernel_uid(), follow_symlinks=False)
    os.chown(connection_file, kernel_uid(), kernel_uid())


def unsandboxed(connection_file: str, workdir: str) -> None:
    """The instructor's explicit opt-out (``TFMLIB_GRADING_UNSAFE=1``): a plain kernel that still records
    the learner's results for the verdicts outside it, but with no confinement at all.  It too works in a
    copy holding only the released files (nothing else submitted is on its import path), but it runs with
    the grader's rights and can open any file by its path."""
    workdir = make_scratch(connection_file, workdir)
    os.chdir(workdir)
    env = {**os.environ, TRACE_ENV: os.path.join(workdir, TRACE_NAME), OWN_ENV: own_folders(workdir),
           FD_ENV: str(open_audit_log(connection_file)), "PWD": workdir}
    log_to_private_folder(connection_file)
    os.execve(sys.executable, [sys.executable, "-c", AUDIT_LAUNCHER, "-f", connection_file,
                               *KERNEL_OPTIONS], env)


def read_regular(path, limit: int) -> tuple[bytes, str]:
    """``(content, problem)`` of a file the kernel could have written: opened without following a link and
    without blocking (a FIFO), read only if it is a regular file, at most ``limit`` bytes.  A missing file
    is ``(b"", "")``; anything else odd is ``(b"", why)``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return b"", ""
    except OSError as err:
        return b"", f"{os.path.basename(path)} could not be opened safely ({err.strerror}; a link?)"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", f"{os.path.basename(path)} is not a regular file"
        if st.st_size > limit:
            return b"", f"{os.path.basename(path)} is larger than {limit} bytes"
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return b"", f"{os.path.basename(path)} is larger than {limit} bytes"
        return b"".join(chunks), ""
    finally:
        os.close(fd)


def own_folders(workdir: str) -> str:
    """Folders the kernel may open without a report: its own, the Python installation and tfmlib."""
    paths = [workdir, sys.prefix, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
             *library_folders(), *grader_view().binds]
    return os.pathsep.join(paths)


def log_folder(connection_file: str) -> str:
    """The grader's private folder above the socket folder: the kernel can write to the logs it inherits
    open, but cannot replace them (the socket folder is handed to the kernel's user; this one is not)."""
    return os.path.dirname(socket_dir(json.loads(Path(connection_file).read_text())))


def open_audit_log(connection_file: str) -> int:
    """audit.log in ``log_folder``, opened for the kernel to inherit; returns its descriptor."""
    fd = os.open(os.path.join(log_folder(connection_file), "audit.log"),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.set_inheritable(fd, True)
    return fd


def log_to_private_folder(connection_file: str) -> None:
    """The kernel's own console output goes to kernel.log in ``log_folder``; not to the grader's terminal."""
    if os.environ.get("GRADER_DEBUG"):
        return
    log = os.open(os.path.join(log_folder(connection_file), "kernel.log"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)


# --- a warm kernel: the launcher asks this grader's fork server for one (forkserver.py) ----------------------

def launch_forked(server: str, connection_file: str, workdir: str) -> None:
    """Ask the fork server at ``server`` for a kernel working in a private copy of ``workdir``, then stand for it
    until it ends (exit with its code)."""
    scratch = make_scratch(connection_file, workdir)
    hand_over(connection_file, scratch)
    text = Path(connection_file).read_text()
    request = {
        "folders": [socket_dir(json.loads(text)), scratch], "workdir": scratch,
        "uid": kernel_uid() if os.geteuid() == 0 else None, "limits": kernel_limits(),
        "env": kernel_env(scratch, 3), "fd_env": FD_ENV,
        "connection_file": KERNEL_CONNECTION, "connection": text, "launcher": AUDIT_LAUNCHER,
    }
    audit = open_audit_log(connection_file)
    log_to_private_folder(connection_file)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(server)
        socket.send_fds(conn, [json.dumps(request).encode()], [audit, 1, 2])
    except OSError as err:
        raise SystemExit(f"tfmlib-sandbox: the fork server at {server} did not take the request: {err}") from None
    os.close(audit)

    def forward(signum, _frame):
        try:
            conn.sendall(json.dumps({"signal": signum}).encode() + b"\n")
        except OSError:
            os._exit(1)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    buffer = b""
    while True:
        try:
            chunk = conn.recv(4096)
        except InterruptedError:
            continue
        if not chunk:
            raise SystemExit(1)      # the server is gone, and with it the kernel
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line.decode())
            if "exit" in message:
                code = int(message["exit"])
                raise SystemExit(code if 0 <= code < 256 else 1)


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[1] != "--unsandboxed"):
        raise SystemExit("usage: sandbox_kernel.py [--unsandboxed] CONNECTION_FILE")
    die_with_grader()       # the kernel never outlives the grader that started it (lifetime.py)
    if len(argv) == 3:
        unsandboxed(os.path.abspath(argv[2]), os.getcwd())
    if shutil.which("bwrap") is None:
        raise SystemExit("tfmlib-sandbox: bubblewrap is not installed (Debian: apt-get install bubblewrap)")
    connection_file, workdir = os.path.abspath(argv[1]), os.getcwd()
    if os.environ.get(FORKSERVER_ENV):     # a warm kernel, forked by this grader's fork server (forkserver.py)
        launch_forked(os.environ[FORKSERVER_ENV], connection_file, workdir)
    scratch = make_scratch(connection_file, workdir)
    hand_over(connection_file, scratch)
    cmd = bwrap_command(connection_file, workdir, open_audit_log(connection_file), scratch)
    if os.environ.get("GRADER_DEBUG"):
        print(" ".join(cmd), file=sys.stderr)
    log_to_private_folder(connection_file)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv)
