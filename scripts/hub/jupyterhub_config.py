# The class's JupyterHub on one machine (book/appendix/instructors.md, "Run a class on your own JupyterHub"):
#
#   cd /srv/tfmhub && sudo .venv/bin/jupyterhub -f scripts/hub/jupyterhub_config.py   (paths: the checkout's)
#
# Users log in with their Unix account and password (PAM).  The instructors (TFMHUB_INSTRUCTORS, admins of the
# hub) get a server in the course root with Formgrader; the members of the Unix group TFMHUB_GROUP (the
# students) get a server in their home folder with Assignment List and Validate (scripts/hub/course_spawner.py).
# Everything a deployment chooses is an environment variable with the default below; tests/book/test_hub.py starts
# this same file with its own ports and folders.
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from course_spawner import CourseSpawner  # noqa: E402

env = os.environ.get
STATE = Path(env("TFMHUB_DIR", "/srv/tfmhub"))           # the hub's database, cookie secret, proxy's pid
INSTRUCTORS = {u for u in env("TFMHUB_INSTRUCTORS", "instructor").split(",") if u}

c = get_config()  # noqa: F821

# Where the hub answers (the proxy, the only public port), and its two internal ports.
c.JupyterHub.bind_url = f"http://{env('TFMHUB_IP', '127.0.0.1')}:{env('TFMHUB_PORT', '8000')}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{env('TFMHUB_HUB_PORT', '8081')}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env('TFMHUB_PROXY_API_PORT', '8001')}"
# configurable-http-proxy, pinned: `make venv` installs it from npm into the venv's node/ folder (.venv/node).
proxy = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
c.ConfigurableHTTPProxy.command = [env("TFMHUB_PROXY", str(proxy) if proxy.exists() else "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")

# A restart of the hub (an upgrade, a crash) leaves everyone's server, and the work in it, running: the hub
# finds them again from its database when it comes back.
c.JupyterHub.cleanup_servers = False

# Who may log in: the instructors (the hub's admins) and the class.  By default Unix accounts and passwords (PAM),
# the class being the Unix group TFMHUB_GROUP.  For single sign-on, TFMHUB_AUTHENTICATOR names another
# authenticator (an entry point such as "generic-oauth" from the oauthenticator package, or a class such as
# "ltiauthenticator.lti13.auth.LTI13Authenticator"), TFMHUB_AUTH_CONFIG a file of its settings (client id,
# secret, URLs, which claim is the login name), and the class is the roster's students (TFMHUB_ROSTER, the CSV
# scripts/hub/roster.py created their accounts from: the login name must be the roster's id).
AUTHENTICATOR = env("TFMHUB_AUTHENTICATOR", "pam")
c.JupyterHub.authenticator_class = AUTHENTICATOR
c.Authenticator.admin_users = INSTRUCTORS
c.Authenticator.allowed_users = INSTRUCTORS
if AUTHENTICATOR == "pam":
    c.PAMAuthenticator.open_sessions = False
    c.PAMAuthenticator.allowed_groups = {env("TFMHUB_GROUP", "students")}
if env("TFMHUB_ROSTER"):
    import csv

    with open(env("TFMHUB_ROSTER"), newline="", encoding="utf-8-sig") as roster:
        c.Authenticator.allowed_users = INSTRUCTORS | {row["id"].strip() for row in csv.DictReader(roster)}
if env("TFMHUB_AUTH_CONFIG"):
    load_subconfig(env("TFMHUB_AUTH_CONFIG"))  # noqa: F821  (provided by traitlets when it loads this file)

# Each user's server: JupyterLab, as that user's Unix account, in the role's folder with the role's tools.
c.JupyterHub.spawner_class = CourseSpawner
c.CourseSpawner.instructors = INSTRUCTORS
c.CourseSpawner.course_root = env("TFMHUB_COURSE", "/srv/nbgrader/course")
c.CourseSpawner.exchange = env("TFMHUB_EXCHANGE", "/srv/nbgrader/exchange")
c.CourseSpawner.singleuser = [str(Path(sys.executable).parent / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
# How many servers start at once (JupyterHub's default 100); a login past it is asked to retry in a moment.
c.JupyterHub.concurrent_spawn_limit = int(env("TFMHUB_SPAWN_LIMIT", "100"))
c.Spawner.start_timeout = int(env("TFMHUB_START_TIMEOUT", "120"))
c.Spawner.http_timeout = int(env("TFMHUB_START_TIMEOUT", "120"))

# Optional: a token for scripts (tests/book/test_hub.py uses it) that may manage users, their servers and tokens.
if env("TFMHUB_ADMIN_TOKEN"):
    c.JupyterHub.services = [{"name": "class-admin", "api_token": env("TFMHUB_ADMIN_TOKEN")}]
    c.JupyterHub.load_roles = [{"name": "class-admin", "services": ["class-admin"],
                                "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "read:users"]}]
