"""The three packages and their one direction of dependency (README "Layout", issue 19).

``tfmlib`` (the teaching library) <- ``tfmcheck`` (the checks the exercises run) <- ``tfmgrader`` (the grader).
These tests read the source (``ast``), so they see every import, also one inside a function.
"""
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"tfmlib": ROOT / "tfmlib", "tfmcheck": ROOT / "grader" / "tfmcheck",
            "tfmgrader": ROOT / "grader" / "tfmgrader"}
TEACHING_LINES = 2850  # chapter 9 added tfmlib.modern, tfmlib.bpe and tfmlib.data.corpus (about 580 lines);
#                        chapter 8 tfmlib.scaling.fit_chinchilla_many (its bootstrap of 1,000 resamples)


def package_files(name):
    return sorted(p for p in PACKAGES[name].rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str | None:
    for name, folder in PACKAGES.items():
        if path.is_relative_to(folder):
            parts = [name, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return None


def python_sources():
    """Every Python source of the repository: the packages, scripts, tests, the nbgrader configuration and the
    code cells of the exercises' notebooks (as ``(label, source, module name or None)``)."""
    files = [p for name in PACKAGES for p in package_files(name)]
    files += sorted((ROOT / "scripts").glob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    files += [ROOT / "nbgrader_config.py"]
    for path in files:
        if "__pycache__" not in path.parts:
            yield str(path.relative_to(ROOT)), path.read_text(), module_name(path)
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                source = "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line
                                   for line in source.splitlines())
                yield f"{path.relative_to(ROOT)} cell {i}", source, None


def imports(tree):
    """``(module imported, names imported from it or None, line)`` for every import statement."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [a.name for a in node.names], node.lineno


def top(module: str) -> str:
    return module.split(".")[0]


def test_the_teaching_library_is_small():
    lines = sum(len(p.read_text().splitlines()) for p in package_files("tfmlib"))
    assert lines < TEACHING_LINES, f"tfmlib has {lines} lines (budget {TEACHING_LINES})"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts of pyproject.toml (``[tool.importlinter]``) on the packages under ``root``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "grader"), str(root)])}
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--config", str(ROOT / "pyproject.toml"),
                           "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_dependencies_point_one_way():
    done = lint_imports(ROOT)
    assert done.returncode == 0 and "2 kept, 0 broken" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_layers_contract_fails_on_an_import_the_wrong_way(tmp_path):
    """The contract can fail: the teaching library importing the grader (inside a function) breaks it."""
    for name, folder in PACKAGES.items():
        shutil.copytree(folder, tmp_path / folder.relative_to(ROOT), ignore=shutil.ignore_patterns("__pycache__"))
    utils = tmp_path / "tfmlib" / "utils.py"
    utils.write_text(utils.read_text() + "\n\ndef _wrong_way():\n    import tfmgrader.scan  # noqa: F401\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0 and "BROKEN" in done.stdout and "tfmlib.utils -> tfmgrader.scan" in done.stdout, \
        done.stdout[-3000:]


def test_the_no_circles_contract_fails_on_an_import_circle(tmp_path):
    """The second contract can fail: the self-check importing the batch (which imports the self-check), inside a
    function, is a circle (issue 34)."""
    for name, folder in PACKAGES.items():
        shutil.copytree(folder, tmp_path / folder.relative_to(ROOT), ignore=shutil.ignore_patterns("__pycache__"))
    selfcheck = tmp_path / "grader" / "tfmgrader" / "selfcheck.py"
    selfcheck.write_text(selfcheck.read_text() + "\n\ndef _circle():\n    import tfmgrader.batch  # noqa: F401\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0 and "No cycles are allowed in tfmgrader" in done.stdout, done.stdout[-3000:]


#: Modules whose code runs as the main program of a process of its own that the grader starts (the kernel's
#: launcher, the fork server inside the sandbox, the kernel's check library), where setting that process's own
#: working folder and environment is how the process starts; everything else runs in the grader's process.
PROCESS_ENTRIES = {
    "tfmgrader.sandbox_kernel": "the kernel's launcher, run by jupyter_client as a program, execs the kernel",
    "tfmgrader.forkserver_inside": "the fork server's program inside the sandbox: each forked kernel sets itself up",
    "tfmcheck.checking": "in the learner's kernel, it removes the grading run's secret from that kernel's environment",
}


def environment_writes(tree) -> list[tuple[int, str]]:
    """``(line, code)`` of every write to ``os.environ`` (item, ``setdefault``, ``update``, ``pop``, ``del``,
    ``putenv``, ``unsetenv``, ``clear``) and every ``chdir``."""
    found = []
    for node in ast.walk(tree):
        text = ""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, attr = ast.unparse(node.func.value), node.func.attr
            if attr in ("chdir", "fchdir", "putenv", "unsetenv") or (
                    owner.endswith("environ") and attr in ("setdefault", "update", "pop", "popitem", "clear")):
                text = ast.unparse(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            text = next((ast.unparse(t) for t in targets if isinstance(t, ast.Subscript)
                         and ast.unparse(t.value).endswith("environ")), "")
        if text:
            found.append((node.lineno, text))
    return found


def test_the_grader_passes_settings_as_arguments_not_through_the_environment_or_the_working_folder():
    """Issue 34: inside the packages nothing writes ``os.environ`` or changes the working folder; a run's settings
    travel in ``run.GradingRun``.  Only the programs of processes the grader starts set up their own process."""
    found = []
    for name in PACKAGES:
        for path in package_files(name):
            module = module_name(path)
            if module in PROCESS_ENTRIES:
                continue
            found += [f"{path.relative_to(ROOT)}:{line} {code}" for line, code in environment_writes(ast.parse(
                path.read_text()))]
    assert not found, "settings passed through the environment or the working folder:\n" + "\n".join(found)
    modules = {module_name(path) for name in PACKAGES for path in package_files(name)}
    assert set(PROCESS_ENTRIES) <= modules, set(PROCESS_ENTRIES) - modules


def test_the_environment_check_sees_every_kind_of_write():
    """The check above can fail: each way of writing the environment or the working folder is found."""
    code = """
import os
from os import environ
os.environ["A"] = "1"
environ["B"] = "2"
os.environ.setdefault("C", "3")
os.environ.update(D="4")
os.environ.pop("E", None)
del os.environ["F"]
os.putenv("G", "7")
os.chdir("/tmp")
os.environ.get("H")
"""
    assert sorted(line for line, _ in environment_writes(ast.parse(code))) == [4, 5, 6, 7, 8, 9, 10, 11]


def test_one_function_autogrades_a_submission():
    """Issue 34: ``run.grade_submission`` is the one caller of nbgrader's ``autograde`` in the packages; the batch
    and the self-check both grade through it."""
    callers, users = [], set()
    for name in PACKAGES:
        for path in package_files(name):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "autograde":
                    callers.append(module_name(path))
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "grade_submission":
                    users.add(module_name(path))
    assert callers == ["tfmgrader.run"], callers
    assert {"tfmgrader.batch", "tfmgrader.selfcheck"} <= users, users


def test_no_module_uses_another_packages_private_names():
    """``from tfmcheck.checking import _x`` or ``check._x`` outside ``tfmcheck``: a private name used across a
    package boundary (dunder names such as ``__file__`` are public)."""
    ours = set(PACKAGES)
    found = []
    for label, source, own in python_sources():
        tree = ast.parse(source)
        own_package = top(own) if own else None
        bound = {}              # local name -> the module of ours it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if top(alias.name) in ours:
                        bound[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name or top(alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and top(node.module) in ours:
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and top(node.module) != own_package:
                        found.append(f"{label}:{node.lineno} from {node.module} import {alias.name}")
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id in bound and top(bound[base.id]) != own_package:
                    found.append(f"{label}:{node.lineno} {base.id}.{node.attr} ({bound[base.id]})")
    assert not found, "private names used across packages:\n" + "\n".join(found)


def test_the_grader_and_its_command_line_do_not_edit_the_import_path():
    """Imports resolve through the installation (pyproject.toml maps the packages), never ``sys.path.insert``."""
    files = [p for name in PACKAGES for p in package_files(name)]
    files += [ROOT / "scripts" / "grade.py", ROOT / "nbgrader_config.py"]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("insert", "append", "extend") and ast.unparse(node.func.value) == "sys.path":
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} edits sys.path")


def test_the_packages_are_installed_from_their_folders():
    import importlib

    for name, folder in PACKAGES.items():
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve().parent == folder.resolve(), name


def test_the_guide_lists_every_limit_with_its_default():
    from tfmgrader.limits import LIMITS

    guide = (ROOT / "book" / "appendix" / "grading.md").read_text()
    for name, (default, _, _) in LIMITS.items():
        assert f"| `{name}` | {default:,} " in guide, name
