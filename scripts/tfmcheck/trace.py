"""Record and replay of the learner's results, so that grading verdicts are reached outside the learner's process.

When a notebook is graded, its test cells run twice (see the grading guide, book/appendix/grading.md):

1. **record**, in the learner's sandboxed kernel: every ``check.call(fn, ...)`` runs the learner's ``fn`` and
   appends one line to a trace file: which test cell and which call it was, a digest of the arguments, and
   the result (or the exception) in a plain, data-only encoding;
2. **replay**, in the grader's own process, where no learner code ever runs: the same trusted test cells run
   again, and every ``check.call`` returns the recorded result instead of calling anything.  The references
   and the comparisons are computed there, so tampering with the checks inside the learner's process cannot
   change a verdict.

The encoding carries only tensors (dtype, shape, raw bytes), numbers, strings, ``None`` and tuples, lists and
dicts of them; decoding never runs code (no pickle).  Global random state and any argument the learner's
function changed in place are recorded after each call and restored in the replay, so both runs build the
same inputs.  ``TRACE_ENV`` names the file; when it is unset (self-study, Validate) nothing is recorded.
"""
from __future__ import annotations

import base64
import builtins
import hashlib
import json
import os

import torch

from tfmcheck import TRACE_ENV, TRACE_NAME  # noqa: F401  (re-exported: tfmcheck.trace.TRACE_ENV)

MAX_RECORD_BYTES = 16 * 1024 * 1024

_type, _isinstance, _len, _repr = builtins.type, builtins.isinstance, builtins.len, builtins.repr
_Tensor, _Generator = torch.Tensor, torch.Generator
_Module = torch.nn.Module
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)}
_EXCEPTIONS = {e.__name__: e for e in (
    ValueError, TypeError, RuntimeError, IndexError, KeyError, AttributeError, NameError, ZeroDivisionError,
    NotImplementedError, AssertionError, ArithmeticError, OverflowError, UnboundLocalError, RecursionError,
    MemoryError, LookupError)}


class TraceError(AssertionError):
    """The recorded trace does not match what the trusted replay expects (a missing, extra or altered call)."""


# ---------------------------------------------------------------------------------------------------------
# Digests and data-only encoding
# ---------------------------------------------------------------------------------------------------------
def _tensor_bytes(t) -> bytes:
    t = t.detach().to("cpu").contiguous().reshape(-1)
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes() if t.numel() else b""


def digest(obj) -> str:
    """A hash of a call's arguments: tensors by dtype, shape and bytes; generators by state; modules by
    their tensors; functions by qualified name; plain values by their repr."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()[:32]


def _feed(h, obj) -> None:
    t = _type(obj)
    if _isinstance(obj, _Tensor):
        h.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
        h.update(_tensor_bytes(obj))
    elif obj is None or t in (bool, int, float, complex, str, bytes):
        h.update(f"{t.__name__}:{obj!r}".encode())
    elif t in (tuple, list):
        h.update(f"{t.__name__}[{_len(obj)}".encode())
        for x in obj:
            _feed(h, x)
        h.update(b"]")
    elif t is dict:
        h.update(b"{")
        for k in sorted(obj, key=_repr):
            _feed(h, k)
            _feed(h, obj[k])
        h.update(b"}")
    elif _isinstance(obj, _Generator):
        h.update(b"G")
        h.update(_tensor_bytes(obj.get_state()))
    elif _isinstance(obj, _Module):
        h.update(f"M{t.__qualname__}".encode())
        for name, value in obj.state_dict().items():
            h.update(name.encode())
            _feed(h, value)
    elif callable(obj):
        h.update(f"F{getattr(obj, '__qualname__', t.__qualname__)}".encode())
    else:
        h.update(f"O{t.__module__}.{t.__qualname__}".encode())


def encode(obj):
    """``obj`` as JSON-ready data (see the module docstring); anything else becomes an opaque type name."""
    t = _type(obj)
    if obj is None or t is bool or t is str:
        return obj if t is not str else {"s": obj[:100_000]}
    if t is int:
        return {"i": str(obj)}
    if t is float:
        return {"f": _repr(obj)}
    if t in (tuple, list):
        return {t.__name__: [encode(x) for x in obj]}
    if t is dict and all(_type(k) is str for k in obj):
        return {"dict": {k: encode(v) for k, v in obj.items()}}
    if t is _Tensor or t is torch.nn.Parameter:
        if obj.layout != torch.strided or str(obj.dtype).removeprefix("torch.") not in _DTYPES:
            return {"opaque": f"torch.Tensor with {obj.layout} layout and {obj.dtype}"}
        return {"tensor": str(obj.dtype).removeprefix("torch."), "shape": list(obj.shape),
                "data": base64.b64encode(_tensor_bytes(obj)).decode("ascii")}
    if t.__module__ == "numpy" and hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:
        return encode(obj.item())
    return {"opaque": f"{t.__module__}.{t.__qualname__}"}


class Opaque:
    """Stands in, in the replay, for a value the trace cannot carry; ``kind`` names its original type."""

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


def decode(data):
    """Inverse of ``encode``; builds only tensors and plain Python values."""
    if data is None or _type(data) is bool:
        return data
    if _type(data) is not dict or _len(data) == 0:
        raise TraceError(f"malformed value in the grading trace: {str(data)[:80]}")
    if "s" in data:
        return str(data["s"])
    if "i" in data:
        return int(data["i"])
    if "f" in data:
        return float(data["f"])
    if "tuple" in data:
        return tuple(decode(x) for x in data["tuple"])
    if "list" in data:
        return [decode(x) for x in data["list"]]
    if "dict" in data:
        return {str(k): decode(v) for k, v in data["dict"].items()}
    if "tensor" in data:
        dtype = _DTYPES.get(data["tensor"])
        shape = [int(s) for s in data["shape"]]
        raw = base64.b64decode(data["data"], validate=True)
        if dtype is None or any(s < 0 for s in shape):
            raise TraceError(f"malformed tensor in the grading trace: {data['tensor']} {shape}")
        n = 1
        for s in shape:
            n *= s
        width = torch.empty((), dtype=dtype).element_size()
        if _len(raw) != n * width:
            raise TraceError(f"tensor of shape {shape} and {dtype} in the grading trace has {_len(raw)} bytes")
        if n == 0:
            return torch.empty(shape, dtype=dtype)
        flat = torch.frombuffer(bytearray(raw), dtype=torch.int16 if dtype == torch.bfloat16 else dtype)
        return (flat.view(torch.bfloat16) if dtype == torch.bfloat16 else flat).reshape(shape).clone()
    if "opaque" in data:
        return Opaque(str(data["opaque"]))
    raise TraceError(f"malformed value in the grading trace: {str(data)[:80]}")


# ---------------------------------------------------------------------------------------------------------
# Random state and arguments changed in place
# ---------------------------------------------------------------------------------------------------------
def _generators(args) -> list:
    return [a for a in args if _isinstance(a, _Generator)]


def _tensors(args) -> list:
    return [a for a in args if _isinstance(a, _Tensor)]


def snapshot(args) -> dict:
    """Digests, before the learner's call, of the state ``capture_state`` compares with afterwards."""
    return {"torch": digest(torch.get_rng_state()), "generators": [digest(g) for g in _generators(args)],
            "tensors": [digest(t) for t in _tensors(args)]}


def capture_state(args, before) -> dict:
    """After the learner's call: the global random state, the state of generator arguments, and the new
    value of every tensor argument, where the call changed them."""
    state = {}
    rng = torch.get_rng_state()
    if digest(rng) != before["torch"]:
        state["torch"] = encode(rng)
    gens = {str(i): encode(g.get_state()) for i, g in enumerate(_generators(args))
            if digest(g) != before["generators"][i]}
    tensors = {str(i): encode(t.detach()) for i, t in enumerate(_tensors(args)) if digest(t) != before["tensors"][i]}
    if gens:
        state["generators"] = gens
    if tensors:
        state["changed"] = tensors
    return state


def restore_state(args, state) -> None:
    """In the replay: make the random state and changed arguments what they were after the learner's call."""
    if "torch" in state:
        torch.set_rng_state(decode(state["torch"]))
    generators, tensors = _generators(args), _tensors(args)
    for i, value in state.get("generators", {}).items():
        generators[int(i)].set_state(decode(value))
    for i, value in state.get("changed", {}).items():
        target, new = tensors[int(i)], decode(value)
        if _type(new) is not _Tensor or new.shape != target.shape or new.dtype != target.dtype:
            raise TraceError("the record of an argument changed in place does not fit that argument")
        with torch.no_grad():
            target.copy_(new)


# ---------------------------------------------------------------------------------------------------------
# The two modes
# ---------------------------------------------------------------------------------------------------------
class Recorder:
    """Appends one JSON line per learner call to the trace file (record mode, in the learner's kernel)."""

    replaying = False

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.cell, self.n = None, 0

    def begin(self, cell: str) -> None:
        self.cell, self.n = str(cell), 0

    def record(self, args, run):
        """``run()`` calls the learner's function; its result (or exception) is written, then returned
        (or re-raised)."""
        key, self.n = self.n, self.n + 1
        flat = _flatten(args)
        line = {"cell": self.cell, "n": key, "args": digest(args)}
        before = snapshot(flat)
        try:
            result = run()
        except Exception as err:
            line.update(raised=_type(err).__name__, message=str(err)[:4000])
            self._write(line, flat, before)
            raise
        line["value"] = encode(result)
        self._write(line, flat, before)
        return result

    def _write(self, line, flat, before) -> None:
        line["state"] = capture_state(flat, before)
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        if _len(data) > MAX_RECORD_BYTES:
            line.pop("value", None)
            line.update(raised="TraceError", message="the result is too large to check")
            data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        os.write(self.fd, data)


class Replayer:
    """Serves the recorded results to the trusted test cells (replay mode, in the grader's process)."""

    replaying = True

    def __init__(self, records: dict, outside_held: dict | None = None):
        self.records, self.outside_held = records, outside_held or {}
        self.cell, self.n = None, 0

    def begin(self, cell: str) -> None:
        self.cell, self.n = str(cell), 0

    def record(self, args, run=None):
        key, self.n = self.n, self.n + 1
        rec = self.records.get((self.cell, key))
        if rec is None:
            raise TraceError("no result was recorded for this call of your function: the notebook stopped or "
                             "was changed before it ran")
        flat = _flatten(args)
        if rec.get("args") != digest(args):
            raise TraceError("the arguments of this call differ from those your notebook passed: something "
                             "changed the test's inputs")
        restore_state(flat, rec.get("state", {}))
        if "raised" in rec:
            raise _EXCEPTIONS.get(rec["raised"], RuntimeError)(
                f"{rec['raised']}: {rec.get('message', '')}" if rec["raised"] not in _EXCEPTIONS
                else rec.get("message", ""))
        value = decode(rec["value"])
        if _type(args) is tuple and _len(args) == 2 and _type(args[1]) is str and args[1] == "peak_memory" \
                and self.cell in self.outside_held:
            value = _held_at_least(value, self.outside_held[self.cell])
        return value


def _held_at_least(value, held: int):
    """A recorded ``peak_memory`` result ``(result, usage)`` whose ``held_bytes`` is at least ``held``, what the
    grader measured from outside the kernel while the test cell ran (``tfmgrader.outside_memory``).  A malformed
    or unmeasured (-1) usage is left as it is: the test fails it anyway."""
    if _type(value) is not tuple or _len(value) != 2 or _type(value[1]) is not dict:
        return value
    usage = value[1]
    if _type(usage.get("held_bytes")) is not int or usage["held_bytes"] < 0:
        return value
    return value[0], {**usage, "held_bytes": max(usage["held_bytes"], int(held))}


def _flatten(args) -> list:
    out = []
    for a in args:
        if _type(a) in (tuple, list):
            out += _flatten(a)
        elif _type(a) is dict:
            out += _flatten(list(a.values()))
        else:
            out.append(a)
    return out


def load(path, max_bytes: int = 256 * 1024 * 1024) -> tuple[dict, list[str]]:
    """Read a trace file: ``({(cell, n): record}, problems)`` (see ``loads``)."""
    if not os.path.exists(path):
        return {}, []
    if os.path.getsize(path) > max_bytes:
        return {}, [f"the grading trace is larger than {max_bytes} bytes"]
    with open(path, "rb") as f:
        return loads(f.read())


def loads(data: bytes) -> tuple[dict, list[str]]:
    """Parse a trace: ``({(cell, n): record}, problems)``.  A malformed line or a second record for the
    same call is a problem (it never happens in an honest run); the first record of a call is kept."""
    records, problems = {}, []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            rec = json.loads(raw)
            key = (str(rec["cell"]), int(rec["n"]))
        except (ValueError, KeyError, TypeError):
            problems.append(f"line {number} of the grading trace is malformed")
            continue
        if key in records:
            problems.append(f"the result of call {key[1]} in test '{key[0]}' was recorded twice")
            continue
        records[key] = rec
    return records, problems
