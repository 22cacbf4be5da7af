# JupyterLab for self-study (`make lab`): the Validate button, and none of nbgrader's instructor or exchange
# tools (Formgrader, Create Assignment, Assignment List, Courses), which need a course exchange a learner
# does not have.  The matching front-end plugins are disabled in labconfig/page_config.json.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import configure  # noqa: E402  (scripts/lab/common.py)

c = get_config()  # noqa: F821
configure(c)
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.validate_assignment": True,
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.assignment_list": False,
    "nbgrader.server_extensions.course_list": False,
}
