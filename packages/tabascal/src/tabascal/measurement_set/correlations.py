"""Choosing one correlation of a Measurement Set by its CASA correlation type.

CASA codes correlations with the Stokes enumeration of casacore (``Stokes::StokesTypes``):
I=1, Q=2, U=3, V=4, RR=5, RL=6, LR=7, LL=8, XX=9, XY=10, YX=11, YY=12. tabascal fits one
scalar visibility per cell: a parallel hand (XX, YY, RR, LL) or Stokes I. Stokes I is taken
from an I correlation when the data hold one, else formed from the parallel hands as
``I = (XX + YY) / 2`` or ``(RR + LL) / 2`` (CASA's convention), with
``sigma_I = sqrt(sigma_XX^2 + sigma_YY^2) / 2`` (independent noise in the two hands) and a cell
flagged when either hand is. Data holding a single correlation that is a parallel hand (XX
only, say, as single-feed arrays write) give that hand when Stokes I is asked: for an
unpolarised sky XX = YY = I, and it is all the data say about I.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STOKES_CODES = {"I": 1, "Q": 2, "U": 3, "V": 4, "RR": 5, "RL": 6, "LR": 7, "LL": 8}
STOKES_CODES |= {"XX": 9, "XY": 10, "YX": 11, "YY": 12}
CORRELATIONS = ("I", "XX", "YY", "RR", "LL")  # what tabascal can fit
PARALLEL_HANDS = ("XX", "YY", "RR", "LL")
PARALLEL_PAIRS = (("XX", "YY"), ("RR", "LL"))


def correlation_names(corr_types) -> list[str]:
    """CASA correlation codes (n_corr,) as names ('code 17' for unknown ones)."""
    names = {code: name for name, code in STOKES_CODES.items()}
    return [names.get(int(c), f"code {int(c)}") for c in corr_types]


@dataclass(frozen=True)
class CorrelationPlan:
    """Which of the data's correlations make the fitted one, and how.

    name: the fitted correlation ('I', 'XX', ...). indices: the columns of the data's
    correlation axis used, one (taken as is) or two parallel hands (averaged). stands_for:
    the correlation asked for when ``name`` is read in its place (Stokes I from the one hand
    the data hold), else None.
    """

    name: str
    indices: tuple[int, ...]
    source_names: tuple[str, ...]
    stands_for: str | None = None

    def vis(self, cells: np.ndarray) -> np.ndarray:
        """cells (..., n_corr) complex -> (...) complex64."""
        if len(self.indices) == 1:
            return cells[..., self.indices[0]].astype(np.complex64)
        a, b = self.indices
        return (0.5 * (cells[..., a] + cells[..., b])).astype(np.complex64)

    def flags(self, cells: np.ndarray) -> np.ndarray:
        """cells (..., n_corr) bool -> (...) bool: flagged where any used correlation is."""
        return np.any(cells[..., list(self.indices)], axis=-1)

    def sigma(self, sigma: np.ndarray) -> np.ndarray:
        """SIGMA (..., n_corr) -> (...) float64 noise of the fitted correlation."""
        used = np.asarray(sigma, dtype=np.float64)[..., list(self.indices)]
        if len(self.indices) == 1:
            return used[..., 0]
        return 0.5 * np.sqrt(np.sum(used**2, axis=-1))

    def describe(self) -> str:
        if len(self.indices) == 1:
            return self.name
        return f"{self.name} = ({' + '.join(self.source_names)}) / 2"


def correlation_plan(corr_types, wanted: str) -> CorrelationPlan:
    """The plan for fitting ``wanted`` (one of CORRELATIONS) from data whose correlation
    axis has the CASA codes ``corr_types`` (n_corr,). Raises ValueError naming what is there."""
    wanted = wanted.upper()
    names = correlation_names(corr_types)
    if wanted not in CORRELATIONS:
        raise ValueError(f"correlation {wanted!r} cannot be fitted; choose one of {CORRELATIONS}")
    if wanted in names:
        return CorrelationPlan(wanted, (names.index(wanted),), (wanted,))
    if wanted == "I":
        for pair in PARALLEL_PAIRS:
            if all(p in names for p in pair):
                return CorrelationPlan("I", tuple(names.index(p) for p in pair), pair)
        if len(names) == 1 and names[0] in PARALLEL_HANDS:
            return CorrelationPlan(names[0], (0,), (names[0],), stands_for="I")
        raise ValueError(
            f"Stokes I needs an I correlation or both parallel hands (XX and YY, or RR and LL); "
            f"the data hold {', '.join(names)}: {_choices(names)}"
        )
    raise ValueError(
        f"correlation {wanted} is not in the data, which hold {', '.join(names)}: {_choices(names)}"
    )


def _choices(names: list[str]) -> str:
    """What --correlation can choose among ``names``, for an error message."""
    hands = [n for n in names if n in PARALLEL_HANDS]
    if "I" in names or any(all(p in names for p in pair) for pair in PARALLEL_PAIRS):
        hands.insert(0, "I")
    if not hands:
        return f"none of them can be fitted (--correlation chooses among {', '.join(CORRELATIONS)})"
    return f"choose {' or '.join(hands)} with --correlation"
