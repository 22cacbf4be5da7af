"""tfmlib.attention checked against PyTorch's own attention, never against a copy of our code."""

import pytest
import torch
import torch.nn.functional as F

import tfmlib
from conftest import TOL, max_err

DTYPES = [torch.float32, torch.float64]


def random_mask(shape, device, gen):
    """A random boolean mask with at least one allowed key in every row (PyTorch gives NaN otherwise)."""
    mask = torch.rand(shape, generator=gen) > 0.5
    mask[..., 0] = True
    return mask.to(device)


def torch_weights(q, k, mask=None, scale=None):
    """Attention weights from PyTorch's SDPA: attending over identity values returns the weights."""
    t_k = k.shape[-2]
    eye = torch.eye(t_k, dtype=q.dtype, device=q.device).expand(*k.shape[:-2], t_k, t_k)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [
    ((5, 8), (7, 8), (7, 3)),                         # no batch dimension
    ((2, 5, 8), (2, 7, 8), (2, 7, 4)),                # batch
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)),       # batch and heads
    ((2, 3, 5, 8), (1, 3, 7, 8), (2, 1, 7, 6)),       # broadcast batch and head dimensions
])
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_matches_pytorch(device, dtype, shapes, masked):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=gen, dtype=dtype).to(device) for s in shapes)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    mask = random_mask((*batch, q.shape[-2], k.shape[-2]), device, gen) if masked else None
    out, weights = tfmlib.scaled_dot_product_attention(q, k, v, mask=mask)
    k_b, v_b = k.expand(*batch, *k.shape[-2:]), v.expand(*batch, *v.shape[-2:])
    q_b = q.expand(*batch, *q.shape[-2:])
    expected = F.scaled_dot_product_attention(q_b, k_b, v_b, attn_mask=mask)
    assert out.shape == expected.shape
    assert max_err(out, expected) <= TOL[dtype]
    assert max_err(weights, torch_weights(q_b, k_b, mask)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_broadcast_mask_and_scale(device, dtype):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 6, 16, generator=gen, dtype=dtype).to(device)
    k = torch.randn(2, 4, 6, 16, generator=gen, dtype=dtype).to(device)
    v = torch.randn(2, 4, 6, 16, generator=gen, dtype=dtype).to(device)
    mask = tfmlib.causal_mask(6, device=device)                       # (Tq, Tk), broadcast over B and H
    out, _ = tfmlib.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.3)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    assert max_err(out, expected) <= TOL[dtype]
    causal, _ = tfmlib.scaled_dot_product_attention(q, k, v, mask=mask)
    assert max_err(causal, F.scaled_dot_product_attention(q, k, v, is_causal=True)) <= TOL[dtype]


def test_fully_masked_row_gives_zeros_not_nan(device):
    q = torch.randn(2, 3, 4, device=device, requires_grad=True)
    k = torch.randn(2, 5, 4, device=device, requires_grad=True)
    v = torch.randn(2, 5, 4, device=device, requires_grad=True)
    mask = torch.ones(2, 3, 5, dtype=torch.bool, device=device)
    mask[0, 1] = False                      # query 1 of batch 0 may attend to nothing
    out, weights = tfmlib.scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (out[0, 1] == 0).all() and (weights[0, 1] == 0).all()
    assert torch.allclose(weights[1].sum(-1), torch.ones(3, device=device))
    (out.sum() + weights.sum()).backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 3, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(2, 5, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(2, 5, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    mask = random_mask((2, 3, 5), "cpu", gen)
    assert torch.autograd.gradcheck(lambda q, k, v: tfmlib.scaled_dot_product_attention(q, k, v, mask=mask),
                                    (q, k, v))


def test_dropout_on_weights():
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 2)
    out, weights = tfmlib.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert (out == 0).all()                                     # every weight dropped
    assert torch.allclose(weights.sum(-1), torch.ones(1, 3))    # returned weights are pre-dropout


def test_causal_mask_matches_pytorch(device):
    for n in (1, 2, 7):
        ours = tfmlib.causal_mask(n, device=device)
        theirs = torch.nn.Transformer.generate_square_subsequent_mask(n, device=device)  # -inf = blocked
        assert ours.dtype == torch.bool and ours.shape == (n, n)
        assert torch.equal(ours, theirs == 0)


def test_padding_and_combined_masks():
    pad = tfmlib.padding_mask(torch.tensor([3, 1, 4]), 4)
    assert pad.tolist() == [[True, True, True, False], [True, False, False, False], [True] * 4]
    m = tfmlib.attention_mask(pad, causal=True)
    assert m.shape == (3, 1, 4, 4)
    for b in range(3):
        for i in range(4):
            for j in range(4):
                assert m[b, 0, i, j].item() == (bool(pad[b, j]) and j <= i)
    cross = tfmlib.attention_mask(pad, q_len=2)
    assert cross.shape == (3, 1, 2, 4) and torch.equal(cross[:, 0, 1], pad)


def copy_into_torch_mha(ours, theirs):
    d = ours.d_model
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    assert theirs.in_proj_weight.shape == (3 * d, d)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["self", "cross", "causal", "padding", "causal+padding"])
def test_mha_matches_torch_multihead_attention(device, dtype, case):
    torch.manual_seed(0)
    d, h, b, tq, tk = 16, 4, 3, 5, 7
    ours = tfmlib.MultiHeadAttention(d, h).to(device, dtype).eval()
    theirs = torch.nn.MultiheadAttention(d, h, batch_first=True).to(device, dtype).eval()
    copy_into_torch_mha(ours, theirs)
    x = torch.randn(b, tq, d, device=device, dtype=dtype)
    context = torch.randn(b, tk, d, device=device, dtype=dtype) if case == "cross" else None
    kv = x if context is None else context
    lengths = torch.tensor([5, 2, 4])
    mask = attn_mask = key_padding = None
    if case == "causal":
        mask = tfmlib.causal_mask(tq, device=device)
        attn_mask = ~mask                                   # PyTorch: True = may NOT attend
    if case in ("padding", "causal+padding"):
        pad = tfmlib.padding_mask(lengths, tq).to(device)
        mask = tfmlib.attention_mask(pad, causal=case == "causal+padding")
        key_padding = ~pad
        if case == "causal+padding":
            attn_mask = ~tfmlib.causal_mask(tq, device=device)
    out, w = ours(x, context=context, mask=mask, need_weights=True)
    ref, ref_w = theirs(x, kv, kv, key_padding_mask=key_padding, attn_mask=attn_mask,
                        need_weights=True, average_attn_weights=False)
    assert out.shape == (b, tq, d) and w.shape == (b, h, tq, kv.shape[1])
    assert max_err(out, ref) <= TOL[dtype]
    assert max_err(w, ref_w) <= TOL[dtype]


def test_mha_three_dim_mask_is_shared_by_heads():
    torch.manual_seed(0)
    mha = tfmlib.MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8)
    m3 = tfmlib.causal_mask(4).expand(2, 4, 4)
    assert torch.allclose(mha(x, mask=m3), mha(x, mask=tfmlib.causal_mask(4)))


def test_error_messages():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=r"mask must have dtype torch.bool.*torch.float32"):
        tfmlib.scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) does not broadcast.*\(2, 3, 5\)"):
        tfmlib.scaled_dot_product_attention(q, k, v, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"q and k must share.*\(2, 3, 4\).*\(2, 5, 3\)"):
        tfmlib.scaled_dot_product_attention(q, torch.randn(2, 5, 3), v)
    with pytest.raises(ValueError, match=r"k and v must have the same number of keys.*\(2, 5, 4\).*\(2, 6, 6\)"):
        tfmlib.scaled_dot_product_attention(q, k, torch.randn(2, 6, 6))
    with pytest.raises(ValueError, match=r"batch dimensions.*do not broadcast"):
        tfmlib.scaled_dot_product_attention(q, torch.randn(3, 5, 4), torch.randn(3, 5, 6))
    with pytest.raises(ValueError, match=r"q must be a torch.Tensor"):
        tfmlib.scaled_dot_product_attention([[1.0]], k, v)
    with pytest.raises(ValueError, match=r"d_model=10 must be divisible by n_heads=3"):
        tfmlib.MultiHeadAttention(10, 3)
    mha = tfmlib.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=8\), got \(2, 3, 6\)"):
        mha(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"context must have shape"):
        mha(torch.randn(2, 3, 8), context=torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, max_len=3\]"):
        tfmlib.padding_mask(torch.tensor([4]), 3)
    with pytest.raises(ValueError, match=r"lengths must be a 1-D integer tensor"):
        tfmlib.padding_mask(torch.tensor([1.5]), 3)
    with pytest.raises(ValueError, match=r"n must be a positive int"):
        tfmlib.causal_mask(0)


def test_split_merge_heads_feature_order():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    heads = tfmlib.split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[:, 1], x[..., 2:4])          # head h holds features h*d_h ... (h+1)*d_h - 1
    assert torch.equal(tfmlib.merge_heads(heads), x)
