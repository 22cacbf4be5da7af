"""tfmcheck.checking: the trusted comparisons and the shortcut guard used by the graded exercises' tests."""
import functools
import sys

import pytest
import torch
import torch.nn.functional as F

import tfmlib
import tfmcheck.checking as check
from tfmcheck import feedback
from tfmlib.attention import scaled_dot_product_attention as early_bound_sdpa


def test_assert_close_accepts_a_match_and_reports_a_mismatch():
    x = torch.arange(6.0).view(2, 3)
    check.assert_close("out", x.clone(), x)
    with pytest.raises(check.CheckFailure) as err:
        check.assert_close("out", x + torch.tensor([0.0, 0.0, 0.5]), x, hint="look at the last column")
    text = str(err.value)
    assert "index (0, 2)" in text and "expected 2.0, got 2.5" in text and "Hint: look at the last column" in text


def test_assert_close_checks_type_shape_dtype_and_nan():
    x = torch.randn(2, 3)
    with pytest.raises(check.CheckFailure, match=r"expected shape \(2, 3\), got shape \(3,\)"):
        check.assert_close("out", x[0], x)
    with pytest.raises(check.CheckFailure, match="expected dtype torch.float32, got dtype torch.float64"):
        check.assert_close("out", x.double(), x)
    with pytest.raises(check.CheckFailure, match="expected a torch.Tensor, got numpy.ndarray"):
        check.assert_close("out", x.numpy(), x)
    with pytest.raises(check.CheckFailure, match="NaN"):
        check.assert_close("out", torch.full((2, 3), float("nan")), x)

    class Always(torch.Tensor):  # a subclass could override comparisons through __torch_function__
        pass

    with pytest.raises(check.CheckFailure, match="expected a torch.Tensor, got .*Always"):
        check.assert_close("out", x.as_subclass(Always), x)


def test_assert_equal_is_exact_for_masks():
    m = torch.ones(3, 3, dtype=torch.bool).tril()
    check.assert_equal("mask", m.clone(), m)
    with pytest.raises(check.CheckFailure, match="values differ"):
        check.assert_equal("mask", m.T, m)
    with pytest.raises(check.CheckFailure, match="dtype"):
        check.assert_equal("mask", m.long(), m)


def test_comparisons_use_trusted_copies(monkeypatch):
    x = torch.randn(4)
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(torch, "equal", lambda *a, **k: True)
    monkeypatch.setattr(torch.Tensor, "detach", lambda self: torch.zeros(4))
    with pytest.raises(check.CheckFailure):
        check.assert_close("out", x + 1, x)
    with pytest.raises(check.CheckFailure):
        check.assert_equal("mask", torch.tensor([True, False]), torch.tensor([False, True]))


def test_an_active_torch_function_mode_fails_the_check():
    class Lie(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return True if func is torch.allclose else func(*args, **(kwargs or {}))

    x = torch.randn(3)
    with Lie(), pytest.raises(check.CheckFailure, match="mode is active"):
        check.assert_close("out", x + 1, x)


def test_assert_number_and_unpack():
    check.assert_number("loss", 2.0000001, 2.0, rel=1e-6)
    check.assert_number("loss", torch.tensor(3.0, dtype=torch.float64), 3.0)
    with pytest.raises(check.CheckFailure, match="expected 2, got 2.1"):
        check.assert_number("loss", 2.1, 2.0)
    with pytest.raises(check.CheckFailure, match="expected a number"):
        check.assert_number("loss", "2.0", 2.0)
    assert check.unpack("f", (1, 2), 2) == (1, 2)
    with pytest.raises(check.CheckFailure, match="expected a tuple of 2 items, got Tensor"):
        check.unpack("f", torch.zeros(2), 2)


def _qkv():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, 4, generator=g) for _ in range(3)]


@pytest.mark.parametrize("shortcut, groups", [
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), ("sdpa",)),
    (lambda q, k, v: torch.ops.aten.scaled_dot_product_attention(q, k, v), ("sdpa",)),
    (lambda q, k, v: torch.nn.MultiheadAttention(4, 2, batch_first=True)(q, k, v), ("sdpa",)),
    (lambda q, k, v: tfmlib.scaled_dot_product_attention(q, k, v), ("tfmlib",)),
    (lambda q, k, v: early_bound_sdpa(q, k, v), ("tfmlib",)),  # bound to another name before the test
    (lambda q, k, v: tfmlib.causal_mask(3), ("tfmlib",)),
    # the feedback catalogue's trusted builders compute correct attention too
    (lambda q, k, v: feedback.attention(q, k, v, full_rows="zero"), ("tfmlib",)),
    (lambda q, k, v: F.layer_norm(q, (4,)), ("layer_norm",)),
    (lambda q, k, v: torch.nn.LayerNorm(4)(q), ("layer_norm",)),
    (lambda q, k, v: torch.layer_norm(q, (4,)), ("layer_norm",)),
    (lambda q, k, v: torch.nn.RNN(4, 5, batch_first=True)(q), ("rnn",)),
    # built-ins called from C, where a profile hook sees no call: PyTorch's dispatch still does
    (lambda q, k, v: functools.partial(F.scaled_dot_product_attention)(q, k, v), ("sdpa",)),
    (lambda q, k, v: next(map(F.scaled_dot_product_attention, [q], [k], [v])), ("sdpa",)),
    (lambda q, k, v: functools.partial(F.layer_norm, normalized_shape=(4,))(q), ("layer_norm",)),
])
def test_forbidden_shortcuts_raise_write_your_own(shortcut, groups):
    q, k, v = _qkv()
    with pytest.raises(check.ShortcutError, match="write your own"):
        check.call(shortcut, q, k, v, forbid=groups)


def test_allowed_operations_run_and_the_previous_profiler_is_restored():
    q, k, v = _qkv()
    calls = []
    previous = lambda frame, event, arg: calls.append(event)  # noqa: E731
    sys.setprofile(previous)
    try:
        out = check.call(lambda: torch.softmax(q @ k.transpose(-2, -1) / 2, dim=-1) @ v,
                         forbid=("tfmlib", "sdpa", "layer_norm", "rnn", "transformer"))
        assert sys.getprofile() is previous
    finally:
        sys.setprofile(None)
    assert out.shape == (2, 3, 4)
    # outside the guard the shortcuts work again
    F.scaled_dot_product_attention(q, k, v)
    tfmlib.causal_mask(3)


def test_a_caught_shortcut_error_is_still_reported():
    q, k, v = _qkv()

    def sneaky():
        try:
            return F.scaled_dot_product_attention(q, k, v)
        except Exception:  # noqa: BLE001 - any refusal will do
            return q

    with pytest.raises(check.ShortcutError, match="and caught the error"):
        check.call(sneaky, forbid=("sdpa",))


def test_removing_the_profiler_is_reported():
    with pytest.raises(check.ShortcutError, match="sys.setprofile"):
        check.call(lambda: sys.setprofile(None), forbid=("sdpa",))


def test_the_dispatch_guard_holds_without_the_profiler():
    q, k, v = _qkv()

    def profiler_off_then_shortcut():
        sys.setprofile(None)
        return functools.partial(F.scaled_dot_product_attention)(q, k, v)

    with pytest.raises(check.ShortcutError, match="write your own"):
        check.call(profiler_off_then_shortcut, forbid=("sdpa",))
    assert torch._C._len_torch_function_stack() == 0


class _PassThrough(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _leave_a_mode_entered(q):
    _PassThrough().__enter__()
    return q + 1


def _swap_the_guard_for_another_mode(q):
    torch._C._pop_torch_function_stack()
    _PassThrough().__enter__()
    return F.scaled_dot_product_attention(q, q, q)


@pytest.mark.parametrize("fn", [_leave_a_mode_entered, _swap_the_guard_for_another_mode])
def test_changing_the_mode_stack_is_reported_and_undone(fn):
    q, _, _ = _qkv()
    with pytest.raises(check.ShortcutError, match="TorchFunctionMode"):
        check.call(fn, q, forbid=("sdpa",))
    assert torch._C._len_torch_function_stack() == 0


def test_the_shortcut_policy_is_frozen():
    names, functions = check.SHORTCUTS["sdpa"]
    assert isinstance(names, frozenset) and isinstance(functions, tuple)
    with pytest.raises((TypeError, AttributeError)):
        check.SHORTCUTS.update(sdpa=(frozenset(), ()))


def test_unknown_group_is_an_error():
    with pytest.raises(ValueError, match="unknown shortcut groups"):
        check.forbid_shortcuts("flash")


def test_peak_numel_sees_the_largest_tensor():
    q = torch.randn(2, 8, 2)     # the inputs count too (a tensor an operation is given): smaller than a block here
    k = torch.randn(2, 32, 2)

    def full(q, k):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1).sum(-1)

    def blocks(q, k):
        return sum(torch.exp(q @ k[:, i:i + 8].transpose(-2, -1)).sum(-1) for i in range(0, 32, 8))

    _, peak_full, where = check.peak_numel(full, q, k)
    _, peak_blocks, _ = check.peak_numel(blocks, q, k)
    assert peak_full == 2 * 8 * 32 and where[1] == (2, 8, 32)
    assert peak_blocks == 2 * 8 * 8


def test_a_shortcut_run_in_a_thread_the_function_starts_is_caught():
    """Rounds 10 and 12 of the blind red team ran PyTorch's attention in a thread of their own, where the guarded
    call's profiler and torch function mode are not: threads started after tfmcheck is imported report to the
    active guard too."""
    import threading
    q, k, v = _qkv()

    def threaded():
        box = []
        worker = threading.Thread(target=lambda: box.append(F.scaled_dot_product_attention(q, k, v)))
        worker.start()
        worker.join()
        return box[0] if box else q

    with pytest.raises(check.ShortcutError, match="write your own|caught the error"):
        check.call(threaded, forbid=("sdpa",))
    box = []
    worker = threading.Thread(target=lambda: box.append(F.scaled_dot_product_attention(q, k, v)))
    worker.start()
    worker.join()
    assert box and box[0].shape == q.shape, "outside a guarded call, a thread runs anything"


def test_sparse_internals_are_refused_in_every_thread_once_the_checks_are_imported():
    """Round 14 of the blind red team wrote a validated sparse tensor's indices through its live ``indices()`` view,
    then let ``add_`` and a CSR ``mm`` write and read wherever they pointed.  tfmcheck.lockdown refuses those
    operators at PyTorch's dispatcher, for every caller (methods, torch.ops) and every thread."""
    import threading

    from tfmcheck import lockdown
    t = torch.eye(3)
    for use in (lambda: t.to_sparse().indices(), lambda: t.to_sparse()._values(),
                lambda: t.to_sparse_csr().col_indices(), lambda: torch.ops.aten.indices.default(t.to_sparse()),
                lambda: t[:1].add_(t.to_sparse())):
        with pytest.raises(lockdown.SparseRefused):
            use()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(pytest.raises(lockdown.SparseRefused, use)))
    worker.start()
    worker.join()
    assert seen, "refused in another thread too"
    assert torch.equal(t.max(-1).indices, torch.tensor([0, 1, 2])), "dense results' .indices are untouched"


GRADED_KERNEL_REFUSAL = r'''
import _thread, sys, time, threading
import torch, torch.nn.functional as F
from torch import nn
import tfmcheck.checking as check      # as the graded kernel's setup cell does, with the trace file set

q = torch.randn(2, 4, 3, 8)
early_sdpa, early_mha = F.scaled_dot_product_attention, F.multi_head_attention_forward   # bound before any test
before = early_sdpa(q, q, q)           # before a test forbids anything, PyTorch's attention still runs
assert check.ref.scaled_dot_product_attention(q, q, q) is check.ref.scaled_dot_product_attention, "withheld"
box = []
def later():                            # a thread the learner's code starts with _thread, which no hook sees
    time.sleep(0.5)
    for name, use in [("sdpa", lambda: early_sdpa(q, q, q)),
                      ("math", lambda: torch.ops.aten._scaled_dot_product_attention_math(q, q, q)),
                      ("vmap", lambda: torch.vmap(early_sdpa)(q, q, q)),
                      ("mha", lambda: nn.MultiheadAttention(8, 2, batch_first=True)(q[0], q[0], q[0])),
                      ("grad", lambda: torch.func.grad(lambda a: early_sdpa(a, a, a).sum())(q)),
                      ("flex", lambda: sys.modules["torch._higher_order_ops.flex_attention"].math_attention(q, q, q))]:
        try:
            use()
            box.append(name + " ran")
        except RuntimeError as err:
            box.append(name + " refused" if "not available while this notebook is graded" in str(err) else repr(err))
_thread.start_new_thread(later, ())
mine = lambda x: torch.softmax(x @ x.transpose(-2, -1) / 8 ** 0.5, -1) @ x
out = check.call(mine, q, forbid=("tfmlib", "sdpa"))
time.sleep(1.5)
print(box)
assert box == ["sdpa refused", "math refused", "vmap refused", "mha refused", "grad refused", "flex refused"], box
assert torch.allclose(out, before, atol=1e-6), "the learner's own attention still runs"
x = torch.randn(3, 5)
assert F.layer_norm(x, (5,)).shape == x.shape, "a group no test forbade still runs"
print("ok")
'''


def test_a_graded_kernel_refuses_what_a_test_forbade_for_good_on_every_thread(tmp_path):
    """Issue 31: once a test in the graded kernel forbids a group, PyTorch's implementations of it are refused at the
    dispatcher for the rest of the kernel's life (tfmcheck.lockdown.refuse), whoever calls them, from any thread
    (one started with ``_thread``) and under vmap or grad; the Python implementations (nn.MultiheadAttention's
    path, flex attention's reference, round 21) too.  The tests' references are withheld there; groups no test forbade keep working."""
    import os
    import subprocess

    from tfmcheck import TRACE_ENV
    env = {**os.environ, TRACE_ENV: str(tmp_path / "trace.jsonl"), "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", GRADED_KERNEL_REFUSAL], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr[-3000:]


KERNEL_START = r'''
import sys, types, torch, torch.nn.functional as F
from torch import nn
q = torch.randn(2, 4, 3, 8)
ran = []
for name, use in [("sdpa", lambda: F.scaled_dot_product_attention(q, q, q)),
                  ("math", lambda: torch.ops.aten._scaled_dot_product_attention_math(q, q, q)),
                  ("mha", lambda: nn.MultiheadAttention(8, 2, batch_first=True)(q[0], q[0], q[0])),
                  ("mha copy", lambda: types.FunctionType(F.multi_head_attention_forward.__code__, F.__dict__, "copy",
                                                          F.multi_head_attention_forward.__defaults__)),
                  ("layer_norm", lambda: F.layer_norm(q, (8,))),
                  ("rms_norm", lambda: F.rms_norm(q, (8,))),
                  ("rnn", lambda: nn.RNN(8, 8)(q[0]))]:
    try:
        out = use()
        if name == "mha copy":          # a copy of the Python code made before any test: it is the refusing code
            m = nn.MultiheadAttention(8, 2)
            out(q[0], q[0], q[0], 8, 2, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
                m.out_proj.weight, m.out_proj.bias)
        ran.append(name)
    except RuntimeError as err:
        if "not available while this notebook is graded" not in str(err):
            raise
print("RAN", ran)
'''


ALL_RUN = ["sdpa", "math", "mha", "mha copy", "layer_norm", "rms_norm", "rnn"]


@pytest.mark.parametrize("graded, groups, ran", [
    (True, "tfmlib,sdpa,layer_norm,rnn", []),
    (True, "tfmlib,sdpa,transformer", ["layer_norm", "rms_norm", "rnn"]),      # exercise 3's: the others run
    (False, "tfmlib,sdpa,layer_norm,rnn", ALL_RUN),                             # not graded: nothing refused
    (True, "", ALL_RUN)])                                                       # no groups given
def test_a_graded_kernel_refuses_its_tests_shortcuts_before_any_cell_runs(tmp_path, graded, groups, ran):
    """Issue 31: the graded kernel's launcher (``sandbox_kernel.AUDIT_LAUNCHER``) refuses PyTorch's implementations of
    the groups the notebook's tests forbid (``REFUSE_ENV``, from its setup cell's ``SHORTCUTS``: attention, norms,
    RNNs) before ipykernel starts: code an answer cell runs before the first test (a call, a copy of
    nn.MultiheadAttention's Python code) meets the refusal too.  Other groups, and a kernel not graded, keep them."""
    import os
    import subprocess

    from tfmcheck import REFUSE_ENV, TRACE_ENV
    from tfmgrader import sandbox_kernel as sk
    start = sk.AUDIT_LAUNCHER.split("import runpy")[0]      # the launcher up to where it hands over to ipykernel
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), sk.FD_ENV: "1", REFUSE_ENV: groups}
    env.pop(TRACE_ENV, None)
    if graded:
        env[TRACE_ENV] = str(tmp_path / "trace.jsonl")
    proc = subprocess.run([sys.executable, "-c", start + KERNEL_START], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.split("RAN", 1)[1].strip() == str(ran)


def test_the_grader_gives_the_kernel_the_groups_of_the_setup_cell(monkeypatch):
    """The groups the launcher refuses are those of the instructor's setup cell as the gradebook holds it
    (``preprocessors.forbidden_groups``)."""
    import json
    from pathlib import Path

    from tfmgrader import preprocessors
    expected = {"01_rnn_limits": ["tfmlib", "rnn"], "03_self_attention": ["tfmlib", "sdpa", "transformer"],
                "06_encoder_decoder": ["tfmlib", "layer_norm", "transformer"], "08_scaling_laws": ["tfmlib"]}
    for name, groups in expected.items():
        path = Path(__file__).resolve().parents[2] / "notebooks" / name / f"{name}.ipynb"
        trusted = {c["metadata"]["nbgrader"]["grade_id"]: ("".join(c["source"]), bool(c["metadata"]["nbgrader"].get("grade")))
                   for c in json.loads(path.read_text())["cells"]
                   if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("locked")}
        monkeypatch.setattr(preprocessors, "trusted_sources", lambda resources: (trusted, set()))
        assert preprocessors.forbidden_groups({}) == groups, name
    monkeypatch.setattr(preprocessors, "trusted_sources", lambda resources: ({"t": ("SHORTCUTS = ('sdpa',)", True)}, set()))
    assert preprocessors.forbidden_groups({}) == [], "a test cell's SHORTCUTS is not the setup's"


def test_fused_optimizers_that_trust_their_state_are_refused_once_the_checks_are_imported():
    """Round 20 of the blind red team replaced an optimizer's state (``momentum_buffer``, ``exp_avg``) by a 2-element
    tensor: PyTorch's fused CPU kernels then read and wrote as many elements as the parameter has, past its end.
    tfmcheck.lockdown refuses them at the dispatcher; the plain optimizers, which check sizes, still run."""
    from tfmcheck import lockdown
    p = torch.nn.Parameter(torch.zeros(64, dtype=torch.float64))
    p.grad = torch.ones(64, dtype=torch.float64)
    for make in (lambda: torch.optim.SGD([p], lr=1.0, momentum=0.9, fused=True),
                 lambda: torch.optim.Adam([p], lr=0.1, fused=True), lambda: torch.optim.AdamW([p], fused=True)):
        with pytest.raises(lockdown.Refused, match="fused=True"):
            make().step()
    plain = torch.optim.SGD([p], lr=1.0, momentum=0.9)
    plain.step()
    plain.state[p]["momentum_buffer"] = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(RuntimeError):      # the plain loop checks the state's size
        plain.step()
    assert torch.allclose(p.detach(), torch.full((64,), -1.0, dtype=torch.float64))
