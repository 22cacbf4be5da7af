"""Chapter 8's mistakes (solutions/08_scaling_laws): chinchilla_loss, fit_chinchilla, fit_power_law."""
from __future__ import annotations

import math

import torch

from .catalogue import _Tensor, _type, either, graded, mistake

NOTES_PARAMS = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
LOSS_LINE = "L(N, D) = E + A / N^alpha + B / D^beta"
HUBER_LINE = ("minimise Σ_i Huber_δ(LSE(a − α log N_i, b − β log D_i, e) − log L_i) by L-BFGS from every start; "
              "keep the lowest objective; return E = e^e, A = e^a, B = e^b, alpha, beta")
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


def huber_fit(N, D, L, starts, delta=1e-3, *, huber=True, log=True, pick="best", logs=False):
    """Approach 3 as the exercise's solution computes it (L-BFGS from every start, the same settings), with the
    mistakes as flags: squared residuals (``huber`` False), residuals of L instead of log L (``log`` False), the
    fit of the first or the last start instead of the best (``pick``), a, b, e returned for A, B, E (``logs``)."""
    log_n, log_d, log_l = torch.log(N), torch.log(D), torch.log(L)

    def objective(theta):
        a, b, e, alpha, beta = theta
        log_hat = torch.logsumexp(torch.stack([a - alpha * log_n, b - beta * log_d, e.expand_as(log_n)]), dim=0)
        r = (log_hat - log_l).abs() if log else (torch.exp(log_hat) - L).abs()
        if not huber:
            return (r ** 2).sum()
        return torch.where(r <= delta, 0.5 * r ** 2, delta * (r - 0.5 * delta)).sum()

    fits = []
    with torch.enable_grad():
        for start in starts:
            theta = start.clone().requires_grad_(True)
            opt = torch.optim.LBFGS([theta], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14,
                                    line_search_fn="strong_wolfe")

            def closure():
                opt.zero_grad()
                value = objective(theta)
                value.backward()
                return value

            opt.step(closure)
            fits.append((objective(theta.detach()).item(), theta.detach()))
    theta = {"best": min(fits, key=lambda f: f[0]), "first": fits[0], "last": fits[-1]}[pick][1]
    a, b, e, alpha, beta = theta.tolist()
    if logs:
        return {"E": e, "A": a, "B": b, "alpha": alpha, "beta": beta}
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


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
    "fit_chinchilla": graded(
        huber_fit, HUBER_LINE,
        mistake("squared_residuals", "You minimise the squared log-residuals; approach 3 minimises their Huber loss "
                "(linear beyond delta, so that a few odd runs cannot pull the fit).", huber=False),
        mistake("residuals_not_log", "Your residuals are L̂ − L; approach 3 fits the logarithms: log L̂ − log L.",
                log=False),
        mistake("first_start_only", "Your fit keeps the result of the first start; run L-BFGS from every start and "
                "keep the one with the lowest objective.", pick="first", only_if=lambda starts, **_: len(starts) > 1),
        mistake("last_start_not_best", "Your fit keeps the result of the last start, not the best one (the lowest "
                "objective).", pick="last", only_if=lambda starts, **_: len(starts) > 1),
        mistake("returns_logs", "Your E, A and B are the fitted logarithms e, a and b; return E = exp(e), A = exp(a), "
                "B = exp(b).", logs=True)),
    "fit_power_law": graded(
        fit, FIT_LINE,
        mistake("returns_log_k", "Your k is the intercept log k; return k = exp(intercept).", return_log_k=True),
        mistake("returns_c_k", "Your function returns (c, k); it returns (k, c).", return_c_k=True),
        mistake("log10_then_exp", "You fit with log10 but turn the intercept back with exp (or the other way round); "
                "use the same logarithm both ways.",
                lambda x, y: either(fit(x, y, log10_data=True), fit(x, y, pow10=True))),
        mistake("regressed_x_on_y", "You fit log x against log y; the line is log y against log x.", x_on_y=True)),
}
