"""Transformer blocks — chapter 6: the position-wise FFN, Add & Norm, encoder and decoder blocks.

Post-norm (the notes' and Vaswani et al.'s ``LayerNorm(x + Sublayer(x))``) is the default;
``norm_first=True`` gives pre-norm, ``x + Sublayer(LayerNorm(x))``.  Chapter 9 swaps in RMSNorm
(``norm="rms"``) and the SwiGLU MLP (``activation="swiglu"``) from ``tfmlib.modern``.
"""
from __future__ import annotations

from torch import nn

from .attention import MultiHeadAttention
from .modern import RMSNorm, SwiGLU

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}
NORMS = ("layer", "rms")


def make_norm(norm: str, d_model: int, bias: bool = True) -> nn.Module:
    """LayerNorm (chapter 6) for ``norm="layer"`` (without its bias when ``bias=False``), RMSNorm (chapter 9) for
    ``"rms"``."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    return nn.LayerNorm(d_model, bias=bias) if norm == "layer" else RMSNorm(d_model)


def make_mlp(d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True) -> nn.Module:
    """The position-wise MLP: chapter 3's ``FeedForward`` with ReLU or GELU, or chapter 9's ``SwiGLU``."""
    if activation == "swiglu":
        return SwiGLU(d_model, d_ff, dropout, bias)
    return FeedForward(d_model, d_ff, dropout, activation, bias)


def add_norm(x, sublayer, norm, drop, norm_first=False):
    """Residual connection and LayerNorm around ``sublayer`` — chapter 6, eq. (6.4) (residual: eq. (6.2)).

    Post-norm: LayerNorm(x + Sublayer(x)).  Pre-norm (``norm_first``): x + Sublayer(LayerNorm(x)).
    """
    if norm_first:
        return x + drop(sublayer(norm(x)))
    return norm(x + drop(sublayer(x)))


class FeedForward(nn.Module):
    """m_i = W_2 ReLU(W_1 o_i + b_1) + b_2, the same for every position — chapter 3, eq. (3.7).

    x ``(B, T, d_model)`` → ``(B, T, d_model)``; hidden size ``d_ff``; ``bias=False`` drops b_1 and b_2.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} (or 'swiglu' in a block), "
                             f"got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        return self.linear2(self.dropout(self.act(self.linear1(x))))


class EncoderBlock(nn.Module):
    """Self-attention (no causal mask) + FFN, each wrapped in Add & Norm — chapter 6.

    ``forward(x, mask=None)``: x ``(B, T, d_model)``; mask bool, True = may attend (a padding
    mask from ``attention_mask``).  Returns ``(B, T, d_model)``.
    """

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False, activation="relu",
                 attention_cls=MultiHeadAttention):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention_cls(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm_self, self.norm_ff = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop_self, self.drop_ff = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = add_norm(x, lambda h: self.self_attn(h, mask=mask), self.norm_self, self.drop_self, self.norm_first)
        return add_norm(x, self.ff, self.norm_ff, self.drop_ff, self.norm_first)


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention over the encoder's output (eq. 6.5), FFN; each in Add & Norm — chapter 6.

    ``forward(x, memory=None, self_mask=None, memory_mask=None, causal=False, cache=None)``: x ``(B, Tq, d)``,
    memory ``(B, Tk, d)``.  ``self_mask`` is usually ``causal_mask(Tq)`` (combined with padding), or pass
    ``causal=True``; ``memory_mask`` hides padded source positions.  ``cache``: the self-attention's
    ``KVCache`` (chapter 7).  With ``cross_attention=False`` the block is a decoder-only (GPT-style) block
    and ``memory`` must be None.  ``bias=False``: no additive biases in the linear layers and LayerNorms.
    ``norm="rms"`` uses RMSNorm and ``activation="swiglu"`` the SwiGLU MLP (chapter 9).
    Returns ``(B, Tq, d)``.
    """

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False, activation="relu",
                 cross_attention=True, attention_cls=MultiHeadAttention, bias=True, norm="layer"):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention_cls(d_model, n_heads, dropout, bias)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, bias) if cross_attention else None
        self.ff = make_mlp(d_model, d_ff, dropout, activation, bias)
        self.norm_self, self.norm_ff = make_norm(norm, d_model, bias), make_norm(norm, d_model, bias)
        self.drop_self, self.drop_ff = nn.Dropout(dropout), nn.Dropout(dropout)
        if cross_attention:
            self.norm_cross, self.drop_cross = make_norm(norm, d_model, bias), nn.Dropout(dropout)

    def forward(self, x, memory=None, self_mask=None, memory_mask=None, causal=False, cache=None):
        if (memory is None) != (self.cross_attn is None):
            raise ValueError("memory must be given exactly when the block has cross-attention "
                             f"(cross_attention={self.cross_attn is not None}, memory given: {memory is not None})")
        x = add_norm(x, lambda h: self.self_attn(h, mask=self_mask, causal=causal, cache=cache),
                     self.norm_self, self.drop_self, self.norm_first)
        if memory is not None:
            x = add_norm(x, lambda h: self.cross_attn(h, context=memory, mask=memory_mask),
                         self.norm_cross, self.drop_cross, self.norm_first)
        return add_norm(x, self.ff, self.norm_ff, self.drop_ff, self.norm_first)
