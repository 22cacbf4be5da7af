"""Chapter 5's mistakes (solutions/05_positions): sinusoidal_positions, relative_position_index,
relative_attention_scores."""
from __future__ import annotations

import math

import torch

from .catalogue import _arange, _zeros, any_of, graded, mistake
from .families import SCALING

SIN_LINE = "PE[p, 2i] = sin(p / 10000^(2i/d)),  PE[p, 2i+1] = cos(p / 10000^(2i/d))"
REL_LINE = "index[i, j] = clip(j − i, −k, k) + k   (row i the query, column j the key)"
RELS_LINE = "e_ij = (q_i · k_j + q_i · a_k[i, j]) / √d"


def sinusoid(n, d, *, sin_first=True, alternate=True, exponent_factor=1, divide=True, dtype=torch.float32):
    """The (n, d) sinusoidal table; its exponent is ``exponent_factor`` · 2i/d; ``alternate``: sin and cos in
    alternate features (else in the two halves); ``divide``: p / 10000^(2i/d) (else p times it)."""
    p = _arange(n, dtype=torch.float64)[:, None]
    i2 = _arange(0, d, 2, dtype=torch.float64)
    freq = 10000.0 ** (-(i2 * exponent_factor) / d)
    angle = p * freq if divide else p / freq
    sin, cos = torch.sin(angle), torch.cos(angle)
    first, second = (sin, cos) if sin_first else (cos, sin)
    pe = _zeros(n, d, dtype=torch.float64)
    if alternate:
        pe[:, 0::2], pe[:, 1::2] = first, second
    else:
        pe[:, :d // 2], pe[:, d // 2:] = first, second
    return pe.to(dtype)


def rel_index(n, k, *, reverse=False, clip=True, offset=True, dtype=torch.long):
    """index[i, j] = clip(j − i, −k, k) + k (``reverse``: i − j)."""
    pos = _arange(n)
    diff = pos[:, None] - pos[None, :] if reverse else pos[None, :] - pos[:, None]
    diff = diff.clamp(-k, k) if clip else diff
    return (diff + k if offset else diff).to(dtype)


def rel_scores(q, k, a_k, *, scale=True, scale_position=True, position=True, position_from_key=False):
    """e_ij = (q_i · k_j + q_i · a_k[i, j]) / √d."""
    root = math.sqrt(q.shape[-1])
    content = q @ k.transpose(-2, -1)
    term = ((k.unsqueeze(-3) if position_from_key else q.unsqueeze(-2)) * a_k).sum(-1)
    if not position:
        return content / root
    if not scale:
        return content + term
    return content / root + term if not scale_position else (content + term) / root


MISTAKES = {
    "sinusoidal_positions": graded(
        sinusoid, SIN_LINE,
        mistake("sin_cos_swapped", "Your even features hold the cosine and the odd ones the sine; it is the other way "
                "round.", sin_first=False),
        mistake("halves", "You put all the sines in the first half of the features and the cosines in the second; "
                "they alternate (sin in even features 2i, cos in odd features 2i+1).", alternate=False),
        mistake("exponent_feature_index", "Your exponent uses the feature index (2·(2i)/d) instead of the pair index "
                "(2i/d).", exponent_factor=2),
        mistake("multiplied", "You multiply p by 10000^(2i/d) instead of dividing by it.", divide=False),
        mistake("float64", "Your table is float64; the exercise asks for float32 (.float()).", line="return pe.float()",
                dtype=torch.float64),
        mistake("exponent_halved", "Your exponent is i/d; with i the pair index it is 2i/d.", exponent_factor=0.5)),
    "relative_position_index": graded(
        rel_index, REL_LINE,
        mistake("reversed", "Your index uses i − j; it is j − i (key minus query).", reverse=True),
        mistake("no_clip", "Your index is not clipped to −k … k before adding k.", clip=False),
        mistake("no_offset", "Your index is not shifted by +k, so it runs from −k to k instead of 0 to 2k.",
                offset=False),
        mistake("not_long", "Your index is not torch.long (integer indices).",
                dtype=any_of(torch.float32, torch.int32, torch.float64))),
    "relative_attention_scores": graded(
        rel_scores, RELS_LINE,
        SCALING.no_scaling,
        mistake("scale_content_only", "You divide only q_i · k_j by √d; the position term q_i · a_k[i, j] is divided "
                "too.", scale_position=False),
        mistake("no_position_term", "Your scores leave out the position term q_i · a_k[i, j].", position=False),
        mistake("a_k_transposed", "You use a_k[j, i] instead of a_k[i, j] (row i is the query).",
                lambda q, k, a_k: rel_scores(q, k, a_k.transpose(0, 1))),
        mistake("position_uses_key", "Your position term uses the key (k_j · a_k[i, j]); it uses the query: "
                "q_i · a_k[i, j].", position_from_key=True),
        d="d"),
}
