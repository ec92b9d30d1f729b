"""The analytic operator's cost against its options: pieces (segments), cubic-phase terms and
terms of its series across a channel.

    python benchmarks/analytic_options.py                # 16 antennas, this machine
    python benchmarks/analytic_options.py --antennas 48 --budgets-mb 64 256 1024  # a TPU
    python benchmarks/analytic_options.py --channels 4 --options 2,1 2,1,2  # across channels

The shape of the benchmarks' analytic groups (bench-96 and bench-512: 32 satellites, a
7-point time stencil, so 13 phase moments, and 7 Gauss-Legendre frequency samples per
channel), one channel of 30 integrations of 10 s, float32 with jax's 64-bit mode off, as
shipped. The delays are navigation satellites' over an array a few km across: derivatives of
about 2e-3 us/s and 3e-7 us/s^2, no third, so every element takes the curvature expansion,
as the benchmarks' do. Each option set's forward evaluation and value-and-gradient (with
respect to the signal) are compiled, run once, then timed in interleaved rounds; the median
is reported per element (baseline x cell x satellite x frequency sample). ``rfi.
analytic_options`` "auto" lowers the cubic terms to what a group's phases need; this says
what that buys on the machine at hand. ``--budgets-mb`` repeats every option set at each
working-memory budget per block (``rfi.memory_budget_mb``), which sets the blocks' size.
An option set's third number is its ``channel_terms`` (0 when left out): the moments formed
once per channel instead of at each of the 7 frequency samples; a fourth, 1, takes the
curvature's change across a channel to first order (``channel_bend``; 0, dropped, when left
out, as ``rfi.analytic_options`` "auto" does for these navigation satellites).
``--channels`` (1) sets the channels, whose frequency stencil is then ``rfi.freq_stencil``'s
3 points (bench-512 has 8 channels); ``--kept`` also times the value and gradient with the
moments kept, at every frequency sample and, where the set has channel terms, at the
channels' centres.
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

# (segments, cubic_terms): the configured default first.
OPTIONS = ("2,3", "2,2", "2,1", "2,0", "1,3", "1,0")
N_RFI, N_TIME, N_FREQ_SAMPLES, N_COEF, INT_TIME_S, CHAN_MHZ = 32, 30, 7, 7, 10.0, 0.01


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--antennas", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each option set")
    parser.add_argument(
        "--options",
        nargs="+",
        default=list(OPTIONS),
        metavar="SEGMENTS,CUBIC_TERMS[,CHANNEL_TERMS[,BEND]]",
    )
    parser.add_argument("--channels", type=int, default=1, help="channels (1)")
    parser.add_argument(
        "--kept", action="store_true", help="also time value and gradient with kept moments"
    )
    parser.add_argument(
        "--budgets-mb",
        nargs="+",
        type=float,
        default=[256.0],
        help="working memory per block (MiB; rfi.memory_budget_mb, 256 by default)",
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default results/)")
    return parser.parse_args(argv)


def _option_set(text: str) -> tuple[int, int, int, int]:
    """(segments, cubic_terms, channel_terms, channel_bend) of "S,C", "S,C,J" or "S,C,J,B"."""
    values = [int(v) for v in text.split(",")]
    if len(values) not in (2, 3, 4):
        raise SystemExit(f"--options: {text!r} is not SEGMENTS,CUBIC_TERMS[,CHANNEL_TERMS[,BEND]]")
    return tuple(values) + (0, 0)[: 4 - len(values)]


def _scene(n_ant: int, seed: int = 0, n_freq: int = 1):
    import numpy as np

    import ri_kernels

    rng = np.random.default_rng(seed)
    shape = (n_ant, N_RFI, n_freq, N_TIME)
    amp = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    phase = rng.uniform(0, 2 * np.pi, shape).astype(np.float32)
    delay = np.zeros((n_ant, N_RFI, N_TIME, 4), np.float32)
    delay[..., 0] = rng.uniform(-30, 30, delay.shape[:3])
    delay[..., 1] = rng.normal(0, 2e-3, delay.shape[:3])
    delay[..., 2] = rng.normal(0, 3e-7, delay.shape[:3])
    dnu, scale = ri_kernels.gauss_legendre_offsets(CHAN_MHZ, N_FREQ_SAMPLES, np.float32)
    stencil = min(3, n_freq)
    w_freq, start_freq = ri_kernels.lagrange_stencils(n_freq, dnu / CHAN_MHZ, stencil, np.float32)
    g_time, start_time = ri_kernels.monomial_stencils(N_TIME, N_COEF, np.float32)
    freq = (1227.6 + CHAN_MHZ * np.arange(n_freq)).astype(np.float32)
    a1, a2 = np.triu_indices(n_ant, 1)
    indices = ri_kernels.make_indices(n_ant, a1, a2)
    tables = ri_kernels.AnalyticTables(
        w_freq * scale, start_freq, g_time, start_time, dnu, np.float32(INT_TIME_S)
    )
    return indices, amp, (phase, delay, tables, freq), a1.size


def _programs(
    indices, amp, rest, segments, cubic_terms, channel_terms, bend, budget_mb, kept=False
):
    import jax
    import jax.numpy as jnp

    import ri_kernels

    options = {
        "segments": segments,
        "cubic_terms": cubic_terms,
        "channel_bend": bool(bend),
        "memory_budget_bytes": int(budget_mb * 2**20),
    }

    def vis(amp, moments=None, terms=channel_terms):
        return ri_kernels.analytic_eval_with_indices(
            indices, amp, *rest, **options, channel_terms=terms, moments=moments
        )

    def loss(amp, moments=None, terms=channel_terms):
        v = vis(amp, moments, terms)
        return jnp.sum(v.real**2 + v.imag**2)

    programs = {
        "forward": jax.jit(vis).lower(amp).compile(),
        "value_and_grad": jax.jit(jax.value_and_grad(loss)).lower(amp).compile(),
    }
    # kept moments: at every frequency sample, and at the channels' centres with channel terms
    for terms in sorted({0, channel_terms}) if kept else ():
        moments = ri_kernels.analytic_moments_with_indices(
            indices, *rest, **options, channel_terms=terms
        )
        step = jax.jit(jax.value_and_grad(lambda a, m, t=terms: loss(a, m, t)))
        compiled = step.lower(amp, moments).compile()
        name = "kept_value_and_grad" + ("_centres" if terms else "")
        programs[name] = lambda a, c=compiled, m=moments: c(a, m)
    return programs


def main(argv=None) -> None:
    options = _arguments(argv)
    import jax

    indices, amp, rest, n_bl = _scene(options.antennas, n_freq=options.channels)
    elements = n_bl * N_TIME * options.channels * N_RFI * N_FREQ_SAMPLES
    sets = [(*_option_set(o), budget) for budget in options.budgets_mb for o in options.options]
    programs = {}
    times = collections.defaultdict(list)
    for o in sets:  # compiled and run once; the first run's time said as it comes
        programs[o] = _programs(indices, amp, rest, *o, kept=options.kept)
        for mode, fn in programs[o].items():
            start = time.perf_counter()
            jax.block_until_ready(fn(amp))
            first = (time.perf_counter() - start) / elements * 1e9
            print(f"  {o}: {mode} first run {first:.1f} ns per element", flush=True)
    for _ in range(options.rounds):  # interleaved, so that load falls on every set alike
        for o in sets:
            for mode, fn in programs[o].items():
                start = time.perf_counter()
                jax.block_until_ready(fn(amp))
                times[o, mode].append(time.perf_counter() - start)
    print(f"{n_bl} baselines, {elements} elements, on {jax.devices()[0].platform}")
    kept_heads = f" {'kept':>8} {'at centres':>10}" if options.kept else ""
    print(
        f"{'segments':>8} {'cubic':>5} {'channel':>7} {'bend':>4} {'MiB':>6} "
        f"{'forward ns/el':>14} {'value+grad ns/el':>17}{kept_heads}"
    )
    rows = []
    for o in sets:
        row = {"segments": o[0], "cubic_terms": o[1], "channel_terms": o[2]}
        row.update(channel_bend=bool(o[3]), memory_budget_mb=o[4])
        for mode in programs[o]:
            row[f"{mode}_s"] = times[o, mode]
            row[f"{mode}_ns_per_element"] = statistics.median(times[o, mode]) / elements * 1e9
        kept = "".join(
            f" {row.get(f'{mode}_ns_per_element', math.nan):{width}.1f}"
            for mode, width in (("kept_value_and_grad", 8), ("kept_value_and_grad_centres", 10))
            if options.kept
        )
        print(
            f"{o[0]:8d} {o[1]:5d} {o[2]:7d} {o[3]:4d} {o[4]:6g} "
            f"{row['forward_ns_per_element']:14.1f} "
            f"{row['value_and_grad_ns_per_element']:17.1f}{kept}"
        )
        rows.append(row)
    record = {
        **_common.provenance(["benchmarks/analytic_options.py", *(argv or sys.argv[1:])]),
        "dims": {
            "n_ant": options.antennas,
            "n_bl": n_bl,
            "n_rfi": N_RFI,
            "n_time": N_TIME,
            "n_freq": options.channels,
            "n_freq_samples": N_FREQ_SAMPLES,
            "n_coef": N_COEF,
            "elements": elements,
        },
        "rounds": options.rounds,
        "results": rows,
    }
    print(f"wrote {_common.write_json(record, options.out, 'analytic_options')}")


if __name__ == "__main__":
    main()
