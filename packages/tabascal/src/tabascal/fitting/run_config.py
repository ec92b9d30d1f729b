"""The configuration of ``tabascal run``: its schema, defaults and conversion to model settings.

The schema is assembled here, above ``config`` (which holds the schema machinery alone and
imports nothing of the model, the fit or the routes), because it reads each key's default from
the component that owns it. Every key, its unit and its default is listed in
``docs/config.md``; ``tabascal run --list-keys`` prints the same from this schema. A config
file need only name what it changes. A key that sets a field of a settings dataclass
(``optimiser.FitConfig``, ``frame.ModelConfig`` and its components) takes its type, default,
doc and limits from that field (``option_from``); the keys that belong to the run job alone
are declared here.
"""

from __future__ import annotations

import os
from typing import Any

from tabascal.config import ConfigError, Option, Section, option_from, validate
from tabascal.fitting import data_noise, optimiser, satellites, tiles
from tabascal.model import frame, gains, orbit_corrections, rfi_signal, rfi_vis, sky
from tabascal.parallel.routes import SHARD_AXES

SHARD_AXIS_ENV = "TABASCAL_SHARD_AXIS"


def _options(cls: type, *names: str) -> dict[str, Option]:
    """The options of the fields ``names`` of dataclass ``cls``, keyed by field name."""
    return {name: option_from(cls, name) for name in names}


_SKY = Section(
    "Sky: a Fourier Gaussian process per baseline over (channel, time).",
    {
        **_options(sky.SkyConfig, "bandwidth_hz", "knee_factor", "rolloff", "cutoff", "groups"),
        "sigma": option_from(frame.ModelConfig, "sky_sigma"),
        "fov_radius_deg": option_from(frame.ModelConfig, "fov_radius_deg"),
    },
)

_RFI = Section(
    "RFI: per (satellite, antenna) signal and the visibility operators.",
    {
        **_options(rfi_signal.RfiSignalConfig, "corr_time_s", "time_scale", "signal"),
        **_options(rfi_signal.RfiSignalConfig, "bandwidth_hz"),
        "sigma": option_from(frame.ModelConfig, "rfi_sigma"),
        **_options(
            rfi_vis.RfiVisConfig,
            "quadrature_limit",
            "tolerance",
            "max_samples",
            "sampling",
            "max_groups",
            "time_stencil",
            "freq_stencil",
            "segments",
            "terms",
            "cubic_terms",
            "channel_terms",
            "analytic_options",
            "memory_budget_mb",
            "phase_cache",
            "phase_cache_mb",
            "phase_cache_fraction",
        ),
    },
)

_GAINS = Section(
    "Antenna gains.",
    _options(gains.GainsConfig, "kind", "corr_time_s", "amp_sigma", "phase_sigma", "ref_ant"),
)

SCHEMA = Section(
    "tabascal run configuration",
    {
        "precision": option_from(frame.ModelConfig, "precision"),
        "data": Section(
            "The observation's data as the fit takes them.",
            {
                "noise": Option(
                    str,
                    "store",
                    "each baseline's noise: the store's, or estimated from the data when the "
                    "run starts (import-ms --noise estimate's estimator)",
                    choices=data_noise.NOISE_SOURCES,
                ),
                "noise_per_channel": Option(
                    bool,
                    False,
                    "with noise: estimate, estimate the noise per baseline and channel (within "
                    "each channel, from adjacent integrations) rather than per baseline",
                ),
            },
        ),
        "sky": _SKY,
        "rfi": _RFI,
        "gains": _GAINS,
        "fit": Section(
            "The optimisation.",
            {
                **_options(
                    optimiser.FitConfig,
                    "optimizer",
                    "learning_rate",
                    "steps",
                    "second_phase_steps",
                    "hold_gains",
                    "polish",
                    "polish_steps",
                    "polish_memory",
                    "polish_cg_steps",
                    "polish_curvature",
                    "polish_tolerance",
                    "forcing",
                    "tolerance",
                    "gradient_tolerance",
                    "checkpoint_every",
                    "stop_tolerance",
                    "stop_window",
                ),
                "init": Option(
                    str,
                    "auto",
                    "initial parameters: data-based estimates, a draw "
                    "from the prior, the store's truth, data-based estimates with "
                    "each satellite's RFI from the fringe-stopped data (fringe), or auto: "
                    "fringe where one process reads every row (not the baseline axis, which "
                    "reads them block by block) and the estimate fits in memory, else data",
                    choices=frame.INITS,
                ),
                "seed": Option(int, 0, "seed of the prior draw (init: prior)", min=0),
            },
        ),
        "satellites": Section(
            "Satellite orbits, when they are not (or not only) in the observation.",
            {
                "tle_file": Option(
                    str,
                    None,
                    "TLE file whose orbits replace the observation's satellites",
                    nullable=True,
                ),
                "min_elevation_deg": option_from(frame.ModelConfig, "min_elevation_deg"),
                "catalogue_numbers": Option(
                    list,
                    None,
                    "NORAD catalogue numbers to take from tle_file; null takes "
                    "every satellite in it",
                    items=int,
                    nullable=True,
                ),
            },
        ),
        "emitters": Section(
            "Ground transmitters and aircraft, when they are not (or not only) in the "
            "observation: each file's replace the observation's of its kind.",
            {
                "ground_file": Option(
                    str,
                    None,
                    "CSV of ground transmitters (name, lat_deg, lon_deg, height_m)",
                    nullable=True,
                ),
                "aircraft_file": Option(
                    str,
                    None,
                    "CSV of aircraft tracks as ADS-B decoders write them (time, lat, lon, "
                    "height; see docs/real_data.md)",
                    nullable=True,
                ),
            },
        ),
        "orbits": Section(
            "Orbit corrections fitted per satellite, for element sets (TLEs) that are off.",
            _options(orbit_corrections.OrbitFitConfig, "fit", "time_sigma_s", "position_sigma_m"),
        ),
        "output": Section(
            "What is written besides results.zarr and summary.json.",
            {
                "plots": Option(bool, True, "write PNG plots"),
                "plot_baselines": Option(int, 3, "baselines shown in the visibility plot", min=1),
                "per_satellite": Option(
                    str,
                    "auto",
                    "write each satellite's fitted RFI visibilities (rfi_vis_by_satellite, "
                    "n_sat cubes of the data's size) into results.zarr: within "
                    "per_satellite_mb (auto), always or never",
                    choices=satellites.PER_SATELLITE,
                ),
                "per_satellite_mb": Option(
                    float,
                    1024.0,
                    "most MiB of rfi_vis_by_satellite under per_satellite auto",
                    "MiB",
                    min=0.0,
                ),
            },
        ),
        "tiles": Section(
            "Fitting the observation as a grid of (time x frequency) tiles, one after "
            "another, each its own fit; the results are stitched, each cell from the tile "
            "whose core holds it.",
            {
                "time": Option(
                    int,
                    tiles.AUTO,
                    "tiles along time, their cores as even as possible; auto is one tile (to "
                    "come from the memory plan)",
                    min=1,
                    words=(tiles.AUTO,),
                ),
                "freq": Option(
                    int,
                    tiles.AUTO,
                    "tiles along frequency, their cores as even as possible; auto is one tile "
                    "(to come from the memory plan)",
                    min=1,
                    words=(tiles.AUTO,),
                ),
                "overlap_s": Option(
                    float,
                    0.0,
                    "time each tile fits past its core on either side (rounded up to whole "
                    "integrations; clipped to the observation)",
                    "s",
                    min=0.0,
                ),
                "overlap_channels": Option(
                    int,
                    0,
                    "channels each tile fits past its core on either side (clipped to the "
                    "observation)",
                    min=0,
                ),
                "workers": Option(
                    int,
                    None,
                    "fit the tiles over this many local Dask worker processes (one thread "
                    "each), a tile a task; null fits them one after another in this process; "
                    "needs the distributed extra; not with scheduler",
                    min=1,
                    nullable=True,
                ),
                "scheduler": Option(
                    str,
                    None,
                    "address of a running Dask scheduler (tcp://HOST:PORT) whose workers fit "
                    "the tiles, a tile a task; needs the distributed extra; not with workers",
                    nullable=True,
                ),
            },
        ),
        "sharding": Section(
            "Splitting the work across devices.",
            {
                "axis": Option(
                    str,
                    None,
                    f"none, source or baseline; null takes ${SHARD_AXIS_ENV} (default none)",
                    choices=SHARD_AXES,
                    nullable=True,
                ),
                "reuse_plan": Option(
                    bool,
                    False,
                    "baseline axis only: permute the baselines by the "
                    "antenna-reuse plan, so that each device touches few antennas",
                ),
                "row_blocks": Option(
                    int,
                    1,
                    "baseline axis only: each device's baselines as this many blocks taken in "
                    "turn, so that the loss and its derivatives hold one block's "
                    "visibility-shaped temporaries (for one more forward pass per derivative); "
                    "not with reuse_plan",
                    min=1,
                ),
            },
        ),
    },
)


def _sources(section: Section, path: str = "") -> dict[str, tuple[type, str]]:
    out = {}
    for name, entry in section.options.items():
        key = f"{path}.{name}" if path else name
        if isinstance(entry, Section):
            out.update(_sources(entry, key))
        elif entry.source is not None:
            out[key] = entry.source
    return out


# The dataclass field behind each key that has one, (dataclass, field name): the key's option
# comes from the field, and model_config / fit_config copy the key's value into it.
FIELDS: dict[str, tuple[type, str]] = _sources(SCHEMA)


def load(data: dict | None) -> dict:
    """Validated configuration with every default filled in."""
    return validate(SCHEMA, data)


def _values(config: dict, cls: type) -> dict[str, Any]:
    """The values of a validated configuration for the fields of ``cls``, by field name."""
    values = {}
    for key, (owner, name) in FIELDS.items():
        if owner is cls:
            value = config
            for part in key.split("."):
                value = value[part]
            values[name] = value
    return values


def model_config(config: dict) -> frame.ModelConfig:
    """The model settings of a validated configuration."""
    return frame.ModelConfig(
        sky=sky.SkyConfig(**_values(config, sky.SkyConfig)),
        rfi_signal=rfi_signal.RfiSignalConfig(**_values(config, rfi_signal.RfiSignalConfig)),
        rfi_vis=rfi_vis.RfiVisConfig(**_values(config, rfi_vis.RfiVisConfig)),
        gains=gains.GainsConfig(**_values(config, gains.GainsConfig)),
        orbits=orbit_corrections.OrbitFitConfig(
            **_values(config, orbit_corrections.OrbitFitConfig)
        ),
        **_values(config, frame.ModelConfig),
    )


def fit_config(config: dict) -> optimiser.FitConfig:
    """The optimiser settings of a validated configuration."""
    return optimiser.FitConfig(**_values(config, optimiser.FitConfig))


def shard_axis(cli_value: str | None, config: dict) -> str:
    """The shard axis: the command line wins, then the config, then $TABASCAL_SHARD_AXIS."""
    for value, source in (
        (cli_value, "--shard-axis"),
        (config["sharding"]["axis"], "config key 'sharding.axis'"),
        (os.environ.get(SHARD_AXIS_ENV), f"${SHARD_AXIS_ENV}"),
    ):
        if value is None or value == "":
            continue
        if value not in SHARD_AXES:
            raise ConfigError(f"{source} = {value!r}; choose one of {', '.join(SHARD_AXES)}")
        return value
    return "none"


def reuse_plan(cli_value: bool | None, config: dict, axis: str) -> bool:
    """Whether to use the antenna-reuse plan: the command line wins, then the config. Only the
    baseline axis has one; asking for it on another axis is an error."""
    source, value = "--reuse-plan", cli_value
    if value is None:
        source, value = "config key 'sharding.reuse_plan'", config["sharding"]["reuse_plan"]
    if value and axis != "baseline":
        raise ConfigError(
            f"{source} asks for the antenna-reuse plan, but the shard axis is {axis!r}; the "
            "plan permutes baselines, so it needs the baseline axis (--shard-axis baseline)"
        )
    return bool(value)


def tile_workers(
    cli_workers: int | None, cli_scheduler: str | None, config: dict
) -> tuple[int | None, str | None]:
    """Where the tiles are fitted, (local workers, scheduler address): the command line's
    ``--workers`` or ``--scheduler`` win over the config's pair, then ``tiles.workers`` and
    ``tiles.scheduler``; (None, None) fits them in this process. Both at once is an error."""
    if cli_workers is not None or cli_scheduler is not None:
        workers, scheduler = cli_workers, cli_scheduler
        sources = ("--workers", "--scheduler")
    else:
        workers, scheduler = config["tiles"]["workers"], config["tiles"]["scheduler"]
        sources = ("config key 'tiles.workers'", "config key 'tiles.scheduler'")
    if workers is not None and workers < 1:
        raise ConfigError(f"{sources[0]} = {workers}; give a whole number of workers, 1 or more")
    if workers is not None and scheduler is not None:
        raise ConfigError(
            f"{sources[0]} = {workers} and {sources[1]} = {scheduler!r} both say where the "
            f"tiles are fitted: give {sources[0]} to start local workers, or {sources[1]} to "
            "use a running cluster's, not both"
        )
    return workers, scheduler


def row_blocks(cli_value: int | None, config: dict, axis: str, reuse: bool) -> int:
    """Blocks of baselines per device: the command line wins, then ``sharding.row_blocks``.
    More than one needs the baseline axis without the reuse plan."""
    source, value = "--row-blocks", cli_value
    if value is None:
        source, value = "config key 'sharding.row_blocks'", config["sharding"]["row_blocks"]
    if value < 1:
        raise ConfigError(f"{source} = {value}; give a whole number of blocks, 1 or more")
    if value > 1 and axis != "baseline":
        raise ConfigError(
            f"{source} = {value} splits each device's baselines into blocks, which needs the "
            f"baseline axis, not {axis!r}: pass --shard-axis baseline or set sharding.axis: "
            "baseline (on one device the model is placed on that device alone)"
        )
    if value > 1 and reuse:
        raise ConfigError(
            f"{source} = {value} with the antenna-reuse plan: the plan's antenna tables are per "
            "device, not per block; drop --reuse-plan or set row_blocks to 1"
        )
    return int(value)
