"""Formgrader's page of the grader's flags: ``<server>/formgrader/flags``, a Jupyter server extension.

Every submission that needs the instructor's review, per assignment, without opening a file: the student (name
and id, from the gradebook), the grader's status and reason, what copy detection flagged (each graded function
and its closest source), the score, and a link to the submission in Formgrader's grading view.  It reads the
course's gradebook (``verdicts.py``); it writes nothing.  Enabled beside Formgrader for instructors
(``scripts/lab/common.py``: ``make lab-instructor`` and the instructor's server on the class's JupyterHub).
"""
from __future__ import annotations

import html
from pathlib import Path

from jupyter_server.base.handlers import JupyterHandler
from tornado import web

PATH = "/formgrader/flags"


def course_db_url(root: Path) -> str:
    """The gradebook of the course whose root is ``root`` (its nbgrader_config.py, as the grader reads it)."""
    from tfmgrader.course import load_config

    return load_config(root).CourseDirectory.db_url


def review_rows(db_url: str) -> dict[str, list[dict]]:
    """``{assignment: [row]}`` of the submissions that need review, in student order."""
    from nbgrader.api import Gradebook, MissingEntry

    from tfmgrader import verdicts

    found = verdicts.load(db_url)
    out: dict[str, list[dict]] = {}
    with Gradebook(db_url) as gb:
        for (assignment, student), v in sorted(found.items()):
            if not verdicts.needs_review(v):
                continue
            row = {**v, "name": "", "score": "", "max_score": "", "notebook_id": ""}
            try:
                s = gb.find_student(student)
                row["name"] = " ".join(p for p in (s.first_name, s.last_name) if p)
                sub = gb.find_submission(assignment, student)
                row.update(score=f"{sub.score:g}", max_score=f"{sub.max_score:g}",
                           notebook_id=sub.notebooks[0].id if sub.notebooks else "")
            except MissingEntry:        # an invalid notebook never reached the gradebook
                pass
            out.setdefault(assignment, []).append(row)
    return out


def render(rows: dict[str, list[dict]], base_url: str) -> str:
    """The page (``templates/reports/flags.html.j2``); every value from the gradebook is escaped."""
    from tfmgrader.files import render_template

    return render_template("flags.html.j2", rows=rows, base_url=base_url)


class FlagsHandler(JupyterHandler):
    @web.authenticated
    def get(self):
        root = Path(self.settings.get("server_root_dir") or ".").expanduser().resolve()
        try:
            rows = review_rows(course_db_url(root))
        except Exception as err:  # noqa: BLE001 - say what is wrong on the page, not a bare 500
            self.set_status(500)
            self.finish(f"<p>The gradebook of {html.escape(str(root))} could not be read: "
                        f"{html.escape(type(err).__name__)}: {html.escape(str(err))}</p>")
            return
        self.finish(render(rows, self.base_url))


def _jupyter_server_extension_points():
    return [{"module": "tfmgrader.formgrader_page"}]


def _load_jupyter_server_extension(serverapp):
    webapp = serverapp.web_app
    rules = webapp.default_router.rules
    before = list(rules)
    pattern = webapp.settings["base_url"].rstrip("/") + PATH + "/?"
    webapp.add_handlers(".*$", [(pattern, FlagsHandler)])
    # Formgrader answers every other /formgrader/... path with its 404 page: this page's rule goes first.
    added = [r for r in rules if r not in before]
    for rule in added:
        rules.remove(rule)
    rules[0:0] = added
