"""Tests for chapter 8: tfmlib.scaling and the Markov source of known entropy (tfmlib.data.MarkovSource)."""
import math

import numpy as np
import pytest
import torch

import tfmlib
from tfmlib.data import MarkovSource
from tfmlib.scaling import (BESIROGLU_PARAMS, CHINCHILLA_PARAMS, chinchilla_loss, compute_optimal,
                            count_parameters, fit_chinchilla, fit_chinchilla_many, fit_power_law, isoflop_loss,
                            train_on_source)


# ---------------------------------------------------------------- L(N, D) and the compute-optimal split

def test_chinchilla_loss_matches_the_formula_by_hand():
    # Chinchilla itself: 70e9 parameters, 1.4e12 tokens.
    expected = 1.69 + 406.4 / 70e9 ** 0.34 + 410.7 / 1.4e12 ** 0.28
    assert chinchilla_loss(70e9, 1.4e12) == pytest.approx(expected, rel=1e-12)
    assert chinchilla_loss(70e9, 1.4e12, CHINCHILLA_PARAMS) == pytest.approx(expected, rel=1e-12)
    b = BESIROGLU_PARAMS
    assert b == {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
    assert chinchilla_loss(1e9, 2e10, b) == pytest.approx(1.82 + 482.01 / 1e9 ** 0.3478 + 2085.43 / 2e10 ** 0.3658)


def test_chinchilla_loss_broadcasts_over_tensors_and_arrays():
    n = torch.tensor([1e6, 1e8])[:, None].double()
    d = torch.tensor([1e9, 1e10, 1e11]).double()
    out = chinchilla_loss(n, d)
    assert out.shape == (2, 3)
    assert float(out[1, 2]) == pytest.approx(chinchilla_loss(1e8, 1e11))
    assert np.allclose(chinchilla_loss(np.array([1e6, 1e8]), 1e10), [chinchilla_loss(1e6, 1e10), chinchilla_loss(1e8, 1e10)])


def test_bad_inputs_raise_value_error_naming_the_argument():
    with pytest.raises(ValueError, match="N"):
        chinchilla_loss(0.0, 1e9)
    with pytest.raises(ValueError, match="D"):
        chinchilla_loss(1e6, torch.tensor([1e9, -1.0]))
    with pytest.raises(ValueError, match="alpha"):
        chinchilla_loss(1e6, 1e9, {"E": 1, "A": 1, "B": 1, "beta": 0.3})
    with pytest.raises(ValueError, match="C"):
        compute_optimal(-1.0)
    with pytest.raises(ValueError, match="same length"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0])


@pytest.mark.parametrize("params,C,ratio", [(None, 1e18, 26), (None, 5.76e23, 93), (BESIROGLU_PARAMS, 5.76e23, 18)])
def test_tokens_per_parameter_is_not_a_constant_20(params, C, ratio):
    n, d = compute_optimal(C, params)
    assert 6 * n * d == pytest.approx(C, rel=1e-12)
    assert round(d / n) == ratio


@pytest.mark.parametrize("params", [CHINCHILLA_PARAMS, BESIROGLU_PARAMS, {"E": 0.5, "A": 10.0, "B": 30.0, "alpha": 0.6, "beta": 0.2}])
@pytest.mark.parametrize("C", [1e15, 1e18, 5.76e23])
def test_closed_form_matches_brute_force_search_along_the_isoflop_curve(params, C):
    n_closed, _ = compute_optimal(C, params)
    # Independent reference: evaluate L on 200,001 values of N along C = 6ND and take the smallest.
    n_grid = np.logspace(math.log10(n_closed) - 3, math.log10(n_closed) + 3, 200_001)
    losses = params["E"] + params["A"] * n_grid ** -params["alpha"] + params["B"] * (C / (6 * n_grid)) ** -params["beta"]
    n_brute = n_grid[np.argmin(losses)]
    assert n_brute == pytest.approx(n_closed, rel=2e-4)
    assert isoflop_loss(C, n_closed, params) <= losses.min() + 1e-12


# ---------------------------------------------------------------- fitting

def test_fit_power_law_recovers_k_and_c_exactly_without_noise():
    x = np.logspace(2, 8, 13)
    k, c = fit_power_law(x, 7.5 * x ** -0.076)
    assert k == pytest.approx(7.5, rel=1e-10)
    assert c == pytest.approx(-0.076, abs=1e-12)


def test_fit_power_law_agrees_with_numpy_polyfit_on_noisy_data():
    rng = np.random.default_rng(0)
    x = np.logspace(1, 6, 40)
    y = 3.0 * x ** 0.5 * np.exp(0.1 * rng.standard_normal(40))
    k, c = fit_power_law(torch.tensor(x), torch.tensor(y))
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    assert c == pytest.approx(slope, rel=1e-9)
    assert k == pytest.approx(math.exp(intercept), rel=1e-9)
    assert abs(c - 0.5) < 0.05


def _synthetic_grid(params, noise=0.0, seed=0):
    n = np.logspace(3, 6, 6)
    d = np.logspace(4, 8, 8)
    nn, dd = np.meshgrid(n, d, indexing="ij")
    loss = chinchilla_loss(nn, dd, params) * np.exp(noise * np.random.default_rng(seed).standard_normal(nn.shape))
    return nn.ravel(), dd.ravel(), loss.ravel()


def test_fit_chinchilla_recovers_known_parameters_from_noise_free_data():
    true = {"E": 1.8, "A": 60.0, "B": 400.0, "alpha": 0.45, "beta": 0.35}
    fit = fit_chinchilla(*_synthetic_grid(true))
    for key in ("E", "alpha", "beta"):
        assert fit[key] == pytest.approx(true[key], rel=1e-3), key
    for key in ("A", "B"):
        assert fit[key] == pytest.approx(true[key], rel=2e-2), key
    assert fit["huber"] < 1e-8


def test_fit_chinchilla_is_robust_to_small_noise():
    true = {"E": 1.8, "A": 60.0, "B": 400.0, "alpha": 0.45, "beta": 0.35}
    n, d, loss = _synthetic_grid(true, noise=0.002)
    fit = fit_chinchilla(n, d, loss)
    assert fit["E"] == pytest.approx(1.8, abs=0.03)
    assert fit["alpha"] == pytest.approx(0.45, abs=0.05)
    assert fit["beta"] == pytest.approx(0.35, abs=0.05)


def test_fit_chinchilla_many_solves_each_weighting_as_fit_chinchilla_does():
    """Chapter 8's bootstrap: one batched fit of several weightings equals separate fits of the repeated rows."""
    true = {"E": 1.8, "A": 60.0, "B": 400.0, "alpha": 0.45, "beta": 0.35}
    n, d, loss = _synthetic_grid(true, noise=0.01, seed=1)
    rng = np.random.default_rng(0)
    weights = np.stack([np.ones(len(n))] + [rng.multinomial(len(n), np.ones(len(n)) / len(n)) for _ in range(2)])
    start = torch.tensor([math.log(50.0), math.log(300.0), math.log(1.7), 0.4, 0.4], dtype=torch.float64)
    theta, val = fit_chinchilla_many(n, d, loss, weights, start.expand(len(weights), 5))
    for w, th, v in zip(weights, theta, val):
        rows = np.repeat(np.arange(len(n)), w.astype(int))
        ref = fit_chinchilla(n[rows], d[rows], loss[rows], grid=start[None], n_refine=None)   # L-BFGS, same start
        assert float(v) <= ref["huber"] * (1 + 1e-6) + 1e-12          # at least as good a minimum
        assert math.exp(th[2]) == pytest.approx(ref["E"], abs=5e-3)
        assert float(th[4]) == pytest.approx(ref["beta"], abs=5e-3)
    with pytest.raises(ValueError, match="weights"):
        fit_chinchilla_many(n, d, loss, weights[:, :-1], start.expand(len(weights), 5))


# ---------------------------------------------------------------- the source of known entropy

def _brute_force_stationary(src):
    """Dense context-to-context matrix built by loops; π as its left eigenvector for eigenvalue 1."""
    v = src.vocab_size
    m = np.zeros((src.n_contexts, src.n_contexts))
    for c in range(src.n_contexts):
        for x in range(v):
            m[c, (c * v + x) % src.n_contexts] += float(src.probs[c, x])
    w, vecs = np.linalg.eig(m.T)
    pi = np.real(vecs[:, np.argmin(np.abs(w - 1))])
    return pi / pi.sum()


@pytest.mark.parametrize("vocab,order,zipf", [(5, 1, 0.0), (4, 2, 1.0), (3, 3, 0.5)])
def test_stationary_distribution_matches_the_eigenvector(vocab, order, zipf):
    src = MarkovSource(vocab, order, sharpness=1.5, zipf=zipf, seed=1)
    assert np.allclose(src.stationary.numpy(), _brute_force_stationary(src), atol=1e-10)


@pytest.mark.parametrize("vocab,order", [(8, 1), (4, 2)])
def test_entropy_rate_matches_a_monte_carlo_estimate(vocab, order):
    src = MarkovSource(vocab, order, sharpness=2.0, zipf=1.0, seed=3)
    x = src.sample(400, 501, torch.Generator().manual_seed(0))
    # Independent Monte-Carlo estimate: −ln p(x_t | context) looked up one token at a time.
    xs, probs = x.tolist(), src.probs.tolist()
    nll = []
    for row in xs[:40]:
        for t in range(order, len(row)):
            c = 0
            for s in row[t - order:t]:
                c = c * vocab + s
            nll.append(-math.log(probs[c][row[t]]))
    assert np.allclose(src.nll(x[:40]).flatten().numpy(), nll, atol=1e-12)
    all_nll = src.nll(x).flatten().double()
    # sequences are independent; positions within one are nearly so: allow 5 standard errors
    se = float(all_nll.std()) / math.sqrt(len(all_nll))
    assert abs(float(all_nll.mean()) - src.entropy_rate()) < 5 * se
    assert src.entropy_rate() < math.log(vocab)


def test_samples_follow_the_transition_table():
    src = MarkovSource(6, 1, sharpness=1.0, seed=2)
    x = src.sample(2000, 60, torch.Generator().manual_seed(1))
    counts = torch.zeros(6, 6)
    counts.index_put_((x[:, :-1].flatten(), x[:, 1:].flatten()), torch.ones(x[:, 1:].numel()), accumulate=True)
    freq = counts / counts.sum(1, keepdim=True)
    assert torch.allclose(freq.double(), src.probs, atol=0.02)
    first = torch.bincount(x[:, 0], minlength=6).double() / len(x)
    assert torch.allclose(first, src.stationary, atol=0.04)


def test_source_rejects_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size"):
        MarkovSource(1, 1)
    src = MarkovSource(4, 2)
    with pytest.raises(ValueError, match="length"):
        src.sample(3, 1)
    with pytest.raises(ValueError, match="x must be"):
        src.nll(torch.zeros(3, 2, dtype=torch.long))


# ---------------------------------------------------------------- the measuring loop

@pytest.fixture
def one_thread():
    """Tiny models train several times faster on one CPU thread than on two that contend."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _small_run(eval_at):
    src = MarkovSource(16, 1, sharpness=2.0, seed=0)
    eval_x = src.sample(64, 17, torch.Generator().manual_seed(5))
    g = tfmlib.seed_everything(0)
    model = tfmlib.DecoderLM(16, d_model=16, n_heads=1, n_layers=1, max_len=16, pos="none")
    rows = train_on_source(model, src, eval_at, batch_size=8, seq_len=16, lr=1e-2, eval_x=eval_x,
                           generator=g, progress=False)
    return src, eval_x, model, rows


def test_train_on_source_counts_tokens_and_learns(one_thread):
    src, eval_x, model, rows = _small_run([0, 30, 60])
    assert [r["D"] for r in rows] == [0, 30 * 8 * 16, 60 * 8 * 16]
    assert all(r["N"] == count_parameters(model) == sum(p.numel() for p in model.parameters()) for r in rows)
    assert all(r["C"] == 6 * r["N"] * r["D"] for r in rows)
    # the untrained model is near uniform; training lowers the loss; nothing beats the true source
    assert rows[0]["loss"] == pytest.approx(math.log(16), abs=0.3)
    assert rows[2]["loss"] < rows[0]["loss"] - 0.3
    floor = float(src.nll(eval_x).mean())
    assert rows[2]["loss"] > floor
    with torch.no_grad():   # the final row is the final model's held-out loss
        logits = model(eval_x[:, :-1])
        direct = torch.nn.functional.cross_entropy(logits.reshape(-1, 16), eval_x[:, 1:].reshape(-1))
    assert rows[2]["loss"] == pytest.approx(float(direct), rel=1e-6)


def test_checkpoint_of_a_long_run_equals_a_short_run(one_thread):
    _, _, _, long_rows = _small_run([20, 40])
    _, _, _, short_rows = _small_run([20])
    assert long_rows[0]["loss"] == pytest.approx(short_rows[0]["loss"], rel=1e-6)
