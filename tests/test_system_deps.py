"""A machine without the system packages runs the suite and is told what did not run (issue 36).

tests/conftest.py's ``require`` decides for every test file: a missing requirement fails under CI and is a skip with a
reason elsewhere; the run then ends with one summary of the groups that did not run and the command that installs
their packages (``sudo make system-deps``, which .ci/run calls too).  ``TFMLIB_TESTS_PRETEND_MISSING`` reports
requirements missing on a machine that has them, as on a fresh one.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import INSTALL, PRETEND_ENV, missing_summary

ROOT = Path(__file__).resolve().parents[1]
# Tests that check a requirement before anything else, one per group (each skips at once when it is missing).
PROBES = ["tests/tfmgrader/test_selfcheck.py::test_a_course_folder_that_is_not_the_installed_checkout_grades_unflagged",
          "tests/tfmgrader/test_grading.py::test_exchange_round_trip_with_two_student_accounts",
          "tests/tfmgrader/test_grading_scale.py::test_two_shards_into_one_postgres_gradebook",
          "tests/book/test_lab.py::test_learner_loop_in_jupyterlab",
          "tests/book/test_site.py::test_mathjax_is_served_by_the_site"]
GROUPS = ["grading sandbox", "shared PostgreSQL gradebook", "JupyterLab", "site checks"]


def run_pytest(*args, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", PRETEND_ENV, "PYTEST_XDIST_WORKER")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env={**base, **env}, capture_output=True, text=True, timeout=600)


def test_the_summary_names_each_group_once_and_the_install_command():
    reasons = ["missing requirement [grading sandbox]: bubblewrap, which the grading sandbox runs in "
               "[packages: bubblewrap]"] * 3
    reasons += ["missing requirement [nbgrader exchange]: root (two Unix accounts)", "some other skip"]
    text = missing_summary(reasons)
    assert "grading sandbox: 3 test(s) skipped; missing bubblewrap" in text and "(Debian packages: bubblewrap)" in text
    assert "nbgrader exchange: 1 test(s) skipped; missing root" in text and f"`{INSTALL}`" in text
    assert text.count("  - grading sandbox:") == 1 and "other skip" not in text
    assert missing_summary(["some other skip"]) == "" and missing_summary([]) == ""   # nothing extra when all ran
    only_root = missing_summary(["missing requirement [orphaned sandboxes]: root (own uids)"])
    assert "orphaned sandboxes" in only_root and INSTALL not in only_root     # no package installs root


def test_a_machine_without_the_packages_ends_make_test_with_the_summary():
    """As `make test` runs (two workers), with every requirement reported missing: the tests that need them skip,
    and the last lines name every group and the install command; under CI the same run fails."""
    proc = run_pytest("-n", "2", "--dist", "loadfile", "-q", *PROBES, **{PRETEND_ENV: "all"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "5 skipped" in out, out[-4000:]
    tail = out.strip().splitlines()
    at = max(i for i, line in enumerate(tail) if line.startswith("Not every test ran"))
    summary = "\n".join(tail[at:])
    assert re.search(r"\d+ skipped", tail[at - 2] + tail[at - 1]), tail[at - 3:at]   # right after pytest's last line
    for group in GROUPS:
        assert re.search(rf"  - {group}: \d+ test\(s\) skipped; missing ", summary), (group, summary)
    assert summary.count("  - ") == len(set(re.findall(r"  - ([^:]+):", summary))), summary   # each group once
    assert summary.splitlines()[-1].startswith(f"Install the system packages with `{INSTALL}`"), summary

    ci = run_pytest("-q", PROBES[0], **{PRETEND_ENV: "grading sandbox", "CI": "true"})
    assert ci.returncode == 1 and "CI is set, so this is a failure, not a skip" in ci.stdout, ci.stdout[-3000:]


def test_every_test_file_uses_the_one_helper():
    """The pattern 'fail under CI, skip otherwise' is written once, in tests/conftest.py."""
    for path in sorted((ROOT / "tests").glob("*.py")):
        if path.name == "conftest.py":
            continue
        text = path.read_text()
        assert not re.search(r"environ\.get\(\s*[\"']CI[\"']", text), f"{path.name} decides about CI itself"
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "make system-deps" in ci_run and "apt-get" not in ci_run, "CI installs through the Makefile's target"
    assert "sudo make system-deps" in (ROOT / "README.md").read_text()
