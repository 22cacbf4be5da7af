"""Shared fixtures: every library test runs on each available device (CUDA too, when present)."""
import contextlib
import os
import shutil
import tempfile

import pytest
import torch

# The grader grades each assignment's own solution before it grades anyone (grader/tfmgrader/selfcheck.py),
# once per assignment and configuration.  The tests build dozens of courses and configurations, so that would
# grade a solution again for nearly every grading call (about 25 s each); tests/tfmgrader/test_selfcheck.py, which tests
# the check through both grading paths, clears this variable for its own runs.
os.environ.setdefault("GRADER_SELFCHECK", "0")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# Tolerances of the reference comparisons (issue 2): max abs error.
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


def max_err(a, b):
    return (a - b).abs().max().item()


# Debian's chromium and chromium-driver drive the browser tests (tests/book/test_site.py, tests/book/test_lab.py).
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextlib.contextmanager
def chromium_session(window: str, timeout_s: float, prefix: str):
    """``headless_chromium`` with a throw-away profile folder (named ``prefix``...), quit and removed after."""
    profile = tempfile.mkdtemp(prefix=prefix)
    driver = headless_chromium(window, timeout_s, profile)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def headless_chromium(window: str, timeout_s: float, profile: str, logging: bool = False):
    """A headless Chromium under Selenium, offline (Selenium Manager never downloads anything), with its
    profile in ``profile``; ``logging`` keeps the console and network logs for the site checks."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    import os
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-dev-shm-usage", f"--window-size={window}",
                "--lang=en-US", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    if logging:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(timeout_s)
    driver.set_script_timeout(timeout_s)
    return driver


# The test files that take longest, longest first: seconds of one worker in `make test` on the course's 2-core
# machine (pytest -v --durations=0, each file's span per worker, 3 December 2026): test_grading 736, test_site 504
# (the book is built), test_hub 217, test_exercises 207, test_selfcheck 180, test_grading_scale 162,
# test_memory_check 239 and test_learner_loop 201 before their in-process runs of the worked solution and the
# correct styles were left to test_verdicts (about 170 and 110 after), test_feedback 163, test_verdicts 135,
# test_lab 111, test_closure 72, test_similarity 69, test_orphans 56, test_forkserver 52; down to 15 s for the
# last named here, the others a few seconds each.
# `make test` hands whole files to two workers in this order (pytest-xdist's --dist loadfile
# --no-loadscope-reorder), and gives a worker its next file a little before it ends the current one: with the
# long files first and only short ones left at the end, neither worker waits long for the other (a 90 s file
# left among the last ones kept a core idle for a minute and a half).
LONGEST_FIRST = ["test_grading.py", "test_site.py", "test_hub.py", "test_exercises.py", "test_selfcheck.py",
                 "test_memory_check.py", "test_grading_scale.py", "test_feedback.py", "test_verdicts.py",
                 "test_learner_loop.py", "test_lab.py", "test_closure.py", "test_similarity.py", "test_orphans.py",
                 "test_forkserver.py", "test_fitted_answers.py", "test_instructor_walkthrough.py",
                 "test_submission_files.py", "test_secret_inputs.py", "test_scan_policy.py", "test_system_deps.py",
                 "test_scaling.py", "test_parallel_execute.py", "test_withheld.py", "test_one_pass.py",
                 "test_checking.py"]


def pytest_configure(config):
    """Under pytest-xdist the workers share the cores: each worker, and every process it starts (the book's
    kernels, graders, JupyterLab's kernels), gets its share of torch threads (``OMP_NUM_THREADS``, unless set)
    instead of a pool per process as large as the machine, whose threads would wait for each other."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if workers and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, len(os.sched_getaffinity(0)) // int(workers))
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))     # stable: the others keep their order


# --------------------------------------------------------------------------------------------------------------
# What the machine must provide: fail under CI, skip with a reason elsewhere, and say so at the end of the run.
# --------------------------------------------------------------------------------------------------------------
# Debian packages the suite needs beyond Python (README.md, "System packages"; `sudo make system-deps` installs them,
# and .ci/run calls the same target).
INSTALL = "sudo make system-deps"
MISSING = "missing requirement"           # how a skip for a missing requirement starts (the summary reads it)
PRETEND_ENV = "TFMLIB_TESTS_PRETEND_MISSING"   # comma-separated groups reported missing anyway, or "all" (tests)


def under_ci() -> bool:
    """CI=true (or any value but '', 0, false, no) in the environment: .ci/run on a machine that must have it all."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(ok, group: str, missing: str, packages: str = "") -> None:
    """A missing requirement: fail under CI (``under_ci``), skip with a reason elsewhere.  ``group`` names the tests
    that cannot run (the summary at the end of the run lists each group once), ``missing`` says what is missing and
    why it is needed, ``packages`` the Debian packages that provide it ('' when no package does, e.g. root)."""
    pretend = {g.strip() for g in os.environ.get(PRETEND_ENV, "").split(",") if g.strip()}
    if ok and not ({"all", group} & pretend):
        return
    reason = f"{MISSING} [{group}]: {missing}" + (f" [packages: {packages}]" if packages else "")
    if under_ci():
        pytest.fail(reason + f" — CI is set, so this is a failure, not a skip ({INSTALL} installs the packages)",
                    pytrace=False)
    pytest.skip(reason)


def require_bwrap(group: str = "grading sandbox") -> None:
    require(shutil.which("bwrap"), group, "bubblewrap, which the grading sandbox runs in", "bubblewrap")


def require_browser(group: str) -> None:
    require(os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER), group,
            f"a browser to drive ({CHROMIUM} and {CHROMEDRIVER})", "chromium chromium-driver fonts-noto-cjk")


def require_root(group: str, why: str) -> None:
    require(os.geteuid() == 0, group, f"root ({why})")


def missing_summary(reasons: list[str]) -> str:
    """The lines printed at the end of a run in which tests were skipped for missing requirements ('' if none):
    each group once, with the number of tests skipped, what is missing, and the command that installs packages."""
    import re

    groups: dict[str, list] = {}
    for reason in reasons:
        m = re.search(MISSING + r" \[([^\]]+)\]: (.*?)(?: \[packages: ([^\]]+)\])?$", reason)
        if m:
            entry = groups.setdefault(m.group(1), [0, m.group(2), m.group(3) or ""])
            entry[0] += 1
    if not groups:
        return ""
    lines = ["Not every test ran: this machine lacks what some groups of tests need (CI fails instead of skipping)."]
    for group, (n, what, packages) in sorted(groups.items()):
        lines.append(f"  - {group}: {n} test(s) skipped; missing {what}"
                     + (f" (Debian packages: {packages})" if packages else ""))
    if any(packages for _, _, packages in groups.values()):
        lines.append(f"Install the system packages with `{INSTALL}` (Debian/Ubuntu; README.md, 'System packages'), "
                     "then run `make test` again.")
    return "\n".join(lines)


_SKIPS: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and isinstance(report.longrepr, tuple) and MISSING in str(report.longrepr[2]):
        _SKIPS.append(str(report.longrepr[2]).removeprefix("Skipped: "))


def pytest_unconfigure(config):
    """The run's last words (after pytest's own summary line), on the main process only (not pytest-xdist's
    workers, whose reports reach the main process anyway)."""
    text = missing_summary(_SKIPS)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if text and reporter is not None and not hasattr(config, "workerinput"):
        reporter.write_line("")
        for line in text.splitlines():
            reporter.write_line(line, yellow=True, bold=line.startswith("Not every"))


@pytest.fixture
def one_torch_thread():
    """One torch thread, as in the grading kernel: small tensors run ten times faster than with a pool of threads
    that wait for each other on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
