"""Chapter 9's mistakes (solutions/09_modern_gpt): rms_norm, swiglu, apply_rope, grouped_query_attention."""
from __future__ import annotations

import math

import torch

from .catalogue import _arange, _matmul, _softmax, _sqrt, graded, mistake
from .families import SCALING

RMS_LINE = "x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight"
SWIGLU_LINE = "(silu(x @ W_gate) * (x @ W_up)) @ W_down,  silu(z) = z * sigmoid(z)"
ROPE_LINE = ("pair i = (x[2i], x[2i+1]) turns by p·θ_i, θ_i = base^(−2i/d):  y[2i] = x[2i] cos − x[2i+1] sin,  "
             "y[2i+1] = x[2i] sin + x[2i+1] cos")
GQA_LINE = ("positions = T_past … T_past+T−1;  q, k rotated at them;  k, v = cat(cache, new);  "
            "query head h uses kv head h // (n_heads / n_kv_heads);  causal;  return out, (k, v)")
REPEAT_LINE = "k.repeat_interleave(n_heads // n_kv_heads, dim=1)   (query head h uses kv head h // group)"
CACHE_LINE = "return out, (cat(cached k, new k), cat(cached v, new v)),  each (B, n_kv_heads, T_past + T, d_h)"
OFFSET_LINE = "positions = torch.arange(T_past, T_past + T)   (T_past = cache[0].shape[-2])"
CAUSAL_LINE = "key j may be seen by the query at position p when j <= p  (p = T_past + i)"


def rms(x, weight, eps=1e-6, *, subtract_mean=False, eps_outside=False, root=True, mean=True, use_weight=True):
    """RMSNorm over the last dimension, with the mistakes as flags."""
    y = x - x.mean(dim=-1, keepdim=True) if subtract_mean else x
    square = (y * y).mean(dim=-1, keepdim=True) if mean else (y * y).sum(dim=-1, keepdim=True)
    if eps_outside:
        scale = _sqrt(square) + eps
    else:
        scale = _sqrt(square + eps) if root else square + eps
    out = y / scale
    return out * weight if use_weight else out


def _silu(z):
    return z * torch.sigmoid(z)


def glu(x, W_gate, W_up, W_down, *, gate="silu", swap=False, after=False):
    """(gate(x W_gate) * x W_up) W_down; ``swap``: the gate on x W_up; ``after``: the gate on the product."""
    a, b = (_matmul(x, W_up), _matmul(x, W_gate)) if swap else (_matmul(x, W_gate), _matmul(x, W_up))
    f = {"silu": _silu, "sigmoid": torch.sigmoid}[gate]
    return _matmul(f(a * b) if after else f(a) * b, W_down)


def rotate(x, positions, base=10000.0, *, halves=False, sign=1.0, exponent=2.0, ignore_positions=False,
           inverse=False):
    """Rotary embedding with the mistakes as flags: the halves as pairs, the angle's sign, the exponent's factor
    (θ_i = base^(−exponent·i/d)), positions 0..T−1 whatever is given, θ_i inverted."""
    d, t = x.shape[-1], x.shape[-2]
    i = _arange(d // 2, dtype=torch.float64)
    theta = base ** ((1 if inverse else -1) * exponent * i / d)
    p = _arange(t, dtype=torch.float64) if ignore_positions else torch.as_tensor(positions).to(torch.float64)
    angle = sign * p[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    if halves:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def gqa(x, W_q, W_k, W_v, W_o, n_heads, n_kv_heads, cache=None, *, tiled=False, causal=True, restart=False,
        store_repeated=False, scale="d_h", rope_values=False, mask_offset=True, use_cache=True, append=True):
    """Causal grouped-query attention with RoPE and a KV cache, ``(out, (k, v))``, with the mistakes as flags: kv
    heads repeated whole (``tiled``, query head h on kv head h % n_kv_heads), no causal mask, RoPE positions
    restarting at 0 in every call (``restart``), the cache holding the repeated heads, scores scaled by √d_h,
    √d or not at all (``scale``), the values rotated too, the causal mask not moved by the cache's length
    (``mask_offset`` False), the cache not attended to (``use_cache`` False), the new cache holding only this
    call's keys and values (``append`` False)."""
    b, t = x.shape[0], x.shape[1]
    d_h = W_q.shape[1] // n_heads
    group = n_heads // n_kv_heads
    start = 0 if cache is None else cache[0].shape[-2]
    positions = _arange(start, start + t)
    at = _arange(t) if restart else positions

    def heads(y, n):
        return y.reshape(b, t, n, d_h).transpose(1, 2)

    def widen(y):
        return y.repeat(1, group, 1, 1) if tiled else y.repeat_interleave(group, dim=1)

    q = rotate(heads(_matmul(x, W_q), n_heads), at)
    k_new = rotate(heads(_matmul(x, W_k), n_kv_heads), at)
    v_new = heads(_matmul(x, W_v), n_kv_heads)
    v_new = rotate(v_new, at) if rope_values else v_new
    if store_repeated:
        k_new, v_new = widen(k_new), widen(v_new)
    if cache is not None:
        k_all, v_all = torch.cat([cache[0], k_new], dim=-2), torch.cat([cache[1], v_new], dim=-2)
    else:
        k_all, v_all = k_new, v_new
    k_seen, v_seen = (k_all, v_all) if use_cache else (k_new, v_new)
    if not store_repeated:
        k_seen, v_seen = widen(k_seen), widen(v_seen)
    scores = _matmul(q, k_seen.transpose(-2, -1))
    if scale:
        scores = scores / math.sqrt(d_h if scale == "d_h" else x.shape[-1])
    if causal:
        keys = _arange(k_seen.shape[-2])
        if not use_cache:
            keys = keys + start
        queries = positions if mask_offset else _arange(t)
        scores = scores.masked_fill(~(keys[None, :] <= queries[:, None]), float("-inf"))
    out = _matmul(_softmax(scores, dim=-1), v_seen)
    out = _matmul(out.transpose(1, 2).reshape(b, t, n_heads * d_h), W_o)
    return out, ((k_all, v_all) if append else (k_new, v_new))


def has_cache(cache=None, **_):
    return cache is not None


def grouped(n_heads, n_kv_heads, **_):
    return 1 < n_kv_heads < n_heads


MISTAKES = {
    "rms_norm": graded(
        rms, RMS_LINE,
        mistake("subtracts_mean", "You subtract the mean (that is layer norm); RMSNorm divides x itself by its root "
                "mean square.", subtract_mean=True),
        mistake("eps_outside_sqrt", "Your eps is outside the square root (sqrt(mean(x²)) + eps); it goes inside: "
                "sqrt(mean(x²) + eps).", eps_outside=True),
        mistake("no_sqrt", "You divide by the mean square, not by its square root.", root=False),
        mistake("sum_not_mean", "You divide by the root of the sum of the squares; RMSNorm uses their mean (the sum "
                "divided by d).", mean=False),
        mistake("no_weight", "Your result is not multiplied by weight.", use_weight=False)),
    "swiglu": graded(
        glu, SWIGLU_LINE,
        mistake("silu_on_up", "Your SiLU is on the wrong branch: silu(x W_up) ⊙ x W_gate; the gate is x W_gate.",
                swap=True),
        mistake("sigmoid_gate", "Your gate is sigmoid(x W_gate); SwiGLU's gate is silu(x W_gate) = x W_gate · "
                "sigmoid(x W_gate).", gate="sigmoid"),
        mistake("silu_after_product", "You apply the SiLU to the product x W_gate ⊙ x W_up; only x W_gate goes "
                "through it.", after=True)),
    "apply_rope": graded(
        rotate, ROPE_LINE,
        mistake("halves", "Your pairs are the two halves (x_i, x_{i+d/2}); the chapter pairs adjacent features "
                "(x_2i, x_2i+1).", halves=True),
        mistake("rotation_reversed", "You rotate the wrong way (by −p·θ_i): y_2i must be x_2i cos − x_2i+1 sin and "
                "y_2i+1 = x_2i sin + x_2i+1 cos.", sign=-1.0),
        mistake("exponent_pair_index", "Your frequencies are base^(−i/d) with the pair index i; they are "
                "base^(−2i/d).", exponent=1.0),
        mistake("positions_ignored", "Your rotation uses the positions 0, 1, …, T−1 and ignores the positions it is "
                "given.", ignore_positions=True, only_if=lambda x, positions, **_: not torch.equal(
                    torch.as_tensor(positions), _arange(x.shape[-2]))),
        mistake("inverse_frequency", "Your angles are p·base^(+2i/d); they are p·base^(−2i/d).", inverse=True)),
    "grouped_query_attention": graded(
        gqa, GQA_LINE,
        mistake("kv_heads_tiled", "Your kv heads are repeated whole (repeat: query head h uses kv head h % "
                "n_kv_heads); each kv head serves consecutive query heads (repeat_interleave: kv head h // group).",
                line=REPEAT_LINE, tiled=True, only_if=grouped),
        mistake("not_causal", "Your attention is not causal: a query also sees the keys after it.", line=CAUSAL_LINE,
                causal=False),
        mistake("positions_restart", "Your RoPE positions restart at 0 in every call: with a cache, the new tokens "
                "sit at positions T_past, T_past + 1, …", line=OFFSET_LINE, restart=True, only_if=has_cache),
        mistake("cache_repeated_heads", "Your cache stores the keys and values repeated for the query heads "
                "(n_heads of them); it keeps the n_kv_heads kv heads only.", line=CACHE_LINE, store_repeated=True,
                only_if=lambda n_heads, n_kv_heads, **_: n_kv_heads < n_heads),
        SCALING.no_scaling,
        mistake("scaled_by_d_model", "Your scores are divided by √d (the model width, x.shape[-1]); they are divided "
                "by √d_h, the size of one head.", scale="d"),
        mistake("causal_mask_not_offset", "Your causal mask is not moved by the cache's length: the query at position "
                "T_past + i sees the keys up to T_past + i, not up to i.", line=CAUSAL_LINE, mask_offset=False,
                only_if=has_cache),
        mistake("cache_ignored", "Your new tokens attend only to each other, not to the cached keys and values.",
                use_cache=False, only_if=has_cache),
        mistake("cache_not_appended", "Your new cache holds only this call's keys and values; append them to the "
                "cached ones.", line=CACHE_LINE, append=False, only_if=has_cache),
        mistake("values_rotated", "You rotate the values too; RoPE rotates only the queries and the keys.",
                rope_values=True),
        d="d_h"),
}
