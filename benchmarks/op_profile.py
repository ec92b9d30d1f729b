"""Where the analytic operator's time goes on a device, by XLA operation.

    python benchmarks/op_profile.py                          # 16 antennas, this machine
    python benchmarks/op_profile.py --antennas 48 --hlo DIR  # an accelerator

The operator at ``analytic_options.py``'s shape (32 satellites, 7 frequency samples, 13
moments, float32 as shipped), one option set (pieces, cubic terms; ``--options``), its
forward evaluation and its value and gradient with respect to the signal. Each program is
compiled and run once; then

- XLA's own cost analysis of the compiled program: flops, transcendentals and bytes accessed,
  per element (baseline x cell x satellite x frequency sample);
- one run under jax's profiler: the device's operations (an accelerator's "XLA Ops" line)
  summed by name, each one's own time (that of the operations nested in it, a loop's body,
  left out), the largest first, with the shape it makes and its share of the run.
  The CPU backend records no per-operation device events: there the table is empty, and the
  cost analysis and the run's time stand alone.

``--hlo DIR`` writes each program's optimised HLO there, to read what each named operation
is.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import analytic_options

TOP = 25  # operations kept per program in the record


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--antennas", type=int, default=16)
    parser.add_argument(
        "--options", default="2,1", metavar="SEGMENTS,CUBIC_TERMS[,CHANNEL_TERMS[,BEND]]"
    )
    parser.add_argument("--budget-mb", type=float, default=256.0, help="rfi.memory_budget_mb")
    parser.add_argument("--hlo", type=Path, default=None, help="folder for the optimised HLO")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default results/)")
    return parser.parse_args(argv)


def _cost(compiled, elements: int) -> dict:
    """XLA's cost analysis of ``compiled``, per element (None where the backend gives none)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):  # older jax: one dict per computation
        analysis = analysis[0] if analysis else None
    if not analysis:
        return {}
    keys = {"flops": "flops", "transcendentals": "transcendentals", "bytes": "bytes accessed"}
    return {
        f"{name}_per_element": float(analysis[key]) / elements
        for name, key in keys.items()
        if key in analysis
    }


def _device_ops(path: Path) -> dict:
    """:func:`own_times` over the profile's device planes' XLA-operation lines."""
    import jax

    data = jax.profiler.ProfileData.from_file(str(path))
    events = [
        (event.name, event.start_ns, event.duration_ns)
        for plane in data.planes
        if plane.name.startswith("/device:")
        for line in plane.lines
        if "XLA Ops" in line.name
        for event in line.events
    ]
    return own_times(events)


def own_times(events) -> dict:
    """Per operation: [own ns, count, shape made] of (HLO text, start ns, duration ns) events
    of one line. An operation's own time leaves out the operations nested in it (a loop's
    body in the loop), so that the times add up to the line's."""
    ops = collections.defaultdict(lambda: [0.0, 0, ""])
    open_ops = []  # (end, operation) of the operations the next one may lie in
    for text, start, duration in sorted(events, key=lambda e: (e[1], -e[2])):
        name, _, rest = text.partition(" = ")
        op = ops[name]
        op[0] += duration
        op[1] += 1
        op[2] = op[2] or rest.split(" ")[0][:40]
        while open_ops and open_ops[-1][0] <= start:
            open_ops.pop()
        if open_ops:
            open_ops[-1][1][0] -= duration
        open_ops.append((start + duration, op))
    return ops


def _profiled(fn, amp) -> tuple[float, dict]:
    """One run of ``fn(amp)`` under the profiler: its seconds and its device operations."""
    import jax

    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder):
            start = time.perf_counter()
            jax.block_until_ready(fn(amp))
            seconds = time.perf_counter() - start
        files = sorted(Path(folder).rglob("*.xplane.pb"))
        return seconds, _device_ops(files[-1]) if files else {}


def main(argv=None) -> None:
    options = _arguments(argv)
    import jax

    segments, cubic_terms, channel_terms, bend = analytic_options._option_set(options.options)
    indices, amp, rest, n_bl = analytic_options._scene(options.antennas)
    elements = n_bl * analytic_options.N_TIME * analytic_options.N_RFI
    elements *= analytic_options.N_FREQ_SAMPLES
    amp = jax.device_put(amp)
    programs = analytic_options._programs(
        indices, amp, rest, segments, cubic_terms, channel_terms, bend, options.budget_mb
    )
    print(f"{n_bl} baselines, {elements} elements, on {jax.devices()[0].platform}")
    results = {}
    for mode, fn in programs.items():
        start = time.perf_counter()
        jax.block_until_ready(fn(amp))
        first = time.perf_counter() - start
        seconds, ops = _profiled(fn, amp)
        cost = _cost(fn, elements)
        device_ns = sum(v[0] for v in ops.values())
        ranked = sorted(ops.items(), key=lambda kv: -kv[1][0])
        print(
            f"\n{mode}: first run {first / elements * 1e9:.1f} ns per element, profiled run "
            f"{seconds / elements * 1e9:.1f}; device operations {device_ns / elements:.1f}"
        )
        print("  " + ", ".join(f"{k} {v:.0f}" for k, v in cost.items()))
        if ranked:
            print(f"  {'operation':<28} {'shape':<40} {'count':>6} {'ns/el':>7} {'share':>6}")
        for name, (ns, count, shape) in ranked[:TOP]:
            print(
                f"  {name[:28]:<28} {shape:<40} {count:6d} {ns / elements:7.2f} "
                f"{ns / device_ns:6.1%}"
            )
        if options.hlo is not None:
            options.hlo.mkdir(parents=True, exist_ok=True)
            (options.hlo / f"{mode}.hlo.txt").write_text(fn.as_text())
        results[mode] = {
            "first_run_s": first,
            "profiled_run_s": seconds,
            "device_ops_ns_per_element": device_ns / elements,
            **cost,
            "ops": [
                {"name": n, "shape": c, "count": k, "ns_per_element": ns / elements}
                for n, (ns, k, c) in ranked[:TOP]
            ],
        }
    record = {
        **_common.provenance(["benchmarks/op_profile.py", *(argv or sys.argv[1:])]),
        "dims": {"n_ant": options.antennas, "n_bl": n_bl, "elements": elements},
        "segments": segments,
        "cubic_terms": cubic_terms,
        "channel_terms": channel_terms,
        "channel_bend": bool(bend),
        "memory_budget_mb": options.budget_mb,
        "results": results,
    }
    print(f"wrote {_common.write_json(record, options.out, 'op_profile')}")


if __name__ == "__main__":
    main()
