# The instructor's server on the class's JupyterHub (scripts/hub/course_spawner.py puts this folder first on
# JUPYTER_CONFIG_PATH): everything nbgrader offers, Formgrader included.  The server starts in the course root,
# so Formgrader reads the course's nbgrader_config.py there and its Autograde button runs the hardened pipeline.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab"))
from common import configure

c = get_config()  # noqa: F821
configure(c, instructor=True, hub=True)
