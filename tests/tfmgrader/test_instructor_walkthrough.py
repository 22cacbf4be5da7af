"""The instructor's guide (book/appendix/instructors.md, grading.md) against the code: its limits are those of
limits.json and nbgrader_config.py, and its walk-through leaves the repository as git has it."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDES = [ROOT / "book" / "appendix" / "instructors.md", ROOT / "book" / "appendix" / "grading.md"]
LIMITS = {row["name"]: row for row in json.loads((ROOT / "grader" / "tfmgrader" / "limits.json").read_text())}


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_guides_limits_are_those_of_limits_json():
    """grading.md's table has one row per limit, with its default, unit and description from limits.json; every
    "`GRADER_...` (N unit)" in either guide states the default."""
    table = {}
    for m in re.finditer(r"^\| `(GRADER_\w+)` \| ([\d,]+) (\S+) \| (.+?) \|$", GUIDES[1].read_text(), re.M):
        table[m.group(1)] = (number(m.group(2)), m.group(3), m.group(4))
    assert table == {n: (r["default"], r["unit"], r["what"]) for n, r in LIMITS.items()}
    stated = []
    for guide in GUIDES:
        for m in re.finditer(r"`(GRADER_\w+)` \(([\d,]+) ?(\w+)\)", guide.read_text()):
            name, value, unit = m.group(1), number(m.group(2)), m.group(3)
            assert name in LIMITS, (guide.name, name)
            assert (value, unit) == (LIMITS[name]["default"], LIMITS[name]["unit"]), (guide.name, m.group(0))
            stated.append(name)
    assert {"GRADER_CELL_TIMEOUT", "GRADER_MEMORY_MB", "GRADER_CPU_SECONDS"} <= set(stated)


def test_the_guides_nbgrader_settings_are_those_of_nbgrader_config():
    """Every "`Section.name = value`" the instructors' guide quotes is what nbgrader_config.py sets."""
    from traitlets.config.loader import PyFileConfigLoader
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    quoted = re.findall(r"`(\w+)\.(\w+) = ([^`]+)`", GUIDES[0].read_text())
    assert ("Execute", "timeout", "60") in quoted
    for section, name, value in quoted:
        if section in cfg and name in cfg[section]:
            assert repr(cfg[section][name]) == value or str(cfg[section][name]) == value.strip('"'), \
                (section, name, value, cfg[section][name])
    assert cfg.Exchange.root == str(ROOT / "exchange")
    assert "Execute.timeout" not in str(cfg.SandboxedExecute)


def run(args, cwd, env):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.mark.slow
def test_git_status_is_clean_after_the_instructors_walk_through(tmp_path):
    """The guide's commands for one assignment, in a clone of the repository (committed files only): generate,
    release to the exchange, a submission, grade.py, feedback, export.  Everything they write is ignored by git,
    and the exchange is the course's own."""
    from test_grading import require_bwrap
    require_bwrap()
    clone = tmp_path / "course"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("TFMHUB_EXCHANGE", None)
    a = "03_self_attention"
    start = time.monotonic()
    run(["nbgrader", "generate_assignment", a, "--force"], clone, env)
    run(["nbgrader", "release_assignment", a, "--force"], clone, env)
    assert (clone / "exchange" / "transformers-from-scratch" / "outbound" / a / f"{a}.ipynb").exists()
    shutil.copytree(clone / "notebooks" / a, clone / "submitted" / "alice" / a)     # "Without it" (the exchange)
    (clone / "submitted" / "alice" / a / "helpers.py").write_text("def scaled_dot_product_attention(q, k, v):\n")
    run([sys.executable, "scripts/grade.py", a, "--jobs", "1"], clone, env)
    # the same submission, graded by plain `nbgrader autograde` (Formgrader's Autograde): the same report
    shutil.copytree(clone / "submitted" / "alice" / a, clone / "submitted" / "bob" / a)
    plain = time.monotonic()
    run(["nbgrader", "autograde", a, "--student", "bob"], clone, env)
    plain = time.monotonic() - plain
    run(["nbgrader", "generate_feedback", a], clone, env)
    run(["nbgrader", "export"], clone, env)
    run(["nbgrader", "export", "--to", "grades.csv", "--assignment", a], clone, env)
    print(f"\nthe walk-through took {time.monotonic() - start:.1f} s, {plain:.1f} s of it the plain autograde")
    assert (clone / "grading" / "export.csv").read_text().splitlines()[0].endswith("status,reason,similar_to,similarity")
    from tfmgrader.report import FIELDS, RUN_FIELDS
    reports = {s: json.loads((clone / "grading" / a / "reports" / f"{s}.json").read_text()) for s in ("alice", "bob")}
    assert list(reports["alice"]) == list(reports["bob"]) == FIELDS
    assert (reports["alice"]["graded_by"], reports["bob"]["graded_by"]) == ("scripts/grade.py", "nbgrader autograde")
    assert reports["alice"]["status"] == "flagged" and "helpers.py" in reports["alice"]["reason"], reports["alice"]
    assert reports["alice"]["tests"] and all(t["score"] == 0 for t in reports["alice"]["tests"])
    same = {s: {k: v for k, v in r.items() if k not in RUN_FIELDS and k != "student_id"} for s, r in reports.items()}
    assert same["alice"] == same["bob"]
    pages = {s: (clone / "grading" / a / "reports" / f"{s}.md").read_text() for s in reports}
    assert pages["alice"].split("Graded by")[0].replace("alice", "bob") == pages["bob"].split("Graded by")[0]
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout
    assert status == "", status
