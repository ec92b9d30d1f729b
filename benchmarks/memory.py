"""Per-device memory of every stage of a fit, compiled from abstract shapes on virtual CPU devices.

    python benchmarks/memory.py --preset bench-512 --channels 8 --devices 1 4 \\
        --axes none baseline --json out.json

For each preset, channel count and RFI route (``--rfi``: "analytic" makes every group
analytic, "hybrid" is the default quadrature limit), the model is built from the preset's
metadata alone (``tabascal.simulate.presets.observation_scene``: array layout, orbits, grid;
no visibility is simulated) with ``joint.abstract_model``, the RFI signal-to-noise that sizes
the fine sampling taken from ``presets.expected_snr`` (an upper estimate of the data's). Then,
for each device count and axis ("none": one device; "source", "baseline"; "reuse": the baseline
axis with the antenna-reuse plan), the route places the model (``tabascal.planning.stages.
place_abstract``: the data, the sky mean and the sky parameters stay abstract) and every stage
is compiled (``tabascal.planning.stages.compile_stages``: set-up, optimiser state, initial
diagnostics, the optimisation step, the final prediction, the export).

Each ``--phase-cache`` setting (``rfi.phase_cache``: the analytic groups' phase moments kept
within ``rfi.phase_cache_mb`` per device, always, or formed at every step) is measured on the
same model; the record says which groups kept theirs (``phase_cache``). ``--config`` plans
the fit of a run configuration's YAML (the RFI operator's options, say) in place of the
defaults; the record keeps it (``config``).

Reported per device: the bytes resident after placement (from each array's sharding), each
stage's compiled arguments, outputs, temporaries and aliased bytes, and the peak estimate (the
largest over the stages of resident bytes plus working set; see ``tabascal.planning.stages``).
XLA's CPU buffer assignment stands in for a GPU's: the figures are those of the programs, not of an
allocator. The JSON is a list of records, one per (preset, channels, rfi, axis, devices).

``--cpu-scheduler memory`` compiles every program with XLA's memory-minimising CPU scheduler
instead of its default, concurrency-optimised one. The default orders operations that need no
input early: in the bench-512 step on 4 devices it placed each RFI group's zero cotangent
accumulator (the size of the per-antenna signal) among the first tenth of the program, long
before its loop in the reverse pass, so all four stay alive through the step. A GPU compiler
schedules with its own passes, so neither figure is a GPU's; the record says which scheduler
it used (``cpu_scheduler``).

At one device only "none" runs when it is asked for (a sharded axis on one device is the same
program); at more devices, the sharded axes. The script asks XLA for as many virtual CPU
devices as the largest ``--devices`` before jax is imported; smaller meshes take the first
devices.
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--preset", default="bench-512")
    parser.add_argument("--channels", type=int, nargs="+", default=[8])
    parser.add_argument("--rfi", nargs="+", default=["hybrid"], choices=list(_common.RFI_ROUTES))
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--axes", nargs="+", default=list(AXES), choices=AXES)
    parser.add_argument(
        "--phase-cache",
        nargs="+",
        default=["auto"],
        choices=("auto", "always", "never"),
        help="rfi.phase_cache settings to measure (the analytic groups' phase moments kept "
        "within the budget, always, or formed at every step)",
    )
    parser.add_argument(
        "--phase-cache-mb",
        type=float,
        default=1024.0,
        help="rfi.phase_cache_mb under auto, MiB per device (default 1024): fixed, since the "
        "default budget follows the device's memory, and these are compile-only figures for "
        "devices other than this host's virtual ones",
    )
    parser.add_argument(
        "--cpu-scheduler",
        default="concurrency",
        choices=list(_common.CPU_SCHEDULERS),
        help="XLA's CPU scheduler: its default (concurrency) or memory-minimising (memory)",
    )
    parser.add_argument(
        "--override",
        default=None,
        help='JSON of further preset overrides, e.g. \'{"array": {"n_stations": 32}}\'',
    )
    parser.add_argument(
        "--polish",
        default=None,
        choices=("lbfgs", "newton", "trust-region", "levenberg-marquardt"),
        help="fit.polish (default: the fit's own, levenberg-marquardt): L-BFGS (its histories "
        "in the polish's state), Newton's, or Levenberg-Marquardt's (its curvature's blocks)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="run configuration YAML over the defaults, e.g. the RFI operator's options "
        "(rfi.terms, rfi.segments) of the fit to plan; --polish, --phase-cache and "
        "--phase-cache-mb win over it, and it may not set precision (single) or "
        "rfi.quadrature_limit (--rfi)",
    )
    parser.add_argument(
        "--row-blocks",
        type=int,
        nargs="+",
        default=[1],
        help="sharding.row_blocks values to measure on the baseline axis (blocks of baselines "
        "per device taken in turn); at one device a value above 1 runs beside 'none'",
    )
    parser.add_argument("--json", type=Path, default=None, help="output path (default results/)")
    return parser.parse_args(argv)


def _stage_record(report) -> dict:
    memory = report.memory
    return {
        "arguments": memory.arguments,
        "outputs": memory.outputs,
        "temporaries": memory.temporaries,
        "aliased": memory.aliased,
        "working_set": memory.working_set,
        "resident_bytes": report.resident,
        "peak_bytes": report.peak,
    }


def measure(
    model,
    axis: str,
    n_dev: int,
    fit_config,
    phase_cache: str = "auto",
    budget_mib=1024.0,
    row_blocks: int = 1,
) -> dict:
    """Place ``model`` (abstract) on ``axis`` over ``n_dev`` devices, its baselines in
    ``row_blocks`` blocks per device, with ``rfi.phase_cache`` set to ``phase_cache`` within
    ``budget_mib`` per device and compile its stages."""
    import dataclasses

    import jax

    from tabascal import parallel, planning

    rfi_vis = dataclasses.replace(
        model.spec.rfi_vis, phase_cache=phase_cache, phase_cache_mb=budget_mib
    )
    model = dataclasses.replace(model, spec=dataclasses.replace(model.spec, rfi_vis=rfi_vis))
    start = time.perf_counter()
    route = parallel.route(axis)
    mesh = route.make_mesh(n_dev)
    devices = jax.devices()[:1] if mesh is None else list(mesh.devices.flat)
    placed = planning.place_abstract(model, axis, mesh, row_blocks)
    placed_bytes = planning.bytes_per_device(
        (placed.constants, placed.data, placed.params), devices
    )
    placed_seconds = time.perf_counter() - start
    reports = planning.compile_stages(placed, axis, fit_config, devices)
    peaks = [max(r.peak[d] for r in reports) for d in range(len(devices))]
    limiting = max(range(len(devices)), key=lambda d: peaks[d])
    info = placed.info
    record = {
        "placed_bytes": placed_bytes,
        "peak_bytes": peaks,
        "peak_stage": max(reports, key=lambda r: r.peak[limiting]).name,
        "stages": {r.name: _stage_record(r) for r in reports},
        "seconds_place": placed_seconds,
        "seconds_compile": time.perf_counter() - start - placed_seconds,
        "phase_cache": info["rfi_phase_cache"],
    }
    for key in ("block_size", "n_ghost", "n_src_padded", "reuse_plan"):
        if key in info:
            record[key] = info[key]
    jax.clear_caches()
    return record


def _axis_label(r: dict) -> str:
    """The axis, with its blocks of rows per device where more than one ("baseline/4")."""
    blocks = r.get("row_blocks", 1)
    return r["axis"] if blocks == 1 else f"{r['axis']}/{blocks}"


def _table_line(r: dict, reference: dict | None) -> str:
    if "error" in r:
        return f"{_axis_label(r):>11} {r['devices']:>3} {r['phase_cache_mode']:>7}  {r['error']}"
    peak = max(r["peak_bytes"])
    ratio = f"{peak / max(reference['peak_bytes']):.3f}" if reference else "-"
    step = r["stages"]["step"]
    kept = r["phase_cache"]["kept_mib_per_device"] / 1024
    return (
        f"{_axis_label(r):>11} {r['devices']:>3} {r['phase_cache_mode']:>7} {kept:>8.3f} "
        f"{_common.gb(max(r['placed_bytes'])):>9} "
        f"{_common.gb(step['working_set']):>9} {_common.gb(peak):>9} {r['peak_stage']:>12} "
        f"{ratio:>7} {r['seconds_compile']:8.1f}"
    )


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    _common.use_cpu_devices(max(options.devices))
    _common.use_cpu_scheduler(options.cpu_scheduler)
    import json

    import jax

    from tabascal.config import load_yaml, merge
    from tabascal.fitting import run_config
    from tabascal.model import joint
    from tabascal.simulate import presets

    jax.config.update("jax_enable_x64", False)
    base = _common.provenance(["benchmarks/memory.py", *(argv or sys.argv[1:])])
    extra = json.loads(options.override) if options.override else None
    overrides = load_yaml(options.config) if options.config else {}
    if "precision" in overrides or "quadrature_limit" in overrides.get("rfi", {}):
        raise SystemExit(
            f"memory.py: --config {options.config} sets precision or rfi.quadrature_limit: the "
            "benchmark measures single precision and takes the quadrature limit from --rfi"
        )
    records = []
    for channels in options.channels:
        scene = presets.observation_scene(options.preset, _common.preset_overrides(channels, extra))
        snr = presets.expected_snr(scene)
        meta = scene.meta
        for rfi in options.rfi:
            polish = {"fit": {"polish": options.polish}} if options.polish else {}
            config = _common.run_config(rfi, extra=merge(overrides, polish))
            start = time.perf_counter()
            model = joint.abstract_model(meta, run_config.model_config(config), snr=snr)
            seconds_model = time.perf_counter() - start
            fit_config = run_config.fit_config(config)
            print(
                f"\n{options.preset}, {channels} channels, {rfi} RFI: {meta.n_ant} stations, "
                f"{meta.n_bl} baselines, {meta.n_sat} satellites, {meta.n_time} cells, "
                f"groups {model.info['rfi_groups']}, sky modes {model.info['sky_modes']} "
                f"in groups {model.info['sky_groups']} "
                f"(model from metadata in {seconds_model:.0f} s)"
            )
            print(
                f"{'axis':>11} {'dev':>3} {'moments':>7} {'kept GB':>8} {'placed':>9} "
                f"{'step ws':>9} {'peak GB':>9} "
                f"{'peak stage':>12} {'ratio':>7} {'compile':>8}"
            )
            reference = None
            for n_dev in options.devices:
                cases = [
                    (name, k)
                    for name in options.axes
                    for k in (options.row_blocks if name == "baseline" else [1])
                ]
                for axis, blocks in cases:
                    # One device: the sharded axes are the plain model on a mesh of one; with
                    # "none" asked for too, that one stands for them all (but blocks of rows
                    # taken in turn make another program).
                    one = (axis == "none") != (n_dev == 1) and "none" in options.axes
                    if one and blocks == 1:
                        continue
                    for phase_cache in options.phase_cache:
                        record = {
                            **base,
                            "preset": options.preset,
                            "channels": channels,
                            "rfi": rfi,
                            "axis": axis,
                            "devices": n_dev,
                            "row_blocks": blocks,
                            "phase_cache_mode": phase_cache,
                            "polish": fit_config.polish,
                            "config": overrides,
                            "cpu_scheduler": options.cpu_scheduler,
                            "n_ant": meta.n_ant,
                            "n_bl": meta.n_bl,
                            "n_src": meta.n_sat,
                            "n_time": meta.n_time,
                            "rfi_snr": snr,
                            "rfi_groups": model.info["rfi_groups"],
                            "sky_modes": model.info["sky_modes"],
                            "sky_groups": model.info["sky_groups"],
                        }
                        try:
                            budget = options.phase_cache_mb
                            record.update(
                                measure(model, axis, n_dev, fit_config, phase_cache, budget, blocks)
                            )
                        except ValueError as error:  # e.g. a plan a device count cannot take
                            record["error"] = f"{type(error).__name__}: {error}"
                        record["load_average"] = list(__import__("os").getloadavg())
                        if axis == "none" and "error" not in record and reference is None:
                            reference = record
                        if reference is not None and "error" not in record:
                            record["ratio_to_one_device"] = max(record["peak_bytes"]) / max(
                                reference["peak_bytes"]
                            )
                        print(_table_line(record, reference), flush=True)
                        records.append(record)
    path = _common.write_json(records, options.json, "memory")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
