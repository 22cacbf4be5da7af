"""Tests for what chapter 6 adds to tfmlib: the toy grammar corpus, CharVocab, lm_batch and the
learning-rate schedule of ``train`` (warm-up and cosine decay)."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tfmlib.data import (FIRST_SYMBOL, GRAMMAR, PAD, CharVocab, grammar_accepts, grammar_sentence,
                         grammar_text, lm_batch)
from tfmlib.train import lr_factor, sequence_loss, train


# --- the grammar ------------------------------------------------------------------------------------

def test_grammar_text_is_deterministic_and_accepted():
    a, b = grammar_text(500, seed=3), grammar_text(500, seed=3)
    assert a == b and a != grammar_text(500, seed=4)
    lines = a.splitlines()
    assert len(lines) == 500 and a.endswith("\n")
    assert all(grammar_accepts(s) for s in lines)
    words = set(" ".join(lines).replace(".", "").split())
    # every word list is used: the generator reaches all of the grammar
    for part in ("adj", "prep"):
        assert set(GRAMMAR[part]) <= words
    for sg, pl in GRAMMAR["noun"] + GRAMMAR["v_tr"] + GRAMMAR["v_in"]:
        assert sg in words and pl in words


def _noun_phrases(number):
    i = int(number == "pl")
    for det in GRAMMAR["det"][number]:
        for adj in [None] + GRAMMAR["adj"]:
            for noun in GRAMMAR["noun"]:
                yield " ".join(w for w in (det, adj, noun[i]) if w)


def test_grammar_accepts_matches_brute_force_enumeration():
    """Enumerate subject + intransitive verb (+ PP) sentences by loops: agreement decides acceptance."""
    rng = torch.Generator().manual_seed(0)
    pps = [f" {p} {np}" for p in GRAMMAR["prep"] for np in itertools.islice(_noun_phrases("pl"), 5)]
    for number, i in (("sg", 0), ("pl", 1)):
        for subject in _noun_phrases(number):
            for verb in GRAMMAR["v_in"]:
                pp = pps[int(torch.randint(len(pps), (1,), generator=rng))]
                assert grammar_accepts(f"{subject} {verb[i]}.")
                assert grammar_accepts(f"{subject} {verb[i]}{pp}.")
                assert not grammar_accepts(f"{subject} {verb[1 - i]}.")      # agreement broken
                assert not grammar_accepts(f"{subject} {verb[i]}")           # no full stop
    for subject in itertools.islice(_noun_phrases("sg"), 20):
        for obj in itertools.islice(_noun_phrases("pl"), 20):
            assert grammar_accepts(f"{subject} sees {obj}.")
            assert not grammar_accepts(f"{subject} see {obj}.")


@pytest.mark.parametrize("bad", ["the cat sees.", "the cat runs the dog.", "the the cat runs.",
                                 "some cat runs.", "a cats run.", "cat runs.", "the cat runs near.",
                                 "the small old cat runs.", "the cat runs. ", ""])
def test_grammar_rejects(bad):
    assert not grammar_accepts(bad)


def test_grammar_sentence_uses_generator():
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert [grammar_sentence(g1) for _ in range(20)] == [grammar_sentence(g2) for _ in range(20)]
    with pytest.raises(ValueError, match="n_sentences"):
        grammar_text(0)


# --- CharVocab and lm_batch ---------------------------------------------------------------------------

def test_char_vocab_round_trip_and_ids():
    text = "ab c.\nba"
    v = CharVocab(text)
    ids = v.encode(text)
    assert v.decode(ids) == text
    assert len(v) == FIRST_SYMBOL + len(set(text))
    assert ids.min().item() >= FIRST_SYMBOL and ids.dtype == torch.long
    # sorted order: "\n" < " " < "." < "a" < ...
    assert v.encode("\n").item() == FIRST_SYMBOL
    assert v.decode(torch.tensor([PAD, 1, 2])) == ""
    with pytest.raises(ValueError, match="outside the vocabulary"):
        v.encode("xyz")


def test_sequence_loss_skips_no_character():
    """The reason for the offset: with id 0 a character, sequence_loss would silently drop it."""
    v = CharVocab("\nab")
    targets = v.encode("\na\nb")[None]
    logits = torch.randn(1, 4, len(v))
    expected = F.cross_entropy(logits[0], targets[0])          # no ignore_index at all
    assert torch.allclose(sequence_loss(logits, targets), expected)


def test_lm_batch_windows_brute_force():
    data = torch.arange(100, 160)
    x, y = lm_batch(data, 8, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 10)
    for row_x, row_y in zip(x, y):
        start = int(row_x[0]) - 100                              # data is arange: value = index + 100
        assert row_x.tolist() == list(range(100 + start, 110 + start))
        assert row_y.tolist() == list(range(101 + start, 111 + start))
        assert 0 <= start <= len(data) - 11
    # windows may reach the very end of data
    x, y = lm_batch(torch.arange(11), 50, 10, torch.Generator().manual_seed(1))
    assert (y[:, -1] == 10).all()
    with pytest.raises(ValueError, match="block_size"):
        lm_batch(torch.arange(10), 2, 10)
    with pytest.raises(ValueError, match="1-D"):
        lm_batch(torch.zeros(3, 30, dtype=torch.long), 2, 5)


# --- learning-rate schedule ------------------------------------------------------------------------

def test_lr_factor_values():
    assert [lr_factor(s, 100, warmup=4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_factor(0, 100) == 1.0 and lr_factor(99, 100) == 1.0
    assert lr_factor(0, 100, decay=True) == pytest.approx(1.0)
    assert lr_factor(99, 100, decay=True) == pytest.approx(0.1)
    mid = 10 + (99 - 10) / 2
    assert lr_factor(int(mid), 100, warmup=10, decay=True) == pytest.approx(
        0.1 + 0.45 * (1 + math.cos(math.pi * (int(mid) - 10) / 89)))
    with pytest.raises(ValueError, match="warmup"):
        lr_factor(0, 10, warmup=-1)


def _one_param_run(**kwargs):
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    w0 = model.weight.item()
    positions = []

    def loss_fn(step):
        positions.append(model.weight.item())
        return model.weight.sum()                                # gradient exactly 1

    train(model, loss_fn, 5, lr=0.1, progress=False, clip=0, **kwargs)
    positions.append(model.weight.item())
    return w0, [a - b for a, b in zip(positions[:-1], positions[1:])]


def test_train_warmup_scales_adam_steps():
    """With a constant gradient, every Adam step moves the weight by lr·factor (up to eps)."""
    _, steps = _one_param_run()
    assert steps == pytest.approx([0.1] * 5, rel=1e-5)
    _, steps = _one_param_run(warmup=4)
    assert steps == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1], rel=1e-5)


def test_train_default_matches_plain_adamw_loop():
    """The schedule must leave the default behaviour unchanged: compare with a hand-written loop."""
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    xs = torch.randn(6, 16, 3, generator=torch.Generator().manual_seed(1))
    model = make()
    history = train(model, lambda s: model(xs[s]).pow(2).mean(), 6, lr=1e-2, progress=False)
    ref = make()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.0)
    ref_history = []
    for s in range(6):
        loss = ref(xs[s]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        ref_history.append(loss.item())
    assert history == pytest.approx(ref_history, rel=1e-6)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p, q)
