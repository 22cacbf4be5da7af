"""Shared fixtures: every library test runs on each available device (CUDA too, when present)."""
import contextlib
import os
import shutil
import tempfile

import pytest
import torch

# The grader grades each assignment's own solution before it grades anyone (scripts/tfmgrader/selfcheck.py),
# once per assignment and configuration.  The tests build dozens of courses and configurations, so that would
# grade a solution again for nearly every grading call (about 25 s each); tests/test_selfcheck.py, which tests
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


# Debian's chromium and chromium-driver drive the browser tests (tests/test_site.py, tests/test_lab.py).
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
# machine (pytest --durations=0, summed per file): test_grading 640, test_site 350 (the book is built), test_selfcheck
# 270, test_exercises 180, test_grading_scale 130; the rest under 90 s each.  `make test` hands whole files to two
# workers in collection order (pytest-xdist's --dist loadfile --no-loadscope-reorder): started first, the long
# files run beside each other and beside the many short ones, and no worker is left with a long file at the end.
LONGEST_FIRST = ["test_grading.py", "test_site.py", "test_selfcheck.py", "test_exercises.py", "test_hub.py",
                 "test_grading_scale.py", "test_orphans.py", "test_forkserver.py", "test_lab.py",
                 "test_submission_files.py", "test_memory_check.py", "test_feedback.py"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))     # stable: the others keep their order
