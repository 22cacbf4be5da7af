"""A text corpus built in code, its character vocabulary and next-token windows — chapter 6.

Our own toy grammar: S → NP VP "." ; NP → Det (Adj) N ; VP → V_tr NP (PP) | V_in (PP) ; PP → P NP.
Subject and verb agree in number ("the cat sees", "the cats see"), so the text has a rule to learn.
"""
from __future__ import annotations

import re

import torch

from .task import check_positive
from .tokens import FIRST_SYMBOL

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


def _noun_phrase(g) -> tuple[str, str]:
    """A noun phrase and its number, "sg" or "pl"."""
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

    Ids follow the convention of ``tokens.py``: 0, 1, 2 stay PAD, BOS, EOS (so ``sequence_loss``, which skips
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
    check_positive(batch_size=batch_size, block_size=block_size)
    if data.dim() != 1 or len(data) < block_size + 1:
        raise ValueError(f"data must be 1-D and longer than block_size={block_size}, got shape {tuple(data.shape)}")
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    return data[starts[:, None] + offsets], data[starts[:, None] + offsets + 1]
