"""A synthetic array for the command line and the benchmark.

Antennas are scattered over a disc of radius 4 km, denser towards the centre (radius ~ u**2
for uniform u), as in arrays with a compact core; the seed fixes the layout. Baselines are every
pair a1 < a2 in the usual order (a1 major), optionally with each antenna's autocorrelation
before its cross pairs. Groups are baseline-length quantiles: group 0 holds the shortest
1/K of the baselines, group K-1 the longest (autocorrelations, of length 0, fall in group 0).
"""

import numpy as np


def demo_baselines(n_ant: int, n_groups: int = 1, seed: int = 0, autocorrelations: bool = False):
    """Baselines and group labels of the synthetic array.

    Returns:
        ``(a1, a2, groups)``: (n_bl,) int64 antenna ids and (n_bl,) int64 labels in [0, n_groups).
    """
    rng = np.random.default_rng(seed)
    radius_m = 4000.0 * rng.random(n_ant) ** 2
    angle = 2 * np.pi * rng.random(n_ant)
    east_m, north_m = radius_m * np.cos(angle), radius_m * np.sin(angle)
    a1, a2 = np.triu_indices(n_ant, 0 if autocorrelations else 1)
    length_m = np.hypot(east_m[a1] - east_m[a2], north_m[a1] - north_m[a2])
    edges = np.quantile(length_m, np.arange(1, n_groups) / n_groups) if a1.size else []
    groups = np.searchsorted(edges, length_m, side="right")
    return a1.astype(np.int64), a2.astype(np.int64), groups.astype(np.int64)
