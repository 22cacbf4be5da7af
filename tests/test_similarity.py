"""Copy detection (scripts/tfmgrader/similarity.py) and the class's mistake report (mistakes.py), without nbgrader.

The calibration test builds the class of scripts/similarity_calibration.py (correct styles, wrong answers,
disguised copies of tfmlib and of the solutions, copies between students) for 03, 04 and 07 and requires the
targets of issue 17: at least 95% of the copied functions flagged with the right source, no independent
answer flagged.
"""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from tfmgrader import similarity as sim  # noqa: E402
from tfmgrader.files import write_csv  # noqa: E402
from fixtures.disguise import KINDS, disguise  # noqa: E402

SDPA = '''def scaled_dot_product_attention(q, k, v, mask=None):
    """Docstring."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
'''


def test_normalisation_removes_names_comments_docstrings_and_layout():
    renamed = '''def scaled_dot_product_attention(a, b, c, m=None):
    # a comment
    s = a @ b.transpose(-2, -1) / math.sqrt(a.shape[-1])   # scale


    if m is not None:
        s = s.masked_fill(~m, float('-inf'))
    w = torch.softmax(s, dim=-1)
    return (w @ c, w)
'''
    assert sim.normalise(SDPA) == sim.normalise(renamed)
    text = sim.normalise(SDPA)
    # what the code only reads stays: modules, attributes, keywords
    assert "masked_fill" in text and "torch.softmax" in text and "dim=" in text and "Docstring" not in text
    assert "scores" not in text and "weights" not in text


def test_copydetect_filter_erases_attribute_names():
    """Why the normalisation is ours: copydetect's Pygments filter turns API names into V too."""
    from copydetect.utils import filter_code

    a = filter_code("y = x.view(b, t, h, d).transpose(1, 2)", "a.py")[0]
    b = filter_code("y = x.reshape(b, t, h, d).permute(1, 2)", "a.py")[0]
    assert a == b
    assert sim.normalise("y = x.view(b, t, h, d).transpose(1, 2)") != \
        sim.normalise("y = x.reshape(b, t, h, d).permute(1, 2)")


@pytest.mark.parametrize("how", KINDS)
def test_each_disguise_normalises_back_to_the_copied_code(how):
    """A disguised copy of the solution is flagged with the solution as its source."""
    notebooks, graded, refs = sim.references(ROOT, "07_efficiency", book=ROOT / "no-book")
    solution = next(u for u in refs if u.kind == "solution" and u.function == "blockwise_attention")
    copy = disguise(solution.source, "blockwise_attention", how, seed=5)
    assert copy != solution.source
    units = {"copier": sim.function_units("copier", "student", [copy], graded)}
    analysis = sim.analyse(units, refs, graded, sim.release_cells(notebooks))
    m = analysis.matches[("copier", "blockwise_attention")]
    assert m.flagged and m.source.kind in ("solution", "tfmlib") and m.similarity >= 0.9, (how, m.similarity)
    assert m.source.kind == "solution" or m.source.normalised == solution.normalised


def test_wrappers_and_aliases_are_followed():
    defs = sim.cell_functions(['def _impl(a, b):\n    return a + b\n',
                               'def f(x, y):\n    return _impl(x, y)\n'])
    assert [n.name for n in sim.unit("f", defs, {"f"})] == ["_impl"]
    defs = sim.cell_functions(['def f(x):\n    return x * 2\n',
                               '_f_impl = f\n\ndef f(*args):\n    import warnings\n    return _f_impl(*args)\n'])
    names = [n.name for n in sim.unit("f", defs, {"f"})]
    assert len(names) == 2 and names.count("f") == 2      # the new f and the one it calls through the alias


def test_short_functions_are_not_attributed_and_the_report_escapes_learner_text(tmp_path):
    notebooks, graded, refs = sim.references(ROOT, "03_self_attention", book=ROOT / "no-book")
    hostile = SDPA.replace('"""Docstring."""', '"""</pre><script>alert(1)</script>"""') + \
        "\n\ndef causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()\n"
    units = {"<b>evil</b>": sim.function_units("<b>evil</b>", "student", [hostile], graded),
             "other": sim.function_units("other", "student", [hostile], graded)}
    analysis = sim.analyse(units, refs, graded, sim.release_cells(notebooks))
    assert analysis.matches[("other", "causal_mask")].similarity is None          # one line: too short
    assert analysis.matches[("other", "scaled_dot_product_attention")].flagged
    page = tmp_path / "similarity.html"
    assert sim.write_html(page, "03_self_attention", analysis) >= 2
    text = page.read_text()
    assert "<script>" not in text and "&lt;script&gt;" in text and "<b>evil</b>" not in text
    assert sim.summary(analysis, "other")["similar_to"].startswith("scaled_dot_product_attention ~ ")


def test_site_code_is_a_source():
    units = sim.site_units(ROOT / "book")
    labels = [u.label for u in units]
    assert any("03_self_attention.md" in label and "scaled_dot_product_attention" in label for label in labels)
    assert any(label.endswith("code cell") for label in labels)


def test_calibration_meets_the_targets():
    """>= 95% of the disguised copies flagged with the right source, no independent answer flagged."""
    from similarity_calibration import ASSIGNMENTS, evaluate

    cache: dict = {}
    for a in ASSIGNMENTS:
        c = evaluate(a, sim.K, sim.THRESHOLD, sim.MIN_TOKENS, "ast", cache=cache)
        assert c["submissions"] >= 30
        assert c["copies"] >= 20 and c["independent"] >= 5, c
        assert c["found"] >= 0.95 * c["copies"], c["misses"]
        assert c["false_positives"] == 0, c["false"]


def test_mistakes_are_named_from_the_catalogue(tmp_path):
    import nbformat

    from tfmgrader import mistakes
    from tfmcheck.feedback import CATALOGUE

    notebooks = [ROOT / "solutions" / "03_self_attention" / "03_self_attention.ipynb"]
    tests = mistakes.test_functions(notebooks)
    assert tests["test_sdpa_mask"] == "scaled_dot_product_attention" and tests["test_causal_mask"] == "causal_mask"
    known = mistakes.catalogue()
    first = CATALOGUE["scaled_dot_product_attention"][0]
    assert mistakes.named_mistakes(f"weights: {first.sentence}\n  numbers", "scaled_dot_product_attention",
                                   known) == {first.name}
    assert mistakes.named_mistakes("weights: values differ", "scaled_dot_product_attention", known) == set()
    # one autograded notebook: the mask test fails with the first mistake, the causal test with no cause
    nb = nbformat.read(notebooks[0], as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid == "test_sdpa_mask":
            cell.outputs = [nbformat.v4.new_output("error", ename="CheckFailure",
                                                   evalue=f"weights: {first.sentence}", traceback=[])]
        elif gid == "test_causal_mask":
            cell.outputs = [nbformat.v4.new_output("error", ename="NameError", evalue="name 'x' is not defined",
                                                   traceback=[])]
    graded = tmp_path / "a.ipynb"
    nbformat.write(nb, graded)
    rows = mistakes.aggregate("03_self_attention", notebooks, {"s1": [graded], "s2": [notebooks[0]]},
                              {"causal_mask": {"s2"}})
    got = {(r["function"], r["kind"], r["mistake"]): r["students"] for r in rows}
    assert got[("scaled_dot_product_attention", "failed", "")] == 1
    assert got[("scaled_dot_product_attention", "named mistake", first.name)] == 1
    assert got[("causal_mask", "no named cause", "")] == 1
    assert got[("causal_mask", "flagged for similarity", "")] == 1
    assert got[("self_attention", "failed", "")] == 0
    write_csv(tmp_path / "mistakes.csv", rows, mistakes.FIELDS)
    mistakes.plot(tmp_path / "mistakes.png", "03_self_attention", rows)
    assert (tmp_path / "mistakes.png").stat().st_size > 1000
