"""A byte-pair-encoding tokeniser, short enough to read — chapter 9.

Byte-level BPE as in GPT-2 (Radford et al., 2019), from Sennrich et al.'s (2016) merge rule: text is cut into
pre-tokens (``pretokenize``), each pre-token is a sequence of its UTF-8 bytes (ids 0–255), and training
repeatedly replaces the most frequent adjacent pair of ids, counted over all pre-tokens, with a new id.
Merges never cross a pre-token boundary.  Ties between equally frequent pairs go to the pair with the
smaller ids (first id, then second): the rule of Hugging Face's ``tokenizers`` when its alphabet is the 256
bytes in order, which ``tests/tfmlib/test_bpe.py`` checks merge by merge.
"""
from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict

# A pre-token: an optional space and a run of letters, or of digits, or of other visible characters, or an
# underscore run; or a run of whitespace (which leaves its last space to the next word, as GPT-2's does).
PRETOKEN = re.compile(r" ?[^\W\d_]+| ?\d+| ?[^\s\w]+| ?_+|\s+(?!\S)|\s+")


def pretokenize(text: str) -> list[str]:
    """Cut ``text`` into pre-tokens; joined again they give back ``text`` exactly."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return PRETOKEN.findall(text)


def merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace each occurrence of ``pair`` in ``ids`` by ``new_id``, left to right, never overlapping."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _pairs(ids: list[int]) -> Counter:
    return Counter(zip(ids, ids[1:]))


def train_bpe(text: str, n_merges: int, min_count: int = 2) -> list[tuple[int, int]]:
    """Learn up to ``n_merges`` merges from ``text``; merge i creates id 256 + i.  Returns the merges in order.

    Each step merges the most frequent adjacent pair (a pre-token that occurs c times counts its pairs c times;
    ties: the smallest pair), and stops early when no pair occurs ``min_count`` times.  Only the pre-tokens
    that hold the merged pair are rewritten, and only their pairs recounted.  A heap of (−count, pair) finds
    the best pair; an entry whose count has changed since it was pushed is stale and skipped.
    """
    if n_merges < 0 or min_count < 1:
        raise ValueError(f"need n_merges >= 0 and min_count >= 1, got n_merges={n_merges}, min_count={min_count}")
    words = Counter(pretokenize(text))
    seqs = [list(w.encode("utf-8")) for w in words]
    freq = list(words.values())
    counts, where = Counter(), defaultdict(set)           # pair -> count; pair -> the words that hold it
    for w, ids in enumerate(seqs):
        for pair, n in _pairs(ids).items():
            counts[pair] += n * freq[w]
            where[pair].add(w)
    heap = [(-n, pair) for pair, n in counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        n, pair = heapq.heappop(heap)
        if -n != counts.get(pair, 0):
            continue                                      # stale: the pair's count changed after this push
        if -n < min_count:
            break
        new_id = 256 + len(merges)
        merges.append(pair)
        changed = set()
        for w in where.pop(pair):
            old, new = seqs[w], merge_pair(seqs[w], pair, new_id)
            for p, k in _pairs(old).items():
                counts[p] -= k * freq[w]
                where[p].discard(w)
                changed.add(p)
            for p, k in _pairs(new).items():
                counts[p] += k * freq[w]
                where[p].add(w)
                changed.add(p)
            seqs[w] = new
        for p in changed:
            if counts[p] > 0:
                heapq.heappush(heap, (-counts[p], p))
            else:
                del counts[p]
        where.pop(pair, None)
    return merges


class BPETokenizer:
    """Encode text to ids and back with learned ``merges`` (from ``train_bpe``).

    ``vocab[i]`` is the byte string of id i (``vocab_size`` = 256 + len(merges)).  ``encode`` cuts text into
    pre-tokens and, in each, applies the merges in the order they were learned (the lowest-numbered pair
    present first), which reproduces the training segmentation; ``decode`` joins the bytes and reads them as
    UTF-8 (a cut inside a character shows as U+FFFD).
    """

    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.rank = {pair: 256 + i for i, pair in enumerate(self.merges)}
        self.vocab = [bytes([i]) for i in range(256)]
        for i, (a, b) in enumerate(self.merges):
            if not (0 <= a < 256 + i and 0 <= b < 256 + i):
                raise ValueError(f"merge {i} = {(a, b)} uses an id that does not exist yet (< {256 + i})")
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def train(cls, text: str, n_merges: int, min_count: int = 2) -> "BPETokenizer":
        return cls(train_bpe(text, n_merges, min_count))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode_word(self, word: str) -> list[int]:
        """The ids of one pre-token."""
        if word not in self._cache:
            ids = list(word.encode("utf-8"))
            while len(ids) > 1:
                pair = min(zip(ids, ids[1:]), key=lambda p: self.rank.get(p, float("inf")))
                if pair not in self.rank:
                    break
                ids = merge_pair(ids, pair, self.rank[pair])
            self._cache[word] = ids
        return self._cache[word]

    def encode(self, text: str) -> list[int]:
        """``text`` → a list of ids."""
        return [i for word in pretokenize(text) for i in self.encode_word(word)]

    def decode(self, ids) -> str:
        """ids → text (invalid UTF-8 from a partial character becomes U+FFFD)."""
        try:
            return b"".join(self.vocab[int(i)] for i in ids).decode("utf-8", errors="replace")
        except IndexError:
            raise ValueError(f"ids must lie in [0, vocab_size={self.vocab_size})") from None
