"""Sky visibilities: a per-baseline complex Fourier Gaussian process over (channel, time).

For baseline b, with whitened complex modes z[b] ~ CN(0, 1) (see ``_fourier``),

    V[b, f, t] = mean[b] + scale[b] sum_{k, j} w_f[b, k] w_t[b, j] z[b, k, j]
                           exp(2 pi i (k f / N_f + j t / N_t))

with a separable power spectrum w_f[b, k]^2 w_t[b, j]^2, each factor normalised to sum 1 over its
kept modes, so the prior variance E|V - mean|^2 is exactly scale[b]^2 in every cell.

* **Frequency**: flat up to a per-baseline delay knee and Gaussian beyond, in delay
  eta = k / (N_f chan_spacing) (``_fourier.edge_spectrum``): knee[b] = max(knee_factor
  delay_s[b], 1 / (4 n_freq chan_spacing)), roll-off std rolloff * knee[b]. A source within the
  field reaches the baseline's two antennas at most delay_s[b] apart (``geometry.max_sky_delay_s``),
  so its visibility winds at most that many cycles per Hz. With ``bandwidth_hz`` set instead,
  every baseline shares the Gaussian kernel exp(-dnu^2 / (2 bandwidth_hz^2)), spectrum
  exp(-2 pi^2 bandwidth_hz^2 eta^2).
* **Time**: the same edge in fringe rate: knee[b] = max(knee_factor fringe_rate_hz[b],
  1 / (4 n_time int_time)), roll-off std rolloff * knee[b]. The sky's own fringe rate is
  bounded by the baseline's maximum sky fringe rate, so power is kept up to it and falls off
  quickly beyond.

The floors, a quarter of a cycle over the data's extent on each axis, keep the knee away from
zero. A baseline whose sky turns through less than about a quarter of a cycle across the band
(or the observation) keeps one mode on that axis, the constant: the first non-zero mode of a
lattice padded to twice the axis lies at twice the floor, where the roll-off has fallen below
the cutoff. The station beam attenuates the sources towards the field's edge, where the bounds
are reached, so such a baseline's sky is flat to well within the noise. (The former fixed
200 kHz kernel and a floor of one cycle in time kept 5 x 7 modes a baseline on the demo: the
RFI-free demo's fit took 7% of the noise's variance into the sky, reduced chi-squared 0.933;
with the bounds 0.993. docs/science.md, "The sky's degrees of freedom".)

Padding (``_fourier.padded_size``): each axis from the decorrelation lag of its smallest knee
(envelope exp(-2 pi^2 (rolloff knee)^2 tau^2)), capped at doubling the axis. The lattice is
shared, so its padding follows the shortest baseline while the box follows the longest:
uncapped, a zero-fringe-rate baseline would stretch the lattice to several times the axis and
the long baselines' box with it. With the cap, a process correlated over more than the
observation keeps some correlation between its two ends (the data pin such slow terms anyway).

Mode boxes: a baseline keeps the modes j = -J_b..J_b on each axis where its own spectrum is at
least ``cutoff`` of its peak (its own half-widths). One box for every baseline, sized by the
largest, held most baselines' parameters at zero weight: at bench-512 with 64 channels the box was
(61, 299) modes, 1.9 visibility cubes for each copy of the parameters, while each baseline's own
modes were 0.057 of it. So the baselines are split into at most ``groups`` groups, each with its
own box (``SkyGrid.boxes``, fewest modes first): the boxes come from the fewest total modes over
splits of the baselines, ordered by their own box's size, into contiguous runs (dynamic
programming, ``group_boxes``), and each baseline belongs to the first box that holds its own
half-widths (``group_labels``), a rule of the baseline alone, so any block of rows labels its
baselines as the whole does. Within its group's box a baseline's modes below its own cutoff still
get zero weight. Grouping changes no visibility: every mode it drops had zero weight (only the
prior acted on it, apart from the rest of the fit). A further group is taken only where it saves
``GROUP_SAVING`` of the modes.

Layout (``SkyConstants``, ``SkyParams``): one ``SkyGroup`` per box with the rows of its members,
their weights and the box's DFT matrices, and one parameter array per group, (n_g, 2, n_kf_g,
n_kt_g). ``forward`` adds each group's visibilities into its rows of the means. The rows are
those of the constants' own row axis (scale and mean): the data's rows for the whole model, a
device's block on the baseline axis (``tabascal.parallel.baseline_axis``). A group's row may be
n_rows (a padding slot): its scale is taken as zero, so its visibilities are exact zeros, added
into the last row. (Scattered into a buffer with a spare row instead, the loss's value and
gradient took 1.1 visibility cubes more temporaries and a Hessian-vector product 0.9, at 128
stations and 8 channels: ``benchmarks/step_pieces.py``.)

No operation mixes baselines, so the component runs unchanged on any block of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.config import option_field
from tabascal.model import _fourier, _whitened


@dataclass(frozen=True)
class SkyConfig:
    """Static settings of the sky prior.

    Attributes:
      bandwidth_hz: None (each baseline's delay knee from the field, the default), or one
        correlation bandwidth (Hz) of a Gaussian kernel in frequency for every baseline. A sky
        field of radius theta seen on a baseline of length |b| decorrelates over about
        c / (2 pi |b| theta): 190 kHz for 1.5 km and 10 degrees.
      knee_factor: the knees as multiples of the baseline's maximum sky fringe rate (time)
        and delay (frequency).
      rolloff: std of the Gaussian roll-off beyond a knee, as a fraction of the knee.
      cutoff: relative power (per axis) below which modes are dropped, in (0, 1).
      wrap_tolerance: wrapped correlation allowed by the padding, in (0, 1).
      groups: the most groups of baselines, each with its own box of modes (module docstring);
        fewer where more would not hold fewer modes.

    The prior's scale is not a setting of its own: ``make_constants`` takes it per baseline
    (``frame.ModelConfig.sky_sigma``, or estimated from the data).
    """

    bandwidth_hz: float | None = option_field(
        None,
        "correlation bandwidth in frequency; null = each baseline's from its largest sky delay",
        "Hz",
        min=1.0,
    )
    knee_factor: float = option_field(
        1.0, "knees, multiples of the baseline's largest sky fringe rate and delay", min=0.01
    )
    rolloff: float = option_field(0.25, "roll-off beyond the knee, fraction of the knee", min=0.01)
    cutoff: float = option_field(
        1.0e-3, "relative power below which modes are dropped", min=1e-12, max=0.5
    )
    wrap_tolerance: float = 1.0e-3
    groups: int = option_field(
        4, "most groups of baselines, each with its own box of modes (1: one box)", min=1
    )

    def __post_init__(self):
        for name in ("bandwidth_hz", "knee_factor", "rolloff"):
            if name == "bandwidth_hz" and self.bandwidth_hz is None:
                continue
            if not getattr(self, name) > 0:
                raise ValueError(f"SkyConfig.{name} = {getattr(self, name)!r}; it must be > 0")
        for name in ("cutoff", "wrap_tolerance"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(
                    f"SkyConfig.{name} = {getattr(self, name)!r}; it must lie in (0, 1)"
                )
        integer = isinstance(self.groups, (int, np.integer)) and not isinstance(self.groups, bool)
        if not (integer and self.groups >= 1):
            raise ValueError(f"SkyConfig.groups = {self.groups!r}; it must be an integer >= 1")


class SkyGrid(NamedTuple):
    """Static layout shared by all baselines: data grid, padded lattice and kept half-widths.

    The box that holds every baseline's modes is (n_kf, n_kt) = (2 half_freq + 1, 2 half_time
    + 1); boxes: each group's (half_freq, half_time), fewest modes first (``group_boxes``);
    members: how many of the baselines the grid was made for each box holds.
    """

    n_freq: int
    n_time: int
    chan_spacing: float  # Hz, the step between channel centres
    int_time: float  # s
    n_freq_padded: int
    n_time_padded: int
    half_freq: int
    half_time: int
    boxes: tuple[tuple[int, int], ...] = ()
    members: tuple[int, ...] = ()


class SkyParams(NamedTuple):
    """Whitened sky modes, one array per group: z[g] (n_g, 2, n_kf_g, n_kt_g) real, axis 1 =
    (real, imaginary), its rows those of ``SkyGroup.rows``."""

    z: tuple[jax.Array, ...]


class SkyGroup(NamedTuple):
    """One group's members and box. rows: (n_g,) int32, each member's row in the constants'
    rows (n_rows: a padding slot); weight_freq: (n_g, n_kf_g) real; weight_time: (n_g,
    n_kt_g) real (zero in padding slots); dft_freq: (n_freq, n_kf_g) complex; dft_time:
    (n_time, n_kt_g) complex."""

    rows: jax.Array
    weight_freq: jax.Array
    weight_time: jax.Array
    dft_freq: jax.Array
    dft_time: jax.Array


class SkyConstants(NamedTuple):
    """Arrays read by ``forward``. groups: one ``SkyGroup`` per box; scale: (n_rows,) real;
    mean: (n_rows,) complex."""

    groups: tuple[SkyGroup, ...]
    scale: jax.Array
    mean: jax.Array


#: SkyConstants fields with a leading row axis (sharded with the baselines).
BASELINE_FIELDS = ("scale", "mean")
#: SkyGroup fields with a leading member axis (placed with their members).
MEMBER_FIELDS = ("rows", "weight_freq", "weight_time")


#: The knees' floor in cycles over the data's extent on each axis (module docstring).
FLOOR_CYCLES = 0.25


def _knee(config: SkyConfig, bound: np.ndarray, n: int, delta: float) -> np.ndarray:
    """knee_factor x the per-baseline bound, at least FLOOR_CYCLES over n cells of ``delta``."""
    return np.maximum(config.knee_factor * bound, FLOOR_CYCLES / (n * delta))


def _check_bound(values, name: str, unit: str) -> np.ndarray:
    rate = np.asarray(values, dtype=np.float64)
    if rate.ndim != 1 or rate.size == 0:
        raise ValueError(f"{name} has shape {rate.shape}; expected (n_bl,) with n_bl > 0")
    if not np.all(np.isfinite(rate) & (rate >= 0)):
        bad = int(np.flatnonzero(~(np.isfinite(rate) & (rate >= 0)))[0])
        raise ValueError(f"{name}[{bad}] = {rate[bad]!r}; it must be finite and >= 0 {unit}")
    return rate


def _check_bounds(config: SkyConfig, fringe_rate_hz, delay_s):
    rate = _check_bound(fringe_rate_hz, "fringe_rate_hz", "Hz")
    if config.bandwidth_hz is not None:
        return rate, None
    if delay_s is None:
        raise ValueError(
            "the sky's frequency knee follows each baseline's largest sky delay: pass delay_s "
            "(n_bl,) in s (geometry.max_sky_delay_s), or set SkyConfig.bandwidth_hz"
        )
    delay = _check_bound(delay_s, "delay_s", "s")
    if delay.shape != rate.shape:
        raise ValueError(
            f"delay_s has shape {delay.shape} and fringe_rate_hz {rate.shape}; "
            "both are (n_bl,) for the same baselines"
        )
    return rate, delay


def _edge_lattice(config: SkyConfig, knee: np.ndarray, n: int, delta: float) -> tuple[int, int]:
    """(N, J) of an edge spectrum: padding from the smallest knee, box from the largest."""
    length = 1.0 / (2.0 * np.pi * config.rolloff * knee.min())
    n_padded = _fourier.padded_size(
        n, delta, _fourier.decorrelation_lag(length, config.wrap_tolerance), n
    )
    x = np.arange((n_padded + 1) // 2) / (n_padded * delta)
    power = _fourier.edge_spectrum(x, knee.max(), config.rolloff * knee.max())
    return n_padded, _fourier.kept_half_width(power, config.cutoff, n_padded)


def _edge_weights(config, knee, n_padded, delta, half_width) -> np.ndarray:
    """Unit-variance amplitudes (n_bl, 2J + 1) of each baseline's edge spectrum, zero below
    the cutoff."""
    x = _fourier.mode_frequencies(n_padded, delta, half_width)
    knee = knee[:, None]
    power = _fourier.edge_spectrum(np.abs(x), knee, config.rolloff * knee)
    return _fourier.normalised_weights(np.where(power >= config.cutoff, power, 0.0))


def _own_half_widths(config, knee, n_padded, delta, half_width) -> np.ndarray:
    """(n_bl,) each baseline's own half-width: its modes j = 1..half_width whose relative
    power is at least the cutoff (the spectrum falls with |j|, so they are 1..J_b)."""
    x = np.arange(1, half_width + 1) / (n_padded * delta)
    out = np.empty(knee.size, np.int64)
    for start in range(0, knee.size, 8192):  # (8192, J) float64 at a time
        k = knee[start : start + 8192, None]
        power = _fourier.edge_spectrum(x, k, config.rolloff * k)
        out[start : start + 8192] = np.sum(power >= config.cutoff, axis=1)
    return out


def _knees(config, grid: SkyGrid, rate, delay):
    """The knees (time, frequency; frequency None with ``bandwidth_hz``) of some baselines."""
    knee_t = _knee(config, rate, grid.n_time, grid.int_time)
    knee_f = None if delay is None else _knee(config, delay, grid.n_freq, grid.chan_spacing)
    return knee_t, knee_f


def _own_box(config, grid: SkyGrid, knee_t, knee_f) -> tuple[np.ndarray, np.ndarray]:
    """Each baseline's own (half_freq, half_time), two (n_bl,) arrays."""
    half_t = _own_half_widths(config, knee_t, grid.n_time_padded, grid.int_time, grid.half_time)
    if knee_f is None:  # one Gaussian kernel in frequency: every baseline keeps the whole box
        return np.full(knee_t.size, grid.half_freq), half_t
    half_f = _own_half_widths(config, knee_f, grid.n_freq_padded, grid.chan_spacing, grid.half_freq)
    return half_f, half_t


#: A further group is taken only where it cuts the modes held by at least this fraction: each
#: group is one more pass of the sky's scatter, and more programs to compile.
GROUP_SAVING = 0.1


def _box_modes(box) -> int:
    return (2 * int(box[0]) + 1) * (2 * int(box[1]) + 1)


def group_boxes(half_freq, half_time, max_groups: int) -> tuple[tuple[int, int], ...]:
    """The boxes (half_freq, half_time) of at most ``max_groups`` groups, fewest modes first.

    half_freq, half_time: (n_bl,) each baseline's own half-widths. The distinct own boxes,
    ordered by their modes, are split into contiguous runs, each held in the box of its
    largest members (the elementwise maximum); dynamic programming gives the split with the
    fewest modes over all baselines for each number of runs, and a further run is taken only
    where it saves ``GROUP_SAVING`` of the modes.
    """
    if max_groups < 1 or np.size(half_freq) == 0:
        raise ValueError(
            f"group_boxes: {np.size(half_freq)} baselines into at most {max_groups} groups; "
            "expected at least one baseline and one group"
        )
    pairs, counts = np.unique(
        np.stack([np.asarray(half_freq), np.asarray(half_time)], 1), axis=0, return_counts=True
    )
    modes = (2 * pairs[:, 0] + 1) * (2 * pairs[:, 1] + 1)
    order = np.argsort(modes, kind="stable")
    pairs, counts = pairs[order], counts[order]
    n, n_groups = len(pairs), min(max_groups, len(pairs))
    total = np.concatenate([[0], np.cumsum(counts)])
    best = np.full((n_groups + 1, n + 1), np.inf)
    best[0, 0] = 0.0
    start = np.zeros((n_groups + 1, n + 1), np.int64)
    for j in range(1, n + 1):
        box = np.maximum.accumulate(pairs[:j][::-1], axis=0)[::-1]  # box[i]: runs i..j-1
        cost = (total[j] - total[:j]) * (2.0 * box[:, 0] + 1) * (2.0 * box[:, 1] + 1)
        for g in range(1, n_groups + 1):
            value = best[g - 1, :j] + cost
            i = int(np.argmin(value))
            best[g, j], start[g, j] = value[i], i
    chosen = 1
    for g in range(2, n_groups + 1):
        if best[g, n] <= (1.0 - GROUP_SAVING) * best[chosen, n]:
            chosen = g
    boxes, j = [], n
    for g in range(chosen, 0, -1):
        i = int(start[g, j])
        box = pairs[i:j].max(axis=0)
        boxes.append((int(box[0]), int(box[1])))
        j = i
    return tuple(sorted(boxes, key=lambda b: (_box_modes(b), b)))


def group_labels(boxes, half_freq, half_time) -> np.ndarray:
    """(n_bl,) int64: each baseline's group, the first of ``boxes`` that holds its own
    half-widths (every baseline is held by one: refused otherwise)."""
    limits = np.asarray(boxes, np.int64).reshape(-1, 2)
    held = (np.asarray(half_freq)[:, None] <= limits[None, :, 0]) & (
        np.asarray(half_time)[:, None] <= limits[None, :, 1]
    )
    if not np.all(held.any(axis=1)):
        bad = int(np.flatnonzero(~held.any(axis=1))[0])
        raise ValueError(
            f"sky: baseline {bad}'s own box ({half_freq[bad]}, {half_time[bad]}) lies outside "
            f"every group's {tuple(boxes)}; make the grid from every baseline's bounds"
        )
    return np.argmax(held, axis=1)


def make_grid(
    config: SkyConfig,
    fringe_rate_hz,
    n_freq: int,
    n_time: int,
    chan_spacing: float,
    int_time: float,
    *,
    delay_s=None,
) -> SkyGrid:
    """Padded lattice and mode boxes for all baselines (host, float64).

    fringe_rate_hz, delay_s: (n_bl,) maximum sky fringe rate (Hz) and delay (s) of every
    baseline of the observation (``geometry.max_sky_fringe_rate``, ``max_sky_delay_s``), all of
    them, not one block: the padding follows the smallest knee, the largest box the largest
    knee and the groups' boxes every baseline's own (``group_boxes``).
    delay_s may be None when ``config.bandwidth_hz`` is set.
    chan_spacing: the step between channel centres (Hz; ``ObservationMeta.chan_spacing``,
    wider than a channel where the data were decimated in frequency); int_time: integration
    time (s).
    """
    rate, delay = _check_bounds(config, fringe_rate_hz, delay_s)
    if n_freq < 1 or n_time < 1 or not (chan_spacing > 0 and int_time > 0):
        raise ValueError(
            f"sky grid: n_freq={n_freq}, n_time={n_time}, chan_spacing={chan_spacing}, "
            f"int_time={int_time}; expected positive sizes and spacings"
        )
    if delay is None:
        n_f, half_f = _fourier.gaussian_lattice(
            n_freq, chan_spacing, config.bandwidth_hz, config.cutoff, config.wrap_tolerance, n_freq
        )
    else:
        n_f, half_f = _edge_lattice(
            config, _knee(config, delay, n_freq, chan_spacing), n_freq, chan_spacing
        )
    n_t, half_t = _edge_lattice(config, _knee(config, rate, n_time, int_time), n_time, int_time)
    grid = SkyGrid(n_freq, n_time, float(chan_spacing), float(int_time), n_f, n_t, half_f, half_t)
    own = _own_box(config, grid, *_knees(config, grid, rate, delay))
    boxes = group_boxes(*own, config.groups)
    # A box whose members an earlier one holds is dropped.
    used, members = np.unique(group_labels(boxes, *own), return_counts=True)
    return grid._replace(
        boxes=tuple(boxes[g] for g in used), members=tuple(int(m) for m in members)
    )


def group_sizes(grid: SkyGrid) -> dict:
    """{"n_kf x n_kt": members} of each group's box, for the model's info."""
    return {
        f"{2 * f + 1} x {2 * t + 1}": m for (f, t), m in zip(grid.boxes, grid.members, strict=True)
    }


def make_constants(
    config: SkyConfig,
    grid: SkyGrid,
    fringe_rate_hz,
    *,
    delay_s=None,
    scale=1.0,
    mean=0.0,
    dtype=np.float64,
) -> SkyConstants:
    """Constants of ``forward`` for a set of baselines (all of them, or one block of rows),
    their rows in the given order; each baseline joins the first of ``grid.boxes`` that holds
    its own box (a group may have no members in a block).

    fringe_rate_hz, delay_s: (n_bl,) maximum sky fringe rate (Hz) and delay (s) of these
    baselines (delay_s may be None when ``config.bandwidth_hz`` is set).
    scale: prior std of |V - mean| per cell, scalar or (n_bl,) (data units, e.g. Jy).
    mean: scalar or (n_bl,) complex constant per baseline (e.g. ``mean_from_data``).
    dtype: real dtype, float32 or float64; complex arrays get the matching complex dtype.
    """
    rate, delay = _check_bounds(config, fringe_rate_hz, delay_s)
    n_bl = rate.size
    real = np.dtype(dtype)
    cplx = np.result_type(real, np.complex64)
    scale = np.broadcast_to(scale, (n_bl,))
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError("sky scale must be finite and > 0 for every baseline")
    mean = np.broadcast_to(np.asarray(mean, dtype=np.complex128), (n_bl,))
    knee_t, knee_f = _knees(config, grid, rate, delay)
    labels = group_labels(grid.boxes, *_own_box(config, grid, knee_t, knee_f))
    groups = []
    for g, (half_f, half_t) in enumerate(grid.boxes):
        rows = np.flatnonzero(labels == g)
        if knee_f is None:
            weight_freq = _fourier.gaussian_weights(
                grid.n_freq_padded, grid.chan_spacing, half_f, config.bandwidth_hz
            )
            weight_freq = np.broadcast_to(weight_freq, (rows.size, weight_freq.size))
        else:
            weight_freq = _edge_weights(
                config, knee_f[rows], grid.n_freq_padded, grid.chan_spacing, half_f
            )
        weight_time = _edge_weights(config, knee_t[rows], grid.n_time_padded, grid.int_time, half_t)
        groups.append(
            SkyGroup(
                rows=jnp.asarray(rows, jnp.int32),
                weight_freq=jnp.asarray(weight_freq, real),
                weight_time=jnp.asarray(weight_time, real),
                dft_freq=jnp.asarray(
                    _fourier.dft_matrix(grid.n_freq, grid.n_freq_padded, half_f), cplx
                ),
                dft_time=jnp.asarray(
                    _fourier.dft_matrix(grid.n_time, grid.n_time_padded, half_t), cplx
                ),
            )
        )
    return SkyConstants(
        groups=tuple(groups), scale=jnp.asarray(scale, real), mean=jnp.asarray(mean, cplx)
    )


def param_shapes(constants: SkyConstants) -> tuple[tuple[int, int, int, int], ...]:
    """Each group's parameter shape (n_g, 2, n_kf_g, n_kt_g)."""
    return tuple(
        (g.rows.shape[0], 2, g.weight_freq.shape[1], g.weight_time.shape[1])
        for g in constants.groups
    )


def init(constants: SkyConstants, key: jax.Array | None = None) -> SkyParams:
    """Whitened sky parameters: zeros (V = mean) or, given a PRNG key, a prior draw (group g
    from ``fold_in(key, g)``)."""
    real = constants.scale.dtype
    keys = [
        None if key is None else jax.random.fold_in(key, g) for g in range(len(constants.groups))
    ]
    return SkyParams(
        tuple(
            _whitened.draw(k, shape, real)
            for k, shape in zip(keys, param_shapes(constants), strict=True)
        )
    )


def _amplitude(group: SkyGroup, scale: jax.Array) -> jax.Array:
    """scale[row] w_f[b, k] w_t[b, j] of a group's members, (n_g, n_kf_g, n_kt_g) real; scale:
    the rows' scale with a zero appended for the spare row."""
    return (
        scale[group.rows][:, None, None]
        * group.weight_freq[:, :, None]
        * group.weight_time[:, None, :]
    )


def _with_spare(x: jax.Array) -> jax.Array:
    return jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])


def forward(params: SkyParams, constants: SkyConstants) -> jax.Array:
    """Sky visibilities, (n_rows, n_freq, n_time) complex (formula in the module docstring):
    each group's added into its rows of the means. A padding slot's amplitude is zero, so its
    visibilities are exact zeros, added into the last row."""
    n_rows = constants.scale.shape[0]
    scale = _with_spare(constants.scale)
    first = constants.groups[0]
    shape = (n_rows, first.dft_freq.shape[0], first.dft_time.shape[0])
    vis = jnp.broadcast_to(constants.mean[:, None, None], shape)
    for group, z in zip(constants.groups, params.z, strict=True):
        grid = _fourier.modes_to_grid(
            _fourier.complex_from_stacked(z), _amplitude(group, scale), group.dft_freq,
            group.dft_time,
        )  # fmt: skip
        vis = vis.at[jnp.minimum(group.rows, n_rows - 1)].add(grid)
    return vis


def prior(params: SkyParams) -> jax.Array:
    """Negative log prior |z|^2 / 2 summed over all groups, baselines and modes (scalar)."""
    return _whitened.prior(params)


def init_from_data(
    constants: SkyConstants,
    vis,
    noise,
    flags=None,
    *,
    n_iter: int = 100,
) -> SkyParams:
    """Whitened parameters whose ``forward`` best fits a sky estimate (maximum a posteriori).

    Minimises sum_unflagged |forward(z) - vis|^2 / (2 noise^2) + |z|^2 / 2 for every baseline on
    its own, by conjugate gradients in mode space (``_fourier.fit_modes``). Flagged or
    non-finite cells are left out. A band-limited estimate (one ``forward`` can represent) with
    a small noise comes back to itself: forward(init_from_data(x)) ~= x.

    vis: (n_rows, n_freq, n_time) complex estimate; noise: scalar, (n_rows,) or (n_rows,
    n_freq) std of its real and imaginary parts (data units, > 0); flags: (n_rows, n_freq,
    n_time) bool or None. n_iter: conjugate-gradient iterations (static).

    A noise per channel enters as one value per baseline, ``1 / sqrt(mean_f noise[b, f]^-2)``:
    the noise that gives the baseline's data the same total weight against the prior (the
    fit weighs a baseline's cells equally). It is exact for equal channels, and the fit is
    started from the truth with a noise far below the data's, where the prior barely counts.
    """
    vis = jnp.asarray(vis)
    n_rows = vis.shape[0]
    if np.ndim(noise) == 2:
        noise = 1.0 / jnp.sqrt(jnp.mean(1.0 / jnp.square(jnp.asarray(noise)), axis=1))
    noise = jnp.broadcast_to(jnp.asarray(noise), (n_rows,))
    scale = _with_spare(constants.scale)
    z = []
    for group in constants.groups:
        rows = jnp.minimum(group.rows, n_rows - 1)  # a padding slot's amplitude is zero
        z.append(
            _fourier.fit_estimate(
                vis[rows],
                None if flags is None else jnp.asarray(flags)[rows],
                constants.mean[rows],
                noise[rows],
                _amplitude(group, scale),
                group.dft_freq,
                group.dft_time,
                n_iter,
            )
        )
    return SkyParams(tuple(z))


def mean_from_data(vis, flags=None) -> jax.Array:
    """Per-baseline mean of the unflagged, finite cells, (n_bl,) complex (0 where none are).

    vis: (n_bl, n_freq, n_time) complex; flags: same shape bool or None. Masked sums only.
    """
    vis = jnp.asarray(vis)
    use = jnp.isfinite(vis)
    if flags is not None:
        use = use & ~jnp.asarray(flags)
    total = jnp.sum(jnp.where(use, vis, 0), axis=(1, 2))
    count = jnp.sum(use, axis=(1, 2))
    return jnp.where(count > 0, total / jnp.maximum(count, 1), 0)
