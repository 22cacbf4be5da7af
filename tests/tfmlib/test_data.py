"""The one task interface of tfmlib.data (data/task.py), checked for every task: ``vocab_size`` an int,
``batch(batch_size, generator)`` a tuple of long tensors with the documented shapes and ids, the same
seed giving the same batch, and bad arguments refused with a ValueError that names them."""
import pytest
import torch

import tfmlib.data
from tfmlib.data import (BOS, EOS, FIRST_SYMBOL, PAD, CopyTask, LagTask, MarkedRecall, SyntheticTranslation,
                         Task, TwoRelationTask, exact_match, lm_batch, pad_batch)


def translation_shapes(task, out, b):
    s = out[0].shape[1]                                   # the longest sentence of the batch
    assert task.min_len <= s <= task.max_len
    return [(b, s), (b, s + 1), (b, s + 1)]


# task, the shapes batch(b) must return, and which outputs are token ids (the others are documented per task)
TASKS = {
    "SyntheticTranslation": (lambda: SyntheticTranslation(n_symbols=7, min_len=2, max_len=6, seed=1),
                             translation_shapes, (0, 1, 2)),
    "MarkedRecall": (lambda: MarkedRecall(n_symbols=5, seq_len=11),
                     lambda task, out, b: [(b, 11), (b,), (b,)], (0,)),
    "CopyTask": (lambda: CopyTask(n_symbols=6, half_len=4),
                 lambda task, out, b: [(b, 8), (b, 8)], (0, 1)),
    "TwoRelationTask": (lambda: TwoRelationTask(n_keys=5, n_values=3, n_queries=4),
                        lambda task, out, b: [(b, 9), (b, 9)], (0, 1)),
    "LagTask": (lambda: LagTask(seq_len=10, lag=3, n_symbols=4),
                lambda task, out, b: [(b, 10), (b, 10)], (0, 1)),
}


@pytest.fixture(params=list(TASKS))
def case(request):
    make, shapes, token_outputs = TASKS[request.param]
    return make(), shapes, token_outputs


def test_every_task_is_exported_and_follows_the_interface():
    exported = {name for name in tfmlib.data.__all__
                if isinstance(getattr(tfmlib.data, name), type) and issubclass(getattr(tfmlib.data, name), Task)}
    assert exported - {"Task"} == set(TASKS)              # a new task must be added to TASKS above
    with pytest.raises(TypeError):
        Task()                                            # the interface itself draws nothing


@pytest.mark.parametrize("b", [1, 7])
def test_batch_returns_long_tensors_of_the_documented_shapes(case, b):
    task, shapes, token_outputs = case
    assert isinstance(task, Task) and type(task.vocab_size) is int and task.vocab_size > FIRST_SYMBOL
    out = task.batch(b, generator=torch.Generator().manual_seed(0))
    assert isinstance(out, tuple) and all(isinstance(t, torch.Tensor) and t.dtype == torch.long for t in out)
    assert [tuple(t.shape) for t in out] == shapes(task, out, b)
    for i in token_outputs:
        assert 0 <= out[i].min() and out[i].max() < task.vocab_size


def test_same_seed_same_batch_and_the_generator_is_the_only_randomness(case):
    task = case[0]
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(3):                                    # several draws in a row stay in step
        assert all(torch.equal(a, b) for a, b in zip(task.batch(16, g1), task.batch(16, generator=g2)))
    assert torch.equal(g1.get_state(), g2.get_state())
    other = task.batch(16, torch.Generator().manual_seed(6))
    assert not all(torch.equal(a, b) for a, b in zip(task.batch(16, torch.Generator().manual_seed(5)), other))
    torch.manual_seed(3)                                  # generator=None: the global generator
    a = task.batch(4)
    torch.manual_seed(3)
    assert all(torch.equal(x, y) for x, y in zip(a, task.batch(4)))


@pytest.mark.parametrize("b", [0, -2])
def test_batch_size_below_one_is_refused(case, b):
    with pytest.raises(ValueError, match=f"batch_size must be >= 1, got {b}"):
        case[0].batch(b)


@pytest.mark.parametrize("make, name", [
    (lambda: SyntheticTranslation(n_symbols=0), "n_symbols"),
    (lambda: SyntheticTranslation(min_len=0), "min_len"),
    (lambda: SyntheticTranslation(min_len=5, max_len=4), "max_len"),
    (lambda: SyntheticTranslation().batch(2, length=0), "length"),
    (lambda: MarkedRecall(n_symbols=1), "n_symbols"),
    (lambda: MarkedRecall(seq_len=0), "seq_len"),
    (lambda: MarkedRecall(seq_len=9).batch(2, distance=9), "distance"),
    (lambda: CopyTask(0, 2), "n_symbols"),
    (lambda: CopyTask(3, 0), "half_len"),
    (lambda: TwoRelationTask(n_keys=1), "n_keys=1"),
    (lambda: TwoRelationTask(n_values=1), "n_values=1"),
    (lambda: TwoRelationTask(n_queries=0), "n_queries=0"),
    (lambda: LagTask(0, 1), "seq_len"),
    (lambda: LagTask(5, 0), "lag"),
    (lambda: LagTask(5, 2, n_symbols=0), "n_symbols"),
    (lambda: LagTask(4, 4), "lag=4, seq_len=4"),
])
def test_bad_arguments_raise_value_errors_naming_them(make, name):
    with pytest.raises(ValueError, match=name):
        make()


# --- the per-call keywords that fix what is otherwise drawn -------------------------------------------

def test_translation_length_fixes_every_sentence_and_draws_as_a_task_of_that_length():
    task = SyntheticTranslation(n_symbols=9, min_len=1, max_len=12, seed=2)
    for n in (1, 6, 16):                                  # 16: beyond the training range
        src, tgt_in, tgt_out = task.batch(20, torch.Generator().manual_seed(n), length=n)
        assert src.shape == (20, n) and (src != PAD).all()
        assert (tgt_in[:, 0] == BOS).all() and (tgt_out[:, -1] == EOS).all()
        fixed = SyntheticTranslation(n_symbols=9, min_len=n, max_len=n, seed=2)
        same = fixed.batch(20, torch.Generator().manual_seed(n))
        assert all(torch.equal(a, b) for a, b in zip((src, tgt_in, tgt_out), same))
    lengths = (task.batch(500, torch.Generator().manual_seed(0))[0] != PAD).sum(1)
    assert set(lengths.tolist()) == set(range(1, 13))    # the constructor's range, every length drawn


def test_recall_distance_fixes_the_mark():
    task = MarkedRecall(n_symbols=4, seq_len=9)
    tokens, target, distance = task.batch(30, torch.Generator().manual_seed(0), distance=2)
    assert (distance == 2).all() and (tokens[:, 9 - 1 - 2] == FIRST_SYMBOL + 4 + target).all()


# --- the helpers' argument checks ---------------------------------------------------------------------

def test_helpers_refuse_bad_shapes_naming_them():
    with pytest.raises(ValueError, match="seqs"):
        pad_batch([])
    with pytest.raises(ValueError, match=r"seqs must be 1-D tensors, got shapes \[\(2,\), \(2, 2\)\]"):
        pad_batch([torch.zeros(2), torch.zeros(2, 2)])
    with pytest.raises(ValueError, match=r"got shapes \(3, 4\) and \(2, 4\)"):
        exact_match(torch.zeros(3, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="block_size must be >= 1, got 0"):
        lm_batch(torch.arange(20), 2, 0)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        tfmlib.data.MarkovSource(4, 1).sample(0, 5)
