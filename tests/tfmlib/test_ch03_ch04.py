"""Data generators of chapters 3 and 4 (tfmlib.data.CopyTask, TwoRelationTask), checked by brute-force loops."""
import pytest
import torch

from tfmlib.data import BOS, FIRST_SYMBOL, PAD, CopyTask, TwoRelationTask


def test_copy_task_layout():
    g = torch.Generator().manual_seed(0)
    task = CopyTask(n_symbols=6, half_len=4)
    x, y = task.batch(5, generator=g)
    assert x.shape == y.shape == (5, 8) and task.seq_len == 8 and task.vocab_size == FIRST_SYMBOL + 6
    for b in range(5):
        seq = [BOS] + y[b].tolist()                       # the whole sequence BOS a a
        assert x[b].tolist() == seq[:-1]                  # y is x shifted by one
        first, second = seq[1:5], seq[5:9]
        assert first == second
        assert all(FIRST_SYMBOL <= s < FIRST_SYMBOL + 6 for s in first)
        for t in range(4, 8):                             # the copy rule the docstring states
            assert y[b, t] == x[b, t - 4 + 1]


def test_copy_task_uses_all_symbols_and_generator():
    task = CopyTask(5, 3)
    x1, _ = task.batch(200, torch.Generator().manual_seed(1))
    x2, _ = task.batch(200, torch.Generator().manual_seed(1))
    assert torch.equal(x1, x2)
    assert set(x1[:, 1:].unique().tolist()) == set(range(FIRST_SYMBOL, FIRST_SYMBOL + 5))


@pytest.mark.parametrize("sizes, name", [((0, 2), "n_symbols"), ((3, 0), "half_len")])
def test_copy_task_rejects_bad_sizes(sizes, name):
    with pytest.raises(ValueError, match=name):
        CopyTask(*sizes)
    with pytest.raises(ValueError, match="batch_size"):
        CopyTask(3, 2).batch(0)


def brute_force_answers(task, x):
    """Answers and relation positions by reading the tokens one by one, as a person would."""
    nk, nv = task.n_keys, task.n_values
    answers, offsets, matches = [], [], []
    for row in x.tolist():
        dictionary = {}
        for pos, tok in enumerate(row[:nk]):
            k, v = divmod(tok - FIRST_SYMBOL, nv)
            dictionary[k] = (v, pos)
        def key_of(tok):
            return divmod(tok - FIRST_SYMBOL, nv)[0] if tok < FIRST_SYMBOL + nk * nv else tok - FIRST_SYMBOL - nk * nv
        ans, off, mat = [PAD] * nk, [], []
        for t in range(nk, len(row)):
            a = key_of(row[t - 1])
            v, pos = dictionary[key_of(row[t])]
            ans.append(FIRST_SYMBOL + a * nv + v)
            off.append(t - 1)
            mat.append(pos)
        answers.append(ans), offsets.append(off), matches.append(mat)
    return torch.tensor(answers), torch.tensor(offsets), torch.tensor(matches)


@pytest.mark.parametrize("sizes", [(8, 4, 8), (3, 2, 5), (5, 7, 1)])
def test_two_relation_task_matches_brute_force(sizes):
    task = TwoRelationTask(*sizes)
    x, y = task.batch(50, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (50, task.seq_len)
    assert x.min() >= FIRST_SYMBOL and x.max() < task.vocab_size
    nk, nv = task.n_keys, task.n_values
    keys = sorted(((x[:, :nk] - FIRST_SYMBOL) // nv)[0].tolist())
    assert keys == list(range(nk))                        # every key once in the dictionary
    assert (x[:, nk:] >= FIRST_SYMBOL + nk * nv).all()    # then query tokens only
    ref_y, ref_off, ref_match = brute_force_answers(task, x)
    assert torch.equal(y, ref_y)
    off, match = task.relation_positions(x)
    assert torch.equal(off, ref_off) and torch.equal(match, ref_match)
    a, b = task.split_answer(y[:, nk:])
    assert torch.equal(FIRST_SYMBOL + a * nv + b, y[:, nk:])
    assert (b < nv).all() and (a < nk).all()


def test_two_relation_task_errors():
    with pytest.raises(ValueError, match="n_keys"):
        TwoRelationTask(n_keys=1)
    task = TwoRelationTask(4, 2, 3)
    with pytest.raises(ValueError, match="batch_size"):
        task.batch(0)
    with pytest.raises(ValueError, match=r"\(B, 7\)"):
        task.relation_positions(torch.zeros(2, 6, dtype=torch.long))
