"""Configuration: the schema machinery (``schema``: options, validation, YAML, and the
dataclass fields that declare options) and the run job's schema and typed config
(``run_config``)."""

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
