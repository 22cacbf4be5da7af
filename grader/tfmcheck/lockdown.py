"""What the graded kernel takes away from every thread before any learner code runs: the operators that expose a
sparse tensor's index and value tensors as live views.

Round 14 of the blind red team wrote a validated sparse tensor's indices through ``s.indices()[0, 0] = i`` and then
let ``dense.add_(s)`` write, and a CSR ``mm`` read, wherever those indices pointed: memory the answer chose, which
reached any object in the process.  No exercise needs sparse tensors, so their internals are refused at PyTorch's
dispatcher, for every caller and every thread (``torch.library``), not only for the names the scan reads.

    import tfmcheck.lockdown      # installs once per process (the grading kernel's start, tfmcheck.checking)

PyTorch's fused optimizer kernels, which trust the sizes of the optimizer's state (round 20), are refused the same
way, for every caller, from the start.

The same mechanism takes away, in a graded kernel, the library implementations an exercise asks the learner to
write (``refuse``): once a test has forbidden a shortcut group (``tfmcheck.checking.call``), its operators are
refused at the dispatcher for the rest of the kernel's life, on every thread and under every transform (a thread
started with ``_thread``, a callback, ``torch.vmap``, autograd), and its Python-level entry points (PyTorch's
``multi_head_attention_forward`` computes attention with basic operators) have their code replaced, for every
reference to them.  The tests' own references are not in that kernel (``tfmcheck.withheld``): the verdicts are
reached in the grader's process, where nothing is refused.
"""
from __future__ import annotations

import sys

import torch

#: aten operators that hand out, or resize, a sparse tensor's internal tensors.
SPARSE_INTERNALS = ("indices", "values", "_indices", "_values", "crow_indices", "col_indices", "ccol_indices",
                    "row_indices", "sparse_resize_", "sparse_resize_and_clear_", "_coalesced_")
#: The dispatch keys of sparse tensors on the CPU (COO, and CSR/CSC/BSR/BSC).
SPARSE_KEYS = ("SparseCPU", "SparseCsrCPU")

_LIBRARY = []       # kept alive: a torch.library.Library's registrations end when it is collected


class SparseRefused(RuntimeError):
    pass


def _refuse(*args, **kwargs):
    raise SparseRefused("sparse tensors' indices and values are not available in graded answers "
                        "(no exercise needs sparse tensors); use dense tensors")


def install() -> None:
    """Register ``_refuse`` for every operator of ``SPARSE_INTERNALS`` on every key of ``SPARSE_KEYS`` (once)."""
    if _LIBRARY:
        return
    import warnings

    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # "Overriding a previously registered kernel": the point
        for op in SPARSE_INTERNALS:
            for key in SPARSE_KEYS:
                library.impl(op, _refuse, key)
    _LIBRARY.append(library)


#: Every dispatch key an operator's kernel can be registered on that a CPU or CUDA call, or a functorch transform of
#: it, may reach (a key an operator does not accept is skipped).
REFUSE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "CUDA", "AutogradCPU", "AutogradCUDA",
               "FuncTorchBatched", "Batched", "FuncTorchVmapMode", "FuncTorchGradWrapper", "Functionalize",
               "ZeroTensor", "Conjugate", "Negative", "AutocastCPU", "AutocastCUDA", "ADInplaceOrView")

_REFUSED = set()    # the operators and functions refused so far in this process


class Refused(RuntimeError):
    pass


WRITE_YOUR_OWN = ("is not available while this notebook is graded: the exercise asks you to write your own (use "
                  "basic tensor operations: matmul, softmax, sum, ...)")


def _refused_operator(name, why=WRITE_YOUR_OWN):
    def refused(*args, **kwargs):
        raise Refused(f"torch's {name} {why}")
    return refused


def _refused_code():
    def refused(*args, **kwargs):
        raise RuntimeError("this PyTorch implementation is not available while this notebook is graded: the "
                           "exercise asks you to write your own (use basic tensor operations: matmul, softmax, ...)")
    return refused.__code__


def refuse(operators=(), functions=(), why: str = WRITE_YOUR_OWN) -> None:
    """For the rest of this process: every overload of the aten ``operators`` (names; those PyTorch does not have
    are skipped) raises ``Refused`` on every key of ``REFUSE_KEYS``, and every Python function of ``functions``
    (plain functions without a closure) runs code that raises instead of its own."""
    import warnings

    operators = [op for op in operators if op not in _REFUSED and getattr(torch.ops.aten, op, None) is not None]
    library = torch.library.Library("aten", "IMPL") if operators else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in operators:
            packet = getattr(torch.ops.aten, op)
            _REFUSED.add(op)
            for overload in packet.overloads():
                name = op if overload == "default" else f"{op}.{overload}"
                for key in REFUSE_KEYS:
                    try:
                        library.impl(name, _refused_operator(op, why), key)
                    except RuntimeError:    # a key this operator cannot take a kernel on
                        pass
    if library is not None:
        _LIBRARY.append(library)
    code = _refused_code()
    for fn in functions:
        if fn in _REFUSED:
            continue
        if fn.__closure__:
            raise ValueError(f"refuse: {fn.__qualname__} has a closure; its code cannot be replaced")
        fn.__code__ = code.replace(co_name=fn.__code__.co_name, co_qualname=fn.__code__.co_qualname)
        _REFUSED.add(fn)


#: PyTorch's fused optimizer kernels: on the CPU they walk each state tensor (``exp_avg``, ``momentum_buffer``) for as
#: many elements as the parameter has, without checking its size; an optimizer state replaced by a shorter tensor read
#: and wrote past it (red-team round 20).  No exercise needs them (the plain ``for``-loop optimizers check sizes).
FUSED_OPTIMIZERS = ("_fused_adam", "_fused_adam_", "_fused_adamw", "_fused_adamw_", "_fused_sgd", "_fused_sgd_",
                    "_fused_adagrad", "_fused_adagrad_")


install()
refuse(FUSED_OPTIMIZERS, why="is not available in the course's notebooks (a fused optimizer trusts the sizes of its "
                             "state); use the optimizer without fused=True")


# --- raw memory ------------------------------------------------------------------------------------------------
#: Round 22 of the blind red team read and wrote a NumPy array of Python objects as 64-bit integers:
#: ``torch.asarray(objects.data, dtype=torch.int64)`` shares the memory of any object with a buffer (a memoryview of
#: the array's pointers, ``bytes``) whatever its format, writable even when the buffer is read-only.  Planting
#: pointers there forged objects, and from them anything in the process.  In a graded kernel the constructors that
#: can share memory (``guard_raw_memory``) take tensors, numbers, sequences and NumPy arrays of numbers only.
SHARING_CONSTRUCTORS = ("asarray", "as_tensor", "frombuffer")
#: The audit event a refusal raises: the graded kernel's audit hook reports it, and the submission is flagged.
RAW_MEMORY_EVENT = "tfmcheck.raw_memory"


def raw_memory(obj) -> bool:
    """Whether ``obj`` would hand over memory that is not a tensor's or a numeric array's: an object with a buffer
    (``bytes``, ``bytearray``, ``memoryview``, ``array.array``) or a NumPy array or scalar of Python objects."""
    import numpy

    if isinstance(obj, torch.Tensor) or type(obj) in (int, float, complex, bool, list, tuple):
        return False
    if isinstance(obj, (numpy.ndarray, numpy.generic)):
        return obj.dtype.hasobject
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


def _sharing_refused(name, constructor):
    def constructor_(obj, *args, **kwargs):
        if name == "frombuffer" or raw_memory(obj):
            sys.audit(RAW_MEMORY_EVENT, f"torch.{name} of {type(obj).__name__}")    # the grader flags it
            raise Refused(f"torch.{name} of {type(obj).__name__} is not available while this notebook is graded (it "
                          "would share raw memory); build tensors from numbers, lists, tensors or NumPy arrays of "
                          "numbers")
        return constructor(obj, *args, **kwargs)
    constructor_.__name__ = constructor_.__qualname__ = name
    constructor_.__doc__ = constructor.__doc__
    return constructor_


def guard_raw_memory() -> None:
    """For the rest of this process (a graded kernel, before any cell runs): ``torch.asarray`` and its relatives refuse
    raw memory (``raw_memory``).  ``numpy.ndarray`` (which lays an array over a buffer) is a type the scan lets an
    answer test against only, and ``numpy.frombuffer`` is refused by the scan."""
    for name in SHARING_CONSTRUCTORS:
        constructor = getattr(torch, name, None)
        if constructor is not None and getattr(constructor, "__name__", "") == name and name not in _REFUSED:
            setattr(torch, name, _sharing_refused(name, constructor))
            _REFUSED.add(name)
