# nbgrader in a student's server on the class's JupyterHub: the course's own settings (Validate runs the
# notebook as the grader does), and the class's exchange, where Assignment List fetches and submits.
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
c = get_config()  # noqa: F821
load_subconfig(os.path.join(REPO, "nbgrader_config.py"))  # noqa: F821
c.Exchange.root = os.environ.get("TFMHUB_EXCHANGE", "/srv/nbgrader/exchange")
