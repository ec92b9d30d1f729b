"""Lower bounds on the antenna width of any plan that gives device d exactly its ownership count.

Two arguments, the larger wins (docs/partition.md derives both):

- **Counting.** Some device holds B = ceil(n_bl / n_dev) rows, and w antennas carry at most
  ``min(m * w(w-1)/2 + min(w, n_auto), (sum of the w largest degrees) / 2)`` rows, with m = 2 if
  some pair appears in both orientations (else 1), n_auto the autocorrelation rows, and a degree
  counting each cross row once per end and each autocorrelation twice.
- **Covering** (only when every pair of the antennas in cross rows is present). Give each
  antenna its type, the set of devices holding it. Every two antennas share a device, so the
  types pairwise intersect, and x_T / w (x_T antennas of type T) is a fractional matching of
  that intersecting family: ``n / w <= nu*``. If s is the smallest type in use, every type
  meets it, so ``nu* <= s``; and the types' total size is at most k w, so ``nu* <= k / s``.
  Hence ``w >= n / max_s min(s, k/s)``. For 4 devices a finer argument gives nu* <= 5/3, so
  ``w >= 3n/5``. The bound is met by the projective planes (3, 7, 13 devices), the pairs
  design (6) and the hub (4); 2 devices need every antenna on one device.
"""

from fractions import Fraction

import numpy as np


def covering_fraction(n_dev: int) -> Fraction:
    """Smallest width / n the covering argument allows for ``n_dev`` devices."""
    if n_dev == 4:
        return Fraction(3, 5)
    best = max(min(Fraction(s), Fraction(n_dev, s)) for s in range(1, n_dev + 1))
    return 1 / best


def width_lower_bound(a1: np.ndarray, a2: np.ndarray, n_ant: int, n_dev: int) -> int:
    """Fewest antennas the widest device can touch, for validated (n_bl,) int64 a1, a2."""
    n_bl = a1.shape[0]
    if n_bl == 0:
        return 0
    return max(_counting_bound(a1, a2, n_ant, n_dev), _covering_bound(a1, a2, n_ant, n_dev))


def _counting_bound(a1, a2, n_ant, n_dev) -> int:
    block = -(-a1.shape[0] // n_dev)
    cross = a1 != a2
    n_auto = int((~cross).sum())
    low, high = np.minimum(a1[cross], a2[cross]), np.maximum(a1[cross], a2[cross])
    both_ways = _distinct_pairs(low, high, n_ant) < low.size
    degree = np.bincount(a1, minlength=n_ant) + np.bincount(a2, minlength=n_ant)
    top_degree_sum = np.concatenate([[0], np.cumsum(np.sort(degree)[::-1])])
    w = np.arange(n_ant + 1, dtype=np.int64)
    capacity = np.minimum(
        (2 if both_ways else 1) * w * (w - 1) // 2 + np.minimum(w, n_auto), top_degree_sum // 2
    )
    return int(np.argmax(capacity >= block))


def _covering_bound(a1, a2, n_ant, n_dev) -> int:
    cross = a1 != a2
    low, high = np.minimum(a1[cross], a2[cross]), np.maximum(a1[cross], a2[cross])
    n_cross_ant = int(np.count_nonzero(np.bincount(np.concatenate([low, high]), minlength=n_ant)))
    n_pairs = _distinct_pairs(low, high, n_ant)
    if n_cross_ant < 2 or n_pairs < n_cross_ant * (n_cross_ant - 1) // 2:
        return 0
    fraction = covering_fraction(n_dev) * n_cross_ant
    return -(-fraction.numerator // fraction.denominator)


def _distinct_pairs(low: np.ndarray, high: np.ndarray, n_ant: int) -> int:
    """Number of distinct (low, high) pairs; a bitmap while it is small, else a sort."""
    key = low * n_ant + high
    if n_ant * n_ant <= 1 << 26:
        seen = np.zeros(n_ant * n_ant, bool)
        seen[key] = True
        return int(np.count_nonzero(seen))
    key = np.sort(key)
    return int(key.size and 1 + np.count_nonzero(key[1:] != key[:-1]))
