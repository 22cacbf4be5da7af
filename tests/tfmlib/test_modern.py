"""Chapter 9's pieces: RMSNorm, SwiGLU, RoPE at any positions, grouped-query attention and its cache, top-p,
the modern GPT built from them and its learning-rate schedule."""
import math

import pytest
import torch
import torch.nn.functional as F

import tfmlib
from tfmlib.attention import KVCache, MultiHeadAttention
from tfmlib.models import modern_gpt, sample_next, top_p_filter
from tfmlib.modern import (GroupedQueryAttention, RMSNorm, SwiGLU, apply_rope, d_ff_for_parameters,
                           grouped_query_attention, kv_cache_bytes_per_token, repeat_kv, rms_norm, swiglu)
from tfmlib.positions import RotaryMultiHeadAttention, rope
from tfmlib.scaling import count_parameters
from tfmlib.train import lr_factor

g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g)


# ---------------------------------------------------------------------------------------------------- RMSNorm

def test_rms_norm_equals_torch_rmsnorm():
    x, w = randn(3, 5, 8) * 3 + 1, randn(8)
    ref = torch.nn.RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        ref.weight.copy_(w)
    torch.testing.assert_close(rms_norm(x, w), ref(x))
    torch.testing.assert_close(rms_norm(x, w, eps=0.5), F.rms_norm(x, (8,), w, 0.5))
    # unlike LayerNorm it keeps the mean: a constant row stays a (rescaled) constant row, not zero
    assert torch.allclose(rms_norm(torch.full((1, 4), 2.0), torch.ones(4)), torch.ones(1, 4), atol=1e-5)


def test_rmsnorm_module_is_the_function():
    m = RMSNorm(8)
    with torch.no_grad():
        m.weight.copy_(randn(8))
    x = randn(2, 3, 8)
    torch.testing.assert_close(m(x), rms_norm(x, m.weight))


def test_rms_norm_bad_input():
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\).*\(3, 8\).*\(4,\)"):
        rms_norm(randn(3, 8), randn(4))
    with pytest.raises(ValueError, match="x must end with d_model=8"):
        RMSNorm(8)(randn(2, 4))


# ---------------------------------------------------------------------------------------------------- SwiGLU

def test_swiglu_function_and_module_agree():
    m = SwiGLU(8, 12)
    x = randn(2, 5, 8)
    by_hand = (F.silu(x @ m.gate.weight.T + m.gate.bias) * (x @ m.up.weight.T + m.up.bias)) @ m.down.weight.T + m.down.bias
    torch.testing.assert_close(m(x), by_hand)
    m = SwiGLU(8, 12, bias=False)
    torch.testing.assert_close(m(x), swiglu(x, m.gate.weight.T, m.up.weight.T, m.down.weight.T))


def test_swiglu_bad_input():
    with pytest.raises(ValueError, match=r"W_up must have shape \(8, 12\), got \(8, 10\)"):
        swiglu(randn(2, 8), randn(8, 12), randn(8, 10), randn(12, 8))


# ---------------------------------------------------------------------------------------------------- RoPE

def test_apply_rope_is_chapter_5s_rope_at_any_offset():
    x = randn(2, 3, 7, 8)
    for start in (0, 5):
        torch.testing.assert_close(apply_rope(x, torch.arange(start, start + 7)), rope(x, offset=start))


def test_apply_rope_pairs_neighbouring_features():
    x = torch.zeros(1, 4)
    x[0, 0] = 1.0                                      # feature 0 turns into feature 1 (its pair), not into 2
    out = apply_rope(x, torch.tensor([1]))
    assert out[0, 1] == pytest.approx(math.sin(1.0)) and out[0, 0] == pytest.approx(math.cos(1.0))
    assert out[0, 2:].abs().max() == 0


def test_apply_rope_scores_depend_on_distance_only():
    q, k = randn(1, 8), randn(1, 8)
    def score(i, j):
        return float(apply_rope(q, torch.tensor([i])) @ apply_rope(k, torch.tensor([j])).T)
    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_apply_rope_bad_input():
    with pytest.raises(ValueError, match=r"positions must have shape \(T,\) = \(5,\)"):
        apply_rope(randn(5, 8), torch.arange(4))
    with pytest.raises(ValueError, match="even feature size"):
        apply_rope(randn(5, 7), torch.arange(5))


# ---------------------------------------------------------------------------------------------------- GQA

def mha_weights(d=16, h=4, h_kv=4):
    d_h = d // h
    return randn(d, d) / 4, randn(d, h_kv * d_h) / 4, randn(d, h_kv * d_h) / 4, randn(d, d) / 4


def test_gqa_with_all_heads_is_multi_head_attention():
    mha = MultiHeadAttention(16, 4, bias=False)
    x = randn(2, 6, 16)
    W = [p.weight.T for p in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj)]
    torch.testing.assert_close(grouped_query_attention(x, *W, n_heads=4, n_kv_heads=4), mha(x, causal=True))


def test_gqa_with_one_kv_head_is_multi_query_attention():
    W_q, W_k, W_v, W_o = mha_weights(h_kv=1)
    x = randn(2, 6, 16)
    # multi-query by hand: every head's query against the one shared key and value head
    q = x @ W_q
    k, v = x @ W_k, x @ W_v
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    heads = []
    for h in range(4):
        s = (q[..., 4 * h:4 * h + 4] @ k.transpose(1, 2)) / 2
        heads.append(torch.softmax(s.masked_fill(~mask, -math.inf), -1) @ v)
    torch.testing.assert_close(grouped_query_attention(x, W_q, W_k, W_v, W_o, 4, 1), torch.cat(heads, -1) @ W_o)


def test_gqa_groups_neighbouring_query_heads():
    # with 2 kv heads, query heads 0 and 1 read kv head 0: making kv head 1 useless changes only heads 2 and 3
    kv = randn(1, 2, 3, 4)
    rep = repeat_kv(kv, 2)
    assert torch.equal(rep[:, 0], kv[:, 0]) and torch.equal(rep[:, 1], kv[:, 0]) and torch.equal(rep[:, 2], kv[:, 1])


def test_gqa_cached_decode_equals_uncached_forward():
    W = mha_weights(h_kv=2)
    x = randn(2, 7, 16)
    full = grouped_query_attention(x, *W, n_heads=4, n_kv_heads=2)
    cache = KVCache(7)
    steps = [grouped_query_attention(x[:, :3], *W, 4, 2, cache=cache)]          # a prompt, then one at a time
    steps += [grouped_query_attention(x[:, t:t + 1], *W, 4, 2, cache=cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    assert cache.k.shape == (2, 2, 7, 4)                                           # kv heads only


def test_gqa_bad_input():
    W_q, W_k, W_v, W_o = mha_weights(h_kv=2)
    with pytest.raises(ValueError, match="n_kv_heads must be a positive int dividing n_heads.*n_kv_heads=3"):
        grouped_query_attention(randn(1, 3, 16), W_q, W_k, W_v, W_o, 4, 3)
    with pytest.raises(ValueError, match=r"W_k must have shape \(16, 4\), got \(16, 8\)"):
        grouped_query_attention(randn(1, 3, 16), W_q, W_k, W_v, W_o, 4, 1)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d\)"):
        grouped_query_attention(randn(3, 16), W_q, W_k, W_v, W_o, 4, 2)


@pytest.mark.parametrize("rotary", [False, True])
def test_gqa_module_paths_agree_with_the_function_and_mha(rotary):
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, bias=False, n_kv_heads=2, rotary=rotary)
    x = randn(2, 6, 16)
    fast, (slow, _) = m(x, causal=True), m(x, causal=True, need_weights=True)
    torch.testing.assert_close(fast, slow)
    if not rotary:
        W = [p.weight.T for p in (m.q_proj, m.k_proj, m.v_proj, m.out_proj)]
        torch.testing.assert_close(fast, grouped_query_attention(x, *W, 4, 2))
    full = GroupedQueryAttention(16, 4, bias=False, n_kv_heads=4, rotary=rotary)
    ref = (RotaryMultiHeadAttention if rotary else MultiHeadAttention)(16, 4, bias=False)
    ref.load_state_dict(full.state_dict())
    torch.testing.assert_close(full(x, causal=True), ref(x, causal=True))


# ---------------------------------------------------------------------------------------------------- the model

def test_modern_gpt_cached_generation_equals_uncached_and_caches_kv_heads_only():
    torch.manual_seed(0)
    model = modern_gpt(50, d_model=32, n_heads=4, n_layers=2, n_kv_heads=1, max_len=64).eval()
    prompt = torch.randint(0, 50, (2, 5), generator=g)
    with torch.no_grad():
        cached = model.generate(prompt, 12, greedy=True)
        assert torch.equal(cached, model.generate(prompt, 12, greedy=True, use_cache=False))
        logits_full = model(cached)
        cache = model.new_cache(cached.shape[1])
        logits_steps = torch.cat([model(cached[:, :5], cache)] + [model(cached[:, t:t + 1], cache)
                                                                  for t in range(5, cached.shape[1])], 1)
    torch.testing.assert_close(logits_steps, logits_full, atol=1e-5, rtol=1e-4)
    # 2 layers x (k and v) x 1 kv head x d_h = 8 floats of 4 bytes
    assert kv_cache_bytes_per_token(cache) == 2 * 2 * 1 * 8 * 4
    assert model.head.weight is model.tok_emb.weight


def test_modern_gpt_parts():
    model = modern_gpt(50, d_model=48, n_heads=4)
    block = model.blocks[0]
    assert isinstance(block.norm_self, RMSNorm) and isinstance(block.ff, SwiGLU) and block.norm_first
    assert isinstance(block.self_attn, GroupedQueryAttention) and block.self_attn.n_kv_heads == 2
    assert block.self_attn.rotary and model.positions is None and block.ff.gate.out_features == 128


def test_d_ff_for_parameters_matches_the_size():
    def build(f):
        return tfmlib.DecoderLM(50, 32, 4, 2, d_ff=f, activation="swiglu", pos="rope")
    target = count_parameters(tfmlib.DecoderLM(50, 32, 4, 2, d_ff=128, activation="gelu", pos="rope"))
    f = d_ff_for_parameters(build, target)
    assert abs(count_parameters(build(f)) - target) <= 3 * 2 * 32 // 2   # within half a step of d_ff
    assert 80 <= f <= 90                                                  # about 2/3 of 128


def test_decoder_lm_rejects_gqa_with_a_bias_position_scheme():
    with pytest.raises(ValueError, match="n_kv_heads works with pos"):
        tfmlib.DecoderLM(50, 32, 4, n_kv_heads=2, pos="alibi")


# ---------------------------------------------------------------------------------------------------- sampling

def test_top_p_keeps_the_smallest_nucleus():
    probs = torch.tensor([[0.1, 0.4, 0.05, 0.3, 0.15]])
    logits = probs.log()
    def kept(p):
        return sorted(torch.isfinite(top_p_filter(logits, p))[0].nonzero().flatten().tolist())
    assert kept(0.3) == [1]                 # 0.4 alone reaches 0.3
    assert kept(0.4) == [1]                 # ... and 0.4
    assert kept(0.41) == [1, 3]             # 0.4 + 0.3
    assert kept(0.85) == [1, 3, 4]          # 0.4 + 0.3 + 0.15 = 0.85
    assert kept(0.86) == [0, 1, 3, 4]
    assert kept(1.0) == [0, 1, 2, 3, 4]
    # against a brute force over random rows: the kept set is the shortest prefix of the sorted tokens
    logits = randn(20, 30)
    for p in (0.2, 0.5, 0.9):
        keep = torch.isfinite(top_p_filter(logits, p))
        for row, k in zip(F.softmax(logits, -1), keep):
            sorted_p = row.sort(descending=True).values
            n = int((sorted_p.cumsum(0) < p).sum()) + 1
            assert k.sum() == n and row[k].min() >= sorted_p[n - 1]


def test_top_p_sampling_never_draws_outside_the_nucleus():
    logits = torch.tensor([[0.0, 3.0, 2.5, -1.0]]).repeat(500, 1)
    draws = sample_next(logits, top_p=0.6, generator=torch.Generator().manual_seed(1))
    assert set(draws.flatten().tolist()) == {1, 2}
    with pytest.raises(ValueError, match=r"top_p must lie in \(0, 1\], got 1.5"):
        sample_next(logits, top_p=1.5)


# ---------------------------------------------------------------------------------------------------- schedule

def test_warmup_then_cosine_schedule_values():
    steps, warmup = 110, 10
    assert lr_factor(0, steps, warmup, decay=True) == pytest.approx(0.1)           # 1 / warmup
    assert lr_factor(9, steps, warmup, decay=True) == pytest.approx(1.0)           # end of warm-up
    assert lr_factor(10, steps, warmup, decay=True) == pytest.approx(1.0)          # the cosine starts at 1
    mid = 10 + (steps - 1 - 10) / 2
    assert lr_factor(int(mid), steps, warmup, decay=True) == pytest.approx(0.55, abs=0.01)
    assert lr_factor(steps - 1, steps, warmup, decay=True) == pytest.approx(0.1)   # ends at a tenth
    f = [lr_factor(s, steps, warmup, decay=True) for s in range(warmup, steps)]
    assert all(a >= b for a, b in zip(f, f[1:]))


def test_gqa_rotary_fast_path_equals_rope_at_every_offset():
    m = GroupedQueryAttention(16, 2, n_kv_heads=1, rotary=True)
    q, k = randn(2, 2, 5, 8), randn(2, 1, 5, 8)
    for start in (0, 3, 40):                         # 40: past the first table, which then grows
        fq, fk = m.rotate(q, k, start)
        torch.testing.assert_close(fq, rope(q, offset=start))
        torch.testing.assert_close(fk, rope(k, offset=start))
