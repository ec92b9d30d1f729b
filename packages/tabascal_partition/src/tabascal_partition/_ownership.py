"""Contiguous ownership of the data's rows: device d owns rows [d*B, (d+1)*B)."""

from dataclasses import dataclass

import numpy as np

from tabascal_partition._validate import check_count


@dataclass(frozen=True)
class Ownership:
    """Contiguous blocks of rows, one per device, in the data's order.

    Attributes:
        n_bl: number of rows.
        n_dev: number of devices.
        block_size: B = ceil(n_bl / n_dev); each device holds a block of B rows (plus the spare
            row B that plans scatter padding into).
        start, stop: (n_dev,) int64; device d owns rows [start[d], stop[d]). The last block's
            overhang past n_bl is trimmed, and devices past the end own nothing
            (start == stop == n_bl).
    """

    n_bl: int
    n_dev: int
    block_size: int
    start: np.ndarray
    stop: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """(n_dev,) int64 number of rows each device owns."""
        return self.stop - self.start


def ownership(n_bl: int, n_dev: int) -> Ownership:
    """Split ``n_bl`` rows into ``n_dev`` contiguous blocks of ``B = ceil(n_bl / n_dev)`` rows.

    Args:
        n_bl: number of rows (int >= 0).
        n_dev: number of devices (int >= 1).

    Returns:
        The :class:`Ownership` blocks. Nothing is reordered: device d owns rows
        ``[d*B, min((d+1)*B, n_bl))``.
    """
    n_bl = check_count(n_bl, "n_bl", "ownership", 0)
    n_dev = check_count(n_dev, "n_dev", "ownership", 1)
    block_size = -(-n_bl // n_dev)
    edges = np.minimum(np.arange(n_dev + 1, dtype=np.int64) * block_size, n_bl)
    return Ownership(n_bl, n_dev, block_size, read_only(edges[:-1]), read_only(edges[1:]))


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only copy, so that a frozen plan's arrays cannot change under it either."""
    array = np.array(array)
    array.flags.writeable = False
    return array


def stable_order(labels: np.ndarray, n_labels: int) -> np.ndarray:
    """``argsort(labels, kind="stable")`` for labels in [0, n_labels): a radix sort when the
    labels fit 16 bits (numpy sorts those in linear time): 0.11 s instead of 0.48 s for 2M rows."""
    if n_labels <= 1 << 15:
        labels = labels.astype(np.int16)
    return np.argsort(labels, kind="stable")
