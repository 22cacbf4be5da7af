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
dicts of them; decoding never runs code (no pickle).  Nothing in the trace reaches the replay's inputs: the
replay builds them from the trusted cells alone, and a record is used only as the result being judged.  So the
random state is put back after every call of the learner's function, in every mode (``tfmcheck.checking``'s
``call``, ``RandomStateKept``), and a record saying that an input tensor changed in place fails that call
instead of being copied into the test's tensors.  Objects of any type but the few listed are never asked
anything (no method called, no attribute read): they are decided by their exact type and become an opaque
value.  ``TRACE_ENV`` names the file; when it is unset (self-study, Validate) nothing is recorded.
"""
from __future__ import annotations

import base64
import builtins
import hashlib
import json
import os
import random
import types

import numpy
import torch

from tfmcheck import TRACE_ENV, TRACE_NAME  # noqa: F401  (re-exported: tfmcheck.trace.TRACE_ENV)

MAX_RECORD_BYTES = 16 * 1024 * 1024

_type, _isinstance, _len, _repr = builtins.type, builtins.isinstance, builtins.len, builtins.repr
_Tensor, _Generator = torch.Tensor, torch.Generator
_Parameter = torch.nn.Parameter
_TENSOR_TYPES = (_Tensor, _Parameter)
_NUMBER_TYPES = (bool, int, float, complex, str, bytes)
#: NumPy's scalar types, decided by exact type: their ``item`` is NumPy's own (a subclass is opaque).
_NUMPY_SCALARS = (numpy.bool_, numpy.int8, numpy.int16, numpy.int32, numpy.int64, numpy.uint8, numpy.uint16,
                  numpy.uint32, numpy.uint64, numpy.float16, numpy.float32, numpy.float64)
_scalar_item, _ndarray, _array_item = numpy.generic.item, numpy.ndarray, numpy.ndarray.item
_ndarray_ndim = numpy.ndarray.ndim.__get__
_type_module, _type_qualname = type.__dict__["__module__"].__get__, type.__dict__["__qualname__"].__get__
_torch_rng = (torch.get_rng_state, torch.set_rng_state)
_python_rng = (random.getstate, random.setstate)
_numpy_rng = (numpy.random.get_state, numpy.random.set_state)
_generator_state = (torch.Generator.get_state, torch.Generator.set_state)
_type_name = type.__dict__["__name__"].__get__
_function_qualname = types.FunctionType.__dict__["__qualname__"].__get__
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
    if t in _TENSOR_TYPES:
        h.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
        h.update(_tensor_bytes(obj))
    elif obj is None or t in _NUMBER_TYPES:
        h.update(f"{t.__name__}:{obj!r}".encode())
    elif t in (tuple, list):
        h.update(f"{t.__name__}[{_len(obj)}".encode())
        for x in obj:
            _feed(h, x)
        h.update(b"]")
    elif t is dict and all(_type(k) is str for k in obj):
        h.update(b"{")
        for k in sorted(obj):
            _feed(h, k)
            _feed(h, obj[k])
        h.update(b"}")
    elif t is _Generator:
        h.update(b"G")
        h.update(_tensor_bytes(obj.get_state()))
    elif t is torch.dtype:
        h.update(f"D{obj!r}".encode())
    elif t is types.FunctionType:
        h.update(f"F{_function_qualname(obj)}".encode())
    elif t is types.BuiltinFunctionType:
        h.update(f"B{obj.__qualname__}".encode())
    else:       # never asked anything: its type's own name, read past any metaclass
        h.update(f"O{_type_module(t)}.{_type_qualname(t)}".encode())


def is_plain(obj, depth=0) -> bool:
    """Whether ``encode`` records ``obj`` whole, with no opaque part: None, numbers, strings, strided tensors of the
    usual dtypes, NumPy scalars, and tuples, lists and string-keyed dicts of them, each by exact type.  Asks ``obj``
    nothing but what ``encode`` asks a tensor (its layout and dtype)."""
    t = _type(obj)
    if depth > 32:
        return False
    if obj is None or t is bool or t is str or t is int or t is float:
        return True
    if t is tuple or t is list:
        return all(is_plain(x, depth + 1) for x in obj)
    if t is dict:
        return all(_type(k) is str and is_plain(v, depth + 1) for k, v in obj.items())
    if t in _TENSOR_TYPES:
        return obj.layout == torch.strided and str(obj.dtype).removeprefix("torch.") in _DTYPES
    return t in _NUMPY_SCALARS or (t is _ndarray and _ndarray_ndim(obj) == 0)


def opaque_part(obj, depth=0) -> str:
    """``module.qualname`` of the type of ``obj``'s first part that ``is_plain`` refuses (``obj`` itself when it is not
    a tuple, list or dict), read with ``type``'s own getters: nothing of the object's is asked."""
    t = _type(obj)
    if depth <= 32 and (t is tuple or t is list or t is dict):
        for part in (obj.values() if t is dict else obj):
            if not is_plain(part, depth + 1):
                return opaque_part(part, depth + 1)
    return f"{_type_module(t)}.{_type_qualname(t)}"


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
    if t in _TENSOR_TYPES:
        if obj.layout != torch.strided or str(obj.dtype).removeprefix("torch.") not in _DTYPES:
            return {"opaque": f"torch.Tensor with {obj.layout} layout and {obj.dtype}"}
        return {"tensor": str(obj.dtype).removeprefix("torch."), "shape": list(obj.shape),
                "data": base64.b64encode(_tensor_bytes(obj)).decode("ascii")}
    if t in _NUMPY_SCALARS or (t is _ndarray and _ndarray_ndim(obj) == 0):
        return encode(_scalar_item(obj) if t is not _ndarray else _array_item(obj))    # NumPy's own item
    return {"opaque": f"{_type_module(t)}.{_type_qualname(t)}"}


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
    return [a for a in args if _type(a) is _Generator]


def _tensors(args) -> list:
    return [a for a in args if _type(a) in _TENSOR_TYPES]


def changed_input_message(shape) -> str:
    """What a learner reads when their function changed one of its input tensors in place."""
    return (f"your function changed one of its input tensors in place (shape {tuple(shape)}): compute on new "
            f"tensors (x = x / 2, not x /= 2 or x.div_(2)), or on a copy (x.clone())")


class InputChanged(AssertionError):
    """The learner's function changed one of the test's input tensors in place: that call fails."""


class RandomStateKept:
    """Around a call of the learner's function, in every mode: the random state the test cell draws its next
    inputs from (PyTorch's, Python's and NumPy's global generators, and every ``torch.Generator`` argument) is put
    back as it was before the call, so the test's later inputs never depend on what the function drew, and the
    replay, which calls nothing, builds the same inputs without taking any state from the trace.  ``args``: the
    call's arguments, flattened (``_flatten``); generators are found by exact type and asked nothing else."""

    def __init__(self, args):
        self.generators = _generators(args)

    def __enter__(self):
        self.saved = (_torch_rng[0](), _python_rng[0](), _numpy_rng[0](),
                      [_generator_state[0](g) for g in self.generators])
        return self

    def __exit__(self, *exc):
        rng, py, np_state, gens = self.saved
        _torch_rng[1](rng)
        _python_rng[1](py)
        _numpy_rng[1](np_state)
        for g, state in zip(self.generators, gens):
            _generator_state[1](g, state)
        return False


def snapshot(args) -> dict:
    """Digests, before the learner's call, of the tensor arguments ``capture_state`` compares with afterwards."""
    with _plain():
        return {"tensors": [digest(t) for t in _tensors(args)]}


def capture_state(args, before) -> dict:
    """After the learner's call (before anything else of it runs: its result is encoded afterwards): which tensor
    arguments it changed in place, ``{"changed": {index: shape}}``, or ``{}``."""
    with _plain():
        changed = {str(i): list(t.shape) for i, t in enumerate(_tensors(args)) if digest(t) != before["tensors"][i]}
    return {"changed": changed} if changed else {}


def judge_state(args, state) -> None:
    """In the replay: a record saying that an input tensor changed fails the call.  Nothing of the record is
    copied into the test's inputs (the replay's own are never changed); the random state is not in the record."""
    if _type(state) is not dict:
        raise TraceError("malformed state in the grading trace")
    changed = state.get("changed")
    if changed:
        tensors = _tensors(args)
        first = next(iter(changed)) if _type(changed) is dict else None
        shape = tensors[int(first)].shape if _type(first) is str and first.isdigit() and int(first) < _len(tensors) \
            else ()
        raise InputChanged(changed_input_message(shape))


def _exception_text(err) -> str:
    """The message of an exception the learner's function raised (their own ``__str__`` may run: after the state
    capture, and what it returns is kept only as text)."""
    text = str(err)
    return str.__getitem__(text, slice(0, 4000)) if _isinstance(text, str) else ""


def _no_dispatch():
    return torch._C._DisableTorchDispatch()


def _plain():
    """No torch function mode or tensor subclass handler, and no dispatch mode, runs while the trace reads
    tensors: what a learner's function left active never sees or changes what is recorded."""
    return _Both(torch._C.DisableTorchFunction(), _no_dispatch())


class _Both:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __enter__(self):
        self.a.__enter__()
        self.b.__enter__()
        return self

    def __exit__(self, *exc):
        self.b.__exit__(*exc)
        self.a.__exit__(*exc)
        return False


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
        with _plain():
            line = {"cell": self.cell, "n": key, "args": digest(args)}
        before = snapshot(flat)
        try:
            result = run()
        except Exception as err:
            line["state"] = capture_state(flat, before)
            line.update(raised=_type_name(_type(err)), message=_exception_text(err))
            self._write(line)
            raise
        line["state"] = capture_state(flat, before)     # before the result is looked at
        with _plain():
            line["value"] = encode(result)
        self._write(line)
        return result

    def _write(self, line) -> None:
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
        if any(_type(a) is Opaque for a in flat):
            raise TraceError("this call's arguments include a value your function returned earlier that is not a "
                             "tensor, a number or a container of them")
        if rec.get("args") != digest(args):
            raise TraceError("the arguments of this call differ from those your notebook passed: something "
                             "changed the test's inputs")
        judge_state(flat, rec.get("state", {}))
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
