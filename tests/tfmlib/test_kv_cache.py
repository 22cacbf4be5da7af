"""The KV cache threaded through MultiHeadAttention, DecoderBlock, DecoderLM and Transformer (chapter 7):
cached computation equals the full forward pass, for every position scheme of chapter 5."""
import pytest
import torch

import tfmlib
from tfmlib.models import POSITION_SCHEMES


def small_lm(pos, norm_first=False, seed=0, dtype=torch.float32, max_len=48):
    torch.manual_seed(seed)
    return tfmlib.DecoderLM(13, d_model=32, n_heads=4, n_layers=2, max_len=max_len, pos=pos,
                            norm_first=norm_first, max_rel=3).to(dtype).eval()


@pytest.mark.parametrize("pos", POSITION_SCHEMES)
def test_cached_logits_equal_full_forward(pos):
    model = small_lm(pos, seed=1, dtype=torch.float64)
    idx = torch.randint(0, 13, (2, 20), generator=torch.Generator().manual_seed(2))
    full = model(idx)
    cache = model.new_cache(20)
    parts = [model(idx[:, :6], cache=cache), model(idx[:, 6:9], cache=cache)]   # a prompt, a chunk of 3,
    parts += [model(idx[:, t:t + 1], cache=cache) for t in range(9, 20)]       # then one token at a time
    assert cache[0].length == 20 and all(c.length == 20 for c in cache)
    assert (torch.cat(parts, dim=1) - full).abs().max() <= 1e-10


@pytest.mark.parametrize("pos", POSITION_SCHEMES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_and_uncached_generation_give_identical_tokens(pos, norm_first):
    model = small_lm(pos, norm_first)
    prompt = torch.randint(0, 13, (3, 5), generator=torch.Generator().manual_seed(1))
    greedy = model.generate(prompt, 30, greedy=True)
    assert greedy.shape == (3, 35) and torch.equal(greedy[:, :5], prompt)
    assert torch.equal(greedy, model.generate(prompt, 30, greedy=True, use_cache=False))
    assert torch.equal(greedy, model.generate(prompt, 30, top_k=1))
    sampled = [model.generate(prompt, 30, temperature=1.3, generator=torch.Generator().manual_seed(3),
                              use_cache=use) for use in (True, False)]
    assert torch.equal(*sampled)


def test_learned_positions_past_max_len_crop_the_context_in_both_modes():
    model = small_lm("learned", max_len=12)
    prompt = torch.randint(0, 13, (2, 4), generator=torch.Generator().manual_seed(0))
    out = model.generate(prompt, 20, greedy=True)
    assert out.shape == (2, 24)
    assert torch.equal(out, model.generate(prompt, 20, greedy=True, use_cache=False))


def test_block_and_attention_take_the_cache():
    torch.manual_seed(0)
    block = tfmlib.DecoderBlock(16, 4, 32, cross_attention=False).double().eval()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    full = block(x, self_mask=tfmlib.causal_mask(7))
    cache = tfmlib.KVCache(7)
    steps = [block(x[:, :4], causal=True, cache=cache)] + [block(x[:, t:t + 1], causal=True, cache=cache)
                                                           for t in range(4, 7)]
    assert (torch.cat(steps, 1) - full).abs().max() <= 1e-12
    assert cache.k.shape == (2, 4, 7, 4)
    # the weights path with a cache: one row per new query, one column per cached key
    cache = tfmlib.KVCache(7)
    block.self_attn(x[:, :5], causal=True, cache=cache)
    _, w = block.self_attn(x[:, 5:6], causal=True, cache=cache, need_weights=True)
    assert w.shape == (2, 4, 1, 6)


def test_transformer_greedy_decode_with_and_without_cache():
    torch.manual_seed(0)
    model = tfmlib.Transformer(9, 10, d_model=16, n_heads=2, n_layers=2).eval()
    with torch.no_grad():
        model.out.bias[tfmlib.data.PAD] = -1e4     # PAD is never a target: a trained model does not emit it
    src = torch.tensor([[3, 4, 5, 0, 0], [6, 7, 8, 3, 4]])
    a = model.greedy_decode(src, bos_id=1, max_len=12)
    assert a.shape == (2, 12) and (a != tfmlib.data.PAD).all()
    assert torch.equal(a, model.greedy_decode(src, bos_id=1, max_len=12, use_cache=False))
    tfmlib.record_attention(model)                 # without the cache the weights cover the whole prefix
    model.greedy_decode(src, bos_id=1, max_len=6, use_cache=False)
    assert model.decoder[0].cross_attn.last_weights.shape == (2, 2, 6, 5)


def test_cache_errors():
    model = small_lm("none")
    cache = model.new_cache(4)
    with pytest.raises(ValueError, match=r"max_len=4 tokens, 5 were asked for"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        tfmlib.KVCache(0)
    att = tfmlib.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="cache is for self-attention"):
        att(torch.randn(1, 2, 8), context=torch.randn(1, 3, 8), cache=tfmlib.KVCache(4))
    cache = tfmlib.KVCache(8)
    att(torch.randn(1, 2, 8), cache=cache)
    with pytest.raises(ValueError, match=r"k \(2, 2, 1, 4\) does not match the cached keys \(1, 2, 8, 4\)"):
        att(torch.randn(2, 1, 8), cache=cache)
    with pytest.raises(ValueError, match="sequence length 49 exceeds the 48 learned positions"):
        small_lm("learned").positions(torch.zeros(1, 1, 32), start=48)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0"):
        model.generate(torch.zeros(1, 1, dtype=torch.long), -1)


@pytest.mark.parametrize("pos", POSITION_SCHEMES)
def test_attention_work_per_cached_token_does_not_grow_with_the_prefix(pos):
    """No tensor of one cached step is (t, t): the new token's scores are (B, H, 1, t) at most."""
    model = small_lm(pos, max_len=64)
    shapes = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                shapes.append(tuple(out.shape))
            return out

    cache = model.new_cache(64)
    with torch.no_grad():
        model(torch.zeros(1, 59, dtype=torch.long), cache=cache)
        with Spy():
            model(torch.zeros(1, 1, dtype=torch.long), cache=cache)
    assert shapes and not [s for s in shapes if len(s) >= 2 and s[-1] >= 60 and s[-2] >= 60]
