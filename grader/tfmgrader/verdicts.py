"""The grader's verdicts in nbgrader's own records: the gradebook, its export and Formgrader.

Each graded submission's status and reason (``report.Status``) and what copy detection found
(``similarity.py``: the closest source and its similarity, when flagged) are kept in a table of the course's own,
``tfm_verdict``, inside the gradebook's database (SQLite or PostgreSQL), one row per assignment and student.
The gradebook's own records say it too: a submission whose status is not ``graded`` or whose code copy detection
flagged is *flagged* (``SubmittedNotebook.flagged``: the flag column of Formgrader's lists), and a submission the
grader flagged carries the reason as the automatic comment of its first answer cell (shown in Formgrader's
grading view, and in the learner's feedback, which already says why an answer was withheld).  A copy suspicion
is not written into a comment: feedback is the learner's, and a suspicion is the instructor's to review first.

Writers: the ``RecordVerdict`` preprocessor (``record_verdict.py``, last in the autograde pipeline: plain
``nbgrader autograde`` and Formgrader's *Autograde*), ``batch.grade_one`` (a status only the batch knows: invalid
notebook, a retry that stayed starved) and ``class_report`` (copy detection).  Readers: ``export.VerdictExportPlugin``
(``nbgrader export``) and the Formgrader page ``formgrader_page.py``.
"""
from __future__ import annotations

import json
import time

TABLE = "tfm_verdict"
COLUMNS = ["status", "reason", "similar_to", "similarity"]
#: Starts the automatic comment the grader writes (and rewrites) on a flagged submission's first answer cell.
COMMENT_MARK = "Flagged by the course's grader"


def _table():
    from sqlalchemy import Boolean, Column, Float, MetaData, String, Table, Text

    meta = MetaData()
    return Table(TABLE, meta,
                 Column("assignment", String(128), primary_key=True),
                 Column("student_id", String(128), primary_key=True),
                 Column("status", String(32), nullable=False, default=""),
                 Column("reason", Text, nullable=False, default=""),
                 Column("similar_to", Text, nullable=False, default=""),
                 Column("similarity", String(16), nullable=False, default=""),
                 Column("flagged_by_grader", Boolean, nullable=False, default=False),
                 # {notebook: its first answer cell}, where the grader's comment goes (RecordVerdict)
                 Column("comment_cells", Text, nullable=False, default="{}"),
                 Column("updated", Float, nullable=False, default=0.0))


def _engine(db_url: str):
    from sqlalchemy import create_engine

    return create_engine(db_url)


def save(db_url: str, assignment: str, student: str, comment_cell: tuple[str, str] | None = None,
         **fields) -> None:
    """Set ``fields`` (of ``COLUMNS``) of the verdict of ``student``'s ``assignment``, then the gradebook's flag
    and comment (``mark``); ``comment_cell``: (notebook, its first answer cell)."""
    save_many(db_url, assignment, {student: fields}, {student: comment_cell} if comment_cell else None)


def save_many(db_url: str, assignment: str, fields: dict[str, dict],
              comment_cells: dict[str, tuple[str, str]] | None = None) -> None:
    """``save`` for several students of ``assignment`` at once (one transaction, one gradebook session):
    ``fields``: ``{student: {column: value}}``."""
    for f in fields.values():
        unknown = set(f) - set(COLUMNS)
        if unknown:
            raise ValueError(f"not columns of {TABLE}: {sorted(unknown)}")
    table, engine = _table(), _engine(db_url)
    try:
        table.metadata.create_all(engine, checkfirst=True)
        with engine.begin() as conn:
            for student, values in fields.items():
                values = {k: "" if v is None else str(v) for k, v in values.items()}
                key = (table.c.assignment == assignment) & (table.c.student_id == student)
                row = conn.execute(table.select().where(key)).mappings().first()
                if row is None:
                    conn.execute(table.insert().values(assignment=assignment, student_id=student,
                                                       updated=time.time(), **{**{c: "" for c in COLUMNS}, **values}))
                else:
                    conn.execute(table.update().where(key).values(updated=time.time(), **values))
                cell = (comment_cells or {}).get(student)
                if cell:
                    cells = json.loads((row or {}).get("comment_cells") or "{}")
                    cells[cell[0]] = cell[1]
                    conn.execute(table.update().where(key).values(comment_cells=json.dumps(cells)))
    finally:
        engine.dispose()
    mark(db_url, assignment, list(fields))


def load(db_url: str, assignment: str | None = None) -> dict[tuple[str, str], dict]:
    """``{(assignment, student): verdict}`` (all assignments when ``assignment`` is None); empty for a gradebook
    no grader has written to."""
    from sqlalchemy import inspect

    table, engine = _table(), _engine(db_url)
    try:
        if not inspect(engine).has_table(TABLE):
            return {}
        query = table.select() if assignment is None else table.select().where(table.c.assignment == assignment)
        with engine.connect() as conn:
            return {(r["assignment"], r["student_id"]): dict(r) for r in conn.execute(query).mappings()}
    finally:
        engine.dispose()


def needs_review(verdict: dict) -> bool:
    """A verdict the instructor should look at: any status but ``graded``, or a copy suspicion."""
    return verdict.get("status", "") not in ("", "graded") or bool(verdict.get("similar_to"))


def mark(db_url: str, assignment: str, students: list[str]) -> None:
    """Make the gradebook say what the verdicts of ``students`` say: each notebook of a submission is flagged
    when its verdict needs review (a flag an instructor set by hand is kept), and the grader's reason is the
    automatic comment of the first answer cell of a submission it flagged.  Nothing to do for a submission not
    in the gradebook (an invalid notebook never reaches it)."""
    from nbgrader.api import Gradebook, MissingEntry

    found = load(db_url, assignment)
    ours = {}
    with Gradebook(db_url) as gb:
        for student in students:
            verdict = found.get((assignment, student))
            if verdict is None:
                continue
            try:
                submission = gb.find_submission(assignment, student)
            except MissingEntry:
                continue
            ours[student] = flag = needs_review(verdict)
            _mark_submission(submission, verdict, flag)
        gb.db.commit()
    _set_ours(db_url, assignment, ours)


def _mark_submission(submission, verdict: dict, flag: bool) -> None:
    cells = json.loads(verdict.get("comment_cells") or "{}")
    for nb in submission.notebooks:
        if flag:
            nb.flagged = True
        elif verdict["flagged_by_grader"]:     # the grader's own flag from an earlier grade, not the instructor's
            nb.flagged = False
        first = next((c for c in nb.comments if c.cell.name == cells.get(nb.name)), None)
        if first is None:
            continue
        mine = (first.auto_comment or "").split(f"\n\n{COMMENT_MARK}")[0]
        if mine.startswith(COMMENT_MARK):
            mine = ""
        if verdict["status"] not in ("", "graded"):
            text = f"{COMMENT_MARK}: {verdict['status']}. {verdict['reason']}".strip()
            first.auto_comment = f"{mine}\n\n{text}" if mine else text
        else:
            first.auto_comment = mine or None


def _set_ours(db_url: str, assignment: str, ours: dict[str, bool]) -> None:
    """Remember which flags are the grader's own (``{student: flagged by the grader}``)."""
    if not ours:
        return
    table, engine = _table(), _engine(db_url)
    try:
        with engine.begin() as conn:
            for student, flag in ours.items():
                conn.execute(table.update().where((table.c.assignment == assignment) & (table.c.student_id == student))
                             .values(flagged_by_grader=flag))
    finally:
        engine.dispose()
