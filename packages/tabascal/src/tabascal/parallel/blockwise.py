"""The baseline-sharded model built block by block: every process reads only its devices' rows.

``row_placement.shard_model`` places a model that ``joint.build`` set up from the whole observation
in one process. ``build`` makes the same ``row_placement.ShardedModel`` without ever holding the
whole observation anywhere:

1. every process reads the rows of its own devices' ownership blocks (``RowSource.read``) and
   summarises them (``data_stats.DataStats``); the summaries are merged across processes, so
   every process holds the same scalars (RFI signal-to-noise, RFI level, noise median, number of
   unflagged points);
2. the metadata and those scalars fix the RFI groups, the shard plan (with the antenna-reuse
   permutation when asked, after which each process reads its devices' permuted rows) and every
   per-antenna constant and parameter;
3. each device's block of data, flags and noise is placed from the host rows of that device
   alone; the initial RFI prediction, the per-baseline sky mean from the data less it, and the
   sky prior's scale are computed on the devices, on ``P("bl")``.

The result equals ``row_placement.shard_model(joint.build(obs, ...), mesh, reuse=...)`` (the tests
compare them array by array), except that padded rows' sky means are 0 rather than a copy of
row 0's (padded rows are flagged; neither value reaches the loss).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tabascal_partition
from tabascal.config import ConfigError
from tabascal.model import joint, likelihood, orbit_corrections, sky
from tabascal.model.data_stats import DataStats
from tabascal.parallel import baseline_axis, processes, row_placement
from tabascal.store.format import default_chunk_rows

logger = logging.getLogger(__name__)


class RowSource(Protocol):
    """Where the observation's rows come from. ``meta``: every array but the visibilities
    (a1, a2 for all rows); ``read(rows)``: vis, flags and noise of the given rows;
    ``noise_per_channel``: whether that noise is per baseline and channel."""

    meta: object

    def read(self, rows: np.ndarray) -> HostRows: ...

    @property
    def noise_per_channel(self) -> bool: ...


class HostRows(NamedTuple):
    """vis (n, n_freq, n_time) complex, flags (n, n_freq, n_time) bool, noise (n,) or
    (n, n_freq) float64."""

    vis: np.ndarray
    flags: np.ndarray
    noise: np.ndarray


def _runs(rows: np.ndarray) -> list[slice]:
    """Sorted distinct rows as the fewest contiguous slices."""
    if rows.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [rows.size]])
    return [slice(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts, stops, strict=True)]


def _gather_runs(rows: np.ndarray, read_slice):
    """``read_slice`` (a slice -> a NamedTuple of row arrays) over the contiguous runs of
    ``rows`` (any order), joined in the order asked; None for no rows."""
    wanted = np.asarray(rows, np.int64)
    ordered = np.unique(wanted)
    parts = [read_slice(run) for run in _runs(ordered)]
    if not parts:
        return None
    kind = type(parts[0])
    where = np.searchsorted(ordered, wanted)
    return kind(*(np.concatenate(arrays)[where] for arrays in zip(*parts, strict=True)))


class _TruthCubes(NamedTuple):
    vis: np.ndarray
    sky_vis: np.ndarray
    rfi_vis: np.ndarray


@dataclass(frozen=True)
class StoreRows:
    """Rows of a zarr observation store, read by contiguous runs (``store.read_observation``).

    meta: the store's ``ObservationMeta``, or a replacement (e.g. with TLE orbits).
    allow_missing: read missing vis and flags chunks as flagged cells instead of refusing the
    store.
    """

    path: object
    meta: object
    allow_missing: bool = False

    def read(self, rows: np.ndarray) -> HostRows:
        from tabascal.store import read_observation

        def read_slice(run: slice) -> HostRows:
            obs = read_observation(self.path, run, truth=False, allow_missing=self.allow_missing)
            n = run.stop - run.start
            noise = likelihood.resolve_noise(obs.noise, n, self.meta.n_freq)
            return HostRows(obs.vis, obs.flags, noise)

        return _gather_runs(rows, read_slice)

    @property
    def noise_per_channel(self) -> bool:
        from tabascal.store import store_info

        return store_info(self.path, allow_missing=self.allow_missing).noise_per_channel

    @property
    def has_truth(self) -> bool:
        from tabascal.store import store_info

        return store_info(self.path, allow_missing=self.allow_missing).has_truth

    def read_truth(self, rows: np.ndarray):
        """Raw data and truth of ``rows`` (``results.TruthRows``)."""
        from tabascal.fitting.results import TruthRows
        from tabascal.store import read_observation

        gains = []

        def read_slice(run: slice) -> _TruthCubes:
            obs = read_observation(self.path, run, truth=True, allow_missing=self.allow_missing)
            gains.append(obs.truth.gains)
            return _TruthCubes(obs.vis, obs.truth.sky_vis, obs.truth.rfi_vis)

        rows = np.asarray(rows, np.int64)
        if rows.size == 0:
            read_slice(slice(0, 0))
            empty = np.zeros((0, self.meta.n_freq, self.meta.n_time), np.complex64)
            return TruthRows(empty, empty, empty, gains[0])
        return TruthRows(*_gather_runs(rows, read_slice), gains[0])


@dataclass(frozen=True)
class MemoryRows:
    """Rows of an observation already in memory (e.g. read from a Measurement Set)."""

    obs: object

    @property
    def meta(self):
        return self.obs

    def read(self, rows: np.ndarray) -> HostRows:
        rows = np.asarray(rows, np.int64)
        noise = likelihood.resolve_noise(self.obs.noise, *np.shape(self.obs.vis)[:2])
        return HostRows(
            np.asarray(self.obs.vis)[rows], np.asarray(self.obs.flags)[rows], noise[rows]
        )

    @property
    def noise_per_channel(self) -> bool:
        return np.ndim(self.obs.noise) == 2

    @property
    def has_truth(self) -> bool:
        return self.obs.truth is not None

    def read_truth(self, rows: np.ndarray):
        """Raw data and truth of ``rows`` (``results.TruthRows``)."""
        from tabascal.fitting.results import TruthRows

        rows = np.asarray(rows, np.int64)
        t = self.obs.truth
        return TruthRows(
            np.asarray(self.obs.vis)[rows],
            np.asarray(t.sky_vis)[rows],
            np.asarray(t.rfi_vis)[rows],
            np.asarray(t.gains),
        )


def _local_devices(mesh) -> list[int]:
    """Mesh positions of this process's devices."""
    here = jax.process_index()
    return [d for d, device in enumerate(mesh.devices.flat) if device.process_index == here]


def _checked(rows: HostRows, first_row: int) -> HostRows:
    """Validated rows (errors name the baseline by its row in the data)."""
    try:
        likelihood.validate_vis(rows.vis, rows.flags)
    except likelihood.DataError as err:
        raise likelihood.DataError(f"rows from {first_row}: {err}") from None
    return rows


def _merge_processes(stats: DataStats) -> DataStats:
    """The statistics of every process's rows, identical in every process."""
    if jax.process_count() == 1:
        return stats
    scalars = np.array([stats.peak_abs, stats.min_noise, stats.n_points], np.float64)
    gathered = [processes.gather_exact(x) for x in (scalars, stats.abs_counts, stats.noise_counts)]
    merged = None
    for scalars, abs_counts, noise_counts in zip(*gathered, strict=True):
        part = DataStats(
            float(scalars[0]), float(scalars[1]), int(scalars[2]), abs_counts, noise_counts
        )
        merged = part if merged is None else merged.merge(part)
    return merged


def data_stats(source: RowSource, rows_per_read: int | None = None) -> DataStats:
    """The statistics of every row of ``source``, read ``rows_per_read`` rows at a time (a
    store chunk's worth when None), so that no more than that is held at once."""
    meta = source.meta
    step = rows_per_read or default_chunk_rows(meta.n_freq, meta.n_time)
    stats = None
    for start in range(0, meta.n_bl, step):
        host = source.read(np.arange(start, min(start + step, meta.n_bl)))
        part = DataStats.from_rows(host.vis, host.flags, host.noise)
        stats = part if stats is None else stats.merge(part)
    return stats


def _device_rows(d: int, block_size: int, n_bl: int, order) -> np.ndarray:
    rows = np.arange(d * block_size, min((d + 1) * block_size, n_bl))
    return rows if order is None else np.asarray(order)[rows]


def _place_blocks(blocks: dict, field: str, fill, mesh, block_size: int, dtype) -> jax.Array:
    """Per-device host blocks (this process's devices) as one array on ``P("bl")``, each block
    padded to ``block_size`` rows with ``fill``."""
    some = next(iter(blocks.values()))
    trailing = getattr(some, field).shape[1:]

    def block(index):
        d = index[0].start // block_size if index[0].start is not None else 0
        rows = np.asarray(getattr(blocks[d], field)).astype(dtype, copy=False)
        pad = np.full((block_size - rows.shape[0], *trailing), fill, dtype)
        return np.concatenate([rows, pad])[(slice(None), *index[1:])]

    shape = (mesh.size * block_size, *trailing)
    return jax.make_array_from_callback(shape, NamedSharding(mesh, P(row_placement.AXIS)), block)


def build(
    source: RowSource,
    config: joint.ModelConfig,
    mesh,
    *,
    init: str = "data",
    seed: int = 0,
    reuse: bool = False,
    row_blocks: int = 1,
) -> row_placement.ShardedModel:
    """The baseline-sharded model of ``source`` on ``mesh`` (see the module docstring).

    init: "data" or "prior" ("truth" needs the whole truth in one process: use
    ``joint.build`` and ``row_placement.shard_model``); row_blocks: blocks of rows per device
    (``row_placement.ShardedSpec``).
    """
    row_placement.check_row_blocks(row_blocks, reuse)
    if init not in ("data", "prior"):
        raise ConfigError(
            f"init {init!r}: a model built block by block starts from 'data' or 'prior'"
        )
    meta = source.meta
    real = np.dtype(joint.PRECISIONS[config.precision])
    with processes.stage("reading this process's rows of the observation"):
        read_rows = tabascal_partition.ownership(meta.n_bl, mesh.size).block_size
        blocks = _read_blocks(source, mesh, None, real, read_rows)
        stats = _merge_processes(_block_stats(blocks))
    if stats.n_points == 0:
        raise likelihood.DataError("every visibility is flagged: there is nothing to fit")
    level = config.rfi_sigma or stats.rfi_level(meta.n_sat)
    frame = joint.model_frame(meta, config, stats.snr, level, init, seed)
    if frame.orbits is not None and init in joint.FROM_DATA_INITS:
        frame = _searched_orbits(frame, meta, blocks, mesh)
    # The sky's groups' weights for every baseline (per baseline two rows of modes, not a
    # cube), on the host: the placement spreads the groups over the devices.
    sky_host = sky.make_constants(
        config.sky,
        frame.grid,
        frame.fringe_rate_hz,
        delay_s=frame.sky_delay_s,
        scale=1.0,
        dtype=real,
    )
    placement = row_placement.plan_rows(
        frame.spec, frame.constants._replace(sky=sky_host), mesh, reuse=reuse, row_blocks=row_blocks
    )
    device_rows = placement.spec.device_rows
    if placement.order is not None or device_rows != read_rows:
        with processes.stage("reading this process's rows in the placement's order"):
            blocks = _read_blocks(source, mesh, placement.order, real, device_rows)
    data = _placed_data(blocks, stats, mesh, device_rows, real)
    constants = row_placement.place_constants(frame.constants, placement)
    rfi_params = row_placement.replicate(frame.rfi, mesh)
    orbits = row_placement.replicate(frame.orbits, mesh)
    sky_c, sky_params, sky_sigma = _placed_sky(
        config, sky_host, placement, (rfi_params, orbits), constants, data, stats, init, seed
    )
    params = joint.ModelParams(
        sky_params,
        rfi_params,
        row_placement.replicate(frame.gains, mesh),
        orbits,
    )
    info = row_placement.placement_info(
        dict(frame.info, sky_sigma=sky_sigma, read_by_block=True), placement
    )
    return row_placement.ShardedModel(
        spec=placement.spec,
        constants=constants._replace(sky=sky_c),
        data=data,
        params=params,
        plan=placement.plan,
        info=info,
    )


def _searched_orbits(frame: joint.Frame, meta, blocks: dict[int, HostRows], mesh):
    """``frame`` with the orbit corrections started at the time-offset search's offsets
    (``orbit_corrections.search_time_offsets``): each process sums the statistic over its
    blocks (read in the data's order), then the processes' sums are added."""
    c = frame.constants
    grids = orbit_corrections.search_grids(c.orbits, meta.a1, meta.a2, meta.freqs_hz)
    block_size = tabascal_partition.ownership(meta.n_bl, mesh.size).block_size
    power = np.zeros((len(grids), max(g.size for g in grids)))
    for d, host in blocks.items():
        rows = _device_rows(d, block_size, meta.n_bl, None)
        a1, a2 = np.asarray(meta.a1)[rows], np.asarray(meta.a2)[rows]
        power += orbit_corrections.stopped_power(
            host.vis, host.flags, a1, a2, meta.freqs_hz, c.phase, c.orbits, grids
        )
    power = processes.gather_exact(power).sum(axis=0)
    offsets = orbit_corrections.best_offsets(grids, power)
    return frame._replace(orbits=orbit_corrections.init(c.orbits, offsets))


def _read_blocks(source: RowSource, mesh, order, real, block_size: int) -> dict[int, HostRows]:
    """{mesh position: its ``block_size`` rows of ``source``} for this process's devices, in
    the data's order or the permuted ``order``; a device with no rows gets an empty block."""
    meta = source.meta
    cplx = np.result_type(real, np.complex64)
    out = {}
    for d in _local_devices(mesh):
        rows = _device_rows(d, block_size, meta.n_bl, order)
        logger.debug("device %d: reading %d rows", d, rows.size)
        host = source.read(rows) if rows.size else None
        if host is None:
            shape = (0, meta.n_freq, meta.n_time)
            noise = np.ones(shape[:2] if source.noise_per_channel else shape[:1])
            host = HostRows(np.zeros(shape, cplx), np.ones(shape, bool), noise)
        out[d] = _checked(host, int(rows[0]) if rows.size else meta.n_bl)
    return out


def _block_stats(blocks: dict[int, HostRows]) -> DataStats:
    """The statistics of this process's blocks together."""
    stats = None
    for host in blocks.values():
        part = DataStats.from_rows(host.vis, host.flags, host.noise)
        stats = part if stats is None else stats.merge(part)
    return stats


def _placed_data(blocks, stats: DataStats, mesh, block_size: int, real) -> joint.Data:
    """The data on ``P("bl")``, padded rows flagged with vis 0 and noise 1 (in every channel,
    with a noise per channel)."""
    cplx = np.result_type(real, np.complex64)

    def place(field, fill, dtype):
        return _place_blocks(blocks, field, fill, mesh, block_size, dtype)

    vis = place("vis", 0, cplx)
    flags = place("flags", True, bool)
    return joint.Data(
        vis=jax.jit(lambda v, f: jnp.where(f, 0, v))(vis, flags),
        flags=flags,
        noise=place("noise", 1, real),
        n_points=row_placement.replicate(jnp.asarray(stats.n_points, jnp.int32), mesh),
    )


def _placed_sky(config, sky_host, placement, rfi, constants, data, stats, init, seed):
    """The sky's constants and initial parameters on ``P("bl")``, and the prior's scale;
    rfi: the RFI's initial parameters and orbit corrections, placed.

    The sky mean of each row comes from its data less the initial RFI prediction, and the
    prior's scale from the means' rms: on the devices, each from its own rows; only the
    scale's sum crosses them. Each device's slots of the groups' weights are placed from
    ``sky_host``, the groups made on the host for every baseline.
    """
    real = np.dtype(joint.PRECISIONS[config.precision])
    cplx = np.result_type(real, np.complex64)
    spec, mesh = placement.spec, placement.spec.mesh
    n_bl, n_rows = spec.model.n_bl, spec.n_rows
    rows_spec = NamedSharding(mesh, P(row_placement.AXIS))
    sky_c = row_placement.place_sky(sky_host, placement)
    sky_c = sky_c._replace(mean=jax.jit(lambda: jnp.zeros(n_rows, cplx), out_shardings=rows_spec)())

    @jax.jit
    def sky_start(rfi_params, orbits, constants, vis, flags):
        if spec.row_blocks > 1:  # one block's RFI cube at a time
            args = (rfi_params, orbits, constants, vis, flags, spec)
            mean = baseline_axis.sky_mean_from_data(*args)
        else:
            rfi = baseline_axis.predict_rfi(rfi_params, constants, spec, orbits)
            mean = sky.mean_from_data(vis - rfi, flags)
        return mean, jnp.sqrt(jnp.sum(jnp.abs(mean) ** 2) / n_bl)

    sky_mean, rms = sky_start(*rfi, constants, data.vis, data.flags)
    sky_sigma = config.sky_sigma or max(float(rms), stats.noise_median)
    scale = jnp.asarray(sky_sigma, real)
    sky_c = sky_c._replace(
        scale=jax.jit(lambda s: jnp.full(n_rows, s), out_shardings=rows_spec)(scale),
        mean=sky_mean.astype(cplx) if init == "data" else sky_c.mean,
    )
    z = _sky_start_params(sky_host, real, init, seed, placement)
    return sky_c, sky.SkyParams(z), sky_sigma


def _sky_start_params(sky_host, real, init, seed, placement) -> tuple[jax.Array, ...]:
    """Initial whitened sky parameters in the groups' slots on ``P("bl")``: zeros, or the
    prior draw that ``joint.build`` makes (the same numbers, drawn per group on the host's
    default device and placed in the slots)."""
    spec = placement.spec
    if init == "prior":
        drawn = sky.init(sky_host, joint.prior_keys(seed).sky)
        return row_placement.place_sky_params(tuple(map(np.asarray, drawn.z)), placement)
    out = NamedSharding(spec.mesh, P(row_placement.AXIS))

    def zeros(n_slots, shape):  # made on the devices: no host copy of the whole
        return jax.jit(lambda: jnp.zeros((n_slots, *shape[1:]), real), out_shardings=out)()

    pairs = zip(spec.sky_slots, sky.param_shapes(sky_host), strict=True)
    return tuple(zeros(slot.member.size, shape) for slot, shape in pairs)
