"""Designs for the antenna-reuse plan: antenna sets ("parts") and the devices that hold each.

A design for k devices splits the antennas into parts; part i is held by the devices in
``holders[i]``, and a device's antennas are the union of the parts it holds. A baseline between
parts i and j may go to any device in ``holders[i] & holders[j]``; the design is valid when that
is never empty (the holder sets pairwise intersect), and then every baseline has a device that
holds both of its antennas. Part i gets the share ``weights[i]`` of the antennas, so device d
touches about ``n * sum(weights[i] for parts held by d)`` antennas: its width.

Constructions (widths for the complete graph on n antennas):

- ``hub``, 4 devices: parts A, B, C of n/5 and D of 2n/5; device 0 holds A, B, C and device
  i = 1..3 holds the i-th of A, B, C and D: width 3n/5, which is optimal (docs/partition.md).
- ``pairs of p``: p equal parts, one device per pair of parts: k = p(p-1)/2 devices, width 2n/p
  (3 devices: 2n/3; 6 devices: n/2 from 4 parts taken two at a time; 10: 2n/5; 15: n/3).
- ``cyclic``: k equal parts on the cycle Z_k; device d holds parts d + S for a difference cover
  S of Z_k (every residue is a difference of two members), so any two parts share a device.
  Width |S| n / k. A perfect difference set gives a projective plane: {0, 1} mod 3,
  {0, 1, 3} mod 7 (the Fano plane, 3n/7) and {0, 1, 3, 9} mod 13 (4n/13). This works for any
  k and is the general method.
- ``searched``: irregular designs for 5, 8 and 9 devices (widths 5n/9, 25n/57, 7n/17), found
  offline by simulated annealing over holder sets with a linear program for the weights, each
  checked to balance (tools/search_designs.py). They beat the cyclic cover (3n/5, n/2, 4n/9)
  for those device counts; for 14 and 16 devices the same search found nothing better.
"""

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numpy as np


@dataclass(frozen=True)
class Design:
    """Parts, their holders and their shares of the antennas.

    Attributes:
        name: readable name of the construction.
        n_dev: number of devices k.
        holders: per part, the sorted devices that hold it.
        weights: per part, its share of the antennas (Fractions summing to 1).
    """

    name: str
    n_dev: int
    holders: tuple[tuple[int, ...], ...]
    weights: tuple[Fraction, ...]

    @property
    def membership(self) -> np.ndarray:
        """(n_dev, n_parts) bool: device d holds part i."""
        held = np.zeros((self.n_dev, len(self.holders)), bool)
        for part, devices in enumerate(self.holders):
            held[list(devices), part] = True
        return held

    @property
    def width_fraction(self) -> Fraction:
        """Largest share of the antennas any device holds."""
        return max(
            sum((w for w, h in zip(self.weights, self.holders, strict=True) if d in h), Fraction())
            for d in range(self.n_dev)
        )


def single_device() -> Design:
    return Design("one device", 1, ((0,),), (Fraction(1),))


def hub_design() -> Design:
    """Four devices, width 3n/5 (docs/partition.md, "Designs" and "Lower bound")."""
    fifth = Fraction(1, 5)
    return Design(
        "hub: ABC + AD, BD, CD", 4, ((0, 1), (0, 2), (0, 3), (1, 2, 3)), (fifth,) * 3 + (2 * fifth,)
    )


def pairs_design(n_parts: int) -> Design:
    """One device per pair of ``n_parts`` equal parts: k = p(p-1)/2 devices, width 2n/p."""
    pairs = list(itertools.combinations(range(n_parts), 2))
    holders = tuple(
        tuple(d for d, pair in enumerate(pairs) if part in pair) for part in range(n_parts)
    )
    return Design(
        f"pairs of {n_parts} parts", len(pairs), holders, (Fraction(1, n_parts),) * n_parts
    )


@cache
def difference_cover(n_dev: int) -> tuple[int, ...]:
    """Smallest S containing 0 whose differences cover Z_k (exhaustive for k <= 24).

    Past 24 devices it returns the standard cover: {0..m-1} and the multiples of m below k,
    m = ceil(sqrt(k)), about 2*sqrt(k) long, without claiming it is the smallest. (A residue x
    is j*m - i with j = ceil(x/m), 0 <= i < m; if j*m reaches k then x > k - m, and x = 0 - (k-x).)
    """
    if n_dev <= 24:
        for size in range(1, n_dev + 1):
            for rest in itertools.combinations(range(1, n_dev), size - 1):
                cover = (0, *rest)
                if len({(a - b) % n_dev for a in cover for b in cover}) == n_dev:
                    return cover
    m = int(np.ceil(np.sqrt(n_dev)))
    return tuple(sorted(set(range(m)) | set(range(0, n_dev, m))))


def cyclic_design(n_dev: int) -> Design:
    """Device d holds parts d + S (mod k) for the difference cover S: width |S| n / k."""
    cover = difference_cover(n_dev)
    holders = tuple(tuple(sorted((part - s) % n_dev for s in cover)) for part in range(n_dev))
    name = f"cyclic {{{', '.join(map(str, cover))}}} mod {n_dev}"
    if n_dev == 7 and len(cover) == 3:
        name += " (Fano plane)"
    return Design(name, n_dev, holders, (Fraction(1, n_dev),) * n_dev)


def _searched(n_dev: int, table: tuple[tuple[str, int], ...], denominator: int) -> Design:
    """A searched design from (holder bit string, weight numerator) pairs; bit d = device d."""
    holders = tuple(tuple(d for d, bit in enumerate(bits) if bit == "1") for bits, _ in table)
    weights = tuple(Fraction(numerator, denominator) for _, numerator in table)
    return Design(f"searched ({len(holders)} parts)", n_dev, holders, weights)


# From tools/search_designs.py: n_dev -> ((holder bits, weight numerator), ...), denominator.
_SEARCHED: dict[int, tuple[tuple[tuple[str, int], ...], int]] = {
    5: ((("11010", 2), ("01011", 2), ("01100", 1), ("00110", 1), ("10101", 3)), 9),
    8: (
        (
            ("11000100", 9),
            ("00011100", 8),
            ("01010011", 13),
            ("10101010", 12),
            ("10110001", 4),
            ("00100101", 6),
            ("01101000", 3),
            ("00001101", 2),
        ),
        57,
    ),
    9: (
        (
            ("000011110", 7),
            ("001101000", 3),
            ("100110001", 3),
            ("101000101", 5),
            ("101100100", 2),
            ("011010000", 4),
            ("010100011", 6),
            ("110001000", 4),
        ),
        34,
    ),
}


def designs_for(n_dev: int) -> list[Design]:
    """Every design this package has for ``n_dev`` devices, named constructions first."""
    if n_dev == 1:
        return [single_device()]
    found = []
    if n_dev == 4:
        found.append(hub_design())
    n_parts = (1 + math.isqrt(1 + 8 * n_dev)) // 2
    if n_parts * (n_parts - 1) // 2 == n_dev:
        found.append(pairs_design(n_parts))
    found.append(cyclic_design(n_dev))
    if n_dev in _SEARCHED:
        found.append(_searched(n_dev, *_SEARCHED[n_dev]))
    return found


def part_sizes(design: Design, n: int) -> np.ndarray:
    """Integer part sizes summing to ``n`` that keep the widest device as narrow as possible.

    Rounds ``weights * n`` by largest remainder, then moves single antennas between parts while
    that lowers the largest device load, or the number of devices at it.

    Returns:
        (n_parts,) int64 sizes.
    """
    held = design.membership.astype(np.int64)
    n_parts = held.shape[1]
    exact = np.array([float(w) for w in design.weights]) * n
    sizes = np.floor(exact).astype(np.int64)
    remainder_order = np.argsort(-(exact - sizes), kind="stable")
    sizes[remainder_order[: n - int(sizes.sum())]] += 1
    loads = held @ sizes
    # A move a -> b changes every load by held[:, b] - held[:, a]; try them all at once.
    change = held[:, None, :] - held[:, :, None]
    for _ in range(4 * n_parts + 16):
        moved = loads[:, None, None] + change
        peak = moved.max(axis=0)
        score = peak * (design.n_dev + 1) + (moved == peak).sum(axis=0)
        score[sizes == 0, :] = np.iinfo(np.int64).max
        a, b = np.unravel_index(np.argmin(score), score.shape)
        current = loads.max() * (design.n_dev + 1) + (loads == loads.max()).sum()
        if score[a, b] >= current:
            break
        sizes[a] -= 1
        sizes[b] += 1
        loads = held @ sizes
    return sizes
