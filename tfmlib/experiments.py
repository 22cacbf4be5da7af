"""Conclusions over several seeds: run one training function per seed, collect, summarise.

The models of the chapters are tiny, so one training run can land anywhere. A chapter that states
something about a trained model runs the experiment with ``over_seeds``, prints or glues the summary
(mean, min, max over seeds), plots it as a mean with its range (``plot_spread``) and asserts the claim
on the worst seed, so that the book fails to build rather than publish a sentence its figure contradicts.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from .utils import seed_everything

SEEDS = (0, 1, 2)


def _plain(x):
    """A 0-d result as a Python float (so that ``glue`` and ``format`` see a plain number), else the array."""
    return float(x) if np.ndim(x) == 0 else x


@dataclass
class Spread:
    """One measured quantity over seeds: ``values`` has shape ``(n_seeds, ...)``.

    ``mean``, ``min`` and ``max`` are taken over the seeds: a float for a scalar quantity, an array
    of the quantity's shape otherwise.
    """
    values: np.ndarray

    @property
    def mean(self):
        return _plain(self.values.mean(axis=0))

    @property
    def min(self):
        return _plain(self.values.min(axis=0))

    @property
    def max(self):
        return _plain(self.values.max(axis=0))

    def __len__(self):
        return len(self.values)

    def __str__(self):
        if self.values.ndim == 1:
            return f"{self.mean:.3f} (min {self.min:.3f}, max {self.max:.3f}, {len(self)} seeds)"
        return f"Spread of shape {self.values.shape[1:]} over {len(self)} seeds"


def summarise(results: list[dict]) -> dict[str, Spread]:
    """Turn one dict per seed (name -> float, array or tensor of a fixed shape) into name -> ``Spread``."""
    if not results:
        raise ValueError("need the results of at least one seed")
    keys = list(results[0])
    if any(list(r) != keys for r in results):
        raise ValueError(f"every seed must return the same keys, got {[sorted(r) for r in results]}")

    def as_array(v):
        if hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        return np.asarray(v, dtype=np.float64)

    return {k: Spread(np.stack([as_array(r[k]) for r in results])) for k in keys}


def over_seeds(run, seeds=SEEDS, desc: str = "seeds", progress: bool = True) -> dict[str, Spread]:
    """Call ``run(generator)`` once per seed and summarise what it returns.

    Before each call every random number generator is seeded with ``seed_everything(seed)``; ``run``
    receives the CPU generator it returns, builds and trains its model, and returns a dict of measured
    quantities (floats, or arrays/tensors of a fixed shape). Returns name -> ``Spread`` over the seeds.
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("need at least one seed")
    results = []
    for seed in tqdm(seeds, desc=desc, disable=not progress, file=sys.stdout, ncols=80):
        results.append(dict(run(seed_everything(seed))))
    return summarise(results)


def plot_spread(ax, x, spread: Spread, label: str | None = None, **kwargs):
    """Draw a curve measured over seeds: its mean as a line, its range (min to max) as a shaded band."""
    line, = ax.plot(x, spread.mean, label=label, **kwargs)
    ax.fill_between(x, spread.min, spread.max, color=line.get_color(), alpha=0.2, lw=0)
    return line
