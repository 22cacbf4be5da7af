"""Tests of tfmlib.efficient (chapter 7) against independent references: brute-force loops for the masks,
PyTorch's own scaled_dot_product_attention for the attention variants.  The KV cache: test_kv_cache.py."""
import pytest
import torch
import torch.nn.functional as F

import tfmlib
from tfmlib.efficient import (allowed_pairs, banded_attention, blockwise_attention, global_mask, peak_memory,
                              random_mask, sliding_window_mask, time_fn)


def brute_window(n, w):
    return torch.tensor([[abs(i - j) <= w for j in range(n)] for i in range(n)])


def torch_sdpa(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


# --- masks ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,w", [(1, 0), (5, 0), (7, 1), (10, 3), (6, 5), (4, 9)])
def test_sliding_window_mask_matches_loop(n, w):
    m = sliding_window_mask(n, w)
    assert m.dtype == torch.bool and m.shape == (n, n)
    assert torch.equal(m, brute_window(n, w))


def test_sliding_window_counts():
    n, w = 50, 4
    # every row has 2w+1 keys except the w rows at each end
    assert allowed_pairs(sliding_window_mask(n, w)) == n * (2 * w + 1) - w * (w + 1)


@pytest.mark.parametrize("idx", [[0], [0, 9], [3, 5, 7], []])
def test_global_mask_matches_loop(idx):
    n = 10
    ref = torch.tensor([[i in idx or j in idx for j in range(n)] for i in range(n)])
    m = global_mask(n, idx)
    assert m.dtype == torch.bool and torch.equal(m, ref)
    assert torch.equal(global_mask(n, torch.tensor(idx, dtype=torch.long)), ref)


def test_random_mask_rows_and_seed():
    n, r = 40, 6
    m = random_mask(n, r, torch.Generator().manual_seed(1))
    assert m.dtype == torch.bool and m.shape == (n, n)
    assert (m.sum(dim=1) == r).all()
    assert torch.equal(m, random_mask(n, r, torch.Generator().manual_seed(1)))
    assert not torch.equal(m, random_mask(n, r, torch.Generator().manual_seed(2)))
    assert len({tuple(row.tolist()) for row in m}) > n // 2  # rows are drawn independently
    assert random_mask(n, n, torch.Generator()).all() and not random_mask(n, 0, torch.Generator()).any()


def test_random_mask_is_uniform_over_keys():
    g = torch.Generator().manual_seed(0)
    n, r, draws = 8, 3, 600
    counts = sum(random_mask(n, r, g).float() for _ in range(draws))
    expected = draws * r / n  # 225 per cell; binomial sd ≈ 11.9
    assert (counts - expected).abs().max() < 6 * (draws * r / n * (1 - r / n)) ** 0.5


def test_mask_errors():
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(5, -1)
    with pytest.raises(ValueError, match="n must"):
        sliding_window_mask(0, 1)
    with pytest.raises(ValueError, match="global_idx"):
        global_mask(5, [5])
    with pytest.raises(ValueError, match="n_random"):
        random_mask(5, 6, torch.Generator())


# --- banded attention --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("t,w", [(1, 0), (9, 0), (16, 1), (33, 4), (12, 11), (10, 25)])
def test_banded_equals_dense_masked_float64(t, w):
    g = torch.Generator().manual_seed(t * 31 + w)
    q, k = torch.randn(2, 2, 3, t, 8, generator=g, dtype=torch.float64).unbind(0)
    v = torch.randn(2, 3, t, 5, generator=g, dtype=torch.float64)
    out = banded_attention(q, k, v, w)
    assert out.shape == (2, 3, t, 5)
    torch.testing.assert_close(out, torch_sdpa(q, k, v, brute_window(t, w)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, tfmlib.scaled_dot_product_attention(q, k, v, sliding_window_mask(t, w))[0],
                               rtol=1e-12, atol=1e-12)


def test_banded_float32_and_gradients():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 50, 16, generator=g).requires_grad_() for _ in range(3))
    out = banded_attention(q, k, v, 3)
    ref = torch_sdpa(q, k, v, brute_window(50, 3))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_banded_never_builds_n_by_n():
    n, w = 2048, 4
    q = k = v = torch.randn(1, n, 16)
    dense_bytes = n * n * 4
    assert peak_memory(lambda: banded_attention(q, k, v, w)) < dense_bytes / 8
    # the same measurement does see the n×n score matrix of the masked dense computation
    mask = sliding_window_mask(n, w)
    assert peak_memory(lambda: tfmlib.scaled_dot_product_attention(q, k, v, mask)) >= dense_bytes


def test_banded_errors():
    q = torch.randn(2, 10, 4)
    with pytest.raises(ValueError, match="same"):
        banded_attention(q, torch.randn(2, 9, 4), torch.randn(2, 9, 4), 2)
    with pytest.raises(ValueError, match="window"):
        banded_attention(q, q, q, -1)


# --- blockwise attention -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("tq,tk,block", [(1, 1, 1), (7, 13, 1), (16, 16, 4), (10, 37, 8), (20, 9, 64), (5, 30, 30)])
def test_blockwise_equals_torch_sdpa_float64(tq, tk, block):
    g = torch.Generator().manual_seed(tq * 100 + tk)
    q = torch.randn(2, 3, tq, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, tk, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, tk, 6, generator=g, dtype=torch.float64)
    out = blockwise_attention(q, k, v, block)
    assert out.shape == (2, 3, tq, 6) and out.dtype == torch.float64
    torch.testing.assert_close(out, torch_sdpa(q, k, v), rtol=1e-12, atol=1e-12)


def test_blockwise_large_scores_and_broadcast():
    g = torch.Generator().manual_seed(3)
    q = 30 * torch.randn(4, 1, 12, 16, generator=g)        # scores in the hundreds: exp would overflow naively
    k = 30 * torch.randn(1, 2, 40, 16, generator=g)
    v = torch.randn(1, 2, 40, 16, generator=g)
    out = blockwise_attention(q, k, v, 7)
    assert torch.isfinite(out).all()
    ref = torch_sdpa(q.double(), k.double(), v.double()).float()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_blockwise_memory_is_linear():
    n = 2048
    q = k = v = torch.randn(1, n, 16)
    peak = peak_memory(lambda: blockwise_attention(q, k, v, 64))
    assert peak < n * n * 4 / 4
    q2 = torch.randn(1, 2 * n, 16)
    assert peak_memory(lambda: blockwise_attention(q2, q2, q2, 64)) < 2.5 * peak  # doubling n doubles memory
    assert peak_memory(lambda: tfmlib.scaled_dot_product_attention(q, k, v)) >= n * n * 4


def test_blockwise_errors():
    q = torch.randn(2, 10, 4)
    with pytest.raises(ValueError, match="block_size"):
        blockwise_attention(q, q, q, 0)
    with pytest.raises(ValueError, match="Tk"):
        blockwise_attention(q, q, torch.randn(2, 9, 4), 3)


# --- measuring ---------------------------------------------------------------------------------------------------

def test_peak_memory_counts_tensor_bytes():
    assert peak_memory(lambda: torch.empty(1000, 1000)) == 4_000_000
    assert peak_memory(lambda: torch.empty(500, 100, dtype=torch.float64).exp()) == 2 * 400_000


def test_time_fn_is_positive():
    assert time_fn(lambda: torch.randn(10, 10) @ torch.randn(10, 10), repeats=3) > 0
