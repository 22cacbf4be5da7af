"""The learner's feedback (``nbgrader generate_feedback``): every test's name, points and failure message, never
the source of a test cell, and math that renders without a network.

nbgrader writes the autograded notebook as HTML, test cells included, with their hidden tests (seeds, shapes,
tolerances) and with tracebacks that quote the test's lines.  ``configure_feedback(c)`` (called from
``nbgrader_config.py``) adds ``LearnerFeedback`` to ``GenerateFeedback``'s preprocessors and gives its HTML
exporter the course's template (``templates/tfm_feedback``):

* each autograder test cell shows ``# <test name>: <points> point(s)`` instead of its code; its outputs stay,
  an error reduced to its type and message (the message names the learner's mistake, ``tfmcheck.feedback``);
* the notebook's TeX (``$...$``, ``$$...$$``) becomes MathML (``latex2mathml``, pinned), which browsers draw
  themselves: the page loads no script, and the template drops nbgrader's MathJax from a CDN.

Only the released copy changes: the autograded notebook, which Formgrader shows the instructor, keeps every
cell as graded.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE = "tfm_feedback"
# $$...$$ first, then $...$ (not \$, not across a blank line); code spans are left alone
DISPLAY_RE = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$", re.S)
INLINE_RE = re.compile(r"(?<![\\$])\$(?!\s)([^$\n]+?)(?<![\s\\])\$(?!\$)")
CODE_RE = re.compile(r"(`+)(.+?)\1", re.S)


def is_test(cell) -> bool:
    """An autograder test cell: graded, not an answer cell."""
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _points(p) -> str:
    p = float(p or 0)
    text = f"{p:g}"
    return f"{text} point" if p == 1 else f"{text} points"


def tex_to_mathml(text: str) -> str:
    """``text`` (Markdown) with each TeX formula replaced by MathML; a formula latex2mathml cannot read is kept
    as its TeX, escaped."""
    from latex2mathml.converter import convert

    def render(tex: str, display: bool) -> str:
        try:
            out = convert(tex.strip(), display="block" if display else "inline")
        except Exception:  # noqa: BLE001 - an unreadable formula stays readable as TeX
            return html.escape(f"$${tex}$$" if display else f"${tex}$")
        return f"\n\n{out}\n\n" if display else out

    # keep code spans as they are
    parts, pos = [], 0
    for m in CODE_RE.finditer(text):
        parts.append(("text", text[pos:m.start()]))
        parts.append(("code", m.group(0)))
        pos = m.end()
    parts.append(("text", text[pos:]))
    out = []
    for kind, chunk in parts:
        if kind == "text":
            chunk = DISPLAY_RE.sub(lambda m: render(m.group(1), True), chunk)
            chunk = INLINE_RE.sub(lambda m: render(m.group(1), False), chunk)
        out.append(chunk)
    return "".join(out)


class LearnerFeedback(NbGraderPreprocessor):
    """Test cells as name and points, errors as type and message, TeX as MathML (see the module's docstring)."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if is_test(cell):
                meta = cell.metadata["nbgrader"]
                cell.source = f"# {meta.get('grade_id', 'test')}: {_points(meta.get('points'))} " \
                              "(the test's code is not shown)"
                outputs = []
                for out in cell.get("outputs", []):
                    if out.get("output_type") == "error":
                        out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
                    outputs.append(out)
                cell.outputs = outputs
            elif cell.cell_type == "markdown":
                cell.source = tex_to_mathml(cell.source)
        return nb, resources


def configure_feedback(c) -> None:
    """``GenerateFeedback`` with ``LearnerFeedback`` and the course's template (config of its HTML exporter only,
    so Formgrader's own pages keep nbgrader's)."""
    import nbgrader.server_extensions.formgrader as formgrader
    from nbgrader.preprocessors import GetGrades
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    nbgrader_templates = Path(formgrader.__file__).resolve().parent / "templates"
    c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, LearnerFeedback]
    c.GenerateFeedback.HTMLExporter.template_name = TEMPLATE
    c.GenerateFeedback.HTMLExporter.extra_template_basedirs = [str(TEMPLATES), str(nbgrader_templates)]
    # nbgrader's feedback template by its path ('feedback/index.html.j2'), and its Bootstrap stylesheet
    c.GenerateFeedback.HTMLExporter.extra_template_paths = [
        str(nbgrader_templates.parent / "static" / "node_modules" / "bootstrap" / "dist" / "css"),
        str(nbgrader_templates)]
