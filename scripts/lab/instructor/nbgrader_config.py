# The Formgrader of `make lab-instructor` reads this file (it is on JUPYTER_CONFIG_PATH), wherever the server
# starts: the course's nbgrader_config.py, with the course root set to this repository.
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
c = get_config()  # noqa: F821
load_subconfig(os.path.join(REPO, "nbgrader_config.py"))  # noqa: F821
c.CourseDirectory.root = REPO
