"""Settings shared by the learner's and the instructor's JupyterLab (loaded by their jupyter_server_config.py).

`make lab` / `make lab-instructor` put scripts/lab/learner or scripts/lab/instructor first on
JUPYTER_CONFIG_PATH (Jupyter's documented search path for config files), so these settings apply wherever
the server is started from, and the learner's own ~/.jupyter keeps their settings and workspaces.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # course_lab, the server extension below
from course_lab import ChapterKeepingContentsManager

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def configure(c, instructor: bool, hub: bool = False):
    """Apply the shared settings; ``instructor`` turns on nbgrader's Formgrader and exchange tools.  ``hub``:
    a user's server on the class's JupyterHub (scripts/hub/), which serves the folder the hub chose (the
    instructor's course root, a student's home) and gives students the Assignment List of the exchange."""
    # One JupyterLab on the whole repository: chapters (book/*.md) and exercises (notebooks/) side by side.
    if not hub:
        c.ServerApp.root_dir = REPO
    # Defaults for the document manager (scripts/lab/settings/overrides.json): Markdown files -- the
    # chapters are MyST notebooks -- open as Jupytext notebooks on a double click.  A learner can still
    # change this in Settings; their choice is kept in ~/.jupyter/lab/user-settings.
    c.LabApp.app_settings_dir = os.path.join(REPO, "scripts", "lab", "settings")
    # Containers often run as root; Jupyter refuses to start as root without this flag.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        c.ServerApp.allow_root = True
    # Jupytext's contents manager, except that a chapter is written only when one of its cells changed:
    # opening and running it leaves book/*.md as they are (course_lab.py).
    c.ServerApp.contents_manager_class = ChapterKeepingContentsManager
    # The kernels this server starts inherit its environment: each runs kernel_startup.py first, which keeps what
    # a chapter glues so that its prose shows the numbers in the Lab (course_lab.py); a PYTHONSTARTUP of the
    # learner's own is kept and run after it.
    startup = os.path.join(REPO, "scripts", "lab", "kernel_startup.py")
    if os.environ.get("PYTHONSTARTUP", startup) != startup:
        os.environ["COURSE_PYTHONSTARTUP"] = os.environ["PYTHONSTARTUP"]
    os.environ["PYTHONSTARTUP"] = startup
    # The file browser shows the course (book/, notebooks/, tfmlib/, ...), not what a build leaves (_build/, the
    # package's *.egg-info/, artifacts/) nor, for learners, the instructor's solutions/ (nbgrader's source).  Hidden
    # from the listing only: a path typed in full still opens.
    hidden = ["_build", "*.egg-info", "artifacts", ".pytest_cache"] + ([] if instructor else ["solutions"])
    c.ContentsManager.hide_globs = ["__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "*.so", "*.dylib", *hidden]
    # The course's CSS (scripts/lab/custom/custom.css, put first on the custom path by course_lab): Validate's
    # answer on a chapter reads as the sentence it is, not as an error.
    c.LabApp.custom_css = True
    # nbgrader's server extensions: Validate for everyone, served by course_lab (nbgrader's handler, plus a
    # sentence on chapters and the named mistake first on failures); the instructor's tools only for instructors.
    c.ServerApp.jpserver_extensions = {
        "course_lab": True,
        "nbgrader.server_extensions.validate_assignment": False,
        "nbgrader.server_extensions.formgrader": instructor,
        "nbgrader.server_extensions.assignment_list": instructor or hub,
        "nbgrader.server_extensions.course_list": instructor,
        "tfmgrader.formgrader_page": instructor,   # Formgrader's page of the grader's flags: /formgrader/flags
    }
