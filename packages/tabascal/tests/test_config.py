import dataclasses

import pytest

import ri_kernels
from tabascal.config import (
    ConfigError,
    Option,
    Section,
    describe,
    load_yaml,
    merge,
    option_field,
    option_from,
    validate,
)
from tabascal.fitting import optimiser, run_config
from tabascal.model import joint

ITEM = Section(
    "an item",
    {
        "name": Option(str, "x", "its name"),
        "size_m": Option(float, 1.0, "its size", unit="m", min=0.0),
    },
)
SCHEMA = Section(
    "test schema",
    {
        "seed": Option(int, 0, "random seed", min=0),
        "observation": Section(
            "the observation",
            {
                "n_time": Option(int, 10, "integrations", min=1, max=1000),
                "int_time": Option(float, 2.0, "integration time", unit="s", min=0.01),
                "mode": Option(str, "fast", "how", choices=("fast", "exact")),
                "ra_deg": Option(float, None, "right ascension", unit="deg", nullable=True),
                "flagging": Option(bool, False, "flag something"),
            },
        ),
        "items": Option(list, [], "the items", items=ITEM),
        "tags": Option(list, ["a"], "tags", items=str),
        "colours": Option(list, ["red"], "colours", items=str, choices=("red", "green")),
    },
)


def test_defaults_fill_every_key():
    got = validate(SCHEMA, {"observation": {"n_time": 5}})
    assert got == {
        "seed": 0,
        "observation": {
            "n_time": 5,
            "int_time": 2.0,
            "mode": "fast",
            "ra_deg": None,
            "flagging": False,
        },
        "items": [],
        "tags": ["a"],
        "colours": ["red"],
    }


def test_integer_is_accepted_for_a_number_and_converted():
    got = validate(SCHEMA, {"observation": {"int_time": 3}})
    assert got["observation"]["int_time"] == 3.0
    assert isinstance(got["observation"]["int_time"], float)


def test_unknown_key_names_it_and_suggests_the_closest():
    with pytest.raises(
        ConfigError,
        match=r"unknown config key 'observation.n_tme'; did you mean "
        r"'observation.n_time'\?",
    ):
        validate(SCHEMA, {"observation": {"n_tme": 5}})
    with pytest.raises(ConfigError, match=r"unknown config key 'sede'; did you mean 'seed'"):
        validate(SCHEMA, {"sede": 1})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"seed": "two"}, r"'seed': expected an integer, got 'two' \(str\)"),
        ({"seed": True}, r"'seed': expected an integer, got True"),
        ({"seed": -1}, r"'seed': -1 is out of range; allowed >= 0"),
        (
            {"observation": {"n_time": 2000}},
            r"'observation.n_time': 2000 is out of range; "
            r"allowed >= 1 and <= 1000",
        ),
        ({"observation": {"int_time": 0.0}}, r"allowed >= 0.01 s"),
        (
            {"observation": {"mode": "exakt"}},
            r"'observation.mode': 'exakt' is not allowed; "
            r"expected one of 'fast', 'exact'; did you mean 'exact'\?",
        ),
        ({"observation": {"n_time": None}}, r"'observation.n_time' may not be null"),
        ({"observation": 3}, r"'observation' must be a section"),
        ({"items": [{"name": "a"}, {"size_m": -2}]}, r"'items\[1\].size_m': -2.0 is out of range"),
        (
            {"items": [{"nme": "a"}]},
            r"unknown config key 'items\[0\].nme'; did you mean "
            r"'items\[0\].name'",
        ),
        ({"tags": ["a", 3]}, r"'tags\[1\]': expected a string"),
        ({"tags": "a"}, r"'tags': expected a list"),
        (
            {"colours": ["red", "gren"]},
            r"'colours\[1\]': 'gren' is not allowed; expected one of "
            r"'red', 'green'; did you mean 'green'\?",
        ),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(data, message):
    with pytest.raises(ConfigError, match=message):
        validate(SCHEMA, data)


def test_nullable_option_accepts_null():
    assert validate(SCHEMA, {"observation": {"ra_deg": None}})["observation"]["ra_deg"] is None
    assert validate(SCHEMA, {"observation": {"ra_deg": 10}})["observation"]["ra_deg"] == 10.0


def test_merge_is_deep_for_sections_and_replaces_lists():
    base = {"seed": 1, "observation": {"n_time": 5, "mode": "fast"}, "tags": ["a", "b"]}
    got = merge(base, {"observation": {"n_time": 7}, "tags": ["c"]})
    assert got == {"seed": 1, "observation": {"n_time": 7, "mode": "fast"}, "tags": ["c"]}
    assert base["observation"]["n_time"] == 5


def test_load_yaml_reports_missing_bad_and_non_mapping_files(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("seed: 3\nobservation:\n  n_time: 4\n")
    assert validate(SCHEMA, load_yaml(good))["observation"]["n_time"] == 4
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_yaml(listy)


def test_describe_lists_every_option_with_unit_and_default():
    lines = describe(SCHEMA)
    assert "observation.int_time (float, s; >= 0.01): integration time [default 2.0]" in lines
    assert "observation.mode (str; one of 'fast', 'exact'): how [default 'fast']" in lines
    assert "observation.ra_deg (float, deg; or null): right ascension [default None]" in lines
    assert "observation.flagging (bool): flag something [default False]" in lines
    assert "items (list of sections): the items [default []]" in lines
    assert "items[].size_m (float, m; >= 0.0): its size [default 1.0]" in lines
    assert "tags (list of str): tags [default ['a']]" in lines


@dataclasses.dataclass(frozen=True)
class _Settings:
    size_m: float | None = option_field(None, "its size", "m", min=0.0)
    mode: str = option_field("fast", "how", choices=("fast", "exact"))
    n_time: int = 10


def test_option_from_reads_the_default_type_and_metadata_of_the_field():
    assert option_from(_Settings, "size_m") == Option(
        float, None, "its size", "m", min=0.0, nullable=True, source=(_Settings, "size_m")
    )
    assert option_from(_Settings, "mode") == Option(
        str, "fast", "how", choices=("fast", "exact"), source=(_Settings, "mode")
    )
    with pytest.raises(TypeError, match=r"_Settings.n_time is not a field declared with option"):
        option_from(_Settings, "n_time")


# The run keys with no settings dataclass behind them, declared in run_config itself. Every
# other key must come from a dataclass field: an Option written out for one of those would
# restate its default.
RUN_JOB_KEYS = {
    "data.noise",
    "data.noise_per_channel",
    "fit.init",
    "fit.seed",
    "satellites.tle_file",
    "satellites.catalogue_numbers",
    "emitters.ground_file",
    "emitters.aircraft_file",
    "output.plots",
    "output.plot_baselines",
    "output.per_satellite",
    "output.per_satellite_mb",
    "tiles.time",
    "tiles.freq",
    "tiles.overlap_s",
    "tiles.overlap_channels",
    "tiles.workers",
    "tiles.scheduler",
    "sharding.axis",
    "sharding.reuse_plan",
    "sharding.row_blocks",
}


def _run_options(section: Section = run_config.SCHEMA, path: str = ""):
    for name, entry in section.options.items():
        key = f"{path}.{name}" if path else name
        if isinstance(entry, Section):
            yield from _run_options(entry, key)
        else:
            yield key, entry


def _field_default(cls, name):
    (spec,) = [f for f in dataclasses.fields(cls) if f.name == name]
    return spec.default


def test_every_schema_default_equals_the_dataclass_default():
    options = dict(_run_options())
    assert set(run_config.FIELDS) == set(options) - RUN_JOB_KEYS
    for key, (cls, name) in run_config.FIELDS.items():
        assert options[key].default == _field_default(cls, name), key
    defaults = run_config.load(None)
    assert run_config.fit_config(defaults) == optimiser.FitConfig()
    assert run_config.model_config(defaults) == joint.ModelConfig()


def _another_value(option: Option):
    """A valid value of ``option`` other than its default."""
    if option.choices is not None:
        return next(c for c in option.choices if c != option.default)
    value = 1 if option.default is None else option.default + 1
    if option.max is not None and value > option.max:
        value = option.min
    return option.type(value)


def _settings_of(config: dict, cls):
    if cls is optimiser.FitConfig:
        return run_config.fit_config(config)
    model = run_config.model_config(config)
    if cls is joint.ModelConfig:
        return model
    return next(part for part in vars(model).values() if isinstance(part, cls))


@pytest.mark.parametrize("key", sorted(run_config.FIELDS))
def test_each_run_key_sets_its_dataclass_field(key):
    cls, name = run_config.FIELDS[key]
    value = _another_value(dict(_run_options())[key])
    data = value
    for part in reversed(key.split(".")):
        data = {part: data}
    assert getattr(_settings_of(run_config.load(data), cls), name) == value


@pytest.mark.parametrize(
    ("key", "limit"),
    [
        ("segments", ri_kernels.MAX_SEGMENTS),
        ("terms", ri_kernels.MAX_TERMS),
        ("cubic_terms", ri_kernels.MAX_CUBIC_TERMS),
        ("time_stencil", ri_kernels.MAX_COEFFICIENTS),
    ],
)
def test_the_schema_enforces_the_limits_of_ri_kernels(key, limit):
    assert run_config.SCHEMA.options["rfi"].options[key].max == limit
    assert run_config.load({"rfi": {key: limit}})["rfi"][key] == limit
    with pytest.raises(ConfigError, match=rf"'rfi.{key}': {limit + 1} is out of range"):
        run_config.load({"rfi": {key: limit + 1}})
