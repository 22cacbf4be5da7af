"""Record and replay of learners' results (tfmcheck.trace): the grader's verdicts reached outside the kernel."""
import json
from pathlib import Path

import pytest
import torch

from tfmcheck import trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", [
    torch.randn(2, 3, dtype=torch.float64), torch.randn(4).float(), torch.randn(3).bfloat16(),
    torch.tensor([True, False]), torch.arange(6).reshape(2, 3), torch.empty(0, 3), torch.tensor(2.5),
    torch.randn(2, dtype=torch.complex64),
])
def test_tensors_round_trip_exactly(value):
    back = trace.decode(json.loads(json.dumps(trace.encode(value))))
    assert type(back) is torch.Tensor and back.dtype == value.dtype and back.shape == value.shape
    assert torch.equal(back.view(torch.uint8) if value.dtype == torch.bfloat16 else back,
                       value.view(torch.uint8) if value.dtype == torch.bfloat16 else value)


def test_plain_values_round_trip():
    value = (1, 2.5, float("nan"), None, True, "x", [torch.ones(2), {"k": 3}])
    back = trace.decode(json.loads(json.dumps(trace.encode(value))))
    assert back[0] == 1 and type(back[0]) is int and back[1] == 2.5 and back[2] != back[2]
    assert back[3:6] == (None, True, "x") and type(back[6]) is list and back[6][1] == {"k": 3}


def test_other_objects_become_opaque_and_never_run_code():
    class Liar(torch.Tensor):
        pass
    for obj in (object(), Liar(torch.ones(2)), torch.nn.Linear(2, 2)):
        back = trace.decode(trace.encode(obj))
        assert isinstance(back, trace.Opaque)
    with pytest.raises(trace.TraceError):
        trace.decode({"tensor": "float32", "shape": [1000], "data": ""})   # bytes must match the shape
    with pytest.raises(trace.TraceError):
        trace.decode({"pickle": "gASV"})


def record_run(tmp_path, calls):
    """Record ``calls`` [(cell, fn, args)] as the learner's kernel would; return the loaded records."""
    path = tmp_path / "trace.jsonl"
    rec = trace.Recorder(str(path))
    results = []
    for cell, fn, args in calls:
        if cell != rec.cell:
            rec.begin(cell)
        try:
            results.append(rec.record((args, {}), lambda: fn(*args)))
        except Exception as err:  # noqa: BLE001
            results.append(err)
    return trace.load(path), results


def test_replay_serves_what_was_recorded(tmp_path):
    x = torch.randn(3, 4, dtype=torch.float64)
    (records, problems), results = record_run(tmp_path, [("a", torch.tanh, (x,)), ("a", lambda t: t.sum(), (x,)),
                                                         ("b", lambda t: 1 / 0, (x,))])
    assert problems == []
    rep = trace.Replayer(records)
    rep.begin("a")
    assert torch.equal(rep.record(((x,), {})), results[0])
    assert torch.equal(rep.record(((x,), {})), results[1])
    rep.begin("b")
    with pytest.raises(ZeroDivisionError):
        rep.record(((x,), {}))
    rep.begin("c")
    with pytest.raises(trace.TraceError, match="no result was recorded"):
        rep.record(((x,), {}))


def test_replay_checks_the_inputs_and_takes_no_state_from_the_trace(tmp_path):
    x = torch.zeros(3)

    def noisy(t):
        t += 1                           # changes its argument in place
        return torch.rand(2)             # and consumes the global generator
    torch.manual_seed(0)
    (records, _), _ = record_run(tmp_path, [("a", noisy, (x,))])
    torch.manual_seed(0)
    untouched = torch.rand(1)
    torch.manual_seed(0)
    y = torch.zeros(3)
    rep = trace.Replayer(records)
    rep.begin("a")
    with pytest.raises(trace.InputChanged, match="changed one of its input tensors in place"):
        rep.record(((y,), {}))
    assert torch.equal(y, torch.zeros(3)), "the test's own input is left as it was"
    assert torch.equal(torch.rand(1), untouched), "the replay's random state is its own"
    rep.begin("a")
    with pytest.raises(trace.TraceError, match="arguments of this call differ"):
        rep.record(((torch.ones(5),), {}))


def test_a_second_record_of_a_call_is_reported(tmp_path):
    path = tmp_path / "t.jsonl"
    line = json.dumps({"cell": "a", "n": 0, "args": "x", "value": None})
    path.write_text(line + "\n" + line + "\nnot json\n")
    records, problems = trace.load(path)
    assert len(records) == 1 and len(problems) == 2


def test_replay_of_a_test_cell(tmp_path):
    """verify.replay runs trusted cells against records: a wrong recorded result fails, a right one passes."""
    from tfmgrader.verify import replay
    setup = ("setup", "import torch\nimport tfmcheck.checking as check\n", False)
    test = ("t1", "x = torch.arange(4.0)\ncheck.assert_close('double', check.call(double, x), 2 * x)\n", True)
    for factor, verdict in [(2, True), (3, False)]:
        path = tmp_path / f"t{factor}.jsonl"
        rec = trace.Recorder(str(path))
        rec.begin("t1")
        import tfmcheck.checking as check
        check.begin_test("t1")
        x = torch.arange(4.0)
        rec.record(((x,), {}), lambda: factor * x)
        records, problems = trace.load(path)
        v = replay([setup, test], records, problems)
        assert v.passed == {"t1": verdict}, v.messages


def test_a_memory_measurement_is_recorded_and_served(tmp_path):
    """check.peak_memory records (result, usage) in the kernel; the replay serves the same plain data, so the
    memory verdict is reached outside it."""
    import numpy as np

    import tfmcheck.checking as check
    x = torch.randn(16, 4, dtype=torch.float64)

    def full(x):
        return torch.from_numpy(np.exp(x.numpy() @ x.numpy().T) @ x.numpy())
    path = tmp_path / "t.jsonl"
    with check.recording(path):
        check.begin_test("mem")
        out, usage = check.peak_memory(full, x)
    records, problems = trace.load(path)
    with check.replay(records):
        check.begin_test("mem")
        out2, usage2 = check.peak_memory(full, x)
    assert problems == [] and torch.equal(out, out2) and usage2 == usage
    assert usage["traced_bytes"] >= 16 * 16 * 8 and usage["numel"] == 16 * 4 and usage["shape"] == [16, 4]
    with pytest.raises(check.CheckFailure, match="measured with tracemalloc"):
        check.assert_memory_below("full", usage2, numel=16 * 16, nbytes=16 * 16 * 8 // 2)
