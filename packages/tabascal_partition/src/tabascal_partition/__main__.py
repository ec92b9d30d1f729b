"""``python -m tabascal_partition``: print the shard plan (and reuse plan) of a synthetic array."""

import argparse
import sys

from tabascal_partition._demo import demo_baselines
from tabascal_partition._reuse import antenna_reuse_plan
from tabascal_partition._shard_plan import plan_shards
from tabascal_partition._spread import spread_order


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tabascal_partition",
        description=(
            "Plan how the baselines of a synthetic array split over devices and print the block "
            "size, each group's padding, the ghost antennas and the antenna widths. The array is "
            "every pair of n antennas scattered over a 4 km disc with a dense core; groups are "
            "baseline-length quantiles (group 0 the shortest)."
        ),
    )
    parser.add_argument("--n-ant", type=int, default=512, help="antennas (default 512)")
    parser.add_argument("--devices", type=int, default=4, help="devices (default 4)")
    parser.add_argument(
        "--groups", type=int, default=1, help="baseline-length groups K (default 1)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="pack rows with the antenna-reuse plan"
    )
    parser.add_argument(
        "--spread",
        action="store_true",
        help="shard the rows in the spread order of the groups (not with --reuse)",
    )
    parser.add_argument(
        "--autocorrelations", action="store_true", help="include each antenna's autocorrelation"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the antenna layout")
    parser.add_argument(
        "--width-table",
        action="store_true",
        help="print the reuse plan's width against its lower bound for 2..16 devices and exit",
    )
    args = parser.parse_args(argv)
    if args.n_ant < 1 or args.devices < 1 or args.groups < 1:
        parser.error("--n-ant, --devices and --groups must be at least 1")
    if args.spread and args.reuse:
        parser.error("--spread and --reuse are two orders of the rows: pass one of them")
    if args.width_table:
        print_width_table(args.n_ant)
        return 0

    a1, a2, groups = demo_baselines(args.n_ant, args.groups, args.seed, args.autocorrelations)
    print(
        f"synthetic array: {args.n_ant} antennas, {a1.size} baselines"
        f"{' with autocorrelations' if args.autocorrelations else ''}, {args.groups} "
        f"baseline-length group(s), {args.devices} device(s)"
    )
    reuse = None
    if args.reuse:
        reuse = antenna_reuse_plan(a1, a2, args.n_ant, args.devices, groups)
        print(reuse.summary())
    order = spread_order(groups, args.devices) if args.spread else None
    plan = plan_shards(a1, a2, args.n_ant, args.devices, groups, reuse=reuse, order=order)
    print(plan.summary())
    return 0


def print_width_table(n_ant: int) -> None:
    """Widths of the reuse plan on the complete graph of n_ant antennas, 2..16 devices."""
    a1, a2, _ = demo_baselines(n_ant)
    print(f"complete graph on {n_ant} antennas ({a1.size} baselines)")
    print("devices  width  width/n  lower bound  bound/n  contiguous  design")
    for n_dev in range(2, 17):
        plan = antenna_reuse_plan(a1, a2, n_ant, n_dev)
        print(
            f"{n_dev:7d} {plan.width:6d} {plan.width / n_ant:8.4f} {plan.lower_bound:12d} "
            f"{plan.lower_bound / n_ant:8.4f} {plan.contiguous_width:11d}  {plan.design}"
        )


if __name__ == "__main__":
    sys.exit(main())
