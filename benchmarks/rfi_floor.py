"""What the data grid can hold: the RFI visibilities the operators predict from the
simulation's exact per-antenna amplitudes, against the true RFI visibilities, over the noise.

The model gives the RFI operators each antenna's signal at the centre of each integration, and
they interpolate it (``rfi.time_stencil`` points in time, ``rfi.freq_stencil`` in frequency) to
their fine samples. Fed the simulation's own amplitudes there (``truth.rfi_amp``) in float64,
the prediction's rms error against the truth's RFI visibilities (both before the gains) is the
floor no fit of either signal model can go under, whatever its parameters: what the stencils
cannot follow of the signal's spectrum and the station beam across a channel, of a LEO's
swings across the beam's sidelobes within an integration, and of a rise within one. (The
truth's amplitudes are zero at the integrations whose centres are below the horizon, which
the stencils of the integration a satellite rises in read: there this floor overstates what
a fit, free to give those cells the signal's value, can reach.)

    python benchmarks/rfi_floor.py --scenarios demo leo-pass leo-rising --time-stencils 3 5 7 \
        --freq-stencils 1 3
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import _common

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["demo", "leo-pass", "leo-rising"])
    parser.add_argument("--time-stencils", nargs="+", type=int, default=[3])
    parser.add_argument("--freq-stencils", nargs="+", type=int, default=[3])
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


def floor(obs, time_stencil: int, freq_stencil: int) -> tuple[float, dict]:
    """(rms error / mean noise, RFI groups) of the operators fed the exact amplitudes."""
    import jax
    import numpy as np

    from tabascal.fitting import run_config
    from tabascal.model import joint, rfi_vis

    with jax.enable_x64(True):
        config = run_config.load(
            {
                "precision": "double",
                "rfi": {"time_stencil": time_stencil, "freq_stencil": freq_stencil},
            }
        )
        model = joint.build(obs, run_config.model_config(config))
        c = model.constants
        amp = jax.numpy.asarray(obs.truth.rfi_amp, jax.numpy.complex128)
        predicted = np.zeros(obs.vis.shape, np.complex128)
        for group, tables in zip(model.spec.groups, c.groups, strict=True):
            vis = rfi_vis.evaluate_group(
                group, tables, amp, c.phase, c.delay_us, c.freq_mhz, model.spec.rfi_vis
            )
            predicted[np.asarray(tables.rows)] = np.asarray(vis)
    error = np.sqrt(np.mean(np.abs(predicted - obs.truth.rfi_vis) ** 2))
    return float(error / np.mean(obs.noise)), model.info["rfi_groups"]


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    from tabascal.config import load_yaml
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    base = _common.provenance(["benchmarks/rfi_floor.py", *(argv or sys.argv[1:])])
    records = []
    with tempfile.TemporaryDirectory() as where:
        for name in options.scenarios:
            store = Path(where) / f"{name}.zarr"
            scenario = load_yaml(SCENARIOS / f"{name}.yaml")
            simulate(simulation_config("demo", scenario), store, progress=False)
            obs = read_observation(store)
            for stencil, freq in itertools.product(options.time_stencils, options.freq_stencils):
                value, groups = floor(obs, stencil, freq)
                records.append(
                    {
                        **base,
                        "scenario": name,
                        "time_stencil": stencil,
                        "freq_stencil": freq,
                        "rfi_floor_over_noise": value,
                        "rfi_groups": groups,
                    }
                )
                print(
                    f"{name:>16}  stencils time {stencil} freq {freq}  "
                    f"floor {value:.3f} x noise  {groups}"
                )
    path = _common.write_json(records, options.json, "rfi_floor")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
