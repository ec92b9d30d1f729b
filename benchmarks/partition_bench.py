"""Time the tabascal_partition plans on complete arrays of 512 and 2048 antennas.

    python benchmarks/partition_bench.py [--groups K] [--repeats R] [--output PATH]

Cases: 512 antennas (130816 baselines) on 4 and 8 devices, 2048 antennas (2096128 baselines)
on 16 devices, each as a plain shard plan (contiguous ownership) and as an antenna-reuse plan
followed by the shard plan on its packed order. Groups are baseline-length quantiles of the
synthetic layout of ``python -m tabascal_partition``. Each figure is the best of R runs, input
validation included. Goals (issue 4): under 1 s for 512 antennas and under 10 s for 2048 on
the 2-core development machine. Prints a table and writes JSON to benchmarks/results/.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

from tabascal_partition import antenna_reuse_plan, plan_shards
from tabascal_partition._demo import demo_baselines

CASES = [(512, 4, 1.0), (512, 8, 1.0), (2048, 16, 10.0)]  # (antennas, devices, goal in s)


def _best_time(function, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def _git_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "packages/tabascal_partition", __file__],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+uncommitted" if dirty else "")


def run_case(n_ant: int, n_dev: int, n_groups: int, repeats: int) -> list[dict]:
    a1, a2, groups = demo_baselines(n_ant, n_groups)
    rows = []
    seconds, plan = _best_time(lambda: plan_shards(a1, a2, n_ant, n_dev, groups), repeats)
    rows.append(
        {
            "mode": "shard plan",
            "seconds": seconds,
            "width": int(plan.antenna_widths().max()),
            "n_ghost": plan.n_ghost,
            "rows_per_device": sum(group.padded for group in plan.groups),
        }
    )

    def reuse_then_shard():
        reuse = antenna_reuse_plan(a1, a2, n_ant, n_dev, groups)
        return reuse, plan_shards(a1, a2, n_ant, n_dev, groups, reuse=reuse)

    seconds, (reuse, plan) = _best_time(reuse_then_shard, repeats)
    rows.append(
        {
            "mode": "reuse + shard plan",
            "seconds": seconds,
            "width": reuse.width,
            "lower_bound": reuse.lower_bound,
            "design": reuse.design,
            "n_ghost": plan.n_ghost,
            "rows_per_device": sum(group.padded for group in plan.groups),
        }
    )
    for row in rows:
        row.update(
            n_ant=n_ant, n_bl=int(a1.size), n_dev=n_dev, n_groups=n_groups, block=plan.block_size
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=3, help="baseline-length groups (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure, best kept")
    parser.add_argument("--output", type=Path, default=None, help="JSON path")
    args = parser.parse_args()

    results = []
    header = f"{'antennas':>8} {'baselines':>9} {'dev':>3}  {'mode':<18} {'seconds':>8} {'goal':>5}"
    print(header + f" {'width':>5} {'ghosts':>6} {'rows/dev':>8} {'block':>7}")
    for n_ant, n_dev, goal in CASES:
        for row in run_case(n_ant, n_dev, args.groups, args.repeats):
            row["goal_seconds"] = goal
            results.append(row)
            print(
                f"{n_ant:8d} {row['n_bl']:9d} {n_dev:3d}  {row['mode']:<18} {row['seconds']:8.3f}"
                f" {goal:5.0f} {row['width']:5d} {row['n_ghost']:6d} {row['rows_per_device']:8d}"
                f" {row['block']:7d}"
            )

    now = datetime.datetime.now(datetime.UTC)
    record = {
        "benchmark": "partition_bench",
        "date": now.isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "machine": {
            "node": platform.node(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "load_average_1min": round(os.getloadavg()[0], 2),
            "system": platform.platform(),
        },
        "python": platform.python_version(),
        "numpy": np.__version__,
        "groups": args.groups,
        "repeats": args.repeats,
        "results": results,
    }
    output = args.output or (
        Path(__file__).resolve().parent / "results" / f"partition_{now:%Y%m%d_%H%M%S}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
