"""The book's parallel execution (book/_ext/parallel_execute.py) on a small book of its own.

Three MyST notebooks and a plain page are built with Jupyter Book as `make book` does, with two kernels
at a time: the two ordinary notebooks are executed in parallel and cached, the one marked
``execute_alone`` is left to MyST-NB, and every page shows its outputs. A notebook that raises must
still fail the build with its traceback, and a second build must execute nothing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FRONT = textwrap.dedent("""\
    ---
    jupytext:
      text_representation:
        extension: .md
        format_name: myst
    kernelspec:
      display_name: Python 3
      language: python
      name: python3
    {extra}---
    """)


def page(title: str, code: str, extra: str = "") -> str:
    return FRONT.format(extra=extra) + f"\n# {title}\n\n```{{code-cell}} ipython3\n{code}\n```\n"


def make_book(folder: Path, failing: bool = False) -> None:
    (folder / "_ext").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "_ext" / "parallel_execute.py", folder / "_ext")
    (folder / "_config.yml").write_text(textwrap.dedent("""\
        title: test
        only_build_toc_files: true
        execute:
          execute_notebooks: cache
          timeout: 120
        sphinx:
          local_extensions:
            parallel_execute: _ext
        """))
    (folder / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n- file: one\n- file: two\n"
                                     "- file: alone\n")
    (folder / "intro.md").write_text("# Intro\n\nA plain page.\n")
    (folder / "one.md").write_text(page("One", "import os\nprint('one', os.getpid())"))
    code = "raise RuntimeError('chapter two is broken')" if failing else "print('two', 6 * 7)"
    (folder / "two.md").write_text(page("Two", code))
    (folder / "alone.md").write_text(page("Alone", "print('alone')",
                                          extra="course:\n  execute_alone: true\n"))


def build(folder: Path) -> subprocess.CompletedProcess:
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    env = {**os.environ, "TFMLIB_BOOK_JOBS": "2",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([str(jupyter_book), "build", ".", "--warningiserror", "--keep-going"], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_notebooks_execute_in_parallel_and_come_from_the_cache(tmp_path):
    make_book(tmp_path)
    proc = build(tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "executing 2 notebooks, 2 at a time: one, two" in log, log[-3000:]
    assert "one: executed in" in log and "two: executed in" in log
    # MyST-NB took the two from the cache and executed only the one marked execute_alone
    assert "one.md: Using cached notebook" in log and "two.md: Using cached notebook" in log, log[-3000:]
    assert "alone.md: Executing notebook" in log
    html = {name: (tmp_path / "_build" / "html" / f"{name}.html").read_text() for name in ("one", "two", "alone")}
    assert "one " in html["one"] and "two 42" in html["two"] and "alone" in html["alone"]

    again = build(tmp_path)             # everything is cached now: nothing runs
    log = again.stdout + again.stderr
    assert again.returncode == 0, log[-3000:]
    assert "at a time" not in log and "Executing notebook" not in log, log[-3000:]


@pytest.mark.slow
def test_a_failing_notebook_still_fails_the_build_with_its_traceback(tmp_path):
    make_book(tmp_path, failing=True)
    proc = build(tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "two: failed after" in log and "chapter two is broken" in log, log[-3000:]
    reports = list((tmp_path / "_build" / "html" / "reports").rglob("*.log"))
    assert any("chapter two is broken" in r.read_text() for r in reports), log[-3000:]
