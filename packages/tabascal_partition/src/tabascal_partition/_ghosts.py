"""Ghost antennas: zero-signal antennas appended after the real ones to make fresh pairs.

A device whose share of a group is short of the group's padded count fills the gap with pairs
that involve a ghost: they repeat no real pair (a real pair has both ids below ``n_ant``),
carry zero signal and take no gradient. With g ghosts at ids ``n_ant .. n_ant+g-1`` there are

    n_ant * g           pairs (real j, ghost k), then
    g * (g + 1) / 2     pairs (ghost i, ghost k) with i <= k,

and the fresh pairs are enumerated in that order: pair number ``m < n_ant*g`` is
``(m mod n_ant, n_ant + m div n_ant)``, so the first ghost is paired with every real antenna
before the second ghost is used.
"""

import math

import numpy as np


def ghost_pair_capacity(n_ant: int, n_ghost: int) -> int:
    """Number of distinct unordered pairs with at least one of ``n_ghost`` ghosts."""
    return n_ant * n_ghost + n_ghost * (n_ghost + 1) // 2


def ghosts_needed(n_ant: int, n_pairs: int) -> int:
    """Fewest ghosts whose fresh pairs number at least ``n_pairs``.

    Solves ``g**2 + (2*n_ant + 1)*g - 2*n_pairs >= 0`` in integers.
    """
    if n_pairs <= 0:
        return 0
    b = 2 * n_ant + 1
    n_ghost = max(0, (math.isqrt(b * b + 8 * n_pairs) - b) // 2)
    while ghost_pair_capacity(n_ant, n_ghost) < n_pairs:
        n_ghost += 1
    return n_ghost


def ghost_pairs(n_ant: int, n_ghost: int, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fresh pairs numbered ``index`` in the enumeration above.

    Args:
        n_ant: real antennas in the device's numbering (ghosts start at this id).
        n_ghost: ghosts appended.
        index: (m,) int64 pair numbers in [0, ghost_pair_capacity(n_ant, n_ghost)).

    Returns:
        ``(a1, a2)``, two (m,) int64 arrays; distinct numbers give distinct unordered pairs.
    """
    index = np.asarray(index, dtype=np.int64)
    if index.size and int(index.max()) >= ghost_pair_capacity(n_ant, n_ghost):
        raise ValueError(
            f"ghost_pairs: pair number {int(index.max())} needs more than {n_ghost} ghosts"
        )
    real_ghost = index < n_ant * n_ghost
    a1 = np.empty_like(index)
    a2 = np.empty_like(index)
    if n_ant:
        a1[real_ghost] = index[real_ghost] % n_ant
        a2[real_ghost] = n_ant + index[real_ghost] // n_ant
    # Ghost-ghost pairs (i, k), i <= k, numbered k*(k+1)/2 + i.
    m = index[~real_ghost] - n_ant * n_ghost
    k = ((np.sqrt(8.0 * m + 1.0) - 1.0) // 2).astype(np.int64)
    k += (k + 1) * (k + 2) // 2 <= m  # float rounding can leave k one short or one over
    k -= k * (k + 1) // 2 > m
    a1[~real_ghost] = n_ant + m - k * (k + 1) // 2
    a2[~real_ghost] = n_ant + k
    return a1, a2
