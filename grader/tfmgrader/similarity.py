"""Copy detection for the instructor: every graded function of every submission against tfmlib, the solutions,
the code shown on the site and the other submissions of the class.

It flags pairs for a person to review and never changes a score.  ``scripts/grade.py`` calls ``analyse_class``
once a batch is graded; it adds ``similar_to`` and ``similarity`` to ``grades.csv`` and writes
``similarity.csv`` (every graded function of every submission, its closest source) and ``similarity.html``
(the flagged pairs side by side) next to it.

How a function is compared
  * Its *unit*: the graded function as the submission finally defines it, plus every function of the
    submission it calls (directly or through other helpers; a graded function it calls is not included).  A
    function that only forwards its arguments to a helper of its own is represented by the helper, so a copy
    wrapped in a helper is seen whole.  An alias (``_impl = f``) follows the function it names.
  * Normalisation (``normalise``, on the abstract syntax tree, so whitespace, comments and layout are gone):
    docstrings are removed; the usual disguises are undone (``canonical.py``: dead code, asserts and prints
    dropped, temporaries and the answer's own helpers inlined, ``while`` loops over a range made ``for`` loops,
    equivalent spellings made one, such as ``torch.matmul(a, b)`` / ``a.matmul(b)`` / ``a @ b``; a one-line
    graded function the answer defines, such as ``split_heads``, is inlined where it is called); assignments
    that do not depend on each other are put in one canonical order; every name the unit binds (parameters,
    local variables, loop and comprehension variables, the names of its functions) becomes ``v``; what it only
    reads (``torch``, ``math``, built-ins, attribute names such as ``masked_fill`` and keyword names such as
    ``keepdim=``) is kept; the operands of ``+``, ``*``, ``&`` and ``|`` are sorted.  copydetect's own tokeniser
    (Pygments) replaces *every* name by ``V``, attribute names included, which makes independent correct answers look
    alike (``x.view(...).transpose(1, 2)`` and ``x.reshape(...).permute(0, 2, 1, 3)``); the calibration script
    compares both (``--tokens copydetect``).
  * Fingerprints: copydetect (pinned in pyproject.toml) hashes every ``K``-token window of the normalised token
    stream (each token one character; window size 1, so every k-gram is kept and the result does not depend on
    Python's per-process string hashing) and removes the k-grams of the code every learner is given (the
    signatures and stubs of the release, as copydetect's boilerplate).
  * Similarity of a unit to a source: the share of the unit's (non-boilerplate) tokens covered by k-grams the
    source also has; the unit is flagged at ``THRESHOLD`` or more.  The source named is the closest reference
    (the solution, then tfmlib, then the site, at equal similarity: tfmlib's version of an exercise normalises to
    the solution's) when it reaches the threshold, since
    classmates who copied the same reference look alike because of it; else the closest of all.
  * In order (round 29: every value of a copy wrapped in a helper call): against tfmlib's and the solution's
    version of the same function, the similarity is also the share of that version the unit holds in order,
    however many tokens were inserted between its own (``in_order``); it counts from ``IN_ORDER_THRESHOLD``.
  * A unit with fewer than ``MIN_TOKENS`` tokens outside the boilerplate (``causal_mask`` is one line) is too
    short to attribute: every correct answer looks alike.  It gets no similarity ("too short"), and a source
    that short is not compared either.

The threshold, ``K`` and ``MIN_TOKENS`` were chosen on the tune half of ``scripts/similarity_calibration.py``,
among the settings under which a verbatim copy of the worked solution is flagged in every exercise (the
longest graded function of exercise 6, ``layer_norm``, has 74 tokens), and are reported on its held-out half
(book/appendix/grading.md, "Copy detection").  Nothing here runs learner code: submissions are only parsed.
"""
from __future__ import annotations

import ast
import hashlib
import heapq
import html
import importlib.util
import io
import json
import os
import pickle
import re
import sys
import tokenize
import types
from dataclasses import dataclass, field
from pathlib import Path

from tfmgrader import canonical

CANONICAL = True      # undo the disguises of canonical.py (False: the normalisation before issue 32, to compare)
K = 20                # tokens per fingerprinted window
THRESHOLD = 0.8       # share of a unit's tokens found in one source that flags it for review
MIN_TOKENS = 74       # units shorter than this (outside the boilerplate) are not attributed
MAX_DEFINITIONS = 120  # a submission defining more functions than this is flagged, not compared (class_report.UNREAD)
PLACEHOLDER = "v"
IN_ORDER_GAP = 4      # tokens of the unit allowed between two consecutive tokens of a reference's run (in_order)
IN_ORDER_THRESHOLD = 0.9   # share of a reference found in order in a unit that flags the unit
MAX_REORDER = 200     # blocks longer than this keep their order (the canonical order is quadratic)
MAX_CELL_STATEMENTS = 1500  # a notebook of more statements is flagged, not compared (the course's have at most 220)
MAX_STATEMENTS = 250   # a learner's unit of more statements flags the notebook, unread (canonical.py is quadratic)
REORDER_BUDGET = 4 * MAX_REORDER ** 2   # statement pairs compared per normalisation; past it, blocks keep order
MAX_READ_STATEMENTS = 1000   # statements normalised for a notebook's units in all (the course's: 120), else unread
REPO = Path(__file__).resolve().parents[2]
HIDDEN_TESTS_RE = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)
SOLUTION_RE = re.compile(r"[ \t]*### BEGIN SOLUTION\n.*?### END SOLUTION[^\n]*\n?", re.S)


# --- normalisation ------------------------------------------------------------------------------------------

def _strip_docstring(body: list) -> list:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:] or [ast.Pass()]
    return body


class _Renamer(ast.NodeTransformer):
    """Every name in ``bound`` -> PLACEHOLDER; docstrings removed."""

    def __init__(self, bound: set[str]):
        self.bound = bound

    def visit_FunctionDef(self, node):
        node.body = _strip_docstring(node.body)
        if node.name in self.bound:
            node.name = PLACEHOLDER
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arg(self, node):
        if node.arg in self.bound:
            node.arg = PLACEHOLDER
        node.annotation = None
        return node

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        if node.value is None:
            return None
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)

    def visit_Name(self, node):
        if node.id in self.bound:
            node.id = PLACEHOLDER
        return node

    def visit_ExceptHandler(self, node):
        if node.name in self.bound:
            node.name = PLACEHOLDER
        self.generic_visit(node)
        return node

    def visit_alias(self, node):
        if (node.asname or node.name.split(".")[0]) in self.bound and node.asname:
            node.asname = PLACEHOLDER
        return node


def bound_names(tree: ast.AST) -> set[str]:
    """The names a piece of code binds itself: functions, parameters, assigned and loop variables."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _reads_writes(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    reads, writes = set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (writes if isinstance(node.ctx, (ast.Store, ast.Del)) else reads).add(node.id)
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        reads.add(stmt.target.id)
    return reads, writes


def _canonical_order(body: list[ast.stmt], bound: set[str]) -> list[ast.stmt]:
    """``body`` with independent assignments in one canonical order (the order of their normalised text,
    as far as their data dependencies allow), so that reordering them changes nothing.  Any other statement
    (a loop, a condition, a call, a return) stays where it is relative to everything else."""
    movable = [isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom)) for s in body]
    rw = [_reads_writes(s) for s in body]
    after: list[set[int]] = [set() for _ in body]      # after[j]: statements that must come before j
    for j in range(len(body)):
        for i in range(j):
            ri, wi = rw[i]
            rj, wj = rw[j]
            if not (movable[i] and movable[j]) or wi & rj or wi & wj or ri & wj:
                after[j].add(i)

    names = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(bound, key=len, reverse=True))) + r")\b") \
        if bound else None

    def key(i):
        text = ast.unparse(body[i])
        return names.sub(PLACEHOLDER, text) if names else text

    if not any(movable[i] and movable[i + 1] and i not in after[i + 1] for i in range(len(body) - 1)):
        return body                                     # nothing can move
    waiting = [len(a) for a in after]                   # statements not yet placed that must come first
    needed_by: list[list[int]] = [[] for _ in body]
    for j, a in enumerate(after):
        for i in a:
            needed_by[i].append(j)
    ready = [(key(i), i) for i in range(len(body)) if not waiting[i]]
    heapq.heapify(ready)
    order = []
    while ready:                                        # the smallest ready key first, ties in the original order
        _, i = heapq.heappop(ready)
        order.append(body[i])
        for j in needed_by[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, (key(j), j))
    return order


def _canonical(tree: ast.AST, bound: set[str]) -> None:
    """Each block of ``tree`` in canonical order (``_canonical_order``), as long as the pairs of statements compared
    stay within REORDER_BUDGET: a submission of many long blocks (red-team round 39 held copy detection, and the
    whole batch, for more than 18 minutes with 100 blocks of 200 statements) keeps the order of the rest."""
    budget = REORDER_BUDGET
    for node in ast.walk(tree):
        for attr in ("body", "orelse", "finalbody"):
            body = getattr(node, attr, None)
            if isinstance(body, list) and 1 < len(body) <= MAX_REORDER and all(isinstance(s, ast.stmt) for s in body):
                budget -= len(body) ** 2
                if budget < 0:
                    return
                setattr(node, attr, _canonical_order(body, bound))


CONTRACTS: dict[str, int] = {}   # graded function -> its number of parameters in the exercise (set by references())


class TooLarge(ValueError):
    """A learner's unit longer than copy detection reads (MAX_STATEMENTS), or units more than it reads in all
    (MAX_READ_STATEMENTS): the notebook is flagged, never skipped."""


class Reading:
    """What reading one learner's notebook may cost: statements normalised, all its units together (the main unit
    and every alternate of each graded function); past ``limit``, TooLarge.  Every unit is read whole or the
    notebook is flagged: none is left out to stay within the limit."""

    def __init__(self, limit: int = MAX_READ_STATEMENTS):
        self.limit = self.left = limit

    def spend(self, statements: list[ast.stmt]) -> None:
        self.left -= sum(isinstance(node, ast.stmt) for s in statements for node in ast.walk(s))
        if self.left < 0:
            raise TooLarge(f"more than {self.limit} statements to compare, more than copy detection reads")


def normalise(code: str | list[ast.stmt], inline: dict[str, ast.FunctionDef] | None = None,
              function: str = "", keep_all: bool = False, inline_graded: bool = False,
              max_statements: int | None = None) -> str:
    """The normalised text of ``code`` (source text, or statements): no docstrings, comments or layout, the
    disguises of ``canonical.py`` undone (``inline``: other functions of the answer whose calls may be replaced
    by their bodies), every name it binds replaced by PLACEHOLDER (see the module's docstring).  A learner's code
    of more than ``max_statements`` statements raises TooLarge (the course's own code has no limit)."""
    statements = ast.parse(code).body if isinstance(code, str) else [pickle.loads(pickle.dumps(s)) for s in code]
    module = ast.Module(body=statements, type_ignores=[])
    size = sum(isinstance(node, ast.stmt) for node in ast.walk(module))
    if max_statements is not None and size > max_statements:   # round 39: 1000 took half a minute each
        raise TooLarge(f"{size} statements, more than copy detection compares ({max_statements})")
    module.body = _strip_docstring(module.body) if isinstance(code, str) else module.body
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = _strip_docstring(node.body)
    if CANONICAL:
        canonical.Constants(bound_names(module)).visit(module)
        module.body = canonical.canonicalise(module.body, inline, CONTRACTS.get(function), keep_all, inline_graded)
    bound = bound_names(module)
    _canonical(module, bound)
    _Renamer(bound).visit(module)
    if CANONICAL:
        canonical.Sizes().visit(module)
        canonical.Commute(PLACEHOLDER).visit(module)
    return ast.unparse(ast.fix_missing_locations(module))


def tokens(text: str) -> list[tuple[str, int, int]]:
    """(token, start, end) of normalised code, offsets into ``text``; layout tokens become one marker each."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out = []
    skip = {tokenize.ENCODING, tokenize.ENDMARKER, tokenize.NL, tokenize.COMMENT}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in skip:
            continue
        start = starts[tok.start[0] - 1] + tok.start[1] if tok.start[0] - 1 < len(starts) else len(text)
        end = starts[tok.end[0] - 1] + tok.end[1] if tok.end[0] - 1 < len(starts) else len(text)
        name = {tokenize.NEWLINE: "<nl>", tokenize.INDENT: "<in>", tokenize.DEDENT: "<de>"}.get(tok.type, tok.string)
        out.append((name, start, max(start, end)))
    return out


# --- units: a function and the helpers it calls ---------------------------------------------------------------

def parse_cell(source: str) -> ast.Module | None:
    """The cell's syntax tree as the kernel reads it (IPython's input transformer first: magics and shell lines
    become ``get_ipython()`` calls, indented code and ``>>>`` prompts are read as IPython reads them); None when
    the kernel could not run it either.  One reading only: a second one, tried first, read a cell whose ``%`` line
    sits inside a string as a string (red-team round 23)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return ast.parse(TransformerManager().transform_cell(source))
    except Exception:  # noqa: BLE001 - a cell nothing can read has no functions to compare
        return None


def forwards_to(node: ast.FunctionDef, defs: dict[str, ast.FunctionDef]) -> str | None:
    """The helper of ``defs`` that ``node`` only calls and returns (``return helper(a, b)``), else None."""
    body = _strip_docstring(node.body)
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call):
        call = body[0].value
        if isinstance(call.func, ast.Name) and call.func.id in defs and defs[call.func.id] is not node and all(
                isinstance(a, ast.Name) for a in call.args) and \
                all(isinstance(k.value, ast.Name) for k in call.keywords):
            return call.func.id
    return None


def unit(name: str, defs: dict[str, ast.FunctionDef], graded: set[str]) -> list[ast.stmt]:
    """The definition of ``name`` and of every function of ``defs`` it reaches through calls or references,
    graded functions other than ``name`` excepted (they are units of their own).  A function that only
    forwards its arguments to a helper of its own (a copy wrapped in a helper) is represented by the helper."""
    seen_forward = set()
    while name in defs and name not in seen_forward:
        seen_forward.add(name)
        target = forwards_to(defs[name], defs)
        if target is None or target in graded:
            break
        name = target
    todo, seen, out = [name], set(), []
    while todo:
        current = todo.pop(0)
        node = defs.get(current)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in defs and (sub.id not in graded or sub.id == name):
                todo.append(sub.id)
    return out


@dataclass
class Unit:
    """One piece of code to compare: a graded function of a submission, or a source it may come from."""
    label: str                 # e.g. "tfmlib/attention.py: scaled_dot_product_attention", or a student id
    kind: str                  # "student", "tfmlib", "solution" or "site"
    function: str              # the graded function ("" for a site unit: compared with every function)
    source: str                # the original text, as shown in the report
    normalised: str = ""
    fingerprint: object = None
    encoded: str = ""          # the normalised tokens, one character each (Fingerprints.add)
    size: int = 0              # tokens outside the boilerplate
    spans: list = field(default_factory=list)
    alternates: list = field(default_factory=list)   # other code the name may hold when run (``alternate_units``)
    orphan: bool = False       # an alternate no graded name reaches by any name (compared with its references only)
    pooled: bool = False       # the alternate that holds every function the name may reach, as one piece
    indirect: bool = False     # an alternate the name reaches only through a container or a binding, not by name


_LINES: dict[int, tuple[str, list[str]]] = {}


def _segment(text: str, node: ast.AST) -> str | None:
    """The lines of ``text`` that ``node`` spans (its decorators included)."""
    cached = _LINES.get(id(text))
    if cached is None or cached[0] is not text:
        cached = _LINES[id(text)] = (text, text.splitlines())
    lines = cached[1]
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    if not getattr(node, "end_lineno", None) or start > len(lines):
        return None
    return "\n".join(lines[start - 1:node.end_lineno])


def unit_source(statements: list[ast.stmt], original: str | None = None) -> str:
    """The text shown for a unit: the original text of its definitions when known, else their unparsed form."""
    parts = []
    for node in statements:
        text = _segment(original, node) if original is not None else None
        if text is None and getattr(node, "_cell_source", None) is not None:
            text = _segment(node._cell_source, node)
        parts.append(text if text is not None else ast.unparse(node))
    return "\n\n".join(parts)


def parsed_cells(cells: list[str]):
    """``(syntax tree, text without magics)`` of each cell that can be read (``parse_cell``), the names the cells
    give to PyTorch and the like read as what they stand for (``canonical.module_aliases``)."""
    parsed = []
    for source in cells:
        tree = parse_cell(source)
        if tree is not None:
            parsed.append((tree, "\n".join(ln for ln in source.splitlines()
                                           if not ln.lstrip().startswith(("%", "!")))))
    aliases = canonical.module_aliases([tree for tree, _ in parsed])
    for tree, clean in parsed:
        if aliases:
            canonical.Aliased(aliases).visit(tree)
        _lambdas_as_definitions(tree.body)
        yield tree, clean


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _lambdas_as_definitions(body: list[ast.stmt]) -> None:
    """A lambda outside a function is a function definition too (red-team round 41 bound the worked solution, as
    one lambda, to the graded function's name): ``f = lambda a: e`` becomes ``def f(a): return e``, and any other
    lambda (in a container, an argument, a call) ``def _lambda<n>(a): return e`` just before its statement, the
    lambda replaced by that name.  Statements at any depth of the module and of classes; a function's own lambdas
    are part of its code (canonical.py reads ``f = lambda`` there)."""
    out = []
    for s in body:
        for part in _BODIES:
            inner = getattr(s, part, None)
            if isinstance(inner, list):
                for item in inner:          # except handlers and match cases hold their own bodies
                    if isinstance(item, (ast.ExceptHandler, ast.match_case)):
                        _lambdas_as_definitions(item.body)
                if inner and isinstance(inner[0], ast.stmt):
                    _lambdas_as_definitions(inner)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(s)
            continue
        targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, ast.AnnAssign) else []
        if len(targets) == 1 and isinstance(targets[0], ast.Name) and isinstance(s.value, ast.Lambda):
            out.append(_lambda_def(targets[0].id, s.value, s))
            continue
        hoisted = _Hoisted(s)
        for part, value in ast.iter_fields(s):
            if part in _BODIES:
                continue
            if isinstance(value, ast.AST):
                setattr(s, part, hoisted.visit(value))
            elif isinstance(value, list):
                setattr(s, part, [hoisted.visit(v) if isinstance(v, ast.AST) else v for v in value])
        out += hoisted.definitions + [s]
    body[:] = out


def _lambda_def(name: str, node: ast.Lambda, where: ast.AST) -> ast.FunctionDef:
    return ast.copy_location(ast.FunctionDef(name, node.args, [ast.Return(node.body)], [], None), where)


class _Hoisted(ast.NodeTransformer):
    """Each lambda of one statement's expressions as the name of a definition put before it."""

    def __init__(self, statement: ast.stmt):
        self.statement, self.definitions = statement, []

    def visit_Lambda(self, node):
        name = f"_lambda{getattr(node, 'lineno', 0)}_{getattr(node, 'col_offset', 0)}_{len(self.definitions)}"
        self.definitions.append(_lambda_def(name, node, self.statement))
        return ast.copy_location(ast.Name(name, ast.Load()), node)


def cell_functions(cells: list[str]) -> dict[str, ast.FunctionDef]:
    """``{name: def}`` as running the cells in order would leave them: a later definition replaces an earlier
    one; ``alias = f`` names the function ``f`` named then (so ``_impl = f`` followed by a new ``def f`` keeps
    both).  Each node remembers its cell's text, for showing the original code."""
    defs: dict[str, ast.FunctionDef] = {}
    for tree, clean in parsed_cells(cells):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                node._cell_source = clean
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = node
            elif isinstance(node, ast.Assign):
                # alias = f, and any expression of a function defined before (round 15: f = [_impl][0])
                named = [n.id for n in ast.walk(node.value) if isinstance(n, ast.Name) and n.id in defs]
                for target in (node.targets if named else []):
                    if isinstance(target, ast.Name):
                        defs[target.id] = defs[named[0]]
    return defs


def other_graded(name: str, defs: dict[str, ast.FunctionDef], graded: list[str]) -> dict[str, ast.FunctionDef]:
    """``{graded function: the definition that computes it}`` for the graded functions other than ``name`` that
    ``defs`` define (a function that only forwards to a helper is represented by the helper): the normalisation
    may inline their calls, since a copy may have them inlined by hand."""
    out = {}
    for g in graded:
        if g != name and g in defs:
            statements = unit(g, defs, set(graded))
            if statements and isinstance(statements[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[g] = statements[0]
    return out


def function_units(label: str, kind: str, cells: list[str], graded: list[str],
                   reading: Reading | None = None) -> dict[str, Unit]:
    """``{graded function: Unit}`` for the functions of ``graded`` that ``cells`` define (a student's: at most
    MAX_STATEMENTS statements each, and what ``reading`` allows in all, else TooLarge)."""
    limit = MAX_STATEMENTS if kind == "student" else None
    defs = cell_functions(cells)
    units = {}
    for name in graded:
        if name in defs:
            statements = unit(name, defs, set(graded))
            if reading is not None:
                reading.spend(statements)
            others = other_graded(name, defs, graded)
            units[name] = Unit(label, kind, name, unit_source(statements),
                               normalise(statements, others, name, max_statements=limit))
    return units


def module_given(cells: list[str]) -> dict[str, set[str]]:
    """``every_definition``'s second half for the module's own names only (what top-level code binds or puts in a
    container), not the local variables of functions, which share names across functions."""
    tops = []
    for tree, _ in parsed_cells(cells):
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for d in stmt.decorator_list:       # @x.append puts the function in x
                    tops.append(ast.Expr(ast.Call(d, [ast.Name(stmt.name, ast.Load())], [])))
            else:
                tops.append(stmt)
    return every_definition([ast.unparse(ast.Module(tops, []))])[1] if tops else {}


def every_definition(cells: list[str]) -> tuple[dict[str, list[ast.AST]], dict[str, set[str]]]:
    """Every function a submission defines, at any depth (inside ``if``/``try``/``with``/loops, methods of its
    classes, nested functions), by name; and, for each name, the names of functions any binding form gives it
    (``f = g``, ``f, _ = g, 0``, ``for f in [g]``, ``with ... as f``, ``f := g``).  What the kernel finally binds
    depends on what runs, which reading the cells cannot know (red-team round 17: a ``def`` under ``if True:``, a
    decoy after ``1 / 0``, a tuple assignment); copy detection compares each of these with the sources."""
    defs: dict[str, list[ast.AST]] = {}
    given: dict[str, set[str]] = {}

    def pairs(target, value):
        if isinstance(target, ast.Name) and isinstance(value, ast.Name):
            yield target.id, value.id
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                yield from pairs(t, v)
        elif isinstance(target, ast.Name) and value is not None:
            for n in ast.walk(value):       # any expression of a function (round 15: f = [_impl][0])
                if isinstance(n, ast.Name):
                    yield target.id, n.id

    for tree, clean in parsed_cells(cells):
        for node in ast.walk(tree):
            found = []
            if isinstance(node, ast.ClassDef):
                methods = [item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
                for item in methods:
                    item._method = True
                # the class's name reaches every method: Python calls them itself (Module()(x) runs forward,
                # Cls(...) runs __init__: round 25)
                defs.setdefault(node.name, []).extend(methods)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                node._cell_source = clean
                defs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Assign):
                found = [p for t in node.targets for p in pairs(t, node.value)]
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
                found = list(pairs(node.target, node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                found = [(t.id, v.id) for t in ast.walk(node.target) if isinstance(t, ast.Name)
                         for v in ast.walk(node.iter) if isinstance(v, ast.Name)]
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                found = [(t.id, v.id) for t in ast.walk(node.optional_vars) if isinstance(t, ast.Name)
                         for v in ast.walk(node.context_expr) if isinstance(v, ast.Name)]
            # what a container is given (round 27: functions put in a list by append and called as _H[0](...)):
            # x += [f], x[k] = f, x.append(f) / insert / update / ... (STORING_METHODS), @x.append
            if isinstance(node, ast.AugAssign) and isinstance(_root_name(node.target), str):
                found += [(_root_name(node.target), v.id) for v in ast.walk(node.value) if isinstance(v, ast.Name)]
            elif isinstance(node, ast.Assign):
                found += [(_root_name(t), v.id) for t in node.targets if not isinstance(t, ast.Name)
                          and _root_name(t) for v in ast.walk(node.value) if isinstance(v, ast.Name)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _root_name(node.func) \
                    and node.func.attr in STORING_METHODS:
                found += [(_root_name(node.func), v.id) for a in [*node.args, *node.keywords]
                          for v in ast.walk(a) if isinstance(v, ast.Name)]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [(_root_name(d), node.name) for d in node.decorator_list if _root_name(d)]
            for target, value in found:
                given.setdefault(target, set()).add(value)
    return defs, given


#: Methods that put their arguments into the container they are called on (list, dict, set, deque).
STORING_METHODS = {"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "extendleft",
                   "__setitem__", "fromkeys"}


def _root_name(node: ast.AST) -> str | None:
    """``x`` of ``x``, ``x[k]``, ``x.a.b``, ``x.append`` (and of the callee of ``x.f(...)`` used as a decorator)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def wide_unit(root: ast.AST, defs: dict[str, list[ast.AST]], graded: set[str], name: str,
              limit: int = 40, given: dict[str, set[str]] | None = None) -> list[ast.stmt]:
    """``root`` and every function of ``defs`` it reaches: by name, as a method (``obj.helper(...)``: round 17
    moved the solution's bodies into methods behind one-line wrappers), through a class's name (all its methods) or
    a name bound to an expression that names functions (``given``: ``table = {"f": _impl}``, round 25); graded
    functions other than ``name`` excepted; at most ``limit`` definitions."""
    out, seen, todo = [], set(), [root]
    reaches: dict[str, list[str]] = {}     # a name's definitions, computed once (round 39: 20000 names bound to one)
    while todo and len(out) < limit:
        node = todo.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        for sub in ast.walk(node):
            ref = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
            if ref is None:
                continue
            if ref not in reaches:
                reaches[ref] = [r for r in _bound_closure(ref, given or {})
                                if r in defs and (r not in graded or r == name)]
            for r in reaches[ref]:
                todo += [d for d in defs[r] if id(d) not in seen]
    return out


def _bound_closure(name: str, given: dict[str, set[str]]) -> list[str]:
    """``name``, and what the names it is bound to hold, transitively (in the order they are found)."""
    refs, found, names = [], set(), [name]
    while names:
        n = names.pop()
        if n in found:
            continue
        found.add(n)
        refs.append(n)
        names += sorted(given.get(n, ()))
    return refs


def _as_function(node: ast.AST) -> ast.AST:
    """A method as the function it computes: its first parameter (``self``) left out, so that its parameters line up
    with the graded function's (a copy moved into a class's method, round 17)."""
    if not getattr(node, "_method", False) or not (node.args.posonlyargs + node.args.args) or \
            any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
        return node
    copy_ = pickle.loads(pickle.dumps(node))
    copy_._cell_source = node._cell_source
    args = copy_.args
    if args.posonlyargs:
        args.posonlyargs = args.posonlyargs[1:]
    else:
        args.args = args.args[1:]
    return copy_


def alternate_units(label: str, cells: list[str], graded: list[str], main: dict[str, Unit],
                    reading: Reading | None = None) -> dict[str, list[Unit]]:
    """``{graded function: [Unit]}``: besides the unit the cells leave bound when every statement runs (``main``),
    one unit for every definition the function's name may hold when they run otherwise (``every_definition``).
    Every definition is read, or none: code that cannot be read (a literal ``ast.unparse`` cannot write, deep
    nesting) or more than ``reading`` allows raises, and the notebook is flagged unread (red-team round 40 hid the
    worked solution in an alternate holding a 4,000-digit literal, which was skipped, behind a decoy too short to
    attribute).  Every definition of a name is a root (no first twenty only): their cost is ``reading``'s."""
    reading = reading or Reading()
    defs, given = every_definition(cells)
    top = module_given(cells)
    flat = cell_functions(cells)
    everything = list({id(d): d for ds in defs.values() for d in ds}.values())
    if len(everything) > MAX_DEFINITIONS:
        raise ValueError(f"{len(everything)} function definitions, more than copy detection compares "
                         f"({MAX_DEFINITIONS})")
    roots_of, indirect_of = {}, {}
    for name in graded:
        names, todo = set(), [name]
        while todo:                        # the names whose functions this name may be given, transitively
            n = todo.pop()
            if n not in names:
                names.add(n)
                todo += sorted(given.get(n, ()))
        roots = []
        for n in sorted(names):
            for root in defs.get(n, []):
                # the definition, and each function it reaches on its own (a helper or a method holding the copy,
                # which the normalisation would drop as unused beside a one-line wrapper)
                roots += [r for r in wide_unit(root, defs, set(graded), name, given=given) if r not in roots]
        roots_of[name] = roots
        # what it reaches only through a container or a binding of the module, not by any name it calls (round 27)
        named = {id(r) for n in sorted(names) for root in defs.get(n, [])
                 for r in wide_unit(root, defs, set(graded), name)}
        through = {id(r) for n in sorted(names) for root in defs.get(n, [])
                   for r in wide_unit(root, defs, set(graded), name, given=top)}
        indirect_of[name] = through - named
    # A function no graded name reaches by any name (round 25 kept the copy in a dict filled by subscript, which
    # following names cannot see) may be what a graded function calls: it is compared as each of them.
    reached = {id(r) for roots in roots_of.values() for r in roots}
    orphans = [d for d in everything if id(d) not in reached]
    out = {}
    for name in graded:
        shown = {main[name].source} if name in main else set()
        units = []
        roots = roots_of[name] + [d for d in orphans if d.name == name or d.name not in graded]
        # all of it as one piece, every function kept (round 27 cut a copy into pieces too short to attribute
        # alone, each called only through a list): the share of it found in a source
        # with the other graded functions it calls, and theirs: round 41 ran the worked solution's body in another
        # graded function, called with more arguments than its exercise gives it (read alone, with those
        # arguments at their defaults, that code was dead)
        whole = list(roots)
        for root in roots:
            whole += [r for r in wide_unit(root, defs, {name}, name, given=given) if r not in whole]
        pooled = [_as_function(d) for d in whole]
        if len(pooled) > 1:
            reading.spend(pooled)
            units.append(Unit(label, "student", name, unit_source(pooled),
                              normalise(pooled, other_graded(name, flat, graded), name, keep_all=True,
                                        max_statements=MAX_STATEMENTS), pooled=True))
            shown.add(units[-1].source)
        for root in roots:
            orphan = id(root) not in reached
            statements = [_as_function(d) for d in wide_unit(root, defs, set(graded), name, given=given)]
            source = unit_source(statements)
            if source in shown:
                continue
            shown.add(source)
            reading.spend(statements)
            text = normalise(statements, other_graded(name, flat, graded), name, max_statements=MAX_STATEMENTS)
            units.append(Unit(label, "student", name, source, text, orphan=orphan,
                              indirect=id(root) in indirect_of[name]))
        if units:
            out[name] = units
    return out


# --- the sources: tfmlib, solutions/, the site -------------------------------------------------------------

def notebook_cells(path: Path, learner_only: bool = False, instructor: set[str] | None = None) -> list[str]:
    """The code cells' sources.  ``learner_only``: the instructor's own notebook's answer cells (its metadata is
    the instructor's).  ``instructor`` (a submission, ``instructor_cells``): every cell whose text is not one of the
    instructor's, whatever its type or nbgrader metadata says (the learner wrote both: round 23 marked its answer
    cells read-only and copy detection skipped them while the kernel ran them); a Markdown or raw cell counts too,
    since nbgrader makes an answer cell saved as one code again (round 15), and prose is not Python."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    out = []
    for cell in nb.cells:
        if instructor is not None:
            if cell.source.strip() not in instructor:
                out.append(cell.source)
            continue
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" and not meta.get("solution"):
            continue
        if learner_only and (meta.get("grade") or meta.get("locked")) and not meta.get("solution"):
            continue
        out.append(cell.source)
    return out


def instructor_cells(solution_notebooks: list[Path]) -> set[str]:
    """The text of every cell of the instructor's notebooks outside the answer cells (setup, tests, prose): the
    cells of a submission that are not the learner's writing."""
    import nbformat

    out = set()
    for path in solution_notebooks:
        for cell in nbformat.read(path, as_version=4).cells:
            if not cell.metadata.get("nbgrader", {}).get("solution"):
                out |= {cell.source, HIDDEN_TESTS_RE.sub("", cell.source)}   # as released: hidden tests removed
    return {text.strip() for text in out}


def graded_functions(solution_notebooks: list[Path]) -> list[str]:
    """The functions the answer cells of the instructor's notebooks define, in notebook order."""
    import nbformat

    names = []
    for path in solution_notebooks:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                tree = parse_cell(cell.source)
                names += [n.name for n in (tree.body if tree else []) if isinstance(n, ast.FunctionDef)]
    return list(dict.fromkeys(names))


def contracts(solution_notebooks: list[Path]) -> dict[str, int]:
    """``{graded function: its number of positional parameters}`` in the exercise (the answer cells' signatures)."""
    out = {}
    for cell in release_cells(solution_notebooks):
        tree = parse_cell(cell)
        for node in (tree.body if tree else []):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.name] = len(node.args.posonlyargs + node.args.args)
    return out


def release_cells(solution_notebooks: list[Path]) -> list[str]:
    """The answer cells as the learner receives them (solution regions replaced by the stub)."""
    import nbformat

    out = []
    for path in solution_notebooks:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                out.append(SOLUTION_RE.sub("    raise NotImplementedError()\n", cell.source))
    return out


def tfmlib_folder() -> Path:
    spec = importlib.util.find_spec("tfmlib")
    if spec is None or not spec.submodule_search_locations:
        return REPO / "tfmlib"
    return Path(list(spec.submodule_search_locations)[0])


def module_functions(path: Path) -> tuple[dict[str, ast.AST], str]:
    """``{name or Class.method: node}`` of a Python file, and its text."""
    text = path.read_text()
    tree = ast.parse(text)
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            out[node.name] = node
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{sub.name}"] = sub
    return out, text


def tfmlib_units(graded: list[str]) -> list[Unit]:
    """tfmlib's function of the same name as each graded function, with the tfmlib helpers it calls, those of
    other modules of tfmlib too: tfmlib is not in the graded kernel, so a copy of its function carries them."""
    folder = tfmlib_folder()
    modules = {}
    for path in sorted(folder.glob("*.py")):
        try:
            modules[path] = module_functions(path)
        except (OSError, SyntaxError):
            continue
    for functions, text in modules.values():
        for f in functions.values():
            f._cell_source = text                 # each definition shown from its own file (unit_source)
    everywhere = {n: f for functions, _ in modules.values() for n, f in functions.items()
                  if isinstance(f, ast.FunctionDef) and "." not in n}
    units = []
    for path, (functions, _) in modules.items():
        own = {n: f for n, f in functions.items() if isinstance(f, ast.FunctionDef) and "." not in n}
        defs = {**everywhere, **own}
        for name in graded:
            if name in own:
                statements = unit(name, defs, set(graded))
                others = other_graded(name, defs, graded)
                u = Unit(f"tfmlib/{path.name}: {name}", "tfmlib", name, unit_source(statements),
                         normalise(statements, others, name))
                units += [u, *inlined_variants(u, defs, graded)]
    return units


def solution_units(solution_notebooks: list[Path], graded: list[str]) -> list[Unit]:
    units = []
    for path in solution_notebooks:
        cells = notebook_cells(path, learner_only=True)
        defs = cell_functions(cells)
        for name, u in function_units(f"solutions/{path.parent.name}: {{}}", "solution", cells, graded).items():
            u.label = u.label.format(name)
            units += [u, *inlined_variants(u, defs, graded)]
    return units


def inlined_variants(u: Unit, defs: dict[str, ast.AST], graded: list[str]) -> list[Unit]:
    """A reference read a second time with every other graded function it calls written out in it (the
    normalisation inlines only one-line ones): a copy of the solution's ``decoder_block`` with the solution's
    ``layer_norm`` written out by hand twice.  None when the reference calls no other graded function."""
    statements = unit(u.function, defs, set(graded))
    others = other_graded(u.function, defs, graded)
    called = {n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name)} & set(others)
    if not called:
        return []
    text = normalise(statements, {g: others[g] for g in called}, u.function, inline_graded=True)
    return [] if text == u.normalised else [Unit(u.label, u.kind, u.function, u.source, text)]


CODE_CELL_RE = re.compile(r"^(`{3,}|~{3,})\{code-cell\}[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
FENCE_RE = re.compile(r"^(`{3,}|~{3,})(?:python|py|\{code-block\}\s+python|\{code\}\s+python)[ \t]*\n(.*?)^\1[ \t]*$",
                      re.S | re.M)
INCLUDE_RE = re.compile(r"\{literalinclude\}[ \t]+(\S+)[ \t]*\n((?:[ \t]*:[\w-]+:[^\n]*\n)*)")


def _cell_body(text: str) -> str:
    """A code cell's code: its YAML front matter and ``:option:`` lines left out."""
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
        lines = lines[end + 1:]
    while lines and re.match(r"^:[\w-]+:", lines[0]):
        lines = lines[1:]
    return "\n".join(lines)


_SITE: dict = {}


def site_units(book: Path) -> list[Unit]:
    """``compute_site_units`` (new Unit objects), read once per process and kept on disk between processes: normalising
    the site's few hundred pieces of code takes seconds, and every batch of ``scripts/grade.py`` needs them."""
    key = str(book.resolve())
    if key not in _SITE:
        _SITE[key] = stored_site_units(book)
    return [Unit(*fields) for fields in _SITE[key]]


def site_cache_dir() -> Path:
    """Where the normalised site and course references (tfmlib, the solutions) are kept: ``$GRADER_SITE_CACHE``, else
    ``~/.cache/tfmlib-grading/site`` (beside the self-check's cache).  Learners' code never reaches it: the sandbox
    binds no home folder."""
    return Path(os.environ.get("GRADER_SITE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfmlib-grading", "site"))


def _normaliser_digest(header: str = ""):
    """A SHA-256 digest started with the code that normalises (this module, ``canonical.py``, the ``CANONICAL``
    switch) and ``header``: the cached units' keys (``site_key``, ``course_key``) add what their units are read from."""
    digest = hashlib.sha256(f"{CANONICAL}\n{header}".encode())
    for code in (Path(__file__), Path(canonical.__file__)):
        digest.update(code.read_bytes())
    return digest


def site_key(book: Path) -> str:
    """A digest of everything ``compute_site_units`` reads: the pages, the files they include, and the code that
    normalises.  Any change gives a new key."""
    digest = _normaliser_digest()
    for md in sorted(book.rglob("*.md")):
        text = md.read_bytes()
        digest.update(f"\0{md.relative_to(book)}\0".encode() + text)
        for m in INCLUDE_RE.finditer(text.decode("utf-8", errors="replace")):
            path = (md.parent / m.group(1)).resolve()
            digest.update(f"\0{m.group(1)}\0".encode() + (path.read_bytes() if path.is_file() else b"missing"))
    return digest.hexdigest()


def stored_site_units(book: Path) -> list[tuple[str, str, str, str, str]]:
    """The site's units as tuples, from the disk cache when its key matches, else computed and stored."""
    return _stored_units("site-units", site_key(book), lambda: compute_site_units(book))


def _stored_units(name: str, key: str, compute) -> list[tuple[str, str, str, str, str]]:
    """Units as (label, kind, function, source, normalised) tuples, kept in ``site_cache_dir()/<name>-<key>.json``
    (``_kept_on_disk``)."""
    def decode(units):
        if not all(isinstance(u, list) and len(u) == 5 and all(isinstance(x, str) for x in u) for u in units):
            raise TypeError("not stored units")
        return [tuple(u) for u in units]

    return _kept_on_disk(site_cache_dir() / f"{name}-{key[:32]}.json", key, decode,
                         lambda: [(u.label, u.kind, u.function, u.source, u.normalised) for u in compute()],
                         lambda units: units)


def _kept_on_disk(path: Path, key: str, decode, compute, encode, max_chars: int | None = None):
    """``decode(units)`` of the JSON file at ``path`` when its key is ``key`` (``decode`` raises TypeError or
    ValueError on anything but what ``encode`` wrote: the value is then computed again); else ``compute()``, kept
    there as ``encode(value)`` unless that is None or the file would be longer than ``max_chars`` (written to a
    temporary file and renamed: two batches starting at once never read half a file; a read-only home is no
    error, the next process computes it again)."""
    try:
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return decode(stored["units"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    value = compute()
    payload = encode(value)
    if payload is not None:
        text = json.dumps({"key": key, "units": payload})
        if max_chars is None or len(text) <= max_chars:
            try:
                from tfmgrader.files import write_atomic

                write_atomic(path, text)
            except OSError:
                pass
    return value


def course_key(solution_notebooks: list[Path], graded: list[str]) -> str:
    """A digest of everything ``tfmlib_units`` and ``solution_units`` read: tfmlib's files, the worked solutions,
    the graded functions and their contracts, and the code that normalises.  Any change gives a new key."""
    digest = _normaliser_digest(f"{graded!r}\n{[CONTRACTS.get(g) for g in graded]!r}\n")
    folder = tfmlib_folder()
    for path in [*sorted(folder.glob("*.py")), *solution_notebooks]:
        digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def course_units(solution_notebooks: list[Path], graded: list[str]) -> list[Unit]:
    """``tfmlib_units`` and ``solution_units`` (new Unit objects), kept on disk between processes like the site's:
    every grading process compares with them, and normalising them takes a second or two."""
    key = course_key(solution_notebooks, graded)
    stored = _stored_units("course-units", key,
                           lambda: tfmlib_units(graded) + solution_units(solution_notebooks, graded))
    return [Unit(*fields) for fields in stored]


def compute_site_units(book: Path) -> list[Unit]:
    """The code a learner can read on the site: every function and the other statements of each code cell
    and code listing of ``book/**/*.md``, and every object a page includes from tfmlib (a class: its
    methods)."""
    units = []
    for md in sorted(book.rglob("*.md")):
        text = md.read_text(encoding="utf-8", errors="replace")
        rel = md.relative_to(book.parent)
        blocks = [(text[:m.start()].count("\n") + 1, _cell_body(m.group(2))) for m in CODE_CELL_RE.finditer(text)]
        blocks += [(text[:m.start()].count("\n") + 1, m.group(2)) for m in FENCE_RE.finditer(text)]
        for line, code in blocks:
            tree = parse_cell(code)
            if tree is None:
                continue
            clean = "\n".join(ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!")))
            rest = []
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    units.append(Unit(f"{rel}:{line}: {node.name}", "site", "", unit_source([node], clean),
                                      normalise([node])))
                elif not isinstance(node, (ast.Import, ast.ImportFrom, ast.ClassDef)):
                    rest.append(node)
            if rest:
                units.append(Unit(f"{rel}:{line}: code cell", "site", "", unit_source(rest, clean), normalise(rest)))
        for m in INCLUDE_RE.finditer(text):
            path = (md.parent / m.group(1)).resolve()
            options = dict(re.findall(r":([\w-]+):[ \t]*([^\n]*)", m.group(2)))
            try:
                functions, source = module_functions(path)
            except (OSError, SyntaxError, ValueError):
                continue
            wanted = options.get("pyobject", "").strip()
            names = [wanted] if wanted else [n for n in functions if "." not in n]
            defs = {n: f for n, f in functions.items() if isinstance(f, ast.FunctionDef) and "." not in n}
            for name in names:
                node = functions.get(name)
                if node is None:
                    continue
                methods = [s for s in node.body if isinstance(s, ast.FunctionDef)] \
                    if isinstance(node, ast.ClassDef) else [node]
                for f in methods:
                    qual = f"{name}.{f.name}" if isinstance(node, ast.ClassDef) else name
                    where = text[:m.start()].count("\n") + 1
                    # a function with the module's helpers it calls, as tfmlib_units has it
                    statements = unit(f.name, defs, set()) if f is defs.get(f.name) else [f]
                    units.append(Unit(f"{rel}:{where}: {path.name} {qual}", "site", "",
                                      unit_source(statements, source), normalise(statements)))
    return units


# --- fingerprints and comparison (copydetect) ---------------------------------------------------------------

class _Deferred(types.ModuleType):
    """Stands in for a module until one of its attributes is used; then the module is imported and answers."""

    def __getattr__(self, attr):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def _copydetect():
    """copydetect, imported without the matplotlib.pyplot it imports for the plot of its own HTML report, which
    this module never draws: about half a second of every grading process (the pyplot it holds is imported if
    ever used)."""
    if "copydetect" not in sys.modules and "matplotlib.pyplot" not in sys.modules:
        sys.modules["matplotlib.pyplot"] = _Deferred("matplotlib.pyplot")
        try:
            importlib.import_module("copydetect")
        finally:
            if isinstance(sys.modules.get("matplotlib.pyplot"), _Deferred):
                del sys.modules["matplotlib.pyplot"]
    return importlib.import_module("copydetect")


class Fingerprints:
    """copydetect fingerprints of normalised code: one character per token (a vocabulary shared by every unit
    of one analysis), k-grams of K tokens, every k-gram kept, the boilerplate's removed."""

    def __init__(self, boilerplate: list[str], k: int = K, mode: str = "ast"):
        self.k, self.mode, self.vocab = k, mode, {}
        self.boilerplate = []
        if boilerplate:
            get_document_fingerprints = _copydetect().utils.get_document_fingerprints
            hashes = set()
            for code in boilerplate:
                hashes |= get_document_fingerprints(self.encode(self.prepare(code)), k, 1)[0]
            self.boilerplate = sorted(hashes)

    def fork(self) -> Fingerprints:
        """A copy that shares this one's fingerprints (of the units added so far) and extends a copy of its
        vocabulary: what one submission adds never reaches the next one's analysis."""
        other = Fingerprints([], self.k, self.mode)
        other.boilerplate, other.vocab = self.boilerplate, dict(self.vocab)
        return other

    def prepare(self, code: str) -> str:
        """Normalised text: ours (ast), or, in mode "copydetect", the layout-free text that copydetect's own
        Pygments filter then reduces (every name to V, strings to S)."""
        try:
            text = normalise(code)
        except (SyntaxError, ValueError, RecursionError):
            text = code
        if self.mode == "copydetect":
            filter_code = _copydetect().utils.filter_code
            return filter_code(text, "unit.py")[0]
        return text

    def encode(self, text: str) -> str:
        if self.mode == "copydetect":
            return text
        return "".join(self.vocab.setdefault(t[0], chr(0x10000 + len(self.vocab))) for t in tokens(text))

    def add(self, u: Unit) -> Unit:
        CodeFingerprint = _copydetect().CodeFingerprint

        text = u.normalised if self.mode == "ast" else self.prepare(u.normalised)
        try:
            spans = tokens(text) if self.mode == "ast" else [(c, i, i + 1) for i, c in enumerate(text)]
        except (tokenize.TokenError, IndentationError, SyntaxError):
            spans = []
        encoded = "".join(self.vocab.setdefault(t[0], chr(0x10000 + len(self.vocab))) for t in spans) \
            if self.mode == "ast" else text
        u.fingerprint = CodeFingerprint(u.label, self.k, 1, boilerplate=self.boilerplate, filter=False,
                                        fp=io.StringIO(encoded))
        u.encoded = encoded
        u.size = int(u.fingerprint.token_coverage)
        u.spans = spans
        return u

    @staticmethod
    def compare(a: Unit, b: Unit) -> tuple[float, object]:
        """(share of ``a``'s tokens found in ``b``, the token slices of ``a`` that ``b`` also has)."""
        compare_files = _copydetect().compare_files

        if not a.size or not b.size or a.fingerprint.hashes.isdisjoint(b.fingerprint.hashes):
            return 0.0, None
        _, (share, _), (slices, _) = compare_files(a.fingerprint, b.fingerprint)
        return float(min(share, 1.0)), slices


    def reference_share(self, u: Unit, ref: Unit) -> float:
        """``in_order(ref, u)``, or of the reference's body alone (its ``def`` line left out), when it reaches
        IN_ORDER_THRESHOLD, else 0 (our normalisation only).  Only a
        reference written for the same function (tfmlib's and the solution's): a site's cell is any code, and a
        short one may be found in order in a long answer of another function (an independent ``fit_power_law``
        held the site's ``compute_optimal``, 0.98)."""
        if self.mode != "ast" or not u.encoded or not ref.encoded or ref.function != u.function:
            return 0.0
        share = in_order(ref.encoded, u.encoded, self.k, IN_ORDER_GAP, IN_ORDER_THRESHOLD)
        newline = self.vocab.get("<nl>")
        if share < IN_ORDER_THRESHOLD and newline and ref.normalised.startswith(("def ", "async def ")) \
                and newline in ref.encoded:         # its body alone (round 41 moved it into another function)
            body = ref.encoded[ref.encoded.index(newline) + 1:]
            share = max(share, in_order(body, u.encoded, self.k, IN_ORDER_GAP, IN_ORDER_THRESHOLD))
        return share if share >= IN_ORDER_THRESHOLD else 0.0


def _lcs_share(r: str, u: str) -> float:
    """The longest common subsequence of ``r`` and ``u`` as a share of ``r`` (bit-parallel, one bit per token of
    ``r``: Allison and Dix's recurrence)."""
    if not r:
        return 0.0
    masks: dict[str, int] = {}
    for i, t in enumerate(r):
        masks[t] = masks.get(t, 0) | (1 << i)
    full = (1 << len(r)) - 1
    row = full
    for t in u:
        bits = masks.get(t)
        if bits:
            x = row & bits
            row = ((row + x) | (row - x)) & full
    return (len(r) - bin(row).count("1")) / len(r)


def _run_coverage(r: str, u: str, k: int, gap: int) -> float:
    """The share of ``r``'s tokens inside a run of ``k`` consecutive tokens of ``r`` that ``u`` holds in order
    with at most ``gap`` other tokens between two of them.  For each token of ``r``, ``ends[l]`` has a bit for
    every position of ``u`` where a run of ``l + 1`` tokens of ``r`` ending with it ends."""
    at: dict[str, int] = {}
    for j, t in enumerate(u):
        at[t] = at.get(t, 0) | (1 << j)
    covered, ends = set(), []
    for i, t in enumerate(r):
        here = at.get(t, 0)
        new = [here] if here else []
        for before in ends[:k - 1] if here else ():
            reach = 0
            for step in range(1, gap + 2):
                reach |= before << step
            before = here & reach
            if not before:
                break
            new.append(before)
        ends = new
        if len(ends) >= k:
            covered.update(range(i - k + 1, i + 1))
    return len(covered) / len(r) if r else 0.0


def in_order(r: str, u: str, k: int = K, gap: int = IN_ORDER_GAP, floor: float = 0.0) -> float:
    """How much of the reference ``r`` (encoded tokens, one character each) the unit ``u`` holds in order, however
    much it inserted between them: the smaller of the longest common subsequence (as a share of ``r``) and the
    share of ``r`` in runs of ``k`` tokens found in ``u`` with at most ``gap`` tokens inserted between two of them.
    Round 29 wrapped every value of a copied solution in a helper of its own (``_c(x)``): nothing of 20 tokens
    was left in one piece, but the solution was all there, in order.  Below ``floor`` the longest common
    subsequence is returned without the runs (they cannot raise it)."""
    share = _lcs_share(r, u)
    if share < floor:
        return share
    return min(share, _run_coverage(r, u, k, gap))


@dataclass
class Match:
    student: str
    function: str
    source: Unit | None        # the closest source (None: too short, or nothing compared)
    similarity: float | None   # None: too short to attribute
    flagged: bool
    unit: Unit | None
    slices: object = None
    ties: list = field(default_factory=list)   # the other sources at the threshold or above


def closest(u: Unit, candidates: list[Unit], fp: Fingerprints, min_tokens: int = MIN_TOKENS,
            threshold: float = THRESHOLD) -> Match:
    """The source that explains ``u`` best: the closest reference (tfmlib, the solution, the site) when it
    reaches ``threshold`` (classmates who copied the same reference are alike because of it), else the closest
    candidate of all.  Every other candidate at ``threshold`` or more is listed in ``ties``."""
    if u.size < min_tokens:
        return Match(u.label, u.function, None, None, False, u)
    scored = []
    for c in candidates:
        if c is u or (c.function and c.function != u.function) or (c.kind == "student" and c.label == u.label) \
                or c.size < min_tokens:
            continue
        share, slices = fp.compare(u, c)
        if c.kind != "student" and share < threshold:     # a reference found whole, in order (round 29)
            share = max(share, fp.reference_share(u, c))
        scored.append((share, c, slices))
    if not scored:
        return Match(u.label, u.function, None, 0.0, False, u)
    rank = {"solution": 0, "tfmlib": 1, "site": 2, "student": 3}
    scored.sort(key=lambda s: (-s[0], rank.get(s[1].kind, 3), s[1].label))
    if scored[0][0] == 0:
        return Match(u.label, u.function, None, 0.0, False, u)
    refs = [s for s in scored if s[1].kind != "student"]
    best, source, slices = refs[0] if refs and refs[0][0] >= threshold else scored[0]
    ties = [c for s, c, _ in scored if c is not source and s >= threshold][:8]
    return Match(u.label, u.function, source, round(best, 3), best >= threshold, u, slices, ties)


# --- one class ----------------------------------------------------------------------------------------------

@dataclass
class Analysis:
    matches: dict[tuple[str, str], Match]     # (student, function) -> Match
    graded: list[str]
    references: list[Unit]


def references(course: Path, assignment: str, graded: list[str] | None = None, source_dir: str = "solutions",
               book: Path | None = None) -> tuple[list[Path], list[str], list[Unit]]:
    """(instructor notebooks, graded functions, the reference units: tfmlib, solutions, site)."""
    notebooks = sorted((course / source_dir / assignment).glob("*.ipynb"))
    graded = graded or graded_functions(notebooks)
    CONTRACTS.update(contracts(notebooks))
    book = book if book is not None else REPO / "book"
    refs = course_units(notebooks, graded) + (site_units(book) if book.is_dir() else [])
    return notebooks, graded, refs


def analyse(students: dict[str, dict[str, Unit]], refs: list[Unit], graded: list[str], boilerplate: list[str],
            k: int = K, mode: str = "ast", min_tokens: int = MIN_TOKENS, threshold: float = THRESHOLD,
            fp: Fingerprints | None = None) -> Analysis:
    """Compare every unit of ``students`` (``{student: {function: Unit}}``) with ``refs`` and with the other
    students' units of the same function.  ``fp``: fingerprints that ``refs`` were already added to (with
    ``boilerplate``, ``k`` and ``mode``), as ``against_course`` keeps them; else they are made here."""
    if fp is None:
        fp = Fingerprints(boilerplate, k, mode)
        for u in refs:
            fp.add(u)
    refs = [u for u in refs if u.size]
    by_function: dict[str, list[Unit]] = {}
    for units in students.values():
        for name, u in units.items():
            fp.add(u)
            by_function.setdefault(name, []).append(u)
    matches = {}
    for student, units in students.items():
        for name, u in units.items():
            main = closest(u, refs + by_function[name], fp, min_tokens, threshold)
            found = []
            for alt in u.alternates:       # other code the name may hold: a flagged one counts
                alt.label = u.label
                fp.add(alt)
                # a function no graded name reaches: compared with this exercise's own references only (a helper
                # the learner took from the site is not a copy of the exercise)
                candidates = [r for r in refs if r.function == name] if alt.orphan else refs + by_function[name]
                found.append(closest(alt, candidates, fp, min_tokens, threshold))
            flagged = [m for m in found if m.flagged]
            if not flagged and not main.flagged and _split(u, min_tokens):
                flagged = [Match(student, name, SPLIT, 0.0, True, u)]
            matches[(student, name)] = max(flagged, key=lambda m: m.similarity) if flagged and not main.flagged \
                else main
    return Analysis(matches, graded, refs)


#: The "source" of a graded function that runs functions it does not call by name (round 27: the solution cut into
#: pieces too short to attribute, called through a list): flagged for review, since what the pieces add up to when
#: run cannot be compared.
SPLIT = Unit("functions it runs without naming them (through a container): review by hand", "split", "", "")


def _split(u: Unit, min_tokens: int) -> bool:
    """``u`` reaches functions it does not call by name (through a container or a binding), and what it reaches is
    long enough to attribute: what the pieces add up to when run cannot be compared, so a person looks."""
    pieces = [a for a in u.alternates if a.indirect]
    whole = [a for a in u.alternates if a.pooled]
    return bool(pieces) and bool(whole) and whole[0].size >= min_tokens


def submission_units(student: str, folder: Path, graded: list[str], instructor: set[str]) -> dict[str, Unit]:
    """The graded functions one submission defines: every cell of its notebooks that is not the instructor's
    (``instructor``: ``instructor_cells``)."""
    cells, graded_cells = [], []
    for path in sorted(folder.glob("*.ipynb")):
        try:
            these = notebook_cells(path, instructor=instructor)
        except Exception:  # noqa: BLE001 - an unreadable notebook has no functions to compare
            continue
        cells += these
        if path.name == f"{folder.name}.ipynb":     # the notebook the grader runs (round 17: another one read last)
            graded_cells += these
    return cell_units(student, cells, graded_cells or cells, graded)


def cell_units(student: str, cells: list[str], graded_cells: list[str], graded: list[str]) -> dict[str, Unit]:
    """The graded functions ``graded_cells`` leave defined (the main unit of each), every other definition of them
    in ``cells`` as its alternates.  Kept on disk beside the course's references (``site_cache_dir()/submissions``),
    keyed by everything they are computed from (``submission_key``): a notebook graded again, or analysed again with
    its class, is not normalised again."""
    key = submission_key(student, cells, graded_cells, graded)
    units = _kept_on_disk(
        site_cache_dir() / "submissions" / f"{key[:40]}.json", key,
        lambda stored: {name: _unit_from_json(fields) for name, fields in stored.items()},
        lambda: cell_units_or_none(student, cells, graded_cells, graded),
        # not kept: code that could not be read (deep nesting, memory) may be read next time; a unit with more
        # fields than compute_cell_units sets
        lambda units: None if units is None or not all(_stored_as_json(u) for u in units.values())
        else {name: _unit_to_json(u) for name, u in units.items()},
        STORED_UNITS_MAX_CHARS)
    return {} if units is None else units


STORED_UNITS_MAX_CHARS = 1_000_000   # a submission's units are a few kB; a notebook of megabytes of code is not kept


def submission_key(student: str, cells: list[str], graded_cells: list[str], graded: list[str]) -> str:
    """A digest of everything ``compute_cell_units`` reads: the student's id (the units' label), the cells, the
    graded functions and their contracts, and the code that normalises."""
    payload = json.dumps([student, cells, graded_cells, graded, [CONTRACTS.get(g) for g in graded]])
    digest = _normaliser_digest("submission units\n")
    digest.update(payload.encode())      # json.dumps writes ASCII
    return digest.hexdigest()


_UNIT_JSON = {"label": str, "kind": str, "function": str, "source": str, "normalised": str, "orphan": bool,
              "pooled": bool, "indirect": bool}    # what compute_cell_units sets; the rest is set by analyse


def _stored_as_json(unit: Unit) -> bool:
    """Whether ``unit`` (and its alternates) hold only the fields ``_UNIT_JSON`` keeps."""
    return (unit.fingerprint is None and unit.encoded == "" and unit.size == 0 and unit.spans == []
            and all(_stored_as_json(a) and not a.alternates for a in unit.alternates))


def _unit_to_json(unit: Unit) -> dict:
    fields = {name: getattr(unit, name) for name in _UNIT_JSON}
    return {**fields, "alternates": [_unit_to_json(a) for a in unit.alternates]}


def _unit_from_json(fields: dict) -> Unit:
    """A Unit from ``_unit_to_json``'s dict; a field of the wrong type raises TypeError (the file is not used)."""
    if set(fields) != {*_UNIT_JSON, "alternates"} or not all(type(fields[n]) is t for n, t in _UNIT_JSON.items()):
        raise TypeError("not a stored unit")
    return Unit(**{n: fields[n] for n in _UNIT_JSON}, alternates=[_unit_from_json(a) for a in fields["alternates"]])


def compute_cell_units(student: str, cells: list[str], graded_cells: list[str], graded: list[str]) -> dict[str, Unit]:
    """``cell_units`` without the disk: no units where the code cannot be read (a scored notebook is then flagged)."""
    units = cell_units_or_none(student, cells, graded_cells, graded)
    return {} if units is None else units


def cell_units_or_none(student: str, cells: list[str], graded_cells: list[str],
                   graded: list[str]) -> dict[str, Unit] | None:
    """``compute_cell_units``, or None when any of the code copy detection would compare cannot be read whole: too
    long (MAX_CELL_STATEMENTS, MAX_STATEMENTS, MAX_READ_STATEMENTS, MAX_DEFINITIONS), or code that cannot be
    normalised or cut into tokens.  A scored notebook read as None is flagged (class_report.UNREAD)."""
    try:
        _check_size(cells)
        reading = Reading()
        units = function_units(student, "student", graded_cells, graded, reading)
        for name, alternates in alternate_units(student, cells, graded, units, reading).items():
            if name in units:
                units[name].alternates = alternates
            else:
                units[name] = alternates[0]
                units[name].alternates = alternates[1:]
        for u in units.values():
            for piece in [u, *u.alternates]:
                tokens(piece.normalised)   # what Fingerprints.add cuts: untokenisable would compare as empty
        return units
    except (RecursionError, MemoryError, ValueError, SyntaxError, tokenize.TokenError):
        return None


def _check_size(cells: list[str]) -> None:
    """ValueError when ``cells`` hold more statements than copy detection reads (MAX_CELL_STATEMENTS): the notebook is
    then flagged, unread (class_report.UNREAD), instead of holding the class's analysis for minutes (red-team round
    39: 20000 statements in one helper took copy detection more than 18 minutes before its passes were bounded)."""
    size = 0
    for source in cells:
        tree = parse_cell(source)
        size += 0 if tree is None else sum(isinstance(node, ast.stmt) for node in ast.walk(tree))
        if size > MAX_CELL_STATEMENTS:
            raise ValueError(f"more than {MAX_CELL_STATEMENTS} statements, more than copy detection reads")


def analyse_class(course: Path, assignment: str, students: list[str], submitted: Path,
                  source_dir: str = "solutions") -> Analysis:
    notebooks, graded, refs = references(course, assignment, source_dir=source_dir)
    instructor = instructor_cells(notebooks)
    units = {}
    for s in students:
        try:
            units[s] = submission_units(s, submitted / s / assignment, graded, instructor)
        except Exception:  # noqa: BLE001 - read as nothing: a scored submission is then flagged (class_report.UNREAD)
            units[s] = {}
    return analyse(units, refs, graded, release_cells(notebooks))


_COURSE_REFERENCES: dict = {}     # (course, assignment, source_dir) -> what against_course compares with


@dataclass
class CourseReferences:
    """What ``against_course`` compares each notebook with, read and fingerprinted once per process."""
    graded: list[str]
    refs: list[Unit]
    boilerplate: list[str]
    instructor: set[str]
    fingerprints: Fingerprints       # refs added


def course_references(course: Path, assignment: str, source_dir: str) -> CourseReferences:
    key = (str(course), assignment, source_dir)
    if key not in _COURSE_REFERENCES:
        notebooks, graded, refs = references(course, assignment, source_dir=source_dir)
        boilerplate = release_cells(notebooks)
        fp = Fingerprints(boilerplate)
        for u in refs:
            fp.add(u)
        _COURSE_REFERENCES[key] = CourseReferences(graded, refs, boilerplate, instructor_cells(notebooks), fp)
    return _COURSE_REFERENCES[key]


def against_course(course: Path, assignment: str, student: str, cells: list[str],
                   source_dir: str = "solutions") -> Analysis:
    """One submission (the text of its notebook's cells, as graded) compared with the course's own code only:
    tfmlib, the worked solutions and the site.  What plain ``nbgrader autograde`` does for each notebook it
    grades (``record_verdict.RecordVerdict``), so that a pasted solution is flagged on that path too (red-team round
    23); ``scripts/grade.py`` compares the whole class, classmates included (``analyse_class``).  The references
    are read and fingerprinted once per process (``course_references``)."""
    ref = course_references(course, assignment, source_dir)
    mine = [c for c in cells if c.strip() not in ref.instructor]
    return analyse({student: cell_units(student, mine, mine, ref.graded)}, ref.refs, ref.graded, ref.boilerplate,
                   fp=ref.fingerprints.fork())


# --- output: grades.csv columns, similarity.csv, similarity.html ----------------------------------------------

def summary(analysis: Analysis, student: str) -> dict[str, str]:
    """The two grades.csv columns of one student: the closest source of their most similar graded function."""
    ms = [m for (s, _), m in analysis.matches.items() if s == student and m.similarity is not None]
    if not ms:
        return {"similar_to": "", "similarity": ""}
    best = max(ms, key=lambda m: m.similarity)
    if best.source is None:
        return {"similar_to": "", "similarity": f"{best.similarity:.2f}"}
    return {"similar_to": f"{best.function} ~ {best.source.label}" + (" (flagged)" if best.flagged else ""),
            "similarity": f"{best.similarity:.2f}"}


def rows(analysis: Analysis) -> list[dict]:
    out = []
    for (student, function), m in sorted(analysis.matches.items()):
        out.append({"student_id": student, "function": function, "tokens": m.unit.size if m.unit else 0,
                    "similar_to": m.source.label if m.source else "",
                    "similarity": "" if m.similarity is None else f"{m.similarity:.3f}",
                    "also_close": "; ".join(t.label for t in m.ties),
                    "flagged": "yes" if m.flagged else ("too short" if m.similarity is None else "no")})
    return out


def _highlighted(u: Unit, slices) -> str:
    """The unit's normalised code, escaped, with the tokens the source shares marked."""
    text = u.normalised
    if slices is None or not u.spans or len(slices[0]) == 0:
        return html.escape(text)
    marks = []
    for start, end in zip(slices[0], slices[1]):
        start, end = int(start), min(int(end), len(u.spans))
        if start < end:
            marks.append((u.spans[start][1], u.spans[end - 1][2]))
    out, pos = [], 0
    for a, b in sorted(marks):
        a = max(a, pos)
        if a >= b:
            continue
        out += [html.escape(text[pos:a]), "<mark>", html.escape(text[a:b]), "</mark>"]
        pos = b
    out.append(html.escape(text[pos:]))
    return "".join(out)


def write_html(path: Path, assignment: str, analysis: Analysis) -> int:
    """The flagged pairs of one assignment side by side; every text from a submission is escaped.
    Returns the number of flagged functions."""
    from markupsafe import Markup

    from tfmgrader.files import render_template, write_atomic

    flagged = sorted((m for m in analysis.matches.values() if m.flagged), key=lambda m: (-m.similarity, m.student))
    total: dict[str, int] = {}
    short: dict[str, int] = {}
    for m in analysis.matches.values():
        total[m.function] = total.get(m.function, 0) + 1
        short[m.function] = short.get(m.function, 0) + (m.similarity is None)
    page = render_template(
        "similarity.html.j2", assignment=assignment, flagged=flagged, threshold=THRESHOLD, k=K, min_tokens=MIN_TOKENS,
        submissions=len({m.student for m in analysis.matches.values()}),
        too_short=[f"{f} ({n} of {total[f]})" for f, n in short.items() if n],
        marked=[Markup(_highlighted(m.unit, m.slices)) for m in flagged])     # escaped there, <mark> added
    write_atomic(path, page)
    return len(flagged)
