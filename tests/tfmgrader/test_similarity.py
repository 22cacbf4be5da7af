"""Copy detection (grader/tfmgrader/similarity.py) and the class's mistake report (mistakes.py), without nbgrader.

The calibration test grades the held-out half of scripts/similarity_calibration.py (disguised copies written by
hand, independent answers) and holds it to today's numbers there (issue 32's targets, 90% of the copies flagged
with the right source and at most 2% of the independent answers flagged, are not met; the guide says so); the
guide must print the numbers it gets.
"""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tfmgrader import similarity as sim  # noqa: E402
from tfmgrader.files import write_csv  # noqa: E402
from fixtures.disguise import KINDS, disguise  # noqa: E402
from fixtures.answers import STYLES  # noqa: E402

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
    assert "masked_fill" in text and "softmax(" in text and "torch" not in text.split("softmax")[0][-3:] \
        and "Docstring" not in text
    assert "scores" not in text and "weights" not in text


def test_copydetect_filter_erases_attribute_names():
    """Why the normalisation is ours: copydetect's Pygments filter turns API names into V too."""
    from copydetect.utils import filter_code

    a = filter_code("y = x.view(b, t, h, d).transpose(1, 2)", "a.py")[0]
    b = filter_code("y = x.reshape(b, t, h, d).permute(1, 2)", "a.py")[0]
    assert a == b
    assert sim.normalise("y = x.view(b, t, h, d).transpose(1, 2)") != \
        sim.normalise("y = x.reshape(b, t, h, d).permute(1, 2)")


SOFTMAX_BY_HAND = {
    "max-subtracted": "    s = s - s.amax(-1, keepdim=True)\n    e = s.exp()\n    w = e / e.sum(-1, keepdim=True)\n",
    "max-values": "    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)\n    w = e / e.sum(dim=-1, keepdim=True)\n",
    "max-first-item": "    e = torch.exp(s - torch.max(s, -1, keepdim=True)[0])\n    w = e / torch.sum(e, -1, keepdim=True)\n",
    "no-max": "    e = torch.exp(s)\n    w = e / e.sum(dim=-1, keepdim=True)\n",
    # round 43: the same softmax in its other equivalent forms, and the kept dimension put back by hand
    "pairwise": "    w = 1 / torch.exp(s.unsqueeze(-2) - s.unsqueeze(-1)).sum(dim=-1)\n",
    "pairwise-reciprocal": "    w = torch.exp(s[..., None, :] - s[..., :, None]).sum(-1).reciprocal()\n",
    "pairwise-power": "    d = s.unsqueeze(-2) - s.unsqueeze(-1)\n    w = d.exp().sum(-1) ** -1\n",
    "log-sum-exp": "    w = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))\n",
    "log-sum-exp-unsqueezed": "    w = (s - s.logsumexp(-1).unsqueeze(-1)).exp()\n",
    "log-softmax": "    w = torch.log_softmax(s, -1).exp()\n",
    "sum-indexed-none": "    e = s.exp()\n    w = e / e.sum(-1)[..., None]\n",
    "times-reciprocal": "    e = (s - s.max(-1).values.unsqueeze(-1)).exp()\n    w = e * (1 / e.sum(-1, keepdim=True))\n",
    "reciprocal-times": "    e = (s - s.max(-1)[0][:, None]).exp()\n    w = e.sum(-1, keepdim=True).reciprocal() * e\n",
}


@pytest.mark.parametrize("how", sorted(SOFTMAX_BY_HAND))
def test_softmax_written_out_reads_as_softmax(how):
    """Red-team round 42 wrote the softmax out (exp of the scores less their maximum, over its sum) beside other
    rewrites: the normalisation reads it as ``softmax`` over that dimension; what it is the softmax of loses the
    maximum taken away only when that is the same tensor's over the same dimension."""
    head, tail = "def f(s, v):\n", "    return w @ v\n"
    softmax = sim.normalise(head + "    w = torch.softmax(s, dim=-1)\n" + tail)
    assert sim.normalise(head + SOFTMAX_BY_HAND[how] + tail) == softmax
    other = head + "    e = torch.exp(s - v.amax(-1, keepdim=True))\n    w = e / e.sum(-1, keepdim=True)\n" + tail
    assert sim.normalise(other) != softmax and "softmax" in sim.normalise(other)


@pytest.mark.parametrize("body", [
    "    w = 1 / torch.exp(s.unsqueeze(-2) - v.unsqueeze(-1)).sum(-1)\n",      # two tensors: no softmax
    "    w = 2 / torch.exp(s.unsqueeze(-2) - s.unsqueeze(-1)).sum(-1)\n",      # twice it
    "    w = torch.exp(s - torch.logsumexp(v, dim=-1, keepdim=True))\n",       # another tensor's normaliser
    "    w = torch.log_softmax(s, -1)\n",                                      # no exp
    "    w = s.exp() / s.exp().sum(-1)\n",                                     # the kept dimension not put back
])
def test_what_only_looks_like_softmax_stays_itself(body):
    """The forms of ``test_softmax_written_out_reads_as_softmax`` are read as softmax only when they compute it:
    the same tensor throughout, the sum's dimension kept, nothing else folded in."""
    head, tail = "def f(s, v):\n", "    return w @ v\n"
    assert sim.normalise(head + body + tail) != sim.normalise(head + "    w = torch.softmax(s, dim=-1)\n" + tail)


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



def test_the_site_kept_on_disk_is_the_site_and_follows_every_page_and_included_file(tmp_path, monkeypatch):
    book, lib = tmp_path / "book", tmp_path / "lib"
    book.mkdir(), lib.mkdir()
    (lib / "m.py").write_text("def shown(x):\n    return x @ x.T\n")
    page = book / "p.md"
    page.write_text("# P\n\n```{code-cell} ipython3\ndef f(q, k):\n    return (q @ k).softmax(-1)\n```\n\n"
                    "```{literalinclude} ../lib/m.py\n:pyobject: shown\n```\n")
    monkeypatch.setenv("GRADER_SITE_CACHE", str(tmp_path / "cache"))
    fresh = [(u.label, u.normalised) for u in sim.compute_site_units(book)]
    assert len(fresh) == 2
    assert [(u[0], u[4]) for u in sim.stored_site_units(book)] == fresh          # computed, then stored
    assert len(list((tmp_path / "cache").glob("site-units-*.json"))) == 1
    with monkeypatch.context() as m:
        m.setattr(sim, "compute_site_units", lambda book: pytest.fail("the stored site was not read"))
        assert [(u[0], u[4]) for u in sim.stored_site_units(book)] == fresh      # read from disk
    key = sim.site_key(book)
    (lib / "m.py").write_text("def shown(x):\n    return x.T @ x\n")               # an included file changed
    assert sim.site_key(book) != key
    key = sim.site_key(book)
    page.write_text(page.read_text() + "\nMore prose.\n")                            # a page changed
    assert sim.site_key(book) != key
    assert sim.stored_site_units(book)[1][4] != fresh[1][1]                         # not the stale units


def test_the_course_references_kept_on_disk_are_those_computed_and_follow_tfmlib_and_the_solutions(tmp_path,
                                                                                                   monkeypatch):
    """tfmlib's and the worked solution's units, kept between processes: the same as computed, read back without
    computing, and computed again when a solution, a tfmlib file or the graded functions change."""
    import shutil
    a = "03_self_attention"
    lib = tmp_path / "lib" / "tfmlib"
    shutil.copytree(ROOT / "tfmlib", lib, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "solutions" / a, tmp_path / "solutions" / a)
    notebooks = sorted((tmp_path / "solutions" / a).glob("*.ipynb"))
    monkeypatch.setattr(sim, "tfmlib_folder", lambda: lib)
    monkeypatch.setenv("GRADER_SITE_CACHE", str(tmp_path / "cache"))
    graded = sim.graded_functions(notebooks)
    sim.CONTRACTS.update(sim.contracts(notebooks))
    fresh = [(u.label, u.normalised) for u in sim.tfmlib_units(graded) + sim.solution_units(notebooks, graded)]
    assert any(label.startswith("tfmlib/") for label, _ in fresh) and any(label.startswith("solutions/")
                                                                         for label, _ in fresh)
    assert [(u.label, u.normalised) for u in sim.course_units(notebooks, graded)] == fresh    # computed, then stored
    assert len(list((tmp_path / "cache").glob("course-units-*.json"))) == 1
    with monkeypatch.context() as m:
        m.setattr(sim, "tfmlib_units", lambda graded: pytest.fail("the stored references were not read"))
        m.setattr(sim, "solution_units", lambda notebooks, graded: pytest.fail("the stored references were not read"))
        assert [(u.label, u.normalised) for u in sim.course_units(notebooks, graded)] == fresh   # read from disk
    key = sim.course_key(notebooks, graded)
    assert sim.course_key(notebooks, graded[:1]) != key                                   # other graded functions
    with open(lib / "attention.py", "a") as f:                                              # a tfmlib file changed
        f.write("\n# an edit\n")
    assert sim.course_key(notebooks, graded) != key
    key = sim.course_key(notebooks, graded)
    notebooks[0].write_text(notebooks[0].read_text().replace("def ", "def  ", 1))           # a solution changed
    assert sim.course_key(notebooks, graded) != key


def test_a_submissions_units_kept_on_disk_are_those_computed_and_follow_its_cells(tmp_path, monkeypatch):
    """A submission's units (main, alternates, pooled and orphan ones), kept between gradings: every field as
    computed, read back without computing, and computed again when a cell, the graded functions or their contracts
    change; a stored file that is not what the grader wrote is not used."""
    import dataclasses
    import json

    monkeypatch.setenv("GRADER_SITE_CACHE", str(tmp_path / "cache"))
    notebooks, graded, _refs = sim.references(ROOT, "03_self_attention")
    cells = sim.notebook_cells(notebooks[0], instructor=set())
    cells = [c for c in cells if "def " in c] + [
        "def helper(s):\n    return torch.softmax(s, dim=-1)\n\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    if mask is not None:\n        s = s.masked_fill(~mask, float('-inf'))\n    w = helper(s)\n    return w @ v, w\n",
        "def unused(x):\n    return x * 2\n"]
    fresh = sim.compute_cell_units("s1", cells, cells[:-2], graded)
    assert any(u.alternates for u in fresh.values()), "the test needs alternates"
    as_dicts = lambda units: {n: dataclasses.asdict(u) for n, u in units.items()}   # noqa: E731
    assert as_dicts(sim.cell_units("s1", cells, cells[:-2], graded)) == as_dicts(fresh)     # computed, then stored
    (stored,) = (tmp_path / "cache" / "submissions").glob("*.json")
    with monkeypatch.context() as m:
        m.setattr(sim, "cell_units_or_none", lambda *a: pytest.fail("the stored units were not read"))
        assert as_dicts(sim.cell_units("s1", cells, cells[:-2], graded)) == as_dicts(fresh)   # read from disk
    key = sim.submission_key("s1", cells, cells[:-2], graded)
    assert len({key, sim.submission_key("s2", cells, cells[:-2], graded),
                sim.submission_key("s1", cells[:-1], cells[:-2], graded),
                sim.submission_key("s1", cells, cells[:-3], graded),
                sim.submission_key("s1", cells, cells[:-2], graded[:1])}) == 5
    with monkeypatch.context() as m:
        m.setitem(sim.CONTRACTS, graded[0], 99)
        assert sim.submission_key("s1", cells, cells[:-2], graded) != key
    # a file changed on disk (a unit's field of the wrong type): computed again, and stored right
    data = json.loads(stored.read_text())
    name = next(iter(data["units"]))
    data["units"][name]["orphan"] = "yes"
    stored.write_text(json.dumps(data))
    computed = []
    real = sim.cell_units_or_none
    with monkeypatch.context() as m:
        m.setattr(sim, "cell_units_or_none", lambda *a: computed.append(1) or real(*a))
        assert as_dicts(sim.cell_units("s1", cells, cells[:-2], graded)) == as_dicts(fresh)
    assert computed == [1] and json.loads(stored.read_text())["units"][name]["orphan"] is False
    # units larger than the limit are computed and not kept
    monkeypatch.setattr(sim, "STORED_UNITS_MAX_CHARS", len(stored.read_text()) - 1)
    assert as_dicts(sim.cell_units("s3", cells, cells[:-2], graded)) == as_dicts(sim.compute_cell_units(
        "s3", cells, cells[:-2], graded))
    assert len(list((tmp_path / "cache" / "submissions").glob("*.json"))) == 1
    # code that cannot be read this time (too deep, out of memory) gives no units, and that is not kept
    with monkeypatch.context() as m:
        m.setattr(sim, "function_units", lambda *a: (_ for _ in ()).throw(RecursionError()))
        assert sim.cell_units("s4", cells, cells[:-2], graded) == {}
    assert len(list((tmp_path / "cache" / "submissions").glob("*.json"))) == 1
    assert as_dicts(sim.cell_units("s4", cells, cells[:-2], graded)) == as_dicts(sim.compute_cell_units(
        "s4", cells, cells[:-2], graded)) != {}


ISSUE_32 = {   # the four copies of issue 32, written again by hand: (assignment, name in disguised/index.json)
    "split into lines, two unused statements": ("03_self_attention", "sdpa-split-two-unused"),
    "while loop, renamed state, independent lines swapped": ("07_efficiency", "blockwise-tfmlib-while"),
    "split_heads and merge_heads inlined": ("04_multi_head", "mha-heads-inlined"),
    "renamed, torch.matmul": ("03_self_attention", "sdpa-tfmlib-renamed-matmul"),
}


@pytest.mark.parametrize("case", sorted(ISSUE_32))
def test_the_disguises_of_issue_32_are_named_with_their_source(case):
    from similarity_calibration import hand_written

    assignment, name = ISSUE_32[case]
    entry = hand_written(assignment)[name]
    notebooks, graded, refs = sim.references(ROOT, assignment)
    units = {"copier": sim.function_units("copier", "student", [entry["code"]], graded)}
    analysis = sim.analyse(units, refs, graded, sim.release_cells(notebooks))
    m = analysis.matches[("copier", entry["function"])]
    named = [m.source] + m.ties if m.source else []
    assert m.flagged and any(u.kind == entry["source"] for u in named), (case, m.similarity, m.source and m.source.label)


ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_verbatim_copy_of_the_worked_solution_is_flagged_in_every_exercise(assignment):
    """The coverage floor of the settings (book/appendix/grading.md): in every exercise at least one graded
    function of a verbatim copy of the worked solution is long enough to attribute, flagged, and named with the
    solution as its source; every function at the minimum size or more is."""
    from similarity_calibration import verbatim_flagged

    cache = {}
    flagged = verbatim_flagged(assignment, sim.K, sim.THRESHOLD, sim.MIN_TOKENS, cache)
    assert flagged, f"{assignment}: no graded function of the worked solution is attributed"
    notebooks, graded, refs, units = cache[("verbatim", assignment)]
    long_enough = [f for f, u in units["verbatim"].items() if u.size >= sim.MIN_TOKENS]
    assert sorted(flagged) == sorted(long_enough) and len(units["verbatim"]) == len(graded)


def test_canonical_form_of_the_usual_disguises():
    norm = sim.normalise
    # spellings of one product, one transpose, one scale
    assert norm("def f(a, b):\n    return torch.matmul(a, b.transpose(-1, -2)) / math.sqrt(a.size(-1))\n") == \
        norm("def f(a, b):\n    return a.matmul(b.mT) * a.shape[-1] ** -0.5\n") == \
        norm("def f(a, b):\n    s = 1.0 / a.shape[-1] ** 0.5\n    return a @ b.swapaxes(-2, -1) * s\n")
    # a while loop over a range is the for loop
    assert norm("def f(x, n):\n    i = 0\n    while i < n:\n        x = x + i\n        i += 2\n    return x\n") == \
        norm("def f(x, n):\n    for i in range(0, n, 2):\n        x = x + i\n    return x\n")
    # single-use temporaries, unused assignments, prints and asserts
    assert norm("def f(x):\n    assert x.dim() == 2\n    t = x.exp()\n    unused = x.sum()\n    print(t)\n"
                "    s = t.sum(dim=-1, keepdim=True)\n    return t / s\n") == \
        norm("def f(x):\n    t = x.exp()\n    return t / t.sum(-1, keepdim=True)\n")
    # the answer's own helper, inlined; independent statements in one order
    assert norm("def f(x, w, v):\n    q = _h(x, w)\n    k = _h(x, v)\n    return q * k\n\n"
                "def _h(a, b):\n    return a @ b\n") == norm("def f(x, w, v):\n    k = x @ v\n    q = x @ w\n    return k * q\n")
    # round 2's spellings: method or function, dtype aliases and casts, a size as one tuple, [:, None], a permute
    # that swaps two axes, a dimension by either sign, (g,) = ..., a comprehension over the three weights
    assert norm("def f(x, n):\n    t = torch.zeros((n, n), dtype=torch.double)\n"
                "    return t + x[:, None].sin() + x.permute(0, 2, 1, 3).double().softmax(dim=1)\n") == \
        norm("def f(x, n):\n    t = torch.zeros(n, n, dtype=torch.float64)\n"
             "    return t + torch.sin(x.unsqueeze(1)) + torch.softmax(x.transpose(1, 2).to(torch.float64), -1)\n")
    assert norm("def f(x, a, b):\n    q, k = [g(x @ w) for w in (a, b)]\n    (h,) = z(q, k)\n    return h\n") == \
        norm("def f(x, a, b):\n    q = g(x @ a)\n    k = g(x @ b)\n    return z(q, k)[0]\n")
    # a small value of the parameters, read in two blocks
    assert norm("def f(s, m=None):\n    if m is not None:\n        b = ~m\n        s = s.masked_fill(b, 0)\n"
                "    s = s.exp()\n    if m is not None:\n        s = s.masked_fill(b, 1)\n    return s\n") == \
        norm("def f(s, m=None):\n    if m is not None:\n        s = s.masked_fill(~m, 0)\n"
             "    s = s.exp()\n    if m is not None:\n        s = s.masked_fill(~m, 1)\n    return s\n")
    # the answer's own function called with an argument by name or by position
    helper = "\n\ndef ln(x, g, b, eps):\n    if eps > 1:\n        return x\n    return (x - g) / b + eps\n"
    assert norm("def f(x, g, b):\n    return ln(x, g, b, eps=1e-5)" + helper) == \
        norm("def f(x, g, b):\n    return ln(x, g, b, 1e-5)" + helper)
    # a value chosen by a statement or by an expression; a list or a tuple of arguments
    chosen = norm("def f(x, m=None):\n    o = 0\n    if m is not None:\n        o = m.shape[-2]\n"
                  "    return torch.cat([x, x], dim=-1) + o\n")
    assert chosen == norm("def f(x, m=None):\n    if m is None:\n        o = 0\n    else:\n        o = m.shape[-2]\n"
                          "    return torch.cat((x, x), dim=-1) + o\n")
    assert chosen == norm("def f(x, m=None):\n    return torch.cat((x, x), -1) + (0 if m is None else m.shape[-2])\n")
    # a size computed from shapes, however it is computed (issue 32's fourth case: x.size(i), h * d_h)
    assert norm("def f(x, w, h):\n    q = (x @ w).view(x.shape[0], x.shape[1], h, x.shape[2] // h)\n"
                "    return (q * q.shape[-1] ** -0.5).reshape(q.shape[0], q.shape[1], q.shape[2] * q.shape[3])\n") == \
        norm("def f(x, w, h):\n    b, t, d = x.size(0), x.size(1), x.size(2)\n    q = (x @ w).view(b, t, h, d // h)\n"
             "    return (q / (d // h) ** 0.5).reshape(b, t, h * (d // h))\n")
    # what is computed differently stays different (which size goes where does not: a -1 is a size like the others
    # since round 46, as x.shape[0] and x.shape[1] were already one SIZE)
    assert norm("def f(x, n):\n    return x.view(x.shape[0], -1)\n") != \
        norm("def f(x, n):\n    return x.view(x.shape[0], -1, 1)\n")
    assert norm("def f(x, m):\n    y = x\n    if m:\n        y = y + 1\n    return y\n") != \
        norm("def f(x, m):\n    return x + 1\n")
    assert norm("def f(x):\n    return x.view(2, -1)\n") != norm("def f(x):\n    return x.reshape(2, -1)\n")
    assert norm("def f(x):\n    return x.sum(-1)\n") != norm("def f(x):\n    return x.mean(-1)\n")


def test_hand_written_disguises_compute_what_their_source_computes():
    """Every disguised copy of the held-out set is a real copy: on fixed inputs it returns what the worked
    solution returns (tfmlib's and the site's code compute the same as the solution)."""
    import json
    import math

    import nbformat
    import torch
    import torch.nn.functional as F

    from similarity_calibration import DISGUISED, hand_written

    def inputs(name):
        g = torch.Generator().manual_seed(0)
        r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
        causal = lambda n: torch.ones(n, n, dtype=torch.bool).tril()  # noqa: E731
        return {
            "rnn_forward": lambda: (r(2, 5, 3), r(2, 4), r(3, 4), r(4, 4) * 0.5, r(4)),
            "grad_norm_by_distance": lambda: (r(2, 5, 3), r(2, 4), r(3, 4), r(4, 4) * 0.5, r(4)),
            "attention_step": lambda: (r(2, 4), r(2, 5, 4), r(2, 5, 3),
                                       torch.tensor([[True, True, False, True, False], [False] * 5])),
            "scaled_dot_product_attention": lambda: (r(2, 3, 4), r(2, 5, 4), r(2, 5, 3), torch.tensor(
                [[True, False, True, True, False], [False] * 5, [True] * 5])),
            "multi_head_attention": lambda: (r(2, 5, 8), r(8, 8), r(8, 8), r(8, 8), r(8, 8), 2, causal(5)),
            "sinusoidal_positions": lambda: (7, 6),
            "relative_attention_scores": lambda: (r(2, 4, 6), r(2, 4, 6), r(4, 4, 6)),
            "layer_norm": lambda: (r(2, 3, 5), r(5), r(5)),
            "decoder_block": lambda: (r(2, 4, 6), causal(4), lambda x, m: 0.5 * x + 1, torch.tanh,
                                      r(6), r(6), r(6), r(6)),
            "blockwise_attention": lambda: (r(2, 5, 4), r(2, 7, 4), r(2, 7, 3), 3),
            "random_mask": lambda: (6, 2, torch.Generator().manual_seed(3)),
            "global_mask": lambda: (6, [0, 3]),
            "compute_optimal": lambda: (1e21,),
            "chinchilla_loss": lambda: (1e9, 2e10),
            "fit_power_law": lambda: ([1.0, 2.0, 4.0, 8.0], [3.0, 5.0, 9.0, 15.0]),
            "fit_chinchilla": lambda: runs,
            "swiglu": lambda: (r(2, 3, 4), r(4, 6), r(4, 6), r(6, 4)),
            "apply_rope": lambda: (r(2, 5, 6), torch.arange(3, 8)),
            # heads of 4 features: with 2, every pairing of RoPE's features is the same rotation
            "grouped_query_attention": lambda: (r(2, 3, 8), r(8, 16), r(8, 8), r(8, 8), r(16, 8), 4, 2,
                                                (r(2, 2, 2, 4), r(2, 2, 2, 4))),
        }[name]()

    n_runs = torch.tensor([1e7, 3e7, 1e8, 3e8, 1e9, 1e7, 1e8, 1e9], dtype=torch.float64)
    d_runs = torch.tensor([1e9, 3e9, 1e10, 1e9, 1e10, 1e11, 1e11, 3e10], dtype=torch.float64)
    l_runs = 1.69 + 406.4 / n_runs ** 0.34 + 410.7 / d_runs ** 0.28
    runs = (n_runs, d_runs, l_runs, torch.tensor([[5.0, 6.0, 0.5, 0.3, 0.3]], dtype=torch.float64))

    def same(a, b):
        if isinstance(a, (tuple, list)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-6) for k in a)
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a, b)
        return math.isclose(float(a), float(b), rel_tol=1e-9)

    index = json.loads((DISGUISED / "index.json").read_text())
    assert sum(len(v) for v in index.values()) >= 30
    for assignment in index:
        base = {"torch": torch, "math": math, "F": F,
                "NOTES_PARAMS": {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}}
        for path in (ROOT / "solutions" / assignment).glob("*.ipynb"):
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                    exec(cell.source, base)
        for name, entry in hand_written(assignment).items():
            ns = dict(base)
            exec(entry["code"], ns)
            f = entry["function"]
            assert same(base[f](*inputs(f)), ns[f](*inputs(f))), f"{assignment}/{name} computes something else"


def test_calibration_held_out_half_holds_its_numbers_and_the_guide_reports_them():
    """On the held-out half (hand-written copies and independent answers the settings were not chosen on): no
    fewer copies flagged with their source and no more independent answers flagged than today; the guide prints
    the numbers this run gives."""
    from similarity_calibration import ASSIGNMENTS, totals

    t = totals(ASSIGNMENTS, "held-out", sim.K, sim.THRESHOLD, sim.MIN_TOKENS, "ast", {})
    # 51 independent functions long enough to attribute: round 35's inlining of lambdas bound to names and nested
    # helpers left two decoder_block answers (two layer_norm calls behind a helper) under the minimum size, round
    # 44's reading of an optional parameter as given (its `if mask is not None` guards gone) four more
    assert t["hand"] >= 39 and t["independent"] >= 51, t
    # 27 of 39 today (69%, under issue 32's 90%, as the guide says): no fewer (round 44: a chinchilla_loss copy,
    # without its default, too short to attribute)
    assert t["hand_found"] >= 27, t["misses"]
    # five of 51 today (10%, over the target of 2%; round 4's blind answers, as the guide says): no more
    assert t["false_positives"] <= 5, t["false"]
    guide = (ROOT / "book" / "appendix" / "grading.md").read_text()
    assert f"| held-out | {t['hand_found']} / {t['hand']} " in guide
    assert f"| {t['false_positives']} / {t['independent']} " in guide


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


STUB = "def scaled_dot_product_attention(q, k, v, mask=None):\n    return q, None\n"
WRAPPER = "\n\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    return {}\n"


def _sdpa_def(source):
    """(the cell's syntax tree, its scaled_dot_product_attention definition)."""
    import ast
    tree = ast.parse(source)
    return tree, next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "scaled_dot_product_attention")


def _padded(source):
    """``try: pass / except Exception: pass`` before every statement of the function (round 25)."""
    import ast
    tree, fn = _sdpa_def(source)
    pad = ast.parse("try:\n    pass\nexcept Exception:\n    pass\n").body[0]
    fn.body = [s for stmt in fn.body for s in (pad, stmt)]
    return ast.unparse(tree)


def _moved(source, kind):
    """The function's body moved into a module's forward, a class's __init__ or a function kept in a dict."""
    import ast
    tree, fn = _sdpa_def(source)
    tree.body.remove(fn)
    if kind == "dict-entry":
        fn.name = "_impl"
        return ast.unparse(tree) + "\n\n\n" + ast.unparse(fn) + "\n\n\n_IMPLS = {'attention': _impl}" + \
            WRAPPER.format("_IMPLS['attention'](q, k, v, mask)")
    fn.args.args.insert(0, ast.arg("self"))
    if kind == "class-init":
        fn.name = "__init__"
        for node in ast.walk(fn):
            if isinstance(node, ast.Return):
                node.__class__, node.targets = ast.Assign, [ast.parse("self.result").body[0].value]
        call = "_Attention(q, k, v, mask).result"
    else:
        fn.name, call = "forward", "_Attention()(q, k, v, mask)"
    body = "\n".join("    " + line for line in ast.unparse(fn).splitlines())
    base = "(nn.Module)" if kind == "module-forward" else ""
    return "from torch import nn\n" + ast.unparse(tree) + f"\n\n\nclass _Attention{base}:\n" + body + \
        WRAPPER.format(call)


def _split_through_list(source):
    """Round 27: the solution cut into pieces too short to attribute, each put in a list by append and called as
    _H[i](...): the function is flagged for review (its source: ``similarity.SPLIT``)."""
    import ast
    tree, fn = _sdpa_def(source)
    tree.body.remove(fn)
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    pieces, calls = [], "q, k, v, mask"
    for i, stmt in enumerate(body[:-1]):
        pieces.append(f"def _p{i}(q, k, v, mask, scores=None, weights=None, d_k=None):\n"
                      f"    {ast.unparse(stmt).replace(chr(10), chr(10) + '    ')}\n    return scores, weights, d_k\n\n"
                      f"_H.append(_p{i})\n")
    wrapper = "\n\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    scores = weights = d_k = None\n"
    wrapper += "".join(f"    scores, weights, d_k = _H[{i}]({calls}, scores, weights, d_k)\n" for i in range(len(pieces)))
    wrapper += "    " + ast.unparse(body[-1]) + "\n"
    return ast.unparse(tree) + "\n\n_H = []\n\n" + "\n".join(pieces) + wrapper


def _values_wrapped(source, how):
    """Round 29: every value the function assigns or returns passed through a helper of the answer's that returns
    it from a branch (``_inlinable`` cannot inline it; "identity": it returns it on every path, "converting": it may
    convert it, so the call stays): no 20-token run of the solution was left in one piece."""
    import ast
    tree, fn = _sdpa_def(source)
    wrap = "_c"

    class W(ast.NodeTransformer):
        def visit_Assign(self, node):
            node.value = ast.Call(ast.parse(wrap).body[0].value, [node.value], [])
            return node

        def visit_Return(self, node):
            node.value = ast.Call(ast.parse(wrap).body[0].value, [node.value], [])
            return node

    W().visit(fn)
    helper = {"identity": "def _c(x, note=None):\n    if note:\n        print(note)\n        return x\n    return x\n",
              "converting": "def _c(x):\n    if torch.is_tensor(x) and x.dtype == torch.float16:\n"
                            "        return x.float()\n    return x\n"}[how]
    return helper + "\n\n" + ast.unparse(ast.fix_missing_locations(tree))


def _boxed(source, holder):
    """Round 32: every variable of the function (its parameters copied in first) kept in a slot of a holder,
    ``x`` as ``S["x"]["_"]`` ("dict") or as ``S.x`` of a ``SimpleNamespace`` ("namespace"), by search and
    replace."""
    import ast
    tree, fn = _sdpa_def(source)
    names = {a.arg for a in fn.args.args} | {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                                             and isinstance(n.ctx, ast.Store)}
    slot = (lambda n: f"S[{n!r}]['_']") if holder == "dict" else (lambda n: f"S.{n}")

    class B(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.parse(slot(node.id)).body[0].value if node.id in names else node

        def visit_Assign(self, node):
            node.value = self.visit(node.value)
            t = node.targets[0]
            if holder == "dict" and isinstance(t, ast.Name) and t.id in names:
                return ast.parse(f"S[{t.id!r}] = {{'_': {ast.unparse(node.value)}}}").body[0]
            node.targets = [self.visit(x) for x in node.targets]
            return node

    doc = [st for st in fn.body[:1] if isinstance(st, ast.Expr)]
    body = [B().visit(st) for st in fn.body[len(doc):]]
    head = "S = {}\n" if holder == "dict" else "S = SimpleNamespace()\n"
    head += "".join((f"S[{p.arg!r}] = {{'_': {p.arg}}}\n" if holder == "dict" else f"S.{p.arg} = {p.arg}\n")
                    for p in fn.args.args)
    fn.body = doc + ast.parse(head).body + body
    return "from types import SimpleNamespace\n" + ast.unparse(ast.fix_missing_locations(tree))


def _same_sdpa(original, disguised):
    """The disguised cell's scaled_dot_product_attention returns what the original's does (a real copy)."""
    import math

    import torch
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[True, False, True], [False] * 3, [True] * 3])
    got = []
    for text in (original, disguised):
        ns = {"torch": torch, "math": math}
        exec(text, ns)
        got.append(ns["scaled_dot_product_attention"](q, k, v, mask))
    assert all(torch.equal(a, b) for a, b in zip(*got)), "the disguise changed what the function computes"


def _literals_rewritten(source):
    """Round 33: every literal written as another expression of the same value, by search and replace: ``-1`` as
    ``~0``, ``-2`` as ``~1``, ``"-inf"`` as ``"-infinity"``, ``0.0`` as ``-0.0``, ``keepdim`` by position."""
    text = source.replace("dim=-1, keepdim=True", "-1, True").replace("dim=-1", "-1")
    for old, new in (("-2", "~1"), ("-1", "~0"), ('"-inf"', '"-infinity"'), ("0.0", "-0.0")):
        text = text.replace(old, new)
    assert text != source
    return text


def _operators_as_methods(source):
    """Round 34: operators and idioms written as the tensor methods that compute them, by search and replace:
    ``x.masked_fill(~m, c)`` as ``x.where(m, c)``, ``a / b`` as ``a.div(b)``, ``m is not None`` as
    ``None is not m``."""
    import re
    text = re.sub(r"\.masked_fill\(~(\w+(?:\.any\([^)]*\))?), ", r".where(\1, ", source)
    text = text.replace("q @ k.transpose(-2, -1) / math.sqrt(d_k)", "(q @ k.transpose(-2, -1)).div(math.sqrt(d_k))")
    text = text.replace("if mask is not None:", "if None is not mask:")
    assert text.count(".where(") == 3 and ".div(" in text and "None is not" in text, text
    return text


ROUND_25 = {"operators-as-methods": _operators_as_methods, "literals-rewritten": _literals_rewritten, "boxed-dict": lambda s: _boxed(s, "dict"), "boxed-namespace": lambda s: _boxed(s, "namespace"),
            "identity-wrapped": lambda s: _values_wrapped(s, "identity"),
            "converting-wrapped": lambda s: _values_wrapped(s, "converting"),
            "split-through-list": _split_through_list, "try-pass-padding": _padded, "module-forward": lambda s: _moved(s, "module-forward"),
            "class-init": lambda s: _moved(s, "class-init"), "dict-entry": lambda s: _moved(s, "dict-entry")}


SDPA_AS_LAMBDA = """scaled_dot_product_attention = lambda q, k, v, mask=None: [
    d_k := q.shape[-1],
    scores := q @ k.transpose(-2, -1) / math.sqrt(d_k),
    scores := scores.masked_fill(~mask, float("-inf")) if mask is not None else scores,
    scores := scores.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0) if mask is not None else scores,
    weights := torch.softmax(scores, dim=-1),
    weights := weights.masked_fill(~mask, 0.0) if mask is not None else weights,
    (weights @ v, weights),
][-1]
"""


def _typed_as_q(source):
    for old, new in [("q @ k.transpose(-2, -1)", "q.type_as(q) @ k.transpose(-2, -1).type_as(q)"),
                     ("torch.softmax(scores, dim=-1)", "torch.softmax(scores.type_as(q), dim=-1).type_as(q)"),
                     ("0.0)", "0.0).type_as(q)"), ("return weights @ v, weights", "return (weights @ v).type_as(q), weights")]:
        assert old in source, old
        source = source.replace(old, new)
    return source


def _inside_causal_mask(source):
    body = source[source.index("    d_k = "):]
    return ("def causal_mask(n, q=None, k=None, v=None, mask=None):\n    if q is None:\n"
            "        return torch.ones(n, n, dtype=torch.bool).tril()\n" + body +
            "\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    return causal_mask(None, q, k, v, mask)\n")


ROUND_41 = {"module-lambda": lambda s: SDPA_AS_LAMBDA, "type-as-everywhere": _typed_as_q,
            "inside-another-graded": _inside_causal_mask}


@pytest.mark.parametrize("hide", ["markdown", "raw", "indented", "prompts", "alias",
                                  "if-true", "decoy-after-error", "tuple", "methods", "second-notebook",
                                  "marked-read-only", "percent-in-string",
                                  "try-pass-padding", "module-forward", "class-init", "dict-entry",
                                  "split-through-list", "identity-wrapped", "converting-wrapped",
                                  "boxed-dict", "boxed-namespace", "literals-rewritten",
                                  "operators-as-methods", "after-many-decoys", "module-lambda", "type-as-everywhere",
                                  "inside-another-graded"])
def test_copy_detection_reads_the_answer_as_the_grader_runs_it(hide, tmp_path):
    """Round 15 of the blind red team pasted the worked solution where copy detection did not read it, while the
    grader ran it: answer cells saved as Markdown or raw cells (nbgrader makes them code again), every line indented
    or behind '>>> ' prompts (IPython strips both), the function bound under its name by an expression.  Round 17
    then hid it where reading the cells in order cannot say what runs: a ``def`` under ``if True:``, a decoy stub
    after a statement that raises, a tuple assignment, the bodies moved into a class's methods behind one-line
    wrappers, a second notebook of stubs read last.  Round 23: the answer cells' own nbgrader metadata marked
    read-only (copy detection trusted it, the kernel ran them), and the solution between two strings, one ending in
    a ``%`` line, so that dropping magic lines before parsing read it as a string.  Round 25: ``try: pass / except
    Exception: pass`` before every statement, and the body moved where Python calls it without its name (a module's
    ``forward``, a class's ``__init__``, a function kept in a dict).  Round 29: every value wrapped in a call that
    returns it.  Round 32: every variable kept in a slot of a dict or a namespace.  Round 33: the literals written
    as other expressions of the same value.  Round 34: operators written as tensor methods.  Round 40's check:
    under ``if True:`` after twenty-one decoys of its name (each definition of a name is compared).  Round 41: one
    lambda bound to the name, its statements a list of assignment expressions; ``.type_as(q)`` after every value;
    the body run by another graded function, called with more arguments than its exercise gives it.  Each is found with
    the solution as its source, and each computes what the solution computes."""
    import nbformat

    a = "03_self_attention"
    solution = ROOT / "solutions" / a / f"{a}.ipynb"
    nb = nbformat.read(solution, as_version=4)
    for cell in nb.cells:
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        source = "\n".join(line for line in cell.source.splitlines() if "### " not in line)
        if hide in ("markdown", "raw"):
            nb.cells[nb.cells.index(cell)] = (nbformat.v4.new_markdown_cell if hide == "markdown"
                                                 else nbformat.v4.new_raw_cell)(source, metadata=cell.metadata)
            continue
        if hide == "indented":
            source = "\n".join("    " + line for line in source.splitlines())
        elif hide == "prompts":
            source = "\n".join((">>> " if line and not line[0].isspace() else "... ") + line
                               for line in source.splitlines())
        elif hide == "alias" and "def scaled_dot_product_attention(" in source:
            source = source.replace("def scaled_dot_product_attention(", "def _attend(") + \
                "\nscaled_dot_product_attention = [_attend][0]\n"
        elif hide == "if-true":
            source = "if True:\n" + "\n".join("    " + line for line in source.splitlines())
        elif hide in ROUND_41 and "def scaled_dot_product_attention(" in source:
            original, source = source, ROUND_41[hide](source)
            if hide != "inside-another-graded":
                _same_sdpa(original, source)
        elif hide == "inside-another-graded" and "def causal_mask(" in source:
            source = "# causal_mask is defined with the attention above\n"
        elif hide == "after-many-decoys" and "def scaled_dot_product_attention(" in source:
            source = "\n".join([STUB] * 21) + "\nif True:\n" + "\n".join("    " + line for line in source.splitlines())
        elif hide == "decoy-after-error" and "def scaled_dot_product_attention(" in source:
            source += "\n\n\nif len(str(1)) == 1:\n    raise SystemExit\n" + STUB
        elif hide == "tuple" and "def scaled_dot_product_attention(" in source:
            source = source.replace("def scaled_dot_product_attention(", "def _attend(") + \
                "\n" + STUB + "scaled_dot_product_attention, _unused = _attend, 0\n"
        elif hide == "marked-read-only":
            cell.metadata["nbgrader"].update(locked=True, solution=False, grade=False)
        elif hide == "percent-in-string":
            source = "_note = \'\'\'answer\n%\'\'\'\n" + source + "\n_end = \'\'\'\n\'\'\'\n_x = 0  # \'\'\'\n"
        elif hide in ROUND_25 and "def scaled_dot_product_attention(" in source:
            original, source = source, ROUND_25[hide](source)
            if hide.startswith(("boxed", "identity", "converting", "literals", "operators")):
                _same_sdpa(original, source)
        elif hide == "methods" and "def scaled_dot_product_attention(" in source:
            body = source.replace("def scaled_dot_product_attention(q, k, v, mask=None):",
                                  "def attend(self, q, k, v, mask=None):")
            source = ("class _Impl:\n" + "\n".join("    " + line for line in body.splitlines()) +
                      "\n\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
                      "    return _Impl().attend(q, k, v, mask)\n")
        cell.source = source
    folder = tmp_path / "student" / a
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{a}.ipynb")
    if hide == "second-notebook":
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(STUB)]), folder / "zz_scratch.ipynb")
    notebooks, graded, refs = sim.references(ROOT, a)
    units = sim.submission_units("student", folder, graded, sim.instructor_cells(notebooks))
    assert "scaled_dot_product_attention" in units, (hide, sorted(units))
    analysis = sim.analyse({"student": units}, refs, graded, sim.release_cells(notebooks))
    match = analysis.matches[("student", "scaled_dot_product_attention")]
    assert match.flagged and match.source.kind == ("split" if hide == "split-through-list" else "solution"), \
        (hide, match.similarity)


@pytest.mark.parametrize("unreadable", ["huge-literal", "deep-nesting"])
def test_code_copy_detection_cannot_read_flags_the_notebook_wherever_it_sits(unreadable):
    """Red-team round 40: a decoy too short to attribute as the function's last definition, and the worked solution
    under ``if True:`` before it, holding a literal of 4,000 digits (``ast.unparse`` cannot write it: Python's limit on
    an int's digits).  Copy detection skipped that definition as unreadable and compared the decoy alone: full
    marks, unflagged.  Code it cannot read, wherever it sits (the last definition, an alternate, the pooled unit),
    leaves the whole notebook unread, and a notebook that scored is flagged."""
    from tfmgrader.class_report import UNREAD, columns, copy_suspicions

    a = "03_self_attention"
    notebooks, graded, refs = sim.references(ROOT, a)
    cells = []
    for cell in nbformat_read(ROOT / "solutions" / a / f"{a}.ipynb").cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            source = "\n".join(line for line in cell.source.splitlines() if "### " not in line)
            if "def scaled_dot_product_attention(" in source:
                if unreadable == "huge-literal":
                    source = source.replace("(q, k, v, mask=None):", "(q, k, v, mask=None):\n    _H = 0x" + "f" * 4000, 1)
                else:
                    source = source.replace("(q, k, v, mask=None):", "(q, k, v, mask=None):\n    _H = "
                                            + "-" * 1000 + "0", 1)     # compiles; normalising it recurses too deep
                source = "if True:\n" + "\n".join("    " + line for line in source.splitlines()) + "\n" + STUB
            cells.append(source)
    compile("\n".join(cells), "<answer>", "exec")       # Python runs it
    assert sim.compute_cell_units("hider", cells, cells, graded) == {}
    analysis = sim.analyse({"hider": {}}, refs, graded, sim.release_cells(notebooks))
    assert copy_suspicions(analysis, ["hider"], scored=["hider"])["hider"]["similar_to"] == UNREAD
    assert columns(analysis, ["hider"], scored=["hider"])["hider"]["similar_to"] == f"{UNREAD} (flagged)"


def test_a_notebook_is_read_within_a_budget_of_statements_or_flagged():
    """Every unit copy detection compares costs statements to normalise: past MAX_READ_STATEMENTS for one notebook
    (the course's answers read at most 120) it is flagged unread instead of comparing some of its definitions and
    leaving the others out.  Six definitions of each graded function, 29 statements each: every unit is within
    MAX_STATEMENTS, all of them together are not; two of each are read."""
    a = "03_self_attention"
    notebooks, graded, refs = sim.references(ROOT, a)

    def definitions(count):
        body = "".join(f"    x{i} = a + {i}\n" for i in range(28))
        return ["\n".join(f"def {name}(a, b=None):\n{body}    return x{j} * {j}\n" for j in range(count))
                for name in graded]

    many, few = definitions(6), definitions(2)
    with pytest.raises(sim.TooLarge, match="more than 1000 statements"):   # the budget's, not one unit's limit
        reading = sim.Reading()
        units = sim.function_units("many", "student", many, graded, reading)
        sim.alternate_units("many", many, graded, units, reading)
    assert sim.compute_cell_units("many", many, many, graded) == {}
    assert sorted(sim.compute_cell_units("few", few, few, graded)) == sorted(graded)


def nbformat_read(path):
    import nbformat

    return nbformat.read(path, as_version=4)


def test_in_order_measures_what_of_the_reference_survives_insertions_not_rewriting():
    """``similarity.in_order``: tokens inserted between the reference's (up to the gap) leave it whole; more
    inserted, a rewritten half, or a unit that holds the tokens out of order do not."""
    ref = "".join(chr(0x10000 + i) for i in range(60))
    wrapped = "".join(t + "()"[: i % 3] for i, t in enumerate(ref))          # up to 2 tokens after each
    assert sim.in_order(ref, wrapped, 20, 4) == 1.0
    assert sim.in_order(ref, "".join(t + "#" * 5 for t in ref), 20, 4) == 0.0       # 5 > gap: no run
    assert sim.in_order(ref, ref[:30] + "".join(reversed(ref[30:])), 20, 4) < 0.9  # half rewritten
    assert sim.in_order(ref, ref[30:] + ref[:30], 20, 4) < 0.6       # both halves there, out of order
    assert sim.in_order(ref, "", 20, 4) == 0.0


def test_a_scored_notebook_whose_graded_functions_copy_detection_cannot_read_is_flagged():
    """Copy detection reads the code the kernel runs; a notebook that scores with none of its graded functions found
    hid them from it (red-team round 23 did, twice): fail closed, the submission is flagged for review."""
    from tfmgrader.class_report import UNREAD, columns, copy_suspicions

    a = "03_self_attention"
    notebooks, graded, refs = sim.references(ROOT, a)
    own = STYLES[a]["einsum-where"]
    units = {"honest": sim.cell_units("honest", list(own.values()), list(own.values()), graded), "hidden": {}}
    analysis = sim.analyse(units, refs, graded, sim.release_cells(notebooks))
    found = copy_suspicions(analysis, ["honest", "hidden", "blank"], scored=["honest", "hidden"])
    assert found["hidden"]["similar_to"] == UNREAD
    assert found["honest"]["similar_to"] == "" and found["blank"]["similar_to"] == "", found
    # grades.csv shows the same flag, as it shows a copy: "(flagged)" in its similar_to column
    shown = columns(analysis, ["honest", "hidden", "blank"], scored=["honest", "hidden"])
    assert shown["hidden"]["similar_to"] == f"{UNREAD} (flagged)", shown
    assert "(flagged)" not in shown["honest"]["similar_to"] and shown["blank"]["similar_to"] == "", shown
    failed = columns(None, ["honest", "blank"], scored=["honest"], failed="copy detection failed (MemoryError)")
    assert failed == {"honest": {"similar_to": "copy detection failed (MemoryError) (flagged)", "similarity": ""},
                      "blank": {"similar_to": "", "similarity": ""}}, failed


@pytest.mark.slow
def test_no_independent_answer_is_flagged_for_running_functions_it_does_not_name():
    """The review flag of round 27 (``similarity.SPLIT``: a graded function that runs functions it does not call by
    name) stays off honest work: no independent answer of the calibration corpus (styles, correct and wrong answers,
    both halves) gets it."""
    import similarity_calibration as cal

    split, total = [], 0
    for a in cal.ASSIGNMENTS:
        notebooks, graded, refs = sim.references(cal.ROOT, a)
        for half in cal.HALVES:
            subs, expected = cal.build_class(a, graded, refs, half)
            units = {}
            for s, functions in subs.items():
                if expected[s].role == "independent":
                    cells = list(dict.fromkeys(functions.values()))
                    units[s] = {n: u for n, u in sim.cell_units(s, cells, cells, graded).items() if n in functions}
            analysis = sim.analyse(units, refs, graded, sim.release_cells(notebooks))
            total += len(analysis.matches)
            split += [key for key, m in analysis.matches.items() if m.source is sim.SPLIT]
    assert total > 100 and split == [], split


ROUND_35 = ("lambdas-applied", "lambdas-bound", "nested-helpers", "for-over-one", "match-capture", "with-as",
            "walrus", "dead-defs")
GRADED_35 = {"03_self_attention": "scaled_dot_product_attention", "04_multi_head": "multi_head_attention",
             "07_efficiency": "blockwise_attention"}
# the red team's later rounds also copied exercise 2's one graded function
GRADED_BY_HAND = {**GRADED_35, "02_attention": "attention_step"}


def _bindings_rewritten(source, name, how):
    """Round 35: every assignment ``x = v`` of the function written as another form that binds the same value:
    ``v`` as a lambda called where it is written on the variables it reads (or bound to a name, or a nested
    helper, first), ``for x in [v]: pass``, ``match v: case x: pass``, ``with nullcontext(v) as x: pass``,
    ``(x := v)``; or kept, with an unused nested ``def`` after it."""
    import ast
    import itertools
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    bound = {a.arg for a in fn.args.args} | {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                                             and isinstance(n.ctx, ast.Store)}
    count = itertools.count()

    class Rename(ast.NodeTransformer):
        def __init__(self, new):
            self.new = new

        def visit_Name(self, node):
            return ast.Name(self.new.get(node.id, node.id), node.ctx)

    class Rewrite(ast.NodeTransformer):
        def visit_Assign(self, node):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                return node
            x, v, i = node.targets[0].id, ast.unparse(node.value), next(count)
            read = list(dict.fromkeys(n.id for n in ast.walk(node.value) if isinstance(n, ast.Name) and n.id in bound))
            params = {n: f"a{j}" for j, n in enumerate(read)}
            body = ast.unparse(Rename(params).visit(ast.parse(v, mode="eval")).body)
            lam, args = f"lambda {', '.join(params.values())}: {body}", ", ".join(read)
            text = {"lambdas-applied": f"{x} = ({lam})({args})",
                    "lambdas-bound": f"_f{i} = {lam}\n{x} = _f{i}({args})",
                    "nested-helpers": f"def _h{i}({', '.join(params.values())}):\n    return {body}\n{x} = _h{i}({args})",
                    "for-over-one": f"for {x} in [{v}]:\n    pass",
                    "match-capture": f"match {v}:\n    case {x}:\n        pass",
                    "with-as": f"with contextlib.nullcontext({v}) as {x}:\n    pass",
                    "walrus": f"({x} := {v})",
                    "dead-defs": f"{x} = {v}\ndef _n{i}():\n    pass"}[how]
            return ast.parse(text).body

    Rewrite().visit(fn)
    return "import contextlib\n" + ast.unparse(ast.fix_missing_locations(tree))


def _same_results(assignment, cells, replaced, exact=True):
    """The notebook's solution cells run with one cell replaced give what they give as written (a real copy):
    the same tensors, or (``exact=False``, a disguise that reorders the arithmetic) the same to rounding."""
    import contextlib
    import math

    import torch
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    args = {"03_self_attention": lambda: (r(2, 3, 4), r(2, 3, 4), r(2, 3, 5),
                                          torch.tensor([[True, False, True], [False] * 3, [True] * 3])),
            "04_multi_head": lambda: (r(2, 5, 8), r(8, 8), r(8, 8), r(8, 8), r(8, 8), 2,
                                      torch.ones(5, 5, dtype=torch.bool).tril()),
            "07_efficiency": lambda: (r(2, 5, 4), r(2, 7, 4), r(2, 7, 3), 3),
            "02_attention": lambda: (r(3, 4), r(3, 5, 4), r(3, 5, 2),
                                     torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5]))
            }[assignment]()
    got = []
    for texts in (cells, {**cells, **replaced}):
        ns = {"torch": torch, "math": math, "contextlib": contextlib}
        for text in texts.values():
            exec(text, ns)
        out = ns[GRADED_BY_HAND[assignment]](*args)
        got.append(out if isinstance(out, tuple) else (out,))
    same = torch.equal if exact else lambda a, b: torch.allclose(a, b, rtol=1e-12, atol=1e-12)
    assert all(same(a, b) for a, b in zip(*got)), "the disguise changed what the function computes"


def _flagged_with_the_solution(assignment, rewrite, tmp_path, exact=True, sources=("solution",)):
    """The worked solution's notebook with the graded function's cell rewritten: it computes what the solution
    computes (``_same_results``), and copy detection flags that function with the solution as its source."""
    import nbformat

    name = GRADED_BY_HAND[assignment]
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    cells, replaced = {}, {}
    for i, cell in enumerate(nb.cells):
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        cells[i] = "\n".join(line for line in cell.source.splitlines() if "### " not in line)
        cell.source = cells[i]
        if f"def {name}(" in cell.source:
            replaced[i] = cell.source = rewrite(cells[i])
    assert replaced, name
    _same_results(assignment, cells, replaced, exact)
    folder = tmp_path / "student" / assignment
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{assignment}.ipynb")
    notebooks, graded, refs = sim.references(ROOT, assignment)
    units = sim.submission_units("student", folder, graded, sim.instructor_cells(notebooks))
    analysis = sim.analyse({"student": units}, refs, graded, sim.release_cells(notebooks))
    match = analysis.matches[("student", name)]
    assert match.flagged and match.source.kind in sources, match.similarity


@pytest.mark.parametrize("how", ROUND_35)
@pytest.mark.parametrize("assignment", sorted(GRADED_35))
def test_binding_forms_and_function_values_are_read_as_assignments(assignment, how, tmp_path):
    """Round 35 of the blind red team pasted the worked solution of exercises 3, 4 and 7 with every assignment written
    in another form that binds the same value (a lambda called on the spot, ``for x in [v]: pass``, ``match v:
    case x: pass``), and with an unused nested ``def`` after every statement: copy detection read the loops and
    captures as code that does nothing, never replaced a function value by its body and kept unused ``def``s
    (similarity 0.00 to 0.30, unflagged on both paths).  Each such copy, made here by rewriting every assignment of
    the solution in one of these forms (and the forms next to them: a lambda or a nested helper bound to a name,
    ``with nullcontext(v) as x``, ``(x := v)``), is flagged with the solution as its source, and each computes what
    the solution computes."""
    _flagged_with_the_solution(assignment, lambda text: _bindings_rewritten(text, GRADED_35[assignment], how), tmp_path)


REDTEAM_35 = sorted((ROOT / "grader" / "fixtures" / "redteam35").glob("*.py"))


@pytest.mark.parametrize("path", REDTEAM_35, ids=lambda p: p.stem)
def test_the_copies_of_red_team_round_35_are_flagged_with_their_source(path, tmp_path):
    """The copies round 35's attacker wrote by hand (grader/fixtures/redteam35: every step a lambda called on the
    spot, every assignment a loop over one value or a ``match`` capture, an unused ``def`` after every statement),
    and the one it named and did not grade (the whole body one chain of assignment expressions, written here by
    hand), none of which the generated rewrites above were made from: each is flagged with the solution as its
    source."""
    assert len(REDTEAM_35) == 9
    assignment = path.stem.split("-")[0]
    _flagged_with_the_solution(assignment, lambda text: path.read_text(), tmp_path)


def _calls_rewritten(source, name, how):
    """Round 36: every call of the function written another way that calls the same thing: ``x.f(a)`` as
    ``torch.Tensor.f(x, a)``, its arguments spread from a literal (``f(*(a, b))``), or made through
    ``functools.partial(f, a)(b)``."""
    import ast

    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)

    class Rewrite(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if how == "unbound-methods" and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id not in ("torch", "math", "F") \
                    and not node.func.attr.startswith("_"):
                return ast.Call(ast.parse(f"torch.Tensor.{node.func.attr}", mode="eval").body,
                                [node.func.value, *node.args], node.keywords)
            if how == "literal-star-args" and node.args and not any(isinstance(a, ast.Starred) for a in node.args):
                return ast.Call(node.func, [ast.Starred(ast.Tuple(node.args, ast.Load()), ast.Load())], node.keywords)
            if how == "functools-partial" and len(node.args) >= 2:
                partial = ast.Call(ast.parse("functools.partial", mode="eval").body, [node.func, node.args[0]], [])
                return ast.Call(partial, node.args[1:], node.keywords)
            return node

    Rewrite().visit(fn)
    return "import functools\n" + ast.unparse(ast.fix_missing_locations(tree))


@pytest.mark.parametrize("how", ["unbound-methods", "literal-star-args", "functools-partial"])
@pytest.mark.parametrize("assignment", sorted(GRADED_35))
def test_calls_written_another_way_are_read_as_the_calls_they_are(assignment, how, tmp_path):
    """Round 36 of the blind red team pasted the worked solution of exercises 3, 4 and 7 with every call written
    another way (methods called through ``torch.Tensor``, arguments spread from a literal, calls made through
    ``functools.partial``), or with the library's keyword arguments, in-place methods, tuple assignments, module
    aliases or helpers with an unused ``*rest`` (similarity 0.00 to 0.62, unflagged on both paths).  The first three,
    made here by rewriting every call of the solution, are flagged with the solution as their source."""
    _flagged_with_the_solution(assignment, lambda text: _calls_rewritten(text, GRADED_35[assignment], how), tmp_path)


REDTEAM_36 = sorted((ROOT / "grader" / "fixtures" / "redteam36").glob("*.py"))


@pytest.mark.parametrize("path", REDTEAM_36, ids=lambda p: p.stem)
def test_the_copies_of_red_team_round_36_are_flagged_with_their_source(path, tmp_path):
    """The 24 copies round 36's attacker wrote by hand (grader/fixtures/redteam36: eight disguises on exercises 3,
    4 and 7, each the answer cells of a submission that got full marks unflagged on both paths): each is flagged with
    the solution as its source, and computes what the solution computes."""
    assert len(REDTEAM_36) == 24
    assignment = path.stem.split("-")[0]
    _flagged_with_the_solution(assignment, lambda text: path.read_text(), tmp_path)


REDTEAM_37 = sorted((ROOT / "grader" / "fixtures" / "redteam37").glob("*.py"))


@pytest.mark.parametrize("path", REDTEAM_37, ids=lambda p: p.stem)
def test_the_copies_of_red_team_round_37_are_flagged_with_their_source(path, tmp_path):
    """Round 37's two attackers pasted the worked solution of 3, 4 and 7 with every call given arguments that only
    restate PyTorch's defaults (``torch.matmul(a, b, out=None)``, ``dtype=None``), or with every value passed through
    something that hands it back (``next(iter([x]))``, ``[y for y in [x]][0]``): full marks unflagged on both paths.
    Their nine copies (grader/fixtures/redteam37) are each flagged with the solution as their source, and compute
    what it computes."""
    assert len(REDTEAM_37) == 9
    assignment = path.stem.split("-")[0]
    _flagged_with_the_solution(assignment, lambda text: path.read_text(), tmp_path)


REDTEAM_43 = sorted((ROOT / "grader" / "fixtures" / "redteam43").glob("*.py"))


@pytest.mark.parametrize("path", REDTEAM_43, ids=lambda p: p.stem)
def test_the_copies_of_later_red_team_rounds_are_flagged_with_their_source(path, tmp_path):
    """Round 43 pasted exercise 2's worked solution with the softmax in its pairwise form (each weight one over the
    sum of ``exp(s_j - s_i)``) and the context as a batched product, ``(w.unsqueeze(1) @ values).squeeze(1)``:
    full marks unflagged on both paths (0.72).  It computes what the solution computes, to rounding, and is flagged
    with the solution as its source."""
    assert len(REDTEAM_43) >= 1
    assignment = path.stem.split("-")[0]
    _flagged_with_the_solution(assignment, lambda text: path.read_text(), tmp_path, exact=False)


REDTEAM_44 = sorted((ROOT / "grader" / "fixtures" / "redteam44").glob("*.py"))


@pytest.mark.parametrize("path", REDTEAM_44, ids=lambda p: p.stem)
def test_the_copies_of_red_team_round_44_are_flagged_with_their_source(path, tmp_path):
    """Round 44 pasted the worked solution (or tfmlib's code) of exercises 2, 3, 4 and 7 with the mask given an
    all-True default in the body and its guards dropped (similarity 0.00), the scale written with ``math.pow``, the
    keys transposed before they are sliced, ``q.new_full``/``new_zeros``, ``torch.fmax``, ``.max(...).values`` or
    the last block's end clamped: full marks unflagged on both paths.  Its ten single-cell copies (grader/fixtures/
    redteam44) each compute what the solution computes and are flagged with the solution or tfmlib as source."""
    assert len(REDTEAM_44) == 10
    assignment = path.stem.split("-")[0]
    _flagged_with_the_solution(assignment, lambda text: path.read_text(), tmp_path, exact=False,
                               sources=("solution", "tfmlib"))


def test_a_default_given_in_the_body_reads_as_the_guards_it_replaces():
    """``if mask is None: mask = <all True>`` with the masking unguarded, and the masking under ``if mask is not
    None:`` guards, are one program to copy detection; so are ``<default> if p is None else p`` and ``p``."""
    guarded = ("def f(s, mask=None):\n    if mask is not None:\n        s = s.masked_fill(~mask, 0.0)\n"
               "    return s.softmax(-1)\n")
    defaulted = ("def f(s, mask=None):\n    if mask is None:\n        mask = torch.ones((), dtype=torch.bool)\n"
                 "    s = s.masked_fill(~mask, 0.0)\n    return s.softmax(-1)\n")
    assert sim.normalise(guarded) == sim.normalise(defaulted)
    inline = "def f(s, p=None):\n    q = P0 if p is None else p\n    return s * q['a']\n"
    assert sim.normalise(inline) == sim.normalise("def f(s, p=None):\n    return s * p['a']\n")


@pytest.mark.parametrize("solution, copy", [
    ("    return x.view(b, t, h, d // h).transpose(1, 2)\n", "    return x.view(b, t, h, -1).transpose(1, 2)\n"),
    ("    return x.transpose(1, 2).reshape(b, t, h * d)\n", "    return x.transpose(1, 2).flatten(2)\n"),
    ("    return x.masked_fill(~m.any(dim=-1, keepdim=True), 0.0)\n",
     "    return x.masked_fill((~m).all(dim=-1, keepdim=True), 0.0)\n"),
], ids=["view-minus-one", "flatten", "de-morgan"])
def test_the_spellings_of_red_team_round_46_are_read_as_one(solution, copy):
    """Round 46 pasted exercise 2's, 3's and 4's worked solutions with ``(~mask).all`` for ``~mask.any`` (beside the
    weights times the mask for the masked fill with zero, left open), ``view(b, t, h, -1)`` and ``flatten(2)`` in the
    helpers (0.60 to 0.77, unflagged on both paths): each pair is one program to copy detection."""
    head = "def f(x, m, h):\n    b, t, d = x.shape[0], x.shape[1], x.shape[-1]\n"
    assert sim.normalise(head + solution) == sim.normalise(head + copy)


def _long_helper(blocks: int, per_block: int) -> str:
    """A helper of ``blocks`` loops of ``per_block`` statements, every one adding a new name to one variable (what
    red-team round 39 put beside its answer: 100 loops of 200 held copy detection for more than 18 minutes)."""
    lines = ["def helper(x, q):"]
    for b in range(blocks):
        lines += ["    for _ in x:", f"        a{b} = 1", f"        b{b} = 2"]
        lines += [f"        q = q + c{b}_{i}" for i in range(per_block - 2)]
    return "\n".join(lines + ["    return q", ""])


@pytest.mark.parametrize("blocks, per_block, unread", [(2, 60, False), (7, 200, True), (100, 200, True),
                                                      (2, 800, True)])
def test_a_long_notebook_is_read_in_bounded_time_or_flagged_unread(blocks, per_block, unread):
    """Copy detection's cost stays bounded whatever the learner writes: a notebook of at most MAX_CELL_STATEMENTS
    statements whose units hold at most MAX_STATEMENTS each is read (its long blocks keep their order past
    REORDER_BUDGET); past either limit it is flagged unread, never read in part (the helper is compared with every
    graded function, so a unit it makes too long is not skipped: a copy padded past the limit would go unread
    and unflagged); either way in seconds."""
    import time

    from tfmgrader.class_report import UNREAD, columns, copy_suspicions

    a = "03_self_attention"
    notebooks, graded, refs = sim.references(ROOT, a)
    own = list(STYLES[a]["einsum-where"].values())
    cells = own + [_long_helper(blocks, per_block)]
    start = time.process_time()
    units = {"long": sim.compute_cell_units("long", cells, cells, graded)}
    spent = time.process_time() - start
    assert spent < 10, f"{spent:.1f} s of CPU to read {blocks * per_block} statements"
    assert (units["long"] == {}) is unread
    analysis = sim.analyse(units, refs, graded, sim.release_cells(notebooks))
    found = copy_suspicions(analysis, ["long"], scored=["long"])
    assert (found["long"]["similar_to"] == UNREAD) is unread, found
    assert (columns(analysis, ["long"], scored=["long"])["long"]["similar_to"] == f"{UNREAD} (flagged)") is unread
