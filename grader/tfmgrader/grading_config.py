"""nbgrader configuration of the hardened grading pipeline (see ``hardened.py``).

The course's ``nbgrader_config.py`` already applies it; this file is for a course folder whose own
configuration does not:

    nbgrader autograde ASSIGNMENT --config=grader/tfmgrader/grading_config.py
"""
from tfmgrader.hardened import configure_autograde

configure_autograde(get_config())  # noqa: F821  (provided by traitlets when it loads this file)
