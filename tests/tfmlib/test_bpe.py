"""Chapter 9's corpus and byte-pair encoding: the corpus is the course's own text (and the installed standard
library's docstrings), split by document; tfmlib's teaching BPE learns exactly the merges of Hugging Face's
``tokenizers`` trained on the same pre-tokens with the same settings."""
import json
from collections import Counter

import pytest

from tfmlib.bpe import BPETokenizer, merge_pair, pretokenize, train_bpe
from tfmlib.data.corpus import STDLIB_MODULES, build_corpus, course_documents, markdown_to_text, stdlib_documents

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(stdlib=True)


def hf_merges(text: str, n_merges: int, min_count: int) -> list[tuple[bytes, bytes]]:
    """Hugging Face's BPE trainer on tfmlib's pre-tokens, as byte pairs.

    Settings that make it the same algorithm as ``train_bpe``: the pre-tokens are fed already cut (no
    pre-tokenizer, so each fed string is one word), each as its UTF-8 bytes written one character per byte
    (Latin-1, so character k is byte k); the initial alphabet is all 256 such characters and there are no
    special tokens, so its ids 0–255 are the byte values and merge i gets id 256 + i, as in tfmlib; its
    ``min_frequency`` is our ``min_count``.  Its tie rule (equal counts: the pair of smaller ids first) is then
    ours too.
    """
    from tokenizers import Tokenizer, models, trainers

    words = Counter(pretokenize(text))
    tok = Tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=256 + n_merges, min_frequency=min_count, show_progress=False,
                                  initial_alphabet=[chr(i) for i in range(256)], special_tokens=[])
    tok.train_from_iterator((w.encode("utf-8").decode("latin-1") for w, n in words.items() for _ in range(n)),
                            trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    pairs = (m if isinstance(m, list) else m.split(" ") for m in merges)
    return [(a.encode("latin-1"), b.encode("latin-1")) for a, b in pairs]


def our_merges(text: str, n_merges: int, min_count: int) -> list[tuple[bytes, bytes]]:
    tok = BPETokenizer.train(text, n_merges, min_count)
    return [(tok.vocab[a], tok.vocab[b]) for a, b in tok.merges]


def test_same_merges_as_hugging_face_on_the_course_text(corpus):
    text = corpus.train_text
    ours, theirs = our_merges(text, 400, 2), hf_merges(text, 400, 2)
    assert len(ours) == 400
    first_diff = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    assert first_diff is None and len(ours) == len(theirs), f"merge {first_diff}: {ours[first_diff]} vs {theirs[first_diff]}"


def test_same_merges_and_the_same_early_stop_on_a_small_text():
    text = "low lower lowest newer newest wider widest low low new ünïcödé 中文 中文 a_b a_b x2 x22 x222"
    for min_count in (1, 2, 3):
        ours, theirs = our_merges(text, 60, min_count), hf_merges(text, 60, min_count)
        assert ours == theirs
    assert len(our_merges(text, 60, 3)) < 60          # stopped early: no pair is left 3 times


def test_encode_reproduces_training_and_decodes_back(corpus):
    text = corpus.train_text[:20000]
    tok = BPETokenizer.train(text, 200)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8")) / 2          # 200 merges already halve the byte count
    assert tok.decode(tok.encode("中文 and ünïcödé, never seen")) == "中文 and ünïcödé, never seen"
    # encode applies the merges in training order: the same as merging each word's bytes one merge at a time
    for word in set(pretokenize(text[:3000])):
        ids = list(word.encode("utf-8"))
        for i, pair in enumerate(tok.merges):
            ids = merge_pair(ids, pair, 256 + i)
        assert tok.encode_word(word) == ids


def test_pretokens_join_back_and_keep_the_leading_space():
    text = "Hello  world, it's 2026!\n\tx_1 = café 中文（注意）"
    assert "".join(pretokenize(text)) == text
    assert pretokenize("the cat  sat") == ["the", " cat", " ", " sat"]


def test_merge_pair_is_left_to_right_without_overlap():
    assert merge_pair([1, 1, 1, 2, 1, 1], (1, 1), 9) == [9, 1, 2, 9]


def test_bad_input():
    with pytest.raises(ValueError, match="n_merges >= 0"):
        train_bpe("abc", -1)
    with pytest.raises(ValueError, match="uses an id that does not exist yet"):
        BPETokenizer([(256, 1)])
    with pytest.raises(ValueError, match=r"ids must lie in \[0, vocab_size=256\)"):
        BPETokenizer([]).decode([300])


def test_corpus_is_split_by_document_and_fixed(corpus):
    names = [d.name for d in corpus.train + corpus.val]
    assert len(set(names)) == len(names)                       # each document in exactly one set
    assert 0.05 < len(corpus.val) / len(names) < 0.15
    assert {d.name for d in corpus.val} & {d.name for d in corpus.train} == set()
    assert [d.name for d in stdlib_documents()] == [f"stdlib:{m}" for m in STDLIB_MODULES]
    assert stdlib_documents() == stdlib_documents()            # the same text on every call
    assert any(n.startswith("book/appendix/") for n in names) and any(n.startswith("book/0") for n in names)
    assert sum(len(d.text) for d in corpus.train) > 200_000


def test_markdown_to_text_keeps_prose_and_drops_code_and_markup():
    md = """---
jupytext: x
---

# Title

Some *prose* with `code`, a [link](http://x) and {cite}`key` and {glue:text}`n:.2f` and $\\alpha_i$.
A second line of the same paragraph.

```{code-cell} ipython3
print("dropped")
```

$$
x = y \\tag{1}
$$

| a | table |
|---|---|

(a-label)=
## Next section

```{admonition} Kept
:class: tip
Kept prose.
```

:::{dropdown} Spoiler
```{literalinclude} ../x.py
:pyobject: f
```
:::
"""
    sections = markdown_to_text(md)
    assert sections == [("Title", "Some prose with code, a link and and and alpha_i. "
                                  "A second line of the same paragraph."),
                        ("Next section", "Kept prose.")]


def test_course_documents_need_the_pages(tmp_path):
    with pytest.raises(ValueError, match="no pages matching"):
        course_documents(tmp_path)
