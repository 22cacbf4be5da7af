"""Disguised copies of a function, for calibrating the copy detection (``similarity.py``).

Each disguise keeps what the code computes and changes how it looks, as a learner hiding a copy would:

* ``rename``: every variable, parameter and helper gets another name (the graded function keeps its name);
* ``reorder``: adjacent statements that do not depend on each other swap places;
* ``comment``: comments on their own lines and at the ends of lines, a new docstring, blank lines;
* ``wrap``: the body moves into a helper function that the graded function calls;
* ``all``: the four together.

``disguise(source, name, how, seed)`` returns the new source text.  Deterministic for a given seed.
"""
from __future__ import annotations

import ast
import random

KINDS = ("rename", "reorder", "comment", "wrap", "all")
WORDS = ["alpha", "buf", "cur", "data", "item", "tmp", "val", "res", "acc", "mat", "vec", "part", "arr",
         "inp", "outp", "elem", "xx", "yy", "zz", "thing", "stuff", "piece", "block", "chunk"]
COMMENTS = ["compute the next step", "as in the lecture", "shapes checked by hand", "this was tricky",
            "TODO tidy up", "see the formula", "works on the example", "keep dims for broadcasting",
            "my own version", "careful with the batch", "do not touch", "step two"]


def _bound(tree: ast.AST, keep: set[str]) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.arg):
            names.append(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
    return [n for n in dict.fromkeys(names) if n not in keep]


def rename(source: str, name: str, rng: random.Random) -> str:
    """Every name the code binds, except ``name``, renamed."""
    tree = ast.parse(source)
    words = WORDS[:]
    rng.shuffle(words)
    new = {old: f"{words[i % len(words)]}{i // len(words) or ''}_{rng.randint(1, 9)}"
           for i, old in enumerate(_bound(tree, {name}))}

    class R(ast.NodeTransformer):
        def visit_Name(self, node):
            node.id = new.get(node.id, node.id)
            return node

        def visit_arg(self, node):
            node.arg = new.get(node.arg, node.arg)
            return node

        def visit_FunctionDef(self, node):
            node.name = new.get(node.name, node.name)
            self.generic_visit(node)
            return node

    return ast.unparse(R().visit(tree))


def _reads_writes(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    reads, writes = set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (writes if isinstance(node.ctx, ast.Store) else reads).add(node.id)
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        reads.add(stmt.target.id)
    return reads, writes


def _movable(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom))


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    ra, wa = _reads_writes(a)
    rb, wb = _reads_writes(b)
    return _movable(a) and _movable(b) and not (wa & rb or wb & ra or wa & wb)


def reorder(source: str, name: str, rng: random.Random) -> str:
    """Swap adjacent independent statements in every block (each such pair with probability 0.8)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for attr in ("body", "orelse"):
            body = getattr(node, attr, None)
            if not isinstance(body, list):
                continue
            i = 0
            while i < len(body) - 1:
                if _independent(body[i], body[i + 1]) and rng.random() < 0.8:
                    body[i], body[i + 1] = body[i + 1], body[i]
                    i += 2
                else:
                    i += 1
    return ast.unparse(tree)


def comment(source: str, name: str, rng: random.Random) -> str:
    """Comments on their own lines and after statements, blank lines, and a different docstring."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            doc = ast.Expr(ast.Constant(f"{rng.choice(COMMENTS).capitalize()}."))
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                    and isinstance(node.body[0].value.value, str):
                node.body[0] = doc
            else:
                node.body.insert(0, doc)
    lines = ast.unparse(ast.fix_missing_locations(tree)).splitlines()
    out = []
    for line in lines:
        indent = line[:len(line) - len(line.lstrip())]
        stripped = line.strip()
        if stripped and not stripped.startswith(("def ", "@", "else", "elif", "except", "finally", '"', "'")) \
                and rng.random() < 0.5:
            out.append(f"{indent}# {rng.choice(COMMENTS)}")
        if stripped and not stripped.endswith((":", "\\", ",", "(", "[")) and not stripped.startswith(('"', "'")) \
                and rng.random() < 0.4:
            line = f"{line}  # {rng.choice(COMMENTS)}"
        out.append(line)
        if stripped and rng.random() < 0.2:
            out.append("")
    return "\n".join(out) + "\n"


def wrap(source: str, name: str, rng: random.Random) -> str:
    """``def name(...)``'s body moved into ``_name_impl`` (positional parameters), called by ``name``."""
    tree = ast.parse(source)
    target = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    helper = f"_{rng.choice(WORDS)}_{name.split('_')[0]}_impl"
    args = [a.arg for a in target.args.posonlyargs + target.args.args]
    signature = ast.unparse(target.args)
    target.name = helper
    call = f"{helper}({', '.join(args)})"
    head = "\n".join(ast.unparse(n) for n in tree.body)
    return f"{head}\n\n\ndef {name}({signature}):\n    return {call}\n"


def disguise(source: str, name: str, how: str, seed: int = 0) -> str:
    """``source`` with the disguise ``how`` (one of KINDS) applied."""
    rng = random.Random(f"{name}-{how}-{seed}")
    steps = {"rename": [rename], "reorder": [reorder], "comment": [comment], "wrap": [wrap],
             "all": [reorder, wrap, rename, comment]}[how]
    for step in steps:
        source = step(source, name, rng)
    return source


def without_library_checks(source: str) -> str:
    """tfmlib's function as a learner would paste it into the notebook: the calls of tfmlib's own input checks
    (``check_*(...)``, ``_check_*(...)``, not available there) left out."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for attr in ("body", "orelse"):
            body = getattr(node, attr, None)
            if isinstance(body, list):
                kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                                                and isinstance(s.value.func, ast.Name)
                                                and s.value.func.id.lstrip("_").startswith("check"))]
                if len(kept) != len(body):
                    body[:] = kept or [ast.Pass()]
    return ast.unparse(tree)
