"""The tests' fixtures (tests/fixtures/) for the scripts that build classes from them: bench_grading.py,
similarity_calibration.py and example_class.py.

    from course_fixtures import fixture
    make_class = fixture("make_class").make_class

The package is imported from its path, under the name the tests give it (``fixtures``): nothing is added to
``sys.path``, and the grader (tfmgrader) never needs the tests folder.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def fixture(name: str):
    """The module ``tests/fixtures/<name>.py``, as ``fixtures.<name>``."""
    package = sys.modules.get("fixtures")
    if package is None:
        spec = importlib.util.spec_from_file_location("fixtures", FIXTURES / "__init__.py",
                                                      submodule_search_locations=[str(FIXTURES)])
        package = importlib.util.module_from_spec(spec)
        sys.modules["fixtures"] = package
        spec.loader.exec_module(package)
    elif Path(package.__file__).resolve().parent != FIXTURES:
        raise ImportError(f"another package named 'fixtures' is imported ({package.__file__}), not {FIXTURES}")
    return importlib.import_module(f"fixtures.{name}")
