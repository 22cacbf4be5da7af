# JupyterLab for self-study (`make lab`): the Validate button, and none of nbgrader's instructor or exchange
# tools (Formgrader, Create Assignment, Assignment List, Courses), which need a course exchange a learner
# does not have.  The matching front-end plugins are disabled in labconfig/page_config.json.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import configure

c = get_config()  # noqa: F821
configure(c, instructor=False)
