"""Schema-checked configuration files.

A schema is a tree of :class:`Section` whose leaves are :class:`Option` (type, default, unit,
allowed range or choices, one-line doc). :func:`validate` checks a nested mapping, typically read
from YAML, against it and fills the defaults; every error names the dotted key that is wrong and
what is allowed, and an unknown key suggests the closest known one. Named presets are partial
configurations combined with :func:`merge`.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tabascal import TabascalError

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


class ConfigError(TabascalError, ValueError):
    """A configuration that does not fit its schema; the message names the key."""


@dataclass(frozen=True)
class Option:
    """One configuration value.

    type: bool, int, float, str or list (ints are accepted for floats). items: for lists, the
    element type or a :class:`Section` each element must fit. min, max: inclusive bounds on
    numbers. choices: the allowed values (of each element, for lists). nullable: whether
    ``None`` (YAML ``null``) is allowed. words: strings allowed besides values of ``type``
    (``auto`` for a count that the job settles itself). source: ``(dataclass, field name)`` for
    an option made by :func:`option_from`, whose value sets that field; None for one declared
    here.
    """

    type: type
    default: Any
    doc: str
    unit: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    nullable: bool = False
    items: Section | type | None = None
    words: tuple[str, ...] = ()
    source: tuple[type, str] | None = None


@dataclass(frozen=True)
class Section:
    """A named group of options and subsections."""

    doc: str
    options: Mapping[str, Option | Section] = field(default_factory=dict)


_OPTION_METADATA = "tabascal.config.option"


def option_field(default, doc: str, unit: str = "", *, min=None, max=None, choices=None):
    """A dataclass field that is also a configuration option, for :func:`option_from`.

    The field's default is the option's; doc, unit, the inclusive bounds min and max and the
    choices go in the field's metadata. Whether the option may be null follows from the field's
    type (``float | None``), so it is not given here.
    """
    option = {"doc": doc, "unit": unit, "min": min, "max": max, "choices": choices}
    return field(default=default, metadata={_OPTION_METADATA: option})


def option_from(cls: type, name: str) -> Option:
    """The :class:`Option` of the field ``name`` of dataclass ``cls``, declared with
    :func:`option_field`: its default, its type (bool, int, float or str, nullable when the
    annotation is ``X | None``) and its metadata. The option's ``source`` is ``(cls, name)``."""
    spec = {f.name: f for f in dataclasses.fields(cls)}.get(name)
    if spec is None or _OPTION_METADATA not in spec.metadata:
        raise TypeError(
            f"option_from: {cls.__name__}.{name} is not a field declared with option_field; "
            f"declare it as `{name}: <type> = option_field(default, doc, ...)`"
        )
    kind = typing.get_type_hints(cls)[name]
    args = typing.get_args(kind)
    nullable = type(None) in args
    if nullable and len(args) == 2:
        kind = next(arg for arg in args if arg is not type(None))
    if kind not in _TYPE_NAMES:
        raise TypeError(
            f"option_from: {cls.__name__}.{name} has type {kind!r}; an option field must be "
            "bool, int, float or str, or one of them | None"
        )
    metadata = spec.metadata[_OPTION_METADATA]
    return Option(kind, spec.default, **metadata, nullable=nullable, source=(cls, name))


def _key(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _allowed(option: Option) -> str:
    words = "".join(f" or {word!r}" for word in option.words)
    return _allowed_values(option) + words


def _allowed_values(option: Option) -> str:
    if option.choices is not None:
        return "one of " + ", ".join(repr(c) for c in option.choices)
    bounds = []
    if option.min is not None:
        bounds.append(f">= {option.min}")
    if option.max is not None:
        bounds.append(f"<= {option.max}")
    unit = f" {option.unit}" if option.unit else ""
    return " and ".join(bounds) + unit if bounds else _TYPE_NAMES.get(option.type, "a list")


def _check_type(value, kind, key: str, words: tuple[str, ...] = ()):
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in (bool, str) and isinstance(value, kind):
        return value
    if kind is list and isinstance(value, list | tuple):
        return list(value)
    also = "".join(f" or {word!r}" for word in words)
    raise ConfigError(
        f"config key '{key}': expected {_TYPE_NAMES.get(kind, 'a list')}{also}, "
        f"got {value!r} ({type(value).__name__})"
    )


def _check_choice(option: Option, value, key: str) -> None:
    if value not in option.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in option.choices], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"config key '{key}': {value!r} is not allowed; expected {_allowed(option)}{hint}"
        )


def _validate_option(option: Option, value, key: str):
    if value is None:
        if option.nullable:
            return None
        raise ConfigError(f"config key '{key}' may not be null; expected {_allowed(option)}")
    if isinstance(value, str) and value in option.words:
        return value
    value = _check_type(value, option.type, key, option.words)
    if option.choices is not None and option.type is not list:
        _check_choice(option, value, key)
    too_low = option.min is not None and value < option.min
    if option.type in (int, float) and (too_low or (option.max is not None and value > option.max)):
        raise ConfigError(
            f"config key '{key}': {value!r} is out of range; allowed {_allowed(option)}"
        )
    if option.type is list and option.items is not None:
        items = []
        for i, item in enumerate(value):
            where = f"{key}[{i}]"
            if isinstance(option.items, Section):
                items.append(validate(option.items, item, where))
            else:
                items.append(_check_type(item, option.items, where))
                if option.choices is not None:
                    _check_choice(option, item, where)
        value = items
    return value


def validate(schema: Section, data: Mapping | None, path: str = "") -> dict:
    """Check ``data`` against ``schema`` and fill defaults; returns a new nested dict.

    Raises :class:`ConfigError` naming the dotted key for an unknown key (with the closest known
    one), a value of the wrong type, or one outside its range or choices.
    """
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config key '{path or '<top level>'}' must be a section (a mapping of keys to "
            f"values), got {data!r}"
        )
    for name in data:
        if name not in schema.options:
            close = difflib.get_close_matches(str(name), list(schema.options), n=1, cutoff=0.5)
            hint = f"; did you mean '{_key(path, close[0])}'?" if close else ""
            known = ", ".join(schema.options)
            raise ConfigError(f"unknown config key '{_key(path, name)}'{hint} (known: {known})")
    out = {}
    for name, entry in schema.options.items():
        key = _key(path, name)
        if isinstance(entry, Section):
            out[name] = validate(entry, data.get(name), key)
        else:
            out[name] = _validate_option(entry, data.get(name, entry.default), key)
    return out


def merge(base: Mapping, override: Mapping | None) -> dict:
    """Deep merge: sections merge key by key, any other value in ``override`` replaces."""
    out = dict(base)
    for name, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(name), Mapping):
            out[name] = merge(out[name], value)
        else:
            out[name] = value
    return out


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping; a missing file, bad YAML or a non-mapping raise ConfigError."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of keys, got {data!r}")
    return dict(data)


_KIND_NAMES = {bool: "bool", int: "int", float: "float", str: "str", list: "list"}


def _describe_option(key: str, option: Option) -> str:
    kind = _KIND_NAMES[option.type]
    if option.type is list and option.items in _KIND_NAMES:
        kind = f"list of {_KIND_NAMES[option.items]}"
    parts = [kind + (f", {option.unit}" if option.unit else "")]
    if option.choices is not None:
        parts.append("one of " + ", ".join(repr(c) for c in option.choices))
    if option.min is not None:
        parts.append(f">= {option.min}")
    if option.max is not None:
        parts.append(f"<= {option.max}")
    parts.extend(f"or {word!r}" for word in option.words)
    if option.nullable:
        parts.append("or null")
    return f"{key} ({'; '.join(parts)}): {option.doc} [default {option.default!r}]"


def describe(schema: Section, path: str = "") -> list[str]:
    """One line per option, ``key (type, unit; allowed): doc [default]``; sections as headings
    and the keys of list items as ``key[].name``."""
    lines = []
    for name, entry in schema.options.items():
        key = _key(path, name)
        if isinstance(entry, Section):
            lines.append(f"{key}: {entry.doc}")
            lines.extend(describe(entry, key))
        elif entry.type is list and isinstance(entry.items, Section):
            lines.append(f"{key} (list of sections): {entry.doc} [default {entry.default!r}]")
            lines.extend(describe(entry.items, f"{key}[]"))
        else:
            lines.append(_describe_option(key, entry))
    return lines


def dump_yaml(config: Mapping) -> str:
    """A validated configuration as YAML text (keys in schema order)."""
    return yaml.safe_dump(dict(config), sort_keys=False)
