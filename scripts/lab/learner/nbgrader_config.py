# nbgrader's Validate button in `make lab` reads this file (it is on JUPYTER_CONFIG_PATH): the course's own
# configuration, nbgrader_config.py at the repository root.
import os

c = get_config()  # noqa: F821
load_subconfig(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "nbgrader_config.py"))  # noqa: F821
