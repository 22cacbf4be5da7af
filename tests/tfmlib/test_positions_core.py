"""Position schemes checked against their papers' formulas, written out independently."""
import cmath
import math

import pytest
import torch

import tfmlib


def test_sinusoidal_matches_formula():
    n, d = 9, 6
    pe = tfmlib.sinusoidal_positions(n, d)
    for p in range(n):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    with pytest.raises(ValueError, match="even d"):
        tfmlib.sinusoidal_positions(4, 5)


def test_rope_matches_complex_rotation():
    torch.manual_seed(0)
    x = torch.randn(5, 4, dtype=torch.float64)
    out = tfmlib.rope(x, offset=2)
    for t in range(5):
        for i in range(2):
            z = complex(x[t, 2 * i], x[t, 2 * i + 1]) * cmath.exp(1j * (t + 2) * 10000 ** (-2 * i / 4))
            assert out[t, 2 * i].item() == pytest.approx(z.real, abs=1e-12)
            assert out[t, 2 * i + 1].item() == pytest.approx(z.imag, abs=1e-12)


def test_rope_scores_depend_only_on_offset():
    torch.manual_seed(0)
    q, k = torch.randn(1, 8, dtype=torch.float64), torch.randn(1, 8, dtype=torch.float64)
    def score(p, r):
        return (tfmlib.rope(q, offset=p) * tfmlib.rope(k, offset=r)).sum().item()
    assert score(3, 7) == pytest.approx(score(10, 14), abs=1e-10)
    assert score(3, 7) != pytest.approx(score(3, 8), abs=1e-6)


def test_alibi_slopes_and_bias():
    assert tfmlib.alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]   # Press et al., 8 heads
    bias = tfmlib.alibi_bias(8, 4)
    assert bias.shape == (8, 4, 4)
    assert bias[0, 3, 1].item() == pytest.approx(-0.5 * 2)
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()


def test_relative_index_and_attention_against_loops():
    n, k, d = 6, 2, 4
    idx = tfmlib.relative_position_index(n, k)
    for i in range(n):
        for j in range(n):
            assert idx[i, j].item() == max(-k, min(k, j - i)) + k
    torch.manual_seed(0)
    q, kk, v = (torch.randn(n, d, dtype=torch.float64) for _ in range(3))
    w_k, w_v = torch.randn(2 * k + 1, d, dtype=torch.float64), torch.randn(2 * k + 1, d, dtype=torch.float64)
    a_k, a_v = w_k[idx], w_v[idx]
    z, alpha = tfmlib.relative_attention(q, kk, v, a_k, a_v)
    for i in range(n):
        e = [(q[i] @ kk[j] + q[i] @ w_k[max(-k, min(k, j - i)) + k]).item() / math.sqrt(d) for j in range(n)]
        m = max(e)
        ex = [math.exp(x - m) for x in e]
        a = [x / sum(ex) for x in ex]
        zi = sum(a[j] * (v[j] + w_v[max(-k, min(k, j - i)) + k]) for j in range(n))
        assert torch.allclose(alpha[i], torch.tensor(a, dtype=torch.float64), atol=1e-12)
        assert torch.allclose(z[i], zi, atol=1e-12)


def test_learned_and_sinusoidal_modules():
    x = torch.zeros(2, 5, 8)
    assert torch.allclose(tfmlib.SinusoidalPositions(8, 16)(x)[0], tfmlib.sinusoidal_positions(5, 8))
    lp = tfmlib.LearnedPositions(8, 5)
    assert torch.allclose(lp(x)[1], lp.table.weight)
