"""Chapter 4's mistakes (solutions/04_multi_head): split_heads, merge_heads, multi_head_attention."""
from __future__ import annotations

from .catalogue import any_of, each, either, graded, mistake
from .families import MASKING, PROJECTIONS, SCALING, SOFTMAX_AXIS, attention

SPLIT_LINE = "x.view(B, T, n_heads, d_h).transpose(1, 2)   (head h takes features h·d_h … (h+1)·d_h − 1)"
MERGE_LINE = "x.transpose(1, 2).reshape(B, T, H · d_h)"
MHA_LINE = "scores = q @ k.transpose(-2, -1) / math.sqrt(d_h),  d_h = d / n_heads"
MHA_OUT_LINE = "out = merge_heads(weights @ v) @ W_o"


def split(x, n_heads, *, interleaved=False, heads_first=False):
    """(B, T, d) -> (B, n_heads, T, d_h); ``heads_first``: reshaped straight to that shape."""
    b, t, d = x.shape
    dh = d // n_heads
    if heads_first:
        return x.reshape(b, n_heads, t, dh)
    if interleaved:
        return x.reshape(b, t, dh, n_heads).permute(0, 3, 1, 2)
    return x.reshape(b, t, n_heads, dh).transpose(1, 2)


def merge(x, *, interleaved=False, transpose=True):
    """(B, H, T, d_h) -> (B, T, H · d_h)."""
    b, h, t, dh = x.shape
    if interleaved:
        return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)
    return (x.transpose(1, 2) if transpose else x).reshape(b, t, h * dh)


def mha(x, W_q, W_k, W_v, W_o, n_heads, mask=None, *, split_interleaved=False, merge_interleaved=False,
        merge_transpose=True, projection=True, transpose_w=False, **flags):
    """Multi-head attention: ``attention`` (with its flags) of each head, merged, projected by W_o."""
    w = (lambda W: W.T) if transpose_w else (lambda W: W)
    q, k, v = (split(x @ w(W), n_heads, interleaved=split_interleaved) for W in (W_q, W_k, W_v))

    def project(result):
        out = merge(result[0], interleaved=merge_interleaved, transpose=merge_transpose)
        return out @ w(W_o) if projection else out
    return each(attention(q, k, v, mask, **flags), project)


MISTAKES = {
    "split_heads": graded(
        split, SPLIT_LINE,
        mistake("interleaved", "Your heads take every n_heads-th feature (interleaved), but head h must take the "
                "contiguous block of features h·d_h … (h+1)·d_h − 1.", interleaved=True),
        mistake("no_transpose", "Your result is (B, T, n_heads, d_h): the head dimension must come before T.",
                lambda x, n_heads: split(x, n_heads).transpose(1, 2)),
        mistake("reshape_without_transpose", "You reshape straight to (B, n_heads, T, d_h), which mixes positions "
                "and features; view as (B, T, n_heads, d_h) first, then transpose.", heads_first=True)),
    "merge_heads": graded(
        merge, MERGE_LINE,
        mistake("no_transpose", "You reshape (B, H, T, d_h) straight to (B, T, H·d_h) without moving T before H "
                "first, which mixes positions and heads.", transpose=False),
        mistake("interleaved", "Your merge interleaves the heads' features; head 0's d_h features must come first, "
                "then head 1's, and so on.", interleaved=True)),
    "multi_head_attention": graded(
        mha, MHA_LINE,
        mistake("scaled_by_d_model", "Your scores are divided by √d (the model width) instead of √d_h (one head's "
                "width).", lambda x, **inputs: mha(x, d=x.shape[-1], **inputs)),
        SCALING.scaled_by_d.but(name="scaled_by_d_h"),
        mistake("scaled_by_sqrt_n_heads", "Your scores are divided by √n_heads (the number of heads) instead of √d_h "
                "(one head's width).", lambda n_heads, **inputs: mha(n_heads=n_heads, d=n_heads, **inputs)),
        SCALING.no_scaling,
        # merged back as the inverse of that split, or with the right merge
        mistake("interleaved_split", "Your heads take interleaved features; head h must take the contiguous block "
                "h·d_h … (h+1)·d_h − 1 of Q, K and V.", line=SPLIT_LINE, split_interleaved=True,
                merge_interleaved=any_of(True, False)),
        mistake("merge_without_transpose", "You merge the heads by reshaping (B, H, T, d_h) to (B, T, d) without "
                "transposing, which mixes positions and heads.", line=MERGE_LINE, merge_transpose=False),
        mistake("no_output_projection", "Your output skips the output projection W_o.", line=MHA_OUT_LINE,
                projection=False),
        PROJECTIONS.weights_transposed.but(line="Q = x @ W_q, K = x @ W_k, V = x @ W_v, out = … @ W_o"),
        SOFTMAX_AXIS.softmax_over_queries.but(sentence="Your softmax runs over the queries (dim=-2) instead of over "
                                              "the keys (dim=-1)."),
        MASKING.mask_inverted,
        MASKING.mask_ignored.but(sentence="Your attention ignores the mask."),
        MASKING.mask_after_softmax,
        mistake("single_head", "Your attention runs as one head over the full width d; the features must be split "
                "into n_heads heads of width d_h = d / n_heads.", lambda x, n_heads, **inputs: either(
                    *(mha(x, n_heads=1, d=d, **inputs) for d in (x.shape[-1], x.shape[-1] // n_heads))),
                line="q = split_heads(x @ W_q, n_heads)   (the same for k and v)",
                only_if=lambda n_heads, **_: n_heads != 1),
        d="d_h", key="key"),
}
