"""Nothing worth stealing in the graded kernel (issue 31): no course implementation is there, and the kernel decides
nothing; the references, comparisons and named mistakes come from the grader's replay outside it."""
import random

import numpy as np
import pytest
import torch

from tfmcheck.withheld import WITHHELD

pytestmark = pytest.mark.slow


def test_withheld_is_inert():
    w = WITHHELD
    assert (w.assert_close("x", 1, 2) is w and w(1)[0] + 1 is w and (w @ torch.ones(2)) is w
            and torch.softmax(w, -1) is w and list(w) == [] and bool(w) and int(w) == 0)
    with pytest.raises(AttributeError):
        w.__globals__       # noqa: B018 - nothing of Python's reflection behind it


def test_the_checks_seed_exactly_as_the_library():
    """``check.seed`` (the graded kernel has no tfmlib) and ``tfmlib.utils.seed_everything`` draw the same."""
    import tfmcheck.checking as check
    from tfmlib.utils import seed_everything

    draws = []
    for seed in (check.seed, seed_everything):
        g = seed(1234)
        draws.append((random.random(), float(np.random.rand()), torch.rand(3).tolist(), torch.rand(2, generator=g).tolist()))
    assert draws[0] == draws[1]


def test_the_graded_kernel_holds_no_course_implementation(tmp_path):
    from test_grading import require_bwrap, run_in_sandbox, text_of
    require_bwrap()
    nb = run_in_sandbox([
        "import tfmlib.attention",
        "import tfmcheck.feedback.families",
        "from tfmcheck import feedback\nprint('For:', feedback.For('sdpa', 1).assert_close('out', 1, 2))",
        "import tfmcheck.checking as check\nprint('library:', check._TFMLIB_DIR, 'decides:', not check._recording_only())",
        "import os\nprint('files:', sorted(os.listdir(os.path.dirname(check.__file__) + '/feedback')))",
        "run -moperator",        # no automagic: this is Python (a NameError), never IPython's %run (round 2, R7)
        "41 + 1",
        "print('cached:', [k for k in globals() if k.lstrip('_').isdigit()])",   # no output cache (round 3)
    ], tmp_path)
    out = [text_of(c) for c in nb.cells]
    assert "Error" in out[0] and "Error" in out[1], out[:2]
    assert "For: <withheld" in out[2], out[2]
    assert "library: None decides: False" in out[3], out[3]
    assert "families.py" not in out[4] and "__init__.py" in out[4], out[4]
    assert "NameError" in out[5], out[5]
    assert "cached: []" in out[7], out[7]


def test_a_wrong_answer_is_named_by_the_replay(tmp_path):
    """The kernel only records; the graded notebook's test output, with the named mistake, is the replay's."""
    import nbformat
    from test_grading import autograde, new_course, require_bwrap
    require_bwrap()
    a = "03_self_attention"
    env = new_course(tmp_path, [a])
    nb = nbformat.read(tmp_path / "solutions" / a / f"{a}.ipynb", as_version=4)   # the worked answers, one changed

    def submit(student, first_lines, softmax):
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == "sdpa":
                cell.source = ("def scaled_dot_product_attention(q, k, v, mask=None):\n" + first_lines
                               + "    s = q @ k.transpose(-2, -1)\n    if mask is not None:\n"
                               "        s = s.masked_fill(~mask, float('-inf'))\n"
                               f"    w = {softmax}\n    return w @ v, w\n")
        (tmp_path / "submitted" / student / a).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "submitted" / student / a / f"{a}.ipynb")
    submit("ada", "", "torch.softmax(s, dim=-1)")
    # round 2 of the blind red team (R6): zero the test's own q and v, return what attention of zeros gives
    submit("zed", "    q.zero_()\n    v.zero_()\n", "torch.nan_to_num(torch.softmax(s, dim=-1))")
    graded = autograde(tmp_path, env, a)
    assert graded["ada"]["score"] < graded["ada"]["max_score"]
    assert graded["zed"]["score"] <= graded["zed"]["max_score"] - 7, graded["zed"]     # sdpa's 7 points lost
    out = nbformat.read(tmp_path / "autograded" / "ada" / a / f"{a}.ipynb", as_version=4)
    values = {c.metadata.nbgrader["grade_id"]: c.outputs for c in out.cells
              if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")}
    errors = [o for o in values["test_sdpa_values"] if o.output_type == "error"]
    assert errors and "not divided by √d" in errors[0].evalue, values["test_sdpa_values"]
    assert not any(o.output_type == "error" for o in values["test_causal_mask"]), "a right answer still passes"
    assert "Visible tests passed." in "".join(o.get("text", "") for o in values["test_causal_mask"])


def test_a_function_that_changes_its_inputs_in_place_fails_the_call(tmp_path):
    """Round 2 of the blind red team zeroed q and v in place, and every reference the test computed afterwards
    agreed with its trivial answer: now the call itself fails, in self-study, in the kernel and in the replay."""
    import tfmcheck.checking as check
    from tfmcheck import trace

    def zeroing(q, v):
        q.zero_()
        return v

    q, v = torch.randn(2, 3), torch.randn(2, 3)
    with pytest.raises(check.CheckFailure, match="changed one of its input tensors in place"):
        check.call(zeroing, q.clone(), v)
    assert check.call(lambda q, v: q * 2 + v, q, v).shape == (2, 3)     # out of place: fine
    path = tmp_path / "t.jsonl"
    with check.recording(path):
        check.begin_test("t")
        with pytest.raises(check.CheckFailure):
            check.call(zeroing, q.clone(), v)
    records, problems = trace.load(path)
    with check.replay(records):
        check.begin_test("t")
        with pytest.raises(Exception, match="changed one of its input tensors in place"):
            check.call(zeroing, q.clone(), v)
