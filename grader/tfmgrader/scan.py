"""Static check of a learner's code, run in the grader's process before anything executes.

An allow-list of capabilities, not of whatever a module happens to contain.  Each learner cell (answer cells
and any cell the learner added) is turned into plain Python exactly as the kernel would turn it (IPython's
own input transformer, so magics and shell escapes become the ``get_ipython()`` calls they really are) and
parsed.  Then every name and attribute it uses must be one of:

- a name the learner's own code binds (a function, a parameter, a local or top-level variable, a helper);
- an allowed built-in (``len``, ``range``, ``sum``, ``print``, exceptions …), see ``ALLOWED_BUILTINS``;
- a module of the reviewed allow-list ``allowlist.json`` (``torch`` and its tensor packages, ``math``,
  ``numpy``, ``typing`` …), used by name (``torch.zeros``, not ``t = torch``), and only the names that list
  gives for it: nothing is admitted because it exists in a module (``policy.py`` reads the list, and its
  lock pins what each name refers to in the installed packages);
- on a value, an attribute of the list's ``value_attributes`` (tensors, PyTorch modules, arrays, Python's
  values) or one the answer defines, never one of its ``refused_attributes`` (storages, loaders, hooks …);
- a name the notebook's read-only cells bind, except the checking module ``check``.

No code from data: a string in an annotation is what ``typing.get_type_hints`` would ``eval``, so it is
parsed and checked like code (a string that is not Python is flagged); the helpers that evaluate strings or
load serialised objects (``get_type_hints``, ``ForwardRef``, ``singledispatch``, ``torch.load`` …) are not on
the list.  The library shortcuts come from ``tfmcheck.checking.SHORTCUT_POLICY``, the list the in-kernel check
uses too.

Everything else is flagged: any dunder (``__class__``, ``__dict__`` …), reflection (``getattr``, ``vars``,
``globals``, ``exec``, ``eval``, ``compile``, ``type``, ``sys.modules``, ``importlib`` …), files, processes and
sockets, assigning to attributes of modules or of the read-only cells' objects, rebinding a read-only or
built-in name, reading a test cell's variable inside a function, subclassing anything but ``nn.Module``.

It fails closed: a cell that cannot be transformed or parsed is flagged (and withheld), never skipped.  A
flag never depends on running the code; flagged cells are withheld from grading (``preprocessors.
ScanSubmission``) and the reasons go into the report for a person to review.
"""
from __future__ import annotations

import ast
import builtins
import functools
import importlib
import json
import re
import string
import symtable
from pathlib import Path
from dataclasses import dataclass

from tfmgrader import policy as _policy
from tfmcheck.checking import shortcut_names

POLICY = _policy.load()
# Modules (full dotted names) an answer may import or use.
ALLOWED_MODULES = set(POLICY.modules)
ALLOWED_BUILTINS = {
    "abs", "all", "any", "bool", "callable", "chr", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "format", "frozenset", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next",
    "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple",
    "zip", "super", "property", "staticmethod", "classmethod", "NotImplemented", "Ellipsis", "display",
    "Exception", "ValueError", "TypeError", "RuntimeError", "IndexError", "KeyError", "NotImplementedError",
    "AssertionError", "ZeroDivisionError", "ArithmeticError", "OverflowError", "StopIteration", "LookupError",
    "AttributeError", "Warning", "UserWarning", "RuntimeWarning", "DeprecationWarning",
}
# Library implementations of what the exercises ask the learner to write: the one policy of
# tfmcheck.checking (SHORTCUT_POLICY), which the in-kernel check enforces too.
FORBIDDEN_ATTRIBUTES = shortcut_names()
# Frames, code objects and tracebacks: they reach the notebook's globals and built-ins without a dunder.
FRAME_ATTRIBUTES = {
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_suspended", "cr_frame", "cr_code", "cr_await", "cr_origin",
    "ag_frame", "ag_code", "ag_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_lasti",
    "f_trace", "f_lineno", "tb_frame", "tb_next", "tb_lasti", "tb_lineno", "func_globals", "func_code",
}
# Attributes refused on any value, even where the answer defines one of the same name.
DANGEROUS_ATTRIBUTES = set(POLICY.refused_attributes) | FRAME_ATTRIBUTES
DANGEROUS_PREFIXES = ("register_", "set_default")
# Attribute names an answer may use on values: the reviewed list (allowlist.json "value_attributes").
ALLOWED_ATTRIBUTES = set(POLICY.value_attributes) - DANGEROUS_ATTRIBUTES


@functools.cache
def library_private_attributes() -> frozenset[str]:
    """Private attributes of the reviewed value types: never admitted, even if the answer defines one so named.
    Listed on first use, not at import: making the sample objects (an optimizer among them) imports
    ``torch._dynamo``, most of a second that a grading process whose answers use no private name never pays."""
    return frozenset(_policy.library_private_attributes())


def admitted_on_any_value(attr: str) -> bool:
    """An attribute name the scan admits on a value it cannot prove is one of the answer's own classes: a name of
    the reviewed list, never a refused, shortcut or private one.  ``tfmgrader.closure`` follows exactly these."""
    return attr in ALLOWED_ATTRIBUTES and attr not in FORBIDDEN_ATTRIBUTES and not attr.startswith("_") and \
        not attr.startswith(DANGEROUS_PREFIXES)


#: The attribute names of every object an answer can reach (``tfmgrader.closure``, to depth 4), and of every module a
#: graded kernel loads and IPython's shell (``closure.kernel_names``: the names a route out would use), pinned in
#: ``reachable_names.json`` and kept current by ``tests/tfmgrader/test_closure.py``.
REACHABLE_NAMES = Path(__file__).with_name("reachable_names.json")


@functools.cache
def reachable_attribute_names() -> frozenset[str]:
    """The attribute names that objects an answer can reach offer.  A name the answer defines is admitted on
    values only if it is not one of these: on an object of PyTorch, NumPy or Python it then just fails."""
    try:
        return frozenset(json.loads(REACHABLE_NAMES.read_text()))
    except (OSError, ValueError) as err:
        raise _policy.PolicyError(f"cannot read {REACHABLE_NAMES}: {err}") from err


#: Names IPython puts in the notebook's namespace: an answer never binds them, not even in a branch that never runs
#: (the kernel would then still read IPython's ``get_ipython`` where the scan sees the answer's own).
IPYTHON_NAMES = {"get_ipython", "In", "Out", "exit", "quit", "_ih", "_oh", "_dh", "_i", "_ii", "_iii", "_", "__",
                 "___", "display", "_exit_code"}
#: ... and the ones it writes after each cell: ``_5`` (what cell 5 displayed), ``_i5`` (its input), ``_ii`` ...
_IPYTHON_WRITES = re.compile(r"_+\d*|_i+\d*")


def is_ipython_name(name: str) -> bool:
    """A name IPython binds in the notebook's namespace, now or after a later cell; not ``_``, every loop's
    throw-away name (the graded kernel keeps no output cache, so IPython's ``_`` never holds an output there)."""
    return name != "_" and (name in IPYTHON_NAMES or _IPYTHON_WRITES.fullmatch(name) is not None)

#: Listed types an answer may only test against (``isinstance``/``issubclass``'s second argument) or write in an
#: annotation, never call or hold: called, ``numpy.ndarray(shape, "O", buffer, offset)`` lays an array of object
#: pointers over memory the answer chose, which forges any object, a module's globals included (round 12).
TYPE_ONLY = {"numpy.ndarray"}
#: Listed names an answer may only write as the decorator of its own class statement: called on a class value,
#: ``dataclass`` rewrites that class (a library's too) and writes code from its fields' names (round 24).
DECORATOR_ONLY = {"dataclasses.dataclass"}


def _format_attributes(template: str) -> list[str]:
    """The attribute names the fields of a ``str.format`` template read (``'{0.x.y}'``: x, y), at any nesting; a
    template that does not parse reads whatever it likes (``['<unparsable template>']``)."""
    import _string

    names = []
    try:
        for _, field, spec, _ in string.Formatter().parse(template):
            if field:
                _, rest = _string.formatter_field_name_split(field)
                names += [key for is_attr, key in rest if is_attr]
            if spec and "{" in spec:
                names += _format_attributes(spec)
    except (ValueError, TypeError):
        return ["<unparsable template>"]
    return names


def _type_test_arguments(tree) -> set[int]:
    """ids of the nodes that are ``isinstance``'s or ``issubclass``'s second argument (or an element of it)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            arg = node.args[1]
            found |= {id(n) for n in (arg.elts if isinstance(arg, ast.Tuple) else [arg])}
    return found


ALLOWED_BASES = {"torch.nn.Module", "torch.nn.modules.module.Module", "torch.autograd.Function",
                 "torch.autograd.function.Function"}
ALLOWED_DUNDER_DEFS = {"__init__", "__call__", "__repr__"}
# Methods that libraries call on an object by these names, with objects of their own as arguments (IPython's
# display protocol: `_repr_pretty_(self, printer, cycle)`, `_repr_html_` ..., `_ipython_display_`): refused, as
# are all `_name_` forms.
CALLBACK_PREFIXES = ("_repr_", "_ipython_")
_FORMAT_FIELD = re.compile(r"\{[^{}]*[.\[]\s*_")
_DUNDER_STRING = re.compile(r"__\w+__")
_FORMAT_ATTRIBUTE = re.compile(r"\{[^{}]*\.\s*_")   # a format field reading an attribute that starts with '_'


@dataclass(frozen=True)
class Flag:
    cell: int       # index of the cell in the notebook
    line: int       # line in that cell (1-based)
    reason: str

    def __str__(self) -> str:
        return f"cell {self.cell}, line {self.line}: {self.reason}"


# --- turning a cell into Python ---------------------------------------------------------------------------
#: Characters ``str.splitlines`` (IPython's reading of a cell) breaks lines at and Python's tokenizer does not (it
#: accepts them in a comment or a string): a cell holding one is two different programs to the two readers.
LINE_BREAKS_READ_TWO_WAYS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def to_python(src: str) -> str:
    """The Python the IPython kernel runs for ``src`` (magics and ``!`` become ``get_ipython()`` calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(src)


def parse(src: str) -> ast.Module:
    """``src`` as the kernel would see it; raises SyntaxError (or ValueError) when it cannot be read."""
    return ast.parse(to_python(src))


# --- what names a piece of code binds ---------------------------------------------------------------------
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def _imported(alias: ast.alias, module: str | None, level: int = 0) -> tuple[str, str]:
    """(bound name, what it is) for one imported name: 'import:<dotted module or module.attr>'."""
    if module is None:     # import a.b.c [as x]
        if alias.asname:
            return alias.asname, f"import:{alias.name}"
        return alias.name.split(".")[0], f"import:{alias.name.split('.')[0]}"
    return alias.asname or alias.name, f"import:{'.' * level}{module}.{alias.name}"


def merge_binding(previous: str | None, what: str) -> str:
    """What a name bound in two places is: the same kind of binding keeps its kind (``import torch`` in two cells,
    a function defined twice); two different kinds (a class, then ``Base = warnings.catch_warnings``; an import, then
    a value) leave only a plain value, whose privileges (a base class, a module alias) none of them gets."""
    return what if previous is None or previous == what else "value"


class _Binder(ast.NodeVisitor):
    """Names bound directly in one scope (nested scopes contribute only their own name)."""

    def __init__(self):
        self.names: dict[str, str] = {}
        self.declared_global: set[str] = set()

    def bind(self, name, what="value"):
        self.names[name] = merge_binding(self.names.get(name), what)

    def visit_Name(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.bind(node.id)

    def visit_Import(self, node):
        for a in node.names:
            self.bind(*_imported(a, None))

    def visit_ImportFrom(self, node):
        for a in node.names:
            if a.name != "*":
                self.bind(*_imported(a, node.module or "", node.level))

    def _nested(self, node):
        if not isinstance(node, ast.Lambda) and hasattr(node, "name"):
            self.bind(node.name, "def")
        for d in getattr(node, "decorator_list", []):
            self.visit(d)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _nested

    def visit_Lambda(self, node):
        pass

    def visit_ListComp(self, node):   # the first iterable belongs to the enclosing scope
        self.visit(node.generators[0].iter)

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_NamedExpr(self, node):
        self.bind(node.target.id)
        self.visit(node.value)

    def visit_ExceptHandler(self, node):
        if node.name:
            self.bind(node.name)
        self.generic_visit(node)

    def visit_Global(self, node):
        self.declared_global |= set(node.names)

    visit_Nonlocal = visit_Global

    def visit_MatchAs(self, node):
        if node.name:
            self.bind(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node):
        if node.name:
            self.bind(node.name)

    def visit_MatchMapping(self, node):
        if node.rest:
            self.bind(node.rest)
        self.generic_visit(node)


def scope_bindings(node) -> tuple[dict[str, str], set[str]]:
    """(names bound in the scope that ``node`` opens, names it declares global/nonlocal)."""
    b = _Binder()
    if isinstance(node, ast.Module):
        body = node.body
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
            if a is not None:
                b.bind(a.arg)
        body = node.body if isinstance(node.body, list) else [node.body]
    elif isinstance(node, ast.ClassDef):
        body = node.body
    else:   # comprehension: its targets
        for gen in node.generators:
            b.visit(gen.target)
        body = []
    for stmt in body:
        b.visit(stmt)
    return {k: v for k, v in b.names.items() if k not in b.declared_global}, b.declared_global


def bound_names(tree: ast.AST) -> dict[str, str]:
    """Names a piece of code binds at its top level: 'import:<module>', 'def' or 'value'."""
    return scope_bindings(tree)[0]


# --- Python's own scoping: the standard library's symtable, matched to the syntax tree -----------------------
_COMPREHENSION_NAMES = {ast.ListComp: "listcomp", ast.SetComp: "setcomp", ast.DictComp: "dictcomp",
                        ast.GeneratorExp: "genexpr"}


class ScopeError(ValueError):
    """The syntax tree's scopes and the symbol table's could not be matched: the cell is not checked (flagged)."""


def scope_name(node) -> str:
    if isinstance(node, ast.Lambda):
        return "lambda"
    return _COMPREHENSION_NAMES.get(type(node)) or node.name


def _outer_parts(node) -> list:
    """The parts of a scope-opening node that Python evaluates in the enclosing scope, in the order the symbol
    table visits them (CPython's symtable.c): defaults, keyword defaults, annotations, decorators; a class's
    bases, keywords and decorators; a comprehension's first iterable."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        parts = list(a.defaults) + [d for d in a.kw_defaults if d is not None]
        if not isinstance(node, ast.Lambda):
            for arg in a.posonlyargs + a.args + ([a.vararg] if a.vararg else []) + ([a.kwarg] if a.kwarg else []) \
                    + a.kwonlyargs:
                if arg.annotation is not None:
                    parts.append(arg.annotation)
            if node.returns is not None:
                parts.append(node.returns)
            parts += node.decorator_list
        return parts
    if isinstance(node, ast.ClassDef):
        return list(node.bases) + [k.value for k in node.keywords] + list(node.decorator_list)
    return [node.generators[0].iter]        # a comprehension


def _inner_parts(node) -> list:
    """The parts of a scope-opening node evaluated in its own scope, in the symbol table's order."""
    if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return list(node.body)
    if isinstance(node, ast.Lambda):
        return [node.body]
    first, rest = node.generators[0], node.generators[1:]
    parts = [first.target, *first.ifs]
    for gen in rest:
        parts += [gen.target, gen.iter, *gen.ifs]
    if isinstance(node, ast.DictComp):
        return parts + [node.value, node.key]
    return parts + [node.elt]


def _child_scopes(node) -> list:
    """The scope-opening nodes directly inside ``node``'s scope, in the order the symbol table enters them."""
    found = []

    def walk(n):
        if isinstance(n, SCOPES):
            for part in _outer_parts(n):
                walk(part)
            found.append(n)
            return
        if isinstance(n, ast.NamedExpr):       # the value is visited before the target
            walk(n.value)
            walk(n.target)
            return
        for child in ast.iter_child_nodes(n):
            walk(child)

    for part in _inner_parts(node):
        walk(part)
    return found


def symbol_tables(tree: ast.Module, source: str) -> dict[int, "symtable.SymbolTable"]:
    """``{id(scope node): its symbol table}`` for every scope of ``tree`` (parsed from ``source``), from the
    standard library's ``symtable``; raises ScopeError when the two do not line up (the cell is then flagged)."""
    try:
        top = symtable.symtable(source, "<cell>", "exec")
    except SyntaxError as err:
        raise ScopeError(f"Python's symbol table rejects it ({err.msg})") from err
    tables = {id(tree): top}
    pending = [(tree, top)]
    while pending:
        node, table = pending.pop()
        children = [t for t in table.get_children() if t.get_name() != "_annotation"]
        nodes = _child_scopes(node)
        if len(children) != len(nodes):
            raise ScopeError(f"{len(nodes)} scopes in the code, {len(children)} in Python's symbol table")
        for child_node, child_table in zip(nodes, children):
            if (scope_name(child_node), child_node.lineno) != (child_table.get_name(), child_table.get_lineno()):
                raise ScopeError(f"the scope {scope_name(child_node)!r} at line {child_node.lineno} does not "
                                 f"match Python's symbol table")
            tables[id(child_node)] = child_table
            pending.append((child_node, child_table))
    return tables


# --- modules, resolved by looking at the real (trusted) module objects ------------------------------------
def _module_attr(path: str):
    """The object ``path`` (e.g. 'torch.nn.functional.softmax') names, or None; imports only allowed modules."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        mod = ".".join(parts[:i])
        if mod in ALLOWED_MODULES:
            try:
                obj = importlib.import_module(mod)
            except ImportError:
                return None
            for p in parts[i:]:
                obj = getattr(obj, p, None)
                if obj is None:
                    return None
            return obj
    return None


# --- the check --------------------------------------------------------------------------------------------
def _allowed_uses(tree) -> tuple[set[int], set[int]]:
    """ids of the Name nodes where a class may be named (called, an attribute's base, ``isinstance``'s or
    ``issubclass``'s second argument, a base class, ``super``'s first argument), and of the ``type(x)`` calls
    that are only printed or compared."""
    names, types_ok = set(), set()

    def add(node):
        for n in (node.elts if isinstance(node, ast.Tuple) else [node]):
            if isinstance(n, ast.Name):
                names.add(id(n))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            add(node.func)
            fn = node.func.id if isinstance(node.func, ast.Name) else None
            if fn in ("isinstance", "issubclass") and len(node.args) == 2:
                add(node.args[1])
            if fn == "super" and node.args:
                add(node.args[0])
            if fn in ("print", "str", "repr", "format"):
                types_ok |= {id(a) for a in node.args}
        elif isinstance(node, ast.Attribute):
            add(node.value)
        elif isinstance(node, ast.ClassDef):
            for b in node.bases:
                add(b)
        elif isinstance(node, ast.Compare):
            types_ok |= {id(a) for a in [node.left, *node.comparators]}
        elif isinstance(node, ast.FormattedValue):
            types_ok.add(id(node.value))
    return names, types_ok


def _nonlocal_below(table, name) -> bool:
    """A scope nested in ``table``'s (at any depth) declares ``name`` nonlocal: it may rebind the variable."""
    if table is None:
        return True
    for child in table.get_children():
        try:
            if child.lookup(name).is_nonlocal():
                return True
        except KeyError:
            pass
        if _nonlocal_below(child, name):
            return True
    return False


def _reads_global(table, name) -> bool:
    """Wherever ``name`` appears in ``table``'s scope and the scopes nested in it, it is the module's global
    (round 10: a parameter ``Lens=max`` made ``Lens([x])`` look like a new instance of the class ``Lens``)."""
    if table is None:
        return False
    try:
        sym = table.lookup(name)
        if not sym.is_global() or sym.is_declared_global():
            return False
    except KeyError:
        pass
    return all(_reads_global(child, name) for child in table.get_children())


def _only_new_instances(function, name, classes, table=None) -> bool:
    """Every binding of ``name`` in ``function``'s own scope is ``name = C(...)`` with C in ``classes`` and C the
    module's global there (``table``: the function's symbol table), and no nested scope declares it nonlocal."""
    parents, found = {}, False
    for node in ast.walk(function):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(function):
        if isinstance(node, ast.Nonlocal) and name in node.names:
            return False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not function \
                and node.name == name:
            return False
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name.split(".")[0]) == name
                                                                  for a in node.names):
            return False
        if isinstance(node, ast.ExceptHandler) and node.name == name:
            return False
        if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name == name:
            return False
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            owner = parents.get(id(node))
            if not (isinstance(owner, ast.Assign) and owner.targets == [node] and isinstance(owner.value, ast.Call)
                    and isinstance(owner.value.func, ast.Name) and owner.value.func.id in classes
                    and _reads_global(table, owner.value.func.id)):
                return False
            found = True
    return found


def binding_count(trees, name) -> int:
    """How many places in the answer bind ``name``, in any scope: a class is the answer's own object only where
    its definition is the one binding of its name (never rebound, redefined, imported over or declared global)."""
    count = 0
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
                count += 1
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                count += 1
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                count += sum((a.asname or a.name.split(".")[0]) == name for a in node.names)
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name == name:
                count += 1
            elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                count += 2          # whatever it then binds, the name is no longer the definition's alone
    return count


#: Class decorators that hand back the class they were given (reviewed): a class with any other decorator is
#: whatever the decorator returned (round 8: ``@context class Ctx`` bound ``Ctx`` to a library object).
CLASS_DECORATORS_KEEPING_THE_CLASS = {"dataclass", "dataclasses.dataclass"}
#: Library base classes whose instances the library itself calls the methods of, as ``self``: ``nn.Module`` calls
#: ``forward`` on the instance.  (``autograd.Function`` calls ``forward`` through the class with a first argument of
#: its choosing, round 8: a subclass of it is never the answer's own object.)
OWN_BASES = {"torch.nn.Module", "torch.nn.modules.module.Module"}   # by what the name holds (own_classes)


def plain_classes(trees) -> set[str]:
    """The answer's top-level classes whose name provably holds the class its ``class`` statement made: bound once
    (``binding_count``), no metaclass keyword, no decorator but the reviewed ones."""
    trees = list(trees)

    def decorator(d) -> str:
        return ast.unparse(d.func if isinstance(d, ast.Call) else d)

    return {n.name for tree in trees for n in tree.body if isinstance(n, ast.ClassDef)
            and binding_count(trees, n.name) == 1 and not n.keywords
            and all(decorator(d) in CLASS_DECORATORS_KEEPING_THE_CLASS for d in n.decorator_list)}


def own_classes(trees) -> set[str]:
    """The answer's top-level classes whose name provably holds the class its ``class`` statement made, and whose
    instances are provably the answer's own objects: bound once (``binding_count``), no decorator but the reviewed
    ones, and no base but the answer's own such classes and ``torch.nn.Module``."""
    trees = list(trees)
    classes = {n.name: n for tree in trees for n in tree.body if isinstance(n, ast.ClassDef)}
    plain = plain_classes(trees)

    imported: dict[str, set[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    imported.setdefault(a.asname or a.name.split(".")[0], set()).add(
                        a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    imported.setdefault(a.asname or a.name, set()).add(f"{node.module}.{a.name}")

    def module_base(base) -> bool:
        """``base`` is PyTorch's ``nn.Module`` by what its name holds, not by how it is spelled (round 26:
        ``from torch.autograd import Function as Module``): its first name bound once, by one import, or the
        setup cell's ``torch``."""
        parts = ast.unparse(base).split(".")
        if not all(p.isidentifier() for p in parts):
            return False
        if parts[0] in imported:
            if len(imported[parts[0]]) != 1 or binding_count(trees, parts[0]) != 1:
                return False
            parts = [*next(iter(imported[parts[0]])).split("."), *parts[1:]]
        elif parts[0] != "torch" or binding_count(trees, "torch"):
            return False
        return ".".join(parts) in OWN_BASES

    def own(name, seen=()) -> bool:
        if name not in plain or name in seen:
            return False
        for base in classes[name].bases:
            if not (module_base(base) or (isinstance(base, ast.Name) and own(base.id, (*seen, name)))):
                return False
        return True

    return {name for name in classes if own(name)}


def class_members(trees) -> dict[str, dict[str, str]]:
    """``{class: {name: 'plain' | 'static' | 'class' | 'value'}}`` for the answer's top-level classes: what each
    binds in its body (methods by kind, properties as 'plain'), its own classes' members included."""
    classes = {n.name: n for tree in trees for n in tree.body if isinstance(n, ast.ClassDef)}
    members: dict[str, dict[str, str]] = {}

    def of(name, seen=()):
        if name in members:
            return members[name]
        node, found = classes[name], {}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
                found.update(of(base.id, (*seen, name)))
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decorators = {ast.unparse(d) for d in item.decorator_list}
                found[item.name] = "static" if "staticmethod" in decorators else \
                    "class" if "classmethod" in decorators else "plain"
            elif isinstance(item, ast.ClassDef):
                found[item.name] = "value"
            else:
                for name_ in bound_names(ast.Module(body=[item], type_ignores=[])):
                    found[name_] = "value"
        members[name] = found
        return found

    for name in classes:
        of(name)
    return members


class _Scope:
    def __init__(self, node, kind, names, declared_global, table=None):
        self.node, self.kind, self.names, self.declared_global = node, kind, names, declared_global
        self.table = table
        self.position = 0       # the statement of the body being checked

    def bound_before(self, name) -> bool:
        """A statement of this body before the current one binds ``name`` unconditionally."""
        simple = (ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                  ast.ImportFrom)
        bound = False
        for item in self.node.body[:self.position]:
            if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Del) for n in ast.walk(item)):
                bound = False       # 'del name' (even in a branch): Python may read the name from outside again
            elif isinstance(item, simple) and not (isinstance(item, ast.AnnAssign) and item.value is None) \
                    and name in bound_names(ast.Module(body=[item], type_ignores=[])):
                bound = True
        return bound

    def symbol(self, name):
        """The symbol table's entry for ``name`` in this scope, or None (a name the table does not list, e.g. in
        a postponed annotation, is read as a global)."""
        if self.table is None:
            return None
        try:
            return self.table.lookup(name)
        except KeyError:
            return None


def _constants_only(node: ast.AST) -> bool:
    """Constants, and tuples of them: what ``Literal[...]`` may hold."""
    return all(isinstance(n, (ast.Constant, ast.Tuple, ast.Load)) for n in ast.walk(node))


class _Checker(ast.NodeVisitor):
    """Walks one learner cell; ``context`` is shared by every cell of the notebook."""

    def __init__(self, cell: int, context: "_Context", tables: dict | None = None):
        self.cell, self.ctx = cell, context
        self.tables = tables or {}                # id(scope node) -> its symbol table (symbol_tables)
        self.flags: list[Flag] = []
        self.stack: list[_Scope] = []
        self.annotation_depth = 0
        self.called: set[int] = set()       # the callee expressions of the calls seen (visit_Call)
        self.class_decorators: set[int] = set()     # a class statement's decorators (and the callee of @d(...))
        self.attribute_bases: set[int] = set()    # ids of Name/Attribute nodes used as the base of an attribute
        self.visited: set[int] | None = None      # ids of the nodes visited, when asked for (scan_cells(reach=))

    def visit(self, node):
        if self.visited is not None:
            self.visited.add(id(node))
        return super().visit(node)

    def flag(self, node, reason):
        self.flags.append(Flag(self.cell, getattr(node, "lineno", 1), reason))

    # scopes --------------------------------------------------------------------------------------------
    def run(self, tree: ast.Module):
        self.class_name_ok, self.type_call_ok = _allowed_uses(tree)
        self.type_tests = _type_test_arguments(tree)
        for node, name in deciding_name_bindings(tree):
            self.flag(node, f"binds '{name}', a name whose meaning the check relies on (which methods are "
                            f"properties, classmethods or dataclasses, what super() is); choose another name")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self._check_class_body(node)
        self.stack.append(_Scope(tree, "module", self.ctx.learner_top, set(), self.tables.get(id(tree))))
        for stmt in tree.body:
            self.visit(stmt)
        self.stack.pop()

    def _enter(self, node, kind, body):
        names, declared = scope_bindings(node)
        for name in declared:
            if name in self.ctx.protected or name in dir(builtins):
                self.flag(node, f"declares 'global {name}', a name the notebook's read-only cells or Python define")
        scope = _Scope(node, kind, names, declared, self.tables.get(id(node)))
        self.stack.append(scope)
        for position, item in enumerate(body):
            scope.position = position
            self.visit(item)
        self.stack.pop()

    def in_function(self) -> bool:
        return any(s.kind == "function" for s in self.stack)

    def resolve(self, name: str) -> str:
        """'local' (the learner's own), 'module' (a top-level name of the learner), 'setup', 'test',
        'builtin', or 'unknown'.  Where a name lives is Python's own answer (``symtable``): a function's local,
        parameter or enclosing function's variable is the learner's; anything else is looked up at the top."""
        scope = self.stack[-1]
        if scope.kind != "module":
            sym = scope.symbol(name)
            if sym is None and scope.table is None:
                return self._resolve_by_hand(name)
            if sym is not None and not sym.is_global() and (sym.is_local() or sym.is_parameter() or sym.is_free()):
                return "local"
        return self.resolve_global(name)

    def _resolve_by_hand(self, name: str) -> str:
        """For a scope without a symbol table (none today: every scope node is matched, or the cell flagged)."""
        innermost = self.stack[-1]
        for scope in reversed(self.stack[1:]):
            if name in scope.declared_global:
                break
            if scope.kind == "class" and scope is not innermost:
                continue
            if name in scope.names:
                return "local"
        return self.resolve_global(name)

    def class_fallback(self, name: str) -> str | None:
        """In a class body that binds ``name``, Python reads it (LOAD_NAME) from the enclosing function or the
        globals and built-ins until that binding has run: what it reads then, or None outside that case."""
        scope = self.stack[-1]
        sym = scope.symbol(name)
        if scope.kind != "class" or sym is None or not sym.is_local() or scope.bound_before(name):
            return None
        for outer in reversed(self.stack[1:-1]):
            if outer.kind == "function":
                osym = outer.symbol(name)
                if osym is not None and not osym.is_global() and (osym.is_local() or osym.is_free()):
                    return "local"
        return self.resolve_global(name)

    def resolve_global(self, name: str) -> str:
        """Where a global read of ``name`` leads: the learner's top level, the read-only cells, a built-in, a
        test cell's variable, or nothing known."""
        if name in self.ctx.learner_top or name in self.ctx.graded:
            return "module"
        if name in self.ctx.setup:
            return "setup"
        if name in ALLOWED_BUILTINS:
            return "builtin"
        if name in self.ctx.tests:
            return "test"
        return "unknown"

    # definitions ---------------------------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        self.visit_FunctionDef_decorators(node)
        if node.name.startswith("__"):
            if not (node.name in ALLOWED_DUNDER_DEFS and self.stack[-1].kind == "class"):
                self.flag(node, f"defines '{node.name}' (a dunder method can change how the tests see values)")
        elif node.name.startswith(CALLBACK_PREFIXES) or (node.name.startswith("_") and node.name.endswith("_")):
            self.flag(node, f"defines '{node.name}', a name that libraries call by themselves (IPython's display "
                            f"protocol and the like hand the method objects of their own); choose another name")
        else:
            self._check_store_name(node, node.name)
        for d in node.decorator_list:
            self.visit(d)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default)
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]:
            if a is not None and a.annotation is not None:
                self.visit_annotation(a.annotation)
            if a is not None and a.arg.startswith("__"):
                self.flag(node, f"uses the dunder name '{a.arg}'")
        if node.returns is not None:
            self.visit_annotation(node.returns)
        self._enter(node, "function", node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    # annotations: what typing.get_type_hints would evaluate is checked like code ---------------------------
    def visit_AnnAssign(self, node):
        self.visit(node.target)
        self.visit_annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_annotation(self, node):
        """An annotation: its expression is code (as written, or postponed by ``from __future__ import
        annotations``), and each string in it is code too, evaluated later in the notebook's globals."""
        self.annotation_depth += 1
        try:
            self.visit(node)
        finally:
            self.annotation_depth -= 1

    def _string_annotation(self, node):
        """A string inside an annotation: parse it and check it as an expression of the module's scope,
        where ``get_type_hints`` would evaluate it; a string that is not one expression is flagged."""
        if self.annotation_depth > 4:
            self.flag(node, "nests string annotations too deeply to check")
            return
        try:
            expr = ast.parse(node.value.strip(), mode="eval").body
        except (SyntaxError, ValueError):
            self.flag(node, f"has the string annotation {node.value[:40]!r}, which is not a Python expression; "
                            f"annotations are checked like code")
            return
        for child in ast.walk(expr):     # report at the annotation's line
            if hasattr(child, "lineno"):
                child.lineno = node.lineno
        stack, self.stack = self.stack, self.stack[:1]
        try:
            self.visit_annotation(expr)
        finally:
            self.stack = stack

    def _is_literal(self, node) -> bool:
        """``Literal[...]`` (typing's): its strings are values, not annotations."""
        path = self._dotted(node) if isinstance(node, ast.Attribute) else None
        if isinstance(node, ast.Name):
            what = self._binding(node.id)
            path = what[7:] if what.startswith("import:") else None
        return path == "typing.Literal"

    def visit_Lambda(self, node):
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default)
        self._enter(node, "function", [node.body])

    def visit_ClassDef(self, node):
        self._check_store_name(node, node.name)
        for d in node.decorator_list:
            self.class_decorators |= {id(d), id(d.func)} if isinstance(d, ast.Call) else {id(d)}
            self.visit(d)
        for base in node.bases:
            self.visit(base)
            if not self._allowed_base(base):
                self.flag(node, f"subclasses '{ast.unparse(base)}' (only torch.nn.Module and your own classes "
                                f"may be subclassed; a subclass of a tensor or a number can fake comparisons)")
        for kw in node.keywords:
            self.flag(node, f"passes '{kw.arg}=' to a class definition (metaclasses are not allowed in answers)")
        for name, line in class_body_names(node):
            if name in DANGEROUS_ATTRIBUTES or name in FORBIDDEN_ATTRIBUTES or name.startswith("__") and \
                    name not in ALLOWED_DUNDER_DEFS:
                self.flag(ast.Pass(lineno=line), f"binds '{name}' in a class body, a name an answer may never read "
                                                 f"on a value (a library that sets or reads it would hand it over)")
        self._enter(node, "class", node.body)

    def _check_class_body(self, node):
        """A class body binds each name once, and never a name a library calls by itself: a method's name rebound
        (``m = staticmethod(m)``) would no longer be the method the scan read (round 19), and a callback bound as a
        value (``_repr_pretty_ = helper``) or nn.Module's own private machinery overridden (``_apply``,
        ``_call_impl``) would be handed the library's objects (round 18)."""
        seen = {}
        for item in node.body:
            names = [item.name] if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else \
                list(bound_names(ast.Module(body=[item], type_ignores=[])))
            for name in names:
                if name in seen:
                    self.flag(item, f"binds '{name}' twice in the class '{node.name}' (each name of a class body "
                                    f"is bound once, so that a method is what its definition says)")
                seen[name] = item
                if is_callback_name(name) or name in module_private_names():
                    self.flag(item, f"binds '{name}' in a class body, a name that libraries call or read by "
                                    f"themselves (handing it objects of their own); choose another name")

    def visit_FunctionDef_decorators(self, node):
        """A property's setter or deleter (``@x.setter``) is refused, as ``property(fget, fset)`` is.  A classmethod's
        first parameter is the class itself, whose methods are plain functions that run with any object as their
        self: it is only called (``cls(...)``, a new instance) or asked for a value its class binds
        (``cls.count``), and ``super()`` is not used in it (round 10)."""
        for d in node.decorator_list:
            if isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter"):
                self.flag(d, f"defines a property's {d.attr} (a library's setattr would call your code with its own "
                             f"values); use a plain attribute or a method")
        if not (self.stack and self.stack[-1].kind == "class") or \
                "classmethod" not in {ast.unparse(d) for d in node.decorator_list}:
            return
        positional = node.args.posonlyargs + node.args.args
        first = positional[0].arg if positional else None
        used = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)} | \
            {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute) and self._value_member(n.attr)}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id == first and id(n) not in used:
                self.flag(n, f"uses the class '{first}' of a classmethod as a value (its methods would run with any "
                             f"object as self); only call it ('{first}(...)') or read a value its class binds, or "
                             "write a module-level function")
            elif isinstance(n, ast.Name) and n.id == "super":
                self.flag(n, "calls super() in a classmethod (it hands out the class's methods unbound); "
                             "write a module-level function")
        if node.args.vararg is not None and not positional:
            self.flag(node, "defines a classmethod without a first parameter")

    def _allowed_base(self, base) -> bool:
        if isinstance(base, ast.Name) and self.resolve(base.id) == "module" and base.id in self.ctx.plain_classes:
            return True     # the answer's own class (not a decorated one, nor a function: round 8)
        path = self._dotted(base)
        obj = _module_attr(path) if path else None
        dotted = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
        return obj is not None and dotted in ALLOWED_BASES

    def _comprehension(self, node):
        self.visit(node.generators[0].iter)
        names, _ = scope_bindings(node)
        self.stack.append(_Scope(node, "function", names, set(), self.tables.get(id(node))))
        for k, gen in enumerate(node.generators):
            if k:
                self.visit(gen.iter)
            self.visit(gen.target)      # a store like any other: `for obj.attr in ...` sets an attribute (round 36)
            for cond in gen.ifs:
                self.visit(cond)
        for part in ("elt", "key", "value"):
            if hasattr(node, part):
                self.visit(getattr(node, part))
        self.stack.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    # imports -------------------------------------------------------------------------------------------
    def visit_Import(self, node):
        for a in node.names:
            if a.name not in ALLOWED_MODULES:
                self.flag(node, f"imports '{a.name}', which answers may not use "
                                f"(allowed: torch, math, numpy and a few standard modules)")
            self._check_store_name(node, *_imported(a, None))

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level or module not in ALLOWED_MODULES:
            self.flag(node, f"imports from '{'.' * node.level}{module}', which answers may not use")
            return
        for a in node.names:
            if a.name == "*":
                self.flag(node, f"'from {module} import *' hides which names are used")
                continue
            self._check_attr_name(node, a.name, f"{module}.{a.name}", module_root=True)
            self._check_store_name(node, *_imported(a, module))

    def _callee(self, func) -> str | None:
        """The dotted name a call's function is, when it comes from an allowed module ('functools.wraps')."""
        if isinstance(func, ast.Attribute):
            return self._dotted(func)
        what = self._binding(func.id) if isinstance(func, ast.Name) else ""
        return what[7:] if what.startswith("import:") else None

    def visit_Call(self, node):
        self.called.add(id(node.func))
        callee = self._callee(node.func)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "format_map"):
            template = node.func.value
            if isinstance(template, ast.Name) and template.id == "str" and node.args:
                template = node.args[0]
            if not (isinstance(template, ast.Constant) and isinstance(template.value, str)):
                self.flag(node, f"calls .{node.func.attr}() on a template made at run time (a format field reads "
                                f"attributes by name); use an f-string or a constant template")
            elif _FORMAT_ATTRIBUTE.search(template.value):
                self.flag(node, "formats a field that reads a private or dunder attribute ('{0._x}'); use an "
                                "f-string on your own values")
            else:
                unlisted = [a for a in _format_attributes(template.value) if not admitted_on_any_value(a)]
                if unlisted:
                    self.flag(node, f"formats a field that reads the attribute '{unlisted[0]}', which is not on the "
                                    f"list for any value (round 12: '{{0.gi_frame}}'); use an f-string")
        if isinstance(node.func, ast.Name) and node.func.id == "property" and self.resolve("property") == "builtin" \
                and (len(node.args) > 1 or any(kw.arg != "doc" for kw in node.keywords)):
            self.flag(node, "makes a property with a setter or deleter (a library's setattr would call your code "
                            "with its own values); use a plain attribute or a method")
        if callee in ("functools.wraps", "functools.update_wrapper") and \
                (node.keywords or len(node.args) > (1 if callee.endswith("wraps") else 2)):
            self.flag(node, f"passes attribute names to {callee} (it reads and sets attributes named by strings); "
                            f"use it with the wrapped function alone")
        # type(x) with one argument only reads a type (printing it while exploring is common); the
        # three-argument form builds a class and stays flagged.
        if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 1 \
                and not node.keywords and self.resolve("type") == "unknown":
            if id(node) not in self.type_call_ok:
                self.flag(node, "uses type(...) other than to print or compare it (the class of a value reaches "
                                "its methods without their instance)")
            for arg in node.args:
                self.visit(arg)
            return
        self.generic_visit(node)

    # names ---------------------------------------------------------------------------------------------
    def visit_Name(self, node):
        name = node.id
        if name == "__name__" and isinstance(node.ctx, ast.Load):
            return      # the notebook's name ("__main__"), for an `if __name__ == "__main__":` demo
        if name.startswith("__") and name.endswith("__"):
            self.flag(node, f"uses the dunder name '{name}' (reflection is not allowed in answers)")
            return
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_store_name(node, name)
            return
        where = self.resolve(name)
        if self._binding(name)[7:] in DECORATOR_ONLY and id(node) not in self.class_decorators:
            self._dataclass_as_value(node)
        if self.stack[-1].kind == "class" and self.stack[-1].names.get(name) == "def" and where == "local" \
                and not self.annotation_depth:
            self.flag(node, f"reads the method '{name}' in its class body (a method reached without its instance "
                            f"runs with any self); define each method once and call it on an instance")
        if name in self.ctx.learner_classes and where == "module" and id(node) not in self.class_name_ok \
                and not self.annotation_depth:
            self.flag(node, f"uses the class '{name}' as a value; create instances ('{name}(...)'), use its "
                            f"attributes, or test with isinstance")
        self._check_load(node, name, where, self._binding(name))
        fallback = self.class_fallback(name)
        if fallback not in (None, "local", "module"):
            before = len(self.flags)
            self._check_load(node, name, fallback, self.ctx.setup.get(name, "") if fallback == "setup" else "")
            for k in range(before, len(self.flags)):
                f = self.flags[k]
                self.flags[k] = Flag(f.cell, f.line, f"{f.reason} (this class body binds '{name}' too, but until "
                                                      f"that line runs Python reads the name from outside the class)")

    def _check_type_only(self, node, path):
        """``TYPE_ONLY``: such a type only as ``isinstance``'s second argument or in an annotation."""
        if path in TYPE_ONLY and id(node) not in self.type_tests and not self.annotation_depth:
            self.flag(node, f"uses '{path}' other than in isinstance or an annotation (called, it lays an array "
                            f"over memory of the caller's choosing); make arrays with numpy.array, zeros or empty")

    def _check_load(self, node, name, where, what):
        """A read of ``name``, which lives ``where`` (see ``resolve``) and is bound to ``what``."""
        if what.startswith("import:"):
            self._check_type_only(node, what[7:])
        if what.startswith("import:") and what[7:] in ALLOWED_MODULES and id(node) not in self.attribute_bases:
            self.flag(node, f"uses the module '{name}' as a value; use what it offers by name "
                            f"('{name}.<name>'), so that the scan can check each name")
        if where == "setup":
            what = self.ctx.setup[name]
            if what.startswith("import:") and what[7:] not in ALLOWED_MODULES and \
                    not self._allowed_import_value(what[7:]):
                self.flag(node, f"uses '{name}' (the notebook's {what[7:]}), which answers may not use; "
                                f"the checking helpers are for the tests only")
        elif where == "test" and (self.ctx.tests.get(name) == "def"
                                  or self.ctx.tests.get(name, "").startswith("import:")):
            self.flag(node, f"uses '{name}', a function or module of the test cells; the tests' helpers are for "
                            f"the tests only")
        elif where == "test" and self.in_function():
            self.flag(node, f"reads '{name}', a variable of the test cells, inside a function; "
                            f"pass values in as arguments")
        elif where == "module" and self.in_function() and name in self.ctx.tests and \
                self.ctx.tests[name] != self.ctx.learner_top.get(name):
            self.flag(node, f"reads the global '{name}' inside a function, and the test cells rebind that name; "
                            f"pass values in as arguments")
        elif where == "unknown":
            if name == "get_ipython":
                self.flag(node, "uses IPython magics or shell escapes (! / %), not allowed in answers")
            elif name in dir(builtins):
                self.flag(node, f"uses '{name}', which answers may not use (reflection, files, processes or "
                                f"code execution)")
            else:
                self.flag(node, f"uses '{name}', which is neither defined in your answers nor allowed in them")

    def _allowed_import_value(self, path: str) -> bool:
        """A name the read-only cells imported from an allowed module and on its list (``from math import sqrt``)."""
        parent, _, name = path.rpartition(".")
        return POLICY.admits(parent, name)

    def _binding(self, name: str) -> str:
        """What the name is bound to where it is used ('import:<path>', 'def', 'value'), or ''."""
        where = self.resolve(name)
        table = self.ctx.learner_top if where == "module" else self.ctx.setup if where == "setup" else {}
        if where == "local":
            table = next((s.names for s in reversed(self.stack) if name in s.names), {})
        return table.get(name, "")

    def _check_store_name(self, node, name, what=None):
        if name.startswith("__"):
            self.flag(node, f"binds the dunder name '{name}'")
        if self.stack[-1].kind != "module" and name not in self.stack[-1].declared_global:
            return          # a local of the learner's own function or class (global_bindings sees the rest)
        reason = store_problem(self.ctx, name, what)
        if reason:
            self.flag(node, reason)

    # attributes ----------------------------------------------------------------------------------------
    def _dotted(self, node) -> str | None:
        """'torch.nn.functional.softmax' for an attribute chain rooted at an allowed module, else None."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        what = self._binding(node.id)
        if not what.startswith("import:"):
            return None
        return ".".join([what[7:]] + attrs[::-1])

    def visit_Attribute(self, node):
        attr = node.attr
        base = node.value
        if isinstance(base, ast.Name) and base.id in self.ctx.learner_classes and self.resolve(base.id) == "module" \
                and self.ctx.class_members.get(base.id, {}).get(attr) == "plain":
            self.flag(node, f"reads the method '{attr}' through the class '{base.id}'; call it on an instance "
                            f"('{base.id}(...).{attr}(...)' or 'self.{attr}(...)'), so that its self is yours")
        if self._dotted(node) in DECORATOR_ONLY and id(node) not in self.class_decorators:
            self._dataclass_as_value(node)
        if attr in ("format", "format_map") and id(node) not in self.called:
            self.flag(node, f"uses '.{attr}' as a value (a template given to it later reads attributes by name, "
                            f"round 24: partial(str.format, t)); call it on a constant template, or use an f-string")
        path = self._dotted(node)
        self._check_type_only(node, path)
        self._check_attr_name(node, attr, path, module_root=path is not None)
        if path in ALLOWED_MODULES and id(node) not in self.attribute_bases and isinstance(node.ctx, ast.Load):
            self.flag(node, f"uses the module '{path}' as a value; use what it offers by name, so that the scan "
                            f"can check each name")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_attr_store(node)
        self.attribute_bases.add(id(node.value))
        self.visit(node.value)

    def _dataclass_as_value(self, node):
        self.flag(node, "uses dataclasses.dataclass other than as the decorator of your own class statement "
                        "(called on a class value it rewrites that class, a library's too, and writes code from its "
                        "fields' names: round 24)")

    def _check_attr_name(self, node, attr, path, module_root):
        if attr == "__init__" and self._is_super_init(node):
            return
        if attr.startswith("__"):
            self.flag(node, f"uses '{attr}' (dunder attributes are reflection, not allowed in answers)")
        elif attr in FRAME_ATTRIBUTES:
            self.flag(node, f"uses '{attr}' (frames, code objects and tracebacks are reflection, not allowed "
                            f"in answers)")
        elif module_root and path.rpartition(".")[0] in ALLOWED_MODULES:
            self._check_module_name(node, path)
        else:
            self._check_value_attribute(node, attr, path or attr)

    def _check_module_name(self, node, path):
        """``module.name`` for an allowed module: admitted only if the reviewed list names it."""
        module, _, name = path.rpartition(".")
        if POLICY.admits(module, name):
            return
        if name in FORBIDDEN_ATTRIBUTES:
            self.flag(node, f"uses '{path}', a library implementation of what the exercise asks for")
        elif name.startswith("_"):
            self.flag(node, f"uses '{path}', a private part of a library")
        elif path in POLICY.refused:
            self.flag(node, f"uses '{path}', which {POLICY.refused[path]}; answers may not use it")
        else:
            self.flag(node, f"uses '{path}', which is not on the course's list of what answers may use from "
                            f"'{module}' (grader/tfmgrader/allowlist.json, reviewed by the instructor)")

    def _check_value_attribute(self, node, attr, shown):
        """An attribute of a value.  Admitted: a name of the reviewed list (``admitted_on_any_value``, which
        ``tfmgrader.closure`` shows leads nowhere dangerous); a name the answer's classes define, on a value that is
        provably the answer's own (``_own_base``: ``self``/``cls`` in a method, the class, a new instance); on any
        other value, a public name the answer defines that no object the answer can reach offers
        (``reachable_attribute_names``: on anything but the answer's own objects it can only fail).  Never a
        refused, shortcut or library-private one, whoever defines it."""
        if attr in DANGEROUS_ATTRIBUTES or attr.startswith(DANGEROUS_PREFIXES):
            why = POLICY.refused_attributes.get(attr, "hooks and global switches")
            self.flag(node, f"uses '{shown}' ({why}: not allowed in answers)")
        elif admitted_on_any_value(attr):
            return
        elif is_callback_name(attr):
            self.flag(node, f"uses '{shown}', a name that libraries call or read by themselves (handing it objects "
                            f"of their own); choose another name")
        elif attr in FORBIDDEN_ATTRIBUTES:
            self.flag(node, f"uses '{shown}', a library implementation of what the exercise asks for")
        elif attr.startswith("_") and attr in library_private_attributes():
            self.flag(node, f"uses '{shown}', a private attribute of tensors, modules or arrays (private parts "
                            f"of libraries are not allowed in answers; name your own attributes otherwise)")
        elif attr not in self.ctx.learner_attributes:
            if attr.startswith("_"):
                self.flag(node, f"uses '{shown}', a private attribute the answer does not define itself "
                                f"(private parts of libraries are not allowed in answers)")
            else:
                self.flag(node, f"uses the attribute '{attr}', which is not one of a tensor, a PyTorch module, an "
                                f"array, a number, a string or a container, nor one the answer defines")
        elif self._own_base(getattr(node, "value", None), attr):
            return
        elif self._method_parameter(getattr(node, "value", None)):
            self.flag(node, f"uses the attribute '{attr}' on a value that is not provably your own, a parameter "
                            f"of a method (whoever calls a method chooses its arguments); read your attributes "
                            f"through self, or pass the value itself")
        elif attr in reachable_attribute_names():
            self.flag(node, f"uses the attribute '{attr}' on a value that is not provably your own: your code "
                            f"defines it, but objects of PyTorch, NumPy or Python have an attribute of that name "
                            f"too; read it through self inside your class's methods, or give yours another name "
                            f"(for example 'my_{attr.lstrip('_')}')")
        elif attr.startswith("_"):
            self.flag(node, f"uses the private attribute '{attr}' on a value that is not provably your own; read "
                            f"private attributes through self (or cls) inside your class's methods")

    def _new_instance_variable(self, name) -> bool:
        """``name`` is a local variable of a function that only ever holds new instances of the answer's classes:
        its every binding there is ``name = C(...)`` with C one of the answer's top-level classes, and no nested
        scope rebinds it (``layout = HeadLayout(...); layout.merge(y)``)."""
        for k in range(len(self.stack) - 1, 0, -1):
            scope = self.stack[k]
            sym = scope.symbol(name)
            if scope.kind == "class":
                continue
            if sym is None or sym.is_global() or sym.is_parameter():
                return False
            if sym.is_free():
                continue
            if scope.kind != "function" or not isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return False
            return _only_new_instances(scope.node, name, self.ctx.learner_classes, scope.table)
        return False

    def _own_base(self, base, attr: str = "") -> bool:
        """``base`` is provably the answer's own object: ``self`` (the first parameter of an instance method or a
        property of one of the answer's classes), a call of one of its classes (a new instance), a variable that
        only holds those, or the class by name for a value its own body binds (``attr``)."""
        if isinstance(base, ast.Call):
            base = base.func
            return isinstance(base, ast.Name) and base.id in self.ctx.learner_classes and \
                self.resolve(base.id) == "module"
        if not isinstance(base, ast.Name):
            return False
        if base.id in self.ctx.learner_classes and self.resolve(base.id) == "module":
            return self.ctx.class_members.get(base.id, {}).get(attr) == "value"
        if self._new_instance_variable(base.id):
            return True
        found = self._binding_scope(base.id)
        if found is None:
            return False
        k, sym = found
        node = self.stack[k].node
        if not (sym.is_parameter() and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and k == 2 and self.stack[1].kind == "class"      # a method of a top-level class
                and self.stack[1].node.name in self.ctx.learner_classes and (node.args.posonlyargs + node.args.args)
                and (node.args.posonlyargs + node.args.args)[0].arg == base.id):
            return False
        decorators = {ast.unparse(d) for d in node.decorator_list}
        positional = node.args.posonlyargs + node.args.args
        if len(node.args.defaults) >= len(positional):
            return False        # a default for self: the method runs without an instance
        # Rebound in any form (round 10: 'case self:', 'except ... as self'), read from Python's own symbol table, by
        # the method or by a nested scope that declares it nonlocal; the syntax tree's stores on top of that.
        rebound = sym.is_assigned() or sym.is_imported() or _nonlocal_below(self.stack[k].table, base.id) or any(
            isinstance(n, ast.Name) and n.id == base.id and isinstance(n.ctx, (ast.Store, ast.Del))
            for n in ast.walk(node))
        if rebound:
            return False
        # A classmethod's first parameter is the class (or an own subclass), whose methods are plain functions that
        # take any object as their self (round 10): on it, only values its classes' bodies bind are the answer's own.
        if decorators == {"classmethod"}:
            return self._value_member(attr)
        return decorators <= {"property"}

    def _value_member(self, attr: str) -> bool:
        """``attr`` is a value that some of the answer's class bodies bind, and no class binds a function by it."""
        kinds = {m[attr] for m in self.ctx.class_members.values() if attr in m}
        return kinds == {"value"}

    def _binding_scope(self, name):
        """``(position in the stack, symbol)`` of the function scope whose variable ``name`` is where it is read
        (class bodies skipped, free variables followed outwards), or None for a global or unknown name."""
        for k in range(len(self.stack) - 1, 0, -1):
            scope = self.stack[k]
            if scope.kind == "class":
                continue
            sym = scope.symbol(name)
            if sym is None or sym.is_global():
                return None
            if not sym.is_free():
                return k, sym
        return None

    def _method_parameter(self, base) -> bool:
        """``base`` is a parameter (not the first, ``self``) of a method: a function defined in a class body, which
        the class's callers and any library protocol may call with values of their own."""
        found = self._binding_scope(base.id) if isinstance(base, ast.Name) else None
        if found is None:
            return False
        k, sym = found
        return sym.is_parameter() and isinstance(self.stack[k].node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
            and self.stack[k - 1].kind == "class"

    def _is_super_init(self, node) -> bool:
        v = getattr(node, "value", None)
        return isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super"

    def _check_attr_store(self, node):
        root = node
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        name = root.id if isinstance(root, ast.Name) else None
        # only the answer's own objects, as reads decide it (round 24: any local named 'self' was exempt, so
        # 'self = dataclasses.fields(x)[0]; self.name = ...' rewrote a library object)
        if name and name not in self.ctx.learner_classes and self._own_base(root):
            return
        if node.attr in ("requires_grad", "data", "grad") and name and self.resolve(name) in ("local", "module") \
                and not self._dotted(node):
            return
        self.flag(node, f"assigns to '{ast.unparse(node)}' (answers may only set attributes of their own "
                        f"objects through self)")

    def visit_Subscript(self, node):
        if self.annotation_depth and self._is_literal(node.value):
            self.visit(node.value)       # Literal["mean", "sum"]: values, not annotations
            if not _constants_only(node.slice):
                self.flag(node, "writes something other than constants in Literal[...] (an annotation runs when its "
                                "function is defined, and the scan reads Literal's arguments as values only)")
            return
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node
            while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and self.resolve(root.id) not in ("local", "module"):
                self.flag(node, f"assigns into '{ast.unparse(node)}', an object the answer does not own")
        self.generic_visit(node)

    def visit_MatchClass(self, node):
        self.flag(node, "uses a class pattern in a match statement ('case C(x=...)' reads attributes by name, "
                        "which the scan cannot check); test with isinstance and read attributes directly")
        self.generic_visit(node)

    # statements and literals ---------------------------------------------------------------------------
    def visit_Global(self, node):
        pass     # handled when the scope is entered

    visit_Nonlocal = visit_Global

    def visit_Constant(self, node):
        if isinstance(node.value, str) and self.annotation_depth:
            self._string_annotation(node)
        elif isinstance(node.value, str) and _FORMAT_FIELD.search(node.value):
            self.flag(node, "a format string reaches into an attribute or item starting with '_' (reflection)")
        elif isinstance(node.value, str) and _DUNDER_STRING.fullmatch(node.value) and node.value != "__main__":
            self.flag(node, f"uses the string '{node.value}', the name of a dunder (reflection by name)")


def store_problem(ctx: "_Context", name: str, what: str | None) -> str | None:
    """Why binding ``name`` (as ``what``: 'import:<path>', 'def', 'value') in the notebook's namespace is refused,
    or None."""
    if is_ipython_name(name):
        return f"binds '{name}', a name IPython gives the notebook; choose another name"
    if name in ctx.protected and not (what and what.startswith("import:") and ctx.protected[name] == what):
        return f"rebinds '{name}', which the notebook's read-only cells define"
    if name in dir(builtins):
        return f"rebinds the built-in '{name}' for the whole notebook, tests included; choose another name"
    return None


class _Context:
    def __init__(self, setup: dict[str, str], tests: dict[str, str], learner_top: dict[str, str], graded: set[str]):
        self.graded = set(graded)
        # Every name the read-only cells bind stays theirs, whatever the answer defines: the graded names come from
        # the learner's answer cells, so removing them here let `def check` or `def SHORTCUTS` in an answer cell
        # unprotect a setup name (red-team round 6); no exercise's read-only cells bind a graded function's name.
        self.setup = dict(setup)
        self.tests = dict(tests)
        self.learner_top = learner_top
        # Names a learner may not rebind at top level: everything the read-only cells bind, and the
        # functions, classes and imports of the test cells (their plain variables are reassigned before use).
        self.protected = dict(self.setup)
        self.protected.update({k: v for k, v in self.tests.items() if v != "value"})
        self.learner_attributes: set[str] = set()  # attributes the answer itself defines
        self.learner_classes: set[str] = set()     # the classes the answer defines at its top level
        self.plain_classes: set[str] = set()       # those that are classes for sure (``plain_classes``)
        self.class_members: dict[str, dict[str, str]] = {}   # class -> its members' kinds (class_members)


#: Names whose meaning the scan's rules rely on: a decorator ``@property``, ``@classmethod``, ``@staticmethod`` or
#: ``@dataclass`` and ``super()`` are read by their spelling, so an answer never binds them in any scope (round 19:
#: ``property = staticmethod`` in a class body made a "property" a plain function called with any self); only
#: ``from dataclasses import dataclass`` binds ``dataclass``.
DECIDING_NAMES = {"property", "classmethod", "staticmethod", "super", "dataclass", "dataclasses"}


def deciding_name_bindings(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """``(node, name)`` for each binding, in any scope and any form, of a name of ``DECIDING_NAMES``, except
    ``from dataclasses import dataclass`` and ``import dataclasses``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names = [node.id]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Import):
            names = [a.asname or a.name.split(".")[0] for a in node.names
                     if (a.asname or a.name.split(".")[0]) != "dataclasses" or a.name != "dataclasses"]
        elif isinstance(node, ast.ImportFrom):
            names = [a.asname or a.name for a in node.names
                     if not (node.module == "dataclasses" and not node.level and a.name == "dataclass"
                             and a.asname in (None, "dataclass"))]
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names = [node.name]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names = list(node.names)
        elif isinstance(node, ast.arg):
            names = [node.arg]
        else:
            continue
        out += [(node, n) for n in names if n in DECIDING_NAMES]
    return out


def is_callback_name(name: str) -> bool:
    """A name libraries look up on objects by themselves (IPython's display protocol, ``_x_`` hooks)."""
    return name.startswith(CALLBACK_PREFIXES) or (name.startswith("_") and name.endswith("_") and len(name) > 2
                                                  and not name.startswith("__"))


@functools.lru_cache(maxsize=None)
def module_private_names() -> frozenset[str]:
    """nn.Module's own private names (``_apply``, ``_call_impl``, ``_parameters`` ...), which its machinery calls or
    reads on the instance: an answer's class never binds them (dunders are refused on their own)."""
    import torch
    return frozenset(n for n in dir(torch.nn.Module) if n.startswith("_") and not n.startswith("__"))


def class_body_names(node: ast.ClassDef) -> list[tuple[str, int]]:
    """``(name, line)`` for each name the class body binds directly: methods, nested classes, class attributes."""
    out = []
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((item.name, item.lineno))
        elif isinstance(item, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            for target in targets:
                out += [(n.id, item.lineno) for n in ast.walk(target) if isinstance(n, ast.Name)]
    return out


def own_attributes(trees) -> set[str]:
    """Attribute names the given code defines: ``self.x = …``, and the names a class body binds (methods,
    class attributes, dataclass fields).  Dunders and frame attributes never count."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        names.add(item.name)
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {n for n in names if not n.startswith("__") and n not in FRAME_ATTRIBUTES}


# Answers are code, not data: a cell holding more literal data than this (strings and bytes by length, each number
# as 8 bytes; docstrings not counted) is flagged for review: a table of the tests' results looks like an answer to
# every other check.  A worked solution's cells hold well under 1 kB.
LITERAL_BUDGET = 8192


def literal_bytes(tree: ast.AST) -> int:
    """Bytes of literal data in ``tree``: strings and bytes by length, numbers 8 each, docstrings left out."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            docstrings.add(id(body[0].value))
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            total += len(node.value) if isinstance(node.value, (str, bytes)) else 8
    return total


def global_bindings(tables: dict) -> set[str]:
    """Every name a cell binds in the notebook's namespace, as Python's own symbol table says: whatever the form
    (assignment, ``for``, ``with … as``, ``except … as``, a ``match`` capture, ``import``, ``def``, ``class``,
    ``del``), and also from inside a function (``global``) or a comprehension (``:=`` reaches the enclosing
    scope).  ``tables``: ``symbol_tables`` of the cell."""
    names = set()
    for table in tables.values():
        for sym in table.get_symbols():
            if table.get_type() == "module":
                if sym.is_local() or sym.is_imported() or sym.is_assigned():
                    names.add(sym.get_name())
            elif sym.is_global() and (sym.is_assigned() or sym.is_imported()):
                names.add(sym.get_name())
    return names


def binding_line(tree: ast.AST, name: str) -> int:
    """The first line of ``tree`` that binds ``name`` (any form), or 1."""
    lines = []
    for node in ast.walk(tree):
        bound = ((isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and node.id)
                 or (isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.FunctionDef,
                                       ast.AsyncFunctionDef, ast.ClassDef)) and node.name)
                 or (isinstance(node, ast.MatchMapping) and node.rest))
        if bound == name or (isinstance(node, (ast.Import, ast.ImportFrom))
                             and any((a.asname or a.name.split(".")[0]) == name for a in node.names)):
            lines.append(getattr(node, "lineno", 1))
    return min(lines, default=1)


def _names_of(sources: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for src in sources:
        try:
            names.update(bound_names(parse(src)))
        except (SyntaxError, ValueError):
            continue        # trusted cells: a broken one fails on its own
    return names


def scan_cells(learner: dict[int, str], setup: list[str], tests: list[str], graded_names: set[str],
               reach: list | None = None) -> list[Flag]:
    """Flags for the learner's cells ``{index: source}``.

    ``setup`` and ``tests`` are the sources of the notebook's read-only cells; ``graded_names`` are the
    functions the learner must define.  A cell that cannot be read is flagged (fail closed).  ``reach``: a list
    that receives, for each cell checked, its syntax tree and the ids of the nodes the checker visited (the
    reachability test, tests/tfmgrader/test_scan_scoping.py).
    """
    flags: list[Flag] = []
    trees: dict[int, ast.Module] = {}
    tables: dict[int, dict] = {}
    for index, src in sorted(learner.items()):
        odd = sorted({repr(ch) for ch in src if ch in LINE_BREAKS_READ_TWO_WAYS})
        if odd:     # round 21: IPython splits lines where Python does not, so the two read different code
            flags.append(Flag(index, 1, f"contains the character(s) {', '.join(odd)}, which IPython reads as a line "
                                        f"break and Python does not; the cell was withheld"))
            continue
        try:
            python = to_python(src)
            trees[index] = ast.parse(python)
            tables[index] = symbol_tables(trees[index], python)
        except ScopeError as err:
            flags.append(Flag(index, 1, f"could not be checked: {err}; the cell was withheld"))
            trees.pop(index, None)
        except SyntaxError as err:
            flags.append(Flag(index, err.lineno or 1, f"is not valid Python ({err.msg}); the cell was withheld"))
        except Exception as err:  # noqa: BLE001 - anything the transformer cannot read is withheld
            flags.append(Flag(index, 1, f"could not be read ({type(err).__name__}); the cell was withheld"))
    learner_top: dict[str, str] = {}
    for index, tree in trees.items():
        for name, what in bound_names(tree).items():
            learner_top[name] = merge_binding(learner_top.get(name), what)
        for name in global_bindings(tables[index]) - set(bound_names(tree)):
            learner_top[name] = merge_binding(learner_top.get(name), "value")
    ctx = _Context(_names_of(setup), _names_of(tests), learner_top, set(graded_names))
    ctx.learner_attributes = own_attributes(trees.values())
    ctx.class_members = class_members(trees.values())
    ctx.learner_classes = own_classes(trees.values())
    ctx.plain_classes = plain_classes(trees.values())
    for index, tree in trees.items():
        checker = _Checker(index, ctx, tables[index])
        if reach is not None:
            checker.visited = set()
            reach.append((tree, checker.visited))
        checker.run(tree)
        data = literal_bytes(tree)
        if data > LITERAL_BUDGET:
            checker.flag(ast.Pass(lineno=1), f"holds {data:,} bytes of literal data (more than {LITERAL_BUDGET:,}): "
                                             f"answers are code, not tables of results")
        for name in sorted(global_bindings(tables[index])):
            reason = store_problem(ctx, name, bound_names(tree).get(name, "value"))
            if reason:
                checker.flag(ast.Pass(lineno=binding_line(tree, name)), reason)
        flags += list(dict.fromkeys(checker.flags))
    return flags
