"""What an answer may use from a library: the reviewed allow-lists of ``allowlist.json``, and their pin.

``allowlist.json`` is data, reviewed like code: the modules an answer may import, the names it may use from
each (in groups, each with a one-line reason), the attributes it may use on values (tensors, modules,
arrays, Python's values), and, for clearer messages only, names that are refused and why.  Nothing is
admitted because it exists in a module: a name that is not listed is flagged by the scan.

``allowlist.lock.json`` pins what the list admits in the installed packages: for every listed name, what it
refers to (its type and qualified name, or its value), and for every value attribute, which of the reviewed
value types have it.  ``tests/tfmgrader/test_scan_policy.py`` fails when an upgrade of torch, NumPy, SciPy or Python
changes that, so widening the list, on purpose or by an upgrade, is always a reviewed change::

    python grader/tfmgrader/policy.py --check        # does the installed environment match the lock?
    python grader/tfmgrader/policy.py --write-lock   # after reviewing a change to the list or an upgrade

The library shortcuts (what the exercises ask the learner to write) are not here: they live once, in
``tfmcheck.checking.SHORTCUT_POLICY``, which feeds both the in-kernel check and the scan.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

ALLOWLIST = Path(__file__).with_name("allowlist.json")
LOCK = Path(__file__).with_name("allowlist.lock.json")
#: Sections of the lock that depend on the Python version rather than on the pinned packages.
STDLIB_MODULES = {"__future__", "cmath", "collections", "dataclasses", "fractions", "functools", "itertools",
                  "math", "numbers", "random", "statistics", "typing", "warnings"}


@dataclass(frozen=True)
class Policy:
    modules: dict[str, str]                       # module -> why it may be imported
    names: dict[str, dict[str, str]]              # module -> {name: the reason of its group}
    value_attributes: dict[str, str]              # attribute -> the reason of its group
    refused: dict[str, str] = field(default_factory=dict)             # 'module.name' -> why it is refused
    refused_attributes: dict[str, str] = field(default_factory=dict)  # attribute -> why it is refused

    def admits(self, module: str, name: str) -> bool:
        """``module.name`` is listed (a name of the module's list, or an allowed submodule)."""
        return name in self.names.get(module, {}) or f"{module}.{name}" in self.modules


class PolicyError(ValueError):
    """allowlist.json is malformed: the scan cannot start (it fails closed)."""


def load(path: Path = ALLOWLIST) -> Policy:
    """Read and check ``allowlist.json``; raises PolicyError when it is malformed."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise PolicyError(f"cannot read the allow-list {path}: {err}") from err
    modules = dict(data.get("modules", {}))
    names: dict[str, dict[str, str]] = {m: {} for m in modules}
    for group in data.get("allow", []):
        module, reason = group.get("module"), group.get("reason", "").strip()
        if module not in modules:
            raise PolicyError(f"allow-list group for '{module}': that module is not under 'modules'")
        if not reason:
            raise PolicyError(f"allow-list group for '{module}' has no reason")
        for name in group["names"]:
            if name.startswith("_"):
                raise PolicyError(f"allow-list: '{module}.{name}' is private; private names are never admitted")
            names[module][name] = reason
    values: dict[str, str] = {}
    for group in data.get("value_attributes", []):
        if not group.get("reason", "").strip():
            raise PolicyError(f"value-attribute group '{group.get('on')}' has no reason")
        for name in group["names"]:
            if name.startswith("_"):
                raise PolicyError(f"value attribute '{name}' is private; private names are never admitted")
            values[name] = group["reason"]
    refused = {n: g["reason"] for g in data.get("refused", []) for n in g["names"]}
    refused_attributes = {n: g["reason"] for g in data.get("refused_attributes", []) for n in g["names"]}
    clash = sorted(n for n in refused if n.rpartition(".")[0] in names and names[n.rpartition(".")[0]].get(
        n.rpartition(".")[2])) + sorted(set(values) & set(refused_attributes))
    if clash:
        raise PolicyError(f"allow-list: names both allowed and refused: {clash}")
    return Policy(modules, names, values, refused, refused_attributes)


# --- the pin ----------------------------------------------------------------------------------------------
def value_samples() -> dict[str, list]:
    """Examples of the values an answer works with, by the group of ``value_attributes`` that covers them."""
    import collections
    import dataclasses
    import functools

    import numpy
    import torch

    nn = torch.nn
    return {
        "tensors": [torch.Tensor, torch.randn(1), nn.Parameter(torch.zeros(1)), torch.Size([1]), torch.float32,
                    torch.finfo(torch.float32), torch.iinfo(torch.int64), torch.device("cpu"), torch.Generator(),
                    torch.zeros(2).max(0), torch.linalg.lstsq(torch.eye(2), torch.ones(2, 1))],
        "modules": [nn.Module(), nn.Linear(1, 1), nn.Embedding(1, 1), nn.Dropout(), nn.ModuleList(), nn.ModuleDict(),
                    nn.ParameterList(), nn.Sequential(), nn.ReLU(), nn.GELU(), nn.Softmax(dim=-1),
                    torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)],
        "arrays": [numpy.ndarray, numpy.zeros(1), numpy.float64(1.0), numpy.dtype("float64")],
        "python": [int, float, complex, bool, str, bytes, list, tuple, dict, set, frozenset, range(1), slice(1),
                   Exception("x"), property(), functools.partial(print), collections.OrderedDict(),
                   collections.defaultdict(list), collections.Counter(), collections.deque(),
                   collections.namedtuple("T", "a b")(1, 2),
                   *dataclasses.fields(dataclasses.make_dataclass("D", ["a"]))],
    }


def library_private_attributes() -> set[str]:
    """Private (single-underscore) attribute names the reviewed value types have: an answer may not use
    these even where it defines an attribute of the same name (``self._typed_storage = …`` would otherwise
    let ``tensor._typed_storage()`` through)."""
    return {a for objs in value_samples().values() for o in objs for a in dir(o)
            if a.startswith("_") and not a.startswith("__")}


def describe(obj) -> str:
    """What a name refers to, in a form that changes when the library changes it."""
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if isinstance(name, str) and (callable(obj) or isinstance(obj, type)):
        return f"{kind} {getattr(obj, '__module__', None)}.{name}"
    return f"{kind} {re.sub(r' at 0x[0-9a-fA-F]+', '', repr(obj))}"     # no memory addresses


def resolve(policy: Policy) -> dict:
    """The snapshot the lock holds: every admitted (module, name) -> ``describe`` of the object, and every
    value attribute -> the reviewed value types that have it.  A name that does not resolve is '<missing>'."""
    modules: dict[str, dict[str, str]] = {}
    for module in sorted(policy.modules):
        try:
            mod = importlib.import_module(module)
        except ImportError as err:
            modules[module] = {"": f"<cannot import: {err}>"}
            continue
        entry = {}
        for name in sorted(policy.names.get(module, {})):
            entry[name] = describe(getattr(mod, name)) if hasattr(mod, name) else "<missing>"
        modules[module] = entry
    samples = {group: [(o, set(dir(o))) for o in objs] for group, objs in value_samples().items()}
    values = {}
    for name in sorted(policy.value_attributes):
        owners = sorted({f"{group}:{o.__qualname__ if isinstance(o, type) else type(o).__qualname__}"
                         for group, objs in samples.items() for o, names in objs if name in names})
        values[name] = owners or ["<missing>"]
    return {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "modules": modules,
            "value_attributes": values}


def differences(lock: dict, now: dict) -> list[str]:
    """Lines saying where ``now`` differs from ``lock``; the standard library's sections and the value
    attributes (whose Python types change with Python) only when both were made with the same Python."""
    same_python = lock.get("python") == now["python"]
    out = []
    for module in sorted(set(lock.get("modules", {})) | set(now["modules"])):
        if module.split(".")[0] in STDLIB_MODULES and not same_python:
            continue
        old, new = lock.get("modules", {}).get(module, {}), now["modules"].get(module, {})
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                out.append(f"{module}.{name}: locked {old.get(name, '<not listed>')!r}, "
                           f"now {new.get(name, '<not listed>')!r}")
    if same_python:
        old, new = lock.get("value_attributes", {}), now["value_attributes"]
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                out.append(f"value attribute {name}: locked {old.get(name, '<not listed>')}, "
                           f"now {new.get(name, '<not listed>')}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-lock", action="store_true", help="write allowlist.lock.json (after a review)")
    parser.add_argument("--check", action="store_true", help="compare the environment with the lock")
    args = parser.parse_args(argv)
    now = resolve(load())
    if args.write_lock:
        LOCK.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {LOCK}")
        return 0
    diff = differences(json.loads(LOCK.read_text()), now)
    print("\n".join(diff) if diff else "the installed packages admit exactly what the lock pins")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
