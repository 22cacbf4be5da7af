"""Every limit of the grader, in one table: ``limits.json`` (book/appendix/grading.md, "Limits").

Each limit has a default and an environment variable of the same name that overrides it when grading, e.g.
``GRADER_CELL_TIMEOUT=60 python scripts/grade.py 03_self_attention``.  The trace a kernel records is also
limited kernel-side, per record (``tfmcheck.trace.MAX_RECORD_BYTES``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

#: name -> (default, unit, what it limits), from limits.json (the table; "part" starts a group of rows).
LIMITS: dict[str, tuple[int, str, str]] = {
    row["name"]: (row["default"], row["unit"], row["what"])
    for row in json.loads(Path(__file__).with_name("limits.json").read_text())}


def limit(name: str) -> int:
    """The limit ``name``: its environment variable when set, else its default."""
    default = LIMITS[name][0]
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a whole number of {LIMITS[name][1]}") from None
