"""Independent answers for calibrating the copy detection (``scripts/similarity_calibration.py``).

Besides the correct styles of ``styles.py``, more answers written independently of tfmlib and of the solutions,
as different learners would: ``EXTRA_CORRECT[assignment][style] = {function: source}`` (correct) and
``WRONG[assignment][name] = {function: source}`` (each with a mistake of its own).  None of them may be
flagged, against each other, tfmlib, the solutions or the site.
"""

EXTRA_CORRECT = {
    "03_self_attention": {
        "softmax-by-hand-matmul": {
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(q, k, v, mask=None):
    dim = q.size(-1)
    logits = torch.matmul(q, torch.transpose(k, -1, -2)) * dim ** -0.5
    if mask is not None:
        logits = torch.where(mask, logits, torch.full_like(logits, float("-inf")))
    top = logits.max(dim=-1, keepdim=True).values
    top = torch.nan_to_num(top, neginf=0.0)
    expd = torch.exp(logits - top)
    total = expd.sum(dim=-1, keepdim=True)
    probs = torch.where(total > 0, expd / total.clamp_min(1e-30), torch.zeros_like(expd))
    return torch.matmul(probs, v), probs
''',
            "causal_mask": '''def causal_mask(n):
    full = torch.ones(n, n)
    return torch.tril(full).bool()
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    queries = torch.matmul(x, W_q)
    keys = torch.matmul(x, W_k)
    values = torch.matmul(x, W_v)
    result = scaled_dot_product_attention(queries, keys, values, mask=mask)
    return result
''',
        },
        "nan-to-num": {
            "scaled_dot_product_attention": '''import math

def scaled_dot_product_attention(q, k, v, mask=None):
    """My attention."""
    s = q @ k.swapaxes(-1, -2)
    s = s / math.sqrt(k.shape[-1])
    if mask is None:
        w = s.softmax(-1)
    else:
        s = s.masked_fill(mask == False, -float("inf"))
        w = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    o = w @ v
    return o, w
''',
            "causal_mask": '''def causal_mask(n):
    return ~torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    projected = [x @ W for W in [W_q, W_k, W_v]]
    return scaled_dot_product_attention(*projected, mask)
''',
        },
        "bmm-reshape": {
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(q, k, v, mask=None):
    import torch
    d = q.shape[-1]
    raw = torch.einsum("...id,...jd->...ij", q, k)
    raw = raw / (d ** 0.5)
    keep = None
    if mask is not None:
        keep = mask.to(torch.bool).expand_as(raw)
        raw = raw.masked_fill(keep.logical_not(), -1e30)
    raw = raw - raw.amax(-1, keepdim=True)
    ex = raw.exp()
    if keep is not None:
        ex = ex * keep
    den = ex.sum(-1, keepdim=True)
    den = torch.where(den == 0, torch.ones_like(den), den)
    w = ex / den
    return torch.einsum("...ij,...jd->...id", w, v), w
''',
            "causal_mask": '''def causal_mask(n):
    a = torch.arange(n)
    return a.view(-1, 1) >= a.view(1, -1)
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    q = torch.einsum("...ti,ij->...tj", x, W_q)
    k = torch.einsum("...ti,ij->...tj", x, W_k)
    v = torch.einsum("...ti,ij->...tj", x, W_v)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    return out, w
''',
        },
        "row-loop": {
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(q, k, v, mask=None):
    scale = 1.0 / q.shape[-1] ** 0.5
    scores = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        allowed = mask.broadcast_to(scores.shape)
        scores = torch.where(allowed, scores, torch.tensor(-torch.inf, dtype=scores.dtype))
        no_key = torch.logical_not(allowed.any(-1, keepdim=True))
        scores = torch.where(no_key, torch.zeros_like(scores), scores)
        weights = torch.softmax(scores, -1) * allowed.to(scores.dtype)
    else:
        weights = torch.softmax(scores, -1)
    return weights @ v, weights
''',
            "causal_mask": '''def causal_mask(n):
    out = []
    for i in range(n):
        out.append([j <= i for j in range(n)])
    return torch.tensor(out, dtype=torch.bool)
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    q = x.matmul(W_q)
    k = x.matmul(W_k)
    v = x.matmul(W_v)
    return scaled_dot_product_attention(q, k, v, mask)
''',
        },
    },
    "04_multi_head": {
        "chunk-cat": {
            "split_heads": '''def split_heads(x, n_heads):
    pieces = torch.chunk(x, n_heads, dim=-1)
    return torch.stack(pieces, dim=1)
''',
            "merge_heads": '''def merge_heads(x):
    heads = torch.unbind(x, dim=1)
    return torch.cat(heads, dim=-1)
''',
            "multi_head_attention": '''def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    Q = split_heads(torch.matmul(x, W_q), n_heads)
    K = split_heads(torch.matmul(x, W_k), n_heads)
    V = split_heads(torch.matmul(x, W_v), n_heads)
    dh = Q.size(-1)
    logits = torch.matmul(Q, K.transpose(2, 3)) / dh ** 0.5
    if mask is not None:
        logits = torch.where(mask, logits, torch.tensor(float("-inf")))
    attn = logits.softmax(dim=3)
    context = torch.matmul(attn, V)
    return torch.matmul(merge_heads(context), W_o)
''',
        },
        "unflatten-flatten": {
            "split_heads": '''def split_heads(x, n_heads):
    head_dim = x.shape[-1] // n_heads
    return x.unflatten(-1, (n_heads, head_dim)).transpose(-2, -3)
''',
            "merge_heads": '''def merge_heads(x):
    return x.transpose(-2, -3).flatten(-2)
''',
            "multi_head_attention": '''import math

def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    d_head = x.shape[-1] // n_heads
    heads = []
    for W in (W_q, W_k, W_v):
        heads.append(split_heads(x @ W, n_heads))
    q, k, v = heads
    att = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d_head)
    if mask is not None:
        att = att.masked_fill(~mask.bool(), -math.inf)
    att = torch.softmax(att, dim=-1)
    y = torch.einsum("bhij,bhjd->bhid", att, v)
    return merge_heads(y) @ W_o
''',
        },
        "einops-like-manual": {
            "split_heads": '''def split_heads(x, n_heads):
    batch, length, width = x.size()
    out = torch.empty(batch, n_heads, length, width // n_heads, dtype=x.dtype)
    size = width // n_heads
    for h in range(n_heads):
        out[:, h, :, :] = x[:, :, h * size:(h + 1) * size]
    return out
''',
            "merge_heads": '''def merge_heads(x):
    batch, heads, length, size = x.size()
    out = torch.empty(batch, length, heads * size, dtype=x.dtype)
    for h in range(heads):
        out[:, :, h * size:(h + 1) * size] = x[:, h]
    return out
''',
            "multi_head_attention": '''def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    def project(W):
        return split_heads(x @ W, n_heads)

    qh, kh, vh = project(W_q), project(W_k), project(W_v)
    scale = qh.shape[-1] ** -0.5
    s = qh @ kh.mT * scale
    if mask is not None:
        s = s + torch.zeros_like(s).masked_fill(~mask, float("-inf"))
    p = torch.exp(s - s.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    return merge_heads(p @ vh) @ W_o
''',
        },
        "reshape-swapaxes": {
            "split_heads": '''def split_heads(x, n_heads):
    shape = x.shape[:-1] + (n_heads, x.shape[-1] // n_heads)
    return x.reshape(shape).swapaxes(1, 2)
''',
            "merge_heads": '''def merge_heads(x):
    y = x.swapaxes(1, 2)
    return y.reshape(*y.shape[:2], -1)
''',
            "multi_head_attention": '''def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    import math
    import torch
    queries = split_heads(x.matmul(W_q), n_heads)
    keys = split_heads(x.matmul(W_k), n_heads)
    vals = split_heads(x.matmul(W_v), n_heads)
    energy = queries.matmul(keys.swapaxes(-1, -2)).div(math.sqrt(queries.size(-1)))
    if mask is not None:
        energy = energy.masked_fill(torch.logical_not(mask), float("-inf"))
    combined = merge_heads(torch.softmax(energy, dim=-1).matmul(vals))
    return combined.matmul(W_o)
''',
        },
    },
    "07_efficiency": {
        "broadcast-compare": {
            "sliding_window_mask": '''def sliding_window_mask(n, window):
    rows = torch.arange(n).unsqueeze(-1)
    cols = torch.arange(n).unsqueeze(0)
    return (rows - window <= cols) & (cols <= rows + window)
''',
            "global_mask": '''def global_mask(n, global_idx):
    g = torch.zeros(n, dtype=torch.bool)
    g[torch.tensor(global_idx, dtype=torch.long)] = True
    return g.unsqueeze(0) | g.unsqueeze(1)
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    rows = []
    for _ in range(n):
        perm = torch.randperm(n, generator=generator)
        row = torch.zeros(n, dtype=torch.bool)
        row[perm[:n_random]] = True
        rows.append(row)
    return torch.stack(rows)
''',
            "blockwise_attention": '''def blockwise_attention(q, k, v, block_size):
    d = q.shape[-1]
    n_keys = k.shape[-2]
    running_max = torch.full(q.shape[:-1] + (1,), -float("inf"), dtype=q.dtype)
    running_den = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    running_num = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    start = 0
    while start < n_keys:
        stop = min(start + block_size, n_keys)
        scores = torch.matmul(q, k[..., start:stop, :].transpose(-1, -2)) / d ** 0.5
        new_max = torch.max(running_max, scores.max(dim=-1, keepdim=True).values)
        factor = torch.exp(running_max - new_max)
        e = torch.exp(scores - new_max)
        running_den = running_den * factor + e.sum(dim=-1, keepdim=True)
        running_num = running_num * factor + torch.matmul(e, v[..., start:stop, :])
        running_max = new_max
        start = stop
    return running_num / running_den
''',
        },
        "tril-triu": {
            "sliding_window_mask": '''def sliding_window_mask(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return torch.triu(ones, diagonal=-window) & torch.tril(ones, diagonal=window)
''',
            "global_mask": '''def global_mask(n, global_idx):
    m = torch.full((n, n), False)
    for g in global_idx:
        m[g] = True
        m[:, g] = True
    return m
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    noise = torch.rand((n, n), generator=generator)
    chosen = torch.topk(noise, n_random, dim=1).indices
    m = torch.zeros((n, n), dtype=torch.bool)
    m[torch.arange(n).unsqueeze(1), chosen] = True
    return m
''',
            "blockwise_attention": '''import math

def blockwise_attention(q, k, v, block_size):
    """Two passes: first the row maxima block by block, then the weighted sums."""
    sc = 1 / math.sqrt(q.shape[-1])
    blocks = list(range(0, k.shape[-2], block_size))
    mx = None
    for b in blocks:
        part = (q @ k[..., b:b + block_size, :].mT * sc).amax(-1, keepdim=True)
        mx = part if mx is None else torch.maximum(mx, part)
    num, den = 0.0, 0.0
    for b in blocks:
        w = torch.exp(q @ k[..., b:b + block_size, :].mT * sc - mx)
        den = den + w.sum(-1, keepdim=True)
        num = num + w @ v[..., b:b + block_size, :]
    return num / den
''',
        },
        "abs-distance": {
            "sliding_window_mask": '''def sliding_window_mask(n, window):
    idx = torch.arange(n)
    dist = torch.abs(idx.view(n, 1) - idx.view(1, n))
    return dist.le(window)
''',
            "global_mask": '''def global_mask(n, global_idx):
    is_g = torch.isin(torch.arange(n), torch.as_tensor(global_idx))
    return torch.logical_or(is_g.view(-1, 1), is_g.view(1, -1))
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    scores = torch.rand(n, n, generator=generator)
    cutoff = scores.sort(dim=-1, descending=True).values[:, n_random - 1:n_random] if n_random else None
    if cutoff is None:
        return torch.zeros(n, n, dtype=torch.bool)
    return scores >= cutoff
''',
            "blockwise_attention": '''def blockwise_attention(q, k, v, block_size):
    scale = q.size(-1) ** -0.5
    out = None
    for i in range(0, k.size(-2), block_size):
        s_blk = torch.einsum("...qd,...kd->...qk", q, k[..., i:i + block_size, :]) * scale
        m_blk = s_blk.amax(-1, keepdim=True)
        p_blk = (s_blk - m_blk).exp()
        l_blk = p_blk.sum(-1, keepdim=True)
        o_blk = torch.einsum("...qk,...kd->...qd", p_blk, v[..., i:i + block_size, :])
        if out is None:
            out, m_run, l_run = o_blk, m_blk, l_blk
            continue
        m_all = torch.maximum(m_run, m_blk)
        a, b = (m_run - m_all).exp(), (m_blk - m_all).exp()
        out = out * a + o_blk * b
        l_run = l_run * a + l_blk * b
        m_run = m_all
    return out / l_run
''',
        },
        "index-fill": {
            "sliding_window_mask": '''def sliding_window_mask(n, window):
    out = torch.zeros(n, n, dtype=torch.bool)
    for offset in range(-window, window + 1):
        out = out | torch.ones(n, n, dtype=torch.bool).diag(offset)[:n, :n] if False else out
        if abs(offset) < n:
            out |= torch.diag(torch.ones(n - abs(offset), dtype=torch.bool), offset)
    return out
''',
            "global_mask": '''def global_mask(n, global_idx):
    idx = torch.as_tensor(global_idx).long()
    m = torch.zeros(n, n, dtype=torch.bool)
    m.index_fill_(0, idx, True)
    m.index_fill_(1, idx, True)
    return m
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    picks = torch.multinomial(torch.ones(n, n), n_random, replacement=False, generator=generator)
    return torch.zeros(n, n, dtype=torch.bool).scatter(1, picks, True)
''',
            "blockwise_attention": '''def blockwise_attention(q, k, v, block_size):
    import math
    d = q.shape[-1]
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    norm = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype)
    best = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
    for lo in range(0, k.shape[-2], block_size):
        kk, vv = k[..., lo:lo + block_size, :], v[..., lo:lo + block_size, :]
        z = torch.matmul(q, kk.transpose(-2, -1)) / math.sqrt(d)
        top = torch.maximum(best, z.amax(-1, keepdim=True))
        shrink = (best - top).exp()
        pz = (z - top).exp()
        acc = shrink * acc + pz @ vv
        norm = shrink * norm + pz.sum(-1, keepdim=True)
        best = top
    return acc / norm
''',
        },
    },
}

WRONG = {
    "03_self_attention": {
        "no-scale-no-mask": {
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(q, k, v, mask=None):
    att = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return att @ v, att
''',
            "causal_mask": '''def causal_mask(n):
    return torch.triu(torch.ones(n, n)).bool()
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_q, x @ W_v, mask)
''',
        },
        "softmax-wrong-dim": {
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(q, k, v, mask=None):
    n = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / n ** 0.5
    if mask is not None:
        scores[~mask.expand_as(scores)] = -1e9
    weights = torch.softmax(scores, dim=-2)
    output = weights @ v
    return output, weights
''',
            "causal_mask": '''def causal_mask(n):
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        m[i, :i] = True
    return m
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    out, w = scaled_dot_product_attention(x @ W_q.T, x @ W_k.T, x @ W_v.T, mask)
    return out, w
''',
        },
        "mask-after-softmax": {
            "scaled_dot_product_attention": '''import math

def scaled_dot_product_attention(q, k, v, mask=None):
    sims = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    probs = torch.softmax(sims, dim=-1)
    if mask is not None:
        probs = probs * mask.float()
    return torch.matmul(probs, v), probs
''',
            "causal_mask": '''def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).tril(-1)
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(W_q @ x, W_k @ x, W_v @ x, mask)
''',
        },
    },
    "04_multi_head": {
        "wrong-order": {
            "split_heads": '''def split_heads(x, n_heads):
    B, T, d = x.shape
    return x.reshape(B, n_heads, T, d // n_heads)
''',
            "merge_heads": '''def merge_heads(x):
    B, H, T, dh = x.shape
    return x.reshape(B, T, H * dh)
''',
            "multi_head_attention": '''def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q = split_heads(x @ W_q, n_heads)
    k = split_heads(x @ W_k, n_heads)
    v = split_heads(x @ W_v, n_heads)
    a = torch.softmax(q @ k.transpose(-1, -2) / x.shape[-1] ** 0.5, dim=-1)
    return merge_heads(a @ v)
''',
        },
        "no-scale": {
            "split_heads": '''def split_heads(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)
''',
            "merge_heads": '''def merge_heads(x):
    return x.permute(0, 2, 3, 1).flatten(2)
''',
            "multi_head_attention": '''def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    outs = []
    q_all, k_all, v_all = x @ W_q, x @ W_k, x @ W_v
    size = x.shape[-1] // n_heads
    for h in range(n_heads):
        sl = slice(h * size, (h + 1) * size)
        s = q_all[..., sl] @ k_all[..., sl].transpose(-1, -2)
        if mask is not None:
            s = s.masked_fill(~mask[:, 0] if mask.dim() == 4 else ~mask, float("-inf"))
        outs.append(torch.softmax(s, -1) @ v_all[..., sl])
    return torch.cat(outs, -1) @ W_o
''',
        },
        "transpose-bug": {
            "split_heads": '''def split_heads(x, n_heads):
    return torch.stack(x.split(n_heads, dim=-1), dim=1)
''',
            "merge_heads": '''def merge_heads(x):
    return x.transpose(1, 2).contiguous().view(x.shape[0], x.shape[2], -1).flip(-1)
''',
            "multi_head_attention": '''import torch.nn.functional as F

def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    hs = [split_heads(t, n_heads) for t in (x @ W_q, x @ W_k, x @ W_v)]
    logits = torch.einsum("bhqd,bhkd->bhqk", hs[0], hs[1]) / hs[0].shape[-1] ** 0.5
    if mask is not None:
        logits = logits.masked_fill(mask, -1e9)
    return merge_heads(torch.einsum("bhqk,bhkd->bhqd", logits.softmax(-1), hs[2]))
''',
        },
    },
    "07_efficiency": {
        "off-by-one": {
            "sliding_window_mask": '''def sliding_window_mask(n, window):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs() < window
''',
            "global_mask": '''def global_mask(n, global_idx):
    m = torch.zeros(n, n, dtype=torch.bool)
    m[global_idx] = True
    return m
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    return torch.rand(n, n, generator=generator) < n_random / n
''',
            "blockwise_attention": '''def blockwise_attention(q, k, v, block_size):
    outs = []
    for s in range(0, k.shape[-2], block_size):
        kb = k[..., s:s + block_size, :]
        w = torch.softmax(q @ kb.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        outs.append(w @ v[..., s:s + block_size, :])
    return sum(outs) / len(outs)
''',
        },
        "no-rescale": {
            "sliding_window_mask": '''def sliding_window_mask(n, window):
    m = torch.eye(n, dtype=torch.bool)
    for w in range(1, window):
        m |= torch.ones(n, n, dtype=torch.bool).triu(w) & ~torch.ones(n, n, dtype=torch.bool).triu(w + 1)
    return m
''',
            "global_mask": '''def global_mask(n, global_idx):
    flags = torch.zeros(n, dtype=torch.bool)
    flags[list(global_idx)] = True
    return flags[:, None] & flags[None, :]
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    cols = torch.randint(0, n, (n, n_random), generator=generator)
    out = torch.zeros(n, n, dtype=torch.bool)
    out[torch.arange(n)[:, None], cols] = True
    return out
''',
            "blockwise_attention": '''import math

def blockwise_attention(q, k, v, block_size):
    num = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    den = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        e = torch.exp(q @ k[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1]))
        num += e @ v[..., j:j + block_size, :]
        den += e.sum(-1, keepdim=True)
    return num / den
''',
        },
        "loops-wrong": {
            "sliding_window_mask": '''def sliding_window_mask(n, window):
    rows = []
    for i in range(n):
        rows.append([0 <= j - i <= window for j in range(n)])
    return torch.tensor(rows)
''',
            "global_mask": '''def global_mask(n, global_idx):
    out = torch.eye(n, dtype=torch.bool)
    for g in global_idx:
        out[g, :] = True
    return out
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(n, generator=g)[:n_random]
    m = torch.zeros(n, n, dtype=torch.bool)
    m[:, idx] = True
    return m
''',
            "blockwise_attention": '''def blockwise_attention(q, k, v, block_size):
    scale = q.shape[-1] ** -0.5
    mx = torch.full((*q.shape[:-1], 1), -float("inf"))
    s_sum = torch.zeros(*q.shape[:-1], 1)
    o = torch.zeros(*q.shape[:-1], v.shape[-1])
    for b in range(0, k.shape[-2], block_size):
        sc = q @ k[..., b:b + block_size, :].transpose(-1, -2) * scale
        mx = torch.maximum(mx, sc.amax(-1, keepdim=True))
        pr = torch.exp(sc - mx)
        s_sum = s_sum + pr.sum(-1, keepdim=True)
        o = o + pr @ v[..., b:b + block_size, :]
    return o / s_sum
''',
        },
    },
}
