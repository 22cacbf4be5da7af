"""The catalogue as data: a mistake is one entry, bound to the trusted builder of its graded function.

An entry (``mistake(...)``) is a name, one plain sentence, the line of the formula involved, and how to compute
what the mistake returns: keyword flags of the function's builder (``mistake("no_tanh", "...", tanh=False)``),
or a small lambda of the function's inputs.  ``graded(builder, line, *entries, **words)`` binds the entries of
one graded function to its builder and its formula line, and fills the ``$word``s of the sentences (``$d``:
d_k, d_h, ...): that is how a ``Family`` (families.py) declares a mistake once for several functions.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from string import Template
from typing import Callable

import torch

import tfmcheck.checking as check

# The copies tfmcheck.checking took when the setup cell imported it, before any learner code ran; the other
# operations are bound when a test cell first imports this package.  (When a notebook is graded, the verdicts
# are reached again in the grader's process, where no learner code runs: grader/tfmcheck/trace.py.)
_Tensor, _type, _allclose = check._Tensor, check._type, check._allclose
_softmax, _matmul = check.ref.softmax, check.ref.matmul
_tanh, _exp, _sqrt, _stack, _zeros, _ones, _arange = (
    torch.tanh, torch.exp, torch.sqrt, torch.stack, torch.zeros, torch.ones, torch.arange)


@dataclass(frozen=True)
class Mistake:
    """One catalogued mistake of one graded function."""
    name: str          # short id, e.g. "no_scaling"
    sentence: str      # one plain sentence that says what the answer does
    line: str          # the line of the formula involved, as the exercise writes it
    compute: Callable  # inputs (keyword arguments) -> what this mistake returns (or a list of alternatives)


class Alternatives(list):
    """Several results one mistake can give (e.g. with or without a later, correct, step)."""


class any_of(tuple):
    """A flag's value that stands for each of ``values`` in turn: one alternative result per value."""

    def __new__(cls, *values):
        return super().__new__(cls, values)


def each(result, f):
    """``f`` of ``result``, or of each of its Alternatives."""
    return Alternatives(f(r) for r in result) if isinstance(result, Alternatives) else f(result)


def either(*results):
    """Alternatives: each of ``results`` in order (an Alternatives among them counts as its items)."""
    return Alternatives(r for result in results for r in (result if isinstance(result, Alternatives) else [result]))


@dataclass(frozen=True)
class Entry:
    """One mistake as data, not yet bound to a graded function (see ``mistake``)."""
    name: str
    sentence: str
    line: str | None = None               # None: the function's formula line
    how: Callable | None = None           # a lambda of the inputs; None: the builder with ``flags``
    flags: dict = field(default_factory=dict)
    only_if: Callable | None = None       # inputs -> False where the mistake cannot show (no mask, ...)

    def but(self, *, name=None, sentence=None, line=None, only_if=None, **flags):
        """This entry as one function names, says or computes it (a family's entry, in that function's words)."""
        return replace(self, name=name or self.name, sentence=sentence or self.sentence, line=line or self.line,
                       only_if=only_if or self.only_if, flags={**self.flags, **flags})


def mistake(name, sentence, how=None, *, line=None, only_if=None, **flags) -> Entry:
    """One entry: what the answer does (``sentence``), the line involved (default: the function's), and what it
    returns: ``how(**inputs)``, or the function's builder called on the inputs with keyword ``flags`` (a flag
    given as ``any_of(a, b)``: one alternative per value).  ``only_if(**inputs)`` False: nothing to match."""
    return Entry(name, sentence, line, how, flags, only_if)


class Family:
    """Entries several graded functions share, declared once: ``FAMILY.<name>`` is the entry ``name``."""

    def __init__(self, *entries):
        self.__dict__.update((entry.name, entry) for entry in entries)


def graded(builder, line, *entries, **words) -> list[Mistake]:
    """The Mistakes of one graded function: ``entries`` bound to ``builder`` (the trusted function whose keyword
    flags make them), to ``line`` where an entry names no line of its own, with ``words`` for their ``$word``s."""
    def say(text):
        return Template(text).substitute(words)
    return [Mistake(e.name, say(e.sentence), say(e.line or line), _computer(builder, e)) for e in entries]


def _computer(builder, entry):
    """What ``entry`` returns from a function's inputs (keyword arguments)."""
    names = list(entry.flags)
    choices = [v if isinstance(v, any_of) else (v,) for v in entry.flags.values()]
    several = any(isinstance(v, any_of) for v in entry.flags.values())

    def compute(**inputs):
        if entry.only_if is not None and not entry.only_if(**inputs):
            return Alternatives()
        if entry.how is not None:
            return entry.how(**inputs)
        results = [builder(**inputs, **dict(zip(names, values))) for values in itertools.product(*choices)]
        return either(*results) if several else results[0]
    return compute
