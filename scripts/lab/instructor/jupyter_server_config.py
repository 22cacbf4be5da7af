# JupyterLab for instructors (`make lab-instructor`): everything nbgrader offers, the Formgrader included,
# on the course in this repository (instructor/nbgrader_config.py sets the course root).
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import configure

c = get_config()  # noqa: F821
configure(c, instructor=True)
