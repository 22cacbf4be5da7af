"""Chapter 6's mistakes (solutions/06_encoder_decoder): padding_mask, decoder_mask, layer_norm, decoder_block."""
from __future__ import annotations

import math

import torch

from .catalogue import _arange, _ones, _sqrt, graded, mistake
from .ch03_self_attention import triangle
from .families import MASK_SHAPES

PAD_LINE = "mask[b, j] = True where j < lengths[b]"
DEC_LINE = "mask[b, 0, i, j] = (j <= i) and (j < lengths[b])   (padding on the keys j)"
LN_LINE = "layer_norm(x) = gamma · (x − mean) / sqrt(var + eps) + beta,  var = mean((x − mean)²)  (biased)"
BLOCK_LINE = "h = LN(x + self_attn(x, mask)),  out = LN(h + feed_forward(h))   (post-norm)"


def padding(lengths, max_len, *, invert=False, extra=0, use_lengths=True, dtype=torch.bool):
    """mask[b, j] = j < lengths[b] + ``extra`` (``invert``: its negation)."""
    if not use_lengths:
        return _ones(len(lengths), max_len, dtype=dtype)
    m = _arange(max_len)[None, :] < lengths[:, None] + extra
    return (~m if invert else m).to(dtype)


def dec_mask(lengths, max_len, *, causal=True, diagonal=0, upper=False, pad_keys=True, pad_queries=False,
             use_or=False, heads=True):
    """(B, 1, T, T): the causal triangle and the padding of the keys (``pad_keys``) or of the queries."""
    c = triangle(max_len, diagonal=diagonal, upper=upper) if causal else _ones(max_len, max_len, dtype=torch.bool)
    p = padding(lengths, max_len)
    pm = _ones(len(lengths), 1, 1, dtype=torch.bool)
    pm = pm & p[:, None, :] if pad_keys else pm
    pm = pm & p[:, :, None] if pad_queries else pm
    m = (pm | c) if use_or else (pm & c)
    return m[:, None] if heads else m


def ln(x, gamma, beta, eps=1e-5, *, dim=-1, unbiased=False, eps_inside=True, sqrt=True, swap_gamma_beta=False,
       use_eps=True, use_gamma=True, use_beta=True):
    """gamma · (x − mean) / sqrt(var + eps) + beta over ``dim``."""
    eps = eps if use_eps else 0.0
    gamma = gamma if use_gamma else torch.ones_like(gamma)
    beta = beta if use_beta else torch.zeros_like(beta)
    mean = x.mean(dim=dim, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dim, keepdim=True)
    if unbiased:
        n = x.shape[dim]
        var = var * n / (n - 1) if n > 1 else var * math.nan
    if not eps_inside:
        xhat = (x - mean) / (_sqrt(var) + eps)
    elif not sqrt:
        xhat = (x - mean) / (var + eps)
    else:
        xhat = (x - mean) / _sqrt(var + eps)
    return beta * xhat + gamma if swap_gamma_beta else gamma * xhat + beta


def block(x, mask, self_attn, feed_forward, gamma1, beta1, gamma2, beta2, eps=1e-5, *, pre_norm=False,
          residual=True, ffn_on_x=False, second_norm=True):
    """The post-norm decoder block: h = LN(x + self_attn(x, mask)), out = LN(h + feed_forward(h))."""
    def norm1(z):
        return ln(z, gamma1, beta1, eps)

    def norm2(z):
        return ln(z, gamma2, beta2, eps)
    if pre_norm:
        h = x + self_attn(norm1(x), mask)
        return h + feed_forward(norm2(h))
    if not residual:
        h = norm1(self_attn(x, mask))
        return norm2(feed_forward(h))
    h = norm1(x + self_attn(x, mask))
    out = h + feed_forward(x if ffn_on_x else h)
    return norm2(out) if second_norm else out


MISTAKES = {
    "padding_mask": graded(
        padding, PAD_LINE,
        mistake("inverted", "Your mask is True on the padding and False on the tokens; True means a real token (may "
                "attend).", invert=True),
        mistake("off_by_one", "Your mask keeps one position too many (j <= length instead of j < length).", extra=1),
        mistake("one_too_few", "Your mask keeps one position too few (j < length − 1 instead of j < length).",
                extra=-1),
        mistake("ignores_lengths", "Your mask ignores the lengths: every position is True.", use_lengths=False),
        MASK_SHAPES.not_bool),
    "decoder_mask": graded(
        dec_mask, DEC_LINE,
        mistake("padding_on_queries", "Your mask also hides the padded query rows (i ≥ length): a padded position "
                "must still attend to the real keys; only the padded keys (j ≥ length) are hidden.", pad_keys=False,
                pad_queries=True),
        MASK_SHAPES.diagonal_excluded.but(sentence="Your causal part leaves out the diagonal: a token may attend to "
                                          "itself (j <= i, not j < i)."),
        mistake("causal_upper_triangle", "Your causal part is the upper triangle (j >= i, the future) instead of the "
                "lower one (j <= i, the past).", upper=True),
        mistake("ignores_lengths", "Your mask is only causal: it ignores the padding (j < length).", pad_keys=False),
        mistake("not_causal", "Your mask has only the padding: the causal part (j <= i) is missing.", causal=False),
        mistake("or_instead_of_and", "You combine the causal mask and the padding with `or`; a key must pass both "
                "(`&`).", use_or=True),
        mistake("no_head_dimension", "Your mask is (B, T, T); it needs the head dimension: (B, 1, T, T).",
                heads=False)),
    "layer_norm": graded(
        ln, LN_LINE,
        mistake("unbiased_variance", "Your variance is the unbiased one (divided by d − 1); layer norm divides by d.",
                unbiased=True),
        mistake("eps_outside_sqrt", "Your eps is added after the square root; it goes inside: sqrt(var + eps).",
                eps_inside=False),
        mistake("no_sqrt", "You divide by the variance, not by its square root.", sqrt=False),
        mistake("gamma_beta_swapped", "You swapped gamma and beta: the scale gamma multiplies, the shift beta is "
                "added.", swap_gamma_beta=True),
        mistake("wrong_dimension", "You normalise over the first dimension; layer norm works over the last (the "
                "features of each position).", dim=0,
                only_if=lambda x, gamma, **_: x.shape[0] != x.shape[-1] and x.dim() > 1
                and gamma.shape[-1] == x.shape[-1]),
        mistake("no_eps", "Your layer norm leaves out eps, so a row with zero variance divides 0 by 0.",
                use_eps=False),
        mistake("no_gamma_beta", "Your layer norm leaves out the scale gamma and the shift beta.", use_gamma=False,
                use_beta=False),
        mistake("no_beta", "Your layer norm leaves out the shift beta (+ beta).", use_beta=False),
        mistake("no_gamma", "Your layer norm leaves out the scale gamma (gamma ·).", use_gamma=False)),
    "decoder_block": graded(
        block, BLOCK_LINE,
        mistake("pre_norm", "Your block is pre-norm (x + self_attn(LN(x))); this one is post-norm: the layer norm "
                "comes after each residual sum.", pre_norm=True),
        mistake("no_residual", "Your block leaves out the residual connections (x + … and h + …).", residual=False),
        mistake("ffn_on_x", "Your feed-forward network is applied to x instead of to h.", ffn_on_x=True),
        mistake("same_norm_twice", "Your second layer norm uses gamma1, beta1; it has its own gamma2, beta2.",
                lambda gamma1, beta1, gamma2, beta2, **inputs: block(gamma1=gamma1, beta1=beta1, gamma2=gamma1,
                                                                     beta2=beta1, **inputs)),
        mistake("missing_second_norm", "Your block leaves out the second layer norm (after h + feed_forward(h)).",
                second_norm=False)),
}
