"""Whole models: no information leaks from the future, padding changes nothing, decoding works."""
import pytest
import torch

import tfmlib
from tfmlib.models import POSITION_SCHEMES


@pytest.mark.parametrize("pos", POSITION_SCHEMES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_lm_does_not_leak_the_future(device, pos, norm_first):
    torch.manual_seed(0)
    model = tfmlib.DecoderLM(11, d_model=16, n_heads=2, n_layers=2, max_len=12, pos=pos,
                             norm_first=norm_first).to(device).eval()
    idx = torch.randint(0, 11, (3, 12), device=device)
    base = model(idx)
    for t in range(11):
        changed = idx.clone()
        changed[:, t + 1:] = torch.randint(0, 11, changed[:, t + 1:].shape, device=device)
        out = model(changed)
        assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5), f"leak at position {t} ({pos})"
    # ...and the model does read the past: changing token 0 changes the last prediction.
    changed = idx.clone()
    changed[:, 0] = (changed[:, 0] + 1) % 11
    assert not torch.allclose(model(changed)[:, -1], base[:, -1])


def test_generate_shapes_temperature_top_k():
    torch.manual_seed(0)
    model = tfmlib.DecoderLM(7, d_model=16, n_heads=2, n_layers=1, max_len=8).eval()
    g = torch.Generator().manual_seed(0)
    out = model.generate(torch.zeros(2, 3, dtype=torch.long), 10, temperature=0.7, top_k=1, generator=g)
    assert out.shape == (2, 13) and torch.equal(out[:, :3], torch.zeros(2, 3, dtype=torch.long))
    # top_k=1 is greedy: every new token is the argmax of the model's prediction.
    for t in range(3, 13):
        assert torch.equal(out[:, t], model(out[:, :t][:, -8:])[:, -1].argmax(-1))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        model.generate(out, 1, temperature=0)


def test_learned_positions_refuse_longer_inputs():
    model = tfmlib.DecoderLM(5, d_model=8, n_heads=2, n_layers=1, max_len=4, pos="learned")
    with pytest.raises(ValueError, match="sequence length 5 exceeds the 4 learned positions"):
        model(torch.zeros(1, 5, dtype=torch.long))


def test_transformer_padding_changes_nothing(device):
    torch.manual_seed(0)
    model = tfmlib.Transformer(9, 10, d_model=16, n_heads=2, n_layers=2).to(device).eval()
    short_src = torch.tensor([[3, 4, 5]], device=device)
    short_tgt = torch.tensor([[1, 6, 7]], device=device)
    padded_src = torch.tensor([[3, 4, 5, 0, 0]], device=device)
    padded_tgt = torch.tensor([[1, 6, 7, 0]], device=device)
    a = model(short_src, short_tgt)
    b = model(padded_src, padded_tgt)[:, :3]
    assert torch.allclose(a, b, atol=1e-5)
    decoded = model.greedy_decode(padded_src, bos_id=1, max_len=4)
    assert decoded.shape == (1, 4)


@pytest.mark.parametrize("attention", [False, True])
def test_rnn_seq2seq(attention):
    torch.manual_seed(0)
    model = tfmlib.RNNSeq2Seq(9, 10, emb=8, hidden=16, attention=attention).eval()
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    tgt = torch.tensor([[1, 5, 6], [1, 4, 0]])
    assert model(src, tgt).shape == (2, 3, 10)
    out = model.greedy_decode(src, bos_id=1, max_len=5)
    assert out.shape == (2, 5)
    if attention:
        w = model.last_weights
        assert w.shape == (2, 5, 4)
        assert torch.allclose(w.sum(-1), torch.ones(2, 5), atol=1e-6)
        assert (w[1, :, 2:] == 0).all()                   # padded source positions get no weight


def test_synthetic_translation_and_exact_match():
    task = tfmlib.data.SyntheticTranslation(n_symbols=6, min_len=2, max_len=5, seed=0)
    src, tgt_in, tgt_out = task.batch(4, generator=torch.Generator().manual_seed(0))
    for s, ti, to in zip(src, tgt_in, tgt_out):
        n = int((s != 0).sum())
        expected = task.lexicon[s[:n]].flip(0)
        assert torch.equal(to[:n], expected) and to[n] == tfmlib.data.EOS
        assert ti[0] == tfmlib.data.BOS and torch.equal(ti[1:n + 1], expected)
    assert tfmlib.data.exact_match(tgt_out, tgt_out).all()
    wrong = tgt_out.clone()
    wrong[0, 0] += 1
    assert tfmlib.data.exact_match(wrong, tgt_out).tolist() == [False, True, True, True]


def test_training_loop_reduces_loss():
    torch.manual_seed(0)
    task = tfmlib.data.SyntheticTranslation(n_symbols=5, min_len=2, max_len=4, seed=0)
    model = tfmlib.Transformer(task.vocab_size, task.vocab_size, d_model=16, n_heads=2, n_layers=1)
    g = torch.Generator().manual_seed(0)

    def loss_fn(step):
        src, tgt_in, tgt_out = task.batch(32, generator=g)
        return tfmlib.train.sequence_loss(model(src, tgt_in), tgt_out)

    history = tfmlib.train.train(model, loss_fn, steps=60, lr=3e-3, progress=False)
    assert len(history) == 60 and history[-1] < 0.6 * history[0]


def test_decoder_lm_tied_head_and_gelu():
    model = tfmlib.DecoderLM(11, d_model=16, n_heads=2, n_layers=1, activation="gelu", tie_weights=True)
    assert model.head.weight is model.tok_emb.weight and model.head.bias is None
    assert isinstance(model.blocks[0].ff.act, torch.nn.GELU)
    assert model(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 11)


def test_decoder_lm_without_biases():
    model = tfmlib.DecoderLM(11, d_model=16, n_heads=2, n_layers=2, norm_first=True, bias=False, pos="relative")
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]
    assert model(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 11)
