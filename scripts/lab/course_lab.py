"""The course's own pieces of `make lab` / `make lab-instructor` (loaded by common.py).

What JupyterLab, Jupytext and nbgrader do not do by themselves:

- **Chapters stay as they are.**  book/*.md open as Jupytext notebooks.  JupyterLab marks a notebook modified as
  soon as its kernel starts (it records the kernel in the notebook's metadata) and autosaves it two minutes
  later; Jupytext then writes the whole Markdown file again, re-wrapped and with new metadata, although the
  learner changed nothing, and ``git status``/``git pull`` see a change.  ``ChapterKeepingContentsManager``
  writes a text notebook only when a cell's type or source (or Jupytext's own settings, e.g. pairing) differs
  from the file on disk: opening and running a chapter never touches it; editing a cell and saving is the
  learner's choice and is written.
- **Chapters show their glued numbers.**  The book's prose writes a measured number as myst_nb's
  ``{glue:text}`name:.2f```, which no JupyterLab renderer knows.  On its way to the Lab a chapter's Markdown cells
  say ``{eval}`glued("name:.2f")``` instead: jupyterlab-myst (which renders the cells' MyST: admonitions,
  citations, math) evaluates that inline expression in the kernel when the cell runs, and ``glued`` (defined by
  kernel_startup.py) formats the value the chapter glued under that name as the book does.  On the way back
  (save) the role is written as it was, and jupyterlab-myst's record of the results (the cells'
  ``user_expressions`` metadata) is left out, so the file stays what the book builds.  Citations likewise: a
  ``{cite:t}`key``` role shows as "Author et al. (2017)", a link to the references page (jupyterlab-myst has no
  bibliography and would show the bare key), and is written back as the role.
- **A chapter just opened is not "modified".**  JupyterLab writes the kernel's name and language into a
  notebook's metadata when the kernel starts, and a change marks the tab with the unsaved "●".  A text notebook
  is handed to the Lab with the metadata the kernel will report (its kernel spec's display name, ipykernel's
  language_info), so nothing changes until the learner does something.
- **Validate answers on every notebook.**  nbgrader's Validate button sits in every notebook's toolbar.  On a
  chapter or any notebook without nbgrader cells it now answers with one sentence saying what it validates
  (instead of a ``NotJSONError`` traceback); on an exercise, a failed test shows the named mistake first, then
  the test cell and the traceback.  nbgrader's dialog heads that sentence with "There was an error running the
  validate command:"; the course's custom.css (served from scripts/lab/custom/) hides that heading, so the
  learner reads the sentence alone.  (Hiding the button on chapters would need a JupyterLab front-end extension:
  nothing in a chapter's panel tells it from an exercise's to CSS or settings.)
"""
from __future__ import annotations

import html
import json
import re
import traceback
from pathlib import Path

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class
from nbconvert.filters import ansi2html, strip_ansi
from nbgrader.server_extensions.validate_assignment.handlers import (NbGraderVersionHandler,
                                                                     ValidateAssignmentHandler)
from nbgrader.validator import Validator

# Between the message and the rest in MessageFirstValidator's error text (a character no traceback contains).
SPLIT = "\x00"
NOT_AN_EXERCISE = ("Validate checks the course's exercises (notebooks/NN_name/NN_name.ipynb) against their "
                   "tests; {name} is not one of them, so there is nothing to validate here.")


# --------------------------------------------------------------------------------------------------------------
# Chapters: glued numbers as inline expressions in the Lab, no write unless a cell changed
# --------------------------------------------------------------------------------------------------------------
# A role's content is myst_nb's "name" or "name:format"; quotes, backslashes and backticks are left alone (the
# chapters have none), so each rewrite is undone exactly by the other.
GLUE_ROLE = re.compile(r"\{glue:text\}`([^`\"\\\n]+)`")
GLUED_EXPRESSION = re.compile(r"\{eval\}`glued\(\"([^`\"\\\n]+)\"\)`")


def glue_to_eval(source: str) -> str:
    """The Lab's view of a chapter's Markdown: each ``{glue:text}`role``` as ``{eval}`glued("role")```."""
    return GLUE_ROLE.sub(lambda m: '{eval}`glued("%s")`' % m[1], source)


def eval_to_glue(source: str) -> str:
    """The file's text again: each ``{eval}`glued("role")``` as ``{glue:text}`role```."""
    return GLUED_EXPRESSION.sub(lambda m: "{glue:text}`%s`" % m[1], source)


# Citations: jupyterlab-myst has no bibliography, so ``{cite:t}`key``` would show the bare key.  In the Lab the role
# becomes a link to the references page labelled as the site labels it (author-year); the role itself rides in
# the link's title, which gives it back exactly on save.
CITE_ROLE = re.compile(r"\{cite(?::(p|t))?\}`([^`\"\n]+)`")
CITE_LINK = re.compile(r'\[[^\]\n]*\]\(appendix/references\.md "(\{cite(?::[pt])?\}`[^`"\n]+`)"\)')


def citation_labels(bibfile: Path) -> dict:
    """key -> (authors, year) as the site's author-year labels have them: "Vaswani et al.", "Press and Lewis"."""
    import latexcodec  # noqa: F401  (registers the "latex" codec)
    from pybtex.database import parse_file

    def last(person):
        return re.sub(r"[{}]", "", " ".join(person.last_names).encode().decode("latex"))

    labels = {}
    for key, entry in parse_file(str(bibfile)).entries.items():
        people = [last(p) for p in entry.persons.get("author", [])]
        names = people[0] if len(people) == 1 else " and ".join(people) if len(people) == 2 else f"{people[0]} et al."
        labels[key] = (names, entry.fields.get("year", ""))
    return labels


def cite_to_link(source: str, labels: dict) -> str:
    """Each ``{cite}``/``{cite:p}`` as "(Author et al., 2017)" and ``{cite:t}`` as "Author et al. (2017)", a link to
    the references page; a role with a key the bibliography lacks is left as it is."""
    def link(m):
        keys = [k.strip() for k in m[2].split(",")]
        if not all(k in labels for k in keys):
            return m[0]
        if m[1] == "t":
            text = "; ".join(f"{labels[k][0]} ({labels[k][1]})" for k in keys)
        else:
            text = "(" + "; ".join(f"{labels[k][0]}, {labels[k][1]}" for k in keys) + ")"
        return f'[{text}](appendix/references.md "{m[0]}")'
    return CITE_ROLE.sub(link, source)


def link_to_cite(source: str) -> str:
    """The file's text again: each citation link as the role in its title."""
    return CITE_LINK.sub(lambda m: m[1], source)


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def _is_text_notebook(model, path) -> bool:
    return model.get("type") == "notebook" and model.get("content") is not None and not path.endswith(".ipynb")


def _edits(notebook) -> tuple:
    """What a learner changes on purpose: the (type, source) of each cell, and Jupytext's own settings (pairing,
    filters; chosen in its menu).  Outputs, the kernel's details and other metadata are left out."""
    cells = [(c["cell_type"], _text(c["source"])) for c in notebook["cells"]]
    settings = {k: v for k, v in notebook.get("metadata", {}).get("jupytext", {}).items() if k != "text_representation"}
    return cells, settings


class ChapterKeepingContentsManager(build_async_jupytext_contents_manager_class(AsyncLargeFileManager)):
    """Jupytext's contents manager that shows a text notebook's glued numbers as inline expressions and does not
    rewrite it when its cells are unchanged."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        """Jupytext's model; in a text notebook (a chapter), the Markdown cells' glue roles as expressions."""
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if _is_text_notebook(model, path.strip("/")):
            self._as_the_kernel_reports(model["content"]["metadata"])
            labels = self._citation_labels(path.strip("/"))
            for cell in model["content"]["cells"]:
                if cell["cell_type"] == "markdown":
                    cell["source"] = cite_to_link(glue_to_eval(_text(cell["source"])), labels)
        return model

    def _citation_labels(self, path) -> dict:
        """The labels of the references.bib beside the text notebook (the chapters'), or none."""
        bib = (Path(self.root_dir) / path).parent / "references.bib"
        if not (bib.is_file() and (bib.parent / "appendix" / "references.md").is_file()):
            return {}
        try:
            return citation_labels(bib)
        except Exception as err:  # noqa: BLE001 - no or a broken bibliography: the roles stay as they are
            self.log.warning("%s: citations left as roles (%s)", bib, err)
            return {}

    def _as_the_kernel_reports(self, metadata) -> None:
        """Fill in ``kernelspec`` and ``language_info`` as JupyterLab will once the kernel has started (the same
        values leave the notebook unmodified).  A kernel other than ipykernel's is left to the Lab."""
        spec = metadata.get("kernelspec") or {}
        try:
            manager = getattr(self.parent, "kernel_spec_manager", None)
            if manager is None:
                from jupyter_client.kernelspec import KernelSpecManager
                manager = KernelSpecManager()
            found = manager.get_kernel_spec(spec.get("name", "python3"))
        except Exception:  # noqa: BLE001 - no such kernel here: the Lab asks the learner to choose one
            return
        if found.language != "python" or "ipykernel" not in " ".join(found.argv):
            return
        from ipykernel.ipkernel import IPythonKernel
        metadata["kernelspec"] = {"name": spec.get("name", "python3"), "display_name": found.display_name,
                                  "language": found.language}
        metadata["language_info"] = json.loads(json.dumps(IPythonKernel.language_info))

    async def save(self, model, path=""):
        """Save as Jupytext does, except a text notebook (a chapter) whose cells equal the file's: left alone.
        A text notebook's expressions go back to glue roles, without jupyterlab-myst's results."""
        path = path.strip("/")
        if _is_text_notebook(model, path):
            for cell in model["content"]["cells"]:
                if cell["cell_type"] == "markdown":
                    cell["source"] = link_to_cite(eval_to_glue(_text(cell["source"])))
                    cell.get("metadata", {}).pop("user_expressions", None)
        if await self._unchanged_text_notebook(model, path):
            self.log.info("%s: no cell changed, the file is left as it is", path)
            return await self.get(path, content=False)
        return await super().save(model, path)

    async def _unchanged_text_notebook(self, model, path) -> bool:
        """True for a notebook model of an existing non-.ipynb file whose cells are those of the file."""
        if not _is_text_notebook(model, path):
            return False
        if not await self.file_exists(path):
            return False
        try:
            on_disk = await super().get(path, content=True, type="notebook")  # the file's roles
        except Exception:  # noqa: BLE001 - an unreadable file: let Jupytext's save decide and report
            return False
        return _edits(on_disk["content"]) == _edits(model["content"])


# --------------------------------------------------------------------------------------------------------------
# Validate: a plain sentence on chapters, the named mistake first on exercises
# --------------------------------------------------------------------------------------------------------------
class MessageFirstValidator(Validator):
    """nbgrader's Validator whose error text begins with the exception's message (``Name: message``)."""

    def _extract_error(self, cell) -> str:
        messages = [f"{o.ename}: {o.evalue}" if o.evalue else o.ename
                    for o in cell.get("outputs", []) if o.output_type == "error"]
        details = super()._extract_error(cell)
        return "\n".join(messages) + (f"\n{SPLIT}" + details if messages else "")


def is_exercise(path: Path) -> bool:
    """An .ipynb notebook with at least one nbgrader cell (what Validate can check)."""
    if path.suffix != ".ipynb":
        return False
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return True  # let nbgrader read it and say what is wrong
    return any("nbgrader" in c.get("metadata", {}) for c in cells if isinstance(c, dict))


def message_first(failed: dict) -> dict:
    """One failed cell for nbgrader's dialog, which shows ``source`` and then ``error``: the message goes in the
    first place, the test cell's source and the traceback after it."""
    raw = failed.get("raw_error", "")
    if SPLIT not in raw:  # no exception (e.g. partial credit): nbgrader's own text
        return failed
    message, details = raw.split(SPLIT, 1)
    below = f"The test cell:\n\n{failed['source']}\n\nWhere it failed:\n\n"
    return {"source": strip_ansi(message.strip()),
            "error": html.escape(below) + ansi2html(details),
            "raw_error": message + below + details}


class CourseValidateHandler(ValidateAssignmentHandler):
    """nbgrader's /assignments/validate, with a sentence for non-exercises and the message first on failures."""

    def validate_notebook(self, path):
        root = Path(self.root_dir).resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root):
            from tornado import web
            raise web.HTTPError(403, "Access denied: path outside allowed directory")
        if not is_exercise(target):
            return {"success": False, "value": NOT_AN_EXERCISE.format(name=target.name)}
        try:
            result = MessageFirstValidator(config=self.load_config()).validate(str(target))
        except Exception as err:  # noqa: BLE001 - logged in full, and the learner told Validate failed
            self.log.error(traceback.format_exc())
            return {"success": False, "value": f"Validate could not check {target.name}: {err}"}
        if "failed" in result:
            result["failed"] = [message_first(f) for f in result["failed"]]
        return {"success": True, "value": result}


def _load_jupyter_server_extension(app):
    """Serve Validate (nbgrader's two URLs) with ``CourseValidateHandler``, and the course's custom.css."""
    from jupyter_server.utils import url_path_join
    base = app.web_app.settings["base_url"]
    # JupyterLab's /custom/ handler searches this list (the same object, whichever extension loads first)
    app.web_app.settings["static_custom_path"].insert(0, str(Path(__file__).resolve().parent / "custom"))
    app.web_app.settings["root_dir"] = app.root_dir
    app.web_app.add_handlers(".*$", [(url_path_join(base, r"/assignments/validate"), CourseValidateHandler),
                                     (url_path_join(base, r"/nbgrader_version"), NbGraderVersionHandler)])
    app.log.info("course_lab: Validate answers on chapters with a sentence and shows failures message first")


load_jupyter_server_extension = _load_jupyter_server_extension  # the name older servers look for


def _jupyter_server_extension_points():
    return [{"module": "course_lab"}]

