"""The memory a graded kernel holds, measured by the grader from outside the learner's process.

Exercise 7's memory test (``check.peak_memory``) measures inside the kernel, where code that got past every other
guard could rewrite the measurement.  The grader therefore also samples the kernel's processes from its own
process while the test cell runs (``Sampler``), from the end of the read-only cell that sets the memory baseline
(``check.memory_baseline()``), and the replay takes the larger of the two readings (``tfmcheck.trace.Replayer``).
What is read is the same measure the kernel uses, ``RssAnon + RssShmem + RssFile`` of ``/proc/<pid>/status``: the
memory the processes hold in RAM, whoever made it, files mapped into memory included (``numpy.memmap``: red-team
round 6); the libraries' code is counted too, but it is loaded before the baseline.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable

BASE, PEAK = "base", "peak"
FIELDS = (b"RssAnon:", b"RssShmem:", b"RssFile:")


def resident(pids: Iterable[int]) -> int:
    """Bytes of ``FIELDS`` summed over ``pids`` (processes that end meanwhile count as none), or -1 if none of
    them could be read."""
    total, read = 0, False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        found = [int(line.split()[1]) * 1024 for line in lines if line.startswith(FIELDS)]
        if len(found) == len(FIELDS):
            total, read = total + sum(found), True
    return total if read else -1


class Sampler:
    """While active, reads ``resident(pids())`` every ``interval`` seconds in a thread of its own (and on entry and
    exit): ``self.peak`` is the most the processes held at once (-1: never readable)."""

    def __init__(self, pids: Callable[[], list[int]], interval: float = 0.002):
        self.pids, self.interval = pids, interval

    def __enter__(self):
        self.peak, self._stop = resident(self.pids()), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        pids, n = self.pids(), 0
        while not self._stop.wait(self.interval):
            n += 1
            if n % 25 == 0:             # a process the kernel started meanwhile counts too
                pids = self.pids()
            self.peak = max(self.peak, resident(pids))

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident(self.pids()))
        return False


def memory_cells(trusted: dict[str, tuple[str, bool]]) -> dict[str, str]:
    """``{grade_id: BASE or PEAK}`` from the trusted cells (``preprocessors.trusted_sources``): the read-only cell
    that calls ``memory_baseline()``, and the test cells that call ``peak_memory(``."""
    cells = {}
    for gid, (source, is_test) in trusted.items():
        if is_test and "peak_memory(" in source:
            cells[gid] = PEAK
        elif not is_test and "memory_baseline()" in source:
            cells[gid] = BASE
    return cells
