"""Blocking of the work over data cells (and baselines) from a byte budget.

Blocks are ``jax.checkpoint``-ed functions run under ``lax.map``, so reverse mode keeps the
data-grid inputs and each block's small integer coordinates, and rebuilds a block's fine-grid
intermediates when its cotangent is needed.
"""

from __future__ import annotations

import math

import jax
import numpy as np

DEFAULT_MEMORY_BUDGET_BYTES = 256 * 2**20


def block_size(n_items: int, bytes_per_item: float, budget_bytes: int) -> tuple[int, int]:
    """Items per block and number of blocks, balanced so the last block is nearly full."""
    size = int(min(max(budget_bytes // max(bytes_per_item, 1), 1), max(n_items, 1)))
    n_blocks = math.ceil(n_items / size)
    return math.ceil(n_items / n_blocks), n_blocks


def padded_blocks(n_items: int, size: int, n_blocks: int) -> np.ndarray:
    """(n_blocks, size) int32 item ids in order; the tail of the last block repeats item
    ``n_items - 1`` (its results are computed and dropped)."""
    ids = np.minimum(np.arange(n_blocks * size), n_items - 1)
    return ids.reshape(n_blocks, size).astype(np.int32)


def cell_coordinates(cells: np.ndarray, n_time: int) -> tuple[np.ndarray, np.ndarray]:
    """Channel and time index of flattened cell ids ``c = f * n_time + t``."""
    return (cells // n_time).astype(np.int32), (cells % n_time).astype(np.int32)


def map_blocks(body, xs, policy=None):
    """``body`` over the leading axis of ``xs``: one call when there is one block, else
    ``lax.map`` of the checkpointed body.

    ``policy`` is a ``jax.checkpoint_policies`` entry naming what a block may keep for reverse
    mode; the default keeps nothing beyond the block's inputs. A single block is not
    checkpointed: its intermediates fit the budget by construction, and recomputing them in
    reverse mode would cost time (a fifth of a quadrature value-and-gradient at the CPU
    benchmark size) and save no memory.
    """
    if jax.tree.leaves(xs)[0].shape[0] == 1:
        return jax.tree.map(lambda y: y[None], body(jax.tree.map(lambda x: x[0], xs)))
    return jax.lax.map(jax.checkpoint(body, prevent_cse=False, policy=policy), xs)


def unblock_cells(ys, n_bl: int, n_freq: int, n_time: int):
    """(n_blocks, n_bl, cells_per_block) block outputs -> (n_bl, n_freq, n_time)."""
    n_blocks, _, size = ys.shape
    vis = ys.transpose(1, 0, 2).reshape(n_bl, n_blocks * size)
    return vis[:, : n_freq * n_time].reshape(n_bl, n_freq, n_time)
