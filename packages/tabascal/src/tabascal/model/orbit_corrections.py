"""Learnable orbit corrections: a time offset and radial / in-track / cross-track offsets.

The RFI model takes each satellite's delays at each antenna from its orbit: ``delay_us`` (n_ant,
n_sat, n_time, 4), the delay relative to the array mean at each integration's centre and its
first three time derivatives, and the centre phases ``phase = 2 pi f delay``. An element set's
error shifts them; with ``orbits.fit`` the fit corrects each satellite's orbit by

* ``time_offset``: a time offset dt_s (the satellite is where its orbit puts it dt_s later,
  the antennas where they are), the along-track error of an element set;
* ``ric``: that and constant offsets dx_s (m) along the satellite's radial, in-track and
  cross-track directions (``observation.orbit_offsets``).

Each delay order is expanded to second order in the offsets theta = (dt, dx):
``d_k += g_k . theta + theta . H_k . theta / 2``, with the first and second derivatives g, H
from central differences of the geometry itself (the displaced orbits' delays,
``geometry.rfi_delays``), once on the host. Only the satellite moves: the delay is not the
delay at t + dt, since the Earth's rotation and the phase centre's tracking stay put.
Measured against the geometry recomputed for the displaced orbits (float64, the demo's array,
a LEO satellite at 550 km; ``tests/test_orbit_corrections.py``): 0.2 s and 500 m radial
within 1.5e-8 us of delay, 1.4e-5 rad of phase at 150 MHz; 0.2 s and 1 km along each
direction within 1.1e-4 rad; 1 s alone within 2.2e-3 rad. The third-order terms grow as the
cube of the offsets: corrections of several seconds or kilometres need orbits closer to the
truth to start from (a newer element set).

The centre phases move with the delay: ``phase += 2 pi f (d_0' - d_0)``, formed from the
shift itself, not from the difference of two large delays. The parameters are whitened,
``dt = time_sigma_s z_t``, ``dx = position_sigma_m z_x``, with z ~ N(0, 1) a priori.

With ``fit: none`` (the default) the model has no orbit parameters and nothing here runs: the
fit is the fixed-orbit one exactly. With corrections the delays change at every step, so the
analytic groups' phase moments are formed at every step instead of kept (``rfi.phase_cache``
is overridden, and ``summary.json`` says so).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.config import ConfigError, option_field
from tabascal.model import _whitened
from tabascal.observation import geometry
from tabascal.observation.orbit_offsets import RIC, OffsetOrbits

logger = logging.getLogger(__name__)

ORBIT_FITS = ("none", "time_offset", "ric")

# Default prior widths from an element set's age (days from its epoch to the observation):
# an element set puts a LEO satellite about a kilometre off at its epoch, and the error grows
# by kilometres a day, fastest along track. Circular orbits (the simulator's) have age 0.
POSITION_SIGMA_M = 1000.0
POSITION_SIGMA_M_PER_DAY = 1000.0
ALONG_TRACK_SIGMA_M_PER_DAY = 3000.0

# Central-difference steps of the derivatives: 0.1 s (a LEO satellite moves 750 m) and 100 m;
# the second differences' rounding, 1e-16 of a delay of microseconds over h^2, stays far below
# the terms they measure.
STEP_S = 0.1
STEP_M = 100.0

#: Matrix products at full float32 precision on every backend.
_HIGHEST = jax.lax.Precision.HIGHEST


@dataclass(frozen=True)
class OrbitFitConfig:
    """Which orbit corrections are fitted, and their prior widths (None: from the age)."""

    fit: str = option_field(
        "none",
        "orbit corrections fitted per satellite: none; time_offset (an along-track time "
        "offset); ric (that and radial / in-track / cross-track position offsets)",
        choices=ORBIT_FITS,
    )
    time_sigma_s: float | None = option_field(
        None,
        "prior std of each satellite's time offset; null: the along-track error of an "
        "element set of that age (1 km + 3 km per day) over the orbital speed",
        "s",
        min=1e-6,
    )
    position_sigma_m: float | None = option_field(
        None,
        "prior std of each position offset; null: 1 km + 1 km per day of the element set's age",
        "m",
        min=1e-3,
    )


class OrbitParams(NamedTuple):
    """Whitened corrections: time (n_sat,); position (n_sat, 3) radial / in-track /
    cross-track, or None (``fit: time_offset``)."""

    time: jax.Array
    position: jax.Array | None


class OrbitConstants(NamedTuple):
    """time_sigma_s, position_sigma_m: (n_sat,) prior widths. first: (n_ant, n_sat, n_time, 4,
    n_par) and second: (..., n_par, n_par), each delay order's first and second derivatives
    with respect to the offsets (dt in s, then radial, in-track, cross-track in m with
    ``ric``: n_par 1 or 4), in us per unit."""

    time_sigma_s: jax.Array
    position_sigma_m: jax.Array
    first: jax.Array
    second: jax.Array
    factor_first: jax.Array | None = None
    factor_second: jax.Array | None = None


def element_age_days(orbits, epoch_utc: str) -> np.ndarray:
    """Days from each satellite's element set epoch to the observation start, (n_sat,) >= 0;
    0 for orbits without element sets (circular ones)."""
    epochs = getattr(orbits, "element_epochs", None)
    if epochs is None:
        return np.zeros(orbits.n_sat)
    start = datetime.fromisoformat(str(epoch_utc))
    return np.array([abs((start - e).total_seconds()) / 86400.0 for e in epochs()])


def orbital_speed(orbits, times_s) -> np.ndarray:
    """Each satellite's mean inertial speed over the observation (m/s), (n_sat,)."""
    return np.linalg.norm(orbits.inertial(times_s, 1)[1], axis=-1).mean(axis=1)


def prior_widths(config: OrbitFitConfig, meta) -> tuple[np.ndarray, np.ndarray]:
    """(time_sigma_s, position_sigma_m), each (n_sat,): the config's, or from the age."""
    age = element_age_days(meta.orbits, meta.epoch_utc)
    if config.time_sigma_s is not None:
        time_sigma = np.full(meta.n_sat, config.time_sigma_s)
    else:
        along = POSITION_SIGMA_M + ALONG_TRACK_SIGMA_M_PER_DAY * age
        time_sigma = along / orbital_speed(meta.orbits, meta.times_s)
    if config.position_sigma_m is not None:
        position_sigma = np.full(meta.n_sat, config.position_sigma_m)
    else:
        position_sigma = POSITION_SIGMA_M + POSITION_SIGMA_M_PER_DAY * age
    return time_sigma, position_sigma


def _delays(meta, orbits) -> np.ndarray:
    return geometry.rfi_delays(
        meta.ant_itrf, orbits, meta.times_s, meta.gast0_rad, meta.ra_rad, meta.dec_rad, 3
    )


def displaced(meta, theta: np.ndarray):
    """``meta`` with its orbits displaced by theta (n_par,) = (dt, radial, in-track,
    cross-track)[:n_par], every satellite alike."""
    dt = np.full(meta.n_sat, theta[0])
    ric = np.zeros((meta.n_sat, 3))
    ric[:, : theta.shape[0] - 1] = theta[1:]
    return dataclasses.replace(meta, orbits=OffsetOrbits(meta.orbits, dt, ric))


def derivatives(of, meta, n_par: int) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivatives of ``of(meta)`` (an array of the geometry, e.g. the
    delays) with respect to the first ``n_par`` offsets (dt, radial, in-track, cross-track):
    (*shape, n_par) and (*shape, n_par, n_par), central differences with steps STEP_S and
    STEP_M. Each satellite's geometry depends on its own orbit alone, so all are displaced
    at once."""
    steps = np.array([STEP_S, STEP_M, STEP_M, STEP_M][:n_par])
    unit = np.eye(n_par) * steps

    def at(*terms):
        return of(displaced(meta, sum(terms, np.zeros(n_par))))

    centre = at()
    plus = [at(unit[i]) for i in range(n_par)]
    minus = [at(-unit[i]) for i in range(n_par)]
    first = np.stack([(plus[i] - minus[i]) / (2 * steps[i]) for i in range(n_par)], axis=-1)
    second = np.empty((*centre.shape, n_par, n_par))
    for i in range(n_par):
        second[..., i, i] = (plus[i] - 2 * centre + minus[i]) / steps[i] ** 2
        for j in range(i):
            cross = at(unit[i], unit[j]) - at(unit[i], -unit[j])
            cross = cross - at(-unit[i], unit[j]) + at(-unit[i], -unit[j])
            second[..., i, j] = second[..., j, i] = cross / (4 * steps[i] * steps[j])
    return first, second


def delay_derivatives(meta, n_par: int) -> tuple[np.ndarray, np.ndarray]:
    """``derivatives`` of delay_us: (n_ant, n_sat, n_time, 4, n_par) and (..., n_par, n_par)."""
    return derivatives(lambda m: _delays(m, m.orbits), meta, n_par)


def make_constants(config: OrbitFitConfig, meta, real, factor=None) -> OrbitConstants | None:
    """The corrections' constants for observation metadata ``meta``; None with ``fit: none``
    or no satellites. factor: None, or the shared RFI signal's per-antenna factor as a
    function of the metadata (``satellites.rfi_antenna_factor``), whose derivatives the
    corrections then carry too: the beam's voltage towards a satellite moves with its orbit."""
    if config.fit == "none" or meta.n_sat == 0:
        return None
    time_sigma, position_sigma = prior_widths(config, meta)
    n_par = 1 if config.fit == "time_offset" else 4
    first, second = delay_derivatives(meta, n_par)
    factor_first = factor_second = None
    if factor is not None:
        factor_first, factor_second = derivatives(factor, meta, n_par)
    logger.info(
        "orbit corrections (%s): time offset prior %s s, position prior %s m",
        config.fit,
        np.array2string(time_sigma, precision=3),
        np.array2string(position_sigma, precision=0),
    )

    def put(x):
        return None if x is None else jnp.asarray(x, real)

    return OrbitConstants(
        put(time_sigma),
        put(position_sigma),
        put(first),
        put(second),
        put(factor_first),
        put(factor_second),
    )


# The time-offset search (``search_time_offsets``): its grid's phase step on the fastest
# baseline (rad), its span in prior widths and its most points.
SEARCH_PHASE_STEP = 0.25
SEARCH_SPAN = 3.0
SEARCH_MOST_POINTS = 4001


def search_time_offsets(vis, flags, a1, a2, freqs_hz, phase, constants: OrbitConstants):
    """Each satellite's time offset (s) that best stops its fringe in the data, (n_sat,).

    A time offset's phase error grows with the baseline (0.2 s moves a LEO satellite's fringe
    by about a turn on 1.5 km at 150 MHz, by several on 10 km): the loss is then a comb in
    dt, and a gradient from zero finds the nearest tooth. So the fit's corrections start from
    a search: for dt on a grid over +-SEARCH_SPAN prior widths, fine enough that the fastest
    baseline's phase moves by SEARCH_PHASE_STEP rad per point, the data are stopped for the
    satellite's fringe with the corrected centre phases. Stopped at the right orbit, a
    satellite's visibility on baseline (p, q) is ``b_p b_q |u|^2 / (r_p r_q)``, real: the
    station beam's voltage b is real (a symmetric station), as is the range. The statistic
    is ``sum Re(z^2) = sum |z|^2 cos(2 psi)`` over the stopped visibilities z of phase psi,
    largest where they are real of either sign; the sky and the other satellites keep
    turning and average out. The position offsets start at zero. Host-side numpy, float64.

    vis, flags: (n_bl, n_freq, n_time) of the baselines a1, a2; phase: (n_ant, n_sat, n_freq,
    n_time) centre phases of the orbits as given (rad). The statistic is a sum over baselines,
    so rows read apart (``stopped_power``) add up to the same search (``parallel.blockwise``).
    """
    grids = search_grids(constants, a1, a2, freqs_hz)
    return best_offsets(grids, stopped_power(vis, flags, a1, a2, freqs_hz, phase, constants, grids))


def search_grids(constants: OrbitConstants, a1, a2, freqs_hz) -> list[np.ndarray]:
    """Each satellite's grid of time offsets (s) for ``search_time_offsets``, from every
    baseline (a1, a2: all the observation's)."""
    a1, a2 = np.asarray(a1), np.asarray(a2)
    rate = np.asarray(constants.first, np.float64)[..., 0, 0]  # (n_ant, n_sat, n_time) us/s
    sigma = np.asarray(constants.time_sigma_s, np.float64)
    grids = []
    for s in range(rate.shape[1]):
        # rad of phase per second of offset on the fastest baseline
        fastest = 2 * np.pi * np.max(freqs_hz) * 1e-6 * np.abs(rate[a1, s] - rate[a2, s]).max()
        half = SEARCH_SPAN * sigma[s]
        n = min(int(np.ceil(half * fastest / SEARCH_PHASE_STEP)), SEARCH_MOST_POINTS // 2)
        grids.append(np.linspace(-half, half, 2 * n + 1) if n else np.zeros(1))
    return grids


def stopped_power(vis, flags, a1, a2, freqs_hz, phase, constants, grids) -> np.ndarray:
    """The search statistic of these rows at every grid point: (n_sat, n_most) float64, each
    satellite's grid padded with zeros to the longest."""
    vis = np.where(np.asarray(flags, bool), 0, np.asarray(vis, np.complex128))
    a1, a2 = np.asarray(a1), np.asarray(a2)
    f_mhz = np.asarray(freqs_hz, np.float64)[None, :, None] * 1e-6
    rate = np.asarray(constants.first, np.float64)[..., 0, 0]
    curve = np.asarray(constants.second, np.float64)[..., 0, 0, 0]
    base = np.asarray(phase, np.float64)
    power = np.zeros((len(grids), max(g.size for g in grids)))
    for s, grid in enumerate(grids):
        if grid.size == 1 or vis.shape[0] == 0:
            continue
        for k, dt in enumerate(grid):
            shift = rate[:, s] * dt + curve[:, s] * dt**2 / 2  # (n_ant, n_time) us
            ant = base[:, s] + 2 * np.pi * f_mhz * shift[:, None, :]  # (n_ant, n_freq, n_time)
            power[s, k] = np.sum(np.real((vis * np.exp(-1j * (ant[a1] - ant[a2]))) ** 2))
    return power


def best_offsets(grids, power) -> np.ndarray:
    """Each satellite's offset of most stopped power, (n_sat,) s."""
    best = np.array([g[int(np.argmax(power[s, : g.size]))] for s, g in enumerate(grids)])
    for s, grid in enumerate(grids):
        if grid.size > 1:
            logger.info(
                "time-offset search for satellite %d: %d offsets over +-%.3g s, best %+.4f s",
                s,
                grid.size,
                grid[-1],
                best[s],
            )
    return best


def init(constants: OrbitConstants | None, time_offset_s=None) -> OrbitParams | None:
    """The corrections' starting point: zero (the prior mean, the orbits as given), or the
    time offsets ``time_offset_s`` (n_sat,) s with zero position offsets."""
    if constants is None:
        return None
    n_sat = constants.time_sigma_s.shape[0]
    dtype = constants.time_sigma_s.dtype
    position = None if constants.first.shape[-1] == 1 else jnp.zeros((n_sat, 3), dtype)
    time = jnp.zeros((n_sat,), dtype)
    if time_offset_s is not None:
        time = jnp.asarray(np.asarray(time_offset_s) / np.asarray(constants.time_sigma_s), dtype)
    return OrbitParams(time, position)


def prior(params: OrbitParams | None) -> jax.Array:
    """Negative log prior |z|^2 / 2 (0 without corrections)."""
    return _whitened.prior(params)


def offsets(params: OrbitParams, constants: OrbitConstants):
    """The corrections in physical units: time offset (n_sat,) s, position (n_sat, 3) m or
    None."""
    dt = constants.time_sigma_s * params.time
    if params.position is None:
        return dt, None
    return dt, constants.position_sigma_m[:, None] * params.position


def _second_order(first, second, params, constants):
    """``g . theta + theta . H . theta / 2`` of every element: first (n_ant, n_sat, ..., n_par)
    and second (..., n_par, n_par) derivatives, theta the offsets (dt, dx) of ``params``."""
    dt, dx = offsets(params, constants)
    theta = dt[:, None] if dx is None else jnp.concatenate([dt[:, None], dx], axis=1)
    # HIGHEST: at the default precision a TPU (bfloat16 passes) or a GPU (TF32) would keep
    # about three digits of a change that moves the phase by turns
    change = jnp.einsum("as...i,si->as...", first, theta, precision=_HIGHEST)
    curvature = jnp.einsum("as...ij,si,sj->as...", second, theta, theta, precision=_HIGHEST)
    return change + 0.5 * curvature


def corrected(params, constants, phase, delay_us, freq_mhz):
    """(phase, delay_us) of the corrected orbits; the inputs themselves when ``params`` is
    None. phase: (n_ant, n_sat, n_freq, n_time) rad; delay_us: (n_ant, n_sat, n_time, 4);
    freq_mhz: (n_freq,)."""
    if params is None:
        return phase, delay_us
    # The change of each order, formed directly (never as the difference of two delays).
    change = _second_order(constants.first, constants.second, params, constants)
    turns = freq_mhz[None, None, :, None] * change[:, :, None, :, 0]
    return phase + 2 * np.pi * turns, delay_us + change


def corrected_factor(params, constants, factor):
    """The shared RFI signal's per-antenna factor (n_ant, n_sat, n_freq, n_time) for the
    corrected orbits, to second order; ``factor`` itself without corrections or without the
    factor's derivatives."""
    if params is None or constants.factor_first is None:
        return factor
    return factor + _second_order(
        constants.factor_first, constants.factor_second, params, constants
    )


#: The routes (``parallel.routes``) that carry orbit corrections: one device, and the baseline
#: axis (with or without the reuse plan), which corrects the replicated per-antenna delays
#: before its map. The source axis splits the delays by satellite and does not.
ROUTES = ("none", "baseline", "reuse")


def check_route(config: OrbitFitConfig, route_name: str) -> None:
    """Refuse a route that does not carry orbit corrections, before any work."""
    if config.fit != "none" and route_name not in ROUTES:
        raise ConfigError(
            f"orbits.fit {config.fit!r} runs on one device or the baseline axis; the "
            f"{route_name} axis keeps the orbits fixed: set sharding.axis to none or "
            "baseline, or orbits.fit: none"
        )


def summary(params: OrbitParams | None, constants: OrbitConstants | None, orbits) -> dict | None:
    """The fitted corrections for summary.json: per satellite its time offset (s) and, with
    ``ric``, its position offsets (m), each with its prior width; None with fixed orbits.
    Where the handed orbits are a simulation's displaced ones (``OffsetOrbits``), each
    satellite also gets ``exact``: the corrections that undo the displacement (minus it)."""
    if params is None:
        return None
    dt, dx = (
        np.asarray(v, np.float64) if v is not None else None for v in offsets(params, constants)
    )
    known = orbits if isinstance(orbits, OffsetOrbits) else None
    entries = []
    for s in range(orbits.n_sat):
        entry = {
            "name": orbits.label(s),
            "time_offset_s": float(dt[s]),
            "time_offset_prior_s": float(constants.time_sigma_s[s]),
        }
        if dx is not None:
            entry["position_offset_m"] = dict(zip(RIC, map(float, dx[s]), strict=True))
            entry["position_offset_prior_m"] = float(constants.position_sigma_m[s])
        if known is not None:
            exact = {"time_offset_s": -float(known.time_offset_s[s])}
            if dx is not None:
                exact["position_offset_m"] = dict(
                    zip(RIC, map(float, -known.ric_offset_m[s]), strict=True)
                )
            entry["exact"] = exact
        entries.append(entry)
    fit = "time_offset" if dx is None else "ric"
    return {"fit": fit, "satellites": entries}


def table_extra(orbit_summary: dict | None) -> list[dict] | None:
    """The fitted corrections of ``summary``'s entries, for the per-satellite table of
    summary.json (``fitting.satellites.satellite_table``'s extra); None with fixed orbits."""
    if orbit_summary is None:
        return None
    return [
        {f"orbit_{k}": v for k, v in entry.items() if k != "name"}
        for entry in orbit_summary["satellites"]
    ]
