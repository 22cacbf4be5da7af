"""Chapter 5 (positions): tfmlib.positions and tfmlib.data.LagTask against direct formulas and loops."""
import math

import pytest
import torch

import tfmlib
from tfmlib.data import FIRST_SYMBOL, PAD, LagTask
from tfmlib.positions import (ALiBiMultiHeadAttention, LearnedPositions, RelativePositions, alibi_bias,
                              alibi_slopes, relative_attention, relative_position_index, rope,
                              sinusoidal_offset_matrix, sinusoidal_positions)


def test_sinusoidal_positions_matches_the_formula_entry_by_entry():
    n, d = 7, 10
    pe = sinusoidal_positions(n, d)
    for p in range(n):
        for i in range(d // 2):
            w = 1.0 / 10000 ** (2 * i / d)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(p * w), abs=1e-6)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(p * w), abs=1e-6)


@pytest.mark.parametrize("bad", [(0, 4), (5, 3), (5, 0)])
def test_sinusoidal_positions_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="d="):
        sinusoidal_positions(*bad)


@pytest.mark.parametrize("k", [0, 1, 5, 37])
def test_offset_matrix_maps_every_position_k_steps_on(k):
    n, d = 120, 16
    pe = sinusoidal_positions(n + k, d).double()
    m = sinusoidal_offset_matrix(k, d)
    assert torch.allclose(pe[:n] @ m.T, pe[k:k + n], atol=1e-5)
    # Independent check: the least-squares map from PE[p] to PE[p + k] over many p (a float64 table from
    # the formula, d = 8 so that every frequency turns enough to make the fit well posed) is M_k.
    d8, n8 = 8, 3000
    w = 10000.0 ** (-torch.arange(0, d8, 2, dtype=torch.float64) / d8)
    ang = torch.arange(n8 + k, dtype=torch.float64)[:, None] * w
    table = torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(1)
    fitted = torch.linalg.lstsq(table[:n8], table[k:k + n8]).solution.T
    assert torch.allclose(fitted, sinusoidal_offset_matrix(k, d8), atol=1e-6)
    assert torch.allclose(m @ m.T, torch.eye(d, dtype=m.dtype), atol=1e-12)  # a rotation


def test_offset_matrix_rejects_odd_d():
    with pytest.raises(ValueError, match="d=5"):
        sinusoidal_offset_matrix(1, 5)


def test_relative_position_index_brute_force():
    n, k = 9, 3
    idx = relative_position_index(n, k)
    assert idx.dtype == torch.long and idx.shape == (n, n)
    for i in range(n):
        for j in range(n):
            assert idx[i, j].item() == max(-k, min(k, j - i)) + k
    with pytest.raises(ValueError, match="k must be"):
        relative_position_index(4, -1)


def test_relative_positions_look_up_the_clipped_rows():
    rel = RelativePositions(d_head=4, k=2)
    a_k, a_v = rel(6)
    assert a_k.shape == a_v.shape == (6, 6, 4)
    assert torch.equal(a_k[0, 5], rel.w_k.weight[4])   # j − i = 5 clipped to +2 → row 4
    assert torch.equal(a_v[5, 0], rel.w_v.weight[0])   # j − i = −5 clipped to −2 → row 0
    assert torch.equal(a_k[3, 3], rel.w_k.weight[2])   # j − i = 0 → row k


def test_relative_attention_matches_shaw_loops():
    g = torch.Generator().manual_seed(0)
    b, n, d = 2, 5, 4
    q, k, v = (torch.randn(b, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    a_k, a_v = (torch.randn(n, n, d, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    z, alpha = relative_attention(q, k, v, a_k, a_v, mask=mask)
    for bb in range(b):
        for i in range(n):
            e = [(q[bb, i] @ (k[bb, j] + a_k[i, j])).item() / math.sqrt(d) if j <= i else -math.inf
                 for j in range(n)]
            w = torch.softmax(torch.tensor(e, dtype=torch.float64), 0)
            zi = sum(w[j] * (v[bb, j] + a_v[i, j]) for j in range(n))
            assert torch.allclose(alpha[bb, i], w, atol=1e-12)
            assert torch.allclose(z[bb, i], zi, atol=1e-12)


def _rope_by_complex_numbers(x, base=10000.0, offset=0):
    """Su et al.'s rotation written with complex numbers: (x_2i + i·x_2i+1) · e^(i·p·θ_i)."""
    t, d = x.shape[-2:]
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    p = torch.arange(offset, offset + t, dtype=torch.float64)[:, None]
    z = torch.complex(x[..., 0::2].double(), x[..., 1::2].double()) * torch.polar(torch.ones_like(p * theta), p * theta)
    return torch.stack([z.real, z.imag], dim=-1).flatten(-2)


def test_rope_matches_complex_multiplication_and_offset():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 11, 8, generator=g, dtype=torch.float64)
    assert torch.allclose(rope(x), _rope_by_complex_numbers(x), atol=1e-12)
    assert torch.allclose(rope(x, offset=4), _rope_by_complex_numbers(x, offset=4), atol=1e-12)
    assert torch.allclose(rope(x, offset=4), rope(torch.cat([x[..., :4, :], x], -2))[..., 4:, :], atol=1e-12)


def test_rope_scores_depend_only_on_the_offset():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g, dtype=torch.float64)
    n = 40
    rq, rk = rope(q.expand(n, 16)), rope(k.expand(n, 16))  # the same q and k at every position
    s = rq @ rk.T                                            # s[p, r] = q_p · k_r
    for off in (-7, 0, 3, 25):
        diag = torch.diagonal(s, offset=off)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-10)
    assert rope(q.expand(1, 16)).norm().item() == pytest.approx(q.norm().item())  # rotations keep norms


def test_rope_rejects_odd_features():
    with pytest.raises(ValueError, match="even"):
        rope(torch.randn(3, 5))


def test_alibi_slopes_are_the_papers():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)]))
    assert torch.allclose(alibi_slopes(16), torch.tensor([2.0 ** (-h / 2) for h in range(1, 17)]))
    # Not a power of two: 8 slopes of the 8-head sequence, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    want12 = [2.0 ** -h for h in range(1, 9)] + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5]
    assert torch.allclose(alibi_slopes(12), torch.tensor(want12))
    assert torch.allclose(alibi_slopes(1), torch.tensor([2.0 ** -8]))
    with pytest.raises(ValueError, match="n_heads"):
        alibi_slopes(0)


def test_alibi_bias_brute_force():
    h, n = 4, 6
    bias, m = alibi_bias(h, n), alibi_slopes(h)
    for hh in range(h):
        for i in range(n):
            for j in range(i + 1):
                assert bias[hh, i, j].item() == pytest.approx(-m[hh].item() * (i - j))


def test_alibi_attention_adds_the_bias_to_scaled_scores():
    torch.manual_seed(0)
    att = ALiBiMultiHeadAttention(8, 2)
    x = torch.randn(1, 5, 8)
    mask = tfmlib.causal_mask(5)
    _, w = att(x, mask=mask, need_weights=True)
    q = att.q_proj(x).view(1, 5, 2, 4).transpose(1, 2)
    k = att.k_proj(x).view(1, 5, 2, 4).transpose(1, 2)
    m = alibi_slopes(2)
    for hh in range(2):
        for i in range(5):
            e = torch.tensor([(q[0, hh, i] @ k[0, hh, j]).item() / 2.0 - m[hh].item() * (i - j) for j in range(i + 1)])
            assert torch.allclose(w[0, hh, i, : i + 1], torch.softmax(e, 0), atol=1e-5)


def test_learned_positions_have_no_vector_past_max_len():
    lp = LearnedPositions(4, max_len=6)
    assert lp(torch.zeros(2, 6, 4)).shape == (2, 6, 4)
    with pytest.raises(ValueError, match="exceeds"):
        lp(torch.zeros(2, 7, 4))


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(0)
    att = tfmlib.MultiHeadAttention(8, 2)
    x = torch.randn(1, 5, 8)
    perm = torch.tensor([0, 4, 2, 3, 1])          # "the cat chased the dog" → "the dog chased the cat"
    assert torch.allclose(att(x[:, perm]), att(x)[:, perm], atol=1e-6)
    pe = sinusoidal_positions(5, 8)
    assert not torch.allclose(att(x[:, perm] + pe), (att(x + pe))[:, perm], atol=1e-3)


@pytest.mark.parametrize("pos", ["none", "sinusoidal", "learned", "relative", "rope", "alibi"])
def test_decoder_lm_runs_every_scheme_and_learned_stops_at_max_len(pos):
    torch.manual_seed(0)
    model = tfmlib.DecoderLM(13, d_model=16, n_heads=2, n_layers=1, max_len=8, pos=pos, max_rel=3)
    assert model(torch.randint(13, (2, 8))).shape == (2, 8, 13)
    if pos == "learned":
        with pytest.raises(ValueError, match="exceeds"):
            model(torch.randint(13, (2, 9)))
    else:
        assert model(torch.randint(13, (2, 32))).shape == (2, 32, 13)


def test_lag_task_targets_are_the_tokens_lag_steps_back():
    g = torch.Generator().manual_seed(0)
    task = LagTask(seq_len=12, lag=3, n_symbols=5)
    x, y = task.batch(4, generator=g)
    assert x.shape == y.shape == (4, 12) and task.vocab_size == FIRST_SYMBOL + 5
    assert ((x >= FIRST_SYMBOL) & (x < FIRST_SYMBOL + 5)).all()
    for b in range(4):
        for t in range(12):
            assert y[b, t].item() == (x[b, t - 3].item() if t >= 3 else PAD)
    x2, _ = task.batch(4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="lag"):
        LagTask(12, 0)
