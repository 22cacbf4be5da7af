# A student's server on the class's JupyterHub (scripts/hub/course_spawner.py puts this folder first on
# JUPYTER_CONFIG_PATH): nbgrader's Assignment List (fetch, submit, fetch feedback through the exchange) and
# Validate, and none of the instructor's tools (Formgrader, Create Assignment, Courses), whose front-end plugins
# are disabled in labconfig/page_config.json.  The server serves the student's home folder.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab"))
from common import configure

c = get_config()  # noqa: F821
configure(c, instructor=False, hub=True)
