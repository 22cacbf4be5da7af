"""The fork server inside the grading sandbox: it imports PyTorch, the trace module and ipykernel once, then
forks one fresh kernel per submission, each in namespaces of its own.  Started by ``forkserver.py`` (which
passes this file's text to ``python -c``); it never runs a learner's code itself.

Protocol, on a Unix socket (``argv[1]``) that only the grader can reach (its folder is private to the grader):
a launcher (``sandbox_kernel.py``) connects and sends one request (a JSON line) with three file descriptors
(the audit log, then the kernel's stdout and stderr); the server forks and answers ``{"pid": N}``.  Later
lines from the launcher are signals to forward (``{"signal": 2}``); when the launcher's connection closes,
the kernel is killed; when the kernel ends, the server sends ``{"exit": code}`` and closes the connection.

Each kernel, before any of the learner's code exists in it (``become_kernel``):

1. new mount, IPC and PID namespaces: a fresh ``/tmp``, ``/dev/shm`` and ``/proc``, and of the grader's
   folders only its own socket folder and working folder, at their paths (the other kernels' folders and
   the server's socket are covered);
2. PID 1 of its PID namespace, dying with the process between it and the server (``PR_SET_PDEATHSIG``),
   so that when it ends, or is killed, everything it started ends with it;
3. no capabilities (the bounding and ambient sets cleared too), as root an unprivileged uid of its own,
   checked from ``/proc/self/status`` before going on (any doubt: it exits);
4. the resource limits, the kernel's environment and working folder, fresh random seeds;
5. the audit hook and ipykernel, exactly as a kernel started by bubblewrap (``sandbox_kernel.AUDIT_LAUNCHER``).

Module state, environment, files, limits and threads of one kernel never reach the next: each is a new
process forked from a server that ran none of the learner's code, and shares no writable folder with it.
"""
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 4, 24, 47, 4
SYS_CAPSET = 126                # x86_64; aarch64 is 91
HOME_ENV = "TFMLIB_FORKSERVER_HOME"   # the server's folder on the grader's side, bound at its own path
KEEP_ENV = "TFMLIB_FORKSERVER_KEEP"   # read-only binds of the sandbox under /tmp, kept over each kernel's /tmp
TMP_BYTES_ENV = "TFMLIB_FORKSERVER_TMP_BYTES"  # each kernel's /tmp and /dev/shm hold at most this (GRADER_FILE_MB)
STASH = "/.tfmlib-stash"       # an empty folder the server's sandbox has (bwrap --dir): binds wait here
LIMITS = {"as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC, "cpu": resource.RLIMIT_CPU,
          "fsize": resource.RLIMIT_FSIZE, "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}

libc = ctypes.CDLL(None, use_errno=True)


def _ok(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _ok(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def preload() -> list[str]:
    """Import what every kernel needs (not ``tfmcheck.checking``, which reads the kernel's environment when it
    is imported); returns what failed, which each kernel then meets and reports itself."""
    import platform
    platform.uname().processor  # noqa: B018 - asked of 'uname' by debugpy; answered here, before any audit hook
    failed = []
    for name in ("torch", "torch.nn.functional", "numpy", "tfmcheck.trace", "tfmcheck.lockdown", "tfmcheck.shortcuts",
                 "torch._higher_order_ops.flex_attention", "torch.ao.nn.quantizable.modules.activation", "IPython",
                 "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel_launcher"):
        try:
            __import__(name)
        except BaseException as err:  # noqa: BLE001 - the kernel imports it again and shows the error
            failed.append(f"{name}: {type(err).__name__}: {err}")
    return failed


def isolate_folders(folders: list[str]) -> None:
    """In a new mount namespace: a fresh /tmp and /dev/shm, the server's home covered, and ``folders`` (the
    kernel's own, inside the home) bound again at their own paths, writable; so are, read-only, the parts of
    the Python installation and the course library that the sandbox binds under /tmp (``KEEP_ENV``)."""
    home = os.environ[HOME_ENV]
    keep = [p for p in os.environ.get(KEEP_ENV, "").split(os.pathsep) if p]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", STASH, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    moves = [(path, True) for path in sorted(keep, key=len)] + [(path, False) for path in folders]
    for i, (path, _) in enumerate(moves):
        os.mkdir(f"{STASH}/{i}")
        mount(path, f"{STASH}/{i}", None, MS_BIND | MS_REC)
    # Capped, as the sandbox's own /tmp is: a tmpfs's files are memory that no process maps (round 15 kept the score
    # matrix in /tmp files of a fork-server kernel, whose tmpfs had no size).
    size = int(os.environ.get(TMP_BYTES_ENV) or 64 * 1024 * 1024)
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={size}")
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,size={size}")
    if not (home + "/").startswith("/tmp/"):
        mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for i, (path, read_only) in enumerate(moves):
        walk = ""
        for part in path.strip("/").split("/"):
            walk += "/" + part
            if not os.path.isdir(walk):
                os.mkdir(walk, 0o755)
        mount(f"{STASH}/{i}", path, None, MS_MOVE)
        if read_only and not os.statvfs(path).f_flag & MS_RDONLY:
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | (os.statvfs(path).f_flag & 0x1C0E))
            if not os.statvfs(path).f_flag & MS_RDONLY:
                raise OSError(f"{path} stayed writable")
    mount(None, STASH, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_privileges(uid: int | None) -> None:
    """No capabilities left in any set; as root, the unprivileged ``uid`` (and gid); exits on any doubt."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _ok(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop a capability from the bounding set")
    _ok(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear the ambient capabilities")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)       # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                      # effective, permitted, inheritable: all empty
    _ok(libc.syscall(SYS_CAPSET if os.uname().machine == "x86_64" else 91, header, data), "capset")
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    caps = [int(status[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
    uids = [int(u) for u in status["Uid"].split()]
    if any(caps) or status.get("NoNewPrivs", "0").strip() != "1" or (uid is not None and set(uids) != {uid}) \
            or 0 in uids:
        os.write(2, b"tfmlib-forkserver: the kernel kept privileges; not started\n")
        os._exit(71)


def become_kernel(request: dict, fds: list[int]) -> None:
    """In the forked child: namespaces, then a grandchild that is the kernel (see the module's docstring)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    audit, out, err = fds
    for fd, target in ((out, 1), (err, 2)):
        os.dup2(fd, target)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    audit = os.dup2(audit, 3, inheritable=True) if audit != 3 else audit
    os.closerange(4, 65536)
    os.setsid()
    _ok(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID), "unshare")
    isolate_folders(request["folders"])
    pid = os.fork()
    if pid:     # between the server and the kernel: forwards signals, reports the kernel's end
        def forward(signum, _frame):
            try:
                os.kill(pid, signum)
            except OSError:
                pass

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, forward)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(70)
        os._exit(min(max(os.waitstatus_to_exitcode(status), 0), 255) if os.WIFEXITED(status)
                 else 128 + os.WTERMSIG(status))
    parent = os.getppid()
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    drop_privileges(request.get("uid"))
    for name, value in request["limits"].items():
        resource.setrlimit(LIMITS[name], (value, value))
    # After every change of credentials, which clears it: the kernel dies with the process between it and the
    # server, which the server kills when the launcher goes; as PID 1, it takes its namespace with it.
    _ok(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        os._exit(70)
    if request.get("probe"):        # the grader's check, at the server's start, that kernels can be made here
        os._exit(0)
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[request["fd_env"]] = str(audit)
    os.chdir(request["workdir"])
    with open(request["connection_file"], "w") as f:
        f.write(request["connection"])
    run_kernel(request)


def run_kernel(request: dict) -> None:
    """The audit hook and ipykernel, as ``sandbox_kernel.AUDIT_LAUNCHER`` runs them under bubblewrap."""
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    # No debugger: ipykernel would import debugpy (0.15 s per kernel, and a thread if the server imported it);
    # nothing in grading talks to it.
    sys.modules["debugpy"] = None
    sys.argv = ["-c", "-f", request["connection_file"], "--HistoryManager.hist_file=:memory:",   # KERNEL_OPTIONS of
                "--InteractiveShell.automagic=False", "--InteractiveShell.autocall=0",         # sandbox_kernel.py
                "--InteractiveShell.cache_size=0"]
    sys.path[0] = ""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    code = compile(request["launcher"], "<tfmlib-sandbox>", "exec")
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 - the launcher
    except SystemExit as stop:
        os._exit(stop.code if isinstance(stop.code, int) else 1)
    except BaseException:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def spawn(request: dict, fds: list[int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            become_kernel(request, fds)
        except BaseException as err:  # noqa: BLE001 - never back into the server's loop
            try:
                os.write(2, f"tfmlib-forkserver: the kernel could not start: {err}\n".encode())
            finally:
                os._exit(70)
    return pid


def serve(path: str) -> None:
    _ok(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    failed = preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    threads = len(os.listdir("/proc/self/task"))
    print(json.dumps({"ready": True, "preload_failed": failed, "threads": threads}), flush=True)
    kernels: dict[int, socket.socket] = {}     # pid -> the launcher's connection
    conns: dict[socket.socket, int | None] = {}
    while True:
        readable, _, _ = select.select([listener, wake_r, *conns], [], [], 1.0)
        for r in readable:
            if r is listener:
                conn, _ = listener.accept()
                conns[conn] = None
            elif r == wake_r:
                os.read(wake_r, 4096)
            else:
                handle(r, conns, kernels)
        while kernels:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = kernels.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                except OSError:
                    pass
                conns.pop(conn, None)
                conn.close()


def handle(conn: socket.socket, conns: dict, kernels: dict) -> None:
    """A message from a launcher: its request (the first), a signal, or its end (then the kernel is killed)."""
    pid = conns[conn]
    try:
        if pid is None:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            request = json.loads(data.decode())
            if len(fds) != 3:
                raise ValueError("a request needs three file descriptors")
            pid = spawn(request, fds)
            for fd in fds:
                os.close(fd)
            conns[conn] = pid
            kernels[pid] = conn
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            return
        data = conn.recv(4096)
    except (OSError, ValueError) as err:
        data = b""
        print(json.dumps({"error": str(err)}), flush=True)
    if not data:        # the launcher is gone: so is its kernel
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        conns.pop(conn, None)
        conn.close()
        return
    for line in data.decode(errors="replace").splitlines():
        try:
            sig = int(json.loads(line).get("signal", 0))
            if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGHUP, signal.SIGQUIT):
                os.kill(pid, sig)
        except (ValueError, AttributeError, ProcessLookupError):
            pass


if __name__ == "__main__":
    serve(sys.argv[1])
