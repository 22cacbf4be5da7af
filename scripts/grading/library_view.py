"""What of the grader's Python libraries the sandboxed kernel sees, however the course library was installed.

The kernel runs the grader's own interpreter (``sys.executable``) with a cleared environment, in a sandbox
that shows it the Python installation (``sys.prefix`` and ``sys.base_prefix``) read-only.  That is enough
when every library lives there (a regular or editable install into a venv, a conda environment), but not
when the grader found a library elsewhere:

- ``PYTHONPATH`` pointing at a checkout of the course (the variable is cleared in the sandbox, and the
  checkout is not bound): the kernel gets the ``tfmlib`` package folder alone, read-only, at its own path,
  and ``PYTHONPATH`` set to exactly its parent, which in the sandbox holds nothing else of the checkout
  (the solutions beside it stay invisible);
- ``site-packages`` folders outside the installation (added by a ``.pth`` file or by ``PYTHONPATH``):
  bound read-only, and kept on the kernel's ``PYTHONPATH`` when that is where the grader had them;
- the current folder (``python -m`` from a checkout): ``tfmlib`` as for a checkout.

Any other folder on the grader's path (a checkout, a home folder) is never shown to the kernel.
"""
from __future__ import annotations

import importlib.util
import os
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

SITE_NAMES = ("site-packages", "dist-packages")


@dataclass
class LibraryView:
    binds: list[str] = field(default_factory=list)        # folders bound read-only, at their own path
    pythonpath: list[str] = field(default_factory=list)   # the kernel's PYTHONPATH (empty: none)


def _real(path: str) -> str:
    return os.path.realpath(path) if path else path


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders if f)


def plan_view(path: list[str], pythonpath: list[str], library: str, prefixes: list[str],
              site_dirs: list[str]) -> LibraryView:
    """The view for a grader whose ``sys.path`` (without the script's own folder) is ``path``, whose
    ``PYTHONPATH`` entries are ``pythonpath``, whose course library package is the folder ``library``, whose
    installation folders (bound anyway) are ``prefixes`` and whose own site folders are ``site_dirs``."""
    prefixes = [_real(p) for p in prefixes]
    from_env = {_real(p) for p in pythonpath if p}
    view = LibraryView()
    reproduced = {_real(p) for p in site_dirs}     # on the kernel's path without any PYTHONPATH
    for entry in path:
        real = _real(entry)
        if not real or not os.path.isdir(real):
            continue
        bound = _under(real, prefixes)
        if not bound and os.path.basename(real) in SITE_NAMES:
            view.binds.append(real)
            bound = True
        if bound and real in from_env and real not in view.pythonpath:
            view.pythonpath.append(real)
        elif bound and real not in from_env:
            reproduced.add(real)        # added by the interpreter itself (a .pth file of a site folder)
    parent = _real(str(Path(library).parent))
    if parent not in reproduced and parent not in view.pythonpath:
        # First, as where the grader found it (PYTHONPATH, the current folder) came before the site folders.
        view.pythonpath.insert(0, parent)
    return view


def library_folder() -> str:
    """The folder of the course library package, found as ``import tfmlib`` would find it, without importing
    it: importing it loads PyTorch, seconds of CPU the kernel launcher would otherwise pay per submission."""
    loaded = sys.modules.get("tfmlib")
    spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec("tfmlib")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("the course library tfmlib cannot be found on this interpreter's path")
    return str(Path(spec.origin).resolve().parent)


def grader_view() -> LibraryView:
    """The view for this process (the kernel launcher, which has the grader's environment)."""
    library = library_folder()
    here = _real(os.path.dirname(os.path.abspath(sys.argv[0]))) if sys.argv and sys.argv[0] else ""
    path = [p for p in sys.path if p and _real(p) != here]
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    prefixes = [sys.prefix, sys.base_prefix]
    return plan_view(path, pythonpath, library, prefixes, site.getsitepackages())
