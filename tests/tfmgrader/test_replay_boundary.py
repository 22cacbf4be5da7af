"""The grader's boundary (#31): nothing the learner's kernel records reaches the replay's inputs, encoding asks an
object of unknown type nothing, and a test cell's variables are not the learner's functions' globals.

Each test plays the graded kernel in this process: the notebook's namespace is a dict, the learner's cell runs in
it, and each test cell runs as ``SandboxedExecute`` sends it (``preprocessors.isolated_test``) while
``check.recording`` writes the trace; the grader's ``verify.replay`` then reaches the verdicts.  Code that slipped
past the static scan can change anything in the kernel, so the attacks here switch the in-kernel checks off."""
import json
import random

import numpy as np
import pytest
import torch

import tfmcheck.checking as check
from tfmcheck import trace
from tfmgrader.preprocessors import isolated_test
from tfmgrader.verify import replay

SETUP = ("setup", "import torch\nimport tfmcheck.checking as check\nSHORTCUTS = ('tfmlib', 'sdpa')\n", False)


def graded(tmp_path, learner: str, tests: list[tuple[str, str]], isolated: bool = True):
    """Run ``learner``'s cell and the test cells ``[(grade_id, source)]`` as the graded kernel does (each test cell
    through ``isolated_test``, or, with ``isolated=False``, as a plain cell of the notebook), then replay them in
    the grader; returns the replay's ``Verdicts``."""
    path = tmp_path / "trace.jsonl"
    path.unlink(missing_ok=True)
    notebook: dict = {"__name__": "__main__"}
    kernel_tests = check.TestNamespace()
    with check.recording(path), pytest.MonkeyPatch.context() as mp:
        mp.setattr(check, "_TESTS", kernel_tests)        # a kernel of its own
        exec(SETUP[1], notebook)
        exec(learner, notebook)
        for gid, src in tests:
            src = f"__import__('tfmcheck.checking').checking.begin_test({gid!r})\n" + src
            try:
                exec(isolated_test(src, gid) if isolated else src, notebook)
            except Exception:  # noqa: BLE001 - in the kernel a failing cell is only an error output
                pass
    records, problems = trace.load(path)
    return replay([SETUP, *[(gid, src, True) for gid, src in tests]], records, problems)


ATTENTION_TEST = ("test_attention", """
g = torch.Generator().manual_seed(3)
q, k, v = torch.randn(2, 4, 8, generator=g), torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 3, generator=g)
out = check.call(attention, q, k, v, forbid=SHORTCUTS)
check.assert_close("attention(q, k, v)", out, check.ref.scaled_dot_product_attention(q, k, v))
""")

HONEST_ATTENTION = """
def attention(q, k, v):
    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return w @ v
"""


def test_an_input_changed_in_place_fails_the_call_whatever_the_kernel_says(tmp_path, monkeypatch):
    """Red team: the answer switches the in-kernel check off, zeroes its inputs and returns the attention of zeros.
    The old replay copied the recorded zeros into the test's own inputs and computed the reference from them."""
    assert graded(tmp_path, HONEST_ATTENTION, [ATTENTION_TEST]).passed == {"test_attention": True}
    zeroing = """
def attention(q, k, v):
    for t in (q, k, v):
        t.zero_()
    return torch.zeros(q.shape[0], q.shape[1], v.shape[-1])
"""
    in_kernel = graded(tmp_path, zeroing, [ATTENTION_TEST])
    assert in_kernel.passed == {"test_attention": False}
    assert "changed one of its input tensors in place" in in_kernel.messages["test_attention"]

    class Off:      # the in-kernel check emptied (code past the scan can do that)
        def __init__(self, *args):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False
    monkeypatch.setattr(check, "_inputs_kept", Off)
    v = graded(tmp_path, zeroing, [ATTENTION_TEST])
    assert v.passed == {"test_attention": False}
    assert "your function changed one of its input tensors in place" in v.messages["test_attention"]
    assert v.errors["test_attention"][0] == "InputChanged"


def test_the_random_state_is_put_back_after_every_call_and_never_taken_from_the_trace(tmp_path):
    """A learner's function that draws from (or reseeds) the generator it was given and the global ones leaves
    them as they were, in every mode; a record that claims another random state changes nothing in the replay."""
    g = torch.Generator().manual_seed(5)

    def greedy(n, generator):
        generator.manual_seed(123)          # would choose what the test draws next
        torch.manual_seed(7)
        np.random.seed(7)
        random.seed(7)
        return torch.rand(n, generator=generator)
    before = (g.get_state(), torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    check.call(greedy, 3, g)
    assert torch.equal(g.get_state(), before[0]) and torch.equal(torch.get_rng_state(), before[1])
    assert (np.random.get_state()[1] == before[2]).all() and random.getstate() == before[3]

    # a forged record: the right digest, a result, and the random state of the learner's choice
    x = torch.ones(2)
    chosen = torch.Generator().manual_seed(99)
    forged = {"cell": "t", "n": 0, "args": trace.digest(((x, g), {})), "value": trace.encode(x),
              "state": {"torch": trace.encode(chosen.get_state()), "generators": {"0": trace.encode(chosen.get_state())}}}
    records, _ = trace.loads(json.dumps(forged).encode())
    rep = trace.Replayer(records)
    rep.begin("t")
    rep.record(((x, g), {}))
    assert torch.equal(g.get_state(), before[0]) and torch.equal(torch.get_rng_state(), before[1])


def test_exercise_7s_random_mask_test_uses_no_generator_after_the_learners_function():
    """The one test cell that handed a generator to a learner's function and drew from it again (exercise 7's
    uniformity test) now gives each draw a generator of its own."""
    import ast
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[2] / "solutions" / "07_efficiency" / "07_efficiency.ipynb")
                    .read_text())
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        tree = ast.parse("".join(cell["source"]))
        handed = {a.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and n.func.attr in ("call", "peak_memory") for a in n.args[1:] if isinstance(a, ast.Name)}
        generators = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and "Generator" in ast.unparse(n.value)
                      for t in n.targets if isinstance(t, ast.Name)}
        assert not handed & generators, (meta["grade_id"], handed & generators)


def test_encoding_asks_an_object_of_unknown_type_nothing():
    """Red team: an object claiming to be a NumPy scalar whose ``item`` zeroed the inputs after the in-place
    check.  Encoding decides by exact type; anything else is opaque, whatever its class says about itself."""
    touched = []

    class Meta(type):
        def __getattribute__(cls, name):          # any attribute read through the class (its names included)
            if name not in ("__mro__", "__dict__"):
                touched.append(f"class {name}")
            return super().__getattribute__(name)

    class FakeScalar(metaclass=Meta):
        __module__ = "numpy"
        ndim = 0

        def item(self):
            touched.append("item")
            return 1.0

        def __getattr__(self, name):
            touched.append(name)
            return None
    fakes = [FakeScalar(), [FakeScalar()], {"x": FakeScalar()}]
    touched.clear()
    for obj in fakes:
        encoded = trace.encode(obj)
        trace.digest(obj)
        assert "opaque" in json.dumps(encoded)
    assert touched == []
    assert trace.encode(np.float32(2.5)) == {"f": "2.5"} and trace.encode(np.array(3)) == {"i": "3"}


def test_a_test_cells_variables_are_not_the_learners_functions_globals(tmp_path):
    """Red team: ``expected = None`` at the top of the answer and ``def causal_mask(n): return expected``; the test
    cell binds the right answer to ``expected`` just before calling it.  Graded, the test cell runs in a namespace
    of its own, so the answer returns None; run as a plain cell (how it was) it got the marks."""
    test = ("test_causal", """
expected = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
got = check.call(causal_mask, 3, forbid=SHORTCUTS)
check.assert_equal("causal_mask(3)", got, expected)
""")
    later = ("test_later", "check.assert_equal('again', check.call(causal_mask, 3, forbid=SHORTCUTS), expected)\n")
    cheat = "expected = None\n\ndef causal_mask(n):\n    return expected\n"
    honest = "def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()\n"
    assert graded(tmp_path, cheat, [test], isolated=False).passed == {"test_causal": True}, "the attack as it was"
    assert graded(tmp_path, cheat, [test, later]).passed == {"test_causal": False, "test_later": False}
    # honest: passes, and a later test cell still sees what an earlier one bound
    assert graded(tmp_path, honest, [test, later]).passed == {"test_causal": True, "test_later": True}


def test_a_test_cells_bindings_stay_out_of_the_notebook():
    notebook = {"x": 1}
    exec("def f():\n    return x\n", notebook)
    tests = check.TestNamespace()
    check.run_test("x = 2\ny = f()\n", notebook, tests)
    assert notebook["x"] == 1 and "y" not in notebook and tests.names["y"] == 1
    notebook["x"] = 3                       # the learner's cell changes x: the tests keep their own
    check.run_test("z = x\n", notebook, tests)
    assert tests.names["z"] == 2


def test_a_copied_read_only_cell_makes_an_invalid_notebook_not_a_crash(tmp_path):
    """A read-only setup cell duplicated with its metadata: nbgrader's DeduplicateIds emptied one copy's metadata and
    OverwriteCells then failed with a KeyError (status 'crashed').  It is an invalid notebook, with the reason."""
    import nbformat

    from tfmgrader.course import check_submission
    from tfmgrader.report import NotebookReport, Status, SubmissionReport

    setup = nbformat.v4.new_code_cell("import tfmcheck.checking as check")
    setup.metadata["nbgrader"] = {"grade": False, "grade_id": "setup", "locked": True, "schema_version": 3,
                                  "solution": False}
    copied = nbformat.from_dict(setup)
    copied.id = "a-copy"
    nb = nbformat.v4.new_notebook(cells=[setup, nbformat.v4.new_code_cell("x = 1"), copied])
    nbformat.write(nb, tmp_path / "ex.ipynb")
    reason = check_submission(tmp_path, ["ex.ipynb"])
    assert reason is not None and "two cells with the nbgrader id 'setup' (cells 1 and 3)" in reason
    del nb.cells[2]
    nbformat.write(nb, tmp_path / "ex.ipynb")
    assert check_submission(tmp_path, ["ex.ipynb"]) is None
    report = SubmissionReport({"ex": NotebookReport(invalid=reason)})
    assert report.status({"success": False, "error": "KeyError: 'grade_id'"}) == (Status.INVALID, reason)
