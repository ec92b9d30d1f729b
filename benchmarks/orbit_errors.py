"""What orbit corrections recover when the fit is handed wrong orbits.

    python benchmarks/orbit_errors.py                                  # leo-pass, 0.2 s, 500 m
    python benchmarks/orbit_errors.py --scenario leo-pass --steps 1200 \
        --config benchmarks/science_configs/shared-fringe.yaml

A scenario of ``benchmarks/scenarios`` is simulated twice with the same seed: with the fit
handed the true orbits, and handed orbits displaced by ``--time-offset`` seconds along track
and ``--radial`` metres (``satellites.orbit_error``). Three fits, each with the run
configuration ``--config`` (default: the defaults) and ``--steps`` steps:

- true orbits, fixed (the reference);
- displaced orbits, fixed (``orbits.fit: none``): what the error costs;
- displaced orbits, corrected (``orbits.fit: --fit``, default ``ric``).

Each is scored as ``benchmarks/science.py`` scores (the RFI residual in the cleaned data over
the noise, the apparent sky, chi-squared). For the corrected fit, the recovered offsets against
the exact ones (minus the displacement): the time offset, the radial offset, and the total
along-track offset ``v dt + in-track`` (a time offset and an in-track offset move a satellite
alike over a pass: only their sum is measured by the data). Goals: the corrected RFI residual
within 1.2 x the true orbits', and the offsets within a tenth of the shift. Prints a table and
writes JSON under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import science
import yaml

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="leo-pass")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--time-offset", type=float, default=0.2, help="s along track")
    parser.add_argument("--radial", type=float, default=500.0, help="m")
    parser.add_argument("--fit", default="ric", choices=("time_offset", "ric"))
    parser.add_argument("--config", type=Path, default=None, help="run configuration YAML")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def _recovered(summary: dict, speeds, error: dict) -> list[dict]:
    """Per satellite: the fitted and exact time, radial and along-track offsets (the exact
    position offsets from ``error`` where the fit has none)."""
    out = []
    for entry, speed in zip(summary["satellites"], speeds, strict=True):
        fitted, exact = entry, entry["exact"]
        row = {"name": entry["name"], "speed_m_s": float(speed)}
        undo = {"radial": -error["radial_m"], "in_track": 0.0}
        for key, value in (("fitted", fitted), ("exact", exact)):
            position = value.get("position_offset_m", undo if key == "exact" else {})
            row[f"{key}_time_offset_s"] = value["time_offset_s"]
            row[f"{key}_radial_m"] = position.get("radial", 0.0)
            along = speed * value["time_offset_s"] + position.get("in_track", 0.0)
            row[f"{key}_along_track_m"] = along
        out.append(row)
    return out


def main(argv=None) -> int:
    from tabascal.config import merge
    from tabascal.model import orbit_corrections
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    args = _arguments(argv)
    scenario = yaml.safe_load((SCENARIOS / f"{args.scenario}.yaml").read_text())
    overrides = yaml.safe_load(args.config.read_text()) if args.config else {}
    error = {"time_offset_s": args.time_offset, "radial_m": args.radial}
    records = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        true = simulation_config("demo", scenario)
        shifted = simulation_config("demo", merge(scenario, {"satellites": {"orbit_error": error}}))
        simulate(true, where / "true.zarr")
        simulate(shifted, where / "shifted.zarr")
        runs = (
            ("true orbits", "true", "none"),
            ("displaced, fixed", "shifted", "none"),
            (f"displaced, {args.fit}", "shifted", args.fit),
        )
        for label, store, fit in runs:
            config = merge(overrides, {"orbits": {"fit": fit}})
            out = where / f"fit-{store}-{fit}"
            records[label] = science.fit_scenario(where / f"{store}.zarr", out, args.steps, config)
            summary = json.loads((out / "summary.json").read_text())
            if summary.get("orbits"):
                meta = read_observation(where / "shifted.zarr").meta
                speeds = orbit_corrections.orbital_speed(meta.orbits, meta.times_s)
                records[label]["recovered"] = _recovered(summary["orbits"], speeds, error)
            print(label, json.dumps(records[label].get("recovered")), flush=True)
    reference = records["true orbits"]["rfi_over_noise"]
    print(f"\n{args.scenario}: orbits displaced by {args.time_offset} s and {args.radial} m "
          f"radially; {args.steps} steps")  # fmt: skip
    print(f"{'fit':<24} {'chi2':>8} {'RFI/noise':>10} {'x true':>7} {'sky/noise':>10} {'s':>6}")
    for label, r in records.items():
        ratio = r["rfi_over_noise"] / reference
        print(f"{label:<24} {r['chi2']:8.3f} {r['rfi_over_noise']:10.3f} {ratio:7.2f} "
              f"{r['sky_over_noise']:10.3f} {r['fit_seconds']:6.0f}")  # fmt: skip
    corrected = records[runs[2][0]]
    for row in corrected.get("recovered", []):
        fitted = [row[f"fitted_{k}"] for k in ("time_offset_s", "radial_m", "along_track_m")]
        exact = [row[f"exact_{k}"] for k in ("time_offset_s", "radial_m", "along_track_m")]
        print(f"{row['name']}: time offset {fitted[0]:+.3f} s (exact {exact[0]:+.3f}), radial "
              f"{fitted[1]:+.0f} m (exact {exact[1]:+.0f}), along track {fitted[2]:+.0f} m "
              f"(exact {exact[2]:+.0f})")  # fmt: skip
    record = {
        **_common.provenance(sys.argv if argv is None else ["orbit_errors.py", *argv]),
        "scenario": args.scenario,
        "steps": args.steps,
        "orbit_error": error,
        "fit": args.fit,
        "run_config": overrides,
        "fits": records,
        "goals": {"rfi_within_x_true": 1.2, "offsets_within_fraction_of_shift": 0.1},
    }
    path = _common.write_json([record], args.json, f"orbit_errors_{args.scenario}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
