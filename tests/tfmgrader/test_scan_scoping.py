"""The scan reads names as Python does (``symtable``) and admits attributes by rule, not by what the answer says.

Two classes of hole found by a blind red team (issue 31): a class body that reads a refused global under the cover
of a later binding of the same name, and attribute names an answer "defines" (as never-used class attributes) so
that the scan admitted them on any value, private ones included.
"""
import ast
import json
import symtable

import pytest

from tfmgrader import scan
from tfmgrader.scan import scan_cells

SETUP = ["import math\nimport numpy as np\nimport torch\nimport tfmcheck.checking as check\nSHORTCUTS = ('tfmlib',)\n"]
TESTS = ["from tfmcheck import feedback\nout = f(torch.ones(2))\ncheck.assert_close('f', out, torch.ones(2))\n"
         "def _reference(x):\n    return x\n"]


def flags(code):
    return [f.reason for f in scan_cells({3: code}, SETUP, TESTS, {"f"})]


# --- Python's own scoping -------------------------------------------------------------------------------------
@pytest.mark.parametrize("code, name", [
    ("class A:\n    x = check\n    check = None\n", "check"),
    ("class A:\n    run = eval\n    eval = None\n", "eval"),
    ("def f(x):\n    class A:\n        g = getattr\n        getattr = 1\n    return x\n", "getattr"),
    ("class A:\n    t = check.ref\n    def check(self):\n        pass\n", "check"),
    ("class A:\n    import math as check\n    del check\n    y = check\n", "check"),
    ("class A:\n    ys = [check for _ in range(2)]\n", "check"),       # a comprehension skips the class scope
    ("def f(x):\n    class A:\n        r = [x for x in [check]]\n        check = 1\n    return x\n", "check"),
    # round 1 of the blind red team: the test cells' module, their helper, IPython's names
    ("def f(x):\n    class G:\n        got = feedback\n        feedback = None\n    return x\n", "feedback"),
    ("class G:\n    ref = _reference\n    _reference = None\n", "_reference"),
    ("class G:\n    history = In\n    In = None\n", "In"),
    ("class G:\n    if True:\n        dim = 1\n    twice = check\n    check = 2\n", "check"),
])
def test_a_class_body_cannot_read_a_refused_global_under_a_later_binding(code, name):
    assert any(f"'{name}'" in r for r in flags(code)), flags(code)


@pytest.mark.parametrize("code", [
    "class A:\n    dim = -1\n    scale = dim * 2\n",
    "print(out)\n",                    # a test's plain value, looked at after the tests ran
    "class A:\n    ones = torch.ones(2)\n    twice = [o * 2 for o in ones]\n",   # the first iterable is read in the class
    "def f(x):\n    scale = 2\n    class A:\n        s = scale\n    return x * A.s\n",
    "def f(x):\n    total = 0\n    def add(v):\n        nonlocal total\n        total = total + v\n    add(x)\n    return total\n",
    "def f(x, g=lambda: 1, h=(lambda a=(lambda: 2): a)):\n    return x * g() * h()()\n",
    "def f(x, how='a'):\n    p = (lambda w: x @ w) if how == 'a' else (lambda w: torch.einsum('ij,jk->ik', x, w))\n"
    "    return p(x), {k: v for k, v in [(1, lambda: x)]}\n",
])
def test_honest_scopes_pass(code):
    assert flags(code) == []


@pytest.mark.parametrize("code", [
    "f = lambda x=(lambda: 1): (lambda: 2)\n",
    "g = [(lambda: i) for i in range(3) if (lambda: i)()]\n",
    "d = {k: (lambda: v) for k, v in {}.items()}\n",
    "class A:\n    @staticmethod\n    def s(x=lambda: 0, *, y=(lambda: 1)) -> int:\n        return [z for z in (lambda: [1])()]\n",
    "x = (y := (lambda: 1)) and (lambda: 2)\n",
    "def f(a):\n    def g():\n        nonlocal a\n        return (lambda: a)\n    return g\n",
])
def test_every_scope_is_matched_to_pythons_symbol_table(code):
    """The scan's tree walk and CPython's symbol table agree on every scope, in the same order."""
    tree = ast.parse(code)
    tables = scan.symbol_tables(tree, code)
    scopes = [n for n in ast.walk(tree) if isinstance(n, scan.SCOPES)]
    assert len(tables) == len(scopes) + 1
    for node in scopes:
        table = tables[id(node)]
        assert (table.get_name(), table.get_lineno()) == (scan.scope_name(node), node.lineno)
        own = {a.arg for a in getattr(getattr(node, "args", None), "args", [])}
        assert own <= {s.get_name() for s in table.get_symbols() if s.is_parameter()}


def test_the_fixtures_scopes_all_match():
    """Every answer and attack of the suite is read with Python's symbol table (no cell is refused for it)."""
    from fixtures.answers import EXTRA_CORRECT, STYLES
    for corpus in (STYLES, EXTRA_CORRECT):
        for named in corpus.values():
            for cells in named.values():
                for src in cells.values():
                    python = scan.to_python(src)
                    scan.symbol_tables(ast.parse(python), python)
    symtable.symtable("x = 1", "<c>", "exec")


# --- attributes --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code, reason", [
    # a private name "defined" by the answer is not admitted on a library value
    ("class Cover:\n    _version = 1\n\ndef f(x):\n    return torch.ones(1)._version", "private attribute"),
    ("class Cover:\n    _zz_cover = 1\n\ndef f(x):\n    return x._zz_cover", "not provably your own"),
    ("class Cover:\n    _C = None\n\ndef f(x):\n    return torch.zeros(1).grad_fn._C", "not provably your own"),
    ("class Cover:\n    def __init__(self):\n        self._modules = {}\n\ndef f(x):\n    return x._modules",
     "private attribute of tensors, modules or arrays"),
    # through a method's first parameter, called on a library value: still only the answer's own names
    ("class A:\n    _e = 0\n    def m(self):\n        return self._e\n\ndef f(x):\n    return A.m(x)._f", "_f"),
    # a public name an object of the library offers: the answer cannot claim it by defining it
    ("class Cover:\n    gi_frame = 1\n\ndef f(g):\n    return g.gi_frame", "gi_frame"),
    ("class Cover:\n    scale = 1\n\ndef f(d):\n    return d.scale", "not provably your own"),
    # a method reached without its instance runs with any self
    ("class A:\n    scale = 1\n    def m(self):\n        return self.scale\n\ndef f(x):\n    return A.m(x)",
     "call it on an instance"),
    ("class A:\n    scale = 1\n    @property\n    def p(self):\n        return self.scale\n\nq = A.p", "instance"),
    ("class A:\n    def m(self):\n        return 1\n\nB = A\n", "uses the class 'A' as a value"),
    ("class A:\n    def m(self):\n        return 1\n\nk = [A][0]\n", "uses the class 'A' as a value"),
    ("class A:\n    def m(self):\n        return 1\n\ndef f(x):\n    return type(A()).m(x)", "type(...)"),
    ("class A:\n    scale = 1\n    def m(self):\n        self = torch.zeros(1)\n        return self.scale\n",
     "not provably your own"),
    # a local that may hold something else is not provably the answer's own
    ("class L:\n    merge = None\ndef f(x, y):\n    layout = L()\n    if x:\n        layout = y\n    return layout.merge",
     "not provably your own"),
    ("class L:\n    merge = None\ndef f(x, y):\n    layout = L()\n    def g():\n        nonlocal layout\n"
     "        layout = y\n    g()\n    return layout.merge", "not provably your own"),
    # round 1 of the blind red team
    ("import warnings\nmatch warnings.catch_warnings():\n    case warnings.catch_warnings(_module=m):\n        pass\n",
     "class pattern"),
    ("def f(x):\n    class Peek:\n        def __init__(self):\n            self._hidden_thing = None\n"
     "        def get(self):\n            return self._hidden_thing\n    return Peek.get(x)", "not provably your own"),
    ("kept = feedback\n", "a function or module of the test cells"),
    ("kept = [_reference]\n", "a function or module of the test cells"),
    # round 2: a class name bound to something else; IPython's names bound where it never runs; a method aliased in
    # its class body or given a default self, then run with a foreign self
    ("class Box:\n    _seen = None\nBox = torch.zeros(1)\ndef f(x):\n    return Box._seen", "not provably your own"),
    ("class Box:\n    _seen = None\ndef Box():\n    return 1\ndef f(x):\n    return Box._seen", "not provably your own"),
    ("if False:\n    get_ipython = None\n", "a name IPython gives the notebook"),
    ("class A:\n    def m(self):\n        return 1\n    m_ = m\n", "reads the method 'm' in its class body"),
    ("class A:\n    def m(self):\n        return 1\n    p = property(m)\n", "reads the method 'm'"),
    ("class A:\n    _k = 1\n    def m(self=torch.zeros(1)):\n        return self._k\n", "not provably your own"),
    # round 3: IPython's output cache (_4 is what cell 4 displayed) bound as a class; attribute names as strings
    ("class _4:\n    sys = None\n", "a name IPython gives the notebook"),
    ("class _i12:\n    pass\n", "a name IPython gives the notebook"),
    ("import functools\ndef f(x):\n    return functools.wraps(x, assigned=('_BASELINE',))(f)", "attribute names"),
    ("import functools\ndef f(x):\n    return functools.update_wrapper(f, x, ('sys',))", "attribute names"),
    # the names a route out would use are never the answer's to claim (modules', IPython shell's)
    ("class Names:\n    user_ns = None\n\ndef f(x, shell=None):\n    return shell.user_ns", "not provably your own"),
    ("class Names:\n    setprofile = None\n\ndef f(x, s=None):\n    return s.setprofile", "not provably your own"),
    # round 10: a method's plain function out through the class of a classmethod (cls.m, super().m, cls.p.fget) and
    # then run with a foreign self; self rebound by forms other than '=' (case, except, import, nonlocal); a
    # parameter named like the class making a call look like a new instance
    ("class L:\n    def look(self):\n        return self._hidden_x\n    @classmethod\n    def via(cls, x):\n"
     "        return cls.look(x)\n", "of a classmethod as a value"),
    ("class L:\n    def look(self):\n        return self._hidden_x\n    @classmethod\n    def via(cls, x):\n"
     "        return super().look(x)\n", "super() in a classmethod"),
    ("class L:\n    @property\n    def p(self):\n        return self._hidden_x\n    @classmethod\n    def via(cls, x):\n"
     "        return cls.p.fget(x)\n", "of a classmethod as a value"),
    ("class L:\n    _hidden_x = 1\n    @classmethod\n    def via(cls):\n        return cls._hidden_x\n"
     "    def _hidden_x(self):\n        return 2\n", "not provably your own"),
    ("class L:\n    _hidden_x = None\n    def m(self, x):\n        match x:\n            case self:\n"
     "                return self._hidden_x\n", "not provably your own"),
    ("class L:\n    _hidden_x = None\n    def m(self, x):\n        match x:\n            case {'k': self}:\n"
     "                return self._hidden_x\n", "not provably your own"),
    ("class L:\n    _hidden_x = None\n    def m(self, x):\n        try:\n            raise x\n"
     "        except Exception as self:\n            return self._hidden_x\n", "not provably your own"),
    ("class L:\n    _hidden_x = None\n    def m(self, x):\n        import math as self\n"
     "        return self._hidden_x\n", "not provably your own"),
    ("class L:\n    _hidden_x = None\n    def m(self, x):\n        def g():\n            nonlocal self\n"
     "            self = x\n        g()\n        return self._hidden_x\n", "not provably your own"),
    ("class L:\n    _hidden_x = None\n    def m(self, x):\n        [self := x for _ in (1,)]\n"
     "        return self._hidden_x\n", "not provably your own"),
    ("class Lens:\n    def __init__(self):\n        self._hidden_x = None\n"
     "def f(x, Lens=max):\n    view = Lens([x])\n    return view._hidden_x\n", "not provably your own"),
    ("class Lens:\n    def __init__(self):\n        self._hidden_x = None\n"
     "def f(x):\n    def g(Lens=max):\n        view = Lens([x])\n        return view._hidden_x\n    return g()\n",
     "not provably your own"),
    # round 12: numpy.ndarray called lays an object array over memory the answer chose (any object forged); a
    # constant format template reading attributes off the list
    ("def f(x):\n    raw = np.zeros(2, dtype=np.int64)\n    return np.ndarray((2,), 'O', raw)", "numpy.ndarray"),
    ("def f(x):\n    make = np.ndarray\n    return make", "numpy.ndarray"),
    ("from numpy import ndarray as A\ndef f(x):\n    return A((2,), 'O', buffer=x)", "numpy.ndarray"),
    ("import numpy\ndef f(x):\n    return [numpy.ndarray][0]((1,))", "numpy.ndarray"),
    ("def g():\n    yield 1\ndef f(x):\n    return '{0.gi_frame.f_back}'.format(g())", "'gi_frame'"),
    ("def f(x):\n    return '{0:{1.gi_code}}'.format(x, x)", "'gi_code'"),
    # round 16: numpy's resize(..., refcheck=False) frees a buffer a view still reads (a name reviewed for tensors)
    ("def f(x):\n    a = np.zeros(4)\n    v = a[:]\n    a.resize((64,), refcheck=False)\n    return v", "'resize'"),
])
def test_an_answer_cannot_widen_the_attributes_by_defining_names(code, reason):
    assert any(reason in r for r in flags(code)), flags(code)


def test_a_defined_name_that_library_objects_offer_is_refused_with_a_way_out():
    taken = sorted(n for n in scan.reachable_attribute_names()
                   if not n.startswith("_") and not scan.admitted_on_any_value(n)
                   and n not in scan.DANGEROUS_ATTRIBUTES and n not in scan.FORBIDDEN_ATTRIBUTES)
    assert taken, "some public names of reachable objects are not on the list"
    name = taken[0]
    reasons = flags(f"class Box:\n    {name} = 1\n\ndef f(x, box=Box()):\n    return box.{name}")
    assert any("give yours another name" in r for r in reasons), reasons


@pytest.mark.parametrize("code", [
    "class Box:\n    def __init__(self, t):\n        self._kept = t\n    def kept(self):\n        return self._kept\n"
    "def f(x):\n    return Box(x).kept()",
    "class _Masks:\n    @staticmethod\n    def lower(n):\n        return torch.ones(n, n).tril().bool()\n"
    "def f(x):\n    return _Masks.lower(2)",
    "class Cfg:\n    n_heads_wanted = 2\n\ndef f(x, cfg=Cfg()):\n    return x * cfg.n_heads_wanted",
    "class Cache(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self._kv_store = []\n"
    "    @property\n    def stored(self):\n        return len(self._kv_store)\n"
    "def f(x):\n    return x * Cache().stored",
    "class Norm(torch.nn.Module):\n    def __init__(self, eps=1e-5):\n        super().__init__()\n        self.eps = eps\n"
    "        self.scale = torch.nn.Parameter(torch.ones(2))\n    def forward(self, x):\n"
    "        return x * self.scale / (x.var() + self.eps)\ndef f(x):\n    n = Norm()\n"
    "    return n(x) if isinstance(n, Norm) else print(type(n), type(x) is torch.Tensor)",
    "class HeadLayout:\n    def __init__(self, d):\n        self.d = d\n    def merge(self, y):\n        return y * self.d\n"
    "def f(x):\n    layout = HeadLayout(2)\n    return layout.merge(x)",
    "def deco(g):\n    def inner(x):\n        return g(x)\n    return inner\n"      # a decorator, without functools.wraps
    "@deco\ndef f(x):\n    return x * 2",
    "for _ in range(2):\n    pass\nb, _, d = torch.ones(2, 3, 4).shape\n",
    "class Acc:\n    _count_so_far = 0\n    @classmethod\n    def bump(cls):\n        return cls._count_so_far + 1\n"
    "def f(x):\n    return x * Acc.bump() * Acc()._count_so_far",
    "class Pair:\n    def __init__(self, a):\n        self.doubled_input = a\n    @classmethod\n    def of(cls, x):\n"
    "        return cls(x * 2)\ndef f(x):\n    return Pair.of(x).doubled_input",
    "class Box:\n    def __init__(self, t):\n        self._kept = t\n    def kept(self):\n"
    "        for k in range(1):\n            pass\n        return self._kept\ndef f(x):\n    return Box(x).kept()",
    "from numpy import ndarray\ndef f(x: np.ndarray) -> 'ndarray':\n"
    "    return x if isinstance(x, (np.ndarray, float)) else np.asarray(x)",
    "def f(x):\n    return '{0.shape} {0.dtype} {1:>{2}}'.format(x, 3, 4)",
])
def test_honest_own_attributes_pass(code):
    assert flags(code) == []


def test_reachable_names_file_is_sorted_json_of_names():
    names = json.loads(scan.REACHABLE_NAMES.read_text())
    assert names == sorted(set(names)) and all(isinstance(n, str) and n for n in names)


# --- every binding form: round 4 of the blind red team ----------------------------------------------------------
@pytest.mark.parametrize("code", [
    "try:\n    pass\nexcept Exception as eval:\n    pass\n",
    "try:\n    pass\nexcept* Exception as eval:\n    pass\n",
    "match None:\n    case [eval]:\n        pass\n",
    "match None:\n    case [*eval]:\n        pass\n",
    "match None:\n    case {**eval}:\n        pass\n",
    "match None:\n    case (1 | 2) as eval:\n        pass\n",
    "ys = [(eval := 1) for _ in range(2)]\n",
    "ys = {k: (eval := k) for k in range(2)}\n",
    "for eval in range(2):\n    pass\n",
    "with open as eval:\n    pass\n",
    "import math as eval\n",
    "from math import sqrt as eval\n",
    "def g():\n    global eval\n    eval = 1\n",
    "def g():\n    def h():\n        global eval\n        eval = 1\n",
    "del eval\n",
    "(eval := 1)\n",
    "eval: int = 1\n",
    "eval += 1\n",
    "class eval:\n    pass\n",
    "def eval():\n    pass\n",
])
def test_every_binding_form_in_the_notebook_namespace_is_checked(code):
    """A built-in bound in the notebook's namespace, whatever the form (Python's symbol table lists them all),
    is refused: a handler that never runs or a pattern that never matches would leave Python's own eval there."""
    assert any("built-in 'eval'" in r for r in flags(code + "def f(x):\n    return x\n")), flags(code)


@pytest.mark.parametrize("code", [
    "def f(x):\n    try:\n        y = x\n    except RuntimeError as err:\n        y = str(err)\n    return y\n",
    "def f(x):\n    ys = [(z := v) for v in range(2)]\n    return x\n",
    "def f(x):\n    match x.dim():\n        case 2:\n            return x\n        case n:\n            return x.flatten(0, n - 2)\n",
])
def test_local_binding_forms_stay_the_answers_own(code):
    assert flags(code) == []


# --- round 6 of the blind red team -----------------------------------------------------------------------------
@pytest.mark.parametrize("code, reason", [
    # a top-level def of a read-only name, counted among the graded names, took it out of the protected ones
    ("def SHORTCUTS():\n    return None\nSHORTCUTS = ('tfmlib',)\n", "rebinds 'SHORTCUTS'"),
    ("KEEP = [check]\ndef check(*a):\n    return a\ncheck = KEEP[0]\n", "rebinds 'check'"),
    ("class check:\n    pass\n", "rebinds 'check'"),
    # reflection done by library code: wraps(f).func is update_wrapper; wraps(obj)(box) copies obj's attributes
    ("import functools\nupdate = functools.wraps(len).func\n", "functools.wraps"),
    ("from functools import wraps\n", "functools.wraps"),
    # a property setter receives what a library's setattr sets
    ("class A:\n    x = property(fset=lambda s, v: None)\n", "setter or deleter"),
    ("class A:\n    x = property(lambda s: 1, lambda s, v: None)\n", "setter or deleter"),
    ("class A:\n    @property\n    def x(self):\n        return 1\n    @x.setter\n    def x(self, v):\n        pass\n",
     "property's setter"),
    # a class body binding a name no answer may read on a value
    ("class A:\n    f_globals = None\n", "binds 'f_globals' in a class body"),
    ("class A:\n    scaled_dot_product_attention = None\n", "binds 'scaled_dot_product_attention' in a class body"),
])
def test_round_6_holes_are_flagged(code, reason):
    """Even where the learner's cells define the name (the graded names come from them), a read-only name stays
    protected; functools.wraps is off the list; setters and refused names in class bodies are flagged."""
    found = [f.reason for f in scan_cells({3: code}, SETUP, TESTS, {"f", "SHORTCUTS", "check"})]
    assert any(reason in r for r in found), found


@pytest.mark.parametrize("code", [
    "class A:\n    @property\n    def x(self):\n        return 1\n",
    "class A:\n    x = property(lambda self: 1, doc='one')\n",
    "class Box:\n    size = 3\n    def kept(self):\n        return self.size\n",
])
def test_read_only_properties_and_plain_class_attributes_pass(code):
    assert flags(code) == []


# --- round 8 and 9 of the blind red team --------------------------------------------------------------------------
@pytest.mark.parametrize("code, reason", [
    # a decorator rebinds the class name: the class is whatever the decorator returned
    ("import warnings\ndef context(cls):\n    return warnings.catch_warnings()\n@context\nclass Ctx:\n    _module = None\n"
     "m = Ctx._module\n", "_module"),
    # a decorated def (or any function) is not a class the answer may subclass
    ("def make(f):\n    return f\n@make\ndef Base():\n    pass\nclass Sub(Base):\n    pass\n", "subclasses 'Base'"),
    # autograd.Function calls forward through the class, with a first argument of its choosing: no self-privileges
    ("import torch\nclass Peek(torch.autograd.Function):\n    def forward(obj, name):\n        return obj._module\n"
     "    def setup_context(ctx, inputs, output):\n        pass\n", "_module"),
    # names chosen at run time (a submodule named '__torch_function__'), and Python callbacks from inside dispatch
    ("import torch\nclass H(torch.nn.Module):\n    def grab(self, name, m):\n        self.add_module(name, m)\n", "add_module"),
    ("import torch\nd = torch.nn.ModuleDict()\n", "ModuleDict"),
    ("import torch\ndef f(x):\n    return x.apply_(abs)\n", "apply_"),
    ("import torch\ndef f(x):\n    return x.map_(x, max)\n", "map_"),
])
def test_round_8_and_9_holes_are_flagged(code, reason):
    found = flags(code)
    assert any(reason in r for r in found), found


@pytest.mark.parametrize("code", [
    "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass Cfg:\n    n: int = 2\n"
    "def f(x):\n    return x * Cfg().n\n",
    "import torch\nclass Base(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self._k = 2\n"
    "class Sub(Base):\n    def twice(self):\n        return self._k * 2\ndef f(x):\n    return x * Sub().twice()\n",
])
def test_reviewed_class_decorators_and_own_bases_keep_the_privileges(code):
    assert flags(code) == []


@pytest.mark.parametrize("separator", list(scan.LINE_BREAKS_READ_TWO_WAYS))
def test_a_cell_that_python_and_ipython_read_as_different_code_is_withheld(separator):
    """Round 21 of the blind red team: a character that ends a line for IPython (``str.splitlines``) but not for
    Python, inside a comment, made the scan read ``def exec(): pass`` where the kernel ran an escaped ``print``
    that swallowed it; with the graded names taken from that reading, ``exec`` was the answer's own.  Such a cell
    is withheld, whatever the graded names (here the ones that reading gave)."""
    code = f"#{separator},print \\\ndef exec(): pass\nexec('import sys')\ndef f(x):\n    return x\n"
    found = [f.reason for f in scan_cells({3: code}, SETUP, TESTS, {"f", "exec"})]
    assert any("IPython reads as a line break" in r for r in found), found
    assert not flags("def f(x):\n    return x  # a comment with no such character\n")


# --- reachability: the scan looks at every part of the code it admits --------------------------------------
_LITERAL = (ast.Constant, ast.Tuple, ast.Load)


def _unvisited(code: str) -> list[str]:
    """Expressions, statements and patterns of ``code`` that the scan's checker never visited, in the top-level
    statements it did not flag (a flagged statement is withheld, whatever it holds); a subtree of constants only
    (a docstring, ``Literal["a", "b"]``) does nothing and is not counted."""
    reach = []
    found = scan_cells({3: code}, SETUP, TESTS, {"f", "scaled_dot_product_attention"}, reach=reach)
    flagged = {f.line for f in found}
    missed = []
    for tree, seen in reach:
        for stmt in tree.body:
            if flagged & set(range(stmt.lineno, stmt.end_lineno + 1)):
                continue
            for node in ast.walk(stmt):
                if isinstance(node, (ast.expr, ast.stmt, ast.pattern)) and id(node) not in seen and not all(
                        isinstance(n, _LITERAL) for n in ast.walk(node)):
                    missed.append(f"line {node.lineno}: {type(node).__name__} {ast.unparse(node)[:60]!r}")
    return missed


def _reach_corpus():
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "grader" / "fixtures"
    return sorted([*root.glob("syntax/*.py"), *root.glob("styles/*/*/*.py"), *root.glob("attacks/*.ipy"),
                   *root.glob("similarity_corpus/correct/*/*/*.py")])


def test_the_scan_looks_at_every_part_of_what_it_admits():
    """A closure argument rather than a list of recipes: for every top-level statement the scan does not flag,
    every expression, statement and pattern in it reached the checker (red-team round 36 set attributes through a
    comprehension's target, ``[1 for obj.attr in [v]]``, which the checker never visited; the same probe then found
    ``Literal[...]`` in an annotation, whose arguments it skipped as strings while Python runs them).  The corpus:
    a file of every syntax form (grader/fixtures/syntax), the correct styles, the independent answers of the
    similarity corpus and the attack suite."""
    corpus = _reach_corpus()
    assert len(corpus) > 150, len(corpus)
    misses = {p.name: m for p in corpus if (m := _unvisited(p.read_text()))}
    assert not misses, misses


@pytest.mark.parametrize("code", [
    "x = [1 for w._module in [None]]",
    "x = {1 for torch.nn.functional.softmax in [None]}",
    "x = list(1 for a[0] in [None])",
    "from typing import Literal\ndef f(q, how: Literal[[1 for w._module in [None]]] = 1):\n    return q\n",
    "from typing import Literal\ndef f(q, how: Literal[torch.nn.functional.scaled_dot_product_attention] = 1):\n"
    "    return q\n",
])
def test_stores_in_comprehension_targets_and_code_in_literal_are_flagged(code):
    assert flags(code), code
