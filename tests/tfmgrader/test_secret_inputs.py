"""The hidden tests' inputs come from a secret the grader draws for each grading run (issue 31).

The course repository is public, ``solutions/`` (the hidden tests) included.  A blind red team ran the worked
solutions' test cells offline, recorded every call of the graded functions with its result, and submitted functions
that look their inputs up in that table: full marks without implementing anything, because every input came from a
literal seed.  Now the hidden part of every test cell draws its inputs from ``check.generator(n)`` /
``check.input_seed(n)``: the published seed ``n`` in self-study, Validate and ``make check``; when graded, a seed
derived from ``n`` and a secret that ``SandboxedExecute`` draws per notebook, hands to the kernel (environment) and to
the replay outside it (``verify.replay``).

- in this process (seconds): the seeds, the failure without a secret, the kernel's environment, every hidden part
  drawing from the secret, and the table attack against both verdict engines (``make check`` / the grader's record
  and replay);
- ``slow``: the table attack and the worked solution on both grading paths (``scripts/grade.py`` and plain
  ``nbgrader autograde``), the solution graded twice with two secrets and one score.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_exercises import _nbg, _read, _source
from test_verdicts import cells_of, run

from tfmcheck import SECRET_ENV, TRACE_ENV, feedback, trace
from tfmcheck import checking as check
from tfmgrader.verify import replay

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
HIDDEN = "### BEGIN HIDDEN TESTS"


def test_published_seeds_outside_grading_and_secret_ones_when_graded(tmp_path):
    """Self-study, Validate, `make check`: the literal seed.  Graded: one seed per (secret, n), the same in the
    kernel (recording) and in the replay, another for another secret; ``begin_test`` reseeds the global generators
    from the secret too."""
    assert check.input_seed(301) == 301
    assert torch.equal(torch.randn(5, generator=check.generator(301)),
                       torch.randn(5, generator=torch.Generator().manual_seed(301)))
    drawn = {}
    for secret in ("a" * 32, "b" * 32):
        with check.recording(tmp_path / f"{secret[0]}.jsonl", secret=secret) as recorder:
            check.begin_test("test_x")
            drawn[secret, "global"] = torch.rand(3)
            drawn[secret, "kernel"] = torch.randn(5, generator=check.generator(301))
        os.close(recorder.fd)
        with check.replay({}, secret=secret):
            check.begin_test("test_x")
            assert torch.equal(torch.rand(3), drawn[secret, "global"])
            assert torch.equal(torch.randn(5, generator=check.generator(301)), drawn[secret, "kernel"])
    published = torch.randn(5, generator=torch.Generator().manual_seed(301))
    assert not torch.equal(drawn["a" * 32, "kernel"], published)
    assert not torch.equal(drawn["a" * 32, "kernel"], drawn["b" * 32, "kernel"])
    assert not torch.equal(drawn["a" * 32, "global"], drawn["b" * 32, "global"])
    assert check.input_seed(301) == 301        # the contexts put everything back


def test_graded_without_a_secret_fails_closed(tmp_path):
    """A graded kernel that was given no secret never falls back to the published seeds: its tests fail."""
    with check.recording(tmp_path / "t.jsonl", secret=None) as recorder:
        with pytest.raises(check.CheckFailure, match="no secret"):
            check.generator(301)
        with pytest.raises(check.CheckFailure, match="no secret"):
            check.begin_test("test_x")
    os.close(recorder.fd)


def test_the_kernel_gets_the_secret_and_takes_it_out_of_its_environment(tmp_path, monkeypatch):
    """The launcher passes the grader's secret into the sandbox's environment (both kernel paths use
    ``kernel_env``; without it there is none, and the tests fail); ``tfmcheck.checking`` reads it at import and
    removes it from ``os.environ``."""
    from tfmgrader.sandbox_kernel import kernel_env

    monkeypatch.delenv(SECRET_ENV, raising=False)
    assert SECRET_ENV not in kernel_env(str(tmp_path), 3)
    monkeypatch.setenv(SECRET_ENV, "c" * 32)
    env = kernel_env(str(tmp_path), 3)
    assert env[SECRET_ENV] == "c" * 32
    code = ("import os, torch, tfmcheck.checking as check\n"
            f"assert {SECRET_ENV!r} not in os.environ\n"
            "g = torch.Generator().manual_seed(check.input_seed(301))\n"
            "print(check.input_seed(301) != 301, torch.equal(torch.randn(3, generator=g),"
            " torch.randn(3, generator=check.generator(301))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, TRACE_ENV: str(tmp_path / "trace.jsonl"), SECRET_ENV: "c" * 32})
    assert out.returncode == 0 and out.stdout.split() == ["True", "True"], out.stderr[-2000:]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_hidden_part_draws_its_inputs_from_the_secret(assignment):
    """Each test cell has a hidden part, and each hidden part draws from ``check.generator`` / ``check.input_seed``,
    never from a generator seeded with a literal (a table of the published tests' calls would answer it)."""
    for cell in _read(_source(assignment)).cells:
        if cell.cell_type != "code" or not _nbg(cell).get("grade"):
            continue
        assert HIDDEN in cell.source, (assignment, _nbg(cell)["grade_id"])
        hidden = cell.source.split(HIDDEN, 1)[1]
        assert re.search(r"check\.(generator|input_seed)\(", hidden), (assignment, _nbg(cell)["grade_id"])
        assert not re.search(r"Generator\(\)\.manual_seed\(", hidden), (assignment, _nbg(cell)["grade_id"])


# --- the table attack ------------------------------------------------------------------------------------

A = "03_self_attention"
FUNCTIONS = {"sdpa": ("scaled_dot_product_attention", "q, k, v, mask=None", "(q, k, v, mask)"),
             "causal": ("causal_mask", "n", "(n,)"),
             "self_attention": ("self_attention", "x, W_q, W_k, W_v, mask=None", "(x, W_q, W_k, W_v, mask)")}


def table_key(args):
    """What the attack's lookup reads of a call: shapes, dtypes, the first values of each tensor, other arguments."""
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append((tuple(a.shape), str(a.dtype), [round(float(x), 4) for x in a.reshape(-1)[:4].tolist()]))
        else:
            parts.append(a)
    return repr(parts)


def _encoded(value):
    if isinstance(value, torch.Tensor):
        return ("T", str(value.dtype), tuple(value.shape), value.reshape(-1).tolist())
    return tuple(_encoded(v) for v in value)


def table_answers() -> dict[str, str]:
    """Exercise 3's answer cells of a submission that implements nothing: the worked solution's results for every
    call its test cells make with the published seeds (visible and hidden tests, run as `make check` runs them),
    served by looking the inputs up."""
    table = {}
    cells = cells_of(_read(_source(A)))
    namespace = {"__name__": "__main__"}
    feedback.reset_history()
    for gid, source, kind in cells:
        exec(compile(source, f"<{gid}>", "exec"), namespace)
        if kind == "answer":        # record every call of the worked function from now on
            name, _, args = FUNCTIONS[gid]
            solution = namespace[name]

            def recorder(*call, _name=name, _solution=solution, _n=len(args.strip("()").split(", "))):
                call = call + (None,) * (_n - len(call))
                result = _solution(*call)
                table[_name + table_key(call)] = _encoded(result)
                return result
            namespace[name] = recorder
    helpers = ("DTYPES = {'torch.float32': torch.float32, 'torch.float64': torch.float64, 'torch.bool': torch.bool}\n"
               f"TABLE = {table!r}\n\n\n"
               "def table_key(args):\n"
               "    parts = []\n"
               "    for a in args:\n"
               "        if isinstance(a, torch.Tensor):\n"
               "            parts.append((tuple(a.shape), str(a.dtype), [round(float(x), 4) for x in a.reshape(-1)[:4].tolist()]))\n"
               "        else:\n"
               "            parts.append(a)\n"
               "    return repr(parts)\n\n\n"
               "def decoded(value):\n"
               "    if len(value) == 4 and value[0] == 'T':\n"
               "        return torch.tensor(value[3], dtype=DTYPES[value[1]]).reshape(value[2])\n"
               "    return tuple(decoded(v) for v in value)\n\n\n")
    answers = {}
    for gid, (name, signature, args) in FUNCTIONS.items():
        answers[gid] = (helpers if gid == "sdpa" else "") + (
            f"def {name}({signature}):\n    return decoded(TABLE[{name!r} + table_key({args})])\n")
    return answers


def _with_answers(answers):
    nb = _read(_source(A))
    for cell in nb.cells:
        if _nbg(cell).get("solution") and _nbg(cell).get("grade_id") in answers:
            cell.source = answers[_nbg(cell)["grade_id"]]
    return nb


def graded_in_process(cells, tmp_path, secret):
    """{test cell: passed} the way the grader decides (record in the kernel, replay outside), with ``secret``."""
    path = tmp_path / f"trace-{secret}.jsonl"
    with check.recording(path, secret=secret) as recorder:
        in_kernel = run(cells, reseed=True)[0]
    os.close(recorder.fd)
    records, problems = trace.loads(path.read_bytes())
    verdicts = replay([(g, s, k == "test") for g, s, k in cells if k != "answer"], records, problems, secret=secret)
    return {gid: ok and verdicts.passed.get(gid, False) for gid, ok in in_kernel.items()}, records


@pytest.fixture(scope="module")
def table():
    return table_answers()


def test_a_table_of_the_published_tests_fails_every_graded_cell(table, tmp_path, one_torch_thread):
    """The table answers every test with the published seeds (`make check`: all pass), and none graded: every test
    cell has a hidden part, whose inputs it has never seen.  The worked solution passes under two secrets, whose
    inputs differ."""
    cells = cells_of(_with_answers(table))
    assert set(run(cells).values()) == {True}, run(cells)             # the attack is real: full marks unsecreted
    graded, _ = graded_in_process(cells, tmp_path, "d" * 32)
    assert graded and not any(graded.values()), graded
    solution = cells_of(_read(_source(A)))
    first, records_1 = graded_in_process(solution, tmp_path, "e" * 32)
    second, records_2 = graded_in_process(solution, tmp_path, "f" * 32)
    assert set(first.values()) == set(second.values()) == {True}, (first, second)
    hidden = [key for key, r in records_1.items() if r["args"] != records_2[key]["args"]]
    assert len(hidden) >= len(first), "the hidden tests' inputs did not change with the secret"


# --- both grading paths ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_both_grading_paths_draw_hidden_inputs_from_a_secret(table, tmp_path):
    """Graded for real, by ``scripts/grade.py`` and then by plain ``nbgrader autograde``: the table attack scores 0 of
    11 on both (every test cell has a hidden part), the worked solution 11 of 11 on both, with two secrets (their
    digests in the report) and one score."""
    import nbformat
    from nbgrader.api import Gradebook

    from conftest import require_bwrap
    from fixtures.make_class import with_answers
    from test_grading import autograde, new_course
    from tfmgrader.notebooks import answered
    require_bwrap()
    env = new_course(tmp_path, [A])
    good = answered(nbformat.read(tmp_path / "notebooks" / A / f"{A}.ipynb", as_version=4), _read(_source(A)))
    for student, answers in (("table", table), ("ada", {})):
        (tmp_path / "submitted" / student / A).mkdir(parents=True)
        nbformat.write(with_answers(good, answers), tmp_path / "submitted" / student / A / f"{A}.ipynb")

    def scores():
        with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
            return {s: (gb.find_submission(A, s).score, gb.find_submission(A, s).max_score) for s in ("table", "ada")}

    def secrets_used():
        reports = [json.loads((tmp_path / "reports" / A / f"{s}.json").read_text()) for s in ("table", "ada")]
        return [nb["inputs_secret"] for report in reports for nb in report.values()]

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), A, "--course", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(tmp_path / "grading" / A / "grades.csv") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    # the worked solution verbatim: flagged as a copy of solutions/ at most, never for its tests
    assert rows["ada"]["status"] == "graded" or "simil" in rows["ada"]["reason"], rows["ada"]
    assert scores() == {"table": (0, 11), "ada": (11, 11)}, (scores(), rows)
    first = secrets_used()
    graded = autograde(tmp_path, env, A)
    assert scores() == {"table": (0, 11), "ada": (11, 11)}, graded["_log"]
    second = secrets_used()
    assert len(first) == len(second) == 2 and all(len(s) == 12 for s in first + second), (first, second)
    assert len(set(first + second)) == 4, "a secret was used twice: one per notebook and grading run"
