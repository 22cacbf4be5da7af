"""The learner's released feedback (grader/tfmgrader/feedback_html.py): no line of a hidden test, the named
mistake kept, math as MathML with no script from the network.

The page is made as ``nbgrader generate_feedback`` makes it: the course's ``nbgrader_config.py`` is loaded, nbgrader's
``GenerateFeedback`` builds its HTML exporter from it, and every preprocessor it lists runs, except that
``GetGrades`` (which reads the gradebook) is replaced by the scores it would copy into the notebook.
"""
from __future__ import annotations

import html as _html
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "03_self_attention" / "03_self_attention.ipynb"
RELEASED = ROOT / "notebooks" / "03_self_attention" / "03_self_attention.ipynb"
HIDDEN_RE = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


def course_config():
    from traitlets.config import Config

    c = Config()
    source = (ROOT / "nbgrader_config.py").read_text()
    exec(compile(source, "nbgrader_config.py", "exec"), {"get_config": lambda: c, "__name__": "nbgrader_config",
                                                                 "__file__": str(ROOT / "nbgrader_config.py")})
    return c


def feedback_page(nb, tmp_path) -> str:
    from nbconvert.exporters.exporter import ResourcesDict
    from nbgrader.converters import GenerateFeedback
    from nbgrader.preprocessors import GetGrades, NbGraderPreprocessor

    class StoredGrades(NbGraderPreprocessor):
        """What GetGrades copies from the gradebook: each graded cell's score, the notebook's total."""

        def preprocess(self, nb, resources):
            total = 0.0
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade"):
                    failed = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
                    meta["score"] = 0.0 if failed else float(meta.get("points", 0))
                    meta["comment"] = None
                    total += meta["score"]
            resources["nbgrader"].update(score=total, max_score=sum(
                float(c.metadata["nbgrader"].get("points", 0)) for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade")), late_penalty=0)
            return nb, resources

    converter = GenerateFeedback(config=course_config())
    exporter = converter.exporter_class(parent=converter, config=converter.config)
    for pp in converter.preprocessors:
        exporter.register_preprocessor(StoredGrades if pp is GetGrades else pp)
    path = tmp_path / "03_self_attention.ipynb"
    nbformat.write(nb, path)
    resources = ResourcesDict(nbgrader={"notebook": "03_self_attention", "assignment": "03_self_attention",
                                        "student": "s1", "db_url": "sqlite://"})
    output, _ = exporter.from_filename(str(path), resources=resources)
    return output


@pytest.fixture(scope="module")
def graded():
    """The instructor's notebook as autograding leaves it for a learner who forgot the scaling: the mask test
    failed with the sentence that names the mistake, its traceback quoting the test's lines."""
    from tfmcheck.feedback import CATALOGUE

    nb = nbformat.read(NOTEBOOK, as_version=4)
    sentence = next(m.sentence for m in CATALOGUE["scaled_dot_product_attention"] if "divided" in m.sentence)
    tests = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            tests[meta["grade_id"]] = cell.source
            if meta["grade_id"] == "test_sdpa_mask":
                quoted = [f"\x1b[0;32m{i + 1}\x1b[0m {line}" for i, line in enumerate(cell.source.splitlines())]
                cell.outputs = [nbformat.v4.new_output(
                    "error", ename="CheckFailure", evalue=f"weights: {sentence}\n  largest difference 0.41",
                    traceback=["\x1b[0;31m---------\x1b[0m", *quoted, f"CheckFailure: weights: {sentence}"])]
            else:
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Visible tests passed.\n")]
    return nb, tests, sentence


def test_released_feedback_hides_the_hidden_tests_and_names_the_mistake(graded, tmp_path):
    nb, tests, sentence = graded
    page = feedback_page(nb, tmp_path)
    text = _html.unescape(re.sub(r"<[^>]+>", "", page))
    released = nbformat.read(RELEASED, as_version=4)
    # lines the learner has anyway: the released notebook's, and their own answers'
    own = [cell for cell in nb.cells if cell.cell_type == "code" and not (
        cell.metadata.get("nbgrader", {}).get("grade") and not cell.metadata["nbgrader"].get("solution"))]
    visible = {line.strip() for cell in released.cells + own if cell.cell_type == "code"
               for line in cell.source.splitlines()}
    hidden = {line.strip() for source in tests.values() for block in HIDDEN_RE.findall(source)
              for line in block.splitlines()} - visible - {""}
    assert len(hidden) >= 10, "the notebook's hidden tests were found"
    leaked = sorted(line for line in hidden if line in text)
    assert not leaked, f"hidden test lines in the learner's feedback: {leaked[:5]}"
    assert "manual_seed(32)" not in text and "BEGIN HIDDEN TESTS" not in text
    # each test's name and points, and the learner's mistake in plain words
    for grade_id in tests:
        assert grade_id in text
    assert "test_sdpa_mask: 3 points" in text and "test_sdpa_masked_row: 1 point " in text
    assert sentence in text and "CheckFailure" in text
    assert "Visible tests passed." in text


def test_feedback_math_renders_offline(graded, tmp_path):
    nb, _, _ = graded
    page = feedback_page(nb, tmp_path)
    assert "<math" in page and "$j \\le i$" not in page, "the TeX became MathML"
    assert "cdnjs" not in page and "MathJax.Hub" not in page, "nbgrader's MathJax from a CDN is gone"
    remote = re.findall(r"""<(?:script|link|img)[^>]+(?:src|href)=["']?(?:https?:)?//[^"'>]+""", page)
    assert not remote, f"the page loads from the network: {remote}"


def test_tex_to_mathml_leaves_code_and_prices_alone():
    from tfmgrader.feedback_html import tex_to_mathml

    out = tex_to_mathml("keys $j \\le i$; `x$y$` costs 5$ and $$\\sqrt{d_k}$$")
    assert out.count("<math") == 2 and "`x$y$`" in out and "5$" in out and "msqrt" in out


def test_the_instructors_view_keeps_everything():
    """The feedback step changes the copy it exports; Formgrader reads the autograded notebook, whose cells
    the configuration never touches, and renders it with nbgrader's own template."""
    c = course_config()
    assert c.GenerateFeedback.HTMLExporter.template_name == "tfm_feedback"
    assert "template_name" not in c.HTMLExporter and "template_name" not in c.FormgradeExtension
