"""Shared fixtures: every library test runs on each available device (CUDA too, when present)."""
import os

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
