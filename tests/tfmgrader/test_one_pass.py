"""Issue 34, item 2: one pass per notebook.  The grader's preprocessors read the instructor's notebook from the
gradebook once per stage of nbgrader's conversion (``preprocessors.source_notebook``), and keep what they find in
memory, written once when the stage ends (``preprocessors.GradingExporter``), also when a later preprocessor
raised: no finding is lost."""
import dataclasses
import json
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import require_bwrap

ROOT = Path(__file__).resolve().parents[2]
A = "01_rnn_limits"


def grade_counted(monkeypatch) -> tuple:
    """The worked solution of ``A`` graded once, end to end and in this process, as the self-check grades it
    (``selfcheck.grade_solution``: ``run.grade_submission`` in a throw-away copy of the course, no retry); returns
    ``(graded, verdict, writes, opens)``: ``run.Graded``, the check's verdict, the writes of the submission's
    findings file, and the gradebook opens of the grader's code while it graded (``(module file, function)``
    each)."""
    import nbgrader.api

    from tfmgrader import files, selfcheck

    writes, opens, graded = [], [], []
    write_atomic = files.write_atomic

    def counted_write(path, text):
        if Path(path).name == f"{selfcheck.STUDENT}.json" and Path(path).parent.name == A:
            writes.append(Path(path))
        write_atomic(path, text)

    class CountedGradebook(nbgrader.api.Gradebook):
        def __init__(self, *args, **kwargs):
            caller = sys._getframe(1).f_code
            if "tfmgrader" in Path(caller.co_filename).parts and graded == []:
                opens.append((Path(caller.co_filename).name, caller.co_name))
            super().__init__(*args, **kwargs)

    grade_submission, checking_run = selfcheck.grade_submission, selfcheck.checking_run

    def grade_once(*args, **kwargs):
        result = grade_submission(*args, **kwargs)
        graded.append(result)
        return result

    monkeypatch.setattr(files, "write_atomic", counted_write)
    monkeypatch.setattr(nbgrader.api, "Gradebook", CountedGradebook)
    monkeypatch.setattr(selfcheck, "grade_submission", grade_once)
    monkeypatch.setattr(selfcheck, "checking_run", lambda *a: dataclasses.replace(checking_run(*a), retries=0))
    verdict = selfcheck.grade_solution(ROOT, A, None)
    return graded[0], verdict, writes, opens


@pytest.mark.slow
def test_one_notebook_reads_the_gradebook_once_per_stage_and_writes_its_findings_once_per_stage(monkeypatch):
    """Before: 11 opens of the gradebook to read the instructor's notebook (``trusted_sources`` alone 6) and 7 writes
    of the findings file, for one notebook."""
    require_bwrap()
    graded, verdict, writes, opens = grade_counted(monkeypatch)
    print(f"\nfindings written {len(writes)} times; gradebook opened by the grader's code: {opens}")
    assert verdict["ok"], verdict
    assert graded.status == "graded" and graded.retried == []
    assert len(writes) == 2, writes             # the sanitising stage's findings, then the autograding stage's
    reads = [o for o in opens if o != ("verdicts.py", "mark")]      # RecordVerdict saves the verdict: a write
    assert reads == [("preprocessors.py", "source_notebook")] * 2, opens


# --- a finding survives a later failure ------------------------------------------------------------------

def stage(*steps):
    """One stage of notebook ``ex`` of student ``s1``'s ``a1``, through ``GradingExporter``: preprocessors that each
    run one of ``steps`` (``step(resources)``)."""
    from nbgrader.preprocessors import NbGraderPreprocessor

    from tfmgrader.preprocessors import GradingExporter

    class Step(NbGraderPreprocessor):
        def preprocess(self, nb, resources):
            self.step(resources)
            return nb, resources

    exporter = GradingExporter()
    for step in steps:
        exporter.register_preprocessor(type(step.__name__, (Step,), {"step": staticmethod(step)})(), enabled=True)
    resources = {"nbgrader": {"assignment": "a1", "student": "s1", "notebook": "ex"}}
    exporter.from_notebook_node(nbformat.v4.new_notebook(), resources)


def test_a_stage_writes_its_findings_once_also_when_a_later_step_raises(tmp_path, monkeypatch):
    from tfmgrader import files
    from tfmgrader.preprocessors import record, report_so_far, start_report

    folder = str(tmp_path)
    report = tmp_path / "a1" / "s1.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"ex": {"invalid": "an earlier run's", "flags": ["old"]}, "other": {"flags": ["x"]}}))
    writes, write_atomic = [], files.write_atomic
    monkeypatch.setattr(files, "write_atomic", lambda path, text: (writes.append(path), write_atomic(path, text)))
    seen = []

    def fails(resources):
        seen.append(report_so_far(folder, resources))
        raise RuntimeError("a later step failed")

    with pytest.raises(RuntimeError, match="a later step failed"):
        stage(lambda r: start_report(folder, r), lambda r: record(folder, r, flags=["cell 2, line 1: x"]),
              lambda r: record(folder, r, forged=["cell 3 ..."]), fails)
    assert json.loads(report.read_text()) == {"ex": {"flags": ["cell 2, line 1: x"], "forged": ["cell 3 ..."]},
                                              "other": {"flags": ["x"]}}, "afresh, and nothing found is lost"
    assert len(writes) == 1
    assert seen[0].notebooks["ex"].flags == ["cell 2, line 1: x"], "the stage's findings, before they are written"
    # The next stage adds to what the first one wrote, also when it fails.
    with pytest.raises(RuntimeError):
        stage(lambda r: record(folder, r, withheld=["files ... withheld"]), fails)
    assert json.loads(report.read_text())["ex"] == {"flags": ["cell 2, line 1: x"], "forged": ["cell 3 ..."],
                                                    "withheld": ["files ... withheld"]}
    assert len(writes) == 2
    with pytest.raises(ValueError, match="not fields of NotebookReport"):
        stage(lambda r: record(folder, r, flagz=[]))


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["VerifyOutside raises", "the setup cell fails"])
def test_what_the_scan_and_the_files_found_survives_a_later_failure(monkeypatch, failure):
    """The batch's path (``run.grade_submission`` reads the report after nbgrader returned, also on failure): a scan
    flag (the sanitising stage) and a withheld file (the autograding stage's first step) reach the report when a
    later step raises; a setup error's reason names them (its verdict), a crash keeps them in the report."""
    require_bwrap()
    from tfmgrader import preprocessors, selfcheck
    from tfmgrader.scan import Flag

    submission_view = preprocessors.submission_view

    def with_a_planted_file(*args):
        allowed, flagged, stray = submission_view(*args)
        return allowed, {**flagged, "planted.py": "Python code"}, stray

    monkeypatch.setattr(preprocessors, "scan_cells", lambda learner, *a: [Flag(min(learner), 1, "planted flag")])
    monkeypatch.setattr(preprocessors, "submission_view", with_a_planted_file)
    if failure == "VerifyOutside raises":
        def raises(self, nb, resources):
            raise RuntimeError("a later step failed")
        monkeypatch.setattr(preprocessors.VerifyOutside, "preprocess", raises)
    else:
        monkeypatch.setattr(selfcheck, "setup_failure", lambda nb, trusted: "the read-only setup cell 'x' failed")
    graded, verdict, writes, _ = grade_counted(monkeypatch)
    found = graded.report.notebooks[A]
    assert [f.split(": ", 1)[1] for f in found.flags] == ["planted flag"], found
    assert "planted.py (Python code)" in found.withheld[0], found
    assert len(writes) == 2
    if failure == "VerifyOutside raises":
        assert graded.status == "crashed" and "a later step failed" in graded.result["log"], graded
    else:
        assert graded.status == "environment error", graded
        assert graded.reason.startswith("the read-only setup cell 'x' failed; cell ") and "planted flag" in graded.reason
        assert "planted.py (Python code)" in graded.reason
