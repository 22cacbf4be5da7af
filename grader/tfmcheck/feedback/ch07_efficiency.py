"""Chapter 7's mistakes (solutions/07_efficiency): sliding_window_mask, global_mask, blockwise_attention."""
from __future__ import annotations

import math

import torch

from .catalogue import Alternatives, _arange, _exp, _zeros, graded, mistake
from .families import SCALING

WIN_LINE = "mask[i, j] = True where |i − j| <= window"
GLOBAL_LINE = "mask[g, :] = True and mask[:, g] = True for every global position g"
BLOCK_ATTN_LINE = ("m_new = max(m, s.amax(-1));  p = exp(s − m_new);  correction = exp(m − m_new);  "
                   "l = l·correction + p.sum(-1);  acc = acc·correction + p @ v_block;  out = acc / l")


def band(n, lo, hi):
    """The (n, n) mask of the keys j with lo <= j − i <= hi (row i the query)."""
    pos = _arange(n)
    offset = pos[None, :] - pos[:, None]
    return (offset >= lo) & (offset <= hi)


def global_positions(n, global_idx, *, rows=True, columns=True):
    """The mask True in the rows and in the columns of the global positions."""
    idx = torch.as_tensor(global_idx, dtype=torch.long)
    m = _zeros(n, n, dtype=torch.bool)
    if rows:
        m[idx, :] = True
    if columns:
        m[:, idx] = True
    return m


def blockwise(q, k, v, block_size, *, scale=True, rescale_l=True, rescale_acc=True, divide=True, inverted=False):
    """Attention over the keys block by block, with a running maximum m, sum l and output acc."""
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale else 1.0
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)
    l = _zeros((*q.shape[:-1], 1), dtype=q.dtype)  # noqa: E741 - the chapter's running sum l
    acc = _zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) * factor
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = _exp(s - m_new)
        correction = _exp(m_new - m).nan_to_num(posinf=0.0) if inverted else _exp(m - m_new)
        l = (l * correction if rescale_l else l) + p.sum(dim=-1, keepdim=True)  # noqa: E741
        acc = (acc * correction if rescale_acc else acc) + p @ v[..., start:start + block_size, :]
        m = m_new
    return acc / l if divide else acc


MISTAKES = {
    "sliding_window_mask": graded(
        band, WIN_LINE,
        mistake("strict", "Your window leaves out its edges (|i − j| < window); they are included (<=).",
                lambda n, window: band(n, 1 - window, window - 1)),
        mistake("one_sided", "Your window only looks back (0 <= i − j <= window); it reaches both ways: "
                "|i − j| <= window.", lambda n, window: Alternatives([band(n, -window, 0), band(n, 0, window)])),
        mistake("no_abs", "Your condition has no absolute value (i − j <= window), so every later key passes.",
                lambda n, window: Alternatives([band(n, -window, n), band(n, -n, window)])),
        mistake("window_doubled", "Your window is twice as wide (|i − j| <= 2·window).",
                lambda n, window: band(n, -2 * window, 2 * window)),
        mistake("half_width", "Your window reaches only window // 2 positions each way (|i − j| <= window // 2); it "
                "reaches window positions each way.", lambda n, window: band(n, -(window // 2), window // 2)),
        mistake("one_too_wide", "Your window reaches one position too far (|i − j| <= window + 1).",
                lambda n, window: band(n, -window - 1, window + 1))),
    "global_mask": graded(
        global_positions, GLOBAL_LINE,
        mistake("rows_only", "Your mask sets only the rows of the global positions (they attend to every key); their "
                "columns must be True too (every query attends to them).", rows=True, columns=False),
        mistake("columns_only", "Your mask sets only the columns of the global positions; their rows must be True too "
                "(a global position attends to every key).", rows=False, columns=True),
        mistake("diagonal_added", "Your mask also sets the diagonal; only the rows and columns of the global positions "
                "are True.", lambda n, global_idx: global_positions(n, global_idx) | torch.eye(n, dtype=torch.bool)),
        mistake("intersection_only", "Your mask is True only where a global row meets a global column; it is True in "
                "the whole row and the whole column of every global position.", lambda n, global_idx: (
                    global_positions(n, global_idx, columns=False) & global_positions(n, global_idx, rows=False)))),
    "blockwise_attention": graded(
        blockwise, BLOCK_ATTN_LINE,
        mistake("no_rescale", "Your running sum and output are not rescaled by exp(m_old − m_new) when the running "
                "maximum grows.", rescale_l=False, rescale_acc=False),
        mistake("rescale_sum_only", "You rescale the running sum l but not the running output acc when the maximum "
                "grows.", rescale_acc=False),
        mistake("rescale_output_only", "You rescale the running output acc but not the running sum l when the maximum "
                "grows.", rescale_l=False),
        mistake("no_final_division", "Your result is not divided by the running sum l at the end.", divide=False),
        mistake("correction_inverted", "Your correction is exp(m_new − m_old), the inverse of exp(m_old − m_new).",
                inverted=True),
        SCALING.no_scaling.but(line="s = q @ k_blockᵀ / √d"),
        d="d"),
}
