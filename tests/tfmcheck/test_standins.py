"""Each graded function scores on its own (issue 37, item 6): a function built on another graded function is tested
with a trusted stand-in in place of the learner's (grader/tfmcheck/standins.py), which is worth nothing outside
that one call (issue 31)."""
from __future__ import annotations

import os
import re

import pytest
import torch

from test_exercises import _nbg, _read, _source, make_submission
from test_feedback import ASSIGNMENT, WRONG
from test_verdicts import cells_of, graded

from tfmcheck import checking as check
from tfmcheck import feedback
from tfmcheck.standins import DEPENDS, STAND_INS, standing_in


@pytest.fixture(autouse=True)
def one_thread(one_torch_thread):
    """One torch thread, as in the grading kernel (conftest.one_torch_thread)."""


def solution_functions(assignment: str) -> dict:
    """The solution's answer cells of ``assignment``, run: {name: function}."""
    ns = {"torch": torch, "math": __import__("math")}
    for cell in _read(_source(assignment)).cells:
        if cell.cell_type == "code" and _nbg(cell).get("solution"):
            exec(compile(cell.source, "<answer>", "exec"), ns)
    return ns


def inputs(name: str, g: torch.Generator, dtype=torch.float64):
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=dtype)  # noqa: E731
    mask = torch.rand(2, 3, 4, 5, generator=g) < 0.6
    mask[0, 0, 1] = False                       # a query with no allowed key
    return {"rnn_forward": (r(2, 5, 3), r(2, 4), r(3, 4), r(4, 4), r(4)),
            "scaled_dot_product_attention": (r(2, 3, 4, 6), r(2, 3, 5, 6), r(2, 3, 5, 2), mask),
            "split_heads": (r(2, 5, 12), 3), "merge_heads": (r(2, 3, 5, 4),),
            "padding_mask": (torch.tensor([3, 0, 5]), 5), "layer_norm": (r(2, 5, 6), r(6), r(6)),
            "apply_rope": (r(2, 3, 5, 8), torch.arange(4, 9))}[name]


@pytest.mark.parametrize("name", sorted(STAND_INS))
def test_each_stand_in_is_the_solution(name):
    """A stand-in computes what the course's solution computes (contracts of COURSE_PLAN.md)."""
    (assignment,) = {ASSIGNMENT[d] for d, deps in DEPENDS.items() if name in deps}
    solution = solution_functions(assignment)[name]
    stand_in = STAND_INS[name]([True])
    args = inputs(name, torch.Generator().manual_seed(7))
    got, expected = stand_in(*args), solution(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a, b, atol=1e-12), name


def test_the_stand_in_works_only_during_the_dependents_call():
    """Bound under every name of the learner's dependency during the call, switched off and unbound afterwards; never
    bound when the function under test is the dependency itself."""
    ns = {}
    exec("def scaled_dot_product_attention(q, k, v, mask=None):\n    return 'mine', 'mine'\n"
         "attend = scaled_dot_product_attention\n"
         "kept = []\n"
         "def self_attention(x, W_q, W_k, W_v, mask=None):\n"
         "    kept.append((scaled_dot_product_attention, attend))\n"
         "    return attend(x @ W_q, x @ W_k, x @ W_v, mask)\n", ns)
    mine = ns["scaled_dot_product_attention"]
    x, w = torch.randn(2, 3, 4, dtype=torch.float64), torch.eye(4, dtype=torch.float64)
    out, weights = check.call(ns["self_attention"], x, w, w, w, forbid=("tfmlib", "sdpa"))
    expected = torch.nn.functional.scaled_dot_product_attention(x, x, x)
    assert torch.allclose(out, expected), "self_attention ran on the trusted stand-in, through the alias too"
    (stand_in, alias), = ns["kept"]
    assert stand_in is alias and stand_in is not mine
    assert ns["scaled_dot_product_attention"] is mine and ns["attend"] is mine, "every binding is put back"
    with pytest.raises(RuntimeError, match="works only while a test calls"):
        stand_in(x, x, x)
    # a dependency the learner never defined (or whose cell the scan withheld) is stood in for too, then unbound
    del ns["scaled_dot_product_attention"], ns["attend"]
    ns["self_attention"] = lambda *a: None      # not a dependent function: nothing is bound
    with standing_in(ns["self_attention"]) as made:
        assert made == () and "scaled_dot_product_attention" not in ns
    exec("def self_attention(x, W_q, W_k, W_v, mask=None):\n"
         "    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)\n", ns)
    out, _ = check.call(ns["self_attention"], x, w, w, w, forbid=("tfmlib", "sdpa"))
    assert torch.allclose(out, expected)
    with pytest.raises(NameError, match="'scaled_dot_product_attention' is not defined"):   # an inert placeholder
        check.call(ns["scaled_dot_product_attention"], x, x, x, forbid=("tfmlib", "sdpa"))
    ns["scaled_dot_product_attention"] = mine
    # the dependency's own test: no stand-in, even when the dependency is also bound as the dependent's name
    ns["self_attention"] = mine
    with standing_in(mine) as made:
        assert made == () and ns["scaled_dot_product_attention"] is mine
    assert check.call(mine, x, x, x, forbid=("tfmlib", "sdpa")) == ("mine", "mine")


def test_the_stand_in_passes_the_shortcut_guard_and_the_learners_shortcut_does_not():
    """The guard admits the stand-in's own code only: a dependent that calls PyTorch's attention is still refused."""
    ns = {}
    exec("import torch\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    raise NotImplementedError\n"
         "def self_attention(x, W_q, W_k, W_v, mask=None):\n"
         "    scaled_dot_product_attention(x, x, x)\n"
         "    return torch.nn.functional.scaled_dot_product_attention(x, x, x)\n", ns)
    x = torch.randn(1, 2, 4)
    with pytest.raises(check.ShortcutError):
        check.call(ns["self_attention"], x, x, x, x, forbid=("tfmlib", "sdpa"))


def first_wrong(function: str) -> list:
    return next(edits for (f, _), edits in WRONG.items() if f == function)


@pytest.mark.parametrize("dependent", sorted(DEPENDS))
def test_a_wrong_dependency_costs_only_its_own_points(dependent, tmp_path, monkeypatch):
    """As the hardened grader decides (record in the kernel, replay outside): a submission whose only mistake is in a
    dependency keeps every point of the function built on it, and loses the dependency's."""
    monkeypatch.setattr(feedback, "diagnose", lambda *args, **kwargs: None)   # it only rewords a failure
    assignment = ASSIGNMENT[dependent]
    tests = {_nbg(c).get("grade_id"): c.source for c in _read(_source(assignment)).cells if _nbg(c).get("grade")}
    own = [gid for gid, src in tests.items() if re.search(rf"check\.call\({dependent}\b", src)]
    assert own, dependent
    for dependency in DEPENDS[dependent]:
        verdicts, _, _ = graded(cells_of(make_submission(assignment, first_wrong(dependency))), tmp_path)
        lost = sorted(gid for gid, ok in verdicts.items() if not ok)
        assert lost and not set(lost) & set(own), (dependency, lost)


@pytest.mark.parametrize("dependent", ["self_attention", "decoder_block", "grad_norm_by_distance"])
def test_a_withheld_dependency_costs_only_its_own_points(dependent, tmp_path, monkeypatch):
    """A dependency whose cell the scan withheld (it raises; the function is never defined): the function built on it
    still scores, and the kernel's record and the replay outside agree call for call (a test cell that also checks
    the dependency on the same inputs finds the name bound to an inert placeholder in both)."""
    monkeypatch.setattr(feedback, "diagnose", lambda *args, **kwargs: None)
    assignment = ASSIGNMENT[dependent]
    nb = make_submission(assignment, [])
    (dependency,) = DEPENDS[dependent][:1]
    for cell in nb.cells:
        if _nbg(cell).get("solution") and re.search(rf"^def {dependency}\b", cell.source, re.M):
            cell.source = "raise RuntimeError('This answer was withheld from grading')"
    tests = {_nbg(c).get("grade_id"): c.source for c in nb.cells if _nbg(c).get("grade")}
    own = {gid for gid, src in tests.items() if re.search(rf"check\.call\({dependent}\b", src)}
    verdicts, _, _ = graded(cells_of(nb), tmp_path)
    lost = {gid for gid, ok in verdicts.items() if not ok}
    assert lost and not lost & own, (dependency, sorted(lost))


@pytest.fixture
def graded_cell(tmp_path):
    """The test runs as in the grader's kernel (results recorded); ``graded_cell(gid)`` starts the test cell ``gid``."""
    with check.recording(tmp_path / "trace.jsonl") as recorder:
        yield check.begin_test
    os.close(recorder.fd)


def test_when_graded_only_the_function_a_test_cell_tests_gets_stand_ins(graded_cell):
    """Red-team round 7: which call gets a stand-in is decided by the trusted test cell's grade id, never inferred from
    the learner's names.  An alias to another exercise's dependent (``self_attention = multi_head_attention``) gives
    exercise 4's function no attention; a dependency's own test cell never gets one, whatever the names hold."""
    ns = {}
    exec("def scaled_dot_product_attention(q, k, v, mask=None):\n    raise NotImplementedError('mine')\n"
         "def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):\n"
         "    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)[0] @ W_o\n"
         "self_attention = multi_head_attention\n", ns)
    x, w = torch.randn(2, 3, 4, dtype=torch.float64), torch.eye(4, dtype=torch.float64)
    for gid in ("test_mha_values", "test_mha_mask", "test_self_attention_is_not_this", "test_sdpa_values"):
        graded_cell(gid)
        with pytest.raises(NotImplementedError, match="mine"):
            check.call(ns["multi_head_attention"], x, w, w, w, w, 1, forbid=("tfmlib", "sdpa"))
    # exercise 3's own test of self_attention does get one, for the function bound as self_attention
    graded_cell("test_self_attention")
    out = check.call(ns["self_attention"], x, w, w, w, w, 1, forbid=("tfmlib", "sdpa"))
    assert torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(x, x, x))
    # ... and, in the same cell, no other function does
    with pytest.raises(NotImplementedError, match="mine"):
        check.call(ns["scaled_dot_product_attention"], x, x, x, forbid=("tfmlib", "sdpa"))


def test_a_name_the_notebook_deleted_is_gone_from_the_tests_namespace_too():
    """Red-team round 7: a test cell saw a function the notebook had deleted (``global f; del f`` in an answer), the
    value an earlier cell had copied; the dependency then looked undefined to the stand-ins while the tests still
    called it.  What a test cell binds itself stays."""
    notebook, tests = {"__name__": "__main__"}, check.TestNamespace()
    exec("def f():\n    return 1\n", notebook)
    check.run_test("from math import pi\nassert f() == 1\n", notebook, tests)
    del notebook["f"]
    with pytest.raises(NameError, match="'f' is not defined"):
        check.run_test("f()\n", notebook, tests)
    check.run_test("assert pi > 3\n", notebook, tests)
    # deleted while a test cell runs (by the learner's function it calls): gone for the rest of the cell
    exec("def g():\n    global f\n    del f\n    return 2\ndef f():\n    return 1\n", notebook)
    notebook["check"] = check
    with pytest.raises(NameError, match="'f' is not defined"):
        check.run_test("check.call(g)\nf()\n", notebook, tests)


def test_the_learners_function_is_never_handed_a_graph_that_trusted_code_built():
    """Red-team round 7: PyTorch's attention, run by a test on tensors the learner's function had returned with
    ``requires_grad``, handed its output (and the backward of the fused kernel) to the next learner function.  A
    tensor argument that carries a graph reaches the function detached; a leaf the test made is passed as it is."""
    seen = []
    def learner(*args, **kwargs):
        seen.extend([*args, *kwargs.values()])
        return 0
    leaf = torch.randn(3, requires_grad=True)
    made = torch.nn.functional.scaled_dot_product_attention(leaf.view(1, 1, 3), leaf.view(1, 1, 3), leaf.view(1, 1, 3))
    assert made.grad_fn is not None
    check.call(learner, made, [made], {"k": made}, leaf, forbid=("tfmlib",), kw=made)
    assert seen[0].grad_fn is None and seen[1][0].grad_fn is None and seen[2]["k"].grad_fn is None
    assert seen[3] is leaf and seen[4].grad_fn is None
    assert torch.equal(seen[0], made.detach())


def test_a_result_that_is_not_plain_values_fails_before_the_test_touches_it():
    """Red-team round 9: an answer returned an object of its own whose torch function protocol received the next
    torch function the test called on it (PyTorch's attention).  A result that is not tensors or numbers (in tuples,
    lists or dicts) fails the call at once; the test's code never sees it."""
    touched = []

    class Hook:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            touched.append(func)
            return torch.zeros(1)

    with pytest.raises(check.CheckFailure, match="returned a .*Hook: the tests take tensors and numbers"):
        check.call(lambda x: (x, Hook()), torch.ones(2), forbid=("tfmlib",))
    with pytest.raises(check.CheckFailure, match="the tests take tensors and numbers"):
        check.peak_memory(lambda x: Hook(), torch.ones(2), forbid=("tfmlib",))
    assert touched == []
    assert check.call(lambda x: {"a": (x, [1, 2.0, None])}, torch.ones(2), forbid=("tfmlib",))["a"][1] == [1, 2.0, None]


def test_a_test_cells_own_names_are_never_overwritten_while_it_runs():
    """Red-team round 9: ``check.call`` refreshes the notebook's names for the rest of the cell; it overwrote the cell's
    own ``Q`` with the notebook's global ``Q`` (the answer's hook object) before the test used it."""
    notebook, tests = {"__name__": "__main__", "check": check}, check.TestNamespace()
    exec("Q = 'the notebook'\ndef f():\n    return 1\n", notebook)
    check.run_test("Q = 'the test'\ncheck.call(f, forbid=('tfmlib',))\nassert Q == 'the test', Q\n", notebook, tests)
    check.run_test("assert Q == 'the test', Q\n", notebook, tests)
