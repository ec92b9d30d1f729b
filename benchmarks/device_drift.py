"""Where a fit on several devices parts from the same fit on one: parameter by parameter.

    python benchmarks/device_drift.py                  # the demo, float64, 3 steps, 4 devices
    python benchmarks/device_drift.py --steps 5 --devices 3 --init prior

The demo preset is fitted in float64 with the default first-order optimiser from the same
start (``--init``, default "data") on one device and on the baseline axis over ``--devices``
virtual CPU devices. After each step it reports the reduced chi-squared of both, and for every
parameter leaf the two agree in shape on (those the baseline axis does not permute: the sky's
first group, the RFI's, the gains), the largest difference between the two runs, how far that
parameter moved from the start, and its gradient at the start on one device: the gradient
whose sign the optimiser's first steps follow. The loss and gradient of the two agree to
rounding (``tests/test_sharding_baseline.py``); a parameter whose gradient at the start is
itself rounding is where the runs part.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="first-order steps (default 3)")
    parser.add_argument("--devices", type=int, default=4, help="devices of the baseline axis")
    parser.add_argument("--init", default="data", help="the fit's start (run config init)")
    parser.add_argument("--store", type=Path, default=None, help="a store (default: the demo)")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def _fit(model, axis: str, n_dev: int, steps: int):
    """Parameters (host) at the start and after each of ``steps`` steps, the chi-squared at
    each step's start, and the one-device gradient at the start (None on the baseline axis)."""
    import jax
    import numpy as np

    from tabascal import fitting, parallel
    from tabascal.fitting import optimiser
    from tabascal.model import joint
    from tabascal.parallel import baseline_axis

    fit = optimiser.FitConfig()
    opt = optimiser.make_optimizer(fit)
    route = parallel.route(axis, reuse_plan=False)
    if axis == "none":
        params, inputs, spec = model.params, (model.constants, model.data), model.spec
        loss = jax.jit(jax.grad(lambda p: joint.loss(p, inputs, spec)[0]))
        grad = jax.tree.map(np.asarray, loss(params))
    else:
        placed = baseline_axis.shard_model(model, baseline_axis.make_mesh(n_dev), reuse=False)
        params, inputs, spec = placed.params, (placed.constants, placed.data), placed.spec
        grad = None
    state = optimiser.init_state(jax.tree.map(lambda x: x.copy(), params), opt)
    step = fitting.route_step(route, spec, fit, opt)
    taken, chi2 = [jax.tree.map(np.asarray, state.params)], []
    for _ in range(steps):
        state, _, aux = step(state, inputs)
        chi2.append(float(aux["chi2"]))
        taken.append(jax.tree.map(np.asarray, state.params))
    return taken, chi2, grad


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    _common.use_cpu_devices(options.devices)
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from tabascal.fitting import run_config
    from tabascal.model import joint
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    store = options.store
    if store is None:
        store = _common.RESULTS / "device_drift" / "demo.zarr"
        if not store.exists():
            simulate(simulation_config("demo"), store)
    obs = read_observation(store)
    config = run_config.model_config(run_config.load({"precision": "double"}))
    model = joint.build(obs, config, init=options.init)
    one, chi2_one, grad = _fit(model, "none", 1, options.steps)
    many, chi2_many, _ = _fit(model, "baseline", options.devices, options.steps)
    base = _common.provenance(sys.argv) | {
        "devices": options.devices,
        "init": options.init,
        "store": str(store),
    }
    records = []
    leaves = jax.tree_util.tree_flatten_with_path
    start, gradient = leaves(one[0])[0], leaves(grad)[0]
    for k in range(options.steps):
        a_leaves, b_leaves = leaves(one[k + 1])[0], leaves(many[k + 1])[0]
        for (path, a), (_, b), (_, g), (_, a0) in zip(
            a_leaves, b_leaves, gradient, start, strict=True
        ):
            if a.shape != b.shape:
                continue  # permuted and padded on the baseline axis
            apart = np.abs(a - b)
            at = np.unravel_index(np.argmax(apart), apart.shape)
            records.append(
                base
                | {
                    "step": k + 1,
                    "chi2_one": chi2_one[k],
                    "chi2_many": chi2_many[k],
                    "leaf": jax.tree_util.keystr(path),
                    "max_apart": float(apart.max()),
                    "moved_there": float(np.abs(a - a0)[at]),
                    "start_gradient_there": float(np.abs(g[at])),
                    "start_gradient_largest": float(np.max(np.abs(g))),
                    "cells_apart": int(np.count_nonzero(apart)),
                    "cells": int(apart.size),
                }
            )
    print(f"{'step':>4} {'chi2 one':>18} {'chi2 many':>18} {'leaf':>16} {'apart':>9} "
          f"{'moved':>9} {'|g0| there':>10} {'max |g0|':>9} {'cells apart':>12}")  # fmt: skip
    for r in records:
        print(
            f"{r['step']:4d} {r['chi2_one']:18.13f} {r['chi2_many']:18.13f} {r['leaf']:>16} "
            f"{r['max_apart']:9.2e} {r['moved_there']:9.2e} {r['start_gradient_there']:10.2e} "
            f"{r['start_gradient_largest']:9.2e} {r['cells_apart']:5d} of {r['cells']:<5d}"
        )
    path = _common.write_json(records, options.json, "device_drift")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
