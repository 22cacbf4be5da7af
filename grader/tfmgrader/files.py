"""Files the grader writes for the instructor, each written atomically (a temporary file renamed): a reader, or
a grader killed at any moment, never leaves half a file."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=1))


def write_csv(path: Path, rows: list[dict], fields: list[str] | None = None) -> None:
    """``rows`` as CSV with the columns ``fields`` (default: the first row's keys)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields or (list(rows[0]) if rows else ["student_id"]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def render_template(name: str, **values) -> str:
    """The page ``templates/reports/<name>`` (Jinja2, as nbgrader's own pages) filled with ``values``; every value
    is escaped unless it is ``markupsafe.Markup``, and a name the template uses but ``values`` lacks is an error."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates") / "reports"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template(name).render(**values)
