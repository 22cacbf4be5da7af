"""Run by every kernel of the course's JupyterLab (its PYTHONSTARTUP, set by common.py): keeps what a chapter
glues, so that the chapter's prose shows its measured numbers in the Lab as it does on the site.

A chapter stores a number with myst_nb's ``glue("name", value, display=False)`` and its prose writes
``{glue:text}`name:.2f```.  In JupyterLab, course_lab.py shows that role as jupyterlab-myst's inline expression
``{eval}`glued("name:.2f")```: when Run All reaches the Markdown cell, the kernel evaluates ``glued(...)``,
which formats the value glued under that name exactly as the book's build does (myst_nb's own formatter).

Defines one name in the kernel, ``glued``; the learner's own PYTHONSTARTUP (kept by common.py in
COURSE_PYTHONSTARTUP) still runs after this file.
"""


def _course_keep_glued():
    import os

    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_pub"):
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

    theirs = os.environ.get("COURSE_PYTHONSTARTUP")
    if theirs and os.path.isfile(theirs):
        with open(theirs, encoding="utf-8") as f:
            exec(compile(f.read(), theirs, "exec"), shell.user_ns)  # the learner's own PYTHONSTARTUP
    return glued


glued = _course_keep_glued()
del _course_keep_glued
