"""Whole submissions from the blind red-team rounds that needed more than one cell of code (answers in several cells,
test cells moved): each is graded as the hardened grader grades it, the learner's kernel recorded and the trusted
cells replayed outside (tests/tfmcheck/test_verdicts.py's ``graded``), with the gradebook's test cells (hidden tests
included), and must lose points.  The submissions are in ``fixtures/attacks/redteam<N>/<kind>.json``: the answer
cells by grade id, the cells' order where the attacker changed it, and what the attack did.  Kept beside the attack
suite, which the next round's attacker does not see.  About 10 s in all."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_exercises import _nbg, _read, _source
from test_verdicts import cells_of, graded

from tfmcheck import feedback

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = sorted((ROOT / "grader" / "fixtures" / "attacks").glob("redteam*/*.json"))


@pytest.fixture(autouse=True)
def one_thread(one_torch_thread):
    """One torch thread, as in the grading kernel (conftest.one_torch_thread)."""


def submission(spec: dict):
    """The instructor's notebook with the attacker's answer cells, in the attacker's order: what the grader runs once
    nbgrader has restored every read-only and test cell from the gradebook."""
    nb = _read(_source(spec["assignment"]))
    by_id = {}
    for cell in nb.cells:
        gid = _nbg(cell).get("grade_id")
        if _nbg(cell).get("solution"):
            assert gid in spec["answers"], gid
            cell.source = spec["answers"][gid]
        by_id[gid] = cell
    if spec["order"]:
        assert sorted(spec["order"]) == sorted(by_id), "the same cells, moved"
        nb.cells = [by_id[gid] for gid in spec["order"]]
    return nb


def test_there_are_submissions():
    assert len(SUBMISSIONS) >= 4, SUBMISSIONS


@pytest.mark.parametrize("path", SUBMISSIONS, ids=lambda p: p.stem)
def test_a_red_team_submission_loses_points(path, tmp_path, monkeypatch):
    monkeypatch.setattr(feedback, "diagnose", lambda *args, **kwargs: None)   # it only rewords a failure
    spec = json.loads(path.read_text(encoding="utf-8"))
    verdicts, in_kernel, _ = graded(cells_of(submission(spec)), tmp_path)
    lost = sorted(gid for gid, ok in verdicts.items() if not ok)
    assert lost, f"{path.stem} ({spec['what']}) passes every test: {verdicts}"
