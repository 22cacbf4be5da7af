"""Exercise 7's memory test measures memory whatever library an answer computes with (tfmcheck.checking.peak_memory).

Fast tests run the trusted test cell of the solution notebook in this process on answers written in several
styles; the slow test grades a handful of submissions through both grading paths (scripts/grade.py and plain
`nbgrader autograde` with the course's configuration).
"""
import contextlib
import csv
import io
import re
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tfmcheck.checking as check

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "07_efficiency" / "07_efficiency.ipynb"
MEMORY_TEST = "test_blockwise_memory"

# Answers for blockwise_attention, as a learner would write them.  FULL_* build the full score matrix and must lose
# the memory points; the others must keep them.
FULL_NUMPY = '''import math
import numpy as np
import torch


def blockwise_attention(q, k, v, block_size):
    """The whole score matrix and its softmax in NumPy."""
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    s = qn @ np.swapaxes(kn, -1, -2) / math.sqrt(qn.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return torch.from_numpy((p / p.sum(axis=-1, keepdims=True)) @ vn)
'''

FULL_IN_PLACE = '''import math
import numpy as np
import torch


def blockwise_attention(q, k, v, block_size):
    """The whole score matrix in one NumPy buffer, every step in place: the least memory a full matrix can take."""
    s = np.matmul(q.numpy(), np.swapaxes(k.numpy(), -1, -2))
    s *= 1 / math.sqrt(q.shape[-1])
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return torch.from_numpy(s @ v.numpy())
'''

FULL_FROM_NUMPY = '''import math
import numpy as np
import torch


def blockwise_attention(q, k, v, block_size):
    """Scores in NumPy, softmax in torch over a view of them."""
    s = torch.from_numpy(q.numpy() @ np.swapaxes(k.numpy(), -1, -2))
    return torch.softmax(s / math.sqrt(q.shape[-1]), dim=-1) @ v
'''

NUMPY_SCALARS = '''import numpy as np
import torch


def blockwise_attention(q, k, v, block_size):
    """Online softmax in torch; NumPy for the scalars."""
    scale = float(1 / np.sqrt(q.shape[-1]))
    m = torch.full((*q.shape[:-1], 1), -np.inf, dtype=q.dtype)
    l = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for start in np.arange(0, k.shape[-2], block_size):
        start = int(start)
        s = q @ k[..., start:start + block_size, :].mT * scale
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        c = torch.exp(m - m_new)
        l = l * c + p.sum(dim=-1, keepdim=True)
        acc = acc * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return acc / l
'''

NUMPY_BLOCKS = '''import numpy as np
import torch


def blockwise_attention(q, k, v, block_size):
    """Online softmax written in NumPy, on float64 copies of the inputs."""
    qn, kn, vn = (t.numpy().astype(np.float64) for t in (q, k, v))
    scale = 1 / np.sqrt(qn.shape[-1])
    m = np.full(qn.shape[:-1] + (1,), -np.inf)
    l = np.zeros(qn.shape[:-1] + (1,))
    acc = np.zeros(qn.shape[:-1] + (vn.shape[-1],))
    for start in range(0, kn.shape[-2], block_size):
        s = qn @ np.swapaxes(kn[..., start:start + block_size, :], -1, -2) * scale
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        p = np.exp(s - m_new)
        c = np.exp(m - m_new)
        l = l * c + p.sum(axis=-1, keepdims=True)
        acc = acc * c + p @ vn[..., start:start + block_size, :]
        m = m_new
    return torch.from_numpy(acc / l).to(q.dtype)
'''

# The whole score matrix in a NumPy buffer allocated when the answer's cell runs, filled with out= during the call:
# nothing is allocated during the call, so only the memory the process holds (held_bytes) sees it.
BUFFER_BEFORE_CALL = (ROOT / "grader" / "fixtures" / "attacks" / "memory-buffer-before-call.ipy").read_text()

# Tampering the scan refuses (it sets attributes of the checking module); graded with the scan off, only the grader's
# measurement from outside the kernel is left to catch it (test_memory_held_is_also_measured_from_outside_the_kernel).
REWRITES_THE_MEASURE = '''import math
import torch


class _Blind(torch.overrides.TorchFunctionMode):
    """Stands for the checks' tensor counter and sees nothing."""
    peak, where = 0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


check._PeakNumel = _Blind            # the largest tensor: never seen
check._BASELINE = (10 ** 13, 0)      # the memory held: counted from an impossible baseline
check._ALLOCATED_BASE = 10 ** 13     # and the allocations too


def blockwise_attention(q, k, v, block_size):
    """The whole score matrix, in torch."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v
'''

# Red-team round 45: the whole score matrix kept at half precision in NumPy, used only for each row's maximum; the
# values come from a second, exact pass.  Below it, the same in torch, block by block in a list (no one tensor is
# large), at half precision and at one byte a value.
FULL_HALF_NUMPY = (ROOT / "grader" / "fixtures" / "redteam45" / "07_efficiency-memory-half-precision-numpy.py").read_text()
FULL_LOW_PRECISION_BLOCKS = '''import math
import torch


def blockwise_attention(q, k, v, block_size):
    """Every block of scores kept in a list at low precision (and never used again); an exact second pass."""
    scale, kept, maxima = 1.0 / math.sqrt(q.shape[-1]), [], []
    for a in range(0, k.shape[-2], block_size):
        s = q @ k[..., a:a + block_size, :].transpose(-2, -1) * scale
        kept.append(KEEP)
        maxima.append(s.amax(-1))
    peak = torch.stack(maxima, -1).amax(-1, keepdim=True)
    top = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    bottom = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype)
    for a in range(0, k.shape[-2], block_size):
        e = torch.exp(q @ k[..., a:a + block_size, :].transpose(-2, -1) * scale - peak)
        bottom = bottom + e.sum(-1, keepdim=True)
        top = top + e @ v[..., a:a + block_size, :]
    return top / bottom
'''

# A full matrix in Python lists is measured by the tests of peak_memory below (list_scores), not through the test
# cell: on its inputs (a 33,554,432-value score matrix) a Python loop over single scores runs for minutes.
FULL = {"numpy": FULL_NUMPY, "numpy-in-place": FULL_IN_PLACE, "from-numpy": FULL_FROM_NUMPY,
        "buffer-before-call": BUFFER_BEFORE_CALL, "numpy-half": FULL_HALF_NUMPY,
        "torch-half-blocks": FULL_LOW_PRECISION_BLOCKS.replace("KEEP", "s.half()"),
        "torch-byte-blocks": FULL_LOW_PRECISION_BLOCKS.replace("KEEP", "s.to(torch.int8)")}
BLOCKWISE = {"numpy-scalars": NUMPY_SCALARS, "numpy-blocks": NUMPY_BLOCKS}
MEASURED = {"numpy": "measured with tracemalloc", "numpy-in-place": "measured with tracemalloc",
            "from-numpy": "largest tensor a torch operation", "buffer-before-call": "measured by the C allocator",
            "rewrites-measure": "more than when the setup cell ran", "numpy-half": "measured with tracemalloc",
            "torch-half-blocks": "measured by the C allocator", "torch-byte-blocks": "measured by the C allocator"}


def notebook_cells() -> dict:
    nb = json.loads(NOTEBOOK.read_text())
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"]) for c in nb["cells"]}


def run_cells(answer: str, tests=("test_blockwise_values", MEMORY_TEST)) -> dict:
    """Run the solution's setup cell, ``answer``, then the given test cells (hidden parts included) in this
    process: ``{test: None if it passed, else the error message}``."""
    cells = notebook_cells()
    ns: dict = {}
    exec(cells["setup"], ns)
    exec(answer, ns)
    verdicts = {}
    for name in tests:
        check.begin_test(name)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(cells[name], ns)
            verdicts[name] = None
        except Exception as err:  # noqa: BLE001
            verdicts[name] = f"{type(err).__name__}: {err}"
    return verdicts


# --- what the measurement sees -----------------------------------------------------------------------------

def test_a_buffer_made_before_the_call_is_held_memory():
    """A NumPy buffer allocated (and even written) before the call, then filled with out= during it, is counted
    from the baseline; an honest call on the same data is not charged for it once it is freed."""
    q, k = torch.randn(512, 4, dtype=torch.float64), torch.randn(4096, 4, dtype=torch.float64)
    full = 512 * 4096 * 8

    def numpy_into(buffer):
        def scores(q, k):
            np.matmul(q.numpy(), k.numpy().T, out=buffer)
            return float(buffer.sum())
        return scores

    check.memory_baseline()
    untouched, written = np.empty((512, 4096)), np.ones((512, 4096))
    for buffer in (untouched, written):
        _, used = check.peak_memory(numpy_into(buffer), q, k)
        assert used["traced_bytes"] < full // 8 and used["numel"] < 512 * 4096, used
        assert used["held_bytes"] >= full * 0.9, used
    del untouched, written
    check.memory_baseline()
    _, used = check.peak_memory(lambda q, k: float((q @ k[:64].T).sum()), q, k)
    # half the matrix: far from the 15 MB of either buffer, with room for the library code and pages a first call
    # touches (file pages count since round 6: RssFile)
    assert 0 <= used["held_bytes"] < full // 2 and used["cells_before_setup"] == 0, used


def test_a_missing_memory_measure_fails_only_when_graded(tmp_path):
    usage = {"numel": 1, "op": "add", "shape": [1], "traced_bytes": 0, "held_bytes": -1, "cells_before_setup": 0}
    check.assert_memory_below("f", usage, numel=10, nbytes=10, held=10)      # self-study off Linux: not checked
    with check.recording(tmp_path / "trace.jsonl"):     # the graded kernel only records: nothing decided there
        check.assert_memory_below("f", usage, numel=10, nbytes=10, held=10)
    with check.replay({}):                                # the grader's replay decides, on the recorded usage
        with pytest.raises(check.CheckFailure, match="could not read its own memory use"):
            check.assert_memory_below("f", usage, numel=10, nbytes=10, held=10)
        with pytest.raises(check.CheckFailure, match="1 cell\\(s\\) ran before the notebook's setup cell"):
            check.assert_memory_below("f", {**usage, "held_bytes": 0, "cells_before_setup": 1}, numel=10, nbytes=10,
                                      held=10)
    check.assert_memory_below("f", {**usage, "held_bytes": 0, "cells_before_setup": 1}, numel=10, nbytes=10, held=10)


def test_the_cells_run_before_the_setup_cell_are_counted_as_ipython_numbers_them():
    """In an IPython shell, as in a kernel: the setup cell run first has none before it; after a learner's cell, one."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        for before in (0, 1, 2):
            shell.reset()
            shell.execution_count = 1
            for _ in range(before):
                assert shell.run_cell("x = 1", store_history=True).success
            shell.run_cell("import tfmcheck.checking as check\ncheck.memory_baseline()", store_history=True)
            result = shell.run_cell("check.peak_memory(lambda: 0)[1]['cells_before_setup']", store_history=True)
            assert result.result == before, (before, result.result, result.error_in_exec)
    finally:
        InteractiveShell.clear_instance()
        check.memory_baseline()


def test_tracemalloc_sees_numpy_lists_and_from_numpy_views():
    """The bytes NumPy arrays (and torch.from_numpy views of them) and lists of floats hold are counted; a torch
    computation adds (almost) none."""
    q = torch.randn(64, 4, dtype=torch.float64)
    k = torch.randn(128, 4, dtype=torch.float64)
    full = 64 * 128 * 8

    def numpy_scores(q, k):
        return float((q.numpy() @ k.numpy().T).sum())

    def list_scores(q, k):
        qs, ks = q.tolist(), k.tolist()
        return len([[a[0] * b[0] for b in ks] for a in qs])

    def view_scores(q, k):
        return float(torch.from_numpy(q.numpy() @ k.numpy().T).sum())

    def torch_scores(q, k):
        return float((q @ k.T).sum())

    measured = {f.__name__: check.peak_memory(f, q, k)[1] for f in (numpy_scores, list_scores, view_scores,
                                                                       torch_scores)}
    assert measured["numpy_scores"]["traced_bytes"] >= full
    assert measured["view_scores"]["traced_bytes"] >= full
    assert measured["list_scores"]["traced_bytes"] >= 64 * 128 * 24, "a Python float takes 24 bytes"
    assert measured["torch_scores"]["traced_bytes"] < full // 8
    assert measured["torch_scores"]["numel"] == 64 * 128 and measured["torch_scores"]["shape"] == [64, 128]


def test_tensors_made_outside_torch_functions_are_seen_when_used():
    """A legacy constructor or a storage makes a tensor without a torch function; inside torch.func.vmap the mode
    sees one row at a time.  All of them are counted at their true size."""
    q, k = torch.randn(2, 24, 4), torch.randn(2, 40, 4)

    def legacy(q, k):
        s = torch.Tensor(2, 24, 40)
        s.numpy()[...] = q.numpy() @ np.swapaxes(k.numpy(), -1, -2)
        return s.sum()

    def storage(q, k):
        s = torch.empty(0).set_(torch.UntypedStorage(2 * 24 * 40 * 4)).view(2, 24, 40)
        return s.sum()

    def vmapped(q, k):
        rows = torch.func.vmap(torch.func.vmap(lambda qr, kb: torch.softmax(kb @ qr, -1), in_dims=(0, None)))
        return rows(q, k).sum()

    for f in (legacy, storage, vmapped):
        _, used = check.peak_memory(f, q, k)
        assert used["numel"] >= 2 * 24 * 40, (f.__name__, used)


def test_measurement_leaves_tracemalloc_as_it_found_it():
    import tracemalloc
    assert not tracemalloc.is_tracing()
    check.peak_memory(lambda: float(np.zeros(1000).sum()))     # a result of plain numbers (check._plain_result)
    assert not tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        _ = np.zeros(100_000)      # held before the call: not the function's
        _, used = check.peak_memory(lambda: float(np.ones(10_000).sum()))
        assert tracemalloc.is_tracing() and 80_000 <= used["traced_bytes"] < 200_000
    finally:
        tracemalloc.stop()


def test_peak_numel_keeps_its_contract():
    q, k = torch.randn(2, 8, 4), torch.randn(2, 32, 4)
    result, numel, where = check.peak_numel(lambda q, k: (q @ k.mT).sum(), q, k)
    assert numel == 2 * 8 * 32 and where == ("matmul", (2, 8, 32)) and float(result) == float((q @ k.mT).sum())


@pytest.mark.parametrize("usage", [None, {"numel": 3}, {"numel": "3", "traced_bytes": 0},
                                   {"numel": -1, "traced_bytes": 0}, [1, 2],
                                   {"numel": 3, "traced_bytes": 0, "held_bytes": "0", "cells_before_setup": 0},
                                   {"numel": 3, "traced_bytes": 0, "held_bytes": -2, "cells_before_setup": 0},
                                   {"numel": 3, "traced_bytes": 0, "held_bytes": 0}])
def test_a_malformed_measurement_fails_closed(usage):
    with pytest.raises(check.CheckFailure, match="not measured"):
        check.assert_memory_below("f", usage, numel=10, nbytes=10, held=10)


def test_messages_say_what_was_measured():
    with pytest.raises(check.CheckFailure, match=r"largest tensor a torch operation created or used had 1,000 "
                                                 r"elements \(operation matmul, shape \(10, 100\)\); the limit is 50"):
        check.assert_memory_below("f", {"numel": 1000, "op": "matmul", "shape": [10, 100], "traced_bytes": 0},
                                  numel=50, nbytes=400)
    with pytest.raises(check.CheckFailure, match=r"NumPy arrays and Python objects .* took 8,000 bytes, measured "
                                                 r"with tracemalloc; the limit is 400 bytes \(half\)"):
        check.assert_memory_below("f", {"numel": 1, "op": "add", "shape": [1], "traced_bytes": 8000},
                                  numel=50, nbytes=400, nbytes_is="half")
    check.assert_memory_below("f", {"numel": 50, "op": "add", "shape": [50], "traced_bytes": 400}, numel=50, nbytes=400)
    with pytest.raises(check.CheckFailure, match=r"the process held 9,000 bytes more than when the setup cell ran .*"
                                                 r"the limit is 400 bytes \(half\)"):
        check.assert_memory_below("f", {"numel": 1, "op": "add", "shape": [1], "traced_bytes": 0, "held_bytes": 9000,
                                        "cells_before_setup": 0}, numel=50, nbytes=400, held=400, held_is="half")


def test_the_allocator_counts_every_type_and_every_piece_kept_since_the_baseline():
    """Red-team round 45 kept the score matrix in float16, used only for each row's maximum: a quarter of its float64
    size, under the memory-held limit.  The C allocator's count (``allocated_bytes``) sees data of any type at its
    size, however many pieces it is in (a list of half-precision blocks, no one tensor large), made during the call
    or before it (a buffer of bytes made when the cell ran); what a call frees is not charged."""
    q, k = torch.randn(2048, 4, dtype=torch.float64), torch.randn(8192, 4, dtype=torch.float64)
    full = 2048 * 8192

    def kept_blocks(q, k):
        return [(q @ k[i:i + 64].T).half() for i in range(0, 8192, 64)]

    def blocks_only(q, k):
        return float(sum((q @ k[i:i + 64].T).exp().sum() for i in range(0, 8192, 64)))

    blocks_only(q, k)               # PyTorch's first calls allocate caches of their own: before the baseline
    check.memory_baseline()
    kept, used = check.peak_memory(kept_blocks, q, k)
    if used["allocated_bytes"] < 0:
        pytest.skip("no glibc: the allocator's count is checked only when graded")
    assert used["numel"] <= 512 * 64 * 4 and used["allocated_bytes"] >= full * 2, used
    del kept
    _, used = check.peak_memory(blocks_only, q, k)
    assert used["allocated_bytes"] < full // 2, used
    check.memory_baseline()
    buffer = torch.empty(full, dtype=torch.uint8)
    _, used = check.peak_memory(blocks_only, q, k)
    assert used["allocated_bytes"] >= full, used
    del buffer
    with pytest.raises(check.CheckFailure, match=r"allocated since the setup cell ran and still in use took 9,000 "
                                                 r"bytes, whatever their type .* the limit is 400 bytes \(half\)"):
        check.assert_memory_below("f", {"numel": 1, "op": "add", "shape": [1], "traced_bytes": 0,
                                        "allocated_bytes": 9000}, numel=50, nbytes=400, allocated=400,
                                  allocated_is="half")


def test_no_test_cell_draws_from_numpy_or_python_generators():
    """The trace restores torch's random state after each learner call, not NumPy's or Python's: sound only while
    every test cell draws its inputs from torch generators (see the grading guide)."""
    import re
    draws = re.compile(r"\b(np|numpy)\.random\b|(?<![\w.])random\.\w+\(|\bdefault_rng\b")
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if cell["cell_type"] == "code" and (meta.get("grade") or (meta.get("locked") and not meta.get("solution"))):
                source = "".join(cell["source"])
                assert not draws.search(source), (path.name, meta.get("grade_id"), draws.search(source).group(0))


# --- the exercise's own test cell ---------------------------------------------------------------------------

def solution_answer() -> str:
    nb = json.loads(NOTEBOOK.read_text())
    src = next("".join(c["source"]) for c in nb["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade_id") == "blockwise")
    return "import math\nimport torch\n" + src


@pytest.mark.parametrize("kind", sorted(FULL))
def test_full_matrix_answers_lose_the_memory_points(kind):
    verdicts = run_cells(FULL[kind])
    assert verdicts["test_blockwise_values"] is None, verdicts
    message = verdicts[MEMORY_TEST]
    assert message is not None and message.startswith("CheckFailure: blockwise_attention"), verdicts
    assert MEASURED[kind] in message and "the limit is" in message, message


def test_the_visible_and_hidden_memory_tests_check_the_same_limits():
    """Both parts of the test cell hold the same limits, relative to their inputs' full score matrix: the largest
    tensor an eighth of its values, the allocations half of it at one byte a value (red-team round 45 kept it in
    float16; below one byte a value a score matrix is no longer one), the memory held half of it in float64; the
    inputs are large enough for the process's memory to tell a float64 matrix (268 MB) from the noise of a kernel
    (tens of MB), and the blocks small enough for every honest answer to stay several times below the limits
    (scripts/memory_test_numbers.py)."""
    import re
    source = notebook_cells()[MEMORY_TEST]
    visible, hidden = source.split("### BEGIN HIDDEN TESTS")
    for part in (visible, hidden):
        assert "numel=full // 8, nbytes=full // 2, allocated=full // 2, held=full * 8 // 2" in part
        full = re.search(r"full = (\d+) \* (\d+) \* (\d+)", part).groups()
        assert int(full[0]) * int(full[1]) * int(full[2]) * 8 >= 256 * 1024 ** 2, full
        block = int(re.search(r"peak_memory\(blockwise_attention, q, k, v, (\d+),", part).group(1))
        # four float64 broadcast products (B, Tq, block, d = 4) alive at once fit under the allocation limit
        assert int(full[0]) * int(full[1]) * block * 4 * 8 * 4 <= int(full[0]) * int(full[1]) * int(full[2]) // 2, block


# The worked solution and every correct style keep the memory points: graded on both paths below, and run through
# the visible and hidden tests by tests/tfmcheck/test_verdicts.py.
@pytest.mark.parametrize("kind", sorted(BLOCKWISE))
def test_blockwise_answers_keep_them(kind):
    assert run_cells(BLOCKWISE[kind]) == {"test_blockwise_values": None, MEMORY_TEST: None}


def test_the_replay_reaches_the_memory_verdict_outside_the_kernel(tmp_path):
    """The kernel records (result, usage); the grader's replay of the trusted cell serves both and reaches the
    same verdict, with the same message."""
    from tfmcheck import trace
    from tfmgrader.verify import replay

    cells = notebook_cells()
    trusted = [("setup", cells["setup"], False), (MEMORY_TEST, cells[MEMORY_TEST], True)]
    for n, (answer, passes) in enumerate([(FULL_NUMPY, False), (NUMPY_SCALARS, True), (BUFFER_BEFORE_CALL, False)]):
        path = tmp_path / f"trace-{n}.jsonl"
        with check.recording(path):
            inside = run_cells(answer, tests=(MEMORY_TEST,))
        records, problems = trace.load(path)
        # the kernel records the visible and the hidden call and decides nothing (tfmcheck.withheld)
        assert problems == [] and len(records) == 2 and inside == {MEMORY_TEST: None}, inside
        assert all(set(r["value"]["tuple"][1]["dict"]) == {"numel", "op", "shape", "traced_bytes", "allocated_bytes",
                                                            "held_bytes", "cells_before_setup"}
                   for r in records.values())
        verdicts = replay(trusted, records, problems)
        assert verdicts.passed == {MEMORY_TEST: passes}, verdicts.messages
        if not passes:      # the replay's message is the one a learner reads (the named measure and its limit)
            assert re.search(r"too large|too much memory|held", verdicts.messages[MEMORY_TEST]), verdicts.messages


# --- both grading paths ------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("path", ["grade.py", "nbgrader"])
def test_both_grading_paths_take_the_memory_points_from_full_matrix_answers(tmp_path, path):
    """Submissions that build the full matrix in NumPy, through torch.from_numpy, or in a NumPy buffer made when
    their cell runs lose exactly the memory test's points, with a message naming what was measured; NumPy-helper and
    styled answers (a broadcast (..., Tq, block, d) product among them) keep full marks.  Each answer is graded on one
    of the two paths, alternately; the grade.py path also grades one with the scan off."""
    import nbformat
    from nbgrader.api import Gradebook

    from conftest import require_bwrap
    from test_grading import autograde, new_course
    require_bwrap()
    from fixtures.make_class import with_answers
    from tfmgrader.notebooks import answered
    from fixtures.answers import STYLES

    a = "07_efficiency"
    env = new_course(tmp_path, [a])
    good = answered(nbformat.read(tmp_path / "notebooks" / a / f"{a}.ipynb", as_version=4),
                    nbformat.read(tmp_path / "solutions" / a / f"{a}.ipynb", as_version=4))
    # a handful, split between the two paths to keep CI lean (both run nbgrader's Autograde with the course's
    # hardened pipeline): the other answers above are checked in this process only
    half = ["nbgrader", "grade.py"].index(path)
    subs = {f"mem-full-{k}": (False, FULL[k]) for k in ("numpy", "from-numpy", "buffer-before-call", "numpy-half",
                                                      "torch-byte-blocks")[half::2]}
    if path == "nbgrader":
        subs["mem-blocks-numpy-scalars"] = (True, NUMPY_SCALARS)
    subs.update({f"mem-style-{s}": (True, answers["blockwise"]) for s, answers in sorted(STYLES[a].items())[half::2]})
    if path == "grade.py":
        # Defence in depth, with the scan off (it refuses this answer): the kernel's own measurement rewritten (its
        # tensor counter and its baseline), the full matrix built; the grader's reading from outside the kernel
        # (tfmgrader.outside_memory) still takes the points.  The other answers grade the same with the scan off.
        subs["mem-full-rewrites-measure"] = (False, REWRITES_THE_MEASURE)
    for student, (_, src) in subs.items():
        folder = tmp_path / "submitted" / student / a
        folder.mkdir(parents=True)
        nbformat.write(with_answers(good, {"blockwise": src}), folder / f"{a}.ipynb")
    if path == "nbgrader":
        graded = autograde(tmp_path, env, a)
        assert all(s in graded for s in subs), graded["_log"]
    else:
        cfg = tmp_path / "noscan.py"
        cfg.write_text("c = get_config()\nc.ScanSubmission.enabled = False\n")
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), a, "--course", str(tmp_path),
                               "--extra-config", str(cfg)], env=env, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        with open(tmp_path / "grading" / a / "grades.csv") as f:
            rows = {r["student_id"]: r for r in csv.DictReader(f)}
        assert all(rows[s]["status"] == "graded" for s in subs), rows
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        for student, (keeps, _) in subs.items():
            sub = gb.find_submission(a, student)
            lost = {g.name: g.max_score - g.score for n in sub.notebooks for g in n.grades if g.score < g.max_score}
            assert lost == ({} if keeps else {MEMORY_TEST: 2}), (student, lost)
    for student, (keeps, _) in subs.items():
        if keeps:
            continue
        nb = nbformat.read(tmp_path / "autograded" / student / a / f"{a}.ipynb", as_version=4)
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == MEMORY_TEST)
        text = "\n".join(o.get("evalue", "") + "".join(o.get("traceback", [])) for o in cell.outputs)
        assert MEASURED[student.removeprefix("mem-full-")] in text, (student, text[-2000:])


def test_the_scan_refuses_rewriting_the_measure():
    from tfmgrader.scan import scan_cells
    cells = notebook_cells()
    flags = scan_cells({5: REWRITES_THE_MEASURE}, [cells["setup"]], [cells[MEMORY_TEST]], {"blockwise_attention"})
    assert any("check" in f.reason for f in flags), flags


def test_a_file_mapped_into_memory_counts_as_held(tmp_path):
    """Red-team round 6 held exercise 7's full score matrix in ``numpy.memmap`` files on disk: resident, but file
    pages (``RssFile``), which the measure once left out.  Inside the kernel and from outside alike, 64 MB written
    through a mapping of a file now count."""
    import os

    from tfmgrader.outside_memory import resident

    check.memory_baseline()
    before = resident([os.getpid()])
    grown_out = []

    def scores_in_a_file(path):
        mapped = np.memmap(path, dtype=np.float64, mode="w+", shape=(8 * 1024 * 1024,))
        mapped[:] = 1.0                                 # 64 MB, every page written
        grown_out.append(resident([os.getpid()]) - before)
        return float(mapped[-1])

    _, used = check.peak_memory(scores_in_a_file, str(tmp_path / "scores.bin"))
    assert used["held_bytes"] > 60e6 and grown_out[0] > 60e6, (used, grown_out)


def test_a_memory_test_cell_put_back_by_nbgrader_is_still_measured_from_outside():
    """Round 15 of the blind red team: a submission without exercise 7's memory test cell gets it back from nbgrader
    behind a comment ("# This cell (id:...) was missing ..."); the grader matched the trusted text exactly and so
    left its own measurement off.  Comment lines in front still count as the trusted cell; code in front does not."""
    from tfmgrader.preprocessors import is_trusted_text
    trusted = "out = check.peak_memory(blockwise_attention, q, k, v)\ncheck.assert_close('x', out, ref)\n"
    notice = "# This cell (id:test_blockwise_memory) was missing from the submission. It was added back by nbgrader.\n\n"
    assert is_trusted_text(trusted, trusted) and is_trusted_text(notice + trusted, trusted)
    assert not is_trusted_text("check.peak_memory = print\n" + trusted, trusted)
    assert not is_trusted_text(trusted.replace("q, k, v", "q, k, k"), trusted)
