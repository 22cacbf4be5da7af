"""Visible tests that no constant passes, and failures that say which function to fix first (issue 17, items 4-5).

1. Answers fitted to the visible example: constants read off the visible inputs (a `math.sqrt(2)` where d happened
   to be 2, a hard-coded number of heads, steps or features, the visible expected tensor returned as a literal, a
   mask built for the visible n only, no output projection where the visible weights were the identity, ...).
   Each must fail nbgrader's Validate, i.e. a visible test of the released notebook, with a message; every correct
   style of grader/fixtures/styles/ must still pass it, and the hidden tests too (checked, for every style, by
   tests/tfmcheck/test_verdicts.py).
2. Fix first: when the function a test checks is right but a learner function it is built on is wrong on the
   test's inputs, the failure says so and names the function to fix first; it never names a dependency that is
   right on those inputs.

Validate runs the released notebook (notebooks/, visible tests only) with the learner's answer cells.  Here its
cells run in this process, in order, the way tests/tfmcheck/test_feedback.py runs them: about a second per notebook.
"""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from test_exercises import _nbg, _read, _released, make_submission  # noqa: E402
from test_feedback import run_cells  # noqa: E402
from fixtures.answers import STYLES  # noqa: E402

from tfmcheck import checking as check  # noqa: E402


def sub(old, new):
    return ("sub", old, new)


def body(grade_id, code):
    return ("body", grade_id, code)


def validate(assignment, edits=(), answers=None):
    """The (test cell, exception) of each failing visible test when the released notebook holds the solution's
    answer cells changed by ``edits`` (tests/book/test_exercises.py's format), or replaced by ``answers``
    ({answer cell id: source})."""
    submission = make_submission(assignment, list(edits))
    learner = {_nbg(c)["grade_id"]: c.source for c in submission.cells if _nbg(c).get("solution")}
    learner.update(answers or {})
    notebook = _read(_released(assignment))
    for cell in notebook.cells:
        if _nbg(cell).get("solution"):
            cell.source = learner[_nbg(cell)["grade_id"]]
    return run_cells(notebook)


def _literal(rows):
    return "torch.tensor(" + repr(rows) + ")"


CAUSAL_3 = [[True, False, False], [True, True, False], [True, True, True]]
SIN_2_4 = ("torch.tensor([[0.0, 1.0, 0.0, 1.0], [math.sin(1.0), math.cos(1.0), math.sin(1 / 100), "
           "math.cos(1 / 100)]])")
OWN_ATTENTION = '''    Q, K, V = x @ W_q, x @ W_k, x @ W_v
    scores = Q @ K.transpose(-2, -1) / math.sqrt({scale})
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ V, weights'''

# name -> (assignment, edits of the solution, the visible test cells (without "test_") one of which must fail)
FITTED = {
    # 01: T, B, d_in and h of the old example were 2, 1, 1 and 1
    "rnn_three_steps": ("01_rnn_limits", [sub("for t in range(x.shape[1]):", "for t in range(3):")],
                        {"rnn_shapes", "rnn_values"}),
    "rnn_two_steps": ("01_rnn_limits", [sub("for t in range(x.shape[1]):", "for t in range(2):")],
                      {"rnn_shapes", "rnn_values"}),
    "rnn_W_hh_transposed": ("01_rnn_limits", [sub("h @ W_hh + b_h", "h @ W_hh.T + b_h")], {"rnn_values"}),
    "grad_norm_l1": ("01_rnn_limits", [sub("grad.pow(2).sum(dim=(0, 2)).sqrt()", "grad.abs().sum(dim=(0, 2))")],
                     {"grad_norm"}),
    "grad_norm_first_sequence": ("01_rnn_limits", [sub("grad.pow(2).sum(dim=(0, 2)).sqrt()",
                                                       "grad[0].pow(2).sum(dim=-1).sqrt()")], {"grad_norm"}),
    # 02: the batch shared its keys and values, d_v was 1
    "step_values_of_first_sequence": ("02_attention", [sub("context = (weights.unsqueeze(-1) * values).sum(dim=1)",
                                                           "context = weights @ values[0]")], {"attention_values"}),
    "step_keys_of_first_sequence": ("02_attention", [sub("(keys @ query.unsqueeze(-1)).squeeze(-1)",
                                                         "query @ keys[0].T")], {"attention_values"}),
    "step_d_v_one": ("02_attention", [sub("context = (weights.unsqueeze(-1) * values).sum(dim=1)",
                                          "context = (weights * values[..., 0]).sum(dim=1, keepdim=True)")],
                     {"attention_values"}),
    "step_scores_shape_hard_coded": ("02_attention", [sub("(keys @ query.unsqueeze(-1)).squeeze(-1)",
                                                          "(keys @ query.unsqueeze(-1)).view(2, 4)")],
                                     {"attention_values"}),
    # 03: d = number of keys = 2 in the old example; the new first example has d = 4
    "sdpa_sqrt_2": ("03_self_attention", [sub("math.sqrt(d_k)", "math.sqrt(2)")], {"sdpa_values"}),
    "sdpa_divides_by_2": ("03_self_attention", [sub("math.sqrt(d_k)", "2.0")], {"sdpa_values"}),
    "sdpa_scaled_by_number_of_keys": ("03_self_attention", [sub("d_k = q.shape[-1]", "d_k = k.shape[-2]")],
                                      {"sdpa_values"}),
    "causal_literal_3": ("03_self_attention", [body("causal", "    return " + _literal(CAUSAL_3))], {"causal_mask"}),
    "causal_size_5": ("03_self_attention", [sub("torch.ones(n, n, dtype=torch.bool).tril()",
                                                "torch.ones(5, 5, dtype=torch.bool).tril()")], {"causal_mask"}),
    "self_attention_scaled_by_d_in": ("03_self_attention", [body("self_attention", OWN_ATTENTION.format(
        scale="x.shape[-1]"))], {"self_attention"}),
    "self_attention_sqrt_2": ("03_self_attention", [body("self_attention", OWN_ATTENTION.format(scale="2"))],
                              {"self_attention"}),
    # 04: identity weights, 2 heads of d_h = 2, d = 4, B = 1, T = 3 in the old example
    "mha_no_output_projection": ("04_multi_head", [sub("merge_heads(weights @ v) @ W_o", "merge_heads(weights @ v)")],
                                 {"mha_values", "mha_mask"}),
    "mha_two_heads": ("04_multi_head", [sub("x @ W_q, n_heads)", "x @ W_q, 2)"), sub("x @ W_k, n_heads)", "x @ W_k, 2)"),
                                        sub("x @ W_v, n_heads)", "x @ W_v, 2)")], {"mha_values", "mha_mask"}),
    "mha_sqrt_2": ("04_multi_head", [sub("/ math.sqrt(q.shape[-1])", "/ math.sqrt(2)")], {"mha_values", "mha_mask"}),
    "mha_divides_by_2": ("04_multi_head", [sub("/ math.sqrt(q.shape[-1])", "/ 2.0")], {"mha_values", "mha_mask"}),
    "split_two_heads": ("04_multi_head", [sub("x.view(b, t, n_heads, d // n_heads)", "x.view(b, t, 2, d // 2)")],
                        {"split_heads"}),
    "split_three_heads": ("04_multi_head", [sub("x.view(b, t, n_heads, d // n_heads)", "x.view(b, t, 3, d // 3)")],
                          {"split_heads"}),
    "merge_old_shape": ("04_multi_head", [sub("x.transpose(1, 2).reshape(b, t, h * d_h)",
                                              "x.transpose(1, 2).reshape(2, 3, 4)")], {"merge_heads"}),
    "merge_first_shape": ("04_multi_head", [sub("x.transpose(1, 2).reshape(b, t, h * d_h)",
                                                "x.transpose(1, 2).reshape(2, 5, 12)")], {"merge_heads"}),
    # 05: n = 2, d = 4 (sinusoidal); k = 1 (relative index); n = d = 2 (relative scores)
    "sinusoidal_d_4": ("05_positions", [sub("dtype=torch.float64) / d)", "dtype=torch.float64) / 4)")], {"sinusoidal"}),
    "sinusoidal_literal": ("05_positions", [body("sinusoidal", "    return " + SIN_2_4)], {"sinusoidal"}),
    "relative_index_k_1": ("05_positions", [sub(".clamp(-k, k) + k", ".clamp(-1, 1) + 1")], {"relative_index"}),
    "relative_scores_sqrt_2": ("05_positions", [sub("/ math.sqrt(d)", "/ math.sqrt(2)")], {"relative_scores"}),
    "relative_scores_n_for_d": ("05_positions", [sub("d = q.shape[-1]", "d = q.shape[-2]")], {"relative_scores"}),
    # 06: max_len 4 (padding), one causal size (decoder mask), d = 3 (layer norm), one gamma and beta (block)
    "padding_max_len_4": ("06_encoder_decoder", [sub("torch.arange(max_len)", "torch.arange(4)")], {"padding_mask"}),
    "padding_literal": ("06_encoder_decoder", [body("padding_mask", "    return " + _literal(
        [[True, True, True, False], [True, False, False, False], [True, True, True, True]]))], {"padding_mask"}),
    "decoder_mask_size_3": ("06_encoder_decoder", [sub("torch.ones(max_len, max_len, dtype=torch.bool)",
                                                       "torch.ones(3, 3, dtype=torch.bool)")], {"decoder_mask"}),
    "layer_norm_divides_by_3": ("06_encoder_decoder", [sub("((x - mean) ** 2).mean(dim=-1, keepdim=True)",
                                                           "((x - mean) ** 2).sum(dim=-1, keepdim=True) / 3")],
                                {"layer_norm"}),
    "layer_norm_eps_fixed": ("06_encoder_decoder", [sub("torch.sqrt(var + eps)", "torch.sqrt(var + 1e-5)")],
                             {"layer_norm"}),
    "decoder_block_one_norm_parameters": ("06_encoder_decoder", [sub("feed_forward(h), gamma2, beta2, eps)",
                                                                     "feed_forward(h), gamma1, beta1, eps)")],
                                          {"decoder_block"}),
    "decoder_block_attention_without_mask": ("06_encoder_decoder", [sub("self_attn(x, mask)", "self_attn(x, None)")],
                                             {"decoder_block"}),
    # 07: global position [0] on 4 positions; n_random 2; d = d_v = 2 and Tk = 3 (blockwise)
    "window_3": ("07_efficiency", [sub("<= window", "<= 3")], {"sliding_window"}),
    "global_first_position": ("07_efficiency", [sub("torch.as_tensor(global_idx, dtype=torch.long)", "torch.tensor([0])")],
                              {"global_mask"}),
    "global_literal": ("07_efficiency", [body("global_mask", "    return " + _literal(
        [[True] * 4] + [[True, False, False, False]] * 3))], {"global_mask"}),
    "random_two_per_row": ("07_efficiency", [sub("order[:, :n_random]", "order[:, :2]")], {"random_mask"}),
    "blockwise_sqrt_2": ("07_efficiency", [sub("1.0 / math.sqrt(q.shape[-1])", "1.0 / math.sqrt(2)")],
                         {"blockwise_values"}),
    "blockwise_output_like_q": ("07_efficiency", [sub("torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)",
                                                      "torch.zeros_like(q)")], {"blockwise_values"}),
    # 08: one (N, D), the runs of one known law, one exact power law, the notes' constants
    "chinchilla_literal": ("08_scaling_laws", [body("chinchilla_loss", "    return 1.9366454705587173")],
                           {"chinchilla_loss"}),
    "chinchilla_ignores_params": ("08_scaling_laws", [sub("p = NOTES_PARAMS if params is None else params\n    return p",
                                                          "p = NOTES_PARAMS\n    return p")], {"chinchilla_loss"}),
    "fit_chinchilla_literal": ("08_scaling_laws", [body("fit_chinchilla",
                                                        '    return {"E": 1.8, "A": 400.0, "B": 1200.0, "alpha": 0.35, "beta": 0.3}')],
                               {"fit_chinchilla"}),
    "fit_literal": ("08_scaling_laws", [body("fit_power_law", "    return 3.0, -0.5")], {"fit_power_law"}),
    "fit_constant_exponent": ("08_scaling_laws", [sub("return k.item(), c.item()", "return k.item(), -0.5")],
                              {"fit_power_law"}),
    # 09: the first examples have d = 5 (RMSNorm), d = 4 (RoPE), 2 query heads per kv head, d_h = 4
    "rms_norm_d_5": ("09_modern_gpt", [sub("(x * x).mean(dim=-1, keepdim=True)", "(x * x).sum(dim=-1, keepdim=True) / 5")],
                     {"rms_norm"}),
    "rms_norm_eps_fixed": ("09_modern_gpt", [sub("keepdim=True) + eps)", "keepdim=True) + 1e-6)")], {"rms_norm"}),
    "rope_d_4": ("09_modern_gpt", [sub("dtype=torch.float64) / d)", "dtype=torch.float64) / 4)")], {"rope_values"}),
    "rope_positions_from_0": ("09_modern_gpt", [sub("angle = positions.to(torch.float64)[:, None]",
                                                    "angle = torch.arange(x.shape[-2], dtype=torch.float64)[:, None]")],
                              {"rope_values"}),
    "gqa_two_query_heads_per_kv_head": ("09_modern_gpt", [sub("group = n_heads // n_kv_heads", "group = 2")],
                                        {"gqa_heads"}),
    "gqa_head_size_4": ("09_modern_gpt", [sub("d_h = W_q.shape[1] // n_heads", "d_h = 4")], {"gqa_heads"}),
}


def test_every_assignment_has_at_least_two_fitted_answers():
    counts = {a: 0 for a in STYLES}
    for assignment, _edits, _targets in FITTED.values():
        counts[assignment] = counts.get(assignment, 0) + 1
    assert all(n >= 2 for n in counts.values()), counts


@pytest.mark.parametrize("name", sorted(FITTED))
def test_a_fitted_answer_fails_validate_with_a_message(name):
    assignment, edits, targets = FITTED[name]
    failures = validate(assignment, edits)
    failed = {cell.removeprefix("test_"): error for cell, error in failures}
    assert failed, f"{name} passes every visible test of {assignment}"
    hit = sorted(targets & set(failed))
    assert hit, f"{name} fails {sorted(failed)}, not the test of what it gets wrong ({sorted(targets)})"
    message = str(failed[hit[0]]).strip()
    assert message, f"{name}: {type(failed[hit[0]]).__name__} without a message"


# Every correct style passes the visible tests (Validate) and the hidden ones: tests/tfmcheck/test_verdicts.py runs each
# style of grader/fixtures/styles there and as graded, and fails on any test cell a correct style does not pass.


@pytest.mark.parametrize("assignment", sorted(STYLES))
def test_the_solution_passes_validate(assignment):
    assert validate(assignment) == []


# ---------------------------------------------------------------------------------------------------------
# Fix first
# ---------------------------------------------------------------------------------------------------------
SDPA_NO_SCALING = sub("q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k.transpose(-2, -1)")
SELF_Q_K_SWAPPED = sub("scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)",
                       "scaled_dot_product_attention(x @ W_k, x @ W_q, x @ W_v, mask)")
LN_UNBIASED = sub("((x - mean) ** 2).mean(dim=-1, keepdim=True)", "x.var(dim=-1, keepdim=True, unbiased=True)")
SPLIT_NO_TRANSPOSE = sub("x.view(b, t, n_heads, d // n_heads).transpose(1, 2)", "x.reshape(b, n_heads, t, d // n_heads)")
PAD_OFF_BY_ONE = sub("torch.arange(max_len)[None, :] < lengths[:, None]", "torch.arange(max_len)[None, :] <= lengths[:, None]")
RNN_NO_BIAS = sub("h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)", "h = torch.tanh(x[:, t] @ W_xh + h @ W_hh)")

# name -> (assignment, edits, the dependent test cell, the functions it must name to fix first ([]: none), and what
#          the test can tell about the dependent function: "only" (it is right: the dependency is the whole cause),
#          "also" (it is wrong too) or "unknown" (the test cannot rebuild it on the learner's dependency); "passes": the
#          dependent function is right and scores on its own, tested on a trusted stand-in for the wrong dependency
#          (grader/tfmcheck/standins.py), while the dependency's own tests fail)
FIX_FIRST = {
    "right self_attention on a wrong sdpa": ("03_self_attention", [SDPA_NO_SCALING], "test_self_attention",
                                              [], "passes"),
    "wrong self_attention on a right sdpa": ("03_self_attention", [SELF_Q_K_SWAPPED], "test_self_attention", [], None),
    "wrong self_attention on a wrong sdpa": ("03_self_attention", [SDPA_NO_SCALING, SELF_Q_K_SWAPPED],
                                             "test_self_attention", ["scaled_dot_product_attention"], "also"),
    "own self_attention, not built on sdpa, and wrong": ("03_self_attention", [body("self_attention", OWN_ATTENTION.format(
        scale="x.shape[-1]"))], "test_self_attention", [], None),
    "right decoder_block on a wrong layer_norm": ("06_encoder_decoder", [LN_UNBIASED], "test_decoder_block",
                                                  [], "passes"),
    "wrong decoder_block on a right layer_norm": ("06_encoder_decoder", [sub("h + feed_forward(h)", "h + feed_forward(x)")],
                                                  "test_decoder_block", [], None),
    "right decoder_mask on a wrong padding_mask": ("06_encoder_decoder", [PAD_OFF_BY_ONE], "test_decoder_mask",
                                                   [], "passes"),
    "wrong decoder_mask on a right padding_mask": ("06_encoder_decoder", [sub("dtype=torch.bool).tril()",
                                                                              "dtype=torch.bool).tril(-1)")],
                                                   "test_decoder_mask", [], None),
    "right multi_head_attention on a wrong split_heads": ("04_multi_head", [SPLIT_NO_TRANSPOSE], "test_mha_values",
                                                          [], "passes"),
    "right multi_head_attention on a wrong merge_heads": ("04_multi_head", [sub("x.transpose(1, 2).reshape(b, t, h * d_h)",
                                                                                "x.reshape(b, t, h * d_h)")],
                                                           "test_mha_values", [], "passes"),
    "wrong multi_head_attention on right helpers": ("04_multi_head", [sub("/ math.sqrt(q.shape[-1])", "/ 2.0")],
                                                    "test_mha_values", [], None),
    "grad_norm_by_distance on a wrong rnn_forward": ("01_rnn_limits", [RNN_NO_BIAS], "test_grad_norm",
                                                     [], "passes"),
    "wrong grad_norm_by_distance on a right rnn_forward": ("01_rnn_limits", [sub("grad.pow(2).sum(dim=(0, 2)).sqrt()",
                                                                                 "grad.abs().sum(dim=(0, 2))")],
                                                           "test_grad_norm", [], None),
}


FUNCTION = {"test_self_attention": "self_attention", "test_decoder_block": "decoder_block",
            "test_decoder_mask": "decoder_mask", "test_mha_values": "multi_head_attention",
            "test_grad_norm": "grad_norm_by_distance"}


@pytest.mark.parametrize("case", sorted(FIX_FIRST))
def test_a_failure_names_the_function_to_fix_first_only_when_it_is_wrong(case):
    assignment, edits, cell, names, cause = FIX_FIRST[case]
    failures = dict(validate(assignment, edits))
    if cause == "passes":   # a right function scores on its own: tested on a trusted stand-in for the wrong one
        assert cell not in failures and failures, f"{case}: {cell} fails ({failures.get(cell)})"
        return
    assert cell in failures, f"{case}: {cell} passes ({sorted(failures)} fail)"
    error = failures[cell]
    assert isinstance(error, check.CheckFailure), f"{case}: {type(error).__name__}: {error}"
    first = str(error).splitlines()[0]
    if not names:
        assert getattr(error, "fix_first", None) is None and "first" not in first, f"{case}: {error}"
        return
    assert error.fix_first == names, f"{case}: {error}"
    for name in names:
        assert f"fix {name} first" in first, first
    if cause == "only":   # the dependent function is right: no mistake of its own is named
        assert "only because your" in first and error.mistake is None, first
    elif cause == "also":
        assert "too" in first and f"then {FUNCTION[cell]}" in first, first
    else:                 # nothing is said about the dependent function itself
        assert "too" not in first and "because" not in first and "then" not in first, first


def test_a_right_function_of_its_own_passes_whatever_the_dependency():
    """A self_attention written without scaled_dot_product_attention passes even when that function is wrong."""
    failures = dict(validate("03_self_attention", [SDPA_NO_SCALING, body("self_attention", OWN_ATTENTION.format(
        scale="W_q.shape[-1]"))]))
    assert "test_sdpa_values" in failures and "test_self_attention" not in failures, sorted(failures)
