"""How many fine samples a cell's average needs: error bounds of the Gauss-Legendre and
midpoint rules for a fringe that winds through ``c`` cycles across the cell, and the fewest
samples that hold it below a share of the noise (the sums are in ``rfi_vis``'s docstring).
"""

import math

import numpy as np

#: The fine-sampling rules: Gauss-Legendre nodes or the midpoint rule.
SAMPLINGS = ("gauss", "midpoint")


def _midpoint_error_bound(cycles: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bound on the midpoint rule's error for a fringe of ``cycles`` per cell, n samples."""
    w = np.abs(cycles)
    bound = np.minimum((np.pi * w) ** 2, np.pi * w) / (6.0 * n.astype(np.float64) ** 2)
    return np.where(n > w, bound, np.inf)


def gauss_error_bound(cycles: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bound on the n-node Gauss-Legendre rule's error for a fringe of ``cycles`` per cell:
    ``2^(2n) (n!)^4 / ((2n + 1) ((2n)!)^3) (pi c)^(2n)``, formed in logarithms."""
    w = np.pi * np.abs(np.asarray(cycles, np.float64))
    n = np.asarray(n, np.float64)
    log_k = 2 * n * np.log(2.0) + 4 * _lgamma(n + 1) - np.log(2 * n + 1) - 3 * _lgamma(2 * n + 1)
    with np.errstate(divide="ignore"):
        return np.where(w > 0, np.exp(log_k + 2 * n * np.log(np.maximum(w, 1e-300))), 0.0)


def _lgamma(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.lgamma, otypes=[np.float64])(x)


def required_samples(
    cycles, snr: float, tolerance: float, max_samples: int, sampling: str = "midpoint"
) -> np.ndarray:
    """Fewest fine samples n with averaging error <= tolerance * noise (n <= max_samples):
    powers of two for the midpoint rule, any count for Gauss-Legendre nodes.

    cycles: (n_bl,) largest fringe winding per cell; snr: RFI power |A|^2 over the noise.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling {sampling!r} is not known; use one of {SAMPLINGS}")
    cycles = np.asarray(cycles, np.float64)
    n = np.ones(cycles.shape, np.int64)
    bound, grow = (
        (gauss_error_bound, lambda k: k + 1)
        if sampling == "gauss"
        else (_midpoint_error_bound, lambda k: k * 2)
    )
    while True:
        short = (bound(cycles, n) * snr > tolerance) & (n < max_samples)
        if not short.any():
            return n
        n = np.where(short, np.minimum(grow(n), max_samples), n)
