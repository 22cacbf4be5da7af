"""Chapter 1's mistakes (solutions/01_rnn_limits): rnn_forward, grad_norm_by_distance."""
from __future__ import annotations

import torch

from .catalogue import _stack, _tanh, graded, mistake

RNN_LINE = "h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h)"
GRAD_LINE = "entry t = ‖∂(h_T.sum()) / ∂x_t‖₂ over batch and features"


def rnn(x, h0, W_xh, W_hh, b_h, *, use_h0=True, tanh=True, bias=True, transpose_hh=False, shift=False,
        prepend_h0=False, first_state=False):
    """(H, h_T) of the recurrence; ``shift``: H holds each state before its update."""
    h = h0 if use_h0 else torch.zeros_like(h0)
    states = []
    for t in range(x.shape[1]):
        if shift:
            states.append(h)
        pre = x[:, t] @ W_xh + h @ (W_hh.T if transpose_hh else W_hh) + (b_h if bias else 0)
        h = _tanh(pre) if tanh else pre
        if not shift:
            states.append(h)
    H = _stack(states, dim=1)
    if prepend_h0:
        H = torch.cat([h0[:, None], H], dim=1)
    return (H, H[:, 0]) if first_state else (H, h)


def grad_norms(x, h0, W_xh, W_hh, b_h, *, all_states=False, sqrt=True, l1=False, per_sequence=False, flip=False):
    """Entry t: the 2-norm of ∂(h_T.sum())/∂x_t (``all_states``: of H.sum()) over the batch and the features;
    ``l1``: sums of absolute values; ``per_sequence``: one 2-norm per sequence, added up."""
    with torch.enable_grad():
        xr = x.detach().clone().requires_grad_(True)
        H, h_T = rnn(xr, h0, W_xh, W_hh, b_h)
        (g,) = torch.autograd.grad((H if all_states else h_T).sum(), xr)
    g = g.detach()
    if l1:
        out = g.abs().sum(dim=(0, 2))
    elif per_sequence:
        out = g.pow(2).sum(dim=2).sqrt().sum(dim=0)
    else:
        out = g.pow(2).sum(dim=(0, 2))
        out = out.sqrt() if sqrt else out
    return out.flip(0) if flip else out


MISTAKES = {
    "rnn_forward": graded(
        rnn, RNN_LINE,
        mistake("ignores_h0", "Your recurrence starts from zeros instead of the given h0.",
                line="h_0 = h0, then " + RNN_LINE, use_h0=False),
        mistake("no_tanh", "Your states are not passed through tanh.", tanh=False),
        mistake("no_bias", "Your states leave out the bias b_h.", bias=False),
        mistake("W_hh_transposed", "Your recurrence multiplies by W_hh transposed (h W_hhᵀ).",
                line=RNN_LINE + "   (h_{t-1} W_hh, weights from the right)", transpose_hh=True),
        mistake("states_shifted", "Your H holds h_0 .. h_{T-1} (each state before its update) instead of h_1 .. h_T.",
                line="H = (h_1, ..., h_T), " + RNN_LINE, shift=True),
        mistake("H_includes_h0", "Your H starts with h0: it holds T + 1 states, but H is h_1 .. h_T.",
                line="H = (h_1, ..., h_T), " + RNN_LINE, prepend_h0=True),
        mistake("returns_first_state", "Your h_T is the first state h_1, not the last one.",
                line="h_T = the state after the last step (H[:, -1])", first_state=True)),
    "grad_norm_by_distance": graded(
        grad_norms, GRAD_LINE,
        mistake("no_sqrt", "Your entries are squared norms: the square root is missing.", sqrt=False),
        mistake("l1_norm", "Your entries are sums of absolute values (an L1 norm), not 2-norms.", l1=True),
        mistake("gradient_of_all_states", "You differentiate H.sum() (every state) instead of h_T.sum() (the last "
                "state only).", all_states=True),
        mistake("reversed", "Your entries are in reverse order: entry t must belong to x_t.", flip=True),
        mistake("sum_of_norms", "Your entries add up one norm per sequence of the batch; entry t is a single 2-norm "
                "over the batch and the features together.", per_sequence=True)),
}
