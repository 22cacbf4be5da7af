"""Scaling laws — chapter 8: Chinchilla's L(N, D), the compute-optimal split of C ≈ 6·N·D, power-law fits,
Chinchilla's "approach 3" fit, and a small training loop that measures L(N, D) on a source of known entropy.

N = parameters, D = training tokens, C = training FLOPs, L = loss in nats per token (not perplexity: e^L is).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .train import train

# Hoffmann et al. (2022), approach 3 — the constants of the notes (eq. 8.1).
CHINCHILLA_PARAMS = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
# Besiroglu et al. (2024), the same fit redone on data read off Hoffmann et al.'s figure.
BESIROGLU_PARAMS = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}

PARAM_KEYS = ("E", "A", "B", "alpha", "beta")


def _params(params):
    params = CHINCHILLA_PARAMS if params is None else params
    missing = [k for k in PARAM_KEYS if k not in params]
    if missing:
        raise ValueError(f"params must have the keys {PARAM_KEYS}, missing {missing}")
    return params


def _check_positive(name, x):
    t = torch.as_tensor(x)
    if t.numel() == 0 or not bool((t > 0).all()):
        smallest = t.min().item() if t.numel() else None
        raise ValueError(f"{name} must be > 0 everywhere, got shape {tuple(t.shape)} with min {smallest}")


def chinchilla_loss(N, D, params=None):
    """L(N, D) = E + A / N^α + B / D^β in nats per token — chapter 8, eq. (8.1).

    N (parameters) and D (tokens): floats, NumPy arrays or tensors of broadcastable shapes; the result
    has their broadcast shape and type.  ``params``: dict with keys E, A, B, alpha, beta
    (default ``CHINCHILLA_PARAMS``, the notes' values).
    """
    p = _params(params)
    _check_positive("N", N)
    _check_positive("D", D)
    return p["E"] + p["A"] * N ** -p["alpha"] + p["B"] * D ** -p["beta"]


def isoflop_loss(C, N, params=None):
    """L along the IsoFLOP curve of budget C: chinchilla_loss(N, C / (6N)) — chapter 8, eq. (8.3)."""
    _check_positive("C", C)
    return chinchilla_loss(N, C / (6 * N), params)


def compute_optimal(C, params=None):
    """(N_opt, D_opt) minimising L(N, D) subject to C = 6·N·D — chapter 8, eq. (8.4).

    Setting dL/dN = 0 along D = C / (6N) gives
    N_opt = G · (C/6)^(β/(α+β)),  D_opt = G⁻¹ · (C/6)^(α/(α+β)),  G = (αA / (βB))^(1/(α+β)).
    C: float, array or tensor of FLOPs; returns two values of the same shape.
    """
    p = _params(params)
    _check_positive("C", C)
    a, b = p["alpha"], p["beta"]
    g = (a * p["A"] / (b * p["B"])) ** (1 / (a + b))
    n_opt = g * (C / 6) ** (b / (a + b))
    return n_opt, (C / 6) / n_opt


def fit_power_law(x, y):
    """(k, c) with y ≈ k · x^c, by least squares on log y = log k + c · log x — chapter 8, eq. (8.2).

    x, y: 1-D sequences (lists, arrays, tensors) of the same length ≥ 2, all entries > 0.
    """
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    y = torch.as_tensor(y, dtype=torch.float64).flatten()
    if x.shape != y.shape or len(x) < 2:
        raise ValueError(f"x and y must have the same length >= 2, got shapes {tuple(x.shape)} and {tuple(y.shape)}")
    _check_positive("x", x)
    _check_positive("y", y)
    lx, ly = x.log(), y.log()
    lx_c = lx - lx.mean()
    if float((lx_c ** 2).sum()) == 0.0:
        raise ValueError("x must take at least two distinct values")
    c = float((lx_c * (ly - ly.mean())).sum() / (lx_c ** 2).sum())
    log_k = float(ly.mean() - c * lx.mean())
    return math.exp(log_k), c


def _log_loss_hat(theta, log_n, log_d):
    """log L̂ = LSE(a − α log N, b − β log D, e) for θ = (a, b, e, α, β) of shape (S, 5) → (S, P)."""
    a, b, e, alpha, beta = theta.unbind(-1)
    terms = torch.stack([a[:, None] - alpha[:, None] * log_n, b[:, None] - beta[:, None] * log_d,
                         e[:, None].expand(-1, log_n.shape[0])])
    return torch.logsumexp(terms, dim=0)


def fit_chinchilla(N, D, L, delta: float = 1e-3, grid=None, n_refine: int = 16, max_iter: int = 500):
    """Fit L(N, D) = E + A/N^α + B/D^β as Hoffmann et al.'s approach 3 — chapter 8, eq. (8.6).

    Minimises Σ_i Huber_δ(LSE(a − α log N_i, b − β log D_i, e) − log L_i) over θ = (a, b, e, α, β),
    with A = e^a, B = e^b, E = e^e, by L-BFGS.  Hoffmann et al. start L-BFGS from every point of a grid
    (α, β ∈ {0, 0.5, …, 2}, e ∈ {−1, −0.5, …, 1}, a, b ∈ {0, 5, …, 25}); to stay fast we evaluate the
    objective on the whole grid and start L-BFGS from its ``n_refine`` best points (``n_refine=None``: all).
    N, D, L: 1-D sequences of the same length.  Returns a params dict (keys E, A, B, alpha, beta) with
    the objective's value under the key "huber".
    """
    log_n, log_d, log_l = (torch.as_tensor(v, dtype=torch.float64).flatten().log() for v in (N, D, L))
    if not (log_n.shape == log_d.shape == log_l.shape) or len(log_n) < 5:
        raise ValueError(f"N, D, L must be 1-D of the same length >= 5, got shapes "
                         f"{tuple(log_n.shape)}, {tuple(log_d.shape)}, {tuple(log_l.shape)}")
    if not all(torch.isfinite(v).all() for v in (log_n, log_d, log_l)):
        raise ValueError("N, D and L must all be > 0")
    if grid is None:
        ab, ex, ac = torch.arange(0, 2.01, 0.5), torch.arange(-1, 1.01, 0.5), torch.arange(0, 25.1, 5)
        grid = torch.cartesian_prod(ac, ac, ex, ab, ab)            # columns a, b, e, alpha, beta
    grid = torch.as_tensor(grid, dtype=torch.float64)

    def objective(theta):                                            # (S, 5) → (S,)
        r = _log_loss_hat(theta, log_n, log_d) - log_l
        return F.huber_loss(r, torch.zeros_like(r), delta=delta, reduction="none").sum(-1)

    with torch.no_grad():
        order = objective(grid).argsort()
    starts = grid[order] if n_refine is None else grid[order[:n_refine]]
    best, best_val = None, float("inf")
    for start in starts:
        theta = start.clone()[None].requires_grad_(True)
        opt = torch.optim.LBFGS([theta], lr=1, max_iter=max_iter, tolerance_grad=1e-12,
                                tolerance_change=1e-14, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            val = objective(theta).sum()
            val.backward()
            return val

        opt.step(closure)
        with torch.no_grad():
            val = float(objective(theta))
        if val < best_val:
            best, best_val = theta.detach()[0], val
    a, b, e, alpha, beta = best.tolist()
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta,
            "huber": best_val}


def fit_chinchilla_many(N, D, L, weights, starts, delta: float = 1e-3, iters: int = 150):
    """Fit eq. (8.6) to many weightings of the same runs at once — chapter 8's bootstrap.

    N, D, L: ``(P,)`` runs; ``weights`` ``(R, P)``, one weighting per problem r (a bootstrap draw: how many
    times each run was drawn); ``starts`` ``(R, 5)`` values of θ = (a, b, e, α, β) to start problem r from.
    Minimises Σ_i w_ri Huber_δ(LSE(a − α log N_i, b − β log D_i, e) − log L_i) for every r at once by
    Levenberg–Marquardt steps on the reweighted least squares that majorise the Huber loss (residuals beyond
    δ get weight δ/|r|), a step accepted only where it lowers problem r's objective.  The R problems are
    independent, so one batched step serves all of them: thousands of refits cost about one L-BFGS fit.
    Returns θ ``(R, 5)`` and each problem's objective ``(R,)``.
    """
    log_n, log_d, log_l = (torch.as_tensor(v, dtype=torch.float64).flatten().log() for v in (N, D, L))
    w = torch.as_tensor(weights, dtype=torch.float64)
    theta = torch.as_tensor(starts, dtype=torch.float64).clone()
    if w.dim() != 2 or w.shape[1] != log_n.shape[0] or theta.shape != (w.shape[0], 5) or (w < 0).any():
        raise ValueError(f"need weights (R, P) >= 0 and starts (R, 5) for P = {log_n.shape[0]} runs, got "
                         f"weights {tuple(w.shape)}, starts {tuple(theta.shape)}")

    def objective(th):                                                   # (R, 5) → (R,), and the residuals
        r = _log_loss_hat(th, log_n, log_d) - log_l
        return (w * F.huber_loss(r, torch.zeros_like(r), delta=delta, reduction="none")).sum(-1), r

    val, r = objective(theta)
    damping = torch.full_like(val, 1e-3)
    for _ in range(iters):
        a, b, e, alpha, beta = theta.unbind(-1)
        terms = torch.stack([a[:, None] - alpha[:, None] * log_n, b[:, None] - beta[:, None] * log_d,
                             e[:, None].expand_as(r)], -1)               # (R, P, 3)
        s = torch.softmax(terms, -1)                                     # ∂ LSE / ∂ term
        jac = torch.stack([s[..., 0], s[..., 1], s[..., 2], -s[..., 0] * log_n, -s[..., 1] * log_d], -1)
        irls = w * torch.where(r.abs() <= delta, 1.0, delta / r.abs().clamp_min(1e-300))   # (R, P)
        weighted = jac * irls[..., None]
        hess = weighted.transpose(1, 2) @ jac                            # (R, 5, 5)
        grad = (weighted * r[..., None]).sum(1)                          # (R, 5)
        diag = torch.diagonal(hess, dim1=-2, dim2=-1)
        step = torch.linalg.solve(hess + torch.diag_embed(damping[:, None] * (diag + 1e-12)), -grad)
        new_val, new_r = objective(theta + step)
        better = new_val < val
        theta = torch.where(better[:, None], theta + step, theta)
        val, r = torch.where(better, new_val, val), torch.where(better[:, None], new_r, r)
        damping = torch.where(better, damping / 3, damping * 4).clamp(1e-12, 1e12)
    return theta, val


def count_parameters(model) -> int:
    """N: every trainable parameter of the model, embeddings included."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train_on_source(model, source, eval_at, batch_size: int = 32, seq_len: int = 32, lr: float = 1e-2,
                    eval_x=None, generator=None, desc: str = "training", progress: bool = True):
    """Train a language model on fresh tokens of ``source`` and measure its loss at several budgets — chapter 8.

    ``model`` maps ``(B, T)`` symbols to ``(B, T, V)`` logits (e.g. ``DecoderLM``); ``source`` has
    ``sample(batch, length, generator)`` and ``order`` (e.g. ``tfmlib.data.MarkovSource``).  Training runs
    ``max(eval_at)`` steps of ``tfmlib.train.train`` (constant learning rate), each on a new batch of
    ``batch_size × seq_len`` target tokens never seen before, so D = steps · batch_size · seq_len.  With a
    constant rate, the model after s steps of a long run *is* the model a run of s steps would give, so one
    run yields L(N, D) at every budget in ``eval_at`` (steps).  The loss is the mean cross-entropy on the
    held-out ``eval_x`` ``(B_eval, T)`` over the targets t ≥ ``source.order``, in nats per token.
    Returns a list of dicts with keys N, D, C (= 6·N·D), steps, loss.
    """
    eval_at = sorted(set(int(s) for s in eval_at))
    if not eval_at or eval_at[0] < 0:
        raise ValueError(f"eval_at must be a non-empty list of steps >= 0, got {eval_at}")
    if eval_x is None or eval_x.dim() != 2 or eval_x.shape[1] <= source.order:
        raise ValueError(f"eval_x must be (B, T) symbols with T > order, got "
                         f"{None if eval_x is None else tuple(eval_x.shape)}")
    k, steps = source.order, eval_at[-1]
    device = next(model.parameters()).device
    eval_x = eval_x.to(device)
    n_params = count_parameters(model)
    rows = []

    def lm_loss(x):                                      # targets t ≥ order: position t−1 predicts t
        logits = model(x[:, :-1])[:, k - 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, k:].reshape(-1))

    def record(step):
        model.eval()
        with torch.no_grad():
            loss = float(lm_loss(eval_x))
        model.train()
        tokens = step * batch_size * seq_len
        rows.append({"N": n_params, "D": tokens, "C": 6 * n_params * tokens, "steps": step, "loss": loss})

    def loss_fn(step):
        if step in eval_at:                             # the model has taken `step` updates so far
            record(step)
        return lm_loss(source.sample(batch_size, seq_len + k, generator).to(device))   # fresh tokens

    train(model, loss_fn, steps, lr=lr, desc=desc, progress=progress)
    record(steps)
    return rows
