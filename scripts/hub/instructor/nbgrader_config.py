# nbgrader in the instructor's server on the class's JupyterHub: the class's exchange.  Everything else comes
# from the course root's own nbgrader_config.py, which nbgrader reads from the server's working directory (the
# course root) after this file.
import os

c = get_config()  # noqa: F821
c.CourseDirectory.root = os.environ.get("TFMHUB_COURSE", "/srv/nbgrader/course")
c.Exchange.root = os.environ.get("TFMHUB_EXCHANGE", "/srv/nbgrader/exchange")
