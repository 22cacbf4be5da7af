"""Feedback that names the mistake: a catalogue of the common wrong answers of every graded function.

For each graded function of the exercises (``solutions/`` → ``notebooks/``), ``CATALOGUE`` lists named
mistakes.  Each mistake is a small *wrong variant*: trusted code that computes what that mistake would return
from the same inputs.  When a test cell's comparison fails, ``For(...).assert_close`` (and friends) runs the
variants on the test's own inputs and, when exactly one of them reproduces the learner's result, says which
mistake it is in one plain sentence, with the line of the formula involved, before the numbers.  When no
variant matches, the message says only what differs and guesses no cause.

The test cells use only the inputs they built and the results ``check.call`` returned:

    result = check.call(scaled_dot_product_attention, q, k, v, forbid=SHORTCUTS)
    out, weights = check.unpack("scaled_dot_product_attention(q, k, v)", result, 2)
    fb = feedback.For("scaled_dot_product_attention", result, q=q, k=k, v=v)
    fb.assert_close("weights", weights, expected_w, atol=1e-4)

so the diagnosis never calls a learner function: during grading the same cell runs again in a trusted process
where ``check.call`` replays the recorded results.  A diagnosis only changes the message of a failure that
``tfmcheck.checking`` has already decided; it never turns a pass into a failure or back.

A test of a function that is built on another graded function (self_attention on scaled_dot_product_attention,
decoder_block on layer_norm, ...) also hands ``For(...).relies_on`` what the learner's own dependency returned
on the inputs a correct caller gives it, with the trusted result; a failure then names that dependency, "fix ...
first", only when it is wrong on those inputs, and says it is the only cause when the result is exactly what a
correct function built on it returns.

The package: this file, the diagnosis; catalogue.py, what a mistake is (an entry bound to a trusted builder);
families.py, the mistakes several functions share (scaling, softmax axis, masking, ...), declared once;
ch01_rnn.py ... ch09_modern_gpt.py, each chapter's builders and its functions' entries, in CATALOGUE's order.

To add a mistake: one entry and a test case.  The entry goes in its function's list in the chapter's file:
``mistake(name, sentence, tanh=False)`` (keyword flags of the chapter's builder) or ``mistake(name, sentence,
lambda x, ...: ...)`` (a small lambda of the inputs), with ``line=`` where the line involved is not the
function's; or ``FAMILY.name`` when families.py has it.  The test case is the edit of the solution that makes
the mistake, in ``WRONG`` of tests/tfmcheck/test_feedback.py: it writes each catalogued mistake into the learner's
notebook and checks that the first failing test names it (and fails while a catalogued mistake has no case).
This package imports torch, the standard library and tfmcheck.checking only.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import types

import torch

import tfmcheck.checking as check

from . import (ch01_rnn, ch02_attention, ch03_self_attention, ch04_multi_head, ch05_positions, ch06_encoder_decoder,
               ch07_efficiency, ch08_scaling, ch09_modern_gpt)
from .catalogue import Alternatives, Mistake, _allclose, _Tensor, _type
from .families import attention

__all__ = ["CATALOGUE", "Alternatives", "For", "Mistake", "attention", "diagnose", "explain", "fix_first",
           "reset_history", "separate_history", "version"]

CHAPTERS = (ch01_rnn, ch02_attention, ch03_self_attention, ch04_multi_head, ch05_positions, ch06_encoder_decoder,
            ch07_efficiency, ch08_scaling, ch09_modern_gpt)
CATALOGUE: dict[str, list[Mistake]] = {function: mistakes for chapter in CHAPTERS
                                       for function, mistakes in chapter.MISTAKES.items()}


# ---------------------------------------------------------------------------------------------------------
# Diagnosis
# ---------------------------------------------------------------------------------------------------------
def _same(got, expected):
    """True when ``got`` is what a variant returned: same structure, type, shape, dtype and values (NaN = NaN)."""
    if _type(expected) in (tuple, list):
        return (_type(got) in (tuple, list) and len(got) == len(expected)
                and all(_same(g, e) for g, e in zip(got, expected)))
    if _type(expected) is dict:
        return _type(got) is dict and sorted(got) == sorted(expected) and \
            all(_same(got[k], expected[k]) for k in expected)
    if _type(expected) is _Tensor:
        if _type(got) is not _Tensor or got.shape != expected.shape or got.dtype != expected.dtype:
            return False
        g, e = got.detach(), expected.detach()
        if not e.dtype.is_floating_point:
            return bool(torch.equal(g, e))
        if e.numel() == 0:
            return True
        tol = 1e-10 if e.dtype == torch.float64 else 1e-5
        return bool(_allclose(g, e, rtol=1e-4, atol=tol, equal_nan=True))
    if _type(expected) in (int, float):
        try:
            value = float(got.item()) if _type(got) is _Tensor and got.numel() == 1 else float(got)
        except (TypeError, ValueError):
            return False
        if math.isnan(expected):
            return math.isnan(value)
        return math.isclose(value, float(expected), rel_tol=1e-6, abs_tol=1e-12)
    return False


def _distance(got, expected):
    """The largest absolute difference between two results that ``_same`` matched (NaN against NaN counts 0)."""
    if _type(expected) in (tuple, list):
        return max((_distance(g, e) for g, e in zip(got, expected)), default=0.0)
    if _type(expected) is dict:
        return max((_distance(got[k], e) for k, e in expected.items()), default=0.0)
    if _type(expected) is _Tensor:
        if expected.numel() == 0 or not expected.dtype.is_floating_point:
            return 0.0
        diff = (got.detach().double() - expected.detach().double()).abs()
        return float(diff.nan_to_num(nan=0.0).max())
    value = float(got.item()) if _type(got) is _Tensor else float(got)
    return 0.0 if math.isnan(value) and math.isnan(expected) else abs(value - float(expected))


def _signature(value):
    """A short summary of one input, enough to tell a test's inputs from another test's."""
    if _type(value) is _Tensor:
        v = value.detach().double()
        return ("tensor", tuple(value.shape), str(value.dtype), float(v.nan_to_num().sum()),
                float((v.nan_to_num() ** 2).sum()))
    return (_type(value).__name__, repr(value))


# The earlier calls of each graded function in this notebook, made with the function as it is now:
# function -> {"version": the learner's function's fingerprint, "calls": {inputs' signature: (inputs, result)}}.
# A re-run of a test replaces its own entry; a call with another version of the function (the learner edited and
# re-ran its cell, or a function it is built on) drops every entry of the older one, since results of code that
# is gone say nothing about the code that is there.  ``owner`` is tfmcheck.checking's mode when they were
# recorded: a new grading replay (a new mode) starts a new history, so one notebook's calls never meet another's.
_HISTORY = {"owner": None, "calls": {}}
_KEPT_CALLS = 32            # per function version: a test re-run with unseeded inputs adds an entry each time


def reset_history():
    """Forget the recorded calls (a new notebook starts)."""
    _HISTORY["owner"], _HISTORY["calls"] = check.mode(), {}


@contextlib.contextmanager
def separate_history():
    """Within: a fresh history (another notebook, as a fresh kernel would have); after: the current one again."""
    kept = dict(_HISTORY)
    reset_history()
    try:
        yield
    finally:
        _HISTORY.clear()
        _HISTORY.update(kept)


_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _fingerprint(obj, namespace, seen):
    """What decides the behaviour of the learner's ``obj`` (looked up in the notebook's ``namespace``): for a
    function defined there, its code, defaults and closure and, recursively, the notebook's functions and plain
    values it reads by name; anything else by identity.  Reads attributes of plain functions only, so it runs
    none of the learner's code."""
    if _type(obj) is not types.FunctionType:
        if _type(obj) in _PLAIN:
            return obj
        if _type(obj) is _Tensor:
            return ("tensor", id(obj), obj._version)
        return ("object", id(obj))
    if id(obj) in seen:
        return ("recursive", obj.__code__)
    seen = seen | {id(obj)}
    names, codes = set(), [obj.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if _type(c) is types.CodeType)
    glob = obj.__globals__
    used = tuple((name, _fingerprint(glob[name], namespace, seen)) for name in sorted(names)
                 if _type(glob) is dict and name in glob and not name.startswith("__")
                 and _type(glob[name]) is not types.ModuleType
                 and (_type(glob[name]) in _PLAIN or _type(glob[name]) is _Tensor
                      or getattr(glob[name], "__globals__", None) is glob))
    cells = tuple(_fingerprint(c.cell_contents, namespace, seen) if _type(c.cell_contents) is types.FunctionType
                  else ("cell", id(c.cell_contents)) for c in (obj.__closure__ or ()))
    defaults = tuple(d if _type(d) in _PLAIN else ("default", id(d)) for d in (obj.__defaults__ or ()))
    return (obj.__code__, defaults, cells, used)


def version(function, namespace):
    """The fingerprint of the learner's ``function`` as defined in ``namespace`` (a test cell's globals), or None
    where it is not a function of the notebook (the grader's replay, which runs no learner code, holds only stand-ins:
    there a notebook has one version of each function)."""
    try:
        obj = namespace.get(function) if _type(namespace) is dict else None
        if _type(obj) is not types.FunctionType:
            return None if obj is None else ("object", id(obj))
        return _fingerprint(obj, namespace, frozenset())
    except Exception:  # noqa: BLE001  (an odd object: no version, the history is kept as it is)
        return None


def _remember(function, result, inputs, current_version=None):
    if _HISTORY["owner"] is not check.mode():
        reset_history()
    key = tuple(sorted((name, _signature(value)) for name, value in inputs.items()))
    kept = {k: (v.detach().clone() if _type(v) is _Tensor else v) for k, v in inputs.items()}
    entry = _HISTORY["calls"].get(function)
    try:
        same = entry is not None and entry["version"] == current_version
    except Exception:  # noqa: BLE001  (a comparison that fails: treat it as a new version)
        same = False
    if not same:
        entry = _HISTORY["calls"][function] = {"version": current_version, "calls": {}}
    calls = entry["calls"]
    calls.pop(key, None)
    calls[key] = (kept, result, {})  # {mistake: does its variant give this result?}, filled by _consistent
    while len(calls) > _KEPT_CALLS:
        calls.pop(next(iter(calls)))
    return key


def _variants(mistake, inputs):
    """What ``mistake`` returns from ``inputs``: a list of alternatives (empty: invisible on these inputs)."""
    with torch.no_grad():
        wrong = mistake.compute(**{k: (v.detach() if _type(v) is _Tensor else v) for k, v in inputs.items()})
    return list(wrong) if isinstance(wrong, Alternatives) else [wrong]


def _consistent(mistake, function, current):
    """False when an earlier call of ``function``, as it is now, returned something this mistake would not have
    returned: the learner's code cannot have that mistake (a coincidence on the failing test's inputs).  Calls of
    an earlier version of the function are gone from the history (``_remember``): they rule nothing out."""
    for key, (inputs, result, agrees) in _HISTORY["calls"].get(function, {"calls": {}})["calls"].items():
        if key == current:
            continue
        if id(mistake) not in agrees:
            try:
                candidates = _variants(mistake, inputs)
            except Exception:  # noqa: BLE001 - a variant that cannot run on those inputs tells nothing
                candidates = []
            agrees[id(mistake)] = not candidates or any(_same(result, c) for c in candidates)
        if not agrees[id(mistake)]:
            return False
    return True


def diagnose(function, result, current=None, **inputs):
    """The catalogued mistake of ``function`` whose variant reproduces ``result`` from ``inputs``, else None.

    A mistake is named only when it is the one explanation: its variant reproduces the result and agrees with
    every earlier call of the function in this notebook (``current`` is this call's key in that history), and
    it is at least ten times closer than any other such mistake (two exact matches: None, the message must not
    guess between them).  A mistake that an earlier call rules out is no candidate, so it forces no tie."""
    matches = []
    for mistake in CATALOGUE.get(function, []):
        try:
            distances = [_distance(result, c) for c in _variants(mistake, inputs) if _same(result, c)]
        except Exception:  # noqa: BLE001 - a variant that cannot run on these inputs does not match
            continue
        if distances and _consistent(mistake, function, current):
            matches.append((min(distances), mistake))
    if not matches:
        return None
    matches.sort(key=lambda m: m[0])
    if len(matches) == 1 or matches[0][0] < 0.1 * matches[1][0]:
        return matches[0][1]
    return None


class For:
    """The checks of one result of a graded function, with a diagnosis on failure.

    ``For("scaled_dot_product_attention", result, q=q, k=k, v=v)``: ``result`` is what ``check.call``
    returned, the keyword arguments are the inputs of that call (the names of the contract).  The methods
    are ``tfmcheck.checking``'s comparisons; when one fails, its message starts with the mistake the
    catalogue recognises, if any.
    """

    def __init__(self, function, result, **inputs):
        self.function, self.result, self.inputs = function, result, inputs
        # the test cell's namespace: where the learner's function is defined, so its version is read there
        self.key = _remember(function, result, inputs, version(function, sys._getframe(1).f_globals))
        self.dependencies, self.composed = {}, None

    def relies_on(self, checks, composed=None):
        """Declare the learner's own functions this one is built on, checked on this test's inputs.

        ``checks``: {function name: (what the learner's function returned on the inputs a correct caller hands
        it, or None when it raised; the trusted result for those inputs)}.  ``composed``: what a correct
        implementation of this function returns when built on the learner's own functions (None: unknown).
        A later failure names a dependency that is wrong on these inputs and says to fix it first
        (``fix_first``).  Returns self."""
        self.dependencies, self.composed = dict(checks), composed
        return self

    def _run(self, comparison, name, *args, **kwargs):
        __tracebackhide__ = True
        try:
            comparison(name, *args, **kwargs)
        except check.CheckFailure as failure:
            wrong = [f for f, (got, expected) in self.dependencies.items() if not _agrees(got, expected)]
            cause = ("unknown" if self.composed is None
                     else "only" if _agrees(self.result, self.composed, exact=True) else "also")
            if wrong and cause == "only":
                raise fix_first(failure, name, self.function, wrong, cause) from None
            explained = explain(failure, name, diagnose(self.function, self.result, self.key, **self.inputs))
            raise (fix_first(explained, name, self.function, wrong, cause) if wrong else explained) from None

    def assert_close(self, name, got, expected, atol=None, rtol=None):
        __tracebackhide__ = True
        self._run(check.assert_close, name, got, expected, atol=atol, rtol=rtol)

    def assert_equal(self, name, got, expected):
        __tracebackhide__ = True
        self._run(check.assert_equal, name, got, expected)

    def assert_tensor(self, name, got, shape=None, dtype=None):
        __tracebackhide__ = True
        self._run(check.assert_tensor, name, got, shape, dtype)

    def assert_number(self, name, got, expected, rel=1e-6, abs_=0.0):
        __tracebackhide__ = True
        self._run(check.assert_number, name, got, expected, rel=rel, abs_=abs_)

    def assert_true(self, name, condition, message):
        __tracebackhide__ = True
        self._run(check.assert_true, name, condition, message)


def explain(failure, name, mistake):
    """A CheckFailure whose message names ``mistake`` (a Mistake or None) before the numbers of ``failure``."""
    text = str(failure)
    prefix = f"{name}: "
    numbers = text[len(prefix):] if text.startswith(prefix) else text
    if mistake is None:
        new = check.CheckFailure(text)
    else:
        new = check.CheckFailure(f"{name}: {mistake.sentence}\n  The line involved:  {mistake.line}\n  {numbers}")
    new.mistake = None if mistake is None else mistake.name
    return new


# ---------------------------------------------------------------------------------------------------------
# Fix first: a failure caused by another of the learner's functions (``For.relies_on``)
# ---------------------------------------------------------------------------------------------------------
def _agrees(got, expected, exact=False):
    """True when ``got`` passes the tests' comparison with ``expected`` (tuples and lists item by item, numbers
    by value).  Not ``exact``: a float32 result may differ by 1e-4, so a rounding difference never counts as a
    wrong dependency."""
    if _type(expected) in (tuple, list):
        return (_type(got) in (tuple, list) and len(got) == len(expected)
                and all(_agrees(g, e, exact) for g, e in zip(got, expected)))
    if _type(expected) is not _Tensor:
        return _same(got, expected)
    loose = not exact and expected.dtype == torch.float32
    try:
        check.assert_close("dependency", got, expected, atol=1e-4 if loose else None, rtol=1e-3 if loose else None)
    except check.CheckFailure:
        return False
    return True


def fix_first(failure, name, function, wrong, cause="unknown"):
    """A CheckFailure that names the learner's functions ``wrong`` (wrong on this test's inputs) to fix first.

    ``cause``: "only" when ``function`` returned exactly what a correct ``function`` returns on top of them (they
    are the whole cause); "also" when it did not (``function`` has a mistake of its own too, which ``failure``
    names if it is known); "unknown" when the test cannot tell."""
    names = " and ".join(wrong)
    verb, it = ("are", "them") if len(wrong) > 1 else ("is", "it")
    text = str(failure)
    rest = text[len(name) + 2:] if text.startswith(f"{name}: ") else text
    if cause == "only":
        sentence = (f"{function} gives a wrong result only because your {names} {verb} wrong on these inputs: "
                    f"fix {names} first.")
    elif cause == "also":
        sentence = (f"your {names} {verb} wrong on these inputs too, and {function} is built on {it}: "
                    f"fix {names} first, then {function}.")
    else:
        sentence = f"your {names} {verb} wrong on these inputs, and {function} is built on {it}: fix {names} first."
    new = check.CheckFailure(f"{name}: {sentence}\n  {rest}")
    new.mistake = None if cause == "only" else getattr(failure, "mistake", None)
    new.fix_first = list(wrong)
    return new


# ---------------------------------------------------------------------------------------------------------
# Tracebacks in the learner's kernel: the test cell's line, not tfmlib's internals
# ---------------------------------------------------------------------------------------------------------
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_INTERNAL_FILES = {check.__file__} | {os.path.join(_PACKAGE, name) for name in os.listdir(_PACKAGE)
                                      if name.endswith(".py")}


def _without_internals(tb):
    """``tb`` with the frames of grader/tfmcheck/checking.py and of this package left out (relinks tb_next)."""
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    kept = [t for t in frames if t.tb_frame.f_code.co_filename not in _INTERNAL_FILES] or frames[:1]
    for a, b in zip(kept, kept[1:]):
        a.tb_next = b
    kept[-1].tb_next = None
    return kept[0]


def _show_without_internals(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler.  IPython always shows the frame that raised, even one marked
    ``__tracebackhide__``; a check's failure is raised inside tfmlib, so those frames are cut out here.
    Everything else IPython does with an error (the error output, the failed execute reply) is unchanged."""
    shell.showtraceback((etype, value, _without_internals(tb)), tb_offset=tb_offset)


def _install_in_ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and not shell.custom_exceptions:
        shell.set_custom_exc((Exception,), _show_without_internals)


_install_in_ipython()
