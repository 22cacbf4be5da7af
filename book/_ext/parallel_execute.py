"""Sphinx extension: execute the chapters that are not in the cache on every core at once.

Jupyter Book 1.x (MyST-NB in ``cache`` mode) executes the notebooks one after another while it reads
them, so a cold build uses one core however many the machine has. Before Sphinx reads anything
(``env-before-read-docs``), this extension reads each notebook page that is about to be read, exactly as
MyST-NB will, asks the jupyter-cache whether it holds an executed copy and, for those it does not,
executes them in parallel, one kernel per core, and stores each success in the cache. MyST-NB then
finds them there. Nothing else changes:

- A notebook whose execution fails is not stored: MyST-NB executes it again and reports the error in
  its usual way, so a failing chapter still fails the build (``--warningiserror``) with its traceback.
- A chapter whose prose reports timings measured in the build (front matter ``course: {execute_alone:
  true}``) is left to MyST-NB, which executes it alone after the others have finished, so that no other
  chapter shares the processor while it measures.
- With ``execute_notebooks`` other than ``cache``, with one core, or with ``TFMLIB_BOOK_JOBS=1``, the
  extension does nothing. ``TFMLIB_BOOK_JOBS=N`` sets the number of kernels (default: the cores).

Loaded through ``sphinx.local_extensions`` in ``_config.yml``.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path, PurePosixPath

import nbformat
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def jobs() -> int:
    """How many notebooks to execute at once: ``TFMLIB_BOOK_JOBS``, else the number of usable cores."""
    if os.environ.get("TFMLIB_BOOK_JOBS"):
        return max(1, int(os.environ["TFMLIB_BOOK_JOBS"]))
    return cores()


def _execute(nb_json: str, cwd: str, timeout: int | None, allow_errors: bool,
             threads: int) -> tuple[str, float, str | None]:
    """Run in a worker process: execute one notebook; returns (executed notebook as JSON, seconds, error).  The
    kernel gets ``threads`` torch threads (``OMP_NUM_THREADS``, unless the build's environment sets it): the
    notebooks run at once share the cores, and a pool of threads per kernel would wait for each other."""
    from jupyter_cache.executors.utils import single_nb_execution

    os.environ.setdefault("OMP_NUM_THREADS", str(threads))

    nb = nbformat.reads(nb_json, as_version=4)
    result = single_nb_execution(nb, cwd=cwd, timeout=timeout, allow_errors=allow_errors, meta_override=True)
    return nbformat.writes(result.nb), result.time, result.exc_string


def _pending(app: Sphinx, env, docnames) -> list[tuple[str, Path, object, dict | None]]:
    """The notebook pages among ``docnames`` that the cache lacks: (docname, path, notebook, read format)."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import create_nb_reader

    nb_config = env.mystnb_config
    cache = get_cache(nb_config.execution_cache_path)
    pending = []
    for docname in sorted(docnames):
        path = Path(env.doc2path(docname))
        if nb_config.execution_excludepatterns and any(
                PurePosixPath(path.as_posix()).match(p) for p in nb_config.execution_excludepatterns):
            continue
        text = path.read_text(encoding="utf8")
        reader = create_nb_reader(str(path), env.myst_config, nb_config, text)
        if reader is None:
            continue                       # a plain Markdown page, nothing to execute
        notebook = reader.read(text)
        if not any(c.cell_type == "code" for c in notebook.cells):
            continue
        if notebook.metadata.get("course", {}).get("execute_alone"):
            continue
        try:
            cache.match_cache_notebook(notebook)
            continue                       # already executed and cached
        except KeyError:
            pending.append((docname, path, notebook, reader.read_fmt))
    return pending


def execute_in_parallel(app: Sphinx, env, docnames) -> None:
    nb_config = getattr(env, "mystnb_config", None)
    n_jobs = jobs()
    if nb_config is None or nb_config.execution_mode != "cache" or n_jobs < 2 or nb_config.execution_in_temp:
        return
    pending = _pending(app, env, docnames)
    if len(pending) < 2:
        return                             # nothing to gain: MyST-NB executes it as usual
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(nb_config.execution_cache_path)
    n_jobs = min(n_jobs, len(pending))
    logger.info(f"executing {len(pending)} notebooks, {n_jobs} at a time: "
                + ", ".join(d for d, *_ in pending))
    start = time.monotonic()
    threads = max(1, cores() // n_jobs)
    context = multiprocessing.get_context("spawn")   # a fresh interpreter: no Sphinx state forked
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=context) as pool:
        futures = {pool.submit(_execute, nbformat.writes(nb), str(path.parent), nb_config.execution_timeout,
                               nb_config.execution_allow_errors, threads): (docname, path, read_fmt)
                   for docname, path, nb, read_fmt in pending}
        for future in as_completed(futures):
            docname, path, read_fmt = futures[future]
            try:
                nb_json, seconds, error = future.result()
            except Exception as exc:  # noqa: BLE001 - the worker itself failed: MyST-NB will execute it again
                logger.info(f"  {docname}: could not execute in parallel ({exc!r}); left to MyST-NB")
                continue
            if error is not None:
                last = error.strip().splitlines()[-1] if error.strip() else "unknown error"
                logger.info(f"  {docname}: failed after {seconds:.1f} s ({last[:200]}); MyST-NB executes it "
                            "again and reports the error")
                continue
            record = cache.add_nb_to_project(str(path), read_data=read_fmt) if read_fmt else \
                cache.add_nb_to_project(str(path))
            cache.cache_notebook_bundle(
                CacheBundleIn(nbformat.reads(nb_json, as_version=4), record.uri,
                              data={"execution_seconds": seconds}),
                check_validity=False, overwrite=True)
            logger.info(f"  {docname}: executed in {seconds:.1f} s")
    logger.info(f"parallel execution took {time.monotonic() - start:.1f} s")


def setup(app: Sphinx) -> dict:
    app.connect("env-before-read-docs", execute_in_parallel)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
