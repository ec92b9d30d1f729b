"""Median optimisation-step time of each sharding axis on virtual CPU devices, interleaved.

    python benchmarks/step_time.py --devices 4 --stations 128 --channels 4

The problem is the bench-96 preset with ``--stations`` stations, ``--channels`` channels,
``--times`` integrations and ``--satellites`` satellites, built from its metadata
(``joint.abstract_model``) with data drawn from the model itself (``_common.synthetic_model``:
a prior draw through ``joint.predict`` plus unit noise; no simulation). Every axis places the
same model on the same ``--devices`` virtual CPU devices ("none": one device) and compiles its
step; then ``--rounds`` rounds each time ``--steps`` steps of every axis in turn, so a change
of load on a shared machine touches every axis alike. Reported: per axis the median over
rounds of the per-step time, and its ratio to the source axis's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

# tabascal.parallel.routes.ROUTES, restated because importing it imports jax, which must
# wait until the device count is set.
AXES = ("none", "source", "baseline", "reuse")


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--stations", type=int, default=128)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--times", type=int, default=90)
    parser.add_argument("--satellites", type=int, default=8)
    parser.add_argument("--rfi", default="hybrid", choices=list(_common.RFI_ROUTES))
    parser.add_argument("--axes", nargs="+", default=list(AXES), choices=AXES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per axis per round")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    _common.use_cpu_devices(options.devices)
    import jax

    from tabascal.config import run_config as rc
    from tabascal.fitting import optimiser
    from tabascal.parallel import routes

    jax.config.update("jax_enable_x64", False)
    extra = {
        "array": {"n_stations": options.stations},
        "observation": {"n_time": options.times},
        "satellites": {"count": options.satellites},
    }
    abstract, config, _ = _common.preset_model("bench-96", options.channels, options.rfi, extra)
    model = _common.synthetic_model(abstract)
    fit_config = rc.fit_config(config)
    optimizer = optimiser.make_optimizer(fit_config)
    print(
        f"bench-96 at {options.stations} stations ({model.spec.n_bl} baselines), "
        f"{options.channels} channels, {options.times} cells, {options.satellites} satellites, "
        f"{options.rfi} RFI, groups {model.info['rfi_groups']}; {options.devices} devices"
    )
    runs = {}
    for axis in options.axes:
        route = routes.route(axis)
        placed = route.place(model, route.make_mesh(options.devices))
        inputs = (placed.constants, placed.data)
        step = optimiser.make_step(lambda p, i, r=route, s=placed.spec: r.loss(p, i, s), optimizer)
        # The step donates its state: a copy keeps the model's own parameters for the next axis.
        state = optimiser.init_state(jax.tree.map(jax.numpy.copy, placed.params), optimizer)
        start = time.perf_counter()
        state, loss, _ = step(state, inputs)
        jax.block_until_ready(loss)
        runs[axis] = {
            "step": step,
            "state": state,
            "inputs": inputs,
            "first_seconds": time.perf_counter() - start,
            "per_step": [],
        }
        print(f"{axis}: compiled and first step in {runs[axis]['first_seconds']:.1f} s")
    _common.interleaved_rounds(runs, options.rounds, options.steps)
    base = _common.provenance(["benchmarks/step_time.py", *(argv or sys.argv[1:])])
    reference = statistics.median(runs["source"]["per_step"]) if "source" in runs else None
    print(f"{'axis':>8} {'median s':>9} {'min s':>8} {'/ source':>9}")
    records = []
    for axis, run in runs.items():
        median = statistics.median(run["per_step"])
        ratio = median / reference if reference else None
        print(
            f"{axis:>8} {median:9.3f} {min(run['per_step']):8.3f} "
            f"{(f'{ratio:.3f}' if ratio else '-'):>9}"
        )
        records.append(
            {
                **base,
                "preset": "bench-96",
                "stations": options.stations,
                "n_bl": model.spec.n_bl,
                "channels": options.channels,
                "times": options.times,
                "satellites": options.satellites,
                "rfi": options.rfi,
                "rfi_groups": model.info["rfi_groups"],
                "axis": axis,
                "devices": 1 if axis == "none" else options.devices,
                "rounds": options.rounds,
                "steps_per_round": options.steps,
                "step_seconds_median": median,
                "step_seconds_per_round": run["per_step"],
                "ratio_to_source": ratio,
                "first_step_seconds": run["first_seconds"],
                "load_average": list(os.getloadavg()),
            }
        )
    path = _common.write_json(records, options.json, "step_time")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
