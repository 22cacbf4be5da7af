"""A class on a real local JupyterHub, for tests/book/test_hub.py: Unix accounts, the course root, nbgrader's
exchange, and the hub of scripts/hub/jupyterhub_config.py started on free ports and stopped again.

Everything a run creates lives in one temporary folder, except the Unix accounts (prefix ``tfmhub_``), which
are kept between runs and reset: each student's home is emptied, each password set anew.
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# `make venv` installs the proxy from npm into the venv's node/ folder (the Makefile's PROXY_VERSION)
PROXY = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
PREFIX = "tfmhub_"
GROUP = "tfmhub_class"
INSTRUCTOR = "tfmhub_instructor"
ASSIGNMENT = "03_self_attention"
RETRY_S = 3.0           # the longest a throttled start waits before it asks again (start_server)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_account(name: str, password: str, group: str | None) -> pwd.struct_passwd:
    """The Unix account ``name`` with an empty private home and this password; in ``group`` if given."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    if group:
        subprocess.run(["usermod", "-a", "-G", group, name], check=True)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    account = pwd.getpwnam(name)
    home = Path(account.pw_dir)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(mode=0o700)
    os.chown(home, account.pw_uid, account.pw_gid)
    os.chmod(home, 0o700)
    return account


def ensure_group(name: str) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        subprocess.run(["groupadd", name], check=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def load_roster_tool():
    """scripts/hub/roster.py, the class's roster import (accounts and gradebook from one CSV)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("roster", REPO / "scripts" / "hub" / "roster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_roster(path: Path, students: dict[str, tuple[str, str]]) -> Path:
    """A roster CSV as a registrar exports it: ``{id: (first name, last name)}``."""
    import csv
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "first_name", "last_name", "email"])
        for sid, (first, last) in students.items():
            writer.writerow([sid, first, last, f"{sid}@example.org"])
    return path


class Hub:
    """The hub of one test run: its folders, accounts and process, and calls to its REST API.  The students come
    from a roster CSV (``{id: (first name, last name)}``), imported by scripts/hub/roster.py: their Unix accounts
    and their gradebook rows with real names."""

    def __init__(self, students: dict[str, tuple[str, str]], spawn_limit: int = 10):
        self.base = Path(tempfile.mkdtemp(prefix="tfmhub-"))
        os.chmod(self.base, 0o755)
        self.state = self.base / "hub"
        self.state.mkdir(mode=0o700)
        self.exchange = self.base / "exchange"
        self.exchange.mkdir()
        os.chmod(self.exchange, 0o777)      # everyone writes here; nbgrader sets each course folder's permissions
        self.course = self.base / "course"
        self.log_path = self.base / "jupyterhub.log"
        self.port, self.token = free_port(), secrets.token_hex(24)
        self.url = f"http://127.0.0.1:{self.port}"
        self.passwords: dict[str, str] = {}
        self.proc: subprocess.Popen | None = None
        ensure_group(GROUP)
        self.add_account(INSTRUCTOR, group=None)
        self.make_course()
        self.roster = write_roster(self.base / "roster.csv", students)
        tool = load_roster_tool()
        started = time.monotonic()
        tool.create_accounts(tool.read_roster(self.roster), GROUP, None)       # the accounts the roster lacks
        for s in students:      # kept between runs: reset (empty home) with a password the test knows
            self.add_account(s)
        assert tool.main([str(self.roster), "--course", str(self.course)]) == 0      # the gradebook, with names
        self.roster_s = time.monotonic() - started
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "TFMHUB_DIR": str(self.state), "TFMHUB_PORT": str(self.port),
            "TFMHUB_HUB_PORT": str(free_port()), "TFMHUB_PROXY_API_PORT": str(free_port()),
            "TFMHUB_PROXY": str(PROXY), "TFMHUB_INSTRUCTORS": INSTRUCTOR, "TFMHUB_GROUP": GROUP,
            "TFMHUB_COURSE": str(self.course), "TFMHUB_EXCHANGE": str(self.exchange),
            "TFMHUB_ADMIN_TOKEN": self.token, "GRADER_SELFCHECK": os.environ.get("GRADER_SELFCHECK", "0"),
            "TFMHUB_SPAWN_LIMIT": str(spawn_limit),
        }

    def add_account(self, name: str, group: str | None = GROUP) -> None:
        self.passwords[name] = secrets.token_urlsafe(12)
        ensure_account(name, self.passwords[name], group)

    def make_course(self) -> None:
        """The course root, owned by the instructor: the course's nbgrader_config.py and the assignment's source."""
        self.course.mkdir(mode=0o700)
        shutil.copy(REPO / "nbgrader_config.py", self.course)
        shutil.copytree(REPO / "solutions" / ASSIGNMENT, self.course / "solutions" / ASSIGNMENT)
        owner = pwd.getpwnam(INSTRUCTOR)
        for path in [self.course, *self.course.rglob("*")]:
            os.chown(path, owner.pw_uid, owner.pw_gid)

    # --- the hub's process ---------------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> None:
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "jupyterhub"), "-f", str(REPO / "scripts" / "hub" / "jupyterhub_config.py")],
                cwd=self.state, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.api("GET", "/")["version"]:
                    return
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"JupyterHub did not start:\n{self.log()[-4000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop the hub (and its proxy, which it started); the users' servers keep running (cleanup_servers)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def server_pids(self) -> list[int]:
        """The process id of every user's running server, from the hub's record of its spawners' state."""
        users = self.api("GET", "/users?include_stopped_servers=false")
        return [server["state"]["pid"] for u in users for server in u["servers"].values()
                if server.get("state", {}).get("pid")]

    def close(self) -> None:
        """Stop the hub, then every user's server it had started (each is the process group of its own session:
        bubblewrap's monitor and the server), by the process ids the hub recorded: TERM, then KILL."""
        pids = []
        try:
            if self.proc is not None and self.proc.poll() is None:
                pids = self.server_pids()
        finally:
            self.stop()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5    # (a dead server's group may linger as zombies until init reaps them)
            while sig == signal.SIGTERM and time.monotonic() < deadline and any(_group_alive(p) for p in pids):
                time.sleep(0.3)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- the REST API --------------------------------------------------------------------------------------
    def api(self, method: str, path: str, body: dict | None = None, token: str | None = None):
        """Call the hub's REST API (/hub/api) with the class-admin token (or ``token``); the decoded JSON."""
        return self.request(method, f"/hub/api{path}", body, token or self.token)

    def request(self, method: str, path: str, body=None, token: str | None = None, timeout: float = 120):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                     headers={"Authorization": f"token {token or self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def start_server(self, name: str, timeout: float = 600) -> None:
        """Start ``name``'s server through the REST API (as the hub's spawn page does) and wait until it is up."""
        try:
            self.api("POST", f"/users/{name}")
        except urllib.error.HTTPError as e:
            if e.code != 409:           # 409: the user exists already
                raise
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.api("POST", f"/users/{name}/server")
                break
            except urllib.error.HTTPError as e:
                if e.code == 400:           # already running
                    break
                if e.code != 429 or time.monotonic() > deadline:    # 429: the hub's spawn limit; come back later
                    raise
                # sooner than the hub's Retry-After (30 to 60 s), as an impatient student does: asked to wait again
                # until a start slot is free, and the test's core is not left idle for a minute
                wait = min(float(e.headers.get("Retry-After") or 2), RETRY_S)
                time.sleep(wait * (0.5 + secrets.randbelow(100) / 100))
        while not self.api("GET", f"/users/{name}")["servers"].get("", {}).get("ready"):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}'s server did not start:\n{self.log()[-4000:]}")
            time.sleep(0.5)

    def user_token(self, name: str) -> str:
        """A new API token owned by ``name``: it reaches that user's own server, nobody else's."""
        return self.api("POST", f"/users/{name}/tokens", {"note": "tests/book/test_hub.py", "expires_in": 3600})["token"]
