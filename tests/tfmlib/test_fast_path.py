"""The fast path (PyTorch's fused kernel) against the teaching path, at float64, for every mask kind."""
import pytest
import torch

import tfmlib
from tfmlib.models import POSITION_SCHEMES, position_parts

TOL64 = 1e-10


def qkv(shape_q, shape_k, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(shape_q, generator=g, dtype=torch.float64)
    k = torch.randn(shape_k, generator=g, dtype=torch.float64)
    v = torch.randn(shape_k, generator=g, dtype=torch.float64)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def masks(b, h, tq, tk):
    """Every mask kind tfmlib uses, each with at least one fully masked row where possible."""
    g = torch.Generator().manual_seed(1)
    pad = tfmlib.padding_mask(torch.tensor([tk, 0, tk - 2][:b]), tk)          # batch 1: no real key at all
    random = torch.rand(b, h, tq, tk, generator=g) > 0.5
    random[0, 0, 1] = False
    return {
        "none": None,
        "2-D (Tq, Tk)": tfmlib.causal_mask_offset(tq, tk),
        "3-D per batch": (torch.rand(b, tq, tk, generator=g) > 0.3)[:, None],
        "4-D padding": tfmlib.attention_mask(pad, q_len=tq),
        "4-D random, empty row": random,
    }


@pytest.mark.parametrize("kind", list(masks(3, 2, 5, 7)))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_attention_equals_teaching_path(kind, causal, with_bias):
    b, h, tq, tk = 3, 2, 5, 7
    mask = masks(b, h, tq, tk)[kind]
    q, k, v = qkv((b, h, tq, 4), (b, h, tk, 4), grad=True)
    bias = tfmlib.alibi_bias(h, tk, n_queries=tq).double() if with_bias else None
    full = mask
    if causal:
        c = tfmlib.causal_mask_offset(tq, tk)
        full = c if mask is None else mask & c
    ref, _ = tfmlib.scaled_dot_product_attention(q, k, v, mask=full, bias=bias)
    out = tfmlib.fast_attention(q, k, v, mask=mask, bias=bias, causal=causal)
    assert torch.isfinite(out).all()
    assert (out - ref).abs().max() <= TOL64
    if full is not None:                                   # rows with no allowed key: zeros on both paths
        empty = ~full.expand(b, h, tq, tk).any(-1)
        assert (out[empty] == 0).all() and (ref[empty] == 0).all()
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for g1, g2 in zip(grads, ref_grads):
        assert torch.isfinite(g1).all() and (g1 - g2).abs().max() <= TOL64


def test_fast_attention_causal_square_uses_is_causal_and_matches():
    q, k, v = qkv((2, 3, 9, 8), (2, 3, 9, 8))
    ref, _ = tfmlib.scaled_dot_product_attention(q, k, v, mask=tfmlib.causal_mask(9))
    assert (tfmlib.fast_attention(q, k, v, causal=True) - ref).abs().max() <= TOL64


def test_fast_attention_checks_its_inputs():
    q, k, v = qkv((2, 3, 4), (2, 5, 4))
    with pytest.raises(ValueError, match=r"mask must have dtype torch.bool"):
        tfmlib.fast_attention(q, k, v, mask=torch.ones(3, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) does not broadcast.*\(2, 3, 5\)"):
        tfmlib.fast_attention(q, k, v, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"causal mask needs Tq <= Tk, got Tq=5 and Tk=3"):
        tfmlib.fast_attention(k, q, q, causal=True)


def attention_module(pos, d=16, h=4):
    torch.manual_seed(0)
    _, cls = position_parts(pos, d, 64, 3)
    return cls(d, h, 0.0).double().eval()


@pytest.mark.parametrize("pos", POSITION_SCHEMES)
@pytest.mark.parametrize("case", ["causal flag", "causal mask", "padding", "causal+padding", "none"])
def test_module_fast_path_equals_weights_path(pos, case):
    """need_weights=True (teaching path) and False (fast path) give the same output, every scheme."""
    att = attention_module(pos)
    x = torch.randn(3, 6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    pad = tfmlib.padding_mask(torch.tensor([6, 3, 1]), 6)
    kwargs = {"causal flag": dict(causal=True), "causal mask": dict(mask=tfmlib.causal_mask(6)),
              "padding": dict(mask=tfmlib.attention_mask(pad)),
              "causal+padding": dict(mask=tfmlib.attention_mask(pad), causal=True), "none": {}}[case]
    slow, w = att(x, need_weights=True, **kwargs)
    fast = att(x, **kwargs)
    assert w.shape == (3, 4, 6, 6)
    assert (fast - slow).abs().max() <= TOL64
    att.store_weights = True                              # plots: the weights path, the same output
    assert (att(x, **kwargs) - slow).abs().max() <= TOL64 and torch.equal(att.last_weights, w)


def test_fast_path_is_taken_only_without_weights(monkeypatch):
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    att = tfmlib.MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    att(x, causal=True)
    assert calls == [1]
    att(x, causal=True, need_weights=True)
    att.store_weights = True
    att(x, causal=True)
    assert calls == [1]


def test_decoder_lm_training_step_equal_on_both_paths():
    """A whole model: loss and gradients with the fast path equal those with weights recorded."""
    for pos in POSITION_SCHEMES:
        torch.manual_seed(0)
        model = tfmlib.DecoderLM(11, d_model=16, n_heads=2, n_layers=2, max_len=16, pos=pos,
                                 norm_first=True).double()
        idx = torch.randint(0, 11, (2, 12))
        results = []
        for record in (False, True):
            tfmlib.record_attention(model, record)
            model.zero_grad()
            loss = model(idx).logsumexp(-1).mean()
            loss.backward()
            results.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
        (l1, g1), (l2, g2) = results
        assert abs(l1 - l2) <= TOL64, pos
        assert all((a - b).abs().max() <= 1e-9 for a, b in zip(g1, g2)), pos
