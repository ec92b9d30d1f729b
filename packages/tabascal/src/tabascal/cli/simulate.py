"""The store commands of the ``tabascal`` command line: ``simulate`` and ``inspect``."""

from __future__ import annotations

import argparse
import sys

from tabascal import TabascalError


def _simulate(args: argparse.Namespace) -> int:
    import time

    from tabascal.config import ConfigError, describe, dump_yaml, load_yaml
    from tabascal.simulate import (
        SCHEMA,
        build_scene,
        plan,
        simulate,
        simulation_config,
    )

    try:
        overrides = load_yaml(args.config) if args.config else None
        config = simulation_config(args.preset, overrides, args.seed)
        if args.print_config:
            print(dump_yaml(config), end="")
            return 0
        if args.list_keys:
            print("\n".join(describe(SCHEMA)))
            return 0
        if args.output is None:
            raise ConfigError("an output store is required: -o OUTPUT.zarr")
        if args.dry_run:
            scene = build_scene(config)
            sim_plan = plan(
                scene, config["simulation"]["memory_mb"], config["simulation"]["chunk_rows"]
            )
            for line in _plan_lines(sim_plan):
                print(line)
            return 0
        start = time.perf_counter()
        _, sim_plan = simulate(
            config, args.output, overwrite=args.overwrite, progress=not args.quiet
        )
    except FileExistsError:
        print(
            f"tabascal simulate: error: {args.output} already exists; add --overwrite to "
            "replace it",
            file=sys.stderr,
        )
        return 2
    except TabascalError as err:
        print(f"tabascal simulate: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} in {time.perf_counter() - start:.1f} s")
    for line in _plan_lines(sim_plan):
        print(line)
    if not str(args.output).lower().endswith(".ms"):
        print(f"see: tabascal inspect {args.output}")
    return 0


def _plan_lines(sim_plan) -> list[str]:
    return [
        f"  {sim_plan.n_ant} stations, {sim_plan.n_bl} baselines, {sim_plan.n_freq} channels, "
        f"{sim_plan.n_time} integrations, {sim_plan.n_sat} satellites, {sim_plan.n_src} sources",
        f"  fine samples per cell: RFI {sim_plan.rfi.n_time} x {sim_plan.rfi.n_freq}, "
        f"sky {sim_plan.sky.n_time} x {sim_plan.sky.n_freq} (time x frequency)",
        f"  store {sim_plan.store_bytes / 1e9:.3g} GB in chunks of {sim_plan.chunk_rows} "
        f"baselines; scratch {'on disk' if sim_plan.scratch_on_disk else 'in memory'}, "
        f"{sim_plan.cells_per_block} integrations per block; "
        f"Gram work {sim_plan.gram_flops:.3g} flop",
    ]


def add_simulate(subparsers) -> None:
    from tabascal.simulate import PRESETS

    parser = subparsers.add_parser(
        "simulate",
        help="simulate a satellite-contaminated observation into a store",
        description="Simulate a point-source sky, satellites on circular orbits, gains and noise "
        "into a zarr observation store. A preset names a configuration; a YAML file (-c) "
        "overrides any of its keys (see --list-keys).",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), help="named configuration")
    parser.add_argument("-c", "--config", help="YAML file of keys overriding the preset")
    parser.add_argument(
        "-o",
        "--output",
        help="store to create (a directory, e.g. obs.zarr); a name ending in .ms writes a "
        "Measurement Set",
    )
    parser.add_argument("--seed", type=int, help="seed of every random draw (overrides config)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing store")
    parser.add_argument(
        "--dry-run", action="store_true", help="print sizes and cost, write nothing"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the full configuration as YAML"
    )
    parser.add_argument("--list-keys", action="store_true", help="list every configuration key")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=_simulate)


def _inspect(args: argparse.Namespace) -> int:
    from tabascal.store import summarize, summary_lines, verification_lines, verify_store

    try:
        if args.verify:
            verification = verify_store(args.store)
            print("\n".join(verification_lines(args.store, verification)))
            if verification.damage:
                return 1
        summary = summarize(args.store, allow_missing=args.allow_missing)
    except TabascalError as err:
        print(f"tabascal inspect: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(summary)))
    return 0


def add_inspect(subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="summarise an observation store",
        description="Print a store's sizes, noise, sky and RFI levels, flagged fraction and "
        "satellites with their elevation range.",
    )
    parser.add_argument("store", help="path of the observation store")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="first read every chunk of every array and list each missing or damaged one "
        "(exit status 1 if any)",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="summarise a store that lacks vis or flags chunks, their cells read as flagged",
    )
    parser.set_defaults(func=_inspect)
