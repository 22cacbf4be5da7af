"""The scan's policy: reviewed allow-lists as data (pinned), no code from data, one list of shortcuts."""
import importlib
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

from tfmgrader import policy  # noqa: E402
from tfmgrader import scan  # noqa: E402
from fixtures.make_class import CODE_FROM_DATA  # noqa: E402
from tfmgrader.scan import scan_cells  # noqa: E402

import tfmcheck.checking as check  # noqa: E402

SETUP = ["import math\nimport torch\nimport tfmcheck.checking as check\n"]
TESTS = ["out = f(torch.ones(2))\ncheck.assert_close('f', out, torch.ones(2))\n"]


def flags_for(code):
    return scan_cells({5: code}, SETUP, TESTS, {"f"})


# --- the allow-list is data, reviewed and pinned -----------------------------------------------------

def test_the_installed_packages_admit_exactly_what_the_lock_pins():
    """An upgrade that adds a name to what the list admits, or changes what a listed name refers to,
    fails here; after a review, `python grader/tfmgrader/policy.py --write-lock` records the new state."""
    lock = json.loads(policy.LOCK.read_text())
    now = policy.resolve(policy.load())
    assert policy.differences(lock, now) == []
    listed = {(m, n) for m, names in policy.load().names.items() for n in names}
    locked = {(m, n) for m, names in lock["modules"].items() for n in names}
    assert listed == locked, "the lock covers every listed name, and nothing else"


def test_every_listed_name_resolves_and_no_listed_name_is_a_module():
    now = policy.resolve(policy.load())
    missing = [f"{m}.{n}" for m, names in now["modules"].items() for n, what in names.items() if what.startswith("<")]
    assert missing == []
    modules = [f"{m}.{n}" for m, names in now["modules"].items() for n, what in names.items()
               if what.startswith("module ")]
    assert modules == [], "a submodule is admitted only by naming it under 'modules'"
    assert [n for n, owners in now["value_attributes"].items() if owners == ["<missing>"]] == []


def test_every_group_has_a_reason_and_no_shortcut_or_refused_name_is_listed():
    data = json.loads(policy.ALLOWLIST.read_text())
    for group in data["allow"] + data["value_attributes"] + data["refused"] + data["refused_attributes"]:
        assert group["reason"].strip() and "\n" not in group["reason"], group
    assert all(reason.strip() for reason in data["modules"].values())
    p = policy.load()
    shortcuts = check.shortcut_names()
    assert not {n for names in p.names.values() for n in names} & shortcuts
    assert not set(p.value_attributes) & shortcuts
    assert not [r for r in p.refused if p.admits(*r.rsplit(".", 1))]
    for attack in ("typing.get_type_hints", "typing.ForwardRef", "functools.singledispatch", "torch.load",
                   "numpy.load", "torch.hub", "torch.package", "torch.utils", "torch.jit", "torch.ops"):
        assert not p.admits(*attack.rsplit(".", 1)), attack
    assert set(p.names["functools"]) == {"reduce", "partial", "lru_cache", "cache"}   # wraps: round 6


@pytest.mark.parametrize("module", sorted(m for m in policy.load().modules if m != "__future__"))
def test_nothing_is_admitted_because_it_exists(module):
    """Every public name of an allowed module is flagged unless the list names it (one cell per module,
    one line per name)."""
    mod = importlib.import_module(module)
    public = sorted(n for n in dir(mod) if not n.startswith("_"))
    code = f"import {module}\n" + "".join(f"_v{i} = {module}.{n}\n" for i, n in enumerate(public))
    flagged: dict[int, list[str]] = {}
    for f in flags_for(code):        # an allowed submodule on its own is flagged only as a module used as a value
        if "as a value" not in f.reason:
            flagged.setdefault(f.line, []).append(f.reason)
    p = policy.load()
    for i, name in enumerate(public):
        # TYPE_ONLY: isinstance only; DECORATOR_ONLY: a class statement's decorator only
        admitted = p.admits(module, name) and f"{module}.{name}" not in scan.TYPE_ONLY | scan.DECORATOR_ONLY
        assert (i + 2 in flagged) != admitted, (module, name, "admitted" if admitted else "flagged")
        assert admitted or f"{module}.{name}" in flagged[i + 2][0]


def test_a_name_off_the_list_gets_a_clear_message():
    [flag] = flags_for("import torch\nx = torch.nanmean_of_something_new(torch.ones(2))")
    assert "torch.nanmean_of_something_new" in flag.reason and "not on the course's list" in flag.reason
    [flag] = flags_for("import torch\nx = torch.load('model.pt')")
    assert "torch.load" in flag.reason and "loads or saves objects" in flag.reason


def test_a_malformed_allowlist_stops_the_scan(tmp_path):
    bad = tmp_path / "allowlist.json"
    bad.write_text(json.dumps({"modules": {"math": "numbers"},
                               "allow": [{"module": "math", "reason": "", "names": ["sqrt"]}]}))
    with pytest.raises(policy.PolicyError, match="no reason"):
        policy.load(bad)
    bad.write_text(json.dumps({"modules": {"math": "numbers"},
                               "allow": [{"module": "math", "reason": "x", "names": ["_private"]}]}))
    with pytest.raises(policy.PolicyError, match="private"):
        policy.load(bad)
    bad.write_text("{not json")
    with pytest.raises(policy.PolicyError):
        policy.load(bad)


# --- one policy of shortcuts, for the scan and the in-kernel check ----------------------------------

def test_one_shortcut_policy_feeds_both_checks():
    assert scan.FORBIDDEN_ATTRIBUTES == check.shortcut_names()
    for group, (names, paths) in check.SHORTCUT_POLICY.items():
        assert check.SHORTCUTS[group][0] == set(names)
        for path in paths:
            obj = check.resolve_dotted(path)
            assert check.functions_of(obj) or not hasattr(obj, "__code__"), path
            leaf = path.rsplit(".", 1)[1]
            assert any(leaf in f.reason for f in flags_for(f"import torch\nx = {path}")), path


@pytest.mark.parametrize("shortcut, group", [
    (lambda x: torch.nn.RMSNorm(4)(x), "layer_norm"),
    (lambda x: torch.nn.functional.rms_norm(x, (4,)), "layer_norm"),
    (lambda x: torch.nn.GroupNorm(1, 2)(x.reshape(1, 2, 2)), "layer_norm"),
    (lambda x: torch.nn.TransformerEncoderLayer(4, 1, 8, dropout=0.0)(x[None]), "transformer"),
    (lambda x: torch.nn.GRU(4, 3)(x[None]), "rnn"),
])
def test_the_kernel_check_forbids_what_the_scan_refuses(shortcut, group):
    with pytest.raises(check.ShortcutError, match="write your own"):
        check.call(shortcut, torch.randn(2, 4), forbid=(group,))


# --- no code from data -------------------------------------------------------------------------------

def test_code_from_data_has_at_least_ten_variants():
    assert len(CODE_FROM_DATA) >= 10


@pytest.mark.parametrize("kind", sorted(CODE_FROM_DATA))
def test_code_from_data_is_flagged(kind):
    code = "def f(x):\n    return x\n\n" + CODE_FROM_DATA[kind]
    assert flags_for(code), f"{kind} passed the scan"


@pytest.mark.parametrize("code, reason", [
    ("import typing\ndef f(x: \"typing.sys.modules['os']\"):\n    return x", "typing.sys"),
    ("def f(x) -> 'exec(\"1\")':\n    return x", "uses 'exec'"),
    ("x: 'open(\"/etc/passwd\")' = 1", "uses 'open'"),
    ("def f(x: 'not python ('):\n    return x", "not a Python expression"),
    ("def f(x: \"'exec(1)'\"):\n    return x", "uses 'exec'"),                  # a string in a string
    ("import typing\ndef f(x: typing.Optional['exec']):\n    return x", "uses 'exec'"),
    ("def g():\n    exec = print\n    def f(x: 'exec(1)'):\n        return x\n    return f", "uses 'exec'"),
    ("import typing\nt = typing\n", "as a value"),
    ("import torch\nF = torch.nn\nx = F.MultiheadAttention", "as a value"),
    ("import math as m\ndef f(x, mod=m):\n    return mod.sqrt(x)", "as a value"),
    ("import torch\nclass A:\n    _typed_storage = None\nx = torch.zeros(1)._typed_storage()", "private attribute of tensors"),
    ("import torch\nx = torch.zeros(1)._values()", "private attribute"),
    ("import torch\nclass A:\n    storage = None\nx = torch.zeros(1).storage()", "storages"),
    ("import torch\nx = torch.zeros(1).untyped_storage().type('os.system')", "untyped_storage"),
    ("import torch\nm = torch.nn.Linear(2, 2)\ns = m.get_submodule('weight')", "get_submodule"),
    ("import numpy as np\nb = np.zeros(1).dumps()", "dumps"),
    ("import collections\nc = collections.abc", "collections.abc"),
    ("from typing import get_type_hints", "typing.get_type_hints"),
    ("from functools import singledispatch", "functools.singledispatch"),
    ("import torch\nx = torch.serialization", "torch.serialization"),
])
def test_scan_flags_code_from_data(code, reason):
    flags = flags_for(code)
    assert any(reason in f.reason for f in flags), [str(f) for f in flags]


@pytest.mark.parametrize("code", [
    "from __future__ import annotations\nfrom typing import Optional\nimport torch\n\n"
    "def f(x: torch.Tensor, m: Optional[torch.Tensor] = None) -> torch.Tensor:\n    return x",
    "def f(x: 'torch.Tensor') -> 'tuple[torch.Tensor, int]':\n    return x",
    "from typing import Literal\ndef f(x, how: Literal['mean', 'sum', 'not python ('] = 'mean'):\n    return x",
    "import typing\ndef f(x, how: typing.Literal['a b'] = 'a b') -> typing.Union[int, 'torch.Tensor']:\n    return x",
    "from dataclasses import dataclass, field\n@dataclass\nclass Cfg:\n    d: 'int' = 4\n"
    "    names: list = field(default_factory=list)\n\ndef f(x, cfg: 'Cfg' = Cfg()):\n    return x * cfg.d",
    "class Helper:\n    scale = 2.0\n\n    def __init__(self, s):\n        self._s = s\n\n"
    "    def apply(self, x):\n        return x * self._s * self.scale\n\ndef f(x):\n    return Helper(3.0).apply(x)",
    "import functools, itertools, collections\n@functools.lru_cache(maxsize=None)\ndef g(n):\n    return n\n"
    "def f(x):\n    c = collections.Counter(itertools.chain([1], [2]))\n    return functools.reduce(lambda a, b: a + b, [x, x])",
    "import torch\ndef f(x):\n    dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n    return x.to(dev)",
])
def test_honest_annotations_and_helpers_pass(code):
    assert flags_for(code) == []


def test_the_scan_lists_library_private_attributes_only_when_an_answer_uses_one():
    """Importing the scan and scanning an honest answer import nothing heavy: the private attributes of the
    library's value types (whose sample objects import torch._dynamo) are listed the first time an answer uses
    a private name, and then refused as before (the case with `_typed_storage` above)."""
    import subprocess
    import sys
    code = ("import sys\nfrom tfmgrader.scan import scan_cells, library_private_attributes\n"
            "assert scan_cells({5: 'def f(x):\\n    return x.softmax(-1)'}, [], [], {'f'}) == []\n"
            "assert 'torch._dynamo' not in sys.modules, 'imported by the scan of an honest answer'\n"
            "assert library_private_attributes.cache_info().currsize == 0\n"
            "flags = scan_cells({5: 'import torch\\ny = torch.zeros(1)._values()'}, [], [], set())\n"
            "assert any('private attribute of tensors' in f.reason for f in flags), flags\n"
            "assert '_typed_storage' in library_private_attributes()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _scan_as_submission(code: str, assignment: str = "03_self_attention") -> list:
    """The scan's flags for exercise ``assignment``'s released notebook with every answer wrong and ``code`` after
    the first one, as ScanSubmission sees it (read-only and test cells by their nbgrader metadata)."""
    import nbformat
    from fixtures.make_class import attack
    from tfmgrader.scan import scan_cells
    release = nbformat.read(ROOT / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)
    # the graded names: what the instructor's answer cells define (ScanSubmission reads them from the gradebook)
    graded = {n for cell in release.cells if cell.metadata.get("nbgrader", {}).get("solution")
              for n in _defined(cell.source)}
    nb = attack(release, code)
    learner, setup, tests = {}, [], []
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            learner[i] = cell.source
        elif meta.get("grade") or meta.get("locked"):
            (tests if meta.get("grade") else setup).append(cell.source)
        else:
            learner[i] = cell.source
    return scan_cells(learner, setup, tests, graded)


def _defined(src):
    import ast
    try:
        return [n.name for n in ast.parse(scan.to_python(src)).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    except SyntaxError:
        return []


def test_every_attack_the_suite_expects_flagged_is_flagged_by_the_scan_alone():
    """Every attack of grader/fixtures/attacks that must be flagged (not the templates, which name a class's paths)
    is flagged by the scan on exercise 3's notebook: seconds, where grading the class takes minutes."""
    import json
    index = json.loads((ROOT / "grader" / "fixtures" / "attacks" / "index.json").read_text())
    missed = []
    for group in index["groups"]:
        for e in group["attacks"]:
            if e["expect"] != "flag" or e.get("template") or e.get("runtime"):
                continue        # runtime: flagged when it runs (the graded kernel), which the class tests check
            code = (ROOT / "grader" / "fixtures" / "attacks" / f"{e['kind']}.ipy").read_bytes().decode("utf-8")
            if not _scan_as_submission(code):
                missed.append(e["kind"])
    assert not missed, f"not flagged by the scan: {missed}"
