"""Static checks of a learner's code, run in the grader's process before anything executes.

The scan reads the learner's cells (answer cells and any cell the learner added) as Python syntax
trees and flags code that would let an answer pass without being the learner's own work or that
reaches outside the exercise:

- using a library's implementation of what the exercise asks for (``torch.nn.functional.
  scaled_dot_product_attention``, ``torch.nn.MultiheadAttention``, ``tfmlib`` …);
- rebinding library functions or the names the notebook's own read-only cells define (for example
  ``torch.allclose = …`` or redefining a test helper);
- reflection that can do either in disguise (``getattr``, ``setattr``, ``globals``, ``exec``, ``eval``,
  ``__import__``, ``__torch_function__``, ``__class__`` …), subclassing ``torch.Tensor``;
- touching the file system, processes or the network (``open``, ``os``, ``subprocess``, ``socket`` …).

A flag never depends on running the code. Flagged cells are withheld from grading (see
``preprocessors.ScanSubmission``) and the reasons are recorded for a person to review.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

# Library implementations that do the exercises' work.
FORBIDDEN_ATTRIBUTES = {
    "scaled_dot_product_attention", "_scaled_dot_product_attention", "multi_head_attention_forward",
    "MultiheadAttention", "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerDecoder", "layer_norm", "LayerNorm", "native_layer_norm",
    "RNN", "RNNCell", "rnn_tanh", "rnn_tanh_cell", "GRU", "LSTM", "ops", "_C", "_VF",
}
FORBIDDEN_MODULES = {
    "tfmlib", "os", "sys", "subprocess", "socket", "shutil", "ctypes", "importlib", "builtins", "gc",
    "inspect", "pathlib", "io", "signal", "multiprocessing", "threading", "pickle", "sqlite3", "urllib",
    "http", "requests", "pty", "fcntl", "resource", "marshal", "code", "codeop", "runpy", "unittest",
    "nbgrader", "IPython", "tempfile", "glob", "mmap", "asyncio", "concurrent", "posix", "select",
}
FORBIDDEN_CALLS = {
    "getattr", "setattr", "delattr", "globals", "locals", "vars", "exec", "eval", "compile",
    "__import__", "open", "breakpoint", "input", "get_ipython", "memoryview",
}
FORBIDDEN_DUNDERS = {
    "__torch_function__", "__torch_dispatch__", "__class__", "__dict__", "__globals__", "__builtins__",
    "__subclasses__", "__code__", "__closure__", "__getattribute__", "__setattr__", "__eq__", "__ne__",
    "__bool__", "__mro__", "__bases__", "__import__", "__loader__", "__spec__", "__defaults__",
    "__kwdefaults__", "__reduce__", "__reduce_ex__", "__del__", "__init_subclass__", "__module__",
}


@dataclass(frozen=True)
class Flag:
    cell: int       # index of the cell in the notebook
    line: int       # line in that cell (1-based)
    reason: str

    def __str__(self) -> str:
        return f"cell {self.cell}, line {self.line}: {self.reason}"


def bound_names(tree: ast.AST) -> dict[str, str]:
    """Names a piece of code binds at top level or anywhere, mapped to what they are bound to:
    'import:<module>' for imports, 'def' for functions/classes, 'value' otherwise."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = f"import:{a.name if a.asname else a.name.split('.')[0]}"
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                names[a.asname or a.name] = f"import:{node.module}.{a.name}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = "def"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.setdefault(node.id, "value")
    return names


def module_aliases(names: dict[str, str]) -> set[str]:
    return {n for n, what in names.items() if what.startswith("import:")}


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


class _Checker(ast.NodeVisitor):
    def __init__(self, cell: int, protected: dict[str, str], modules: set[str]):
        self.cell, self.protected, self.modules = cell, protected, modules
        self.flags: list[Flag] = []
        self.local_imports: dict[str, str] = {}

    def flag(self, node, reason):
        self.flags.append(Flag(self.cell, getattr(node, "lineno", 0), reason))

    # imports -----------------------------------------------------------------------------------
    def _check_import(self, node, module: str, binds: dict[str, str]):
        top = module.split(".")[0]
        if top in FORBIDDEN_MODULES:
            self.flag(node, f"imports '{module}', which graded answers may not use")
        for name, what in binds.items():
            leaf = what.rsplit(".", 1)[-1]
            if leaf in FORBIDDEN_ATTRIBUTES:
                self.flag(node, f"imports '{leaf}', a library implementation of what the exercise asks for")
            if name in self.protected and self.protected[name] != what:
                self.flag(node, f"rebinds '{name}', which the notebook's read-only cells define")
        self.modules |= set(binds)

    def visit_Import(self, node):
        for a in node.names:
            binds = bound_names(ast.Module(body=[ast.Import(names=[a])], type_ignores=[]))
            self._check_import(node, a.name, binds)

    def visit_ImportFrom(self, node):
        module = "." * node.level + (node.module or "")
        for a in node.names:
            if a.name == "*":
                self.flag(node, f"'from {module} import *' hides which names are used")
                continue
            binds = {a.asname or a.name: f"import:{node.module}.{a.name}"}
            self._check_import(node, module, binds)

    # rebinding -----------------------------------------------------------------------------------
    def _check_target(self, target):
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t)
        elif isinstance(target, ast.Starred):
            self._check_target(target.value)
        elif isinstance(target, ast.Name):
            if target.id in self.protected:
                self.flag(target, f"rebinds '{target.id}', which the notebook's read-only cells define")
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root_name(target)
            if root in self.modules or root in self.protected:
                what = ast.unparse(target)
                self.flag(target, f"assigns to '{what}', changing a library or a read-only cell's object")

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._check_target(t)

    def visit_For(self, node):
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_withitem(self, node):
        if node.optional_vars is not None:
            self._check_target(node.optional_vars)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Global(self, node):
        for name in node.names:
            if name in self.protected:
                self.flag(node, f"declares 'global {name}', a name the read-only cells define")

    def _check_def(self, node):
        if node.name in FORBIDDEN_DUNDERS:
            self.flag(node, f"defines '{node.name}' (reflection that can bypass the tests)")
        if node.name in self.protected:
            self.flag(node, f"redefines '{node.name}', which the notebook's read-only cells define")

    def visit_FunctionDef(self, node):
        self._check_def(node)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._check_def(node)
        for base in node.bases:
            if isinstance(base, ast.Attribute) and base.attr == "Tensor" or \
                    isinstance(base, ast.Name) and base.id == "Tensor":
                self.flag(node, "subclasses torch.Tensor (a tensor subclass can fake comparisons)")
        self.generic_visit(node)

    # uses ----------------------------------------------------------------------------------------
    def visit_Attribute(self, node):
        if node.attr in FORBIDDEN_ATTRIBUTES and _root_name(node) in self.modules | {"torch", "F", "nn"}:
            self.flag(node, f"uses '{ast.unparse(node)}', a library implementation of what the exercise asks for")
        elif node.attr in FORBIDDEN_DUNDERS:
            self.flag(node, f"uses '{node.attr}' (reflection that can bypass the tests)")
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in FORBIDDEN_CALLS and isinstance(node.ctx, ast.Load):
            self.flag(node, f"uses '{node.id}' (file, process or reflection access is not allowed in answers)")
        elif node.id in FORBIDDEN_DUNDERS:
            self.flag(node, f"uses '{node.id}' (reflection that can bypass the tests)")



def protected_names(setup: list[str], tests: list[str]) -> dict[str, str]:
    """Names the learner may not rebind: everything the read-only setup cells bind, and the imports,
    functions and classes of the test cells (their plain variables are reassigned before each use)."""
    protected: dict[str, str] = {}
    for src, everything in [(s, True) for s in setup] + [(t, False) for t in tests]:
        try:
            names = bound_names(ast.parse(src))
        except SyntaxError:
            continue
        protected.update({n: w for n, w in names.items() if everything or w != "value"})
    return protected


def scan_cells(learner: dict[int, str], setup: list[str], tests: list[str], graded_names: set[str]) -> list[Flag]:
    """Flags for the learner's cells ``{index: source}``.

    ``setup`` and ``tests`` are the sources of the notebook's read-only cells (see ``protected_names``);
    ``graded_names`` are the functions the learner must define.
    """
    protected = protected_names(setup, tests)
    for name in graded_names:
        protected.pop(name, None)
    modules = module_aliases(protected)
    flags: list[Flag] = []
    for index, src in sorted(learner.items()):
        try:
            tree = ast.parse(_strip_magics(src))
        except SyntaxError:
            continue    # it fails on its own when run
        checker = _Checker(index, protected, set(modules))
        checker.visit(tree)
        flags += checker.flags
        if "!" in _magic_lines(src) or "%" in _magic_lines(src):
            flags.append(Flag(index, 1, "uses IPython magics or shell escapes (! / %), not allowed in answers"))
    return flags


def _magic_lines(src: str) -> str:
    return "".join(line.lstrip()[:1] for line in src.splitlines() if line.lstrip()[:1] in "!%")


def _strip_magics(src: str) -> str:
    """Replace magic and shell lines by ``pass`` at the same indentation, so the rest still parses."""
    out = []
    for line in src.splitlines():
        body = line.lstrip()
        out.append(line[: len(line) - len(body)] + "pass" if body[:1] in "!%" else line)
    return "\n".join(out)
