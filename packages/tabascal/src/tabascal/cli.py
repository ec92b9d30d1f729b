"""The ``tabascal`` command line.

Each subcommand is a ``_add_<name>(subparsers)`` function that registers its parser and sets
``func``, the callable that receives the parsed arguments and returns an exit status.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

_PACKAGES = ("tabascal", "ri_kernels", "tabascal_partition", "jax", "jaxlib", "optax", "numpy")


def _installed_versions() -> dict[str, str]:
    found = {}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def _demo(args: argparse.Namespace) -> int:
    import jax

    print("tabascal demo")
    for name, ver in _installed_versions().items():
        print(f"  {name:<20} {ver}")
    devices = jax.devices()
    print(f"  {len(devices)} JAX device(s): " + ", ".join(str(d) for d in devices))
    return 0


def _add_demo(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the embedded demonstration",
        description="Run the embedded demonstration.",
    )
    parser.set_defaults(func=_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tabascal",
        description="Trajectory-based RFI subtraction and calibration for radio interferometers.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_demo(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return args.func(args)
