"""How curved the analytic groups' phases are: where one piece per integration pays.

    python benchmarks/curvature.py --scenarios demo leo-rising leo-pass leo-shell speed/leo-8

The analytic operator splits each integration into ``rfi.segments`` pieces; on a piece the
pair's phase has a quadratic part beta = (b + 3c x_i) / segments**2, and a piece with
|beta| at or above ``ri_kernels.curvature_switch`` (0.20 rad in float32) takes the curved
method, about twenty times the cost of the expansion. One piece costs less than two while no
piece is curved (docs/benchmarks.md). For each scenario's analytic groups (the model as
``tabascal run`` builds it, float32), this counts, from the known orbits' delays, the
elements (baseline x source x integration x channel, at the channel's top) whose |b| puts a
piece at or above the switch at one and at two pieces, and says which options
``rfi.analytic_options`` "auto" took. For the series across a channel (``channel_terms``) it
gives the group's largest cross term epsilon and bend (the curvature's change across a
channel), each with ``PHASE_BOUND_MARGIN``, and the error the series may take.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import _common

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["leo-rising", "leo-pass", "leo-shell"])
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


def curved_fractions(obs, members, delay_us, switch: float) -> dict:
    """The largest |b| (rad) of the pairs ``members`` (a boolean row mask) and the fraction of
    their elements with a piece at or above ``switch`` at one and at two pieces."""
    import numpy as np

    a1, a2 = np.asarray(obs.a1)[members], np.asarray(obs.a2)[members]
    d2 = np.asarray(delay_us)[..., 2]  # (n_ant, n_src, n_time), us/s**2
    nu = (np.asarray(obs.freqs_hz) + obs.chan_width / 2) * 1e-6
    b = np.abs(math.pi * nu * (d2[a1] - d2[a2])[..., None] * (obs.int_time / 2) ** 2)
    return {
        "max_b_rad": float(b.max(initial=0.0)),
        "curved_one_piece": float(np.mean(b >= switch)),
        "curved_two_pieces": float(np.mean(b / 4 >= switch)),
    }


def channel_bounds(obs, members, delay_us, snr: float, config) -> dict:
    """The series across a channel for the pairs ``members``: their largest cross term
    epsilon (rad) and the centre curvature's error (rad), each with the margin for fitted
    orbits, and the error each may take (``rfi_vis.analytic_spec``)."""
    import numpy as np

    from tabascal.model import rfi_vis

    a1, a2 = np.asarray(obs.a1)[members], np.asarray(obs.a2)[members]
    antennas = np.unique(np.concatenate([a1, a2]))
    args = (obs.freqs_hz, obs.chan_width, obs.int_time)
    curvature = rfi_vis.curvature_phase_bound(delay_us, antennas, *args)
    cubic = rfi_vis.cubic_phase_bound(delay_us, antennas, *args)
    rate = rfi_vis.rate_phase_bound(delay_us, antennas, obs.chan_width, obs.int_time)
    ratio = obs.chan_width / 2 / (float(np.min(obs.freqs_hz)) - obs.chan_width / 2)
    margin = rfi_vis.PHASE_BOUND_MARGIN
    error = rfi_vis.OPERATOR_ERROR_SHARE * config.rfi_vis.tolerance / snr
    return {
        "channel_epsilon_rad": margin * rate,
        "channel_bend_rad": margin * ratio * (curvature + cubic),
        "channel_error_allowed": error / 2,
    }


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    import numpy as np

    import ri_kernels
    from tabascal.config import load_yaml
    from tabascal.fitting import run_config
    from tabascal.model import frame, joint, rfi_vis
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    base = _common.provenance(["benchmarks/curvature.py", *(argv or sys.argv[1:])])
    config = run_config.model_config(run_config.load({}))
    switch = ri_kernels.curvature_switch(config.rfi_vis.terms, np.float32)
    records = []
    with tempfile.TemporaryDirectory() as where:
        for name in options.scenarios:
            store = Path(where) / f"{name.replace('/', '_')}.zarr"
            scenario = load_yaml(SCENARIOS / f"{name}.yaml")
            simulate(simulation_config("demo", scenario), store, progress=False)
            obs = read_observation(store)
            model = joint.build(obs, config)
            geom = frame.observation_geometry(obs, config)
            labels, specs = rfi_vis.plan_groups(
                geom.time_cycles, geom.freq_cycles, model.info["rfi_snr"], config.rfi_vis
            )
            for group, spec in enumerate(specs):
                if spec.operator != "analytic":
                    continue
                members = labels == group
                record = {
                    **base,
                    "scenario": name,
                    "group": spec.name,
                    "baselines": int(members.sum()),
                    "switch_rad": switch,
                    **curved_fractions(obs, members, geom.delay_us, switch),
                    **channel_bounds(obs, members, geom.delay_us, model.info["rfi_snr"], config),
                    "auto_options": model.info["rfi_analytic_options"].get(spec.name),
                }
                records.append(record)
                print(
                    f"{name:>12} {spec.name:<16} {record['baselines']:4d} baselines  "
                    f"max |b| {record['max_b_rad']:.3g} rad  curved at one piece "
                    f"{record['curved_one_piece']:.2%}, at two {record['curved_two_pieces']:.2%}"
                    f"  auto: {record['auto_options']}"
                )
                print(
                    f"{'':>12} across a channel: epsilon {record['channel_epsilon_rad']:.3g} rad, "
                    f"bend {record['channel_bend_rad']:.3g} rad, within "
                    f"{record['channel_error_allowed']:.3g}"
                )
    path = _common.write_json(records, options.json, "curvature")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
