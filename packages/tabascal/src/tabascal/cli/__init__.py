"""The ``tabascal`` command line: ``main`` (the entry point) and its parser, with one module
per family of commands."""

from tabascal.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
