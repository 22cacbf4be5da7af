"""Whole models: the RNN encoder-decoder (chapters 1–2), the encoder-decoder Transformer and the
decoder-only language model (chapter 6; chapter 5 swaps its position scheme).

Token id conventions come from ``tfmlib.data``: PAD = 0, BOS = 1, EOS = 2.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache, MultiHeadAttention, attention_mask, scaled_dot_product_attention
from .blocks import DecoderBlock, EncoderBlock, make_norm
from .data import PAD as PAD_ID
from .modern import gqa_class
from .positions import (ALiBiMultiHeadAttention, LearnedPositions, RelativeMultiHeadAttention,
                        RotaryMultiHeadAttention, SinusoidalPositions)

POSITION_SCHEMES = ("none", "sinusoidal", "learned", "relative", "rope", "alibi")


def record_attention(model: nn.Module, on: bool = True) -> None:
    """Make every MultiHeadAttention in ``model`` keep its last weights in ``.last_weights``."""
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            m.store_weights = on


def top_p_filter(logits, top_p: float):
    """Keep the nucleus of each row of logits ``(B, V)``: the most likely tokens whose probabilities first sum
    to at least ``top_p``; the others get −inf (Holtzman et al., 2020) — chapter 9.

    A token is kept when the probability of the tokens more likely than it is still below ``top_p``, so the
    most likely token always stays; ties at the boundary are cut by ``torch.sort``'s order.  Returns ``(B, V)``.
    """
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    probs, order = torch.sort(F.softmax(logits, dim=-1), dim=-1, descending=True)
    before = probs.cumsum(dim=-1) - probs                 # the mass of the tokens ranked above each one
    drop_sorted = before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample_next(logits, temperature: float = 1.0, top_k: int | None = None, generator=None, greedy=False,
                top_p: float | None = None):
    """The next token ids ``(B, 1)`` from the last position's logits ``(B, V)``.

    Greedy: the argmax.  Otherwise sample from softmax(logits / temperature), keeping only the ``top_k``
    most likely tokens when given (``top_k=1`` is greedy too), then only the nucleus of probability
    ``top_p`` (``top_p_filter``, chapter 9) when given.
    """
    if greedy:
        return logits.argmax(dim=-1, keepdim=True)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)


def new_cache(n_layers: int, max_len: int) -> list:
    """One empty ``KVCache`` per layer, each with room for ``max_len`` tokens — chapter 7."""
    return [KVCache(max_len) for _ in range(n_layers)]


def position_parts(pos: str, d_model: int, max_len: int, max_rel: int):
    """(module adding absolute positions or None, attention class) for a position scheme — chapter 5."""
    if pos not in POSITION_SCHEMES:
        raise ValueError(f"pos must be one of {POSITION_SCHEMES}, got {pos!r}")
    absolute = {"sinusoidal": lambda: SinusoidalPositions(d_model, max(max_len, 4096)),
                "learned": lambda: LearnedPositions(d_model, max_len)}.get(pos, lambda: None)()
    attention_cls = {"rope": RotaryMultiHeadAttention, "alibi": ALiBiMultiHeadAttention,
                     "relative": lambda d, h, p, bias=True: RelativeMultiHeadAttention(d, h, p, bias, max_rel),
                     }.get(pos, MultiHeadAttention)
    return absolute, attention_cls


class RNNSeq2Seq(nn.Module):
    """GRU (or LSTM) encoder-decoder, with or without Luong dot-product attention — chapters 1–2.

    Without attention the decoder sees the source only through the encoder's final state (the
    bottleneck).  With attention, decoder state s_t scores every encoder state h_j by s_t·h_j,
    the softmax weights average the h_j into c_t, and the output is W_o tanh(W_c [s_t; c_t]).
    ``forward(src, tgt_in)``: src ``(B, S)``, tgt_in ``(B, T)`` (BOS-prefixed) → logits ``(B, T, V)``.
    """

    def __init__(self, src_vocab, tgt_vocab, emb=32, hidden=64, attention=True, cell="gru"):
        super().__init__()
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.attention = attention
        self.src_emb, self.tgt_emb = nn.Embedding(src_vocab, emb), nn.Embedding(tgt_vocab, emb)
        self.encoder = rnn(emb, hidden, batch_first=True)
        self.decoder = rnn(emb, hidden, batch_first=True)
        self.combine = nn.Linear(2 * hidden, hidden) if attention else None
        self.out = nn.Linear(hidden, tgt_vocab)
        self.last_weights = None

    def encode(self, src):
        """src ``(B, S)`` → encoder states ``(B, S, H)`` and the final state the decoder starts from.

        Each source is packed to its real length, so the final state is the one after its last real
        token (not after its padding) and the states at padded positions are zero.
        """
        lengths = (src != PAD_ID).sum(dim=1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.src_emb(src), lengths, batch_first=True,
                                                   enforce_sorted=False)
        states, final = self.encoder(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=src.shape[1])
        return states, final

    def decode(self, tgt_in, states, enc_final, src_mask):
        """Run the decoder over ``tgt_in`` ``(B, T)``; returns logits ``(B, T, V)`` and the new final state."""
        s, final = self.decoder(self.tgt_emb(tgt_in), enc_final)
        if self.attention:
            # Luong's dot score: unscaled (scale=1), one query per decoder step.
            context, self.last_weights = scaled_dot_product_attention(
                s, states, states, mask=src_mask[:, None, :], scale=1.0)
            s = torch.tanh(self.combine(torch.cat([s, context], dim=-1)))
        return self.out(s), final

    def forward(self, src, tgt_in):
        states, final = self.encode(src)
        return self.decode(tgt_in, states, final, src != PAD_ID)[0]

    @torch.no_grad()
    def greedy_decode(self, src, bos_id: int, max_len: int):
        """Feed back the most likely token ``max_len`` times; returns ``(B, max_len)`` token ids."""
        states, state = self.encode(src)
        y = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        out, weights = [], []
        for _ in range(max_len):
            logits, state = self.decode(y, states, state, src != PAD_ID)
            y = logits[:, -1].argmax(-1, keepdim=True)
            out.append(y)
            if self.attention:
                weights.append(self.last_weights)
        if self.attention:
            self.last_weights = torch.cat(weights, dim=1)
        return torch.cat(out, dim=1)


class Transformer(nn.Module):
    """Encoder-decoder Transformer (Vaswani et al., 2017) — chapter 6 (cross-attention: eq. 6.5).

    ``forward(src, tgt_in)``: src ``(B, S)``, tgt_in ``(B, T)`` token ids (PAD = 0 is masked out of
    attention) → logits ``(B, T, tgt_vocab)``.  ``greedy_decode`` generates from a source.
    """

    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, n_layers=2, d_ff=None,
                 dropout=0.0, max_len=256, norm_first=False):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.d_model = d_model
        self.src_emb, self.tgt_emb = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        self.positions = SinusoidalPositions(d_model, max(max_len, 4096))
        self.encoder = nn.ModuleList(EncoderBlock(d_model, n_heads, d_ff, dropout, norm_first)
                                     for _ in range(n_layers))
        self.decoder = nn.ModuleList(DecoderBlock(d_model, n_heads, d_ff, dropout, norm_first)
                                     for _ in range(n_layers))
        # Pre-norm stacks end with a LayerNorm, since their blocks do not normalise their output.
        self.enc_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.out = nn.Linear(d_model, tgt_vocab)

    def encode(self, src):
        """src ``(B, S)`` → memory ``(B, S, d_model)``; padded keys are hidden from every query."""
        mask = attention_mask(src != PAD_ID)
        x = self.positions(self.src_emb(src) * math.sqrt(self.d_model))
        for block in self.encoder:
            x = block(x, mask=mask)
        return self.enc_norm(x)

    def decode(self, tgt_in, memory, src, cache=None):
        """tgt_in ``(B, T)``, memory ``(B, S, d)`` → logits ``(B, T, tgt_vocab)``.

        With ``cache`` (one ``KVCache`` per decoder block) tgt_in holds only the new target tokens,
        at positions ``cache[0].length`` …; the earlier ones are read from the cache (chapter 7).  Decoding
        feeds no padding, so the cached path uses the causal mask only (a PAD the model itself emits,
        never a training target, stays visible there).
        """
        start = 0 if cache is None else cache[0].length
        self_mask = attention_mask(tgt_in != PAD_ID, causal=True) if cache is None else None
        memory_mask = attention_mask(src != PAD_ID, q_len=tgt_in.shape[1])
        x = self.positions(self.tgt_emb(tgt_in) * math.sqrt(self.d_model), start)
        for i, block in enumerate(self.decoder):
            x = block(x, memory, self_mask=self_mask, memory_mask=memory_mask, causal=cache is not None,
                      cache=None if cache is None else cache[i])
        return self.out(self.dec_norm(x))

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src), src)

    @torch.no_grad()
    def greedy_decode(self, src, bos_id: int, max_len: int, use_cache: bool = True):
        """Append the most likely next token ``max_len`` times; returns ``(B, max_len)`` (BOS dropped).

        The loop is ``DecoderLM.generate``'s: with ``use_cache`` each step feeds only the newest token.
        Without it every step re-runs the decoder on the whole prefix, so modules that record their
        weights end with the full (target × source) matrices.
        """
        memory = self.encode(src)
        y = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)

        def step(new, cache):
            return self.decode(new, memory, src, cache)

        cache = new_cache(len(self.decoder), max_len) if use_cache else None
        return decode_loop(step, y, max_len, cache, greedy=True)[:, 1:]


class DecoderLM(nn.Module):
    """Decoder-only language model: tokens → embeddings (+ positions) → masked blocks → logits — chapter 6, eq. (6.1).

    ``pos`` picks the position scheme of chapter 5: ``none``, ``sinusoidal``, ``learned``,
    ``relative`` (Shaw et al., clip distance ``max_rel``), ``rope`` or ``alibi``.
    ``forward(idx, cache=None)``: idx ``(B, T)`` → logits ``(B, T, vocab)``, position t predicting token t+1.
    With ``cache`` (``new_cache``, chapter 7) idx holds only the new tokens, at positions
    ``cache[0].length`` …, and attends to the cached keys and values of the earlier ones.
    ``tie_weights`` shares the token embedding with the output layer, which then has no bias (Press & Wolf, 2017);
    ``bias=False`` removes the additive biases of every linear layer and LayerNorm (as in nanoGPT's config).
    Chapter 9's pieces: ``norm="rms"`` (RMSNorm), ``activation="swiglu"`` (the SwiGLU MLP) and ``n_kv_heads``
    (grouped-query attention; with ``pos="rope"`` rotary too); ``modern_gpt`` sets them all.
    """

    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, d_ff=None, max_len=256,
                 dropout=0.0, pos="learned", norm_first=False, max_rel=16, activation="relu",
                 tie_weights=False, bias=True, norm="layer", n_kv_heads=None):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.max_len, self.pos_scheme = max_len, pos
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.positions, attention_cls = position_parts(pos, d_model, max_len, max_rel)
        if n_kv_heads is not None:
            if pos not in ("none", "sinusoidal", "learned", "rope"):
                raise ValueError(f"n_kv_heads works with pos none, sinusoidal, learned or rope, got pos={pos!r}")
            attention_cls = gqa_class(n_kv_heads, rotary=pos == "rope")
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout, norm_first, activation, cross_attention=False,
                         attention_cls=attention_cls, bias=bias, norm=norm) for _ in range(n_layers))
        self.norm = make_norm(norm, d_model, bias) if norm_first else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size, bias=bias and not tie_weights)
        if tie_weights:
            self.head.weight = self.tok_emb.weight

    def forward(self, idx, cache=None):
        if idx.dim() != 2:
            raise ValueError(f"idx must be (B, T) token ids, got shape {tuple(idx.shape)}")
        start = 0 if cache is None else cache[0].length
        x = self.tok_emb(idx)
        if self.positions is not None:
            x = self.positions(x, start)
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, causal=True, cache=None if cache is None else cache[i])
        return self.head(self.norm(x))

    def new_cache(self, max_len: int) -> list:
        """An empty KV cache for ``max_len`` tokens: one ``KVCache`` per block."""
        return new_cache(len(self.blocks), max_len)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None, greedy: bool = False, use_cache: bool = True,
                 top_p: float | None = None):
        """Sample ``max_new_tokens`` tokens after the prompt idx ``(B, T)``; returns ``(B, T + new)``.

        Logits are divided by ``temperature`` (> 0); ``top_k`` keeps only the k most likely tokens, ``top_p``
        only the nucleus of that probability (chapter 9); ``greedy`` takes the most likely one.  With ``use_cache``
        the prompt runs once and each later step feeds one token (chapter 7); the tokens are the same as without.
        Learned positions have no vector past ``max_len``: from there the context is the last ``max_len`` tokens,
        recomputed each step.
        """
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if not greedy and temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        crop = self.max_len if self.pos_scheme == "learned" else None
        total = idx.shape[1] + max_new_tokens
        cache = self.new_cache(min(total, crop or total)) if use_cache else None
        return decode_loop(self, idx, max_new_tokens, cache, crop, temperature, top_k, generator, greedy, top_p)


def modern_gpt(vocab_size, d_model=64, n_heads=4, n_layers=2, n_kv_heads=None, d_ff=None, max_len=256,
               dropout=0.0, bias=False) -> DecoderLM:
    """Chapter 9's GPT: a ``DecoderLM`` with pre-norm RMSNorm blocks, SwiGLU MLPs, RoPE, grouped-query
    attention with ``n_kv_heads`` key/value heads (default n_heads / 2, or 1 for a single head) and tied
    embeddings; no biases.  d_ff defaults to (2/3)·4·d_model rounded up to a multiple of 8, the size at which
    SwiGLU's three matrices hold as many parameters as a 4·d_model two-matrix MLP (Shazeer, 2020).  The
    embedding, which is also the output layer, starts at N(0, 0.02²) as in GPT-2: with PyTorch's N(0, 1) the
    first logits would have a standard deviation of about √d_model and the first loss would lie far above ln V.
    """
    if n_kv_heads is None:
        n_kv_heads = max(1, n_heads // 2)
    if d_ff is None:
        d_ff = 8 * math.ceil(8 * d_model / 3 / 8)
    model = DecoderLM(vocab_size, d_model, n_heads, n_layers, d_ff, max_len, dropout, pos="rope", norm_first=True,
                      activation="swiglu", tie_weights=True, bias=bias, norm="rms", n_kv_heads=n_kv_heads)
    nn.init.normal_(model.tok_emb.weight, std=0.02)
    return model


def decode_loop(step, idx, max_new_tokens, cache=None, crop=None, temperature=1.0, top_k=None,
                generator=None, greedy=False, top_p=None):
    """Append ``max_new_tokens`` tokens to idx ``(B, T)``, one at a time; returns ``(B, T + new)``.

    ``step(tokens, cache)`` returns the logits of the given tokens.  With a cache (a list of ``KVCache``)
    only the tokens not yet cached are fed; without, the whole sequence (its last ``crop`` tokens).
    When the cache is full the loop carries on without it.
    """
    for _ in range(max_new_tokens):
        if cache is not None and idx.shape[1] <= cache[0].max_len:
            logits = step(idx[:, cache[0].length:], cache)
        else:
            cache = None
            logits = step(idx if crop is None else idx[:, -crop:], None)
        next_id = sample_next(logits[:, -1], temperature, top_k, generator, greedy, top_p)
        idx = torch.cat([idx, next_id], dim=1)
    return idx


class RNNClassifier(nn.Module):
    """Read a sequence with a recurrent network, classify from its final hidden state — chapter 1.

    h_t = tanh(x_t W_xh + h_{t−1} W_hh + b_h) for ``cell="rnn"`` (chapter 1, eq. (1.1)); ``"gru"`` and
    ``"lstm"`` swap in gated cells.  Everything the classifier knows about the sequence must
    survive in h_T.  ``forward(tokens)``: tokens ``(B, T)`` → logits ``(B, n_classes)``.
    """

    def __init__(self, vocab_size, n_classes, emb=32, hidden=64, cell="rnn"):
        super().__init__()
        cells = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}
        if cell not in cells:
            raise ValueError(f"cell must be one of {sorted(cells)}, got {cell!r}")
        self.emb = nn.Embedding(vocab_size, emb)
        self.rnn = cells[cell](emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, tokens):
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, T) token ids, got shape {tuple(tokens.shape)}")
        states, _ = self.rnn(self.emb(tokens))
        return self.out(states[:, -1])


class AttentionClassifier(nn.Module):
    """One learned query attends over the token embeddings, then a linear read-out — chapter 1.

    c = Σ_j α_j v_j with α = softmax(q·k_j / √d) over all T positions (chapter 2's "a query attends
    to the values"): every position is one step away from the output, whatever T is.  No positions
    are added, so it can only use what the tokens are, not where they are.  PAD tokens are masked.
    ``forward(tokens)``: tokens ``(B, T)`` → logits ``(B, n_classes)``; the weights ``(B, 1, 1, T)``
    of the last call are kept in ``.last_weights``.
    """

    def __init__(self, vocab_size, n_classes, d_model=32, n_heads=1):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.query = nn.Parameter(torch.randn(1, 1, d_model) / math.sqrt(d_model))
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.attn.store_weights = True
        self.out = nn.Linear(d_model, n_classes)

    @property
    def last_weights(self):
        return getattr(self.attn, "last_weights", None)

    def forward(self, tokens):
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, T) token ids, got shape {tuple(tokens.shape)}")
        x = self.emb(tokens)
        q = self.query.expand(tokens.shape[0], 1, -1)
        mask = (tokens != PAD_ID)[:, None, :]  # (B, 1, T): the one query may see every real token
        return self.out(self.attn(q, context=x, mask=mask)[:, 0])
