"""What the graded kernel holds in place of references and diagnoses: nothing worth stealing.

When a notebook is graded, its test cells run in the learner's sandboxed kernel only to *record* what the learner's
functions return (``tfmcheck.trace``); every expected value, comparison and named mistake is computed afterwards in
the grader's own process, on that record (``tfmgrader.verify``).  So in the kernel ``check.ref``'s references, the
feedback catalogue's builders and the course library ``tfmlib`` are not there at all (the sandbox covers their
folders), and what a test cell computes from them is ``WITHHELD``: an inert value that every operation, call,
attribute and torch function maps to itself, and that every check accepts without looking.  A learner's code that
reached it would hold nothing that computes anything.
"""
from __future__ import annotations


class Withheld:
    """An inert value: ``w.anything(...)[i] + 1 == w``; torch functions given one return it too."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<withheld: computed by the grader, outside this kernel>"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __getitem__(self, key):
        return self

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True

    def __index__(self) -> int:
        return 0

    __int__ = __index__

    def __float__(self) -> float:
        return 0.0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return WITHHELD

    def _same(self, *args):
        return self

    (__add__, __radd__, __sub__, __rsub__, __mul__, __rmul__, __truediv__, __rtruediv__, __floordiv__,
     __rfloordiv__, __mod__, __rmod__, __pow__, __rpow__, __matmul__, __rmatmul__, __neg__, __pos__, __abs__,
     __invert__, __and__, __rand__, __or__, __ror__, __xor__, __rxor__, __lt__, __le__, __gt__, __ge__) = (_same,) * 30

    def __eq__(self, other):
        return self

    def __ne__(self, other):
        return self

    __hash__ = object.__hash__


WITHHELD = Withheld()
