"""Feedback that names the mistake (issue 11): every mistake of the catalogue (grader/tfmcheck/feedback/) is written into the
learner's notebook as a wrong answer, the notebook's test cells run (visible and hidden, as in solutions/), and the
first failure that names a mistake must name that one, with its one-sentence diagnosis and the line of the formula
involved (a failure before it may name nothing: two mistakes can give the same result on a visible check's inputs).
A tester's own wrong answers (FINDINGS) are diagnosed as the mistake they have, or not at all, never as another.

Also: the solutions pass; a wrong answer the catalogue does not know gets the plain numbers and no guessed cause;
a diagnosis never needs the learner's function (it only reads the recorded result); and in a real IPython kernel
the traceback of a failure shows the test cell's line, not tfmlib's internals.

The notebooks run in this process (exec of the cells in order, the way `make check` runs them in a kernel): about
a second per wrong answer.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from test_exercises import make_submission, _nbg  # noqa: E402

from tfmcheck import checking as check  # noqa: E402
from tfmcheck import feedback  # noqa: E402
from tfmcheck.standins import DEPENDS  # noqa: E402

ASSIGNMENT = {
    "rnn_forward": "01_rnn_limits", "grad_norm_by_distance": "01_rnn_limits", "attention_step": "02_attention",
    "scaled_dot_product_attention": "03_self_attention", "causal_mask": "03_self_attention",
    "self_attention": "03_self_attention", "split_heads": "04_multi_head", "merge_heads": "04_multi_head",
    "multi_head_attention": "04_multi_head", "sinusoidal_positions": "05_positions",
    "relative_position_index": "05_positions", "relative_attention_scores": "05_positions",
    "padding_mask": "06_encoder_decoder", "decoder_mask": "06_encoder_decoder", "layer_norm": "06_encoder_decoder",
    "decoder_block": "06_encoder_decoder", "sliding_window_mask": "07_efficiency", "global_mask": "07_efficiency",
    "blockwise_attention": "07_efficiency", "chinchilla_loss": "08_scaling_laws", "fit_chinchilla": "08_scaling_laws",
    "fit_power_law": "08_scaling_laws", "rms_norm": "09_modern_gpt", "swiglu": "09_modern_gpt",
    "apply_rope": "09_modern_gpt", "grouped_query_attention": "09_modern_gpt",
}


def sub(old, new):
    return ("sub", old, new)


def body(grade_id, code):
    return ("body", grade_id, code)


STEP_SIMPLE = '''    scores = (keys @ query.unsqueeze(-1)).squeeze(-1)
    if mask is not None:
        scores = scores.masked_fill({fill}, {value})
    weights = torch.softmax(scores, dim=-1)
    return (weights.unsqueeze(-1) * values).sum(dim=1), weights'''
SDPA_SIMPLE = '''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill({fill}, {value})
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights'''
MHA_OWN = '''    b, t, d = x.shape
    def split(y):
        return {split}
    q, k, v = split(x @ W_q), split(x @ W_k), split(x @ W_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v
    return {merge} @ W_o'''
ROPE_HALVES = """    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.to(torch.float64)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)"""
GQA_REPEATED_CACHE = """    b, t, _ = x.shape
    d_h = W_q.shape[1] // n_heads
    group = n_heads // n_kv_heads
    start = 0 if cache is None else cache[0].shape[-2]
    positions = torch.arange(start, start + t)
    q = apply_rope((x @ W_q).view(b, t, n_heads, d_h).transpose(1, 2), positions)
    k = apply_rope((x @ W_k).view(b, t, n_kv_heads, d_h).transpose(1, 2), positions).repeat_interleave(group, dim=1)
    v = (x @ W_v).view(b, t, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(group, dim=1)
    if cache is not None:
        k = torch.cat([cache[0], k], dim=-2)
        v = torch.cat([cache[1], v], dim=-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    allowed = torch.arange(k.shape[-2])[None, :] <= positions[:, None]
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(b, t, n_heads * d_h) @ W_o, (k, v)"""
GQA_CAT = """    if cache is not None:
        k = torch.cat([cache[0], k], dim=-2)
        v = torch.cat([cache[1], v], dim=-2)
"""
SIN_SWAPPED = '''    p = torch.arange(n, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(p * freq)
    pe[:, 1::2] = torch.sin(p * freq)
    return pe.float()'''

# (function, mistake) -> the edits of the solution that make that mistake (tests/book/test_exercises.py's format)
WRONG = {
    ("rnn_forward", "ignores_h0"): [sub("    h = h0\n", "    h = torch.zeros_like(h0)\n")],
    ("rnn_forward", "no_tanh"): [sub("h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)", "h = x[:, t] @ W_xh + h @ W_hh + b_h")],
    ("rnn_forward", "no_bias"): [sub("h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)", "h = torch.tanh(x[:, t] @ W_xh + h @ W_hh)")],
    ("rnn_forward", "W_hh_transposed"): [sub("h @ W_hh + b_h", "h @ W_hh.T + b_h")],
    ("rnn_forward", "states_shifted"): [sub("        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)\n        states.append(h)\n",
                                            "        states.append(h)\n        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)\n")],
    ("grad_norm_by_distance", "no_sqrt"): [sub("grad.pow(2).sum(dim=(0, 2)).sqrt()", "grad.pow(2).sum(dim=(0, 2))")],
    ("grad_norm_by_distance", "l1_norm"): [sub("grad.pow(2).sum(dim=(0, 2)).sqrt()", "grad.abs().sum(dim=(0, 2))")],
    ("grad_norm_by_distance", "gradient_of_all_states"): [sub("torch.autograd.grad(h_T.sum(), x)",
                                                              "torch.autograd.grad(rnn_forward(x, h0, W_xh, W_hh, b_h)[0].sum(), x)")],
    ("grad_norm_by_distance", "reversed"): [sub("grad.pow(2).sum(dim=(0, 2)).sqrt()", "grad.pow(2).sum(dim=(0, 2)).sqrt().flip(0)")],
    ("attention_step", "scaled"): [sub("(keys @ query.unsqueeze(-1)).squeeze(-1)",
                                       "(keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(query.shape[-1])")],
    ("attention_step", "softmax_over_batch"): [sub("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=0)")],
    ("attention_step", "mask_inverted"): [body("attention_step", STEP_SIMPLE.format(fill="mask", value='float("-inf")'))],
    ("attention_step", "mask_ignored"): [body("attention_step", STEP_SIMPLE.format(fill="mask", value="0.0").replace(
        "    if mask is not None:\n        scores = scores.masked_fill(mask, 0.0)\n", ""))],
    ("attention_step", "mask_after_softmax"): [sub('        scores = scores.masked_fill(~mask, float("-inf"))\n', "")],
    ("attention_step", "masked_row_nan"): [body("attention_step", STEP_SIMPLE.format(fill="~mask", value='float("-inf")'))],
    ("attention_step", "masked_row_uniform"): [body("attention_step", STEP_SIMPLE.format(fill="~mask", value="-1e9"))],
    ("scaled_dot_product_attention", "no_scaling"): [sub("q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k.transpose(-2, -1)")],
    ("scaled_dot_product_attention", "scaled_by_d"): [sub("/ math.sqrt(d_k)", "/ d_k")],
    ("scaled_dot_product_attention", "softmax_over_queries"): [sub("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
    ("scaled_dot_product_attention", "mask_inverted"): [body("sdpa", SDPA_SIMPLE.format(fill="mask", value='float("-inf")'))],
    ("scaled_dot_product_attention", "mask_ignored"): [body("sdpa", SDPA_SIMPLE.format(fill="mask", value="0").replace(
        "    if mask is not None:\n        scores = scores.masked_fill(mask, 0)\n", ""))],
    ("scaled_dot_product_attention", "mask_after_softmax"): [sub('        scores = scores.masked_fill(~mask, float("-inf"))\n', "")],
    ("scaled_dot_product_attention", "masked_row_nan"): [body("sdpa", SDPA_SIMPLE.format(fill="~mask", value='float("-inf")'))],
    ("scaled_dot_product_attention", "masked_row_uniform"): [body("sdpa", SDPA_SIMPLE.format(fill="~mask", value="-1e9"))],
    ("causal_mask", "diagonal_excluded"): [sub("dtype=torch.bool).tril()", "dtype=torch.bool).tril(-1)")],
    ("causal_mask", "upper_triangle"): [sub("dtype=torch.bool).tril()", "dtype=torch.bool).triu()")],
    ("causal_mask", "not_bool"): [sub("torch.ones(n, n, dtype=torch.bool).tril()", "torch.ones(n, n).tril()")],
    ("self_attention", "weights_transposed"): [sub("scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)",
                                                   "scaled_dot_product_attention(x @ W_q.T, x @ W_k.T, x @ W_v.T, mask)")],
    ("self_attention", "q_k_swapped"): [sub("scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)",
                                            "scaled_dot_product_attention(x @ W_k, x @ W_q, x @ W_v, mask)")],
    ("self_attention", "values_from_W_k"): [sub("scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)",
                                                "scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_k, mask)")],
    ("self_attention", "mask_not_passed"): [sub("scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)",
                                                "scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)")],
    ("self_attention", "no_scaling"): [body("self_attention", '''    Q, K, V = x @ W_q, x @ W_k, x @ W_v
    scores = Q @ K.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ V, weights''')],
    ("split_heads", "interleaved"): [sub("x.view(b, t, n_heads, d // n_heads).transpose(1, 2)",
                                         "x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)")],
    ("split_heads", "no_transpose"): [sub("x.view(b, t, n_heads, d // n_heads).transpose(1, 2)", "x.view(b, t, n_heads, d // n_heads)")],
    ("split_heads", "reshape_without_transpose"): [sub("x.view(b, t, n_heads, d // n_heads).transpose(1, 2)",
                                                       "x.reshape(b, n_heads, t, d // n_heads)")],
    ("merge_heads", "no_transpose"): [sub("x.transpose(1, 2).reshape(b, t, h * d_h)", "x.reshape(b, t, h * d_h)")],
    ("merge_heads", "interleaved"): [sub("x.transpose(1, 2).reshape(b, t, h * d_h)", "x.permute(0, 2, 3, 1).reshape(b, t, h * d_h)")],
    ("multi_head_attention", "scaled_by_d_model"): [sub("/ math.sqrt(q.shape[-1])", "/ math.sqrt(x.shape[-1])")],
    ("multi_head_attention", "no_scaling"): [sub(" / math.sqrt(q.shape[-1])", "")],
    ("multi_head_attention", "interleaved_split"): [body("multi_head_attention", MHA_OWN.format(
        split="y.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)", merge="merge_heads(o)"))],
    ("multi_head_attention", "merge_without_transpose"): [body("multi_head_attention", MHA_OWN.format(
        split="y.view(b, t, n_heads, d // n_heads).transpose(1, 2)", merge="o.reshape(b, t, d)"))],
    ("multi_head_attention", "no_output_projection"): [sub("merge_heads(weights @ v) @ W_o", "merge_heads(weights @ v)")],
    ("multi_head_attention", "weights_transposed"): [sub("x @ W_q", "x @ W_q.T"), sub("x @ W_k", "x @ W_k.T"),
                                                     sub("x @ W_v", "x @ W_v.T"), sub("@ W_o\n", "@ W_o.T\n")],
    ("multi_head_attention", "softmax_over_queries"): [sub("weights = torch.softmax(scores, dim=-1)\n    return merge_heads",
                                                           "weights = torch.softmax(scores, dim=-2)\n    return merge_heads")],
    ("multi_head_attention", "mask_inverted"): [sub('scores.masked_fill(~mask, float("-inf"))\n    weights = torch.softmax(scores, dim=-1)\n    return merge',
                                                    'scores.masked_fill(mask, float("-inf"))\n    weights = torch.softmax(scores, dim=-1)\n    return merge')],
    ("multi_head_attention", "mask_ignored"): [sub('scores = scores.masked_fill(~mask, float("-inf"))\n    weights = torch.softmax(scores, dim=-1)\n    return merge',
                                                   'pass\n    weights = torch.softmax(scores, dim=-1)\n    return merge')],
    ("sinusoidal_positions", "sin_cos_swapped"): [body("sinusoidal", SIN_SWAPPED)],
    ("sinusoidal_positions", "halves"): [sub("pe[:, 0::2] = torch.sin(p * freq)", "pe[:, :d // 2] = torch.sin(p * freq)"),
                                         sub("pe[:, 1::2] = torch.cos(p * freq)", "pe[:, d // 2:] = torch.cos(p * freq)")],
    ("sinusoidal_positions", "exponent_feature_index"): [sub("10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)",
                                                             "10000.0 ** (-2 * torch.arange(0, d, 2, dtype=torch.float64) / d)")],
    ("sinusoidal_positions", "multiplied"): [sub("torch.sin(p * freq)", "torch.sin(p / freq)"), sub("torch.cos(p * freq)", "torch.cos(p / freq)")],
    ("sinusoidal_positions", "float64"): [sub("return pe.float()", "return pe")],
    ("relative_position_index", "reversed"): [sub("(pos[None, :] - pos[:, None])", "(pos[:, None] - pos[None, :])")],
    ("relative_position_index", "no_clip"): [sub(".clamp(-k, k) + k", " + k")],
    ("relative_position_index", "no_offset"): [sub(".clamp(-k, k) + k", ".clamp(-k, k)")],
    ("relative_position_index", "not_long"): [sub(".clamp(-k, k) + k", ".clamp(-k, k).float() + k")],
    ("relative_attention_scores", "no_scaling"): [sub("return (content + position) / math.sqrt(d)", "return content + position")],
    ("relative_attention_scores", "scale_content_only"): [sub("return (content + position) / math.sqrt(d)",
                                                              "return content / math.sqrt(d) + position")],
    ("relative_attention_scores", "no_position_term"): [sub("return (content + position) / math.sqrt(d)", "return content / math.sqrt(d)")],
    ("relative_attention_scores", "a_k_transposed"): [sub("(q.unsqueeze(-2) * a_k)", "(q.unsqueeze(-2) * a_k.transpose(0, 1))")],
    ("relative_attention_scores", "position_uses_key"): [sub("(q.unsqueeze(-2) * a_k)", "(k.unsqueeze(-3) * a_k)")],
    ("padding_mask", "inverted"): [sub("torch.arange(max_len)[None, :] < lengths[:, None]", "torch.arange(max_len)[None, :] >= lengths[:, None]")],
    ("padding_mask", "off_by_one"): [sub("torch.arange(max_len)[None, :] < lengths[:, None]", "torch.arange(max_len)[None, :] <= lengths[:, None]")],
    ("padding_mask", "ignores_lengths"): [sub("torch.arange(max_len)[None, :] < lengths[:, None]",
                                              "torch.ones(len(lengths), max_len, dtype=torch.bool)")],
    ("decoder_mask", "padding_on_queries"): [sub("padding_mask(lengths, max_len)[:, None, None, :]", "padding_mask(lengths, max_len)[:, None, :, None]")],
    ("decoder_mask", "diagonal_excluded"): [sub("dtype=torch.bool).tril()", "dtype=torch.bool).tril(-1)")],
    ("decoder_mask", "ignores_lengths"): [sub("return padding_mask(lengths, max_len)[:, None, None, :] & causal",
                                              "return causal.repeat(len(lengths), 1, 1, 1)")],
    ("decoder_mask", "not_causal"): [sub("return padding_mask(lengths, max_len)[:, None, None, :] & causal",
                                         "return padding_mask(lengths, max_len)[:, None, None, :].expand(-1, 1, max_len, -1)")],
    ("decoder_mask", "or_instead_of_and"): [sub("[:, None, None, :] & causal", "[:, None, None, :] | causal")],
    ("decoder_mask", "no_head_dimension"): [sub("[:, None, None, :] & causal", "[:, None, :] & causal")],
    ("layer_norm", "unbiased_variance"): [sub("((x - mean) ** 2).mean(dim=-1, keepdim=True)", "x.var(dim=-1, keepdim=True, unbiased=True)")],
    ("layer_norm", "eps_outside_sqrt"): [sub("torch.sqrt(var + eps)", "(torch.sqrt(var) + eps)")],
    ("layer_norm", "no_sqrt"): [sub("torch.sqrt(var + eps)", "(var + eps)")],
    ("layer_norm", "gamma_beta_swapped"): [sub("return gamma * (x - mean) / torch.sqrt(var + eps) + beta",
                                               "return beta * (x - mean) / torch.sqrt(var + eps) + gamma")],
    ("layer_norm", "wrong_dimension"): [sub("dim=-1, keepdim=True)", "dim=0, keepdim=True)")],
    ("decoder_block", "pre_norm"): [body("decoder_block", '''    h = x + self_attn(layer_norm(x, gamma1, beta1, eps), mask)
    return h + feed_forward(layer_norm(h, gamma2, beta2, eps))''')],
    ("decoder_block", "no_residual"): [body("decoder_block", '''    h = layer_norm(self_attn(x, mask), gamma1, beta1, eps)
    return layer_norm(feed_forward(h), gamma2, beta2, eps)''')],
    ("decoder_block", "ffn_on_x"): [sub("h + feed_forward(h)", "h + feed_forward(x)")],
    ("decoder_block", "same_norm_twice"): [sub("feed_forward(h), gamma2, beta2, eps)", "feed_forward(h), gamma1, beta1, eps)")],
    ("decoder_block", "missing_second_norm"): [sub("return layer_norm(h + feed_forward(h), gamma2, beta2, eps)", "return h + feed_forward(h)")],
    ("sliding_window_mask", "strict"): [sub("<= window", "< window")],
    ("sliding_window_mask", "one_sided"): [sub("return (pos[:, None] - pos[None, :]).abs() <= window",
                                               "diff = pos[:, None] - pos[None, :]\n    return (diff >= 0) & (diff <= window)")],
    ("sliding_window_mask", "no_abs"): [sub(".abs() <= window", " <= window")],
    ("sliding_window_mask", "window_doubled"): [sub("<= window", "<= 2 * window")],
    ("global_mask", "rows_only"): [sub("    mask[:, idx] = True\n", "")],
    ("global_mask", "columns_only"): [sub("    mask[idx, :] = True\n", "")],
    ("global_mask", "diagonal_added"): [sub("    return mask\n", "    return mask | torch.eye(n, dtype=torch.bool)\n")],
    ("blockwise_attention", "no_rescale"): [sub("l = l * correction + ", "l = l + "), sub("acc = acc * correction + ", "acc = acc + ")],
    ("blockwise_attention", "rescale_sum_only"): [sub("acc = acc * correction + ", "acc = acc + ")],
    ("blockwise_attention", "rescale_output_only"): [sub("l = l * correction + ", "l = l + ")],
    ("blockwise_attention", "no_final_division"): [sub("return acc / l", "return acc")],
    ("blockwise_attention", "no_scaling"): [sub(".transpose(-2, -1) * scale", ".transpose(-2, -1)")],
    ("chinchilla_loss", "exponents_swapped"): [sub('p["A"] / N ** p["alpha"] + p["B"] / D ** p["beta"]',
                                                   'p["A"] / N ** p["beta"] + p["B"] / D ** p["alpha"]')],
    ("chinchilla_loss", "no_E"): [sub('return p["E"] + ', "return ")],
    ("chinchilla_loss", "multiplied"): [sub('p["A"] / N ** p["alpha"] + p["B"] / D ** p["beta"]',
                                            'p["A"] * N ** p["alpha"] + p["B"] * D ** p["beta"]')],
    ("chinchilla_loss", "perplexity"): [sub('return p["E"] + p["A"] / N ** p["alpha"] + p["B"] / D ** p["beta"]',
                                            'return math.exp(p["E"] + p["A"] / N ** p["alpha"] + p["B"] / D ** p["beta"])')],
    ("chinchilla_loss", "ignores_params"): [sub("    p = NOTES_PARAMS if params is None else params\n    return p",
                                                "    p = NOTES_PARAMS\n    return p")],
    ("fit_chinchilla", "squared_residuals"): [sub("return torch.where(r <= delta, 0.5 * r ** 2, delta * (r - 0.5 * delta)).sum()",
                                                  "return (r ** 2).sum()")],
    ("fit_chinchilla", "residuals_not_log"): [sub("r = (log_hat - log_l).abs()", "r = (torch.exp(log_hat) - L).abs()")],
    ("fit_chinchilla", "first_start_only"): [sub("        if value < best_value:\n", "        if best is None:\n")],
    ("fit_chinchilla", "last_start_not_best"): [sub("        if value < best_value:\n", "        if True:\n")],
    ("fit_chinchilla", "returns_logs"): [sub('return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}',
                                             'return {"E": e, "A": a, "B": b, "alpha": alpha, "beta": beta}')],
    ("fit_power_law", "returns_log_k"): [sub("k = torch.exp(w.mean() - c * u.mean())", "k = w.mean() - c * u.mean()")],
    ("fit_power_law", "returns_c_k"): [sub("return k.item(), c.item()", "return c.item(), k.item()")],
    ("fit_power_law", "log10_then_exp"): [sub("torch.log(torch.as_tensor", "torch.log10(torch.as_tensor")],
    ("fit_power_law", "regressed_x_on_y"): [sub("c = ((u - u.mean()) * (w - w.mean())).sum() / ((u - u.mean()) ** 2).sum()\n    k = torch.exp(w.mean() - c * u.mean())",
                                                "c = ((u - u.mean()) * (w - w.mean())).sum() / ((w - w.mean()) ** 2).sum()\n    k = torch.exp(u.mean() - c * w.mean())")],

    ("rnn_forward", "H_includes_h0"): [sub("    states = []\n", "    states = [h0]\n")],
    ("rnn_forward", "returns_first_state"): [sub("return torch.stack(states, dim=1), h", "return torch.stack(states, dim=1), states[0]")],
    ("grad_norm_by_distance", "sum_of_norms"): [sub("grad.pow(2).sum(dim=(0, 2)).sqrt()", "grad.norm(dim=2).sum(dim=0)")],
    ("scaled_dot_product_attention", "scaled_by_number_of_keys"): [sub("d_k = q.shape[-1]", "d_k = k.shape[-2]")],
    ("scaled_dot_product_attention", "returns_weights_first"): [sub("return weights @ v, weights", "return weights, weights @ v")],
    ("causal_mask", "additive_mask"): [sub("return torch.ones(n, n, dtype=torch.bool).tril()",
                                           "return torch.zeros(n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float('-inf'))")],
    ("multi_head_attention", "single_head"): [sub("q = split_heads(x @ W_q, n_heads)", "q = (x @ W_q)[:, None]"),
                                              sub("k = split_heads(x @ W_k, n_heads)", "k = (x @ W_k)[:, None]"),
                                              sub("v = split_heads(x @ W_v, n_heads)", "v = (x @ W_v)[:, None]")],
    ("sinusoidal_positions", "exponent_halved"): [sub("10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)",
                                                      "10000.0 ** (-torch.arange(0, d // 2, dtype=torch.float64) / d)")],
    ("padding_mask", "not_bool"): [sub("return torch.arange(max_len)[None, :] < lengths[:, None]",
                                       "return (torch.arange(max_len)[None, :] < lengths[:, None]).float()")],
    ("layer_norm", "no_eps"): [sub("torch.sqrt(var + eps)", "torch.sqrt(var)")],
    ("layer_norm", "no_gamma_beta"): [sub("return gamma * (x - mean) / torch.sqrt(var + eps) + beta",
                                          "return (x - mean) / torch.sqrt(var + eps)")],
    ("global_mask", "intersection_only"): [sub("    mask[idx, :] = True\n    mask[:, idx] = True\n",
                                               "    mask[idx[:, None], idx[None, :]] = True\n")],
    ("rms_norm", "subtracts_mean"): [body("rms_norm", "    y = x - x.mean(dim=-1, keepdim=True)\n"
                                                  "    return y / torch.sqrt((y * y).mean(dim=-1, keepdim=True) + eps) * weight")],
    ("rms_norm", "eps_outside_sqrt"): [sub("torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)",
                                           "(torch.sqrt((x * x).mean(dim=-1, keepdim=True)) + eps)")],
    ("rms_norm", "no_sqrt"): [sub("torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)", "((x * x).mean(dim=-1, keepdim=True) + eps)")],
    ("rms_norm", "sum_not_mean"): [sub("(x * x).mean(dim=-1, keepdim=True)", "(x * x).sum(dim=-1, keepdim=True)")],
    ("rms_norm", "no_weight"): [sub(" + eps) * weight", " + eps)")],
    ("swiglu", "silu_on_up"): [body("swiglu", "    up = x @ W_up\n    return (up * torch.sigmoid(up) * (x @ W_gate)) @ W_down")],
    ("swiglu", "sigmoid_gate"): [sub("(gate * torch.sigmoid(gate) * (x @ W_up))", "(torch.sigmoid(gate) * (x @ W_up))")],
    ("swiglu", "silu_after_product"): [body("swiglu", "    h = (x @ W_gate) * (x @ W_up)\n    return (h * torch.sigmoid(h)) @ W_down")],
    ("apply_rope", "halves"): [body("apply_rope", ROPE_HALVES)],
    ("apply_rope", "rotation_reversed"): [sub("torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos)",
                                              "torch.stack((x1 * cos + x2 * sin, -x1 * sin + x2 * cos)")],
    ("apply_rope", "exponent_pair_index"): [sub("(-torch.arange(0, d, 2, dtype=torch.float64) / d)",
                                                "(-torch.arange(0, d // 2, dtype=torch.float64) / d)")],
    ("apply_rope", "positions_ignored"): [sub("angle = positions.to(torch.float64)[:, None]",
                                              "angle = torch.arange(x.shape[-2], dtype=torch.float64)[:, None]")],
    ("apply_rope", "inverse_frequency"): [sub("base ** (-torch.arange", "base ** (torch.arange")],
    ("grouped_query_attention", "kv_heads_tiled"): [sub("k.repeat_interleave(group, dim=1)", "k.repeat(1, group, 1, 1)"),
                                                    sub("v.repeat_interleave(group, dim=1)", "v.repeat(1, group, 1, 1)")],
    ("grouped_query_attention", "not_causal"): [sub('    scores = scores.masked_fill(~allowed, float("-inf"))\n', "")],
    ("grouped_query_attention", "positions_restart"): [sub("transpose(1, 2), positions)\n    k", "transpose(1, 2), torch.arange(t))\n    k"),
                                                       sub("transpose(1, 2), positions)\n    v", "transpose(1, 2), torch.arange(t))\n    v")],
    ("grouped_query_attention", "cache_repeated_heads"): [body("gqa", GQA_REPEATED_CACHE)],
    ("grouped_query_attention", "no_scaling"): [sub(" / math.sqrt(d_h)", "")],
    ("grouped_query_attention", "scaled_by_d_model"): [sub("/ math.sqrt(d_h)", "/ math.sqrt(x.shape[-1])")],
    ("grouped_query_attention", "causal_mask_not_offset"): [sub("<= positions[:, None]", "<= torch.arange(t)[:, None]")],
    ("grouped_query_attention", "cache_ignored"): [sub(GQA_CAT, "    k_new, v_new = k, v\n" + GQA_CAT),
                                                   sub("k_heads = k.repeat_interleave", "k_heads = k_new.repeat_interleave"),
                                                   sub("v_heads = v.repeat_interleave", "v_heads = v_new.repeat_interleave"),
                                                   sub("torch.arange(k.shape[-2])[None, :]", "torch.arange(start, start + t)[None, :]")],
    ("grouped_query_attention", "cache_not_appended"): [sub("@ W_o, (k, v)", "@ W_o, (k[:, :, -t:], v[:, :, -t:])")],
    ("grouped_query_attention", "values_rotated"): [sub("    v = (x @ W_v).view(b, t, n_kv_heads, d_h).transpose(1, 2)\n",
                                                        "    v = apply_rope((x @ W_v).view(b, t, n_kv_heads, d_h).transpose(1, 2), positions)\n")],

    # the tester's findings (tests/tfmcheck/test_feedback.py: FINDINGS below)
    ("attention_step", "masked_scores_zero"): [body("attention_step", STEP_SIMPLE.format(fill="~mask", value="0.0"))],
    ("scaled_dot_product_attention", "scaled_by_d_v"): [sub("d_k = q.shape[-1]", "d_k = v.shape[-1]")],
    ("scaled_dot_product_attention", "multiplied_by_sqrt_d_k"): [sub("/ math.sqrt(d_k)", "* math.sqrt(d_k)")],
    ("causal_mask", "one_future_key"): [sub("dtype=torch.bool).tril()", "dtype=torch.bool).tril(1)")],
    ("multi_head_attention", "scaled_by_d_h"): [sub("/ math.sqrt(q.shape[-1])", "/ q.shape[-1]")],
    ("multi_head_attention", "scaled_by_sqrt_n_heads"): [sub("/ math.sqrt(q.shape[-1])", "/ math.sqrt(n_heads)")],
    ("multi_head_attention", "mask_after_softmax"): [sub('        scores = scores.masked_fill(~mask, float("-inf"))\n    weights = torch.softmax(scores, dim=-1)\n',
                                                         '        pass\n    weights = torch.softmax(scores, dim=-1)\n    if mask is not None:\n        weights = weights * mask\n')],
    ("padding_mask", "one_too_few"): [sub("< lengths[:, None]", "< lengths[:, None] - 1")],
    ("decoder_mask", "causal_upper_triangle"): [sub("dtype=torch.bool).tril()", "dtype=torch.bool).triu()")],
    ("layer_norm", "no_beta"): [sub("return gamma * (x - mean) / torch.sqrt(var + eps) + beta",
                                    "return gamma * (x - mean) / torch.sqrt(var + eps)")],
    ("layer_norm", "no_gamma"): [sub("return gamma * (x - mean) / torch.sqrt(var + eps) + beta",
                                     "return (x - mean) / torch.sqrt(var + eps) + beta")],
    ("sliding_window_mask", "half_width"): [sub("<= window", "<= window // 2")],
    ("sliding_window_mask", "one_too_wide"): [sub("<= window", "<= window + 1")],
    ("blockwise_attention", "correction_inverted"): [sub("correction = torch.exp(m - m_new)",
                                                         "correction = torch.exp(m_new - m).nan_to_num(posinf=0.0)")],
    ("chinchilla_loss", "A_B_swapped"): [sub('p["A"] / N ** p["alpha"] + p["B"] / D ** p["beta"]',
                                             'p["B"] / N ** p["alpha"] + p["A"] / D ** p["beta"]')],
}

ALL_MISTAKES = [(f, m.name) for f, ms in feedback.CATALOGUE.items() for m in ms]


def reaching(function) -> re.Pattern:
    """What a test cell names when it can reach ``function``: the function itself or one built on it
    (``tfmcheck.standins.DEPENDS``).  When ``function`` is a submission's only wrong answer, a test cell that names
    none of them runs the worked solution's code alone, and passes."""
    names = {function} | {d for d, deps in DEPENDS.items() if function in deps}
    return re.compile(r"\b(" + "|".join(sorted(names)) + r")\b")


def run_cells(nb, until_named=False, wrong=None):
    """Run a notebook's code cells in order in one namespace; the (grade_id, exception) of each failing test cell.
    ``until_named``: stop after the first failure that names a mistake (what follows it cannot change which
    mistake is named first; 07's and 08's last tests take seconds each).  ``wrong``: the one function the notebook
    gets wrong; the test cells that cannot reach it (``reaching``) are left out, as they pass."""
    ns = {"__name__": "__main__"}
    failures = []
    feedback.reset_history()            # a new notebook: the earlier calls of another one do not count
    reaches = reaching(wrong) if wrong else None
    for cell in nb.cells:
        if until_named and _named(failures):
            break
        if cell.cell_type != "code":
            continue
        if reaches and _nbg(cell).get("grade") and not reaches.search(cell.source):
            continue
        gid = _nbg(cell).get("grade_id", cell.get("id"))
        try:
            exec(compile(cell.source, f"<cell {gid}>", "exec"), ns)
        except Exception as error:
            if not _nbg(cell).get("grade"):
                raise
            failures.append((gid, error))
    return failures


def first_failure(function, edits):
    failures = run_cells(make_submission(ASSIGNMENT[function], edits))
    assert failures, f"the wrong answer passes every test of {ASSIGNMENT[function]}"
    return failures[0]


def test_every_catalogued_mistake_has_a_wrong_answer_here():
    assert sorted(WRONG) == sorted(ALL_MISTAKES)
    assert set(ASSIGNMENT) == set(feedback.CATALOGUE)


def _named(failures):
    """The (cell, mistake) of each failure that names a mistake, in order."""
    return [(cell, getattr(error, "mistake", None)) for cell, error in failures if getattr(error, "mistake", None)]


@pytest.mark.parametrize("function,name", ALL_MISTAKES, ids=[f"{f}-{n}" for f, n in ALL_MISTAKES])
def test_first_failing_test_names_the_mistake(function, name):
    """The first failure that names any mistake names this one, and one does (a visible check may name nothing
    where two catalogued mistakes return the same result on its inputs)."""
    (mistake,) = [m for m in feedback.CATALOGUE[function] if m.name == name]
    failures = run_cells(make_submission(ASSIGNMENT[function], WRONG[(function, name)]), until_named=True)
    assert failures, f"the wrong answer passes every test of {ASSIGNMENT[function]}"
    cell, error = failures[0]
    assert isinstance(error, check.CheckFailure), f"{cell}: {type(error).__name__}: {error}"
    named = _named(failures)
    assert not named or named[0][1] == name, f"{named[0][0]} names {named[0][1]} before {name}: {named}"
    assert named, f"no failure names {name}:\n" + "\n".join(f"{c}: {e}" for c, e in failures)
    (error,) = [e for c, e in failures if getattr(e, "mistake", None) == name][:1]
    first, line = str(error).splitlines()[:2]
    assert mistake.sentence in first and mistake.line in line, str(error)


# Every solution passes every test cell, hidden ones included: tests/tfmcheck/test_verdicts.py (in this process, in
# `make check` and as graded).


def test_an_unknown_mistake_gets_the_numbers_and_no_guessed_cause():
    cell, error = first_failure("scaled_dot_product_attention", [sub("return weights @ v, weights", "return weights @ v, weights * 1.5")])
    text = str(error)
    assert cell == "test_sdpa_values" and error.mistake is None
    assert text.startswith("weights: values differ") and "line involved" not in text and "Hint" not in text


def test_diagnosis_reads_only_the_recorded_result():
    """The grader replays check.call's results: a diagnosis must work with no learner function anywhere."""
    feedback.reset_history()
    q = check.ref.randn(2, 3, 4, dtype=check.torch.float64)
    k = check.ref.randn(2, 5, 4, dtype=check.torch.float64)
    v = check.ref.randn(2, 5, 2, dtype=check.torch.float64)
    recorded = feedback.attention(q, k, v, scale=None)  # what a learner who forgot 1/sqrt(d_k) returned
    assert feedback.diagnose("scaled_dot_product_attention", recorded, q=q, k=k, v=v).name == "no_scaling"
    right = feedback.attention(q, k, v)
    assert feedback.diagnose("scaled_dot_product_attention", right, q=q, k=k, v=v) is None


def test_feedback_calls_no_learner_code():
    """The test cells hand For() the inputs and check.call's result, never a learner function."""
    import nbformat
    for assignment in sorted(set(ASSIGNMENT.values())):
        nb = nbformat.read(str(REPO / "solutions" / assignment / f"{assignment}.ipynb"), as_version=4)
        for cell in nb.cells:
            for call in re.findall(r"feedback\.For\(([^\n]*)", cell.source):
                arguments = call.split(",", 1)[1]
                # a learner function named bare (not as check.ref.<name> or in a string) would be called or handed over
                assert not any(re.search(rf"(?<![.\w\"]){f}\b", arguments) for f in ASSIGNMENT), call


@pytest.mark.slow
def test_traceback_in_the_kernel_shows_the_test_line_not_tfmlib(tmp_path):
    """IPython hides frames marked __tracebackhide__: the learner sees their test cell's line and the message."""
    from nbclient import NotebookClient

    nb = make_submission("03_self_attention", WRONG[("scaled_dot_product_attention", "no_scaling")])
    cells = [c for c in nb.cells if c.cell_type == "code"]
    keep = [c for c in cells if _nbg(c).get("grade_id") in ("setup", "sdpa", "test_sdpa_values")]
    nb.cells = keep
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    (error,) = [o for o in keep[-1].outputs if o.output_type == "error"]
    tb = "\n".join(error.traceback)
    assert error.ename == "CheckFailure" and "√d_k" in error.evalue
    plain = re.sub(r"\x1b\[[0-9;]*m", "", tb)
    assert "/tfmcheck/" not in plain and "checking.py" not in plain, tb    # no frame of the checking package
    assert "fb.assert_close" in plain


# ---------------------------------------------------------------------------------------------------------
# A tester's wrong answers (their own code): a failure names the mistake the answer has, or nothing
# ---------------------------------------------------------------------------------------------------------
def own(source):
    """A body() edit from a whole wrong function as a learner wrote it."""
    _def_line, code = source.strip("\n").split("\n", 1)
    return code


# id -> (function, the answer cell's grade_id, the learner's function, the mistake it has (None: not catalogued),
#        a phrase its message must not contain: the cause an earlier sentence wrongly gave)
FINDINGS = {
    "M1-mha-divides-by-d_h": ("multi_head_attention", "multi_head_attention", '''
def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q = split_heads(x @ W_q, n_heads)
    k = split_heads(x @ W_k, n_heads)
    v = split_heads(x @ W_v, n_heads)
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return merge_heads(w @ v) @ W_o
''', 'scaled_by_d_h', None),
    "M2-layer-norm-no-beta": ("layer_norm", "layer_norm", '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + eps)
''', 'no_beta', None),
    "M3-decoder-mask-pads-queries-and-keys": ("decoder_mask", "decoder_mask", '''
def decoder_mask(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril()
    p = padding_mask(lengths, max_len)
    return (p[:, None, :, None] & p[:, None, None, :]) & causal
''', 'padding_on_queries', 'instead of key columns'),
    "M4-sliding-window-half-width": ("sliding_window_mask", "sliding_window", '''
def sliding_window_mask(n, window):
    p = torch.arange(n)
    return (p[:, None] - p[None, :]).abs() <= window // 2
''', 'half_width', None),
    "M5-sliding-window-plus-one": ("sliding_window_mask", "sliding_window", '''
def sliding_window_mask(n, window):
    p = torch.arange(n)
    return (p[:, None] - p[None, :]).abs() <= window + 1
''', 'one_too_wide', None),
    "M6-sdpa-full-row-finite-scores-not-zeroed": ("scaled_dot_product_attention", "sdpa", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        scores = scores.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    w = torch.softmax(scores, -1)
    return w @ v, w
''', 'masked_row_uniform', '-1e9'),
    "M6-step-full-row-finite-scores-not-zeroed": ("attention_step", "attention_step", '''
def attention_step(query, keys, values, mask=None):
    scores = (keys @ query[:, :, None])[..., 0]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        scores = scores.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    w = torch.softmax(scores, -1)
    return (w[..., None] * values).sum(1), w
''', 'masked_row_uniform', '-1e9'),
    "M7-sdpa-renormalised-after-softmax": ("scaled_dot_product_attention", "sdpa", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(scores, -1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True)
    return w @ v, w
''', 'masked_row_nan', '-inf'),
    "M7-step-renormalised-after-softmax": ("attention_step", "attention_step", '''
def attention_step(query, keys, values, mask=None):
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
        weights = weights / weights.sum(-1, keepdim=True)
    context = (weights.unsqueeze(-1) * values).sum(dim=1)
    return context, weights
''', 'masked_row_nan', '-inf'),
    "M8-sdpa-divides-by-sqrt-d_v": ("scaled_dot_product_attention", "sdpa", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights)
    return weights @ v, weights
''', 'scaled_by_d_v', None),
    "causal-tril-plus-1": ("causal_mask", "causal", '''
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).tril(1)
''', 'one_future_key', None),
    "sdpa-multiplies-by-sqrt-d_k": ("scaled_dot_product_attention", "sdpa", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights)
    return weights @ v, weights
''', 'multiplied_by_sqrt_d_k', None),
    "decoder-mask-causal-triu": ("decoder_mask", "decoder_mask", '''
def decoder_mask(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).triu()
    return padding_mask(lengths, max_len)[:, None, None, :] & causal
''', 'causal_upper_triangle', None),
    "mha-mask-after-softmax": ("multi_head_attention", "multi_head_attention", '''
def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q, k, v = (split_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    if mask is not None:
        w = w * mask
    return merge_heads(w @ v) @ W_o
''', 'mask_after_softmax', None),
    "step-masked-scores-0": ("attention_step", "attention_step", '''
def attention_step(query, keys, values, mask=None):
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    weights = torch.softmax(scores, dim=-1)
    context = (weights.unsqueeze(-1) * values).sum(dim=1)
    return context, weights
''', 'masked_scores_zero', '-1e9'),
    "padding-mask-length-minus-1": ("padding_mask", "padding_mask", '''
def padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] < (lengths[:, None] - 1)
''', 'one_too_few', None),
    "chinchilla-A-B-swapped": ("chinchilla_loss", "chinchilla_loss", '''
def chinchilla_loss(N, D, params=None):
    p = NOTES_PARAMS if params is None else params
    return p["E"] + p["B"] / N ** p["alpha"] + p["A"] / D ** p["beta"]
''', 'A_B_swapped', None),
    "blockwise-correction-inverted": ("blockwise_attention", "blockwise", '''
def blockwise_attention(q, k, v, block_size):
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"))
    l = torch.zeros((*q.shape[:-1], 1))
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]))
    for s0 in range(0, k.shape[-2], block_size):
        kb, vb = k[..., s0:s0 + block_size, :], v[..., s0:s0 + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        corr = torch.exp(m_new - m).nan_to_num(0.0, posinf=0.0)
        l = l * corr + p.sum(-1, keepdim=True)
        acc = acc * corr + p @ vb
        m = m_new
    return acc / l
''', 'correction_inverted', None),
    "sdpa-mask-on-queries": ("scaled_dot_product_attention", "sdpa", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask.transpose(-2, -1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights)
    return weights @ v, weights
''', None, None),
    "blockwise-misses-last-block": ("blockwise_attention", "blockwise", '''
def blockwise_attention(q, k, v, block_size):
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"))
    l = torch.zeros((*q.shape[:-1], 1))
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]))
    for s0 in range(0, k.shape[-2] - block_size, block_size):
        kb, vb = k[..., s0:s0 + block_size, :], v[..., s0:s0 + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        corr = torch.exp(m - m_new)
        l = l * corr + p.sum(-1, keepdim=True)
        acc = acc * corr + p @ vb
        m = m_new
    return acc / l
''', None, None),
    "blockwise-no-max-subtraction": ("blockwise_attention", "blockwise", '''
def blockwise_attention(q, k, v, block_size):
    num = 0
    den = 0
    for s0 in range(0, k.shape[-2], block_size):
        e = torch.exp(q @ k[..., s0:s0 + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1]))
        num = num + e @ v[..., s0:s0 + block_size, :]
        den = den + e.sum(-1, keepdim=True)
    return num / den
''', None, None),
}


@pytest.mark.parametrize("case", sorted(FINDINGS))
def test_no_diagnosis_names_a_cause_the_answer_does_not_have(case):
    function, grade_id, code, expected, wrong_cause = FINDINGS[case]
    failures = run_cells(make_submission(ASSIGNMENT[function], [body(grade_id, own(code))]), wrong=function)
    assert failures, f"{case} passes every test"
    named = _named(failures)
    assert all(m == expected for _c, m in named), f"{case} is diagnosed as {named}, it is {expected}"
    if expected is not None:
        assert named, f"no failure names {expected}:\n" + "\n".join(f"{c}: {e}" for c, e in failures)
    if wrong_cause:
        assert not any(wrong_cause in str(e).splitlines()[0] for _c, e in failures), failures


# ---------------------------------------------------------------------------------------------------------
# The self-check (`make check NN`) and the validate wrapper: scripts/check.py, in a kernel
# ---------------------------------------------------------------------------------------------------------
def _check(*args):
    import subprocess
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "check.py"), *args], capture_output=True, text=True,
                          timeout=600, cwd=str(REPO))
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
def test_self_check_runs_hidden_tests_names_the_mistake_and_fails(tmp_path):
    import nbformat
    wrong = tmp_path / "03_self_attention.ipynb"
    nbformat.write(make_submission("03_self_attention", WRONG[("scaled_dot_product_attention", "no_scaling")]), str(wrong))
    code, out = _check("03", "--notebook", str(wrong))
    assert code == 1, out
    assert "FAIL  test_sdpa_values      0/3" in out and "PASS  test_causal_mask      2/2" in out, out
    assert "Your scores are not divided by √d_k." in out and "Total: 4/11 points" in out, out  # self_attention: on its own
    right = tmp_path / "right" / "03_self_attention.ipynb"
    right.parent.mkdir()
    nbformat.write(make_submission("03_self_attention", []), str(right))
    code, out = _check(str(right))
    assert code == 0 and "Total: 11/11 points" in out, out


@pytest.mark.slow
def test_validate_wrapper_fails_on_an_unfinished_notebook():
    code, out = _check("--validate", "03")  # notebooks/ as released: every answer raises NotImplementedError
    assert code == 1 and "VALIDATION FAILED" in out, out
