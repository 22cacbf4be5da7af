"""The allow-list is closed: from everything an answer may name, nothing dangerous is reachable (issue 31).

``tfmgrader.closure`` starts from every listed module name, allowed built-in, literal and reviewed sample value, and
follows the attribute names the scan admits on any value, calls with no or simple arguments, subscripts, iteration
(and so ``map``/``filter``), to depth 4.  It must reach no module, frame, code object, globals, built-ins, ``sys``,
IPython shell or library implementation of an exercise.  The attribute names those objects offer are pinned in
``grader/tfmgrader/reachable_names.json``: a name an answer defines is admitted on values only if it is not one
of them.  An upgrade of PyTorch, NumPy or Python that opens a route, or adds a name, fails here.
"""
import json

import pytest

from tfmgrader import closure, scan

pytestmark = pytest.mark.slow

#: Types an answer can reach that compute attributes they do not list (their own ``__getattr__``), and why what
#: they return is harmless.  A new one fails the test below until it is reviewed here.
REVIEWED_DYNAMIC = {
    "torch.nn.modules.module.Module": "returns only the module's own parameters, buffers and submodules",
    "typing._BaseGenericAlias": "hands the lookup to its origin class, which the search explores (closure.FORWARDS)",
    "typing._SpecialForm": "answers only __name__ and __qualname__; any other name raises AttributeError",
}


@pytest.fixture(scope="module")
def explored():
    return closure.explore(scan.admitted_on_any_value, depth=4)


def test_nothing_dangerous_is_reachable_from_what_an_answer_may_name(explored):
    assert explored.explored > 3000, "the search explored too little to prove anything"
    assert explored.routes == [], "\n".join(map(str, explored.routes))


def test_every_reachable_attribute_name_is_pinned(explored):
    pinned = set(json.loads(scan.REACHABLE_NAMES.read_text()))
    new = sorted(explored.names - pinned)
    assert not new, (f"objects an answer can reach offer attribute names that reachable_names.json does not pin: "
                     f"{new[:20]}; review them, then: python -m tfmgrader.closure --names "
                     f"grader/tfmgrader/reachable_names.json")


def test_every_type_that_computes_attributes_is_reviewed(explored):
    unreviewed = {kind: path for kind, path in explored.dynamic.items() if kind not in REVIEWED_DYNAMIC}
    assert not unreviewed, unreviewed


def test_the_search_finds_a_route_when_private_names_are_admitted():
    """The test can fail: admitting the private names an answer defines (the scan's rule before issue 31) opens a
    route through a call's private attribute (``warnings.catch_warnings()._module`` is the module ``warnings``),
    and the search finds it from the listed name alone."""
    import warnings

    start = {"warnings.catch_warnings": warnings.catch_warnings}
    old_rule = closure.explore(lambda n: scan.admitted_on_any_value(n) or (n.startswith("_") and not n.startswith("__")),
                               depth=2, start=start)
    assert "warnings.catch_warnings()._module -> module warnings" in map(str, old_rule.routes), old_rule.routes
    assert closure.explore(scan.admitted_on_any_value, depth=2, start=start).routes == []


def test_the_search_finds_reflection_done_by_library_code():
    """Red-team round 6: ``functools.wraps(f).func`` is ``functools.update_wrapper``, which reads any attribute of one
    object and sets it on another by the names its caller passes.  The search counts such functions as routes
    (``closure.REFLECTION``), so listing ``functools.wraps`` again fails the closure test."""
    import functools

    start = {"functools.wraps": functools.wraps}
    routes = [str(r) for r in closure.explore(scan.admitted_on_any_value, depth=2, start=start).routes]
    assert any("functools.update_wrapper" in r or "functools.wraps" in r for r in routes), routes


RAW_MEMORY = r'''
import numpy as np, torch, warnings
from tfmcheck import lockdown
from tfmgrader import closure, scan
warnings.simplefilter("ignore")
lockdown.guard_raw_memory()                  # as the graded kernel's launcher does, before any cell
objects = np.array([None, 1, "x", None], dtype=object)
data = (2 ** 40 + 7).to_bytes(16, "little")
def span(x):
    if isinstance(x, torch.Tensor):
        return x.data_ptr(), x.untyped_storage().nbytes(), True
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0], x.nbytes, x.flags.writeable
    return None
raw = {"an object array": (objects, objects.__array_interface__["data"][0], objects.nbytes),
       "its memoryview": (objects.data, objects.__array_interface__["data"][0], objects.nbytes),
       "bytes": (data, np.frombuffer(data, np.uint8).__array_interface__["data"][0], len(data)),
       "a memoryview of bytes": (memoryview(data), np.frombuffer(data, np.uint8).__array_interface__["data"][0],
                                 len(data))}
def exposes(result, start, size, is_objects):
    for r in (result if isinstance(result, (tuple, list)) else (result,)):
        s = span(r)
        if s is None or getattr(r, "dtype", None) == np.dtype(object):
            continue
        lo, n, writable = s
        if lo < start + size and start < lo + max(n, 1) and (writable or is_objects):
            return True
    return False
callables = {n: f for n, f in closure.roots().items() if callable(f)}
found, tried = [], 0
for what, (value, start, size) in raw.items():
    calls = {n: (f, (value,)) for n, f in callables.items()}
    calls |= {n + " dtype": (f, (value,), {"dtype": torch.int64}) for n, f in callables.items()}
    for attr in dir(value):
        if scan.admitted_on_any_value(attr):
            try:
                method = getattr(value, attr)
            except Exception:
                continue
            if callable(method):
                for arg in ((), (np.int64,), (torch.int64,), ("q",), ("B",)):
                    calls[f"{what}.{attr}{arg}"] = (method, arg)
            else:
                calls[f"{what}.{attr}"] = (lambda m=method: m, ())
    for name, (f, args, *kw) in calls.items():
        tried += 1
        try:
            with closure.time_limit(2):
                result = f(*args, **(kw[0] if kw else {}))
        except BaseException:
            continue
        if exposes(result, start, size, what.startswith(("an object", "its"))):
            found.append(f"{name} over {what}")
print("TRIED", tried)
print("FOUND", found)
'''


def test_no_listed_call_lays_a_tensor_over_raw_memory(tmp_path):
    """Round 22 of the blind red team made a writable int64 tensor over the pointers of a NumPy array of Python objects
    (``torch.asarray(objects.data, dtype=torch.int64)``) and forged objects through it.  With the graded kernel's
    guard (``lockdown.guard_raw_memory``), no callable an answer may name, and no listed attribute of the raw objects
    themselves, called on an object array, its memoryview, ``bytes`` or a memoryview of them, returns a tensor or an
    array over that memory (writable, or reading pointers).  Without the guard, ``torch.asarray`` does."""
    import os
    import subprocess
    import sys

    def run(guarded: bool) -> list:
        script = RAW_MEMORY if guarded else RAW_MEMORY.replace("lockdown.guard_raw_memory()", "pass")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600,
                              cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert int(proc.stdout.split("TRIED", 1)[1].split()[0]) > 1000
        return eval(proc.stdout.split("FOUND", 1)[1])  # noqa: S307 - the list the script printed

    assert run(guarded=True) == []
    unguarded = run(guarded=False)
    assert any(f.startswith("torch.asarray") for f in unguarded), unguarded
