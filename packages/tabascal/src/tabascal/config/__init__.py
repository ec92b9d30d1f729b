"""Configuration: the schema machinery (``schema``: options, validation, YAML) and the run
job's schema and typed config (``run_config``)."""

from tabascal.config.schema import (
    ConfigError,
    Option,
    Section,
    describe,
    dump_yaml,
    load_yaml,
    merge,
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
    "validate",
]
