"""The spawner of the class's JupyterHub (scripts/hub/jupyterhub_config.py): JupyterHub's LocalProcessSpawner,
which starts each user's server as that user's Unix account, with the course's two roles.

- An instructor's server starts in the course root (where the course's nbgrader_config.py selects the hardened
  grading pipeline), with nbgrader's Formgrader (scripts/hub/instructor/).
- A student's server starts in their home folder, with Assignment List and Validate and no instructor tool
  (scripts/hub/student/).

The role is chosen by putting scripts/hub/<role> first on the server's JUPYTER_CONFIG_PATH, as `make lab` does.

When the course's Python is installed where other accounts cannot read it (a Python under /root, mode 700,
as on the course's test machine), each server is started in a bubblewrap view of the system in which that one
Python installation is re-bound, read-only, over an empty /root, and the user's privileges are dropped there
(setpriv).  With a Python every account can read (/usr, /opt), the stock privilege drop of
LocalProcessSpawner is used and bubblewrap is not needed.
"""
from __future__ import annotations

import os
import pwd
import stat
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import List, Set, Unicode

HERE = Path(__file__).resolve().parent


def readable_by_everyone(path: str) -> bool:
    """Whether every folder from / down to ``path`` lets any account in (o+x), so others can run what is there."""
    p = Path(os.path.realpath(path))
    for folder in [p, *p.parents]:
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return False
    return True


def python_view(base_prefix: str) -> list[str]:
    """bubblewrap arguments: the whole system as it is, except /root, replaced by an empty folder that holds only
    the Python installation ``base_prefix`` (read-only), so another account can run that Python without
    being able to read root's files."""
    args = ["--dev-bind", "/", "/", "--tmpfs", "/root"]
    parts = Path(base_prefix).parts[1:-1]
    for i in range(1, len(parts)):
        args += ["--perms", "0755", "--dir", "/" + "/".join(parts[: i + 1])]
    return args + ["--ro-bind", base_prefix, base_prefix]


class CourseSpawner(LocalProcessSpawner):
    """LocalProcessSpawner with the course's instructor and student roles (see the module's docstring)."""

    instructors = Set(Unicode(), help="Accounts whose server is the instructor's: in the course root, "
                                      "with Formgrader.").tag(config=True)
    course_root = Unicode("/srv/nbgrader/course", help="The course root: a copy of the course repository "
                          "owned by the instructor, with its nbgrader_config.py.").tag(config=True)
    exchange = Unicode("/srv/nbgrader/exchange",
                       help="nbgrader's exchange folder, shared by everyone.").tag(config=True)
    singleuser = List(Unicode(), help="The single-user server's command; the view and the privilege drop "
                      "are put before it when they are needed.").tag(config=True)

    def role(self) -> str:
        return "instructor" if self.user.name in self.instructors else "student"

    def workdir(self) -> str:
        """Where the server starts and what it serves: the course root for an instructor, else the home folder."""
        return self.course_root if self.role() == "instructor" else pwd.getpwnam(self.user.name).pw_dir

    def needs_view(self) -> bool:
        return not readable_by_everyone(sys.base_prefix)

    def get_env(self):
        env = super().get_env()
        env["JUPYTER_CONFIG_PATH"] = str(HERE / self.role())
        env["TFMHUB_EXCHANGE"] = self.exchange
        env["TFMHUB_COURSE"] = self.course_root
        for name in ("GRADER_SELFCHECK", "GRADER_REPORTS"):  # the grader's own switches, when the hub has them
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    async def start(self):
        self.notebook_dir = self.workdir()
        command = list(self.singleuser or ["jupyterhub-singleuser"])
        if self.needs_view():
            account = pwd.getpwnam(self.user.name)
            base = os.path.realpath(sys.base_prefix)
            command = (["bwrap", *python_view(base), "--chdir", self.workdir(), "setpriv",
                        f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups", "--"] + command)
        self.cmd = command
        return await super().start()

    def make_preexec_fn(self, name):
        """In the bubblewrap view setpriv drops the privileges; otherwise drop them here, and start in workdir."""
        if self.needs_view():
            return None
        drop, workdir = set_user_setuid(name, chdir=False), self.workdir()

        def preexec():
            drop()
            os.chdir(workdir)
        return preexec

    async def _signal(self, sig):
        """Signal the server's whole process group (bubblewrap's monitor and the server under it: the spawner
        starts it in a session of its own), so that stopping a server never leaves the server running under a
        dead monitor.  True while any process of the group is alive."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        return True
