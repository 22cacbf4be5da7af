"""Tests for what chapters 1–2 add to tfmlib: MarkedRecall, RNNClassifier, AttentionClassifier,
and the RNNSeq2Seq encoder's handling of padding."""
import math

import pytest
import torch
import torch.nn.functional as F

import tfmlib
from tfmlib.data import FIRST_SYMBOL, PAD, MarkedRecall, SyntheticTranslation
from tfmlib.models import AttentionClassifier, RNNClassifier, RNNSeq2Seq


# ---------------------------------------------------------------- MarkedRecall (chapter 1)

def test_marked_recall_brute_force():
    task = MarkedRecall(n_symbols=5, seq_len=12)
    tokens, target, distance = task.batch(300, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (300, 12) and target.shape == (300,) and distance.shape == (300,)
    assert task.vocab_size == FIRST_SYMBOL + 10
    for row, y, k in zip(tokens.tolist(), target.tolist(), distance.tolist()):
        marked = [i for i, tok in enumerate(row) if tok >= FIRST_SYMBOL + 5]
        assert marked == [12 - 1 - k]                      # exactly one mark, k steps before the end
        assert row[marked[0]] - FIRST_SYMBOL - 5 == y      # the answer is the marked symbol
        assert all(FIRST_SYMBOL <= tok < task.vocab_size for tok in row)
    assert set(distance.tolist()) == set(range(12))       # uniform draw covers every distance
    assert set(target.tolist()) == set(range(5))


def test_marked_recall_fixed_distance_and_seed():
    task = MarkedRecall(n_symbols=4, seq_len=9)
    a = task.batch(50, distance=3, generator=torch.Generator().manual_seed(1))
    b = task.batch(50, distance=3, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    tokens, _, distance = a
    assert (distance == 3).all()
    assert (tokens[:, 9 - 1 - 3] >= FIRST_SYMBOL + 4).all()
    assert (tokens[:, [i for i in range(9) if i != 5]] < FIRST_SYMBOL + 4).all()


@pytest.mark.parametrize("kwargs", [{"distance": 9}, {"distance": -1}])
def test_marked_recall_bad_distance(kwargs):
    with pytest.raises(ValueError, match="distance"):
        MarkedRecall(n_symbols=4, seq_len=9).batch(2, **kwargs)


def test_marked_recall_bad_arguments():
    with pytest.raises(ValueError, match="n_symbols"):
        MarkedRecall(n_symbols=1, seq_len=9)


# ---------------------------------------------------------------- RNNClassifier (chapter 1)

def test_rnn_classifier_matches_eq_1_1_loop():
    torch.manual_seed(0)
    model = RNNClassifier(vocab_size=11, n_classes=4, emb=5, hidden=7, cell="rnn")
    tokens = torch.randint(0, 11, (3, 6))
    x = model.emb.weight[tokens]                           # embedding lookup by indexing
    W_xh, W_hh = model.rnn.weight_ih_l0.T, model.rnn.weight_hh_l0.T
    b_h = model.rnn.bias_ih_l0 + model.rnn.bias_hh_l0
    h = torch.zeros(3, 7)
    for t in range(6):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)  # eq. (1.1)
    expected = h @ model.out.weight.T + model.out.bias
    torch.testing.assert_close(model(tokens), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_rnn_classifier_gated_cells_read_last_state(cell):
    torch.manual_seed(0)
    model = RNNClassifier(11, 4, emb=5, hidden=7, cell=cell)
    tokens = torch.randint(0, 11, (3, 6))
    states, _ = model.rnn(model.emb(tokens))
    torch.testing.assert_close(model(tokens), model.out(states[:, -1]))
    assert model(tokens).shape == (3, 4)


def test_rnn_classifier_errors():
    with pytest.raises(ValueError, match="cell"):
        RNNClassifier(11, 4, cell="transformer")
    with pytest.raises(ValueError, match=r"tokens .*\(6,\)"):
        RNNClassifier(11, 4)(torch.zeros(6, dtype=torch.long))


# ---------------------------------------------------------------- AttentionClassifier (chapter 1)

def _attention_reference(model, tokens):
    """The same computation with PyTorch's own scaled_dot_product_attention, PAD keys masked."""
    x = model.emb.weight[tokens]                                      # (B, T, d)
    a = model.attn
    q = F.linear(model.query.expand(len(tokens), 1, -1), a.q_proj.weight, a.q_proj.bias)
    k = F.linear(x, a.k_proj.weight, a.k_proj.bias)
    v = F.linear(x, a.v_proj.weight, a.v_proj.bias)
    keep = (tokens != PAD)[:, None, :]                                # (B, 1, T)
    c = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)      # one head: scale 1/√d
    return F.linear(F.linear(c[:, 0], a.out_proj.weight, a.out_proj.bias), model.out.weight, model.out.bias)


def test_attention_classifier_matches_torch_sdpa():
    torch.manual_seed(0)
    model = AttentionClassifier(vocab_size=13, n_classes=5, d_model=8)
    tokens = torch.randint(1, 13, (4, 10))
    tokens[1, 6:] = PAD
    torch.testing.assert_close(model(tokens), _attention_reference(model, tokens), atol=1e-5, rtol=1e-5)
    w = model.last_weights
    assert w.shape == (4, 1, 1, 10)
    assert torch.all(w[1, 0, 0, 6:] == 0)                  # padding gets no weight
    torch.testing.assert_close(w.sum(-1), torch.ones(4, 1, 1))


def test_attention_classifier_ignores_order_and_padding():
    torch.manual_seed(0)
    model = AttentionClassifier(13, 5, d_model=8)
    tokens = torch.randint(1, 13, (2, 7))
    shuffled = tokens[:, torch.randperm(7)]
    padded = torch.cat([tokens, torch.full((2, 3), PAD)], dim=1)
    torch.testing.assert_close(model(shuffled), model(tokens), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(padded), model(tokens), atol=1e-5, rtol=1e-5)


def test_attention_classifier_learns_marked_recall_at_every_distance():
    g = tfmlib.seed_everything(0)
    task = MarkedRecall(n_symbols=4, seq_len=24)
    model = AttentionClassifier(task.vocab_size, task.n_symbols, d_model=16)

    def loss_fn(step):
        tokens, target, _ = task.batch(32, generator=g)
        return F.cross_entropy(model(tokens), target)

    tfmlib.train.train(model, loss_fn, 150, lr=1e-2, progress=False)
    for k in (0, 12, 23):
        tokens, target, _ = task.batch(100, distance=k, generator=g)
        assert (model(tokens).argmax(-1) == target).float().mean() > 0.95


# ---------------------------------------------------------------- RNNSeq2Seq encoder (chapters 1–2)

def test_rnn_seq2seq_final_state_ignores_padding():
    """The decoder must start from the state after the last *real* source token."""
    torch.manual_seed(0)
    task = SyntheticTranslation(n_symbols=6, seed=0)
    for cell in ("gru", "lstm"):
        model = RNNSeq2Seq(task.vocab_size, task.vocab_size, emb=4, hidden=5, cell=cell)
        short = torch.tensor([[4, 5, 6]])
        padded = torch.tensor([[4, 5, 6, PAD, PAD], [7, 8, 3, 4, 5]])
        states_s, final_s = model.encode(short)
        states_p, final_p = model.encode(padded)
        final_s = final_s if cell == "gru" else final_s[0]
        final_p = final_p if cell == "gru" else final_p[0]
        torch.testing.assert_close(final_p[:, :1], final_s)
        torch.testing.assert_close(states_p[:1, :3], states_s)
        assert states_p.shape == (2, 5, 5)
        # reference: the unpadded second row on its own
        _, final_2 = model.encode(padded[1:])
        torch.testing.assert_close(final_p[:, 1:], final_2 if cell == "gru" else final_2[0])


def test_rnn_seq2seq_attention_matches_direct_formula():
    """Luong dot attention: α_tj = softmax_j(s_t · h_j) over real source positions, c_t = Σ_j α_tj h_j."""
    torch.manual_seed(0)
    model = RNNSeq2Seq(10, 10, emb=4, hidden=6, attention=True)
    src = torch.tensor([[4, 5, 6, 7], [8, 9, PAD, PAD]])
    tgt_in = torch.tensor([[1, 3, 4], [1, 5, 6]])
    logits = model(src, tgt_in)
    states, final = model.encode(src)
    s, _ = model.decoder(model.tgt_emb(tgt_in), final)
    for b in range(2):
        n = int((src[b] != PAD).sum())
        for t in range(3):
            e = torch.stack([s[b, t] @ states[b, j] for j in range(n)])
            alpha = torch.exp(e) / torch.exp(e).sum()
            c = sum(alpha[j] * states[b, j] for j in range(n))
            out = model.out(torch.tanh(model.combine(torch.cat([s[b, t], c]))))
            torch.testing.assert_close(logits[b, t], out, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(model.last_weights[b, t, :n], alpha, atol=1e-6, rtol=1e-5)
    assert torch.all(model.last_weights[1, :, 2:] == 0)


def test_rnn_seq2seq_without_attention_sees_only_final_state():
    torch.manual_seed(0)
    model = RNNSeq2Seq(10, 10, emb=4, hidden=6, attention=False)
    src, tgt_in = torch.tensor([[4, 5, 6, 7]]), torch.tensor([[1, 3, 4]])
    states, final = model.encode(src)
    a, _ = model.decode(tgt_in, states, final, src != PAD)
    b, _ = model.decode(tgt_in, torch.randn_like(states), final, src != PAD)
    assert torch.equal(a, b)
    assert math.isfinite(a.sum().item())
