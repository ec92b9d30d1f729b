"""Time to science: the wall time of ``tabascal run`` with its defaults, from the command to
its summary, split into where it went, with the fit's passes and its science.

    python benchmarks/time_to_science.py                              # every scenario
    python benchmarks/time_to_science.py --scenarios demo leo-pass    # some of them
    python benchmarks/time_to_science.py --scenarios --presets bench-96   # a preset alone
    python benchmarks/time_to_science.py --scenarios demo --config C.yaml --twins

Each scenario of ``benchmarks/scenarios`` (and each preset named) is simulated, then fitted
by ``tabascal run`` in its own process, as a user runs it: the defaults (or ``--config``), one
process, a compilation cache of its own that starts empty (``--warm`` runs each fit twice
and reports the second, whose programs come from the cache). The columns: **command (s)**,
the process's wall time, imports included; from summary.json's ``timings``, **setup**
(reading, the noise, the model's build and start, its placement), **compile** (the step's
programs), **iterations** and **writing** (the outputs and plots); **setup share**, all but
the iterations over the command's time; the fit's **steps** and **passes** (one forward and
one backward evaluation of the model) and why it **stopped**; and its science against the
simulation's truth as ``benchmarks/science.py`` scores it (RFI and apparent sky over the
noise, chi-squared, gains over their spread), with the RFI-free twin's sky (``--twins``, a
second fit) for **sky / twin**.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The fits run in processes of their own, and an accelerator opens to one process at a time:
# this one simulates and scores on the CPU, each fit gets the platforms the caller chose.
FIT_PLATFORMS = os.environ.get("JAX_PLATFORMS")
os.environ["JAX_PLATFORMS"] = "cpu"

import _common  # noqa: E402
import science  # noqa: E402


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios",
        nargs="*",
        default=None,
        help="names in benchmarks/scenarios (default: all; none with a bare flag)",
    )
    parser.add_argument(
        "--presets",
        nargs="*",
        default=[],
        help="simulation presets (tabascal simulate --preset) to fit as well",
    )
    parser.add_argument("--config", type=Path, help="run configuration YAML for every fit")
    parser.add_argument(
        "--twins",
        action="store_true",
        help="also fit each scenario's RFI-free twin, for sky / twin",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="report a second run of each fit, its programs from the cache",
    )
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)  # fmt: skip


def _fit_environment() -> dict:
    """This process's environment with the platforms the caller chose for the fits."""
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS")
    if FIT_PLATFORMS is not None:
        env["JAX_PLATFORMS"] = FIT_PLATFORMS
    return env


def fit_devices() -> str:
    """The devices a fit's process sees, as the record's ``machine`` names this one's."""
    probe = "import jax; print(jax.device_count(), 'x', jax.devices()[0].device_kind)"
    done = subprocess.run([sys.executable, "-c", probe], env=_fit_environment(),
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def tabascal_run(store: Path, out: Path, config: Path | None, cache_home: Path) -> dict:
    """``tabascal run`` on ``store`` into ``out`` in a fresh process whose compilation cache
    lives under ``cache_home``: its summary.json, with the process's wall time."""
    env = _fit_environment()
    env = {k: v for k, v in env.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["XDG_CACHE_HOME"] = str(cache_home)
    command = [sys.executable, "-m", "tabascal", "run", "--data", str(store), "-o", str(out),
               "-q", "--overwrite"]  # fmt: skip
    if config is not None:
        command += ["-c", str(config)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tabascal run failed on {store}:\n{done.stderr[-4000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {**summary, "command_s": seconds}


def measure(name: str, simulation: dict, where: Path, options) -> dict:
    """Simulate ``name`` under ``where``, fit it as ``tabascal run`` does and score it."""
    from tabascal.store import read_observation

    store = where / f"{name}.zarr"
    science.simulate_scenario(simulation, store)
    cache = where / f"{name}-cache"
    summary = tabascal_run(store, where / f"{name}-fit", options.config, cache)
    if options.warm:
        summary = tabascal_run(store, where / f"{name}-fit", options.config, cache)
    record = {
        "scenario": name,
        "command_s": summary["command_s"],
        **summary["timings"],
        "setup_share": 1 - summary["timings"]["iterations_s"] / summary["command_s"],
        **{key: summary["fit"][key] for key in ("steps", "passes", "stopped")},
        "compiled": summary["compile"]["compiled"],
        "cache_hits": summary["compile"]["cache_hits"],
        "chi2": summary["chi2_final"],
        "visibilities": int(science.visibilities(store)),
        **science.score_results(read_observation(store), where / f"{name}-fit" / "results.zarr"),
    }
    if options.twins:
        twin = science.twin_of(simulation)
        twin_store = where / f"{name}-twin.zarr"
        science.simulate_scenario(twin, twin_store)
        tabascal_run(twin_store, where / f"{name}-twin-fit", options.config, cache)
        floor = science.score_results(
            read_observation(twin_store), where / f"{name}-twin-fit" / "results.zarr"
        )
        record["twin_sky_over_noise"] = floor["sky_over_noise"]
        record["sky_over_twin"] = record["sky_over_noise"] / floor["sky_over_noise"]
    return record


def _row(r: dict) -> str:
    gains = "-" if r["gains_over_spread"] is None else f"{r['gains_over_spread']:.2f}"
    twin = f"{r['sky_over_twin']:.2f}" if "sky_over_twin" in r else "-"
    passes = "-" if r["passes"] is None else f"{r['passes']:.0f}"
    return (f"{r['scenario']:>16} {r['visibilities']:>9} {r['command_s']:8.1f} "
            f"{r['setup_s']:6.1f} {r['compile_s']:7.1f} {r['iterations_s']:9.1f} "
            f"{r['writing_s']:7.1f} {r['setup_share']:6.0%} {r['steps']:>5} {passes:>6} "
            f"{r['stopped']:>10} {r['rfi_over_noise']:6.3f} {r['sky_over_noise']:6.3f} "
            f"{twin:>5} {r['chi2']:6.3f} {gains:>5}")  # fmt: skip


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    from tabascal.config import load_yaml

    files = science.scenario_files(options.scenarios)
    cases = [(f.stem, ("demo", load_yaml(f))) for f in files]
    cases += [(preset, (preset, {})) for preset in options.presets]
    base = _common.provenance(["benchmarks/time_to_science.py", *(argv or sys.argv[1:])])
    base["run_config"] = load_yaml(options.config) if options.config else {}
    base["fit_devices"] = fit_devices()
    print(f"fits on {base['fit_devices']}")
    head = (
        f"{'scenario':>16} {'vis':>9} {'command':>8} {'setup':>6} {'compile':>7} "
        f"{'iterations':>9} {'writing':>7} {'setup%':>6} {'steps':>5} {'passes':>6} "
        f"{'stopped':>10} {'rfi':>6} {'sky':>6} {'/twin':>5} {'chi2':>6} {'gains':>5}"
    )
    print(head)  # fmt: skip
    records = []
    with tempfile.TemporaryDirectory() as where:
        for name, simulation in cases:
            record = {**base, **measure(name, simulation, Path(where), options)}
            records.append(record)
            print(_row(record), flush=True)
    path = _common.write_json(records, options.json, "time_to_science")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
