"""The grader's own verdicts: the trusted test cells, replayed on the learner's recorded results.

After a notebook ran in the learner's kernel (which recorded every result its test cells obtained from the
learner's functions; see ``grader/tfmcheck/trace.py``), ``replay`` runs the assignment's read-only cells, taken from
the gradebook (the instructor's source, never the submission), in this process, with ``check.call`` serving
the recorded results.  No learner code runs here, so nothing the learner did inside the kernel (rebinding
the checks, editing their module, forging output) can make a test pass here.
"""
from __future__ import annotations

import ast
import contextlib
import io
import warnings
from dataclasses import dataclass, field


@dataclass
class Verdicts:
    passed: dict[str, bool] = field(default_factory=dict)     # grade_id -> passed
    messages: dict[str, str] = field(default_factory=dict)    # grade_id -> why it failed
    errors: dict[str, tuple[str, str]] = field(default_factory=dict)  # grade_id -> (exception name, message)
    printed: dict[str, str] = field(default_factory=dict)     # grade_id -> what the test cell printed
    problems: list[str] = field(default_factory=list)          # signs of a tampered trace


class _Stub:
    """Stands for a learner's function in the replay: only ``check.call`` may use it."""

    def __init__(self, name):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"the tests called {self.__name__} directly; graded calls go through check.call")


def called_names(sources: list[str]) -> set[str]:
    """Names passed as the function to ``check.call`` / ``check.peak_memory`` / ``check.peak_numel`` in the
    test cells."""
    names = set()
    for src in sources:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("call", "peak_numel", "peak_memory") and node.args and \
                    isinstance(node.args[0], ast.Name):
                names.add(node.args[0].id)
    return names


def replay(cells: list[tuple[str, str, bool]], records: dict, problems: list[str],
           outside_held: dict | None = None, secret: str | None = None) -> Verdicts:
    """Run ``cells`` — ``(grade_id, source, is_test)`` in notebook order: the read-only setup cells and
    the test cells — against ``records``; return each test's verdict.  ``outside_held``: {test cell: bytes the
    grader saw the kernel hold while it ran} (``tfmgrader.outside_memory``), the least ``held_bytes`` counted.
    ``secret``: the grading secret the kernel's tests drew their inputs from (``checking.input_seed``; None: the
    in-process default of ``check.recording``)."""
    import torch

    import tfmcheck.checking as check

    verdicts = Verdicts(problems=list(problems))
    namespace: dict = {"__name__": "__grading_replay__"}
    tests = check.TestNamespace()       # the test cells' own names, as in the graded kernel (check.run_test)
    bound = set()
    for _, src, is_test in cells:
        if not is_test:
            with contextlib.suppress(SyntaxError):
                bound |= {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)
                          and isinstance(n.ctx, ast.Store)}
    for name in called_names([src for _, src, is_test in cells if is_test]) - bound:
        namespace[name] = _Stub(name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # the learner's kernel runs with one thread too
    try:
        with check.replay(records, outside_held, secret or check.IN_PROCESS_SECRET), warnings.catch_warnings(), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            for grade_id, src, is_test in cells:
                if is_test:
                    check.begin_test(grade_id)
                printed = io.StringIO()
                try:
                    with contextlib.redirect_stdout(printed):
                        if is_test:
                            check.run_test(src, namespace, tests, f"<{grade_id}>")
                        else:
                            exec(compile(src, f"<{grade_id}>", "exec"), namespace)  # noqa: S102 - trusted cells
                except Exception as err:  # noqa: BLE001 - a failing test is a verdict, not an error
                    if is_test:
                        verdicts.passed[grade_id] = False
                        verdicts.messages[grade_id] = f"{type(err).__name__}: {err}"
                        verdicts.errors[grade_id] = (type(err).__name__, str(err))
                    else:
                        verdicts.problems.append(f"the read-only cell {grade_id} failed in the replay: {err}")
                else:
                    if is_test:
                        verdicts.passed[grade_id] = True
                if is_test:
                    verdicts.printed[grade_id] = printed.getvalue()
    finally:
        torch.set_num_threads(threads)
    return verdicts
