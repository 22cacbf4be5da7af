"""Run at the start of the kernels of the course's JupyterLab (its PYTHONSTARTUP, set by common.py): keeps what a
chapter glues, so that the chapter's prose shows its measured numbers in the Lab as it does on the site.

A chapter stores a number with myst_nb's ``glue("name", value, display=False)`` and its prose writes
``{glue:text}`name:.2f```.  In JupyterLab, course_lab.py shows that role as jupyterlab-myst's inline expression
``{eval}`glued("name:.2f")```: when Run All reaches the Markdown cell, the kernel evaluates ``glued(...)``,
which formats the value glued under that name exactly as the book's build does (myst_nb's own formatter).

Only a kernel the Lab started for a text notebook (a chapter: JupyterLab's JPY_SESSION_NAME is not an .ipynb)
gets ``glued``, its one name; exercises, Validate's and the grader's kernels, and a Python started in the Lab's
terminal are left as they are.  The learner's own PYTHONSTARTUP (kept by common.py in COURSE_PYTHONSTARTUP)
runs after this file in every case.
"""


def _course_keep_glued():
    import os

    session = os.environ.get("JPY_SESSION_NAME", "")
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None or not hasattr(shell, "display_pub") or not session or session.endswith(".ipynb"):
        return None
    plain = {}                       # name -> the text/plain of the value glued last under that name
    prefix = "application/papermill.record/"  # myst_nb's GLUE_PREFIX (glue with display=False)
    publish = shell.display_pub.publish

    def keep_and_publish(data, metadata=None, *args, **kwargs):
        name = ((metadata or {}).get("scrapbook") or {}).get("name")
        if name and isinstance(data, dict):
            text = data.get(prefix + "text/plain", data.get("text/plain"))
            if text is not None:
                plain[name] = text
        return publish(data, metadata, *args, **kwargs)

    shell.display_pub.publish = keep_and_publish

    class Glued(str):
        """The formatted value; shown as it is (no quotes) by the inline expression."""

        def __repr__(self):
            return str(self)

    def glued(role: str) -> str:
        """The text ``{glue:text}`role``` shows on the site; ``role`` is ``name`` or ``name:format``."""
        from myst_nb.core.variables import format_plain_text
        name, _, spec = role.rpartition(":") if ":" in role else (role, "", "")
        if name not in plain:
            raise KeyError(f"nothing is glued under {name!r} yet: run the cells above this one first")
        return Glued(format_plain_text(plain[name], spec or "s"))

    return glued


def _course_their_startup():
    import os
    theirs = os.environ.get("COURSE_PYTHONSTARTUP")
    if theirs and os.path.isfile(theirs):
        with open(theirs, encoding="utf-8") as f:
            exec(compile(f.read(), theirs, "exec"), globals())  # noqa: S102 - the learner's own PYTHONSTARTUP


_course_glued = _course_keep_glued()
if _course_glued is not None:
    glued = _course_glued
_course_their_startup()
del _course_glued, _course_keep_glued, _course_their_startup
