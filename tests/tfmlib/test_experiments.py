"""tfmlib.experiments: running a function over seeds and summarising mean / min / max."""
import numpy as np
import pytest
import torch

from tfmlib.experiments import Spread, over_seeds, plot_spread, summarise


def test_summarise_scalars_and_arrays():
    s = summarise([{"acc": 0.5, "curve": [1.0, 2.0]}, {"acc": 0.9, "curve": torch.tensor([3.0, 0.0])}])
    assert s["acc"].values.shape == (2,)
    assert s["acc"].mean == pytest.approx(0.7)
    assert (s["acc"].min, s["acc"].max) == (0.5, 0.9)
    np.testing.assert_allclose(s["curve"].mean, [2.0, 1.0])
    np.testing.assert_allclose(s["curve"].min, [1.0, 0.0])
    np.testing.assert_allclose(s["curve"].max, [3.0, 2.0])
    assert "2 seeds" in str(s["acc"])


def test_summarise_rejects_mismatched_keys_and_empty():
    with pytest.raises(ValueError, match="same keys"):
        summarise([{"a": 1.0}, {"b": 1.0}])
    with pytest.raises(ValueError, match="at least one"):
        summarise([])


def test_over_seeds_seeds_each_run_and_is_reproducible():
    def run(g):
        return {"x": torch.rand(1, generator=g).item(), "y": torch.rand(1).item()}

    a = over_seeds(run, seeds=[0, 1, 2], progress=False)
    b = over_seeds(run, seeds=[0, 1, 2], progress=False)
    assert len(a["x"]) == 3
    np.testing.assert_array_equal(a["x"].values, b["x"].values)       # same seeds, same numbers
    np.testing.assert_array_equal(a["y"].values, b["y"].values)       # the global generator is seeded too
    assert len(set(a["x"].values.tolist())) == 3                       # different seeds, different runs
    with pytest.raises(ValueError, match="at least one seed"):
        over_seeds(run, seeds=[], progress=False)


def test_plot_spread_draws_mean_and_band():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    line = plot_spread(ax, [0, 1], Spread(np.array([[0.0, 1.0], [2.0, 3.0]])), label="m")
    np.testing.assert_allclose(line.get_ydata(), [1.0, 2.0])
    assert len(ax.collections) == 1
    plt.close(fig)


def test_scalar_summaries_are_plain_floats():
    s = summarise([{"a": np.float32(0.25)}, {"a": 0.75}])["a"]
    assert type(s.mean) is float and type(s.min) is float and type(s.max) is float
    assert format(s.mean, ".2f") == "0.50"
