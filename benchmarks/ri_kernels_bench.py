"""Benchmark of the ri_kernels operators: forward and value-and-gradient (w.r.t. amp).

    python benchmarks/ri_kernels_bench.py            # CPU size, complex64 and complex128
    python benchmarks/ri_kernels_bench.py --gpu      # GPU size, complex64

CPU size (the issue's comparison with the upstream compiled CPU kernels): 64 antennas (2016
cross-correlation baselines), 8 sources, 1 channel, 90 cells, 16 fine time samples per cell;
quadrature with 3-point Lagrange stencils in time, analytic with 3 monomial coefficients.
GPU size: 512 antennas (130816 baselines), 32 sources, 8 channels, 150 cells, 16 fine samples,
float32. One fine sample per channel in both.

Each case is compiled and run once (warm-up), then timed with block_until_ready over
--repeats runs (fewer, but at least three, once a case has taken --max-seconds); the median
is reported. float32 cases run with jax_enable_x64 off, as a float32 user would, float64 cases
with it on. Results go to benchmarks/results/ as JSON with the date, git commit, machine and
jax version.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine

from ri_kernels import (
    AnalyticTables,
    QuadratureTables,
    analytic_eval_with_indices,
    fine_offsets,
    lagrange_stencils,
    make_indices,
    monomial_stencils,
    quadrature_eval_with_indices,
)

SIZES = {
    "cpu": dict(n_ant=64, n_rfi=8, n_freq=1, n_time=90, n_int_t=16, precisions=("f32", "f64")),
    "gpu": dict(n_ant=512, n_rfi=32, n_freq=8, n_time=150, n_int_t=16, precisions=("f32",)),
}
# Upstream compiled C++ CPU kernels, float32 value-and-gradient w.r.t. amp, at the CPU size
# (figures from the issue): quadrature 41 ms (21 ms in the kernel), analytic 0.7 s.
UPSTREAM_CPU_S = {
    ("quadrature", "value_and_grad", "f32"): 0.041,
    ("analytic", "value_and_grad", "f32"): 0.7,
}
GOALS_GPU_S = {
    ("quadrature", "value_and_grad", "f32"): 0.15,
    ("analytic", "value_and_grad", "f32"): 0.5,
}
INT_TIME, CHAN_WIDTH_MHZ, N_STENCIL, N_COEF = 2.0, 0.2, 3, 3


def _scene(n_ant, n_rfi, n_freq, n_time, n_int_t, real, seed=0):
    """Signal and tables at realistic scales; real = np.float32 or np.float64."""
    rng = np.random.default_rng(seed)
    shape = (n_ant, n_rfi, n_freq, n_time)
    cplx = np.complex64 if real == np.float32 else np.complex128
    amp = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(cplx)
    phase = rng.uniform(0, 2 * np.pi, shape).astype(real)
    delay = np.empty((n_ant, n_rfi, n_time, 3), real)
    delay[..., 0] = rng.uniform(-30, 30, delay.shape[:3])  # us from the array mean
    delay[..., 1] = rng.normal(0, 0.05, delay.shape[:3])  # us/s
    delay[..., 2] = rng.normal(0, 5e-5, delay.shape[:3])  # us/s^2
    dnu = np.zeros(1, real)
    w_freq, start_freq = lagrange_stencils(n_freq, dnu / CHAN_WIDTH_MHZ, 1, real)
    dt = fine_offsets(INT_TIME, n_int_t, real)
    w_time, start_time = lagrange_stencils(n_time, dt / INT_TIME, N_STENCIL, real)
    g_time, start_g = monomial_stencils(n_time, N_COEF, real)
    freq = (1227.6 + CHAN_WIDTH_MHZ * np.arange(n_freq)).astype(real)
    quadrature = QuadratureTables(w_freq, start_freq, w_time, start_time, dnu, dt)
    analytic = AnalyticTables(w_freq, start_freq, g_time, start_g, dnu, real(INT_TIME))
    return {
        "quadrature": (amp, phase, delay, quadrature, freq),
        "analytic": (amp, phase, delay, analytic, freq),
    }


def _functions(operator, indices, args):
    seam = {"quadrature": quadrature_eval_with_indices, "analytic": analytic_eval_with_indices}
    seam = seam[operator]

    def vis(amp):
        return seam(indices, amp, *args[1:])

    def loss(amp):
        return jnp.sum(jnp.abs(vis(amp)) ** 2)

    return {"forward": jax.jit(vis), "value_and_grad": jax.jit(jax.value_and_grad(loss))}


def _time(fn, amp, repeats, max_seconds):
    """Seconds of the first call, then wall and process-CPU seconds of each timed run."""
    start = time.perf_counter()
    jax.block_until_ready(fn(amp))
    first = time.perf_counter() - start
    runs, cpu = [], []
    while len(runs) < repeats and (len(runs) < 3 or sum(runs) < max_seconds):
        start, start_cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(amp))
        runs.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return first, runs, cpu


def _machine():
    # The tabascal benchmarks' machine record, with this script's keys: the 1-minute load and
    # every device by name.
    return dict(
        machine(), load_average_1min=os.getloadavg()[0], devices=[str(d) for d in jax.devices()]
    )


def _git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "packages/ri_kernels"],
            capture_output=True,
            text=True,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


COLUMNS = (
    "operator",
    "mode",
    "precision",
    "median_s",
    "min_s",
    "median_cpu_s",
    "first_call_s",
    "load_average_1min",
    "reference_s",
)
WIDTHS = (11, 15, 9, 9, 9, 9, 9, 6, 11)


def _line(values):
    cells = []
    for value, width in zip(values, WIDTHS, strict=True):
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        cells.append(text.rjust(width) if isinstance(value, float) else text.ljust(width))
    return " ".join(cells)


def _run_cases(size_name, size, indices, options):
    """Time every (precision, operator, mode); print a line for each; return the rows."""
    dims = {k: v for k, v in size.items() if k != "precisions"}
    references = UPSTREAM_CPU_S if size_name == "cpu" else GOALS_GPU_S
    print(_line(COLUMNS))
    results = []
    for precision in size["precisions"]:
        real = np.float32 if precision == "f32" else np.float64
        jax.config.update("jax_enable_x64", precision == "f64")
        scenes = _scene(real=real, **dims)
        for operator in options.operators.split(","):
            args = jax.tree.map(
                lambda x: jnp.asarray(x) if isinstance(x, np.ndarray) else x, scenes[operator]
            )
            for mode, fn in _functions(operator, indices, args).items():
                first, runs, cpu = _time(fn, args[0], options.repeats, options.max_seconds)
                row = {
                    "operator": operator,
                    "mode": mode,
                    "precision": precision,
                    "median_s": statistics.median(runs),
                    "min_s": min(runs),
                    "median_cpu_s": statistics.median(cpu),
                    "first_call_s": first,
                    "load_average_1min": os.getloadavg()[0],
                    "reference_s": references.get((operator, mode, precision), "-"),
                    "jax_enable_x64": precision == "f64",
                    "runs_s": runs,
                }
                print(_line([row[c] for c in COLUMNS]))
                results.append(row)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the GPU problem size (float32)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--operators", default="quadrature,analytic")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    options = parser.parse_args()
    size_name = "gpu" if options.gpu else "cpu"
    size = SIZES[size_name]
    a1, a2 = np.triu_indices(size["n_ant"], k=1)
    dims = {k: v for k, v in size.items() if k != "precisions"}
    print(f"ri_kernels benchmark, {size_name} size: {dims}, n_bl = {a1.size}")
    print("reference_s: upstream compiled CPU kernels (cpu size) or the goal (gpu size)")
    results = _run_cases(size_name, size, make_indices(size["n_ant"], a1, a2), options)

    now = datetime.datetime.now(datetime.UTC)
    record = {
        "benchmark": "ri_kernels_bench",
        "size": size_name,
        "command": "python benchmarks/ri_kernels_bench.py" + (" --gpu" if options.gpu else ""),
        "date": now.isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "machine": _machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": np.__version__,
        "dims": {
            **dims,
            "n_bl": int(a1.size),
            "n_int_f": 1,
            "n_stencil_time": N_STENCIL,
            "n_coef": N_COEF,
            "n_path": 3,
            "int_time_s": INT_TIME,
        },
        "repeats": options.repeats,
        "results": results,
    }
    options.out.mkdir(parents=True, exist_ok=True)
    path = options.out / f"ri_kernels_{size_name}_{now:%Y%m%d_%H%M%S}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
