"""What the graded kernel takes away from every thread before any learner code runs: the operators that expose a
sparse tensor's index and value tensors as live views.

Round 14 of the blind red team wrote a validated sparse tensor's indices through ``s.indices()[0, 0] = i`` and then
let ``dense.add_(s)`` write, and a CSR ``mm`` read, wherever those indices pointed: memory the answer chose, which
reached any object in the process.  No exercise needs sparse tensors, so their internals are refused at PyTorch's
dispatcher, for every caller and every thread (``torch.library``), not only for the names the scan reads.

    import tfmcheck.lockdown      # installs once per process (the grading kernel's start, tfmcheck.checking)
"""
from __future__ import annotations

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


install()
