"""Chapter 8's mistakes (solutions/08_scaling_laws): chinchilla_loss, compute_optimal, fit_power_law."""
from __future__ import annotations

import math

import torch

from .catalogue import _Tensor, _type, either, graded, mistake

NOTES_PARAMS = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
LOSS_LINE = "L(N, D) = E + A / N^alpha + B / D^beta"
OPT_LINE = ("N_opt = G · (C/6)^(beta/(alpha+beta)),  G = (alpha·A / (beta·B))^(1/(alpha+beta)),  "
            "D_opt = C / (6 N_opt)")
FIT_LINE = "c, log k = slope and intercept of the least-squares line of log y against log x;  k = exp(log k)"


def loss(N, D, params=None, *, swap_exponents=False, swap_constants=False, with_E=True, multiply=False,
         perplexity=False, ignore_params=False):
    """L(N, D) = E + A / N^alpha + B / D^beta with ``params`` (None, or ``ignore_params``: the notes')."""
    p = NOTES_PARAMS if params is None or ignore_params else params
    E, A, B, a, b = p["E"], p["A"], p["B"], p["alpha"], p["beta"]
    a, b = (b, a) if swap_exponents else (a, b)
    A, B = (B, A) if swap_constants else (A, B)
    n_term, d_term = (A * N ** a, B * D ** b) if multiply else (A / N ** a, B / D ** b)
    L = E + n_term + d_term if with_E else n_term + d_term
    if perplexity:
        return torch.exp(L) if _type(L) is _Tensor else math.exp(L)
    return L


def optimum(C, params=None, *, rule_of_thumb=False, invert_G=False, swap_exponent=False, C_over_6=True,
            D_over_6=True, return_D_N=False):
    """(N_opt, D_opt) of the budget C = 6·N·D; ``rule_of_thumb``: 20 tokens per parameter."""
    p = NOTES_PARAMS if params is None else params
    a, b, A, B = p["alpha"], p["beta"], p["A"], p["B"]
    if rule_of_thumb:
        N = (C / 120) ** 0.5
        return N, 20 * N
    G = (a * A / (b * B)) ** (1 / (a + b))
    G = 1 / G if invert_G else G
    e = a / (a + b) if swap_exponent else b / (a + b)
    N = G * ((C / 6 if C_over_6 else C) ** e)
    D = C / (6 * N) if D_over_6 else C / N
    return (D, N) if return_D_N else (N, D)


def fit(x, y, *, log10_data=False, pow10=False, x_on_y=False, return_log_k=False, return_c_k=False):
    """(k, c) of the least-squares line of log y against log x; ``log10_data``: log10 of the data; ``pow10``:
    k = 10^intercept."""
    u = torch.log(torch.as_tensor(x, dtype=torch.float64))
    w = torch.log(torch.as_tensor(y, dtype=torch.float64))
    if log10_data:
        u, w = u / math.log(10), w / math.log(10)
    if x_on_y:
        u, w = w, u
    c = ((u - u.mean()) * (w - w.mean())).sum() / ((u - u.mean()) ** 2).sum()
    logk = w.mean() - c * u.mean()
    k = 10 ** logk if pow10 else torch.exp(logk)
    if return_log_k:
        return logk.item(), c.item()
    return (c.item(), k.item()) if return_c_k else (k.item(), c.item())


MISTAKES = {
    "chinchilla_loss": graded(
        loss, LOSS_LINE,
        mistake("exponents_swapped", "Your exponents are swapped: N takes alpha and D takes beta.",
                swap_exponents=True),
        mistake("A_B_swapped", "Your constants A and B are swapped: N takes A (A / N^alpha) and D takes B "
                "(B / D^beta).", swap_constants=True),
        mistake("no_E", "Your loss leaves out the irreducible term E.", with_E=False),
        mistake("multiplied", "You multiply by N^alpha and D^beta instead of dividing by them.", multiply=True),
        mistake("perplexity", "Your function returns the perplexity e^L; it returns the loss L itself.",
                perplexity=True),
        mistake("ignores_params", "Your function ignores the params it is given and always uses the notes' "
                "constants.", line="p = params if params is not None else the notes' constants", ignore_params=True,
                only_if=lambda params=None, **_: params is not None)),
    "compute_optimal": graded(
        optimum, OPT_LINE,
        mistake("twenty_tokens_per_parameter", "Your N and D follow the 20-tokens-per-parameter rule of thumb; with "
                "these constants the optimum comes from the closed form.", rule_of_thumb=True),
        mistake("exponent_swapped", "Your exponent of C/6 is alpha/(alpha+beta); it is beta/(alpha+beta).",
                swap_exponent=True),
        mistake("G_inverted", "Your G is inverted: G = (alpha·A / (beta·B))^(1/(alpha+beta)).", invert_G=True),
        mistake("C_not_divided_by_6", "Your N_opt uses C instead of C/6.", C_over_6=False),
        mistake("returns_D_N", "Your function returns (D, N); it returns (N, D).", return_D_N=True),
        mistake("D_without_6", "Your D_opt is C / N; the budget is C = 6·N·D, so D_opt = C / (6 N_opt).",
                D_over_6=False)),
    "fit_power_law": graded(
        fit, FIT_LINE,
        mistake("returns_log_k", "Your k is the intercept log k; return k = exp(intercept).", return_log_k=True),
        mistake("returns_c_k", "Your function returns (c, k); it returns (k, c).", return_c_k=True),
        mistake("log10_then_exp", "You fit with log10 but turn the intercept back with exp (or the other way round); "
                "use the same logarithm both ways.",
                lambda x, y: either(fit(x, y, log10_data=True), fit(x, y, pow10=True))),
        mistake("regressed_x_on_y", "You fit log x against log y; the line is log y against log x.", x_on_y=True)),
}
