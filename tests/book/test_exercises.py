"""The graded exercises (issue 5): solutions/ → nbgrader → notebooks/, and autograding that is fair.

Fast tests read the notebooks: outputs stripped, totals stated at the top match the points, the graded
functions keep the contract's names and arguments (../shared/COURSE_PLAN.md), and the release holds no
solution code and no hidden tests.

Slow tests build one throw-away nbgrader course per assignment under pytest's tmp_path (never in the
repository), put submissions in it — the solution itself, the unmodified release, wrong answers made by
editing the solution's text, and cheats — and grade each assignment with ONE `autograde` call for all its
students (nbgrader's start-up is paid once per assignment), two assignments at a time.  They check:
1. generate_assignment in the temporary course reproduces notebooks/ byte for byte;
3. the solutions get full marks; 4. the release gets zero; 5. each wrong answer loses the points of the tests
that target its mistake and keeps the others; 6. each cheat scores zero on what it cheats;
7. generate_feedback writes HTML feedback.  Also: a correct answer that prints a warning and a submission
with a deleted test cell keep full marks; an endless loop is stopped after the cell timeout and scored;
a submission that kills its kernel scores zero; the students graded after them are graded normally.  The median seconds to autograde one submission of each
assignment is printed and written to artifacts/exercise_grading_times.json.

Run alone as `python tests/book/test_exercises.py --grade COURSE ASSIGNMENT [FEEDBACK_STUDENT ...]` it is the
grading worker the slow tests start (it prints one JSON line).
"""
from __future__ import annotations

import ast
import concurrent.futures
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
import release  # noqa: E402  (scripts/release.py)

ASSIGNMENTS = release.ASSIGNMENTS

# The graded functions and their arguments: the contract of COURSE_PLAN.md ("Graded functions").
# decoder_block is the chapter plan's "decoder block's forward" (06), an addition to the contract table.
CONTRACT = {
    "01_rnn_limits": {"rnn_forward": ["x", "h0", "W_xh", "W_hh", "b_h"],
                      "grad_norm_by_distance": ["x", "h0", "W_xh", "W_hh", "b_h"]},
    "02_attention": {"attention_step": ["query", "keys", "values", "mask"]},
    "03_self_attention": {"scaled_dot_product_attention": ["q", "k", "v", "mask"], "causal_mask": ["n"],
                          "self_attention": ["x", "W_q", "W_k", "W_v", "mask"]},
    "04_multi_head": {"split_heads": ["x", "n_heads"], "merge_heads": ["x"],
                      "multi_head_attention": ["x", "W_q", "W_k", "W_v", "W_o", "n_heads", "mask"]},
    "05_positions": {"sinusoidal_positions": ["n", "d"], "relative_position_index": ["n", "k"],
                     "relative_attention_scores": ["q", "k", "a_k"]},
    "06_encoder_decoder": {"padding_mask": ["lengths", "max_len"], "decoder_mask": ["lengths", "max_len"],
                           "layer_norm": ["x", "gamma", "beta", "eps"],
                           "decoder_block": ["x", "mask", "self_attn", "feed_forward", "gamma1", "beta1",
                                             "gamma2", "beta2", "eps"]},
    "07_efficiency": {"sliding_window_mask": ["n", "window"], "global_mask": ["n", "global_idx"],
                      "random_mask": ["n", "n_random", "generator"],
                      "blockwise_attention": ["q", "k", "v", "block_size"]},
    "08_scaling_laws": {"chinchilla_loss": ["N", "D", "params"], "fit_chinchilla": ["N", "D", "L", "starts", "delta"],
                        "fit_power_law": ["x", "y"]},
    "09_modern_gpt": {"rms_norm": ["x", "weight", "eps"], "swiglu": ["x", "W_gate", "W_up", "W_down"],
                      "apply_rope": ["x", "positions", "base"],
                      "grouped_query_attention": ["x", "W_q", "W_k", "W_v", "W_o", "n_heads", "n_kv_heads", "cache"]},
}


def _read(path):
    import nbformat
    return nbformat.read(str(path), as_version=4)


def _source(a):
    return REPO / "solutions" / a / f"{a}.ipynb"


def _released(a):
    return REPO / "notebooks" / a / f"{a}.ipynb"


def _nbg(cell):
    return cell.metadata.get("nbgrader", {})


def _solution_lines(text):
    """The code between ### BEGIN SOLUTION and ### END SOLUTION."""
    return re.findall(r"### BEGIN SOLUTION\n(.*?)\n\s*### END SOLUTION", text, flags=re.S)


def _hidden_blocks(text):
    return re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)\n\s*### END HIDDEN TESTS", text, flags=re.S)


# ---------------------------------------------------------------------------------------------------------
# Fast tests: the notebooks as files
# ---------------------------------------------------------------------------------------------------------
def test_solutions_are_clean_and_totals_match():
    for a in ASSIGNMENTS:
        nb = _read(_source(a))
        ids = [_nbg(c).get("grade_id") for c in nb.cells if _nbg(c)]
        assert len(ids) == len(set(ids)), f"{a}: duplicate grade ids {ids}"
        for c in nb.cells:
            if c.cell_type == "code":
                assert c.outputs == [] and c.execution_count is None, f"{a}: cell {c.id} has outputs"
        code = [c for c in nb.cells if c.cell_type == "code"]
        setup = _nbg(code[0])
        assert setup.get("grade_id") == "setup" and setup.get("locked"), f"{a}: the first code cell must be the locked setup"
        assert "import tfmcheck.checking as check" in code[0].source
        points = sum(_nbg(c).get("points", 0) for c in nb.cells if _nbg(c).get("grade"))
        stated = re.search(r"\*\*Total: (\d+) points\*\*", nb.cells[0].source)
        assert stated and int(stated.group(1)) == points, f"{a}: the top says {stated and stated.group(1)}, tests give {points}"
        for c in code:
            if _nbg(c).get("grade"):
                assert _nbg(c).get("locked") and "### BEGIN HIDDEN TESTS" in c.source, f"{a}: {c.id} has no hidden tests"
                assert re.search(rf"\({_nbg(c)['points']} points?\)", c.source), f"{a}: {c.id} does not state its points"


def test_graded_functions_keep_the_contract():
    for a, functions in CONTRACT.items():
        nb = _read(_source(a))
        defs = {}
        for c in nb.cells:
            if _nbg(c).get("solution") and c.cell_type == "code":
                for node in ast.parse(c.source).body:
                    if isinstance(node, ast.FunctionDef):
                        defs[node.name] = [arg.arg for arg in node.args.args]
        for name, args in functions.items():
            assert defs.get(name) == args, f"{a}: {name} has arguments {defs.get(name)}, the contract says {args}"


def test_release_holds_no_solution_code_and_no_hidden_tests():
    for a in ASSIGNMENTS:
        text = _released(a).read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            assert marker not in text, f"{a}: the release contains {marker!r}"
        released = _read(_released(a))
        released_code = "\n".join(c.source for c in released.cells)
        source = _read(_source(a))
        visible = "\n".join(re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", c.source, flags=re.S)
                            for c in source.cells)
        secret = [line.strip() for c in source.cells for block in _solution_lines(c.source) + _hidden_blocks(c.source)
                  for line in block.splitlines()]
        secret = [s for s in secret if len(s) > 12 and not s.startswith("#") and s not in visible]
        leaked = [s for s in secret if s in released_code]
        assert not leaked, f"{a}: solution or hidden-test lines in the release: {leaked[:3]}"
        answers = [c for c in released.cells if _nbg(c).get("solution")]
        assert answers and all("raise NotImplementedError()" in c.source for c in answers)
        assert len(released.cells) == len(source.cells)


def test_setup_cell_imports_print_nothing_and_load_no_matplotlib():
    """nbgrader scores a test cell that writes to stderr as failed: the setup's imports must be silent."""
    code = ("import sys, math, torch, tfmcheck.checking as check; check.seed(0); "
            "assert 'matplotlib' not in sys.modules, 'tfmcheck.checking imported matplotlib'")
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="default")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == "", proc.stderr


# ---------------------------------------------------------------------------------------------------------
# Submissions: wrong answers and cheats, made by editing the solution's text
# ---------------------------------------------------------------------------------------------------------
# Each edit is ("sub", old, new) — replace text in the answer cells — or ("body", grade_id, code) — replace the
# solution of one answer cell — or ("prepend", grade_id, code), or ("delete", grade_id) for a test cell.
# must_fail: test cells (without "test_") that must lose their points; must_pass: those that must keep them.
SDPA_CHEAT = '''    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return out, torch.nan_to_num(torch.softmax(s, dim=-1))'''
ALLCLOSE_CHEAT = '''torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(a, dtype=torch.bool)
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
'''
RNN_CHEAT = '''    rnn = torch.nn.RNN(x.shape[-1], h0.shape[-1], batch_first=True).to(x.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b_h)
        rnn.bias_hh_l0.zero_()
    H, h_T = rnn(x, h0[None])
    return H, h_T[0]'''
GQA_SDPA_CHEAT = """    b, t, _ = x.shape
    d_h = W_q.shape[1] // n_heads
    start = 0 if cache is None else cache[0].shape[-2]
    positions = torch.arange(start, start + t)
    q = apply_rope((x @ W_q).view(b, t, n_heads, d_h).transpose(1, 2), positions)
    k = apply_rope((x @ W_k).view(b, t, n_kv_heads, d_h).transpose(1, 2), positions)
    v = (x @ W_v).view(b, t, n_kv_heads, d_h).transpose(1, 2)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=-2), torch.cat([cache[1], v], dim=-2)
    allowed = torch.arange(k.shape[-2])[None, :] <= positions[:, None]
    out = _attend(q, k, v, attn_mask=allowed, enable_gqa=True)
    return out.transpose(1, 2).reshape(b, t, n_heads * d_h) @ W_o, (k, v)"""
ROPE_TFMLIB_CHEAT = """    rows = [_rope(x[..., i:i + 1, :], base, int(p)) for i, p in enumerate(positions.tolist())]
    return torch.cat(rows, dim=-2)"""
EX9 = {"rms_norm", "swiglu", "rope_values", "rope_relative", "gqa_heads", "gqa_cache"}
FULL_MATRIX = '''    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v'''

VARIANTS = {
    # --- wrong answers (test 5) ---
    "no_scaling": ("03_self_attention", [("sub", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k.transpose(-2, -1)")],
                   {"sdpa_values", "sdpa_mask"}, {"causal_mask", "self_attention"}),   # each function on its own
    "softmax_wrong_dim": ("03_self_attention", [("sub", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
                          {"sdpa_values", "sdpa_mask"}, {"causal_mask", "self_attention"}),
    "inverted_mask": ("03_self_attention", [("sub", 'scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(mask, float("-inf"))')],
                      {"sdpa_mask", "sdpa_masked_row"}, {"sdpa_values", "causal_mask"}),
    "mask_after_softmax": ("03_self_attention", [("sub", '        scores = scores.masked_fill(~mask, float("-inf"))\n', "")],
                           {"sdpa_mask"}, {"sdpa_values", "causal_mask"}),
    "causal_off_by_one": ("03_self_attention", [("sub", "torch.ones(n, n, dtype=torch.bool).tril()", "torch.ones(n, n, dtype=torch.bool).tril(-1)")],
                          {"causal_mask"}, {"sdpa_values", "sdpa_mask", "sdpa_masked_row", "self_attention"}),
    "luong_softmax_over_batch": ("02_attention", [("sub", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=0)")],
                                 {"attention_values", "attention_mask"}, set()),
    "heads_wrong_order": ("04_multi_head", [("sub", "x.view(b, t, n_heads, d // n_heads).transpose(1, 2)",
                                             "x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)")],
                          {"split_heads"}, {"merge_heads", "mha_values", "mha_mask"}),
    "heads_scaled_by_d": ("04_multi_head", [("sub", "/ math.sqrt(q.shape[-1])", "/ math.sqrt(x.shape[-1])")],
                          {"mha_values", "mha_mask"}, {"split_heads", "merge_heads"}),
    "padding_ignores_lengths": ("06_encoder_decoder", [("sub", "torch.arange(max_len)[None, :] < lengths[:, None]",
                                                        "torch.ones(len(lengths), max_len, dtype=torch.bool)")],
                                {"padding_mask"}, {"layer_norm", "decoder_block", "decoder_mask"}),
    "decoder_causal_off_by_one": ("06_encoder_decoder", [("sub", "dtype=torch.bool).tril()", "dtype=torch.bool).tril(-1)")],
                                  {"decoder_mask"}, {"padding_mask", "layer_norm", "decoder_block"}),
    "layer_norm_unbiased": ("06_encoder_decoder", [("sub", "((x - mean) ** 2).mean(dim=-1, keepdim=True)",
                                                    "x.var(dim=-1, keepdim=True, unbiased=True)")],
                            {"layer_norm"}, {"padding_mask", "decoder_mask", "decoder_block"}),
    "rnn_ignores_h0": ("01_rnn_limits", [("sub", "    h = h0\n", "    h = torch.zeros_like(h0)\n")],
                       {"rnn_values"}, {"rnn_shapes"}),
    "relative_index_reversed": ("05_positions", [("sub", "(pos[None, :] - pos[:, None])", "(pos[:, None] - pos[None, :])")],
                                {"relative_index"}, {"sinusoidal", "relative_scores"}),
    "window_off_by_one": ("07_efficiency", [("sub", "<= window", "< window")],
                          {"sliding_window"}, {"global_mask", "random_mask", "blockwise_values", "blockwise_memory"}),
    "online_softmax_no_rescale": ("07_efficiency", [("sub", "correction = torch.exp(m - m_new)", "correction = torch.exp(m - m)")],
                                  {"blockwise_values"}, {"sliding_window", "global_mask", "random_mask"}),
    "blockwise_builds_full_matrix": ("07_efficiency", [("body", "blockwise", FULL_MATRIX)],
                                     {"blockwise_memory"}, {"blockwise_values"}),
    "fit_first_start_only": ("08_scaling_laws", [("sub", "        if value < best_value:\n", "        if best is None:\n")],
                             {"fit_chinchilla"}, {"chinchilla_loss", "fit_power_law"}),
    "rms_norm_subtracts_mean": ("09_modern_gpt", [("sub", "x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)",
                                                   "(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)")],
                                {"rms_norm"}, EX9 - {"rms_norm"}),
    "rope_halves": ("09_modern_gpt", [("sub", "x1, x2 = x[..., 0::2], x[..., 1::2]", "x1, x2 = x[..., :d // 2], x[..., d // 2:]"),
                                      ("sub", "torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)",
                                       "torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)")],
                    # the relative-position property holds for any pairing: the pairing test fails; GQA is tested on
                    # a trusted rope (grader/tfmcheck/standins.py) and passes
                    {"rope_values"}, {"rms_norm", "swiglu", "rope_relative", "gqa_heads", "gqa_cache"}),
    "gqa_positions_restart_in_cache": ("09_modern_gpt", [("sub", "positions = torch.arange(start, start + t)\n    q",
                                                          "positions = torch.arange(start, start + t)\n    rot = torch.arange(t)\n    q"),
                                                         ("sub", "transpose(1, 2), positions)\n    k", "transpose(1, 2), rot)\n    k"),
                                                         ("sub", "transpose(1, 2), positions)\n    v", "transpose(1, 2), rot)\n    v")],
                                       {"gqa_cache"}, EX9 - {"gqa_cache"}),
    # --- cheats (test 6): zero on what they cheat, full marks elsewhere (a function built on the cheat included) ---
    "cheat_torch_sdpa": ("03_self_attention", [("body", "sdpa", SDPA_CHEAT)],
                         {"sdpa_values", "sdpa_mask", "sdpa_masked_row"}, {"causal_mask", "self_attention"}),
    "cheat_redefine_allclose": ("03_self_attention", [("prepend", "sdpa", ALLCLOSE_CHEAT),
                                                      ("body", "sdpa", "    return torch.zeros(*q.shape[:-1], v.shape[-1]), torch.zeros(*q.shape[:-1], k.shape[-2])")],
                                {"sdpa_values", "sdpa_mask", "sdpa_masked_row"}, {"causal_mask", "self_attention"}),
    "cheat_hardcoded_output": ("03_self_attention", [("body", "causal", "    return torch.tensor([[True, False, False], [True, True, False], [True, True, True]])")],
                               {"causal_mask"}, {"sdpa_values", "sdpa_mask", "sdpa_masked_row", "self_attention"}),
    "cheat_tfmlib": ("04_multi_head", [("prepend", "split_heads", "from tfmlib.attention import split_heads as _library_split\n"),
                                       ("body", "split_heads", "    return _library_split(x, n_heads)")],
                     {"split_heads"}, {"merge_heads", "mha_values", "mha_mask"}),
    "cheat_torch_layer_norm": ("06_encoder_decoder", [("body", "layer_norm", "    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)")],
                               {"layer_norm"}, {"padding_mask", "decoder_mask", "decoder_block"}),
    "cheat_torch_rnn": ("01_rnn_limits", [("body", "rnn_forward", RNN_CHEAT)], {"rnn_shapes", "rnn_values"}, {"grad_norm"}),
    "cheat_blockwise_sdpa": ("07_efficiency", [("body", "blockwise", "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)")],
                             {"blockwise_values", "blockwise_memory"}, {"sliding_window", "global_mask", "random_mask"}),
    # exercise 9: F.rms_norm under another name, PyTorch's attention with enable_gqa, tfmlib's rope
    "cheat_rms_norm_alias": ("09_modern_gpt", [("prepend", "rms_norm", "from torch.nn import functional as _fn\n_normalise = _fn.rms_norm\n"),
                                               ("body", "rms_norm", "    return _normalise(x, x.shape[-1:], weight, eps)")],
                             {"rms_norm"}, EX9 - {"rms_norm"}),
    "cheat_gqa_torch_sdpa": ("09_modern_gpt", [("prepend", "gqa", "import torch.nn.functional as _F\n_attend = _F.scaled_dot_product_attention\n"),
                                               ("body", "gqa", GQA_SDPA_CHEAT)],
                             {"gqa_heads", "gqa_cache"}, EX9 - {"gqa_heads", "gqa_cache"}),
    "cheat_rope_tfmlib": ("09_modern_gpt", [("prepend", "apply_rope", "from tfmlib.positions import rope as _rope\n"),
                                            ("body", "apply_rope", ROPE_TFMLIB_CHEAT)],
                          {"rope_values", "rope_relative"}, {"rms_norm", "swiglu", "gqa_heads", "gqa_cache"}),
    # --- robustness: a correct answer that warns, and a deleted test cell, still get full marks ---
    "correct_but_warns": ("03_self_attention", [("prepend", "sdpa", "import warnings\n"),
                                                ("sub", "    d_k = q.shape[-1]\n", "    warnings.warn('this is only a warning')\n    d_k = q.shape[-1]\n")],
                          set(), {"sdpa_values", "sdpa_mask", "sdpa_masked_row", "causal_mask", "self_attention"}),
    "deleted_test_cell": ("03_self_attention", [("delete", "test_causal_mask")],
                          set(), {"sdpa_values", "sdpa_mask", "sdpa_masked_row", "causal_mask", "self_attention"}),
    # --- a submission that never finishes a cell is stopped after the cell timeout and scored (later cells are
    # not run); one that
    # tries to kill its kernel (the scan withholds `os`, so only that answer cell is lost); the students
    # graded after them (release, source) are graded normally ---
    "endless_loop": ("08_scaling_laws", [("prepend", "fit_chinchilla", "_n = 0\nwhile True:\n    _n += 1\n")],
                     {"fit_chinchilla", "fit_power_law"}, {"chinchilla_loss"}),   # the stopped kernel runs no later cell
    "kernel_crash": ("08_scaling_laws", [("prepend", "chinchilla_loss", "import os\nos._exit(1)\n")],
                     {"chinchilla_loss"}, {"fit_chinchilla", "fit_power_law"}),
}
HOSTILE = {"endless_loop", "kernel_crash"}  # left out of the timing figures
# A shorter cell timeout for the course that holds endless_loop, so the test waits 20 s, not 30 (its slowest honest
# cell, the fit of chinchilla_loss, takes about 3 s).
CELL_TIMEOUT = {"08_scaling_laws": 20}


def make_submission(assignment, edits):
    """The solution notebook of ``assignment`` with ``edits`` applied (each must change something)."""
    nb = _read(_source(assignment))
    for edit in edits:
        kind = edit[0]
        if kind == "sub":
            _, old, new = edit
            cells = [c for c in nb.cells if _nbg(c).get("solution") and old in c.source]
            assert cells, f"{assignment}: {old!r} is in no answer cell"
            for c in cells:
                c.source = c.source.replace(old, new)
        elif kind == "delete":
            before = len(nb.cells)
            nb.cells = [c for c in nb.cells if _nbg(c).get("grade_id") != edit[1]]
            assert len(nb.cells) == before - 1
        else:
            _, grade_id, code = edit
            (cell,) = [c for c in nb.cells if _nbg(c).get("grade_id") == grade_id]
            if kind == "prepend":
                cell.source = code + cell.source
            else:
                new = re.sub(r"( *)### BEGIN SOLUTION\n.*?\n\s*### END SOLUTION", lambda m: code, cell.source, flags=re.S)
                assert new != cell.source
                cell.source = new
    return nb


# ---------------------------------------------------------------------------------------------------------
# The grading worker (runs in a subprocess: one autograde call for all students of one assignment)
# ---------------------------------------------------------------------------------------------------------
def grade_worker(course: Path, assignment: str, feedback_students: list[str]) -> dict:
    import logging

    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI

    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    config = release.load_config(course)
    api = NbGraderAPI(config=config)
    t0 = time.monotonic()
    result = api.generate_assignment(assignment, force=True, create=True)
    assert result["success"], result.get("error")
    generate_s = time.monotonic() - t0

    # the unmodified release, submitted as is
    dest = course / "submitted" / "release" / assignment
    dest.mkdir(parents=True)
    shutil.copy(course / "notebooks" / assignment / f"{assignment}.ipynb", dest)

    starts = []

    class Starts(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("Sanitizing "):
                student = Path(message.split(" ", 1)[1]).parts[-3]
                starts.append((time.monotonic(), student))

    handler = Starts()
    api.log.addHandler(handler)
    import resource

    cpu = lambda: sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)  # noqa: E731
                      for f in ("ru_utime", "ru_stime"))
    cpu0, t0 = cpu(), time.monotonic()
    result = api.autograde(assignment, "*", force=True, create=True)
    t_end, cpu_s = time.monotonic(), cpu() - cpu0
    api.log.removeHandler(handler)
    # nbgrader reports a submission whose kernel died as an error of the run, and goes on with the others
    failed = re.findall(r"error processing assignment '[^']*' for student '([^']*)'", result.get("log", ""))
    assert result["success"] or failed, result.get("error") or result.get("log")
    seconds = {s: (starts[i + 1][0] if i + 1 < len(starts) else t_end) - t for i, (t, s) in enumerate(starts)}
    retried = regrade_starved(course, assignment)

    feedback = {}
    for student in feedback_students:
        r = api.generate_feedback(assignment, student)
        path = course / "feedback" / student / assignment / f"{assignment}.html"
        feedback[student] = str(path) if r["success"] and path.exists() else r.get("error") or r.get("log")

    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="transformers-from-scratch") as gb:
        for sub in gb.assignment_submissions(assignment):
            nb = gb.find_submission_notebook(assignment, assignment, sub.student_id)
            report = course / "grading" / "reports" / assignment / f"{sub.student_id}.json"
            run = json.loads(report.read_text()).get(assignment, {}) if report.exists() else {}
            scores[sub.student_id] = {"total": sub.score, "max": sub.max_score,
                                      "cells": {g.name: g.score for g in nb.grades},
                                      "run": {k: run.get(k) for k in ("execution", "stopped")}}
    return {"assignment": assignment, "scores": scores, "seconds": seconds, "generate_s": generate_s,
            "autograde_s": t_end - t0, "autograde_cpu_s": cpu_s, "feedback": feedback, "failed": failed,
            "retried": retried}


def regrade_starved(course: Path, assignment: str) -> dict[str, str]:
    """Grade once more, with the longer time limits of a retry, each submission that the machine's load kept from
    being graded: its kernel did not start (no run recorded) or a cell was starved (``SubmissionReport.starved``).
    ``scripts/grade.py`` does the same (``tfmgrader.run``), whose configuration of a retry
    (``GradingRun.config(patient=True)``) this uses; plain `nbgrader autograde` leaves it to the instructor.
    Returns {student: why}."""
    from tfmgrader.course import api_from_config
    from tfmgrader.report import SubmissionReport
    from tfmgrader.run import GradingRun

    reports = course / "grading" / "reports"
    why = {}
    for path in sorted((reports / assignment).glob("*.json")):
        recorded = "execution" in json.loads(path.read_text()).get(assignment, {})
        starved = "; ".join(SubmissionReport.load(path).starved())
        if starved or not recorded:
            why[path.stem] = starved or "no run recorded (the kernel did not start?)"
    if why:
        run = GradingRun.create(course, assignment, reports, verdicts=True)    # as the course configures it
        api = api_from_config(run.config(patient=True))[0]
        for student in why:
            api.autograde(assignment, student, force=True, create=True)
    return why


FEEDBACK = {"03_self_attention": ["source", "no_scaling"]}


def _run_worker(course, assignment):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "scripts"), str(REPO), os.environ.get("PYTHONPATH", "")]),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if assignment in CELL_TIMEOUT:      # the grader's limit (limits.json), read when the worker loads the config
        env["GRADER_CELL_TIMEOUT"] = str(CELL_TIMEOUT[assignment])
    proc = subprocess.run([sys.executable, __file__, "--grade", str(course), assignment, *FEEDBACK.get(assignment, [])],
                          capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"grading {assignment} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


import pytest  # noqa: E402


@pytest.mark.parametrize("variant", sorted(v for v, spec in VARIANTS.items() if spec[0] == "09_modern_gpt"))
def test_exercise_9_variants_fail_their_tests_in_a_plain_kernel(variant):
    """Without the grader's scan (self-study, Validate, or grading with the scan off) exercise 9's wrong answers fail
    the tests of their mistake and pass the others, and its cheats fail on the tests' own guard ("write your own")."""
    from test_feedback import run_cells
    from tfmcheck import checking

    assignment, edits, must_fail, must_pass = VARIANTS[variant]
    failed = {cell.removeprefix("test_"): error for cell, error in run_cells(make_submission(assignment, edits))}
    assert must_fail <= set(failed), f"{variant} passes {sorted(must_fail - set(failed))}"
    assert not must_pass & set(failed), f"{variant} fails {sorted(must_pass & set(failed))}: {failed}"
    if variant.startswith("cheat_"):
        assert all(isinstance(failed[t], checking.ShortcutError) for t in must_fail), failed


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    import nbformat

    root = tmp_path_factory.mktemp("nbgrader-courses")
    courses = {}
    for a in ASSIGNMENTS:
        course = root / a
        release.make_course(course, [a])
        students = {"source": _read(_source(a))}
        students.update({name: make_submission(a, edits) for name, (asg, edits, _, _) in VARIANTS.items() if asg == a})
        for student, nb in students.items():
            dest = course / "submitted" / student / a
            dest.mkdir(parents=True)
            nbformat.write(nb, str(dest / f"{a}.ipynb"))
        courses[a] = (course, len(students))
    order = sorted(ASSIGNMENTS, key=lambda a: -courses[a][1])  # longest first: two workers finish together
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {a: pool.submit(_run_worker, courses[a][0], a) for a in order}
        results = {a: f.result() for a, f in futures.items()}
    for a in ASSIGNMENTS:
        results[a]["course"] = str(courses[a][0])
    return results


@pytest.mark.slow
def test_generate_assignment_reproduces_notebooks(graded):
    for a in ASSIGNMENTS:
        diff = release.differences(Path(graded[a]["course"]) / "notebooks" / a, REPO / "notebooks" / a)
        assert not diff, f"{a}: notebooks/ differs from a fresh nbgrader generate_assignment in {diff} (run `make release`)"


@pytest.mark.slow
def test_solutions_get_full_marks(graded):
    for a in ASSIGNMENTS:
        assert set(graded[a]["failed"]) <= HOSTILE, f"{a}: nbgrader failed on {graded[a]['failed']}"
        s = graded[a]["scores"]["source"]
        assert s["total"] == s["max"] > 0, f"{a}: the solution scored {s['total']}/{s['max']}: {s['cells']}"


@pytest.mark.slow
def test_unmodified_release_gets_zero(graded):
    for a in ASSIGNMENTS:
        s = graded[a]["scores"]["release"]
        assert s["total"] == 0, f"{a}: the unmodified release scored {s['total']}: {s['cells']}"


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_wrong_and_cheating_submissions_lose_the_right_points(graded, variant):
    a, _, must_fail, must_pass = VARIANTS[variant]
    cells = graded[a]["scores"][variant]["cells"]
    source = graded[a]["scores"]["source"]["cells"]
    kept = {f"test_{t}" for t in must_fail if cells[f"test_{t}"] != 0}
    lost = {f"test_{t}" for t in must_pass if cells[f"test_{t}"] != source[f"test_{t}"]}
    run = {**graded[a]["scores"][variant]["run"], "graded again": graded[a]["retried"].get(variant)}
    assert not kept, f"{variant}: still scored on {sorted(kept)}: {cells} ({run})"
    assert not lost, f"{variant}: lost points on {sorted(lost)}, which its change does not touch: {cells} ({run})"


@pytest.mark.slow
def test_generate_feedback_writes_html(graded):
    for student, path in graded["03_self_attention"]["feedback"].items():
        assert path and Path(path).is_file(), f"no feedback for {student}: {path}"
        html = Path(path).read_text()
        score = graded["03_self_attention"]["scores"][student]
        assert "test_sdpa_values" in html and "Visible tests passed." in html
        assert f"{score['total']:g}" in html and f"{score['max']:g}" in html
    html = Path(graded["03_self_attention"]["feedback"]["no_scaling"]).read_text()
    assert "CheckFailure" in html, "the feedback shows the failed check"
    # tfmcheck.feedback recognises the mistake: the sentence that names it and the line of the formula
    import html as _html
    text = _html.unescape(re.sub(r"<[^>]+>", "", html))
    assert "Your scores are not divided by √d_k." in text and "The line involved:" in text, "the feedback names the mistake"


@pytest.mark.slow
def test_report_grading_times(graded, capsys):
    report = {}
    for a in ASSIGNMENTS:
        secs = graded[a]["seconds"]
        assert set(secs) == set(graded[a]["scores"]), f"{a}: timing for {sorted(secs)}"
        secs = {s: t for s, t in secs.items() if s not in HOSTILE}
        report[a] = {"median_s": round(statistics.median(secs.values()), 2), "submissions": len(secs),
                     "autograde_call_s": round(graded[a]["autograde_s"], 1),
                     "cpu_s_per_submission": round(graded[a]["autograde_cpu_s"] / len(graded[a]["seconds"]), 2)}
    out = REPO / "artifacts" / "exercise_grading_times.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    with capsys.disabled():
        print("\nautograde, median wall seconds per submission (one autograde call per assignment, two at a time):")
        for a, r in report.items():
            print(f"  {a:20s} {r['median_s']:6.2f} s  ({r['submissions']} submissions, call {r['autograde_call_s']} s, "
                  f"CPU {r['cpu_s_per_submission']} s per submission)")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--grade":
        print(json.dumps(grade_worker(Path(sys.argv[2]), sys.argv[3], sys.argv[4:])))
    else:
        sys.exit(__doc__)
