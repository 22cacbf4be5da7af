"""Small matplotlib helpers shared by the chapters (imported only when a chapter plots)."""
from __future__ import annotations

import matplotlib.pyplot as plt


def heatmap(matrix, ax=None, xlabel="key position j", ylabel="query position i", title=None,
            xticklabels=None, yticklabels=None, cmap="viridis", colorbar=True, vmin=None, vmax=None):
    """Draw a 2-D array (e.g. attention weights, rows = queries) with labelled axes; returns the axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3.5))
    m = matrix.detach().cpu().numpy() if hasattr(matrix, "detach") else matrix
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if xticklabels is not None:
        ax.set_xticks(range(len(xticklabels)), xticklabels, rotation=90)
    if yticklabels is not None:
        ax.set_yticks(range(len(yticklabels)), yticklabels)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax
