"""Sphinx extension that keeps the course site self-contained and its pages free of console errors.

Loaded by Jupyter Book through ``sphinx.local_extensions`` in ``_config.yml``. It does three things:

1. **MathJax from the site itself.** Sphinx's default ``mathjax_path`` is a CDN URL. We point it at
   ``_static/mathjax/tex-chtml.js`` and copy MathJax 3 (its ``es5`` build: the TeX input, the CommonHTML
   output with its woff fonts, the menu, the accessibility and speech components that the menu loads on
   demand) into the build. MathJax comes from the pip package ``django-static-mathjax`` (MathJax 3.2.2
   as published on npm, repackaged as a Python package; it has no dependencies and needs no Django),
   pinned in ``pyproject.toml``. Without it the build stops with an error that says so.

2. **No duplicated inline scripts.** sphinx-thebe registers an inline ``<script>`` (``const
   THEBE_JS_URL = ...``) with ``app.add_js_file(None, body=...)`` after the HTML builder is initialised.
   Sphinx 7.4 stores that asset under the file name ``None`` at once and again under ``''`` when it
   prepares writing (``StandaloneHTMLBuilder.prepare_writing``); the two do not compare equal, so every
   page gets the script twice and Chromium reports "Uncaught SyntaxError: Identifier 'THEBE_JS_URL' has
   already been declared". We normalise the builder's inline assets to ``''`` right after sphinx-thebe
   adds them, so Sphinx's own de-duplication sees the second registration as the same asset.

3. **A guard.** Every page's scripts and stylesheets are checked: one loaded from another host is a
   build warning, which ``--warningiserror`` turns into a failed build.

On pages written as MyST Markdown (the chapters) it removes the theme's Colab launch link: Colab opens
only ``.ipynb`` files from GitHub, so that link would lead to an error; Binder (with jupytext) opens
them, and the exercise notebooks keep their Colab link.

It also registers the bibliography style ``course`` (``bibtex_default_style`` in ``_config.yml``): the
entries are labelled and sorted the way the chapters cite them, "Vaswani et al., 2017", instead of
pybtex's default alphabetic codes such as "[VSP+17]".
"""

from __future__ import annotations

import json
import shutil
from importlib.util import find_spec
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

MATHJAX_PIP = "django-static-mathjax==3.2.2.1"
MATHJAX_ENTRY = "tex-chtml.js"
# What tex-chtml.js loads at run time, relative to its own folder. The other combined bundles
# (tex-svg.js, mml-chtml.js, ...) are not used by the site and are not copied.
MATHJAX_PARTS = ("a11y", "input", "output", "sre", "ui", MATHJAX_ENTRY)


def mathjax_dist() -> Path:
    """Folder of the installed MathJax 3 ``es5`` build; a clear error when it is missing."""
    spec = find_spec("mathjax")
    root = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    dist = root / "static" / "mathjax" / "es5" if root else None
    if dist is None or not (dist / MATHJAX_ENTRY).is_file():
        raise ExtensionError(
            "The course site serves MathJax itself (no CDN) and needs MathJax 3 installed from PyPI: "
            f"pip install '{MATHJAX_PIP}' (it is in pyproject.toml's [course] extra; `make venv` installs it)."
        )
    version = json.loads((dist.parent / "package.json").read_text(encoding="utf8")).get("version", "")
    if not version.startswith("3."):
        raise ExtensionError(f"MathJax 3 is needed, found version {version!r} in {dist.parent}: "
                             f"pip install '{MATHJAX_PIP}'")
    return dist


def use_local_mathjax(app: Sphinx, config) -> None:
    mathjax_dist()  # fail at start-up, not after an hour of executing notebooks
    config.mathjax_path = f"mathjax/{MATHJAX_ENTRY}"  # relative: Sphinx serves it from _static/


def copy_mathjax(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    src = mathjax_dist()
    dest = Path(app.outdir) / "_static" / "mathjax"
    dest.mkdir(parents=True, exist_ok=True)
    for part in MATHJAX_PARTS:
        if (src / part).is_dir():
            shutil.copytree(src / part, dest / part, dirs_exist_ok=True)
        else:
            shutil.copy2(src / part, dest / part)
    shutil.copy2(src.parent / "LICENSE", dest / "LICENSE")


def normalise_inline_scripts(app: Sphinx, env, docnames) -> None:
    """Store inline scripts added after builder init under '' (as Sphinx does later), not None."""
    js_files = getattr(app.builder, "_js_files", None)
    if js_files is None:
        return
    kept = []
    for asset in js_files:
        if asset.filename is None:
            asset = type(asset)("", priority=asset.priority, **asset.attributes)
        if asset not in kept:
            kept.append(asset)
    js_files[:] = kept


def forbid_remote_assets(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    assets = list(context.get("script_files", [])) + list(context.get("css_files", []))
    for asset in assets:
        name = str(getattr(asset, "filename", asset) or "")
        if "://" in name or name.startswith("//"):
            logger.warning(
                "%s: page loads %s from another host; the site must serve every asset itself",
                pagename, name, type="course_site", subtype="remote_asset",
            )


def drop_colab_for_markdown(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if doctree is None or str(app.env.doc2path(pagename)).endswith(".ipynb"):
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "launch-buttons":
            group["buttons"] = [b for b in group.get("buttons", []) if b.get("text") != "Colab"]


def _surname(person) -> str:
    return " ".join(str(part) for part in person.prelast_names + person.last_names).replace("{", "").replace("}", "")


def register_bibliography_style() -> None:
    from pybtex.plugin import register_plugin
    from pybtex.style.formatting.unsrt import Style as UnsrtStyle
    from pybtex.style.labels import BaseLabelStyle

    class AuthorYearLabels(BaseLabelStyle):
        """'Ba et al., 2016', 'Bahdanau et al., 2015', 'Shaw et al., 2018', 'Su et al., 2021'."""

        def format_labels(self, sorted_entries):
            for entry in sorted_entries:
                people = entry.persons.get("author") or entry.persons.get("editor") or []
                names = [_surname(p) for p in people]
                if len(names) == 1:
                    who = names[0]
                elif len(names) == 2:
                    who = f"{names[0]} and {names[1]}"
                else:
                    who = f"{names[0]} et al." if names else entry.key
                yield f"{who}, {entry.fields.get('year', 'n.d.')}"

    class CourseStyle(UnsrtStyle):
        default_label_style = "course_author_year"
        default_sorting_style = "author_year_title"

    register_plugin("pybtex.style.labels", "course_author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "course", CourseStyle)


def setup(app: Sphinx) -> dict:
    register_bibliography_style()
    app.connect("config-inited", use_local_mathjax)
    # sphinx-thebe adds its inline script at env-before-read-docs with the default priority 500.
    app.connect("env-before-read-docs", normalise_inline_scripts, priority=900)
    # After sphinx.ext.mathjax (priority 500) has added the MathJax script to the page.
    app.connect("html-page-context", forbid_remote_assets, priority=900)
    # After sphinx-book-theme has built the launch buttons (priority 501).
    app.connect("html-page-context", drop_colab_for_markdown, priority=600)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
