"""The fitting commands of the ``tabascal`` command line: ``run``, ``plan`` and ``demo``.

jax is imported only inside the commands, after ``--devices`` has had its chance to ask XLA
for virtual CPU devices (which must be set before jax starts).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from tabascal import TabascalError

_DEVICE_FLAG = "--xla_force_host_platform_device_count"

#: The brightest satellites the run's summary names, and the most satellites whose fitted
#: orbit offsets it lists (summary.json holds every one).
BRIGHTEST_SHOWN = 3
ORBITS_SHOWN = 8

#: How the demo's banner names each ``fit.polish``.
POLISH_NAMES = {
    "lbfgs": "L-BFGS",
    "newton": "Newton",
    "trust-region": "trust-region Newton",
    "levenberg-marquardt": "Levenberg-Marquardt",
}

#: The demo's fit: the defaults' gradient phases at half their length (400 + 200 steps), then
#: 10 Newton steps by line search (``fit.polish: newton``) in place of the default trust
#: region, to finish in about a minute on two cores: the demo's two GNSS satellites leave the
#: gradient phases near the optimum, where both polishes reach the same fit and the line
#: search's full steps get there in a sixth of the trust region's steps (docs/science.md,
#: "The defaults and why").
DEMO_CONFIG = {"fit": {"checkpoint_every": 0}}


def use_devices(n: int) -> str | None:
    """Ask for ``n`` virtual CPU devices (used only when no accelerator is present).

    Returns an error message when it is too late (jax already started with another count).
    """
    if n < 1:
        return f"--devices {n}: the device count must be at least 1"
    if "jax" in sys.modules:
        # Imported (the simulator's modules import jax) but perhaps not started: until the
        # first operation the CPU device count can still be set.
        import jax

        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:
            if jax.device_count() != n and jax.default_backend() == "cpu":
                return (
                    f"--devices {n}: jax has already started with {jax.device_count()} "
                    "devices; start a new process"
                )
        return None
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_FLAG)]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{_DEVICE_FLAG}={n}"])
    return None


def _run_plan(args, base: dict | None = None):
    """The run's plan, resolved once from the configuration (``base``, then the config file
    ``-c``, then the flags that set config keys: ``--steps``, ``--precision``) and the flags
    that settle the sharding (``--shard-axis``, ``--reuse-plan``, ``--row-blocks``) and where
    the tiles are fitted (``--workers``, ``--scheduler``)."""
    from tabascal.config import load_yaml, merge
    from tabascal.fitting import plan_run, run_config

    flags = {}
    if getattr(args, "steps", None) is not None:
        flags["fit"] = {"steps": args.steps}
    if getattr(args, "precision", None) is not None:
        flags["precision"] = args.precision
    path = getattr(args, "config", None)
    data = merge(base or {}, load_yaml(path) if path else {})
    return plan_run(
        run_config.load(merge(data, flags)),
        shard_axis=getattr(args, "shard_axis", None),
        reuse_plan=getattr(args, "reuse_plan", None),
        row_blocks=getattr(args, "row_blocks", None),
        workers=getattr(args, "workers", None),
        scheduler=getattr(args, "scheduler", None),
    )


def _passes(fit: dict) -> str:
    """What the steps' line adds from summary.json's ``fit``: " (N passes; stopped: why)",
    where the passes were counted."""
    if fit.get("passes") is None:
        return ""
    return f" ({fit['passes']:.0f} passes; stopped: {fit['stopped']})"


def _summary_lines(summary: dict) -> list[str]:
    gib = [b / 2**30 for b in summary["per_device_peak_bytes"]]
    blocks = (summary.get("model") or {}).get("row_blocks")
    lines = [
        f"  reduced chi-squared   {summary['chi2_init']:#.4g} -> {summary['chi2_final']:#.4g}",
        f"  steps                 {summary['steps']} in {summary['seconds_fit']:.1f} s"
        + _passes(summary.get("fit") or {}),
        f"  devices               {summary['n_devices']} (shard axis {summary['shard_axis']}"
        + (", antenna-reuse plan" if summary.get("reuse_plan") else "")
        + (f", {blocks} blocks of rows each" if blocks else "")
        + ")",
        "  peak memory / device  " + ", ".join(f"{g:.3f} GiB" for g in gib),
    ]
    if summary.get("collectives"):
        found = ", ".join(f"{name} x{count}" for name, count in summary["collectives"].items())
        lines.append(f"  collectives per step  {found}")
    if summary.get("tile_grid"):
        lines.append(_tiles_line(summary["tile_grid"], summary["tiles"]))
    truth = summary.get("truth")
    if truth:
        lines.append("  against the truth     RMSE (Jy)   RMSE / noise")
        for name in ("raw_data", "sky", "rfi"):
            t = truth[name]
            lines.append(f"    {name:<19} {t['rmse']:10.4g}   {t['rmse_over_noise']:10.4g}")
        lines.append(f"    {'gains':<19} {truth['gains']['rmse']:10.4g}")
    lines += _satellite_lines(summary.get("satellites") or [])
    if summary.get("rfi_vis_by_satellite"):
        lines.append(_by_satellite_line(summary["rfi_vis_by_satellite"]))
    if summary.get("orbits"):
        lines += _orbit_lines(summary["orbits"])
    return lines


def _tiles_line(grid: dict, tiles: list[dict]) -> str:
    """How many tiles the run fitted and how many it found finished (--resume)."""
    earlier = sum(tile["fitted"] == "earlier" for tile in tiles)
    line = (
        f"  tiles                 {grid['n_tiles']} ({grid['time']} in time x {grid['freq']} in "
        f"frequency, overlaps {grid['overlap_integrations']} integrations and "
        f"{grid['overlap_channels']} channels), each in tiles/"
    )
    return line + (f"; {earlier} finished earlier" if earlier else "")


def _more(n: int) -> list[str]:
    return [f"    ... and {n} more in summary.json"] if n > 0 else []


def _satellite_lines(table: list[dict]) -> list[str]:
    """The brightest satellites of summary.json's ``satellites``, by the peak of their fitted
    RFI as it appears in the data over the noise."""
    if not table:
        return []
    brightest = sorted(table, key=lambda e: e["peak_over_noise"], reverse=True)
    lines = ["  brightest satellites  peak and rms of the fitted RFI in the data / noise"]
    for entry in brightest[:BRIGHTEST_SHOWN]:
        lines.append(
            f"    {entry['name']:<19} {entry['peak_over_noise']:10.4g}   "
            f"{entry['rms_over_noise']:10.4g}"
        )
    return lines + _more(len(table) - BRIGHTEST_SHOWN)


def _by_satellite_line(report: dict) -> str:
    """Whether results.zarr holds ``rfi_vis_by_satellite``, and why not."""
    if report["written"]:
        return f"  rfi_vis_by_satellite  written to results.zarr ({report['mib']:.4g} MiB)"
    return f"  rfi_vis_by_satellite  not written: {report['reason']}"


def _orbit_lines(orbits: dict) -> list[str]:
    """The fitted orbit offsets of summary.json's ``orbits``, one line a satellite."""
    ric = orbits["fit"] == "ric"
    head = "  orbit offsets         time (s)" + (
        "   radial, in-track, cross-track (m)" if ric else ""
    )
    lines = [head]
    for entry in orbits["satellites"][:ORBITS_SHOWN]:
        line = f"    {entry['name']:<19} {entry['time_offset_s']:+8.3g}"
        if ric:
            offset = entry["position_offset_m"]
            line += "   " + ", ".join(
                f"{offset[k]:+.3g}" for k in ("radial", "in_track", "cross_track")
            )
        lines.append(line)
    return lines + _more(len(orbits["satellites"]) - ORBITS_SHOWN)


def _step_memory_by_axis(obs, plan, summary: dict) -> dict[str, tuple[int, dict]]:
    """{axis: (devices, StageMemory dict)} of one optimisation step per device (of the phase,
    gradient or polish, whose step needs the most): the fit's own, and the same compiled (not
    run) on the baseline axis over every device, from the observation's shapes."""
    from tabascal.parallel import blockwise, routes
    from tabascal.planning import stages

    placed, reports = stages.plan_stages(
        blockwise.MemoryRows(obs), plan.model, plan.fit, routes.route("baseline"), init=plan.init
    )
    step = stages.limiting_step(reports)
    return {
        summary["shard_axis"]: (summary["n_devices"], summary["step_memory"]),
        "baseline": (placed.spec.n_dev, step.memory.as_dict()),
    }


def _memory_lines(by_axis: dict[str, tuple[int, dict]]) -> list[str]:
    """A table of each axis's per-device step memory against the first axis's: arguments (the
    state and inputs) and the working set (outputs and temporaries, less the donated state)."""

    def parts(stage):
        working = stage["outputs"] + stage["temporaries"] - stage["aliased"]
        return stage["arguments"], working, stage["arguments"] + working

    first = parts(next(iter(by_axis.values()))[1])
    lines = [
        "  one optimisation step, per device (the larger phase's; compiled; MiB, against one "
        "device)",
        "    axis       devices    arguments       working set         total",
    ]
    for axis, (devices, stage) in by_axis.items():
        cells = [f"{b / 2**20:7.2f} {b / f:5.2f}" for b, f in zip(parts(stage), first, strict=True)]
        lines.append(f"    {axis:<10} {devices:7d}  " + "   ".join(cells))
    return lines


def _read(path, satellites=None):
    """The observation at ``path`` (zarr store or Measurement Set), with the emitters of the
    files the plan's ``satellites`` names in place of its own."""
    from tabascal.measurement_set import open_observation

    obs = open_observation(path)
    return obs if satellites is None else satellites.apply(obs)


def _source(path, satellites, *, allow_missing: bool = False):
    """The rows of the observation at ``path``: a zarr store is read block by block as the
    fit needs its rows; a Measurement Set is read whole (convert it with ``tabascal import-ms``
    for block reads). ``allow_missing``: a store's missing vis and flags chunks are read as
    flagged cells. ``satellites``: the plan's, whose files' emitters replace the
    observation's of their kind where it names them."""
    from tabascal.measurement_set import is_measurement_set
    from tabascal.parallel.blockwise import MemoryRows, StoreRows
    from tabascal.store import read_meta

    if is_measurement_set(path):
        return MemoryRows(_read(path, satellites))
    meta = satellites.apply(read_meta(path, allow_missing=allow_missing))
    return StoreRows(path, meta, allow_missing=allow_missing)


def _start_processes(args) -> str | None:
    """Join a multi-process run when flags or launcher variables describe one; an error
    message when they are wrong or the run cannot be joined."""
    from tabascal.parallel import processes

    try:
        processes.initialize(
            processes.launch_from(
                coordinator=args.coordinator,
                num_processes=args.num_processes,
                process_id=args.process_id,
            )
        )
    except processes.LaunchError as err:
        return str(err)
    return None


def _run(args: argparse.Namespace) -> int:
    error = _start_processes(args)
    if error:
        print(f"tabascal run: error: {error}", file=sys.stderr)
        return 2
    from tabascal.config import describe
    from tabascal.fitting import job, run_config
    from tabascal.parallel import processes

    if args.list_keys:
        print("\n".join(describe(run_config.SCHEMA)))
        return 0
    if args.data is None or args.output is None:
        print("tabascal run: error: --data and -o are required", file=sys.stderr)
        return 2
    try:
        plan = _run_plan(args)
        summary = job.run(
            _source(args.data, plan.satellites, allow_missing=args.allow_missing),
            Path(args.output),
            plan,
            resume=args.resume,
            overwrite=args.overwrite,
            progress=not args.quiet,
        )
    except TabascalError as err:
        print(f"tabascal run: error: {err}", file=sys.stderr)
        return 2
    if processes.is_writer():
        print(f"tabascal run: wrote {args.output}")
        print("\n".join(_summary_lines(summary)))
    return 0


def _add_common(parser) -> None:
    parser.add_argument("-c", "--config", help="YAML configuration (defaults apply without it)")
    parser.add_argument("--data", help="observation store (e.g. obs.zarr)")
    parser.add_argument(
        "--devices", type=int, help="on a CPU-only machine, run on N virtual CPU devices"
    )
    parser.add_argument("--precision", choices=("single", "double"), help="float precision")
    parser.add_argument(
        "--row-blocks",
        type=int,
        help="with the baseline axis: take each device's baselines in N blocks in turn, "
        "dividing the step's visibility-shaped memory (overrides sharding.row_blocks)",
    )


def add_run(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="fit the model to an observation",
        description="Fit sky, RFI and gains to an observation store and write results.zarr, "
        "summary.json and plots into the output folder.",
    )
    _add_common(parser)
    parser.add_argument("-o", "--output", help="output folder")
    parser.add_argument(
        "--steps",
        type=int,
        help="steps of the first phase (overrides fit.steps; the second phase and the polish "
        "follow it unless the config sets them)",
    )
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier results")
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="fit a store that lacks vis or flags chunks, their cells read as flagged",
    )
    parser.add_argument(
        "--shard-axis",
        choices=("none", "source", "baseline"),
        help="split the work across devices (overrides config and $TABASCAL_SHARD_AXIS)",
    )
    parser.add_argument(
        "--reuse-plan",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --shard-axis baseline: permute the baselines so that each device touches "
        "few antennas (overrides config key baseline_axis.reuse_plan)",
    )
    tiles = parser.add_argument_group(
        "tiles over Dask workers",
        "with more than one tile (tiles.time, tiles.freq), fit a tile a task on Dask workers; "
        'needs pip install "tabascal[distributed]" and an observation store (--data STORE)',
    )
    tiles.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="start N local worker processes of one thread each (overrides tiles.workers)",
    )
    tiles.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="use the workers of the running Dask scheduler at ADDRESS, e.g. tcp://node1:8786 "
        "(overrides tiles.scheduler)",
    )
    group = parser.add_argument_group(
        "multi-process runs",
        "one process per host or GPU, all running the same command; without these flags the "
        "process count and index come from torchrun-style variables (MASTER_ADDR, MASTER_PORT, "
        "RANK, WORLD_SIZE), SLURM or Open MPI when present",
    )
    group.add_argument("--coordinator", help="HOST:PORT of process 0's coordination service")
    group.add_argument("--num-processes", type=int, help="number of processes in the run")
    group.add_argument("--process-id", type=int, help="this process's index, 0 to N-1")
    parser.add_argument("--list-keys", action="store_true", help="list every configuration key")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=_run)


def _channel_terms(options: dict) -> str:
    """The plan's words for an analytic group's series across a channel."""
    terms = options.get("channel_terms", 0)
    if not terms:
        return ""
    return f", {terms} channel term{'s' if terms != 1 else ''}"


def _kept_words(group: dict) -> str:
    if not group["kept"]:
        return "formed every step"
    return "kept at the channels' centres" if group.get("at") == "centres" else "kept"


def _phase_cache_line(report: dict) -> str:
    """What ``rfi.phase_cache`` chose per analytic group, in words."""
    if not report["groups"]:
        return "none to keep (no analytic group)"
    parts = [
        f"{name} {_kept_words(g)} ({g.get('kept_mib_per_device', g['mib_per_device']):.1f} MiB)"
        for name, g in report["groups"].items()
    ]
    return (
        f"{', '.join(parts)}; phase_cache {report['mode']}, budget "
        f"{report['budget_mib']:.0f} MiB per device ({report['budget_from']})"
    )


def _plan(args: argparse.Namespace) -> int:
    from tabascal.fitting import job
    from tabascal.parallel import routes
    from tabascal.planning import memory, stages

    if args.data is None:
        print("tabascal plan: error: --data is required", file=sys.stderr)
        return 2
    try:
        plan = _run_plan(args)
        route = routes.route(plan.sharding.axis, plan.sharding.reuse_plan)
        blocks = plan.sharding.row_blocks
        with job.precision_scope(plan.model.precision):
            placed, reports = stages.plan_stages(
                _source(args.data, plan.satellites),
                plan.model,
                plan.fit,
                route,
                init=plan.init,
                seed=plan.seed,
                row_blocks=blocks,
            )
    except TabascalError as err:
        print(f"tabascal plan: error: {err}", file=sys.stderr)
        return 2
    steps = {r.name: r.memory for r in reports if r.name in ("step", "polish")}
    devices = routes.devices(placed.spec)
    peak = max(max(r.peak) for r in reports)
    capacity = memory.device_memory_bytes(devices[0])
    print(
        f"tabascal plan: {args.data} on {len(devices)} {devices[0].platform} device(s), "
        f"shard axis {route.name}" + (f", {blocks} blocks of rows per device" if blocks > 1 else "")
    )
    spec = getattr(placed.spec, "model", placed.spec)
    print(
        f"  baselines x channels x times   {spec.n_bl} x {spec.n_freq} x {spec.n_time}; "
        f"{spec.n_ant} antennas, {spec.n_src} satellites"
    )
    print(f"  RFI groups                     {placed.info['rfi_groups']}")
    for name, options in placed.info.get("rfi_analytic_options", {}).items():
        pieces = f"{options['segments']} piece{'s' if options['segments'] != 1 else ''}"
        print(
            f"  {name + ' options':<30} {pieces}, {options['terms']} curvature terms, "
            f"{options['cubic_terms']} cubic terms" + _channel_terms(options)
        )
    print(f"  phase moments                  {_phase_cache_line(placed.info['rfi_phase_cache'])}")
    for name, step in steps.items():
        label = "optimisation step" if name == "step" else "polish step"
        print(
            f"  {label + ' per device':<30} arguments {step.arguments / 2**20:.1f} MiB, "
            f"outputs {step.outputs / 2**20:.1f} MiB, temporaries "
            f"{step.temporaries / 2**20:.1f} MiB"
        )
    print(
        f"  peak estimate per device       {peak / 2**30:.3f} GiB (largest over the stages "
        f"{', '.join(r.name for r in reports)})"
    )
    if capacity:
        verdict = "fits" if peak < 0.9 * capacity else "does NOT fit"
        print(f"  device memory                  {capacity / 2**30:.1f} GiB: {verdict}")
    return 0


def add_plan(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="estimate the per-device memory of a fit before running it",
        description="Compile every stage of the fit from the observation's shapes (nothing is "
        "fitted, and no more than a chunk of rows is read at once) on the config's shard axis, "
        "and print the per-device memory and whether it fits.",
    )
    _add_common(parser)
    parser.set_defaults(func=_plan)


def _demo(args: argparse.Namespace) -> int:
    import jax

    from tabascal.fitting import job
    from tabascal.simulate import simulate, simulation_config

    work = Path(args.output) if args.output else Path(tempfile.mkdtemp(prefix="tabascal-demo-"))
    obs_path, out_dir = work / "obs.zarr", work / "fit"
    print(f"tabascal demo: simulating the 'demo' preset into {obs_path}")
    start = time.perf_counter()
    simulate(simulation_config("demo"), obs_path, overwrite=True, progress=not args.quiet)
    obs = _read(obs_path)
    print(
        f"  {obs.vis.shape[0]} baselines x {obs.vis.shape[1]} channels x {obs.vis.shape[2]} "
        f"integrations, {obs.orbits.n_sat} satellites, on {jax.device_count()} "
        f"{jax.default_backend()} device(s)"
    )
    plan = _run_plan(args, DEMO_CONFIG)
    fit = plan.fit
    print(
        f"tabascal demo: fitting ({fit.steps} + {fit.second_phase_steps} gradient steps, "
        f"at most {fit.polish_steps} {POLISH_NAMES[fit.polish]} steps) into "
        f"{out_dir}"
    )
    summary = job.run(obs, out_dir, plan, overwrite=True, progress=not args.quiet)
    print("\n".join(_summary_lines(summary)))
    if jax.device_count() > 1:
        print("\n".join(_memory_lines(_step_memory_by_axis(obs, plan, summary))))
    print(f"tabascal demo: done in {time.perf_counter() - start:.0f} s; outputs in {out_dir}")
    return 0


def add_demo(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="simulate a small observation, fit it and summarise the result",
        description="Simulate the 'demo' preset (16 stations, 2 satellites), fit sky, RFI and "
        "gains, and print the fit quality, the errors against the truth and the per-device "
        "memory of the baseline axis against one device.",
    )
    parser.add_argument("-o", "--output", help="folder for obs.zarr and fit/ (default: temporary)")
    parser.add_argument(
        "--steps", type=int, help="steps of the first phase (the second and the polish follow it)"
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=4,
        help="virtual CPU devices where there is no accelerator (default 4): the fit runs on "
        "one, and the baseline axis's step memory over all of them is compared with it",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=_demo)
