"""One GPU session's benchmark: bench-512 on one device at 8, 32 and 64 channels, all-analytic
and hybrid RFI (step time, allocator peak, reduced chi-squared after a fixed number of steps),
then the ri_kernels operator benchmark at GPU size.

    python benchmarks/gpu.py --channels 8 --rfi hybrid --out "$OUT"   # the first goal's case
    python benchmarks/gpu.py --out "$OUT"          # every case: six, each up to --case-timeout
    python benchmarks/gpu.py --tiny --out /tmp/gpu # the same plumbing on a CPU in about a minute

Data: no simulation (it would take far longer than the session). The model is built from the
preset's metadata (``joint.abstract_model``) and its data are drawn on the device from the model
itself (``_common.synthetic_model``: a prior draw of sky, RFI signal and gains through
``joint.predict``, plus unit noise); the fit starts from the prior mean. The chi-squared after
``--steps`` steps says how far a fit of that length gets, not how well real data are fitted.

After the timed gradient steps each case takes ``--polish-steps`` steps of the default polish
with ``--polish-cg`` conjugate-gradient iterations each: the polish is a program of its own
(``optimiser.PhasedStep``), and the allocator's peak covers both; its memory does not depend on
the number of iterations, its time per step does (``polish_cg_iterations`` records them).

Each (channels, RFI) case runs in its own process, so the allocator's peak
(``tabascal.planning.memory.allocator_peak_bytes``) is that case's alone, and a case that runs
out of memory or time is recorded and the next one still runs. The metadata geometry, the slow host
part at 512 stations, is computed once per channel count and handed to both RFI routes. Step
time: the median of the timed steps after ``--warmup`` steps (the first compiles). Each case's
record is written as soon as it ends, to ``gpu_<time>.json`` under ``--out`` ($OUT by default,
else benchmarks/results/); a case that fails or runs out of time keeps its ``progress``, the
stages it reached and when (model built, data drawn, compiled, each step). Each case writes
those stages as it reaches them to ``gpu_<time>_progress_<channels>_<rfi>.txt`` beside it, which
stays if the whole session is stopped. This process stays on
the host's CPU and leaves the accelerator to the cases: one process at a time may hold a TPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

# 64 channels need most of an H200: let the allocator take up to 95 % of it (jax's default
# pool is 75 %).
CASE_ENV = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95", **os.environ}
TINY = {"array": {"n_stations": 8}, "observation": {"n_time": 30}}


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bench-512")
    parser.add_argument("--channels", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--rfi", nargs="+", default=["analytic", "hybrid"])
    parser.add_argument("--steps", type=int, default=20, help="steps after the warm-up")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--polish-steps", type=int, default=1, help="polish steps after them")
    parser.add_argument(
        "--polish-cg", type=int, default=5, help="conjugate-gradient iterations per polish step"
    )
    parser.add_argument(
        "--row-blocks",
        nargs="+",
        default=None,
        metavar="CHANNELS=K",
        help="channel counts fitted on the baseline axis of the one device with their rows in "
        "K blocks taken in turn (sharding.row_blocks); the others run the plain model "
        "(default 64=4: one device's 64-channel polish needs 203 GB unblocked, 59 GB in 4 "
        "blocks, by XLA's CPU figures; with --tiny 2=2)",
    )
    parser.add_argument(
        "--case-timeout",
        type=float,
        default=600.0,
        help="seconds per case (a bench-512 case builds its model, draws its data and compiles "
        "two programs before its first step: minutes on a TPU v5e)",
    )
    parser.add_argument(
        "--analytic-options",
        default="auto",
        choices=("auto", "fixed"),
        help="rfi.analytic_options: the analytic group's cubic-phase terms fitted to its "
        "phases (auto, the default), or rfi.cubic_terms as set (fixed)",
    )
    parser.add_argument(
        "--channel-terms",
        type=int,
        default=0,
        help="rfi.channel_terms: the most terms of the series across a channel an analytic "
        "group may take (0, the default: its phase moments at every fine channel)",
    )
    parser.add_argument("--tiny", action="store_true", help="8 stations, 2 channels, CPU-sized")
    parser.add_argument("--skip-kernels", action="store_true", help="no ri_kernels benchmark")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: one case, JSON path
    options = parser.parse_args(argv)
    blocks_given = options.row_blocks is not None
    try:
        pairs = [item.split("=") for item in options.row_blocks or ["64=4"]]
        options.row_blocks = {int(c): int(k) for c, k in pairs}
    except ValueError:
        parser.error(f"--row-blocks takes CHANNELS=K pairs, e.g. 64=4, not {options.row_blocks}")
    if any(k < 1 for k in options.row_blocks.values()):
        parser.error("--row-blocks: K must be at least 1")
    if options.tiny:
        options.preset, options.channels = "demo", [2]
        options.steps, options.warmup = min(options.steps, 5), 1
        options.polish_cg = min(options.polish_cg, 3)
        if not blocks_given:
            options.row_blocks = {2: 2}  # the blocked route's plumbing too
    return options


def run_case(spec: dict) -> dict:
    """One (channels, RFI) case in this process: build, draw the data, fit, measure."""
    import jax

    from tabascal import fitting, parallel, planning
    from tabascal.fitting import optimiser
    from tabascal.fitting import run_config as rc

    start = began = time.perf_counter()
    log = open(spec["progress"], "a", buffering=1)  # line-buffered: lines as they happen

    def progress(what: str) -> None:  # where a case that runs out of time had got to
        log.write(f"{time.perf_counter() - began:8.1f} s  {what}\n")

    progress(f"started on {jax.devices()[0]}")
    with open(spec["geometry"], "rb") as f:
        geom = pickle.load(f)
    abstract, config, _ = _common.preset_model(
        spec["preset"], spec["channels"], spec["rfi"], spec["extra"], geom=geom,
        config_extra={
            "rfi": {
                "analytic_options": spec["analytic_options"],
                "channel_terms": spec["channel_terms"],
            }
        },
    )  # fmt: skip
    progress("model built (abstract)")
    model = _common.synthetic_model(abstract, progress=progress)
    after_data = planning.allocator_peak_bytes()
    seconds_setup = time.perf_counter() - start
    # The gradient steps, then a few polish steps of a few conjugate-gradient iterations:
    # the polish is its own program, whose memory does not depend on how many it runs.
    fit_config = dataclasses.replace(
        rc.fit_config(config),
        steps=spec["warmup"] + spec["steps"],
        second_phase_steps=0,
        polish_steps=spec["polish_steps"],
        polish_cg_steps=spec["polish_cg"],
    )
    optimizer = optimiser.make_optimizer(fit_config)
    n_bl = model.spec.n_bl
    # Placed as a fit places it, with the phase moments rfi.phase_cache keeps: on this device
    # alone, or on the baseline axis of a mesh of it with its rows in blocks.
    if spec["row_blocks"] > 1:
        route = parallel.route("baseline")
        model = route.place(model, route.make_mesh(1), row_blocks=spec["row_blocks"])
    else:
        route = parallel.route("none")
        model = route.place(model, None)
    progress(f"placed, phase moments kept: {model.info['rfi_phase_cache']}")
    step = fitting.route_step(route, model.spec, fit_config, optimizer)
    inputs = (model.constants, model.data)
    state = optimiser.init_state(model.params, optimizer)
    start = time.perf_counter()
    step, programs = optimiser.compile_step(step, state, inputs)
    seconds_compile = time.perf_counter() - start
    progress(f"compiled {sorted(programs)} in {seconds_compile:.1f} s")
    chi2, times, iterations = [], [], []
    for k in range(fit_config.total_steps):
        start = time.perf_counter()
        state, _loss, aux = step(state, inputs)
        chi2.append(float(aux["chi2"]))  # waits for the step
        times.append(time.perf_counter() - start)
        progress(f"step {k}: {times[-1]:.3f} s, chi2 {chi2[-1]:.4g}")
        if k >= fit_config.polish_start:
            iterations.append(int(state.opt_state.polish.cg_iterations))
    timed = times[spec["warmup"] : fit_config.polish_start]
    polish = times[fit_config.polish_start :]
    return {
        "n_bl": n_bl,
        "rfi_groups": model.info["rfi_groups"],
        "rfi_phase_cache": model.info["rfi_phase_cache"],
        "rfi_analytic_options": model.info["rfi_analytic_options"],
        "sky_modes": model.info["sky_modes"],
        "sky_groups": model.info["sky_groups"],
        "step_seconds_median": statistics.median(timed),
        "step_seconds": timed,
        "chi2_initial": chi2[0],
        "chi2_after_steps": chi2[fit_config.polish_start - 1],
        "steps_taken": len(chi2),
        "polish_step_seconds": polish,
        "polish_cg_iterations": iterations,
        "allocator_peak_bytes": planning.allocator_peak_bytes(),
        "allocator_peak_bytes_after_data": after_data,
        "step_memory": planning.stage_memory(programs["gradient"]).as_dict(),
        "polish_step_memory": (
            planning.stage_memory(programs["polish"]).as_dict() if "polish" in programs else None
        ),
        "seconds_setup": seconds_setup,
        "seconds_compile": seconds_compile,
        "device": str(jax.devices()[0]),
    }


def _geometry_file(preset, channels, extra, folder: Path) -> Path:
    from tabascal.fitting import run_config as rc
    from tabascal.model import frame
    from tabascal.simulate import presets

    meta = presets.observation_meta(preset, _common.preset_overrides(channels, extra))
    geom = frame.observation_geometry(meta, rc.model_config(_common.run_config("hybrid")))
    path = folder / f"geometry_{channels}.pkl"
    with open(path, "wb") as f:
        pickle.dump(geom, f)
    return path


def _run_kernels(tiny: bool) -> dict:
    """The ri_kernels operator benchmark (``ri_kernels_bench``) at its GPU size, or tiny."""
    import ri_kernels_bench as bench

    from ri_kernels import make_indices

    size = dict(bench.SIZES["gpu"])
    if tiny:
        size = dict(n_ant=16, n_rfi=2, n_freq=1, n_time=30, n_int_t=4, precisions=("f32",))
    options = argparse.Namespace(operators="quadrature,analytic", repeats=5, max_seconds=20.0)
    a1, a2 = np.triu_indices(size["n_ant"], k=1)
    dims = {k: v for k, v in size.items() if k != "precisions"}
    print(f"\nri_kernels operators: {dims}, n_bl = {a1.size}; reference_s: the goal")
    start = time.perf_counter()
    results = bench._run_cases("gpu", size, make_indices(size["n_ant"], a1, a2), options)
    return {
        "benchmark": "ri_kernels_bench",
        "size": "tiny" if tiny else "gpu",
        "dims": dims,
        "results": results,
        "seconds": time.perf_counter() - start,
    }


def main(argv=None) -> None:
    options = _arguments(argv)
    if options.case:
        spec = json.loads(Path(options.case).read_text())
        record = run_case(spec)
        Path(spec["result"]).write_text(json.dumps(record))
        return
    # This process computes the geometry on the host and leaves the accelerator to the cases
    # (one process at a time may hold a TPU); they run with the environment it was given.
    os.environ["JAX_PLATFORMS"] = "cpu"
    out = options.out or Path(os.environ.get("OUT") or _common.RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    extra = TINY if options.tiny else None
    import datetime

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d_%H%M%S")
    path = out / f"gpu_{stamp}.json"
    base = _common.provenance(["benchmarks/gpu.py", *(argv or sys.argv[1:])])
    base["machine"]["devices"] = "the cases': each record's 'device'"  # this process's is the CPU
    records = []
    print(
        f"{'ch':>3} {'rfi':>8} {'step s':>8} {'polish s':>8} {'peak GB':>8} {'chi2 0':>9} "
        f"{'chi2 N':>9}  groups"
    )
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for channels in options.channels:
            start = time.perf_counter()
            geometry = _geometry_file(options.preset, channels, extra, folder)
            print(
                f"{channels:3d} geometry on the host: {time.perf_counter() - start:.1f} s",
                flush=True,
            )
            for rfi in options.rfi:
                spec = {
                    "preset": options.preset, "channels": channels, "rfi": rfi, "extra": extra,
                    "steps": options.steps, "warmup": options.warmup,
                    "polish_steps": options.polish_steps, "polish_cg": options.polish_cg,
                    "row_blocks": options.row_blocks.get(channels, 1),
                    "analytic_options": options.analytic_options,
                    "channel_terms": options.channel_terms,
                    "geometry": str(geometry), "result": str(folder / "result.json"),
                    "progress": str(out / f"gpu_{stamp}_progress_{channels}_{rfi}.txt"),
                }  # fmt: skip
                (folder / "case.json").write_text(json.dumps(spec))
                record = {**base, "preset": options.preset, "channels": channels, "rfi": rfi,
                          "steps": options.steps, "warmup": options.warmup,
                          "row_blocks": spec["row_blocks"],
                          "channel_terms": options.channel_terms}  # fmt: skip
                command = [sys.executable, __file__, "--case", str(folder / "case.json")]
                start = time.perf_counter()
                try:
                    done = subprocess.run(
                        command, capture_output=True, text=True, timeout=options.case_timeout,
                        env=CASE_ENV,
                    )  # fmt: skip
                    if done.returncode == 0:
                        record.update(json.loads((folder / "result.json").read_text()))
                    else:
                        record["error"] = done.stderr[-2000:]
                except subprocess.TimeoutExpired:
                    record["error"] = f"timed out after {options.case_timeout:.0f} s"
                record["seconds_case"] = time.perf_counter() - start
                if "error" in record and Path(spec["progress"]).exists():
                    record["progress"] = Path(spec["progress"]).read_text().splitlines()[-40:]
                record["load_average"] = list(os.getloadavg())
                records.append(record)
                path.write_text(json.dumps(records, indent=2) + "\n")
                if "error" in record:
                    print(f"{channels:3d} {rfi:>8}  failed: {record['error'][-300:]}", flush=True)
                    print("\n".join(record.get("progress", [])[-5:]), flush=True)
                    continue
                peak = record["allocator_peak_bytes"]
                polish = record["polish_step_seconds"]
                print(
                    f"{channels:3d} {rfi:>8} {record['step_seconds_median']:8.3f} "
                    f"{statistics.median(polish) if polish else float('nan'):8.3f} "
                    f"{_common.gb(max(peak)) if peak else '-':>8} {record['chi2_initial']:9.4g} "
                    f"{record['chi2_after_steps']:9.4g}  {record['rfi_groups']}",
                    flush=True,
                )
    if not options.skip_kernels:
        records.append({**base, **_run_kernels(options.tiny)})
        path.write_text(json.dumps(records, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
