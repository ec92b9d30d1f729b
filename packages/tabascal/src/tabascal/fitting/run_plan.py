"""The plan of one ``tabascal run``: its configuration resolved once, where the run is entered
(the command, or ``run`` for a library caller that passes a configuration), into frozen typed
settings that the job passes down.

A validated configuration (``run_config.load``) is read here and nowhere below: the model's
and the optimiser's settings, the start, the noise, the outputs, the element-set file and the
sharding that the flags, the config and $TABASCAL_SHARD_AXIS settle on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tabascal.fitting import run_config, tiles
from tabascal.fitting.optimiser import FitConfig
from tabascal.model.frame import ModelConfig


@dataclass(frozen=True)
class Sharding:
    """How the fit is split over devices: the shard axis (one of ``routes.SHARD_AXES``),
    whether the baselines are permuted by the antenna-reuse plan, and each device's baselines
    as ``row_blocks`` blocks taken in turn (both for the baseline axis alone)."""

    axis: str
    reuse_plan: bool
    row_blocks: int


@dataclass(frozen=True)
class Tiling:
    """The grid of tiles the observation is fitted as (``fitting.tiles.plan_tiles``): tiles
    along time and frequency (a count, or ``tiles.AUTO``), and the overlap of each tile past
    its core in seconds and in channels; where the tiles are fitted: over ``workers`` local
    Dask worker processes, or the workers of the Dask scheduler at address ``scheduler``
    (``fitting.tile_workers``), or, with neither, one after another in this process."""

    time: int | str = tiles.AUTO
    freq: int | str = tiles.AUTO
    overlap_s: float = 0.0
    overlap_channels: int = 0
    workers: int | None = None
    scheduler: str | None = None

    @property
    def over_workers(self) -> bool:
        """Whether Dask workers fit the tiles (``workers`` or ``scheduler`` given)."""
        return self.workers is not None or self.scheduler is not None

    def grid(self, meta) -> list[tiles.Tile]:
        """The tiles of the observation of ``meta`` (an ``ObservationMeta``)."""
        return tiles.plan_tiles(
            meta.n_time,
            meta.n_freq,
            meta.int_time,
            time=self.time,
            freq=self.freq,
            overlap_s=self.overlap_s,
            overlap_channels=self.overlap_channels,
        )


@dataclass(frozen=True)
class DataSettings:
    """The data as the fit takes them: each baseline's noise, the store's or estimated from
    the data (``noise``), and whether the estimate is per baseline and channel."""

    noise: str
    noise_per_channel: bool


@dataclass(frozen=True)
class OutputSettings:
    """What is written besides results.zarr and summary.json: the plots (and the baselines the
    visibility plot shows) and each satellite's fitted RFI (``per_satellite``, within
    ``per_satellite_mb`` MiB under auto)."""

    plots: bool
    plot_baselines: int
    per_satellite: str
    per_satellite_mb: float


@dataclass(frozen=True)
class SatelliteSettings:
    """The files whose emitters replace the observation's of their kind: a TLE file (or None)
    and the NORAD catalogue numbers taken from it (None takes every satellite in it); a CSV
    of ground transmitters and one of aircraft tracks (``observation.emitters``)."""

    tle_file: str | None
    catalogue_numbers: tuple[int, ...] | None
    ground_file: str | None = None
    aircraft_file: str | None = None

    def apply(self, obs):
        """``obs`` (an Observation or ObservationMeta) with its emitters replaced by the
        files' (itself where no file is named)."""
        import dataclasses

        from tabascal.observation import emitters
        from tabascal.observation.tle import load_tle_orbits

        if not (self.tle_file or self.ground_file or self.aircraft_file):
            return obs
        satellites, ground, aircraft = emitters.split(obs.orbits)
        if self.tle_file:
            satellites = load_tle_orbits(
                self.tle_file, self.catalogue_numbers, obs.epoch_utc, gast0_rad=obs.gast0_rad
            )
        if self.ground_file:
            ground = emitters.read_ground(self.ground_file, obs.gast0_rad)
        if self.aircraft_file:
            aircraft = emitters.read_tracks(
                self.aircraft_file, obs.epoch_utc, obs.gast0_rad, obs.times_s
            )
        return dataclasses.replace(obs, orbits=emitters.join(satellites, ground, aircraft))


@dataclass(frozen=True)
class RunPlan:
    """One run's settings, resolved from its configuration by ``plan_run``.

    model, fit: the model's and the optimiser's settings; init, seed: the start (``auto`` until
    the job settles it from the observation) and the prior draw's seed; data, output,
    satellites, sharding, tiles: the run job's own sections, typed. record: the validated
    configuration, read-only, kept for ``as_config`` alone.
    """

    model: ModelConfig
    fit: FitConfig
    init: str
    seed: int
    data: DataSettings
    output: OutputSettings
    satellites: SatelliteSettings
    sharding: Sharding
    record: Mapping = field(repr=False, compare=False)
    tiles: Tiling = field(default_factory=Tiling)

    def as_config(self) -> dict:
        """The configuration this plan runs, as config.yaml records it: the validated
        configuration it was resolved from, with the start and the row blocks it settled
        on, and its tiles."""
        config = _thawed(self.record)
        config["fit"]["init"] = self.init
        config["sharding"]["row_blocks"] = self.sharding.row_blocks
        config["tiles"] = dict(vars(self.tiles))
        return config


def _frozen(value):
    if isinstance(value, Mapping):
        return MappingProxyType({name: _frozen(item) for name, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(item) for item in value)
    return value


def _thawed(value):
    if isinstance(value, Mapping):
        return {name: _thawed(item) for name, item in value.items()}
    if isinstance(value, tuple):
        return [_thawed(item) for item in value]
    return value


def plan_run(
    config: Mapping,
    *,
    shard_axis: str | None = None,
    reuse_plan: bool | None = None,
    row_blocks: int | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> RunPlan:
    """The plan of the validated ``config`` (``run_config.load``'s). shard_axis, reuse_plan,
    row_blocks: the command line's values, which win over the config's ``sharding`` (and
    $TABASCAL_SHARD_AXIS); workers, scheduler: the command line's ``--workers`` and
    ``--scheduler``, which win over the config's ``tiles.workers`` and ``tiles.scheduler``.
    None takes them as ``tabascal run`` does without its flags."""
    axis = run_config.shard_axis(shard_axis, config)
    reuse = run_config.reuse_plan(reuse_plan, config, axis)
    blocks = run_config.row_blocks(row_blocks, config, axis, reuse)
    n_workers, address = run_config.tile_workers(workers, scheduler, config)
    numbers = config["satellites"]["catalogue_numbers"]
    return RunPlan(
        model=run_config.model_config(config),
        fit=run_config.fit_config(config),
        init=config["fit"]["init"],
        seed=config["fit"]["seed"],
        data=DataSettings(**config["data"]),
        output=OutputSettings(**config["output"]),
        satellites=SatelliteSettings(
            tle_file=config["satellites"]["tle_file"],
            catalogue_numbers=None if numbers is None else tuple(numbers),
            ground_file=config["emitters"]["ground_file"],
            aircraft_file=config["emitters"]["aircraft_file"],
        ),
        sharding=Sharding(axis, reuse, blocks),
        record=_frozen(config),
        tiles=Tiling(**{**config["tiles"], "workers": n_workers, "scheduler": address}),
    )
