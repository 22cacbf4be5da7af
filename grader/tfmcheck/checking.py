"""Trusted checks for the graded exercises (the nbgrader test cells in ``solutions/`` and ``notebooks/``).

The first, read-only cell of every exercise notebook runs ``import tfmcheck.checking as check`` before any
learner code, and this module captures at import time the functions it compares with and the reference
implementations the hidden tests use.  So a learner cell that later redefines ``torch.allclose``,
``torch.nn.functional.scaled_dot_product_attention`` or a ``Tensor`` method changes neither the comparisons
nor the references.

- ``assert_close(name, got, expected)`` / ``assert_equal``: exact type (``type(got) is torch.Tensor``), shape,
  dtype, then values; a failure says what was expected and what came back, with a small example and a hint.
- ``call(fn, *args, forbid=(...))`` runs the learner's function inside ``forbid_shortcuts(...)``: calling one
  of the listed shortcuts (tfmlib's own implementations, ``torch.nn.functional.scaled_dot_product_attention``,
  ``torch.nn.MultiheadAttention``, layer norm, PyTorch's RNNs, ...) raises ``ShortcutError`` ("write your own").
- ``ref`` holds trusted references (PyTorch's own implementations) for the hidden tests.
- ``peak_memory(fn, ...)`` measures the memory a function uses whatever it computes with: the largest tensor a
  torch operation creates or uses, (``tracemalloc``) the bytes NumPy arrays and Python objects allocated during the
  call hold at once, and the memory the whole process holds at the call's peak beyond what it held when the
  notebook's setup cell ran (``memory_baseline``), so that a buffer made *before* the call counts too;
  ``assert_memory_below`` compares these with limits (blockwise attention must never build the full ``(Tq, Tk)``
  score matrix).

- ``generator(n)`` / ``input_seed(n)``: where the hidden tests draw their inputs from: the seed ``n`` in self-study,
  Validate and ``make check``; when graded, a seed derived from ``n`` and a secret the grader draws for each grading
  run, so that the published hidden tests cannot be answered from a table of their inputs.
- When a notebook is graded, ``call`` and ``peak_memory`` record each result in the learner's kernel, where the
  checks then decide nothing (``_recording_only``; the feedback catalogue and tfmlib are not even there:
  ``tfmcheck.withheld``), and the grader replays the test cells on those records in its own process
  (``tfmcheck.trace``, ``begin_test``, ``replay``): every verdict is reached where no learner code runs.

This module must stay importable without matplotlib; it imports torch and the standard library only.
The instructor guide (book/appendix/instructors.md) describes what it defends against and what it does not.
"""
from __future__ import annotations

import builtins
import contextlib
import hashlib
import importlib
import math
import os
import sys
import threading
import tracemalloc
import types
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from tfmcheck import SECRET_ENV as _SECRET_ENV
from tfmcheck import shortcuts as _shortcuts
from tfmcheck import trace as _trace
from tfmcheck.standins import standing_in as _standing_in
from tfmcheck.trace import RandomStateKept as _RandomStateKept, _flatten
from tfmcheck.withheld import Withheld as _Withheld

# ---------------------------------------------------------------------------------------------------------
# Trusted copies, bound when the setup cell imports this module (before any learner code runs).
# ---------------------------------------------------------------------------------------------------------
_Tensor = torch.Tensor
_type = builtins.type
_isinstance = builtins.isinstance
_issubclass = builtins.issubclass
_len = builtins.len
_float = builtins.float
_tuple = builtins.tuple
_max, _range = builtins.max, builtins.range
_allclose = torch.allclose
_equal = torch.equal
_isnan = torch.isnan
_tabs = torch.abs
_detach = torch.Tensor.detach
_reshape = torch.Tensor.reshape
_tolist = torch.Tensor.tolist
_to = torch.Tensor.to
_numel = torch.Tensor.numel
_any = torch.Tensor.any
_shape_of = torch._C.TensorBase.__dict__["shape"].__get__
_dtype_of = torch._C.TensorBase.__dict__["dtype"].__get__
_grad_fn_of = torch._C.TensorBase.__dict__["grad_fn"].__get__
_dict_items = dict.items
_Parameter = torch.nn.Parameter
_getprofile, _setprofile = sys.getprofile, sys.setprofile
_fn_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_TorchFunctionMode = torch.overrides.TorchFunctionMode
_torch_pop_mode = torch._C._pop_torch_function_stack
_torch_mode_at = torch._C._get_function_stack_at
_tm_start, _tm_stop, _tm_is_tracing = tracemalloc.start, tracemalloc.stop, tracemalloc.is_tracing
_tm_traced, _tm_reset_peak = tracemalloc.get_traced_memory, tracemalloc.reset_peak
_is_wrapped, _unwrapped = torch._C._functorch.is_functorch_wrapped_tensor, torch._C._functorch.get_unwrapped
_os_open, _os_readv, _os_close, _O_RDONLY = os.open, os.readv, os.close, os.O_RDONLY
_STATUS = bytearray(16384)      # /proc/self/status, read by _resident
_Thread, _Event = threading.Thread, threading.Event
_lockdown = importlib.import_module("tfmcheck.lockdown")     # sparse tensors' internals refused (round 14)

# Threads the learner's code starts (a worker running PyTorch's attention, rounds 10 and 12 of the blind red team)
# have no profiler of the guarded call and no torch function mode: every thread started after this module is
# imported runs ``_other_threads_profile``, which hands each event to the guard active at that moment, if any.
_ACTIVE_GUARDS: list = []
_GRADED_KERNEL = bool(os.environ.get(_trace.TRACE_ENV))     # the graded kernel; read once, before any learner code
# Set just before the guard's profile hook raises ShortcutError: CPython then removes the hook itself, an event the
# grading kernel's audit hook would otherwise report as the answer switching the check off (red-team round 18).
_REFUSING: list = []


def _other_threads_profile(frame, event, arg):
    if _ACTIVE_GUARDS:
        _ACTIVE_GUARDS[-1]._hook(frame, event, arg)


threading.setprofile(_other_threads_profile)


def _profiled(start_new_thread):
    """``_thread.start_new_thread`` whose threads run ``_other_threads_profile`` too (``threading.setprofile``
    reaches only ``threading.Thread``; round 21 started its worker with ``_thread``)."""
    def start(function, args, kwargs=None):
        def run(*a, **k):
            _setprofile(_other_threads_profile)
            return function(*a, **k)
        return start_new_thread(run, args, {} if kwargs is None else kwargs)
    return start


if _GRADED_KERNEL:       # before any learner code runs
    import _thread
    _thread.start_new_thread = _thread.start_new = threading._start_new_thread = \
        _profiled(_thread.start_new_thread)

# The "tfmlib" shortcut group: every function of the course's code a learner could call instead of writing their
# own: the teaching library, and this package's trusted builders (the feedback catalogue computes correct
# attention too), except this module, which runs the learner's function, and tfmcheck.lockdown, whose refusals and
# checked constructors (torch.asarray in a graded kernel) an answer calls in PyTorch's place.  In the graded kernel
# the sandbox hides tfmlib altogether (tfmcheck.withheld), so only this package's folder is left to watch there.
_THIS_FILE = os.path.abspath(__file__)
_GUARD_FILES = (_THIS_FILE, os.path.abspath(_lockdown.__file__))


def _library_dir():
    try:
        import tfmlib
        return os.path.dirname(os.path.abspath(tfmlib.__file__)) + os.sep
    except Exception:  # noqa: BLE001 - hidden (the graded kernel) or broken: nothing of it can run
        return None


_TFMLIB_DIR, _CHECK_DIR = _library_dir(), os.path.dirname(_THIS_FILE) + os.sep
_COURSE_DIRS = tuple(d for d in (_TFMLIB_DIR, _CHECK_DIR) if d)

_sdpa = F.scaled_dot_product_attention


def _rope(x, base=10000.0, offset=0):
    """tfmlib's rope (the chapter's pairing convention), imported when first called: the graded kernel has none."""
    from tfmlib.positions import rope
    return rope(x, base, offset)


def _fit_chinchilla(*args, **kwargs):
    """tfmlib's fit of Hoffmann et al.'s approach 3, imported when first called."""
    from tfmlib.scaling import fit_chinchilla
    return fit_chinchilla(*args, **kwargs)


def _grouped_query_attention(x, W_q, W_k, W_v, W_o, n_heads, n_kv_heads):
    """Exercise 9's grouped_query_attention on a whole sequence (no cache), from trusted parts: heads rotated by
    tfmlib's rope (the chapter's pairing convention) and PyTorch's causal attention, whose ``enable_gqa`` shares
    kv head h // (n_heads / n_kv_heads) with query head h.  Returns ``(out (B, T, d), (k, v))``, k and v
    ``(B, n_kv_heads, T, d_h)``: the rotated keys and the values a correct cache holds."""
    b, t = _shape_of(x)[0], _shape_of(x)[1]
    d_h = _shape_of(W_q)[1] // n_heads

    def heads(y, n):
        return _reshape(y, (b, t, n, d_h)).transpose(1, 2)
    q, k, v = _rope(heads(x @ W_q, n_heads)), _rope(heads(x @ W_k, n_kv_heads)), heads(x @ W_v, n_kv_heads)
    out = _sdpa(q, k, v, is_causal=True, enable_gqa=n_kv_heads != n_heads)
    return _reshape(out.transpose(1, 2), (b, t, n_heads * d_h)) @ W_o, (k, v)


#: Trusted reference implementations for the hidden tests: PyTorch's own, and the course library's where PyTorch
#: has none.  In the graded kernel, which only records (``_recording_only``), the course library's are inert
#: (``tfmcheck.withheld``; the comparisons with any of them decide nothing there).
ref = types.SimpleNamespace(
    scaled_dot_product_attention=F.scaled_dot_product_attention,
    layer_norm=F.layer_norm,
    rms_norm=F.rms_norm,
    silu=F.silu,
    rope=_rope,
    grouped_query_attention=_grouped_query_attention,
    fit_chinchilla=_fit_chinchilla,
    softmax=torch.softmax,
    RNN=nn.RNN,
    MultiheadAttention=nn.MultiheadAttention,
    autograd_grad=torch.autograd.grad,
    tril=torch.tril,
    matmul=torch.matmul,
    randn=torch.randn,
    rand=torch.rand,
    randint=torch.randint,
    module=lambda module, *args, **kwargs: module(*args, **kwargs),   # a trusted module's output (e.g. PyTorch's
)                                                                      # TransformerEncoderLayer)


class CheckFailure(AssertionError):
    """A graded check failed; the message says what was expected, what came back, and a hint."""


class ShortcutError(RuntimeError):
    """The learner's function called an implementation it is meant to write itself."""


# ---------------------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------------------
def _fail(name, message, hint=None):
    __tracebackhide__ = True  # IPython shows the test cell's line, not this frame
    text = f"{name}: {message}"
    if hint:
        text += f"\nHint: {hint}"
    raise CheckFailure(text)


def _no_modes(name):
    __tracebackhide__ = True
    if _fn_modes() or _dispatch_modes():
        _fail(name, "a torch function/dispatch mode is active while checking; the checks need plain PyTorch. "
                    "Remove any TorchFunctionMode / TorchDispatchMode your code enters.")


def _preview(t, n=6, around=None):
    """n values of a tensor (flattened), as a short string: the first n, or with ``around`` (a flat index) a window
    that starts two values before it, marked "…," / ", …" where values before / after it are left out."""
    flat = _tolist(_reshape(_detach(t), (-1,)))
    fmt = lambda v: f"{v:.4g}" if _isinstance(v, _float) else str(v)  # noqa: E731
    if around is None:
        return "[" + ", ".join(fmt(v) for v in flat[:n]) + (", …]" if _len(flat) > n else "]")
    start = _max(0, around - 2)
    start = start if start + n <= _len(flat) else _max(0, _len(flat) - n)
    end = start + n if start + n < _len(flat) else _len(flat)
    return ("[" + ("…, " if start > 0 else "") + ", ".join(fmt(v) for v in flat[start:end])
            + (", …]" if end < _len(flat) else "]"))


def _recording_only():
    """True in the graded kernel: the checks record and decide nothing there; the grader's replay decides."""
    return _MODE is not None and not _MODE.replaying


def assert_tensor(name, got, shape=None, dtype=None, hint=None):
    """``got`` is exactly a ``torch.Tensor`` (not a subclass), with the given shape and dtype if given."""
    __tracebackhide__ = True
    if _recording_only():
        return
    _no_modes(name)
    if _type(got) is not _Tensor:
        _fail(name, f"expected a torch.Tensor, got {_type(got).__module__}.{_type(got).__qualname__}", hint)
    if shape is not None and _tuple(_shape_of(got)) != _tuple(shape):
        _fail(name, f"expected shape {_tuple(shape)}, got shape {_tuple(_shape_of(got))}", hint)
    if dtype is not None and _dtype_of(got) != dtype:
        _fail(name, f"expected dtype {dtype}, got dtype {_dtype_of(got)}", hint)


def assert_close(name, got, expected, atol=None, rtol=None, hint=None):
    """``got`` matches the trusted ``expected`` tensor: same exact type, shape, dtype, and values.

    Tolerances default to 1e-5 (float32) / 1e-10 (float64).  NaN never matches.
    """
    __tracebackhide__ = True
    if _recording_only():
        return
    if _type(expected) is not _Tensor:
        raise TypeError(f"the expected value of {name} must be a torch.Tensor (test bug)")
    assert_tensor(name, got, _shape_of(expected), _dtype_of(expected), hint)
    g, e = _detach(got), _detach(expected)
    if _dtype_of(e).is_floating_point:
        double = _dtype_of(e) == torch.float64
        atol = atol if atol is not None else (1e-10 if double else 1e-5)
        rtol = rtol if rtol is not None else (1e-8 if double else 1e-4)
        if bool(_any(_isnan(g))):
            _fail(name, f"the result contains NaN: got {_preview(g)}; expected {_preview(e)}", hint)
        ok = _allclose(g, e, rtol=rtol, atol=atol, equal_nan=False)
    else:
        ok = _equal(g, e)
    if not ok:
        diffs = _tolist(_reshape(_tabs(_to(g, torch.float64) - _to(e, torch.float64)), (-1,)))
        worst = _max(_range(_len(diffs)), key=lambda i: diffs[i] if diffs[i] == diffs[i] else math.inf)
        index, rest = [], worst
        for size in reversed(_tuple(_shape_of(e))):
            index.append(rest % size)
            rest //= size
        g_w, e_w = _tolist(_reshape(g, (-1,)))[worst], _tolist(_reshape(e, (-1,)))[worst]
        _fail(name, f"values differ (largest difference at index {_tuple(reversed(index))}: "
                    f"expected {e_w!r}, got {g_w!r}).\n  expected {_preview(e, around=worst)}\n"
                    f"  got      {_preview(g, around=worst)}", hint)


def assert_equal(name, got, expected, hint=None):
    """Exact equality (masks, indices): same exact type, shape, dtype and every element."""
    __tracebackhide__ = True
    assert_close(name, got, expected, hint=hint)


def assert_number(name, got, expected, rel=1e-6, abs_=0.0, hint=None):
    """``got`` is a real number (int, float, or a 0-d tensor) within ``rel``/``abs_`` of ``expected``."""
    __tracebackhide__ = True
    if _recording_only():
        return
    _no_modes(name)
    if _type(got) is _Tensor and _len(_shape_of(got)) == 0:
        value = _tolist(_detach(got))
    elif _type(got) in (int, _float) or _type(got) in _trace._NUMPY_SCALARS:     # exact types: no __float__ of theirs
        value = _float(got)
    else:
        _fail(name, f"expected a number (float or 0-d tensor), got {_type(got).__qualname__}", hint)
    value, expected = _float(value), _float(expected)
    if not math.isclose(value, expected, rel_tol=rel, abs_tol=abs_):
        _fail(name, f"expected {expected:.6g}, got {value:.6g}", hint)


def assert_true(name, condition, message, hint=None):
    """Fail with ``message`` unless ``condition`` is exactly ``True`` (a bool or a one-element bool tensor)."""
    __tracebackhide__ = True
    if _recording_only():
        return
    if _type(condition) is _Tensor:
        condition = _tolist(condition)
    if condition is not True:
        _fail(name, message, hint)


def seed(value=0):
    """Seed Python's, NumPy's and PyTorch's generators as ``tfmlib.utils.seed_everything`` does (tested equal;
    the graded kernel has no tfmlib); returns a seeded torch.Generator."""
    import random

    import numpy
    random.seed(value)
    numpy.random.seed(value % 2**32)
    torch.manual_seed(value)
    return torch.Generator().manual_seed(value)


# ---------------------------------------------------------------------------------------------------------
# Forbidden shortcuts
# ---------------------------------------------------------------------------------------------------------
def _code(f):
    f = getattr(f, "__func__", f)
    return getattr(f, "__code__", None)


#: The library shortcuts (group -> aten names, dotted Python names): ``tfmcheck.shortcuts``, which the graded kernel's
#: launcher refuses before any cell runs and the grader's scan reads too.
SHORTCUT_POLICY = _shortcuts.SHORTCUT_POLICY


def resolve_dotted(path):
    """The object ``path`` names ('torch.nn.MultiheadAttention'), from the longest importable module on."""
    parts = path.split(".")
    for i in range(_len(parts), 0, -1):
        try:
            obj = __import__(".".join(parts[:i]), fromlist=["_"])
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(path)


def functions_of(obj):
    """The Python functions to forbid for one shortcut: a function itself; a class's own functions."""
    if not _isinstance(obj, _type):
        return [obj] if _code(obj) is not None else []
    found = []
    for value in vars(obj).values():
        value = getattr(value, "__func__", value)          # staticmethod / classmethod
        if _isinstance(value, types.FunctionType):
            found.append(value)
    return found


#: group name -> (built-in names that must not be called, Python functions whose code must not run),
#: resolved from ``SHORTCUT_POLICY`` when this module is imported (before any learner code runs).
SHORTCUTS = types.MappingProxyType(
    {group: (frozenset(names), _tuple(f for path in paths for f in functions_of(resolve_dotted(path))))
     for group, (names, paths) in SHORTCUT_POLICY.items()})


def shortcut_names():
    """Every name the scan refuses as a library shortcut: the built-ins and the last part of each dotted
    name (``MultiheadAttention``, ``layer_norm`` ...)."""
    return {n for names, paths in SHORTCUT_POLICY.values() for n in (*names, *(p.rsplit(".", 1)[1] for p in paths))}


_LABELS = {}
for _group, (_names, _funcs) in SHORTCUTS.items():
    for _f in _funcs:
        _LABELS[_code(_f)] = f"{_f.__module__}.{_f.__qualname__}"
_OP_CALL_CODES = set()
for _cls_name in ("OpOverload", "OpOverloadPacket"):
    _cls = getattr(torch._ops, _cls_name, None)
    if _cls is not None and _code(getattr(_cls, "__call__", None)) is not None:
        _OP_CALL_CODES.add(_code(_cls.__call__))


class _ShortcutMode(_TorchFunctionMode):
    """The guard at PyTorch's own dispatch: every torch function a learner's code runs passes here, however it is
    called (``functools.partial(F.scaled_dot_product_attention)``, ``map``, from C), which a profile hook's
    ``c_call`` event (bytecode calling a built-in) does not see.  ``names``: the forbidden built-ins' names."""

    def __init__(self, guard):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.guard.names and not _isinstance(getattr(func, "__self__", None), _Tensor):
            self.guard._refuse(f"torch's built-in {name}")
        return func(*args, **(kwargs or {}))


class forbid_shortcuts(contextlib.ContextDecorator):
    """While active, calling a shortcut of the named groups raises ``ShortcutError("... write your own")``.

    ``with forbid_shortcuts("sdpa", "tfmlib"): out = learner_fn(q, k, v)``.  Groups: see ``SHORTCUTS``
    (``"tfmlib"`` forbids every function of the course library).  ``allow`` lists functions that stay
    allowed even in a forbidden group (e.g. a tfmlib module handed to the learner's function).
    The check uses a profile hook, so it also catches a shortcut bound to another name before the test.
    A violation is remembered: catching the error inside the function does not hide it.
    """

    def __init__(self, *groups, allow=()):
        unknown = [g for g in groups if g not in SHORTCUTS]
        if unknown:
            raise ValueError(f"unknown shortcut groups {unknown}; known: {sorted(SHORTCUTS)}")
        self.groups = groups
        self.names = frozenset().union(*(SHORTCUTS[g][0] for g in groups))
        self.codes = frozenset(_code(f) for g in groups for f in SHORTCUTS[g][1])
        self.tfmlib = "tfmlib" in groups
        self.allowed = frozenset(_code(f) for f in allow)
        self.violation = None

    def _refuse(self, label, from_hook=False):
        self.violation = label
        if from_hook:
            _REFUSING.append(label)
        raise ShortcutError(f"your function called {label}. This exercise asks you to write your own; "
                            f"use basic tensor operations (matmul, softmax, sum, ...).")

    def _hook(self, frame, event, arg):
        label = None
        if event == "call":
            code = frame.f_code
            if code in self.allowed:
                return
            if code in self.codes:
                label = _LABELS.get(code, code.co_name)
            elif self.tfmlib and code.co_filename.startswith(_COURSE_DIRS) and code.co_filename not in _GUARD_FILES:
                owner = "tfmlib" if _TFMLIB_DIR and code.co_filename.startswith(_TFMLIB_DIR) else "tfmcheck"
                label = f"{owner}'s {code.co_name} ({os.path.basename(code.co_filename)})"
            elif code in _OP_CALL_CODES:
                op = str(frame.f_locals.get("self", ""))
                if any(n in op for n in self.names):
                    label = f"torch.ops.{op}"
        elif event == "c_call":
            name = getattr(arg, "__name__", "")
            if name in self.names and not _isinstance(getattr(arg, "__self__", None), _Tensor):
                label = f"torch's built-in {name}"
        if label is not None:
            self._refuse(label, from_hook=True)

    def __enter__(self):
        self.violation = None
        self._previous = _getprofile()
        self._installed = self._hook
        self._mode = _ShortcutMode(self) if self.names else None
        if self._mode is not None:
            self._mode.__enter__()
            self._depth = _fn_modes()
        _ACTIVE_GUARDS.append(self)
        _setprofile(self._installed)
        return self

    def __exit__(self, exc_type, exc, tb):
        current = _getprofile()
        _REFUSING.clear()
        _setprofile(self._previous)
        if _ACTIVE_GUARDS and _ACTIVE_GUARDS[-1] is self:
            _ACTIVE_GUARDS.pop()
        if self._mode is not None:
            left = _fn_modes() - self._depth
            for _ in _range(left):           # modes the learner's code entered and left there
                _torch_pop_mode()
            ours = left >= 0 and _torch_mode_at(self._depth - 1) is self._mode
            if left >= 0:
                _torch_pop_mode()
            if left != 0 or not ours:
                raise ShortcutError("your function entered or left a torch function mode (TorchFunctionMode) "
                                    "and did not put it back; the tests use one to check for shortcuts.")
        if self.violation is not None:
            if exc_type is ShortcutError:
                return False
            raise ShortcutError(f"your function called {self.violation} (and caught the error). "
                                f"This exercise asks you to write your own.")
        if current is not self._installed:
            raise ShortcutError("your function changed the profiler (sys.setprofile) that the tests use "
                                "to check for shortcuts; remove that call.")
        return False


def _no_withheld(args, kwargs):
    """In the graded kernel: a test cell that hands one of ``check.ref``'s results to the learner's function would
    record the function on an inert value (``tfmcheck.withheld``), not on the inputs the replay checks; the course's
    test cells never do, and this says so where a new one would."""
    if _GRADED_KERNEL and any(_type(a) is _Withheld for a in _flatten((args, kwargs))):
        raise CheckFailure("this test hands a reference withheld from the graded kernel to the learner's function "
                           "(a defect of the test cell: report it to the instructor)")


def _refuse_for_good(groups):
    """In the graded kernel only: the shortcuts of ``groups`` stop working in this process, for every thread and
    caller, from now on (``tfmcheck.shortcuts.refuse``).  The kernel's launcher has already refused every group
    before any cell ran; this keeps a test's ``forbid`` true wherever else the checks run graded.  The guard of
    ``forbid_shortcuts`` covers the learner's call; the tests' references to the shortcuts are withheld there (the
    bottom of this module), and the verdicts come from the grader's replay."""
    if _GRADED_KERNEL:
        _shortcuts.refuse(groups)


def call(fn, *args, forbid=("tfmlib",), allow=(), **kwargs):
    """Run the learner's ``fn(*args, **kwargs)`` with the ``forbid`` shortcut groups disabled.

    While a notebook is graded, the result is also recorded (learner's kernel) or replayed (grader's
    process); see ``tfmcheck.trace``."""
    args, kwargs = _without_graph((args, kwargs))
    if _MODE is not None and _MODE.replaying:
        return _MODE.record(((args, kwargs)))
    if not callable(fn):
        raise CheckFailure(f"{fn!r} is not a function; run the cell that defines it first")
    _no_withheld(args, kwargs)
    _refuse_for_good(forbid)

    def run():  # a function built on another graded one runs on a trusted stand-in for it (tfmcheck.standins)
        with _inputs_kept(args, kwargs), _RandomStateKept(_flatten((args, kwargs))), \
                _standing_in(fn, _absent, None if _MODE is None else _CURRENT_TEST[0]) as trusted, \
                forbid_shortcuts(*forbid, allow=(*allow, *trusted)):
            result = fn(*args, **kwargs)
        return _plain_result(fn, result)
    try:
        return run() if _MODE is None else _MODE.record((args, kwargs), run)
    finally:
        if _RUNNING[0] is not None:     # a stand-in may have bound a name the test cell then uses (standins: _absent)
            _RUNNING[0].refresh()


def _plain_result(fn, result):
    """``result`` if it is made of tensors, numbers and strings in tuples, lists and dicts (``trace.is_plain``, what
    the grader's record keeps whole); otherwise the call fails here, before the test's own code touches the object:
    an object of the learner's own type (a torch function protocol, a module answering any attribute) would get the
    test's calls handed to it (red-team round 9).  The replay fails such a result as well."""
    if _trace.is_plain(result):
        return result
    name = fn.__name__ if _type(fn) is types.FunctionType else "your function"
    raise CheckFailure(f"{name} returned a {_trace.opaque_part(result)}: the tests take tensors and numbers (or "
                       f"tuples, lists or dicts of them), so return a torch.Tensor")


def _without_graph(value):
    """``value`` (a call's arguments) with every tensor that carries an autograd graph replaced by its detached
    copy, in tuples, lists and dicts of exact type: the tests never hand the learner's function a graph that trusted
    code built (PyTorch's attention run on what the function returned earlier, say), whose backward the function
    could run on inputs of its choosing.  A leaf the test made with ``requires_grad`` is passed as it is."""
    kind = _type(value)
    if kind is tuple or kind is list:
        return kind(_without_graph(v) for v in value)
    if kind is dict:
        return {k: _without_graph(v) for k, v in _dict_items(value)}
    if (kind is _Tensor or kind is _Parameter) and _grad_fn_of(value) is not None:
        with _trace._plain():
            return _detach(value)
    return value


def _absent(name):
    """What a dependency the learner never defined is bound to after a stand-in stood in for it: a function that
    raises the NameError its use would have raised, so that the test cell calls it through ``check.call`` in the
    kernel as in the replay (``tfmcheck.standins``).  Here, in this module, so that the shortcut guard lets it raise."""
    def absent(*args, **kwargs):
        raise NameError(f"name {name!r} is not defined")
    return absent


class _inputs_kept:
    """The learner's function must leave the test's tensors as it got them: one changed in place (``q.zero_()``,
    ``x /= 2``) fails the call, here and when the record is replayed (a record saying so fails there too), so no
    test ever checks a result against a reference computed from inputs the function altered.  The test's tensors
    are found by exact type and compared with no torch function or dispatch mode running (``trace._plain``)."""

    def __init__(self, args, kwargs):
        self.tensors = _trace._tensors(_flatten((args, kwargs)))
        with _trace._plain():
            self.before = [_detach(t).clone() for t in self.tensors]

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        with _trace._plain():
            for t, b in zip(self.tensors, self.before):
                now = _detach(t)
                same = _tuple(_shape_of(now)) == _tuple(_shape_of(b)) and _dtype_of(now) == _dtype_of(b) and (
                    _allclose(now, b, rtol=0, atol=0, equal_nan=True) if _dtype_of(b).is_floating_point
                    or _dtype_of(b).is_complex else _equal(now, b))
                if not same:
                    raise CheckFailure(_trace.changed_input_message(_shape_of(b)))
        return False


def _true_numel(t):
    """Elements of ``t``, or of the batch it stands for inside ``torch.func.vmap`` / ``grad`` (the wrapped tensor)."""
    for _ in _range(16):
        if not _is_wrapped(t):
            break
        t = _unwrapped(t)
    return _numel(t), _tuple(_shape_of(t))


def _tensors_in(value, depth=0):
    """The tensors in an operation's arguments or result: the value itself, or inside tuples, lists and dicts.  A
    subclass counts (its class's own ``__class__`` is never asked: ``issubclass`` of its exact type)."""
    if _issubclass(_type(value), _Tensor):
        yield value
    elif depth < 3 and _type(value) in (tuple, list):
        for v in value:
            yield from _tensors_in(v, depth + 1)
    elif depth < 3 and _type(value) is dict:
        for v in value.values():
            yield from _tensors_in(v, depth + 1)


class _PeakNumel(_TorchFunctionMode):
    """While active, remembers the largest tensor any torch function or method returned *or was given*: a tensor
    made by a path that is not a torch function (a legacy constructor, a storage, ``torch.from_numpy``) is seen as
    soon as an operation uses it, and inside ``torch.func.vmap`` the whole batch counts."""

    def __init__(self):
        super().__init__()
        self.peak, self.where = 0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in _tensors_in((out, args, kwargs or {})):
            n, shape = _true_numel(t)
            if n > self.peak:
                self.peak, self.where = n, (getattr(func, "__name__", str(func)), shape)
        return out


class _TracedPeak:
    """While active, the largest number of bytes that Python objects and NumPy arrays (which report their data
    to ``tracemalloc``) allocated since entry held at once: ``self.peak``."""

    def __enter__(self):
        self.started = not _tm_is_tracing()
        if self.started:
            _tm_start()
        else:
            _tm_reset_peak()
        self.base = _tm_traced()[0]
        self.peak = 0
        return self

    def __exit__(self, *exc):
        self.peak = _max(0, _tm_traced()[1] - self.base)
        if self.started:
            _tm_stop()
        return False


def _resident() -> int:
    """Bytes of memory this process holds in RAM now (``RssAnon + RssShmem + RssFile`` of ``/proc/self/status``:
    every NumPy array, tensor, list or buffer it has written to, whoever made it, a file it mapped into memory
    (``numpy.memmap``, red-team round 6) included; the libraries' code is there too, but loaded before the baseline),
    or -1 where there is no such file (not Linux)."""
    try:
        fd = _os_open("/proc/self/status", _O_RDONLY)
    except OSError:
        return -1
    try:
        n = _os_readv(fd, [_STATUS])    # into a buffer made once: tracemalloc counts this thread's allocations too
    finally:
        _os_close(fd)
    total, found = 0, 0
    for key in (b"\nRssAnon:", b"\nRssShmem:", b"\nRssFile:"):
        at = _STATUS.find(key, 0, n)
        if at >= 0:
            total += int(_STATUS[at + len(key):_STATUS.find(b"kB", at, n)]) * 1024
            found += 1
    return total if found == 3 else -1


def _cell_number() -> int:
    """IPython's number of the cell running now (1 for the first cell a kernel runs), or 0 outside IPython.
    IPython counts a cell as it starts: while cell N runs, ``execution_count`` is already N + 1
    (tests/tfmcheck/test_memory_check.py pins this)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    count = getattr(shell, "execution_count", 0) if shell is not None else 0
    return _max(0, count - 1) if _type(count) is int else 0


def _malloc_gives_back_large_blocks():
    """Make the C allocator (glibc) serve every block of 128 KiB or more from its own mapping and return it when freed:
    by default glibc raises that threshold after large frees and then keeps freed blocks of up to 32 MiB in its heap,
    where the process still holds them, so the memory held would depend on what ran before (a test's reference, an
    earlier answer) rather than on what the learner's function keeps.  No-op where there is no glibc."""
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt     # the process's own symbols (no ctypes.util: it starts programs)
    except (OSError, AttributeError, TypeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 128 * 1024)
    mallopt(m_trim_threshold, 128 * 1024)


def _mallinfo2():
    """glibc's ``mallinfo2`` as a function of no arguments returning its structure, or None where there is none."""
    import ctypes

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                          "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    function.restype, function.argtypes = Mallinfo2, []
    return function


_MALLINFO2 = _mallinfo2()


def _allocated() -> int:
    """Bytes the C allocator has handed out and not taken back (``mallinfo2``: blocks in use in its heaps and in
    their own mappings): every tensor and NumPy array counts at its size whatever its type, whether the process
    has written to it or not, and memory freed but not returned to the system does not count, unlike
    ``_resident``'s.  -1 where there is no glibc."""
    if _MALLINFO2 is None:
        return -1
    info = _MALLINFO2()
    return info.uordblks + info.hblkhd


def memory_baseline():
    """Remember what this process holds now (``_resident``) as the memory that is not the learner's: called by
    the setup cell of a notebook whose tests use ``peak_memory`` (and at import), before any learner code runs.
    The cell number tells the grader whether a cell ran before the setup cell (its memory would count as none).
    In the grader's replay it does nothing: the kernel's measurements are in its record, and the grader's own
    process keeps glibc's usual allocator (served from its own mappings, every large temporary of the replay's
    references cost a fresh mapping and its page faults: about a second per exercise-7 notebook)."""
    global _BASELINE, _ALLOCATED_BASE
    if _MODE is not None and _MODE.replaying:
        return
    _malloc_gives_back_large_blocks()
    _BASELINE, _ALLOCATED_BASE = (_resident(), _cell_number()), _allocated()


class _ResidentPeak:
    """While active, samples ``_resident`` and ``_allocated`` every millisecond in a thread of its own (and on entry
    and exit): ``self.peak`` is the most the process held at once, ``self.allocated`` the most it had allocated."""

    def __enter__(self):
        self.peak, self.allocated, self._stop = _resident(), _allocated(), _Event()
        self._thread = _Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.001):
            self.peak, self.allocated = _max(self.peak, _resident()), _max(self.allocated, _allocated())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak, self.allocated = _max(self.peak, _resident()), _max(self.allocated, _allocated())
        return False


def peak_memory(fn, *args, forbid=("tfmlib",), **kwargs):
    """Run ``fn`` like ``call`` and measure the memory it uses, whatever library it computes with:
    ``(result, usage)``, where ``usage`` is a dict of

    - ``numel``, ``op``, ``shape``: the largest tensor a torch function or method returned or was given while
      ``fn`` ran (its number of elements, the operation, its shape);
    - ``traced_bytes``: the most bytes that NumPy arrays and Python objects (lists, floats, ...) allocated during
      the call held at once, measured with ``tracemalloc`` (0 if ``fn`` used torch alone);
    - ``allocated_bytes``: the most bytes the C allocator had handed out at once during the call beyond what it had
      when ``memory_baseline`` last ran (``_allocated``: tensors and NumPy arrays of any type, made before or during
      the call, at their size; freed memory the process still holds does not count), or -1 (no glibc);
    - ``held_bytes``: the most memory the process held in RAM at once during the call (``_resident``: tensors,
      NumPy arrays, lists, any buffer, including those made *before* the call) beyond what it held when
      ``memory_baseline`` last ran (the setup cell), or -1 where that cannot be measured (not Linux);
    - ``cells_before_setup``: how many cells the kernel ran before that setup cell (0 outside IPython).

    ``assert_memory_below`` compares it with a limit.  While a notebook is graded the result and the usage are
    recorded in the learner's kernel and the comparison is replayed by the grader (``tfmcheck.trace``)."""
    args, kwargs = _without_graph((args, kwargs))
    if _MODE is not None and _MODE.replaying:
        return _MODE.record(((args, kwargs), "peak_memory"))
    if not callable(fn):
        raise CheckFailure(f"{fn!r} is not a function; run the cell that defines it first")
    _no_withheld(args, kwargs)
    _refuse_for_good(forbid)

    def run():
        mode, traced, resident = _PeakNumel(), _TracedPeak(), _ResidentPeak()
        with resident, _inputs_kept(args, kwargs), _RandomStateKept(_flatten((args, kwargs))):
            with mode:
                with forbid_shortcuts(*forbid):
                    with traced:
                        result = fn(*args, **kwargs)
        result = _plain_result(fn, result)
        op, shape = mode.where if mode.where is not None else (None, [])
        base, cell = _BASELINE
        held = _max(0, resident.peak - base) if resident.peak >= 0 and base >= 0 else -1
        allocated = _max(0, resident.allocated - _ALLOCATED_BASE) if resident.allocated >= 0 \
            and _ALLOCATED_BASE >= 0 else -1
        return result, {"numel": mode.peak, "op": op, "shape": list(shape), "traced_bytes": traced.peak,
                        "allocated_bytes": allocated, "held_bytes": held, "cells_before_setup": _max(0, cell - 1)}
    return run() if _MODE is None else _MODE.record(((args, kwargs), "peak_memory"), run)


def peak_numel(fn, *args, forbid=("tfmlib",), **kwargs):
    """``peak_memory`` reduced to the largest tensor: ``(result, numel, (op name, shape))``.  It does not see
    NumPy or Python allocations; graded memory tests use ``peak_memory`` and ``assert_memory_below``."""
    result, usage = peak_memory(fn, *args, forbid=forbid, **kwargs)
    return result, usage["numel"], (usage["op"], _tuple(usage["shape"]))


def assert_memory_below(name, usage, numel, nbytes, held=None, numel_is="", nbytes_is="", held_is="", hint=None,
                        allocated=None, allocated_is=""):
    """``usage`` (from ``peak_memory``) is within the limits: the largest tensor has at most ``numel`` elements,
    the NumPy arrays and Python objects allocated during the call held at most ``nbytes`` bytes at once, (when
    ``allocated`` is given) the C allocator had handed out at most ``allocated`` bytes more than when the setup
    cell ran, and (when ``held`` is given) the process held at most ``held`` bytes more than then.
    ``numel_is``, ``nbytes_is``, ``allocated_is`` and ``held_is`` say in words what each limit stands for (e.g.
    "the full score matrix").  Where the process's memory cannot be measured (not Linux) the ``held`` limit is
    checked only when grading (the grader's kernels run on Linux: there a missing measurement fails)."""
    __tracebackhide__ = True
    if _recording_only():
        return
    _no_modes(name)
    fields = ("numel", "traced_bytes") + (("held_bytes", "cells_before_setup") if held is not None else ()) + (
        ("allocated_bytes",) if allocated is not None else ())
    if _type(usage) is not dict or any(_type(usage.get(f)) is not int or usage[f] < (
            -1 if f in ("held_bytes", "allocated_bytes") else 0) for f in fields):
        _fail(name, "the memory it used was not measured (the measurement is missing or malformed)", hint)
    if usage["numel"] > numel:
        shape = usage.get("shape")
        shape = _tuple(shape) if _type(shape) is list else "?"
        _fail(name, f"it built a tensor too large for block-by-block work: the largest tensor a torch operation "
                    f"created or used had {usage['numel']:,} elements (operation {usage.get('op')!s}, shape "
                    f"{shape}); the limit is {numel:,}" + (f" ({numel_is})." if numel_is else "."), hint)
    if usage["traced_bytes"] > nbytes:
        _fail(name, f"it held too much memory outside torch: the NumPy arrays and Python objects (lists, floats) "
                    f"alive at once while it ran took {usage['traced_bytes']:,} bytes, measured with tracemalloc; "
                    f"the limit is {nbytes:,} bytes" + (f" ({nbytes_is})." if nbytes_is else "."), hint)
    if allocated is not None and usage["allocated_bytes"] < 0 and _MODE is not None:
        _fail(name, "the memory it used was not measured (the grading kernel could not read its allocator's use)", hint)
    if allocated is not None and usage["allocated_bytes"] > allocated:
        _fail(name, f"it held too much data: at its peak the tensors, NumPy arrays and other buffers allocated since "
                    f"the setup cell ran and still in use took {usage['allocated_bytes']:,} bytes, whatever their "
                    f"type and however many (measured by the C allocator, including any made before the call); the "
                    f"limit is {allocated:,} bytes" + (f" ({allocated_is})." if allocated_is else "."), hint)
    if held is None:
        return
    if usage["held_bytes"] < 0:
        if _MODE is not None:
            _fail(name, "the memory it used was not measured (the grading kernel could not read its own memory use)",
                  hint)
        return
    if usage["cells_before_setup"] > 0 and _MODE is not None:     # in self-study the setup cell is often run again
        _fail(name, f"{usage['cells_before_setup']} cell(s) ran before the notebook's setup cell, so the memory "
                    "they hold cannot be told apart from what your function uses: move your code below the setup "
                    "cell (the first code cell).", hint)
    if usage["held_bytes"] > held:
        _fail(name, f"the notebook held too much memory while it ran: at its peak the process held "
                    f"{usage['held_bytes']:,} bytes more than when the setup cell ran (tensors, NumPy arrays, lists "
                    f"and buffers alike, including any made before the call); the limit is {held:,} bytes"
                    + (f" ({held_is})." if held_is else "."), hint)


def unpack(name, result, n):
    """Check that the learner returned a tuple/list of ``n`` items and return it."""
    __tracebackhide__ = True
    if _type(result) not in (tuple, list) or _len(result) != n:
        _fail(name, f"expected a tuple of {n} items, got {_type(result).__qualname__}"
                    + (f" of length {_len(result)}" if _type(result) in (tuple, list) else ""))
    return result


# ---------------------------------------------------------------------------------------------------------
# Grading: record in the learner's kernel, replay in the grader (tfmcheck.trace)
# ---------------------------------------------------------------------------------------------------------
def begin_test(cell_id):
    """Called by the grader before each test cell: names the cell for the trace and reseeds the global
    generators (from the cell's name and the grading secret, ``input_seed``), so that the cell builds the same
    inputs in the kernel and in the replay whatever the learner's code did before it."""
    if _MODE is not None:
        _MODE.begin(cell_id)
    _CURRENT_TEST[0] = cell_id      # which function the cell tests decides the stand-ins (tfmcheck.standins)
    seed(input_seed(zlib.crc32(str(cell_id).encode())))


#: The grade id of the test cell the grader runs now (``begin_test``); read only while graded (``_MODE``).
_CURRENT_TEST = [None]


# ---------------------------------------------------------------------------------------------------------
# The tests' random inputs: from a secret the grader draws for each grading run
# ---------------------------------------------------------------------------------------------------------
#: The secret of this grading run: from the kernel's environment (``SECRET_ENV``, set by the grader), or given to
#: ``recording`` / ``replay``; None outside grading.  It only decides inputs that the learner's functions receive
#: as arguments anyway, so it needs no hiding inside the kernel: what matters is that it is unknown beforehand.
_SECRET = None
IN_PROCESS_SECRET = "in-process"    # the default of ``recording`` and ``replay`` (tests in one process)


def input_seed(n):
    """The seed a test builds its random inputs from: ``n`` itself in self-study, Validate and ``make check`` (so
    the results a learner sees are reproducible), and when the notebook is graded a 63-bit number derived from
    ``n`` and the secret the grader drew for this grading run, the same in the learner's kernel and in the
    grader's replay.  The hidden tests' inputs are then unknown until the notebook is graded: tests published
    with the course cannot be answered from a table of recorded inputs and outputs."""
    if _type(n) is not int:
        raise TypeError(f"input_seed takes an int, not {_type(n).__qualname__} (test bug)")
    if _MODE is None:
        return n
    if not _SECRET:     # graded without the grader's secret: fail, never fall back to the published seeds
        raise CheckFailure("this notebook is being graded, but the grader gave its kernel no secret for the "
                           "tests' inputs: the tests cannot run (report this to the instructor)")
    return int.from_bytes(hashlib.sha256(f"{_SECRET}:{n}".encode()).digest()[:8], "big") >> 1


def generator(n):
    """A ``torch.Generator`` seeded with ``input_seed(n)``: ``n`` in self-study, a secret seed when graded.  The
    hidden tests draw their inputs from it; visible tests keep literal seeds (``torch.Generator().manual_seed``)."""
    return torch.Generator().manual_seed(input_seed(n))


class TestNamespace:
    """The names the test cells of one graded notebook bind, kept apart from the notebook's own (``run_test``)."""

    def __init__(self):
        self.names: dict = {}       # what a test cell runs in: the notebook's names, then the tests' own over them
        self.bound: set = set()     # the names the test cells bound (never taken from the notebook again)
        self.notebook = None        # the notebook's namespace, while a test cell runs (run_test)
        self.taken: dict = {}       # what was last taken from the notebook, by name

    def refresh(self):
        """Take again the notebook's names the test cells did not bind themselves (a name bound during a test
        cell, by ``check.call``'s stand-ins, is seen by the rest of the cell as in a plain cell)."""
        if self.notebook is not None:
            self.take(self.notebook)

    def take(self, notebook):
        """The notebook's names, as they are now, under the tests' own: a name the notebook no longer has (``del``) is
        gone here too, never kept from an earlier cell (red-team round 7 kept a deleted name's old function so)."""
        names, taken = self.names, self.taken
        for name, value in _tuple(taken.items()):
            if name not in notebook:
                del taken[name]
                if names.get(name, _TESTS) is value:    # not bound again by a test cell meanwhile
                    del names[name]
        for name, value in _tuple(notebook.items()):
            if _type(name) is not str or name in self.bound:
                continue
            current = names.get(name, _TESTS)
            if current is value or (current is not _TESTS and current is not taken.get(name, _TESTS)):
                continue        # already taken, or bound by the test cell running now: the test's (round 9)
            names[name] = taken[name] = value
        names["check"] = _THIS_MODULE       # the checks themselves, never a value of the notebook's (round 6)


_TESTS = TestNamespace()            # the graded kernel's (the replay makes its own)
_THIS_MODULE = sys.modules[__name__]
_RUNNING = [None]                   # the TestNamespace of the test cell running now (run_test), if any


def run_test(source, notebook, tests=None, filename="<test cell>"):
    """Run a test cell's ``source`` when graded (kernel and replay alike), in a namespace of its own: it sees the
    notebook's names (the learner's functions, ``check``, ``torch``, the setup cell's variables) and what earlier
    test cells bound, but what it binds never reaches ``notebook``, the globals of the learner's functions, so a
    learner's function cannot read a test's variable (its expected value, say).  ``tests``: the ``TestNamespace``
    of this notebook (the kernel's own by default).  Self-study runs test cells as plain cells."""
    tests = _TESTS if tests is None else tests
    tests.notebook = notebook
    tests.take(notebook)
    names = tests.names
    before = dict(names)
    code = compile(source, filename, "exec")
    previous, _RUNNING[0] = _RUNNING[0], tests
    try:
        exec(code, names)  # noqa: S102 - a trusted test cell, from the gradebook
    finally:
        _RUNNING[0] = previous
        tests.bound |= {name for name, value in names.items()
                        if (name not in before or before[name] is not value) and notebook.get(name, tests) is not value}


@contextlib.contextmanager
def _mode(new):
    global _MODE
    previous, _MODE = _MODE, new
    try:
        yield new
    finally:
        _MODE = previous


@contextlib.contextmanager
def _secret(value):
    global _SECRET
    previous, _SECRET = _SECRET, value
    try:
        yield
    finally:
        _SECRET = previous


@contextlib.contextmanager
def replay(records, outside_held=None, secret=IN_PROCESS_SECRET):
    """Context manager of the grader: ``call`` and ``peak_memory`` serve ``records`` instead of running code;
    ``outside_held`` ({test cell: bytes}) is the memory the grader saw the kernel hold during a test cell;
    ``secret`` is the one the grader gave the kernel that recorded them (``input_seed``)."""
    with _secret(secret), _mode(_trace.Replayer(records, outside_held)) as new:
        yield new


@contextlib.contextmanager
def recording(path, secret=IN_PROCESS_SECRET):
    """Context manager: ``call`` and ``peak_memory`` record to the trace file ``path``, as in a graded kernel
    whose grading secret is ``secret``."""
    with _secret(secret), _mode(_trace.Recorder(str(path))) as new:
        yield new



def mode():
    """The trace this kernel records to (``tfmcheck.trace.Recorder``), the grader's replay
    (``tfmcheck.trace.Replayer``), or None (self-study, Validate)."""
    return _MODE


_BASELINE, _ALLOCATED_BASE = (-1, 0), -1
_MODE = None
if _GRADED_KERNEL:
    memory_baseline()             # the graded kernel, from its start (its setup cell calls it again)
else:
    _BASELINE = (_resident(), _cell_number())   # elsewhere (the grader among them) the allocator is left as it is
    _ALLOCATED_BASE = _allocated()
if _GRADED_KERNEL:
    _MODE = _trace.Recorder(os.environ[_trace.TRACE_ENV])
    _SECRET = os.environ.pop(_SECRET_ENV, None)           # the grading run's secret (input_seed)
    from tfmcheck.withheld import WITHHELD
    ref.rope = ref.fit_chinchilla = WITHHELD            # the course library's references: not in this kernel
    # nor PyTorch's implementations of what the exercises ask for, which a test's forbidding refuses here for good
    ref.scaled_dot_product_attention = ref.MultiheadAttention = ref.layer_norm = ref.rms_norm = ref.RNN = WITHHELD
    ref.module = WITHHELD
    ref.grouped_query_attention = lambda *args, **kwargs: (WITHHELD, (WITHHELD, WITHHELD))
