"""Search reuse-plan designs for a device count (offline; needs scipy, which the package does not).

A design gives each part (antenna set) its holders, the devices that hold it; holder sets must
pairwise intersect. For a family of holder sets, the narrowest width is a linear program over
the parts' shares x (width w = max over devices of the shares it holds, sum of x = 1), and the
design is usable only if the baselines then balance: every device must be able to receive
exactly 1/k of them, each baseline between parts i and j going to a holder of both (a
transportation problem, also a linear program, on the complete graph's fluid limit).

Simulated annealing toggles single devices in single holder sets, scoring
``width + 0.5 * overload`` (overload: the smallest largest relative excess of a device over its
share). The best family is printed as the ``_SEARCHED`` entry of ``_designs.py``.

    python packages/tabascal_partition/tools/search_designs.py --devices 8 --seeds 3

The designs in ``_designs.py`` came from runs like that one (iterations 2500-4000, 2-3 seeds,
starting from the cyclic difference-cover design plus a few spare parts held by every device).
"""

import argparse
import math
import random
from fractions import Fraction

import numpy as np
from scipy.optimize import linprog

from tabascal_partition._designs import cyclic_design


def _holds(family, k):
    return np.array([[(holders >> d) & 1 for holders in family] for d in range(k)], float)


def narrowest_shares(family, k):
    """Width and shares minimising the widest device (the LP), ignoring the balance."""
    held = _holds(family, k)
    p = len(family)
    # variables: shares x (p), width w; minimise w s.t. held @ x <= w, sum x = 1
    cost = np.r_[np.zeros(p), 1.0]
    a_ub = np.c_[held, -np.ones(k)]
    a_eq = np.r_[np.ones(p), 0.0][None, :]
    result = linprog(cost, A_ub=a_ub, b_ub=np.zeros(k), A_eq=a_eq, b_eq=[1.0], method="highs")
    return result.x[-1], result.x[:p]


def overload(family, shares, k):
    """Smallest largest relative excess of a device over 1/k of the baselines (0: balances)."""
    cells = [(i, j) for i in range(len(family)) for j in range(i, len(family))]
    variables = [
        (c, d)
        for c, (i, j) in enumerate(cells)
        for d in range(k)
        if (family[i] & family[j]) >> d & 1
    ]
    n_var = len(variables) + 1
    a_eq = np.zeros((len(cells), n_var))
    b_eq = np.array([shares[i] * shares[j] * (0.5 if i == j else 1.0) for i, j in cells])
    a_ub = np.zeros((k, n_var))
    for v, (c, d) in enumerate(variables):
        a_eq[c, v] = 1
        a_ub[d, v] = 1
    a_ub[:, -1] = -1
    cost = np.zeros(n_var)
    cost[-1] = 1
    result = linprog(
        cost, A_ub=a_ub, b_ub=np.full(k, 0.5 / k), A_eq=a_eq, b_eq=b_eq, method="highs"
    )
    return result.fun * 2 * k


def score(family, k):
    width, shares = narrowest_shares(family, k)
    return width + 0.5 * overload(family, shares, k)


def intersecting(family):
    return all(family[i] & family[j] for i in range(len(family)) for j in range(i))


def anneal(k, start, iterations, seed):
    rng = random.Random(seed)
    family, current = list(start), score(start, k)
    best = (current, list(family))
    for step in range(iterations):
        temperature = 0.03 * (1 - step / iterations) + 1e-4
        trial = list(family)
        for _ in range(1 + (rng.random() < 0.3)):
            trial[rng.randrange(len(trial))] ^= 1 << rng.randrange(k)
        if 0 in trial or not intersecting(trial):
            continue
        value = score(trial, k)
        if value <= current or rng.random() < math.exp((current - value) / temperature):
            family, current = trial, value
            if value < best[0] - 1e-9:
                best = (value, list(trial))
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--spare-parts", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=2500)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    k = args.devices
    cyclic = cyclic_design(k)
    start = [sum(1 << d for d in holders) for holders in cyclic.holders]
    start += [(1 << k) - 1] * args.spare_parts
    _, family = min(
        (anneal(k, start, args.iterations, s) for s in range(args.seeds)), key=lambda r: r[0]
    )
    width, shares = narrowest_shares(family, k)
    print(f"# {k} devices: width {width:.4f} n, overload {overload(family, shares, k):.2e}")
    fractions = [Fraction(x).limit_denominator(200) for x in shares]
    denominator = math.lcm(*(f.denominator for f in fractions if f))
    entries = [
        (format(holders, f"0{k}b")[::-1], int(f * denominator))
        for holders, f in zip(family, fractions, strict=True)
        if f
    ]
    print(f"{k}: ({tuple(entries)}, {denominator}),")


if __name__ == "__main__":
    main()
