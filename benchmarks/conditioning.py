"""How well each preconditioner conditions the Gauss-Newton matrix that the
Levenberg-Marquardt solves (``fit.polish: levenberg-marquardt``) face.

    python benchmarks/conditioning.py --scenarios demo

For each scenario's model as ``tabascal run`` builds it from its data-based start, in
float64 on one device, this forms the Gauss-Newton matrix H = J' W J + I (in nats per
whitened unit squared) densely, one product per parameter, so it is for small models only,
and gives the spectrum of M^-1/2 H M^-1/2 for block-diagonal preconditioners M made from
H's own blocks: its diagonal (Jacobi, what the solver uses); the whole of each parameter
leaf; and, by the parameters' trailing (mode) axes, blocks of the last one, two and three
axes, and the solver's mode blocks (``fitting.MODE_AXES``) exact and as products would estimate them
(``probed_blocks``). Conjugate gradients need about sqrt(condition) iterations where the spectrum is
spread, and one more per isolated small eigenvalue: the counts below 0.1 and 0.01 say how
many there are.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import _common

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["demo"])
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


def dense_gauss_newton(store: Path):
    """H (float64, nats per whitened unit squared) at the data-based start of the store's
    model, and the parameters' leaves as (name, shape)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree

    from tabascal import fitting
    from tabascal.fitting import run_config
    from tabascal.parallel import blockwise, routes
    from tabascal.store import read_observation

    obs = read_observation(store)
    config = run_config.load(
        {"precision": "double", "fit": {"init": "data", "polish": "levenberg-marquardt"}}
    )
    plan = fitting.plan_run(config, shard_axis="none", reuse_plan=False)
    plan = dataclasses.replace(plan, init="data")
    route = routes.route("none", False)
    with fitting.precision_scope("double"):
        placed = fitting.placed_model(route, blockwise.MemoryRows(obs), plan, False)
        inputs = (placed.constants, placed.data)
        product = route.curvature_fn(plan.fit, placed.spec)
        flat, unravel = ravel_pytree(placed.params)
        columns = jax.jit(
            jax.vmap(lambda v: ravel_pytree(product(placed.params, unravel(v), inputs))[0])
        )
        eye = np.eye(flat.size)
        h = np.concatenate([np.asarray(columns(jnp.asarray(eye[i : i + 128]))) for i in
                            range(0, flat.size, 128)])  # fmt: skip
        h = 0.5 * (h + h.T) * float(placed.data.n_points)
        leaves = [
            (jax.tree_util.keystr(path), np.shape(x))
            for path, x in jax.tree_util.tree_leaves_with_path(placed.params)
        ]
    return h, leaves


def leaf_rows(leaves, axes_of):
    """Each leaf's name and its flattened parameters' indices as (rows, b): blocks over its
    last ``axes_of(name)`` axes (None: the whole leaf, one row)."""
    import numpy as np

    rows, start = [], 0
    for name, shape in leaves:
        size = int(np.prod(shape))
        index = np.arange(start, start + size).reshape(shape)
        start += size
        axes = axes_of(name)
        k = index.ndim if axes is None else min(axes, index.ndim)
        rows.append((name, index.reshape(-1, int(np.prod(shape[index.ndim - k :])))))
    return rows


def block_groups(leaves, axes_of):
    """Index groups of the flattened parameters: the rows of ``leaf_rows``."""
    return [row for _, rows in leaf_rows(leaves, axes_of) for row in rows]


def mode_axes(name: str) -> int | None:
    """The axes the solver's blocks span in the leaf ``name`` (``fitting.MODE_AXES``)."""
    from tabascal.fitting import MODE_AXES

    return next((axes for prefix, axes in MODE_AXES.items() if name.startswith(prefix)), None)


def probed_blocks(h, leaves, axes_of, draws: int, seed: int = 0):
    """H's blocks over ``leaf_rows`` as products would estimate them: for each leaf and each
    place j in its blocks, the product with e_j in every row of the leaf at once, each row's
    sign random (the sky's rows, which no product couples, all +1), the row's part of the
    product times its sign, averaged over ``draws`` such products: H's groups and their
    estimated blocks."""
    import numpy as np

    rng = np.random.default_rng(seed)
    estimated = []
    for name, rows in leaf_rows(leaves, axes_of):
        blocks = np.zeros((len(rows), rows.shape[1], rows.shape[1]))
        for _ in range(draws):
            signs = (
                np.ones(len(rows))
                if name.startswith(".sky")
                else rng.choice([-1.0, 1.0], len(rows))
            )
            for j in range(rows.shape[1]):
                z = np.zeros(len(h))
                z[rows[:, j]] = signs
                blocks[:, :, j] += signs[:, None] * (h @ z)[rows] / draws
        estimated += [(row, 0.5 * (b + b.T)) for row, b in zip(rows, blocks, strict=True)]
    return estimated


#: The blocks' eigenvalues are floored at the priors' curvature, 1 nat per whitened unit
#: squared, below which H has none (H = J' W J + I).
FLOOR = 1.0


def spectrum_of_blocks(h, blocks):
    """Eigenvalues of B^-1/2 H B^-1/2 for the block-diagonal B of (group, block) pairs, each
    block's eigenvalues floored at ``FLOOR``."""
    import numpy as np

    inverse = np.zeros_like(h)
    for g, b in blocks:
        lam, vec = np.linalg.eigh(b)
        lam = np.maximum(lam, FLOOR)
        inverse[np.ix_(g, g)] = vec @ np.diag(lam**-0.5) @ vec.T
    return np.linalg.eigvalsh(inverse @ h @ inverse.T)


def spectrum(h, groups):
    """Eigenvalues of L^-1 H L^-T, L the Cholesky factor of H's blocks over ``groups``."""
    import numpy as np

    inverse = np.zeros_like(h)
    for g in groups:
        inverse[np.ix_(g, g)] = np.linalg.inv(np.linalg.cholesky(h[np.ix_(g, g)]))
    return np.linalg.eigvalsh(inverse @ h @ inverse.T)


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    import numpy as np

    from tabascal.config import load_yaml
    from tabascal.simulate import simulate, simulation_config

    base = _common.provenance(["benchmarks/conditioning.py", *(argv or sys.argv[1:])])
    records = []
    preconditioners = {"jacobi": 0, "leaf": None, "last axis": 1, "last 2 axes": 2,
                       "last 3 axes": 3}  # fmt: skip
    print(f"{'scenario':>10} {'params':>6} {'preconditioner':>20} {'condition':>10} "
          f"{'< 0.01':>6} {'< 0.1':>6} {'largest':>8} {'largest block':>13}")  # fmt: skip
    with tempfile.TemporaryDirectory() as where:
        for name in options.scenarios:
            store = Path(where) / f"{name}.zarr"
            simulate(simulation_config("demo", load_yaml(SCENARIOS / f"{name}.yaml")), store)
            h, leaves = dense_gauss_newton(store)
            modes = block_groups(leaves, mode_axes)
            cases = {label: trailing for label, trailing in preconditioners.items()}
            cases["mode blocks"] = "modes"
            cases["... probed, 1 draw"] = 1
            cases["... probed, 16 draws"] = 16
            for label, trailing in cases.items():
                if label.startswith("... probed"):
                    groups = modes
                    ev = spectrum_of_blocks(h, probed_blocks(h, leaves, mode_axes, trailing))
                elif trailing == "modes":
                    groups = modes
                    ev = spectrum(h, groups)
                else:
                    groups = ([np.array([i]) for i in range(len(h))] if trailing == 0
                              else block_groups(leaves, lambda _, k=trailing: k))  # fmt: skip
                    ev = spectrum(h, groups)
                record = {
                    **base, "scenario": name, "params": len(h), "preconditioner": label,
                    "condition": float(ev[-1] / ev[0]), "below_0.01": int(np.sum(ev < 0.01)),
                    "below_0.1": int(np.sum(ev < 0.1)), "largest": float(ev[-1]),
                    "largest_block": max(len(g) for g in groups),
                }  # fmt: skip
                records.append(record)
                print(f"{name:>10} {len(h):>6} {label:>20} {record['condition']:10.3g} "
                      f"{record['below_0.01']:>6} {record['below_0.1']:>6} "
                      f"{record['largest']:8.3g} {record['largest_block']:>13}")  # fmt: skip
    path = _common.write_json(records, options.json, "conditioning")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
