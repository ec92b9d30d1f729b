"""The ``tabascal`` command line.

Each subcommand is an ``add_<name>(subparsers)`` function that registers its parser and sets
``func``, the callable that receives the parsed arguments and returns an exit status.
"""

from __future__ import annotations

import argparse
import sys

from tabascal.cli.fit import add_demo, add_plan, add_run, use_devices
from tabascal.cli.measurement_set import add_export_ms, add_import_ms
from tabascal.cli.simulate import add_inspect, add_simulate

#: The commands that compile programs with jax, and so take ``--no-compile-cache``.
COMPILING = ("demo", "simulate", "run", "plan")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tabascal",
        description="Trajectory-based RFI subtraction and calibration for radio interferometers.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_demo(subparsers)
    add_simulate(subparsers)
    add_inspect(subparsers)
    add_run(subparsers)
    add_plan(subparsers)
    add_import_ms(subparsers)
    add_export_ms(subparsers)
    for name in COMPILING:
        subparsers.choices[name].add_argument(
            "--no-compile-cache",
            dest="compile_cache",
            action="store_false",
            help="compile every program afresh: no persistent compilation cache (by default "
            "$XDG_CACHE_HOME/tabascal/jax, or $JAX_COMPILATION_CACHE_DIR when set)",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "devices", None):
        error = use_devices(args.devices)
        if error:
            print(f"tabascal {args.command}: error: {error}", file=sys.stderr)
            return 2
    if hasattr(args, "compile_cache"):
        # After --devices: the cache's settings import jax, whose device count is set first.
        from tabascal.fitting import compile_cache

        compile_cache.use_cache(args.compile_cache)
    return args.func(args)
