"""What an answer can reach from what the scan admits: a bounded search that shows the allow-list is closed.

The scan admits, in an answer, the names of ``allowlist.json`` (module names, built-ins) and, on any value, the
attribute names that ``scan.admitted_on_any_value`` accepts.  This module starts from every object those names
give (each listed module name, each allowed built-in, literals of every type, the reviewed sample values) and
follows, breadth first up to ``depth`` steps:

- every attribute name the scan would admit on a value it cannot prove is the answer's own;
- calls with no argument or one simple argument (a small tensor, an int, a string, a list);
- subscripts (``[0]``, a dict's values) and the first items of an iteration (which is also what ``map`` and
  ``filter`` hand a function);

and reports every route that ends at something an answer must never hold: a module, a frame, a code object, a
traceback, a module's or function's globals, the built-ins, ``sys`` or one of its functions, Python's code
execution built-ins, IPython's shell, or a library implementation of an exercise (``tfmcheck.checking``'s
``SHORTCUT_POLICY`` and any function of tfmlib or tfmcheck).  ``tests/tfmgrader/test_closure.py`` requires that no route
exists, so that an upgrade of PyTorch, NumPy or Python that opens one fails the suite::

    python -m tfmgrader.closure            # prints the routes found (none) and what was explored

Objects are explored once per identity (classes, functions, modules) or once per type (instances): two
tensors offer the same attributes.  A step that raises, or takes longer than a second, is a dead end.
"""
from __future__ import annotations

import argparse
import builtins
import collections
import contextlib
import importlib
import itertools
import json
import signal
import sys
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: Built-ins that run code, reach objects by name, or reach the interpreter: holding one is a route out.
CODE_BUILTINS = {"eval", "exec", "compile", "__import__", "open", "getattr", "setattr", "delattr", "globals",
                 "locals", "vars", "dir", "breakpoint", "input", "help", "memoryview", "__build_class__"}


#: Library functions that read or set attributes whose names their caller passes (reflection done by library code):
#: ``functools.update_wrapper`` reads any attribute of one object and sets it on another (red-team round 6 reached it
#: as ``functools.wraps(f).func``).  ``"module.qualname"``; holding one is a route out.
REFLECTION = {"functools.update_wrapper", "functools.wraps", "operator.attrgetter", "operator.methodcaller",
              "copyreg.__newobj__", "inspect.getattr_static", "inspect.getmembers"}


#: Types that compute attributes by handing the lookup to another object: that object is explored too, so that
#: its names count as reachable (``typing.List.append`` is ``list.append``).
FORWARDS = {"typing._BaseGenericAlias": "__origin__"}


@dataclass(frozen=True)
class Route:
    path: str       # how the object was reached, e.g. "torch.randn(...).grad_fn.next_functions[0]"
    what: str       # what it is, e.g. "module sys"

    def __str__(self) -> str:
        return f"{self.path} -> {self.what}"


def _shortcut_objects() -> tuple[set[int], set[str]]:
    """ids of the shortcut functions and classes, and the built-in names of the shortcut ops."""
    from tfmcheck import checking

    ids, names = set(), set()
    for builtin_names, paths in checking.SHORTCUT_POLICY.values():
        names |= set(builtin_names)
        for path in paths:
            obj = checking.resolve_dotted(path)
            ids.add(id(obj))
            ids |= {id(f) for f in checking.functions_of(obj)}
    return ids, names


def danger(obj, shortcut_ids: set[int], shortcut_names: set[str]) -> str | None:
    """What ``obj`` is, if an answer must never hold it; else None."""
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if isinstance(obj, (types.FrameType, types.CodeType, types.TracebackType)):
        return f"a {type(obj).__name__}"
    if isinstance(obj, dict) and (obj is builtins.__dict__ or "__builtins__" in obj or "__loader__" in obj):
        return "a module's or a function's globals (or the built-ins)"
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, types.ModuleType) and owner.__name__ in ("sys", "builtins", "gc", "os", "posix", "_imp"):
        name = getattr(obj, "__name__", "?")
        if owner.__name__ != "builtins" or name in CODE_BUILTINS:
            return f"{owner.__name__}.{name}"
    module = type(obj).__module__ or ""
    if module.startswith(("IPython", "ipykernel")):
        return f"IPython's {type(obj).__qualname__}"
    if callable(obj) and f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}" in REFLECTION:
        return f"{obj.__module__}.{obj.__qualname__}, which reads and sets attributes by the names it is given"
    if id(obj) in shortcut_ids:
        return f"the library implementation {getattr(obj, '__qualname__', obj)!r}"
    name = getattr(obj, "__name__", None)
    if callable(obj) and isinstance(name, str) and name in shortcut_names and \
            str(getattr(obj, "__module__", "") or "").startswith("torch"):
        return f"torch's built-in {name}"
    home = str(getattr(obj, "__module__", "") or "")
    if callable(obj) and home.split(".")[0] in ("tfmlib", "tfmcheck"):
        return f"the course's own {home}.{getattr(obj, '__qualname__', '?')}"
    return None


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout


@contextlib.contextmanager
def _alarms():
    """While the block runs, SIGALRM raises ``_Timeout``: installed once per object searched, since ``signal.signal``
    costs far more than the millions of attribute reads it guards (``_timed`` only arms the timer)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def time_limit(seconds: float):
    """The block, stopped by ``_Timeout`` after ``seconds``: one call's limit, for a search of one's own."""
    with _alarms():
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield


def _timed(seconds: float, fn, *args):
    """``fn(*args)``, stopped by ``_Timeout`` after ``seconds`` (inside ``_alarms``)."""
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def roots() -> dict[str, object]:
    """Everything an answer may name: the listed names of each allowed module, the allowed built-ins, literals
    of every type and the reviewed sample values (tensors, modules, arrays, Python's values)."""
    from tfmgrader import policy, scan

    found: dict[str, object] = {}
    for module in sorted(scan.POLICY.modules):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        for name in sorted(scan.POLICY.names.get(module, {})):
            if hasattr(mod, name):
                obj = getattr(mod, name)
                if not isinstance(obj, types.ModuleType):     # a listed submodule is used by its dotted name
                    found[f"{module}.{name}"] = obj
    for name in sorted(scan.ALLOWED_BUILTINS):
        if name == "display":
            continue                                          # IPython's, bound in the kernel only
        found[name] = getattr(builtins, name)
    literals = [0, 1.5, 2j, True, None, "text", b"bytes", (1, 2), [1, 2], {"a": 1}, {1, 2}, frozenset({1}),
                Ellipsis, range(3), slice(1, 2)]
    for value in literals:
        found[repr(value)] = value
    for group, values in policy.value_samples().items():
        for i, value in enumerate(values):
            found[f"<{group} sample {i}: {type(value).__qualname__}>"] = value
    found["<a function of the answer>"] = lambda x: x
    found["<a generator of the answer>"] = (i for i in range(2))
    return found


def _arguments():
    import torch
    return [(), (torch.ones(2, 2),), (1,), ("a",), ([1, 2],)]


def explore(admitted: Callable[[str], bool], depth: int = 4, start: dict[str, object] | None = None,
            limit_s: float = 1.0) -> "Closure":
    """Every route to something dangerous, following only attribute names for which ``admitted(name)`` is true;
    and the attribute names the explored objects offer (``Closure.names``)."""
    shortcut_ids, shortcut_names = _shortcut_objects()
    from tfmgrader import scan

    listed = sorted(n for n in scan.POLICY.value_attributes if admitted(n))
    queue = collections.deque((path, obj, 0) for path, obj in (start or roots()).items())
    seen: set = set()
    result = Closure()
    args = _arguments()
    while queue:
        path, obj, level = queue.popleft()
        what = danger(obj, shortcut_ids, shortcut_names)
        if what is not None:
            result.routes.append(Route(path, what))
            continue
        key = _key(obj)
        if key in seen:
            continue
        seen.add(key)
        result.explored += 1
        result.names |= _names(obj)
        dynamic = _dynamic_lookup(obj)
        if dynamic:
            result.dynamic.setdefault(dynamic, path)
        if level >= depth:
            continue
        for step, value in _steps(obj, admitted, listed, args, limit_s):
            queue.append((path + step, value, level + 1))
    return result


@dataclass
class Closure:
    routes: list[Route] = field(default_factory=list)
    explored: int = 0
    names: set[str] = field(default_factory=set)          # attribute names any explored object offers
    dynamic: dict[str, str] = field(default_factory=dict)  # type with its own __getattr__ -> a path to one


def _names(obj) -> set[str]:
    try:
        return {n for n in dir(obj) if isinstance(n, str) and not n.startswith("__")}
    except Exception:  # noqa: BLE001
        return set()


def _dynamic_lookup(obj) -> str | None:
    """'module.Type' when ``obj``'s type computes attributes it does not list (its own ``__getattr__``)."""
    for klass in type(obj).__mro__:
        own = vars(klass)
        if "__getattr__" in own or isinstance(own.get("__getattribute__"), types.FunctionType):
            return f"{klass.__module__}.{klass.__qualname__}"
    return None


def _key(obj):
    """Objects that offer the same steps share a key: a class or function is itself; a method bound to an
    instance is its type's method of that name; any other instance is its type."""
    owner = getattr(obj, "__self__", None)
    if isinstance(obj, (types.MethodType, types.BuiltinMethodType)) and owner is not None and \
            not isinstance(owner, (type, types.ModuleType)):
        return (type(owner), getattr(obj, "__name__", None))
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)) or callable(obj):
        return id(obj)
    return type(obj)


def _steps(obj, admitted, listed, args, limit_s):
    """(how, value) for each step out of ``obj``."""
    out = []
    try:
        names = set(dir(obj))
    except Exception:  # noqa: BLE001 - an object that cannot list itself offers only the listed names
        names = set()
    names = sorted({n for n in names if not n.startswith("__") and admitted(n)} | set(listed))
    with warnings.catch_warnings(), _alarms():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                out.append((f".{name}", _timed(limit_s, getattr, obj, name)))
            except BaseException:  # noqa: BLE001 - a missing or failing attribute is a dead end
                continue
        forward = FORWARDS.get(_dynamic_lookup(obj) or "")
        if forward is not None:
            with contextlib.suppress(BaseException):
                out.append((f".<{forward}>", getattr(obj, forward)))
        if callable(obj):
            for a in args:
                try:
                    with contextlib.redirect_stdout(None):
                        out.append((f"({', '.join(type(x).__name__ for x in a)})", _timed(limit_s, obj, *a)))
                except BaseException:  # noqa: BLE001
                    continue
        if not isinstance(obj, (type, str, bytes)):
            with contextlib.suppress(BaseException):
                if isinstance(obj, dict):
                    out += _timed(limit_s, lambda: [(f"[{k!r}]", v) for k, v in itertools.islice(obj.items(), 8)])
                else:
                    out.append(("[0]", _timed(limit_s, lambda: obj[0])))
            with contextlib.suppress(BaseException):
                if not isinstance(obj, dict):
                    out += _timed(limit_s, lambda: [(f"<item {i}>", v)
                                                    for i, v in enumerate(itertools.islice(iter(obj), 3))])
    return out


def kernel_names() -> set[str]:
    """The attribute names of every module a graded kernel loads and of IPython's shell, kernel and display hook:
    the names a route out of the answer's reach would use (``.sys``, ``.shell``, ``.user_ns`` ...).  Pinned with the
    reachable names, so that an answer cannot give one of its own attributes such a name and use it on a value it
    cannot prove is its own, even where a hole in the search would hand it a module."""
    import importlib

    for name in ("torch", "numpy", "scipy", "IPython", "ipykernel.ipkernel", "ipykernel.zmqshell",
                 "ipykernel.displayhook", "tfmcheck.checking", "tfmcheck.trace", "tfmcheck.feedback"):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    names = set()
    for module in list(sys.modules.values()):
        names |= _names(module)
    with contextlib.suppress(Exception):
        from ipykernel.displayhook import ZMQShellDisplayHook
        from ipykernel.ipkernel import IPythonKernel
        from ipykernel.zmqshell import ZMQInteractiveShell
        for cls in (ZMQInteractiveShell, IPythonKernel, ZMQShellDisplayHook):
            names |= _names(cls)
    with contextlib.suppress(Exception):    # what IPython's display hands a _repr_pretty_ method (refused too)
        import io

        from IPython.lib.pretty import RepresentationPrinter
        names |= _names(RepresentationPrinter(io.StringIO()))
    return {n for n in names if isinstance(n, str) and n.isidentifier()}


def main(argv=None) -> int:
    from tfmgrader import scan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--every-public-name", action="store_true",
                        help="follow every public attribute name (as if the answer defined each one)")
    parser.add_argument("--names", help="write the attribute names the explored objects, the kernel's modules and "
                                        "IPython's shell offer to this file (reachable_names.json)")
    args = parser.parse_args(argv)
    admitted = (lambda n: not n.startswith("_") and n not in scan.DANGEROUS_ATTRIBUTES) \
        if args.every_public_name else scan.admitted_on_any_value
    found = explore(admitted, args.depth)
    for r in found.routes:
        print(r)
    for kind, path in sorted(found.dynamic.items()):
        print(f"computes attributes: {kind} (e.g. {path})")
    print(f"{len(found.routes)} routes; {found.explored} objects explored to depth {args.depth}; "
          f"{len(found.names)} attribute names")
    if args.names:
        Path(args.names).write_text(json.dumps(sorted(found.names | kernel_names()), indent=0) + "\n")
    return 1 if found.routes else 0


if __name__ == "__main__":
    sys.exit(main())
