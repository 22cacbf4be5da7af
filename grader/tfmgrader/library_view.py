"""What of the grader's Python libraries the sandboxed kernel sees, however the course library was installed.

The kernel runs the grader's own interpreter (``sys.executable``) with a cleared environment, in a sandbox
that shows it the Python installation (``sys.prefix`` and ``sys.base_prefix``) read-only.  That is enough
when every library lives there (a regular or editable install into a venv, a conda environment), but not
when the grader found a library elsewhere:

- ``PYTHONPATH`` pointing at a checkout of the course (the variable is cleared in the sandbox, and the
  checkout is not bound): the kernel gets the package folders of ``tfmlib`` and ``tfmcheck`` (``KERNEL_PACKAGES``)
  alone, read-only, at their own paths, and ``PYTHONPATH`` set to exactly their parents, which in the sandbox
  hold nothing else of the checkout (the solutions and the grader beside them stay invisible);
- ``site-packages`` folders outside the installation (added by a ``.pth`` file or by ``PYTHONPATH``):
  bound read-only, and kept on the kernel's ``PYTHONPATH`` when that is where the grader had them;
- the current folder (``python -m`` from a checkout), or an editable install that maps the packages to the
  checkout: the packages as for a checkout.

Any other folder on the grader's path (a checkout, a home folder) is never shown to the kernel.

The grader decides the view once, in its own process, and hands it to the kernel launcher in ``VIEW_ENV``
(``exported_view``): the launcher is another interpreter, started as ``sandbox_kernel.py`` by path, and may find
the packages elsewhere (an editable install maps them to the checkout it was installed from, while a grader run
from another course folder, ``python scripts/grade.py`` in a clone, finds that folder's own).  With one view, the
kernel imports exactly the folders the launcher shows it and lets its audit hook open without a report.
"""
from __future__ import annotations

import importlib.util
import json
import os
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

SITE_NAMES = ("site-packages", "dist-packages")
KERNEL_PACKAGES = ("tfmlib", "tfmcheck")     # what a graded notebook imports; never the grader (tfmgrader)
VIEW_ENV = "TFMLIB_LIBRARY_VIEW"             # the grader's view, for the kernel launcher (exported_view)


@dataclass
class LibraryView:
    binds: list[str] = field(default_factory=list)        # folders bound read-only, at their own path
    pythonpath: list[str] = field(default_factory=list)   # the kernel's PYTHONPATH (empty: none)


def _real(path: str) -> str:
    return os.path.realpath(path) if path else path


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders if f)


def plan_view(path: list[str], pythonpath: list[str], library: str | list[str], prefixes: list[str],
              site_dirs: list[str]) -> LibraryView:
    """The view for a grader whose ``sys.path`` (without the script's own folder) is ``path``, whose
    ``PYTHONPATH`` entries are ``pythonpath``, whose course packages are the folders ``library`` (one or a
    list), whose installation folders (bound anyway) are ``prefixes`` and whose own site folders are
    ``site_dirs``."""
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
    for i, folder in enumerate([library] if isinstance(library, str) else library):
        parent = _real(str(Path(folder).parent))
        if parent not in reproduced and parent not in view.pythonpath:
            # First, as where the grader found it (PYTHONPATH, the current folder) came before the site folders.
            view.pythonpath.insert(i, parent)
    return view


def library_folder(name: str = "tfmlib") -> str:
    """The folder of the course package ``name``, found as ``import name`` would find it, without importing
    it: importing tfmlib loads PyTorch, seconds of CPU the kernel launcher would otherwise pay per submission."""
    loaded = sys.modules.get(name)
    spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        raise ModuleNotFoundError(f"the course package {name} cannot be found on this interpreter's path")
    return str(Path(spec.origin).resolve().parent)


def _handed_down() -> dict | None:
    """The view the grader handed to this process in ``VIEW_ENV``, or None.  Malformed, it stops the launcher: a
    kernel must never start with a view nobody decided."""
    raw = os.environ.get(VIEW_ENV)
    if not raw:
        return None
    try:
        view = json.loads(raw)
        packages, binds, pythonpath = view["packages"], view["binds"], view["pythonpath"]
        if (len(packages) != len(KERNEL_PACKAGES) or not all(isinstance(p, str) and os.path.isabs(p) for p in
                                                             [*packages, *binds, *pythonpath])
                or [os.path.basename(p) for p in packages] != list(KERNEL_PACKAGES)):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise SystemExit(f"tfmlib-sandbox: {VIEW_ENV} is malformed: {raw[:200]}") from None
    return view


def library_folders() -> list[str]:
    """The folders of the packages a graded notebook imports (``KERNEL_PACKAGES``): as the grader found them
    (``VIEW_ENV``), else as this process finds them."""
    handed = _handed_down()
    return list(handed["packages"]) if handed else [library_folder(name) for name in KERNEL_PACKAGES]


def exported_view() -> str:
    """This process's view (``library_folders`` and ``grader_view``), for ``VIEW_ENV``."""
    view = grader_view()
    return json.dumps({"packages": library_folders(), "binds": view.binds, "pythonpath": view.pythonpath})


def grader_view() -> LibraryView:
    """The view for this process: the one the grader handed down (``VIEW_ENV``), else computed here."""
    handed = _handed_down()
    if handed:
        return LibraryView(list(handed["binds"]), list(handed["pythonpath"]))
    library = library_folders()
    here = _real(os.path.dirname(os.path.abspath(sys.argv[0]))) if sys.argv and sys.argv[0] else ""
    path = [p for p in sys.path if p and _real(p) != here]
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    prefixes = [sys.prefix, sys.base_prefix]
    return plan_view(path, pythonpath, library, prefixes, site.getsitepackages())
