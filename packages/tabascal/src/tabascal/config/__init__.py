"""Configuration: the schema machinery (``schema``: options, validation, YAML, and the
dataclass fields that declare options). The schemas themselves live with the jobs they
configure (``fitting.run_config``, ``simulate``'s presets), so that this package imports
nothing above it."""

from tabascal.config.schema import (
    ConfigError,
    Option,
    Section,
    describe,
    dump_yaml,
    load_yaml,
    merge,
    option_field,
    option_from,
    validate,
)

__all__ = [
    "ConfigError",
    "Option",
    "Section",
    "describe",
    "dump_yaml",
    "load_yaml",
    "merge",
    "option_field",
    "option_from",
    "validate",
]
