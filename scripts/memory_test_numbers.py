"""The numbers of the grading guide's table for exercise 7's memory test (book/appendix/grading.md).

    .venv/bin/python scripts/memory_test_numbers.py [ANSWER ...]

Runs each answer of tests/tfmcheck/test_memory_check.py (and the correct styles of
grader/fixtures/styles/07_efficiency) in this process, after the solution's setup cell, on the memory test's visible
and hidden inputs, and prints per answer and input: the largest tensor (elements), the NumPy and Python bytes
(tracemalloc), the bytes allocated since the setup cell (the C allocator), the memory held beyond the setup cell's
baseline (bytes) and the seconds the call took. Numbers of memory held move by some megabytes from run to run; the
times depend on the machine's load and on PyTorch's threads (the grading kernel uses one).
"""
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "tfmcheck"), str(ROOT / "tests" / "tfmgrader"),
                 str(ROOT / "grader")]

import torch  # noqa: E402

import tfmcheck.checking as check  # noqa: E402
import test_memory_check as t  # noqa: E402
from fixtures.answers import STYLES  # noqa: E402

INPUTS = [(((1, 4096, 4), (1, 8192, 4), (1, 8192, 2)), 16), (((2, 2048, 4), (2, 8192, 4), (2, 8192, 3)), 25)]


def answers() -> dict[str, str]:
    styles = {f"style {name}": cells["blockwise"] for name, cells in STYLES["07_efficiency"].items()}
    return {"solution": t.solution_answer(), "numpy-scalars": t.NUMPY_SCALARS, "numpy-blocks": t.NUMPY_BLOCKS,
            **styles, **{f"full {k}": v for k, v in t.FULL.items()}}


def main(names: list[str]) -> None:
    table = answers()
    print("answer | visible: numel, traced bytes, allocated bytes, held bytes, s | hidden: the same")
    for name in names or list(table):
        ns: dict = {}
        exec(t.notebook_cells()["setup"], ns)  # noqa: S102 - the course's own setup cell (it takes the baseline)
        exec(table[name], ns)  # noqa: S102
        row = []
        for shapes, block in INPUTS:
            g = torch.Generator().manual_seed(1)
            q, k, v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes)
            start = time.perf_counter()
            _, used = check.peak_memory(ns["blockwise_attention"], q, k, v, block, forbid=("tfmlib", "sdpa"))
            row.append(f"{used['numel']:,}, {used['traced_bytes']:,}, {used['allocated_bytes']:,}, "
                       f"{used['held_bytes']:,}, {time.perf_counter() - start:.1f}")
        print(f"{name} | " + " | ".join(row), flush=True)
        del ns
        gc.collect()


if __name__ == "__main__":
    main(sys.argv[1:])
