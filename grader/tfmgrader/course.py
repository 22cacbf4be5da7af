"""The course an instructor grades: its nbgrader configuration (with the hardened pipeline), its gradebook,
and what a submission must hold to be graded at all."""
from __future__ import annotations

import os
import time
from pathlib import Path

GRADING_CONFIG = Path(__file__).resolve().with_name("grading_config.py")
SQLITE_BUSY_TIMEOUT = 300   # seconds an SQLite writer waits for another worker's write to finish


def expected_notebooks(course: Path, source_dir: str, assignment: str) -> list[str]:
    return sorted(p.name for p in (course / source_dir / assignment).glob("*.ipynb"))


def check_submission(folder: Path, expected: list[str]) -> str | None:
    """Why the submission cannot be graded, or None when it can."""
    import nbformat

    found = sorted(p.name for p in folder.glob("*.ipynb"))
    missing = [n for n in expected if n not in found]
    if missing:
        extra = [n for n in found if n not in expected]
        hint = f"; found {', '.join(extra)} (renamed?)" if extra else ""
        return f"missing notebook {', '.join(missing)}{hint}"
    for name in expected:
        path = folder / name
        if path.is_symlink():       # it would be graded as whatever it points to (a solution, another's work)
            return f"{name} is a link to {os.readlink(path)[:200]}, not a notebook file"
        try:
            nb = nbformat.read(path, as_version=4)
            nbformat.validate(nb)
        except Exception as err:  # noqa: BLE001 - any unreadable file is reported, not raised
            return f"{name} is not a valid notebook: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        versions = {c.metadata.get("nbgrader", {}).get("schema_version") for c in nb.cells
                    if "nbgrader" in c.metadata}
        if versions - {3}:
            return f"{name} has altered nbgrader metadata (schema versions {sorted(map(str, versions))})"
        problem = duplicated_ids(nb)
        if problem:
            return f"{name} {problem}"
    return None


def duplicated_ids(nb) -> str | None:
    """Why ``nb`` cannot be graded when two of its cells carry the same nbgrader id (a read-only, test or answer
    cell copied with its metadata: which one is the assignment's cannot be told), or None."""
    seen: dict[str, int] = {}
    for i, cell in enumerate(nb.cells, 1):
        meta = cell.get("metadata", {}).get("nbgrader")
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if not isinstance(gid, str):
            continue
        if gid in seen:
            return (f"has two cells with the nbgrader id '{gid[:80]}' (cells {seen[gid]} and {i}): a cell of the "
                    "assignment was copied with its metadata; delete the copy (Edit > Delete Cells) or paste its "
                    "code into a new cell, and submit again")
        seen[gid] = i
    return None


def load_config(course: Path, extra: Path | None = None, db_url: str | None = None):
    """The course's nbgrader configuration, the hardened grading pipeline, then ``extra`` (loaded last).
    ``db_url`` (e.g. ``postgresql+psycopg://grader@db/course``) replaces the gradebook's; an SQLite
    gradebook gets a busy timeout, so that several workers can write to it in turn."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config() \
        if (course / "nbgrader_config.py").exists() else None
    grading = PyFileConfigLoader(GRADING_CONFIG.name, path=str(GRADING_CONFIG.parent)).load_config()
    if config is None:
        config = grading
    else:
        config.merge(grading)
    if extra is not None:
        config.merge(PyFileConfigLoader(extra.name, path=str(extra.resolve().parent)).load_config())
    config.CourseDirectory.root = str(course)
    if db_url:
        config.CourseDirectory.db_url = db_url
    url = config.CourseDirectory.get("db_url") or f"sqlite:///{(course / 'gradebook.db').resolve()}"
    if url.startswith("sqlite:") and "?" not in url:
        url += f"?timeout={SQLITE_BUSY_TIMEOUT}"
    config.CourseDirectory.db_url = url
    return config


def api_from_config(config):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config), coursedir


def ensure_course(db_url: str, course_id: str, attempts: int = 3) -> None:
    """Create the gradebook's row for ``course_id`` before any worker starts.  nbgrader adds it on first use,
    and two workers (or shards) using a new gradebook at once both tried to: one failed with "UNIQUE
    constraint failed: course.id" and its submission was reported as crashed.  Another machine may create it
    at the same moment: then the next attempt finds it."""
    from nbgrader.api import Gradebook, InvalidEntry

    for attempt in range(attempts):
        try:
            with Gradebook(db_url, course_id):
                return
        except InvalidEntry:
            if attempt == attempts - 1:
                raise
            time.sleep(1)
