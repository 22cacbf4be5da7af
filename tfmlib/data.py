"""Synthetic data for the chapters: generated on the spot, never downloaded.

Token ids: PAD = 0, BOS = 1, EOS = 2; task symbols start at ``FIRST_SYMBOL`` = 3.
"""
from __future__ import annotations

import re

import torch

PAD, BOS, EOS = 0, 1, 2
FIRST_SYMBOL = 3


def pad_batch(seqs, pad_id: int = PAD) -> torch.Tensor:
    """List of 1-D long tensors → ``(B, max_len)`` long tensor padded on the right with ``pad_id``."""
    max_len = max(len(s) for s in seqs)
    out = torch.full((len(seqs), max_len), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out


class SyntheticTranslation:
    """A toy "language pair" with a fixed lexicon and word-order rule — chapters 2 and 6.

    Each source symbol s translates to ``lexicon[s]`` (a fixed random permutation of the symbols),
    and the target lists the translated words in reverse order, so the alignment between source
    position j and target position i is the anti-diagonal i = S − 1 − j.
    Vocabulary size (source and target alike) is ``FIRST_SYMBOL + n_symbols``.
    """

    def __init__(self, n_symbols: int = 20, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.n_symbols = n_symbols
        self.vocab_size = FIRST_SYMBOL + n_symbols
        self.lexicon = torch.arange(self.vocab_size)
        self.lexicon[FIRST_SYMBOL:] = FIRST_SYMBOL + torch.randperm(n_symbols, generator=g)

    def translate(self, src: torch.Tensor) -> torch.Tensor:
        """1-D source symbols (no specials) → 1-D target symbols."""
        return self.lexicon[src].flip(0)

    def batch(self, batch_size: int, min_len: int, max_len: int, generator: torch.Generator | None = None):
        """Random pairs with lengths in [min_len, max_len].

        Returns ``src (B, S)``, ``tgt_in (B, T+1)`` (BOS + target) and ``tgt_out (B, T+1)``
        (target + EOS), all PAD-padded.
        """
        lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)
        srcs = [FIRST_SYMBOL + torch.randint(0, self.n_symbols, (int(n),), generator=generator) for n in lengths]
        tgts = [self.translate(s) for s in srcs]
        src = pad_batch(srcs)
        tgt_in = pad_batch([torch.cat([torch.tensor([BOS]), t]) for t in tgts])
        tgt_out = pad_batch([torch.cat([t, torch.tensor([EOS])]) for t in tgts])
        return src, tgt_in, tgt_out


def exact_match(pred: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Per-sequence exact match ``(B,)`` bool: pred ``(B, ≥T)`` equals tgt_out ``(B, T)`` up to and
    including its EOS (positions after EOS and padding are ignored)."""
    pred = pred[:, : tgt_out.shape[1]]
    if pred.shape[1] < tgt_out.shape[1]:
        return torch.zeros(len(tgt_out), dtype=torch.bool)
    care = tgt_out != PAD
    return ((pred == tgt_out) | ~care).all(dim=1)


# --- A tiny English grammar for the character language model — chapter 6 -----------------------------
# Our own toy grammar: S → NP VP "." ; NP → Det (Adj) N ; VP → V_tr NP (PP) | V_in (PP) ; PP → P NP.
# Subject and verb agree in number ("the cat sees", "the cats see"), so the text has a rule to learn.

GRAMMAR = {
    "det": {"sg": ["the", "a", "one", "this"], "pl": ["the", "some", "two", "these"]},
    "noun": [("cat", "cats"), ("dog", "dogs"), ("bird", "birds"), ("child", "children"),
             ("teacher", "teachers"), ("farmer", "farmers"), ("fox", "foxes"), ("river", "rivers")],
    "adj": ["small", "old", "happy", "green", "quiet", "bright"],
    "v_tr": [("sees", "see"), ("likes", "like"), ("follows", "follow"), ("finds", "find"), ("watches", "watch")],
    "v_in": [("sleeps", "sleep"), ("runs", "run"), ("sings", "sing"), ("waits", "wait")],
    "prep": ["near", "behind", "under", "with"],
}


def _pick(options, g):
    return options[int(torch.randint(len(options), (1,), generator=g))]


def _noun_phrase(g) -> str:
    number = _pick(["sg", "pl"], g)
    words = [_pick(GRAMMAR["det"][number], g)]
    if torch.rand(1, generator=g) < 0.4:
        words.append(_pick(GRAMMAR["adj"], g))
    words.append(_pick(GRAMMAR["noun"], g)[number == "pl"])
    return " ".join(words), number


def grammar_sentence(g: torch.Generator | None = None) -> str:
    """One sentence of the toy grammar above, e.g. ``"the old fox watches two birds near the river."``."""
    subject, number = _noun_phrase(g)
    plural = number == "pl"
    if torch.rand(1, generator=g) < 0.6:
        words = [subject, _pick(GRAMMAR["v_tr"], g)[plural], _noun_phrase(g)[0]]
    else:
        words = [subject, _pick(GRAMMAR["v_in"], g)[plural]]
    if torch.rand(1, generator=g) < 0.3:
        words += [_pick(GRAMMAR["prep"], g), _noun_phrase(g)[0]]
    return " ".join(words) + "."


def grammar_text(n_sentences: int = 2000, seed: int = 0) -> str:
    """``n_sentences`` sentences of the toy grammar, one per line (a text corpus built in code)."""
    if n_sentences < 1:
        raise ValueError(f"n_sentences must be >= 1, got {n_sentences}")
    g = torch.Generator().manual_seed(seed)
    return "".join(grammar_sentence(g) + "\n" for _ in range(n_sentences))


def grammar_accepts(sentence: str) -> bool:
    """True when ``sentence`` (without its newline) is one the toy grammar can produce, number agreement
    included.  A regular expression written from ``GRAMMAR``, independent of the sampler."""
    def alt(words):
        return "(?:" + "|".join(sorted(set(words), key=len, reverse=True)) + ")"

    def np_(num):
        return alt(GRAMMAR["det"][num]) + "(?: " + alt(GRAMMAR["adj"]) + ")? " + alt(
            [pair[num == "pl"] for pair in GRAMMAR["noun"]])

    any_np = "(?:" + np_("sg") + "|" + np_("pl") + ")"
    clauses = []
    for num in ("sg", "pl"):
        i = int(num == "pl")
        v_tr, v_in = alt([p[i] for p in GRAMMAR["v_tr"]]), alt([p[i] for p in GRAMMAR["v_in"]])
        clauses.append(f"{np_(num)} (?:{v_tr} {any_np}|{v_in})")
    pattern = "(?:" + "|".join(clauses) + ")(?: " + alt(GRAMMAR["prep"]) + " " + any_np + r")?\."
    return re.fullmatch(pattern, sentence) is not None


class CharVocab:
    """Character vocabulary of a text: ``encode(str)`` → 1-D long tensor, ``decode(ids)`` → str.

    Ids follow the module's convention: 0, 1, 2 stay PAD, BOS, EOS (so ``sequence_loss``, which skips
    PAD, never skips a character) and the sorted characters get ids from ``FIRST_SYMBOL`` on.
    ``len(vocab)`` counts the three specials; ``decode`` drops them.
    """

    def __init__(self, text: str):
        self.itos = ["", "", ""] + sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.itos) if i >= FIRST_SYMBOL}

    def __len__(self):
        return len(self.itos)

    def encode(self, s: str) -> torch.Tensor:
        unknown = sorted(set(s) - set(self.stoi))
        if unknown:
            raise ValueError(f"s has characters outside the vocabulary: {unknown}")
        return torch.tensor([self.stoi[c] for c in s], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.itos[int(i)] for i in ids)


def lm_batch(data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator | None = None):
    """Random windows of a 1-D token tensor for next-token training — chapter 6.

    Returns x ``(B, block_size)`` and y ``(B, block_size)`` with y[:, t] = data[start + t + 1]:
    position t of x must predict y[:, t].
    """
    if data.dim() != 1 or len(data) < block_size + 1:
        raise ValueError(f"data must be 1-D and longer than block_size={block_size}, got shape {tuple(data.shape)}")
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    return data[starts[:, None] + offsets], data[starts[:, None] + offsets + 1]


class MarkovSource:
    """A random order-k Markov chain over ``vocab_size`` symbols whose entropy rate is known — chapter 8.

    Symbol x_t depends on the ``order`` symbols before it (its context c) through a fixed table
    ``probs[c, x] ∝ exp(sharpness · z_{c,x}) / (x + 1)^zipf``, z ~ N(0, 1) drawn once from ``seed``; the
    ``zipf`` factor makes low symbols common and high ones rare, as words are in text.  Contexts are
    numbered c = Σ_i x_{t−k+i} · V^(k−1−i).  Sequences start from the stationary distribution, so every
    position t ≥ order has the same expected loss under the true model: the entropy rate
    H = Σ_c π_c · H(probs[c]) in nats per token (eq. 8.5), the floor no language model can go below.
    Symbols are 0 … V−1 (no PAD/BOS/EOS: use a cross-entropy that ignores no id).
    """

    def __init__(self, vocab_size: int = 64, order: int = 1, sharpness: float = 2.0, zipf: float = 0.0,
                 seed: int = 0):
        if vocab_size < 2 or order < 1 or vocab_size ** order > 2 ** 20:
            raise ValueError(f"need vocab_size >= 2, order >= 1 and vocab_size**order <= 2**20, "
                             f"got vocab_size={vocab_size}, order={order}")
        g = torch.Generator().manual_seed(seed)
        self.vocab_size, self.order = vocab_size, order
        self.n_contexts = vocab_size ** order
        z = torch.randn(self.n_contexts, vocab_size, generator=g, dtype=torch.float64)
        rank = torch.arange(1, vocab_size + 1, dtype=torch.float64)
        self.probs = torch.softmax(sharpness * z - zipf * rank.log(), dim=-1)   # (V^k, V)
        self.stationary = self._stationary()                        # (V^k,)

    def _stationary(self, tol: float = 1e-15, max_iter: int = 100_000) -> torch.Tensor:
        """π over contexts with π = π M, M the context-to-context transition matrix, by power iteration."""
        v, rest = self.vocab_size, self.n_contexts // self.vocab_size
        pi = torch.full((self.n_contexts,), 1.0 / self.n_contexts, dtype=torch.float64)
        for _ in range(max_iter):
            # (x_{t-k}, rest) --x_t--> (rest, x_t): mass leaving c is π_c·probs[c], summed over x_{t-k}.
            new = (pi[:, None] * self.probs).view(v, rest, v).sum(0).reshape(-1)
            if (new - pi).abs().max() < tol:
                return new
            pi = new
        raise RuntimeError("the stationary distribution did not converge")

    def entropy_rate(self) -> float:
        """H = Σ_c π_c · (−Σ_x p(x|c) ln p(x|c)), in nats per token."""
        h_c = -(self.probs * self.probs.log()).sum(-1)
        return float((self.stationary * h_c).sum())

    def _context_ids(self, x: torch.Tensor) -> torch.Tensor:
        """x ``(B, T)`` → the context number ending at each position t ≥ order−1, ``(B, T − order + 1)``."""
        c = torch.zeros_like(x[:, self.order - 1:])
        for i in range(self.order):
            c = c * self.vocab_size + x[:, i: x.shape[1] - self.order + 1 + i]
        return c

    def sample(self, batch_size: int, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(batch_size, length)`` long symbols; the first ``order`` come from π, the rest from the chain."""
        if length < self.order:
            raise ValueError(f"length must be >= order={self.order}, got {length}")
        c = torch.multinomial(self.stationary, batch_size, replacement=True, generator=generator)
        x = torch.empty(batch_size, length, dtype=torch.long)
        for i in range(self.order):                                 # decode c into its k symbols
            x[:, i] = (c // self.vocab_size ** (self.order - 1 - i)) % self.vocab_size
        for t in range(self.order, length):
            x[:, t] = torch.multinomial(self.probs[c], 1, generator=generator).squeeze(1)
            c = (c * self.vocab_size + x[:, t]) % self.n_contexts
        return x

    def nll(self, x: torch.Tensor) -> torch.Tensor:
        """−ln p(x_t | x_{t−k:t}) under the true chain for t ≥ order: x ``(B, T)`` → ``(B, T − order)``."""
        if x.dim() != 2 or x.shape[1] <= self.order:
            raise ValueError(f"x must be (B, T) with T > order={self.order}, got shape {tuple(x.shape)}")
        c = self._context_ids(x[:, :-1])
        return -self.probs[c, x[:, self.order:]].log()


class MarkedRecall:
    """Long-range recall — chapter 1: read a sequence, then name the one symbol that was marked.

    A sequence holds ``seq_len`` random symbols; exactly one of them is *marked* (it uses a second
    copy of the alphabet, ids ``FIRST_SYMBOL + n_symbols + s``).  The answer is the marked symbol's
    class ``s`` in ``[0, n_symbols)``.  The *distance* is the number of steps from the marked token
    to the end, ``seq_len − 1 − position``: how long a recurrent model must carry the answer.
    Vocabulary size is ``FIRST_SYMBOL + 2 · n_symbols``; chance accuracy is ``1 / n_symbols``.
    """

    def __init__(self, n_symbols: int = 8, seq_len: int = 64):
        if n_symbols < 2 or seq_len < 1:
            raise ValueError(f"n_symbols must be ≥ 2 and seq_len ≥ 1, got n_symbols={n_symbols}, seq_len={seq_len}")
        self.n_symbols, self.seq_len = n_symbols, seq_len
        self.vocab_size = FIRST_SYMBOL + 2 * n_symbols

    def batch(self, batch_size: int, distance=None, generator: torch.Generator | None = None):
        """``tokens (B, seq_len)`` long, ``target (B,)`` classes, ``distance (B,)`` long.

        ``distance`` None draws it uniformly from ``[0, seq_len)``; an int fixes it for the whole batch.
        """
        n, t = self.n_symbols, self.seq_len
        if distance is None:
            distance = torch.randint(0, t, (batch_size,), generator=generator)
        elif not 0 <= int(distance) < t:
            raise ValueError(f"distance must lie in [0, seq_len={t}), got {distance}")
        else:
            distance = torch.full((batch_size,), int(distance), dtype=torch.long)
        symbols = torch.randint(0, n, (batch_size, t), generator=generator)
        rows, pos = torch.arange(batch_size), t - 1 - distance
        tokens = FIRST_SYMBOL + symbols
        tokens[rows, pos] += n  # the marked copy of the same symbol
        return tokens, symbols[rows, pos], distance


# --- Chapters 3 and 4: a copy task and a task that needs two relations at once ------------------------

def copy_task(batch_size: int, n_symbols: int, half_len: int, generator: torch.Generator | None = None):
    """Next-token data for the sequence BOS a_1 … a_m a_1 … a_m (m = ``half_len``) — chapter 3.

    The a_i are uniform over ``n_symbols`` symbols (ids ``FIRST_SYMBOL`` …).  Returns x ``(B, 2m)`` =
    BOS a_1 … a_m a_1 … a_{m−1} and y ``(B, 2m)`` = a_1 … a_m a_1 … a_m, so y[:, t] = x[:, t + 1].
    Targets 0 … m−1 are random (no model can beat ln(n_symbols) nats there); targets m … 2m−1 repeat
    the first half: position t ≥ m must copy x[:, t − m + 1].
    """
    if batch_size < 1 or n_symbols < 1 or half_len < 1:
        raise ValueError(f"batch_size, n_symbols and half_len must be >= 1, "
                         f"got {batch_size}, {n_symbols}, {half_len}")
    a = FIRST_SYMBOL + torch.randint(n_symbols, (batch_size, half_len), generator=generator)
    seq = torch.cat([torch.full((batch_size, 1), BOS), a, a], dim=1)
    return seq[:, :-1], seq[:, 1:]


class TwoRelationTask:
    """Each answer needs a fixed-offset relation and a content (key-matching) relation — chapter 4.

    A sequence is a dictionary of ``n_keys`` tokens "k=v" (every key once, in random order, each
    with a random value v < ``n_values``) followed by ``n_queries`` query tokens "k?" (random keys).
    The answer at query position t is the token "a=b" where
      a = the key of the token at t − 1 (relation 1: fixed offset −1), and
      b = the value that the dictionary gives to the key of "k?" at t (relation 2: content lookup).
    Ids: "k=v" is ``FIRST_SYMBOL + k·n_values + v``, "k?" is ``FIRST_SYMBOL + n_keys·n_values + k``.
    """

    def __init__(self, n_keys: int = 8, n_values: int = 4, n_queries: int = 8):
        if n_keys < 2 or n_values < 2 or n_queries < 1:
            raise ValueError(f"need n_keys >= 2, n_values >= 2, n_queries >= 1, "
                             f"got {n_keys}, {n_values}, {n_queries}")
        self.n_keys, self.n_values, self.n_queries = n_keys, n_values, n_queries
        self.seq_len = n_keys + n_queries
        self.vocab_size = FIRST_SYMBOL + n_keys * n_values + n_keys

    def batch(self, batch_size: int, generator: torch.Generator | None = None):
        """x ``(B, T)`` tokens and y ``(B, T)`` answers, T = n_keys + n_queries; y is PAD on the dictionary."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        b, nk, nv = batch_size, self.n_keys, self.n_values
        keys = torch.argsort(torch.rand(b, nk, generator=generator), dim=1)      # a permutation per row
        values = torch.randint(nv, (b, nk), generator=generator)
        queries = torch.randint(nk, (b, self.n_queries), generator=generator)
        x = torch.cat([FIRST_SYMBOL + keys * nv + values, FIRST_SYMBOL + nk * nv + queries], dim=1)
        prev_key = torch.cat([keys[:, -1:], queries[:, :-1]], dim=1)              # relation 1
        slot = torch.argsort(keys, dim=1).gather(1, queries)                      # where each key sits
        looked_up = values.gather(1, slot)                                        # relation 2
        y = torch.full_like(x, PAD)
        y[:, nk:] = FIRST_SYMBOL + prev_key * nv + looked_up
        return x, y

    def split_answer(self, ids: torch.Tensor):
        """Answer ids "a=b" → (a, b): the offset part and the lookup part."""
        z = ids - FIRST_SYMBOL
        return z // self.n_values, z % self.n_values

    def relation_positions(self, x: torch.Tensor):
        """For each query position t: (t − 1, position of the dictionary entry with t's key), each ``(B, Q)``."""
        nk, nv = self.n_keys, self.n_values
        if x.dim() != 2 or x.shape[1] != self.seq_len:
            raise ValueError(f"x must be (B, {self.seq_len}), got shape {tuple(x.shape)}")
        keys = (x[:, :nk] - FIRST_SYMBOL) // nv
        queries = x[:, nk:] - FIRST_SYMBOL - nk * nv
        offset_pos = torch.arange(nk - 1, self.seq_len - 1).expand(len(x), -1)
        match_pos = torch.argsort(keys, dim=1).gather(1, queries)
        return offset_pos, match_pos


# --- Chapter 5: a task that needs positions -------------------------------------------------------------

def lag_task(batch_size: int, seq_len: int, lag: int, n_symbols: int = 10,
             generator: torch.Generator | None = None):
    """The task "output the token ``lag`` steps back" — chapter 5's position experiment.

    x ``(B, seq_len)`` holds uniform random symbols (ids ``FIRST_SYMBOL`` …); y ``(B, seq_len)`` is
    y[:, t] = x[:, t − lag] for t ≥ lag and PAD (ignored by the loss) for t < lag.  The answer is
    fixed by an offset alone, never by content, so a model needs positions to find it.
    """
    if batch_size < 1 or seq_len < 1 or lag < 1 or n_symbols < 1:
        raise ValueError(f"batch_size, seq_len, lag and n_symbols must be >= 1, "
                         f"got {batch_size}, {seq_len}, {lag}, {n_symbols}")
    x = FIRST_SYMBOL + torch.randint(n_symbols, (batch_size, seq_len), generator=generator)
    y = torch.full_like(x, PAD)
    y[:, lag:] = x[:, :-lag]
    return x, y
