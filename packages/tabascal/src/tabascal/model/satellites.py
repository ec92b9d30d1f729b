"""Each satellite as the model sees it, from the observation's metadata alone (host, float64).

When it is in view: above ``ModelConfig.min_elevation_deg`` at the array centre at each
integration's centre (``satellites_in_view``), the part of each integration above it as the RFI
operators take it (``satellite_view``), and the cells its signal lives on (``signal_in_view``).
How fast its amplitude on an antenna changes as it crosses the station beam's sidelobes
(``rfi_time_scales``), and the beam's voltage towards it over its distance, the shared RFI
signal's per-antenna factor (``rfi_antenna_factor``). ``frame.model_frame`` puts these into the
RFI signal's constants.
"""

from __future__ import annotations

import logging

import numpy as np

import ri_kernels
from tabascal.observation import beam, emitters, geometry

logger = logging.getLogger(__name__)

# Halvings of an integration in the search for the time a satellite crosses the minimum
# elevation within it: 40 leave 2^-40 of the integration.
_CROSSING_STEPS = 40


def satellites_in_view(meta, config) -> np.ndarray:
    """(n_sat, n_time) bool: each satellite above ``config.min_elevation_deg`` at the array
    centre at each integration's centre. A satellite in view at no time is left out of the fit
    (its signal is zero throughout), with a warning."""
    if meta.n_sat == 0:
        logger.info("the observation has no satellites: the model is the sky and the gains")
        return np.zeros((0, meta.n_time), bool)
    in_view = above_min_elevation(meta, config)
    never = np.flatnonzero(~in_view.any(axis=1))
    if never.size:
        names = ", ".join(meta.orbits.label(int(s)) for s in never)
        logger.warning(
            "emitter(s) %s stay out of view (at or below %.1f deg elevation, or outside their "
            "track) for the whole observation: left out of the fit (no RFI from them)",
            names,
            config.min_elevation_deg,
        )
    return in_view


def above_min_elevation(meta, config) -> np.ndarray:
    """(n_sat, n_time) bool: each emitter in view at each integration's centre
    (``satellites_in_view`` without its messages): a satellite or an aircraft above
    ``config.min_elevation_deg`` at the array centre, a ground transmitter always
    (``observation.emitters.visible``)."""
    return _visible(meta, config, meta.times_s)


def _visible(meta, config, times_s) -> np.ndarray:
    limit = np.deg2rad(config.min_elevation_deg)
    return emitters.visible(meta.ant_itrf, meta.orbits, times_s, meta.gast0_rad, limit)


def satellite_view(meta, config) -> np.ndarray | None:
    """The part of each integration in which each satellite is above
    ``config.min_elevation_deg`` at the array centre, as the RFI operators take it: (n_sat,
    n_time, 2) float64 ``[lo, hi]`` in x = 2 (t - t_centre) / int_time, ``lo = hi = 0`` where
    it is below throughout. The crossing time within an integration is found by bisection;
    a satellite is taken to cross at most once per integration. None where every satellite is
    up throughout every integration: the operators then need no view."""
    if meta.n_sat == 0:
        return None
    half = meta.int_time / 2
    times = np.asarray(meta.times_s, np.float64)

    def up(at_s):  # (n_sat, len(at_s)) bool
        return _visible(meta, config, at_s)

    start, end = up(times - half), up(times + half)
    if np.all(start & end):
        return None
    view = np.zeros((meta.n_sat, meta.n_time, 2))
    view[start & end] = (-1.0, 1.0)
    src, cell = np.nonzero(start != end)
    rising = end[src, cell]
    lo, hi = np.full(src.size, -1.0), np.full(src.size, 1.0)  # the crossing lies between
    for _ in range(_CROSSING_STEPS):
        mid = (lo + hi) / 2
        above = up(times[cell] + half * mid)[src, np.arange(src.size)]
        before = above == rising  # the crossing is before mid
        lo, hi = np.where(before, lo, mid), np.where(before, mid, hi)
    crossing = (lo + hi) / 2
    view[src, cell, 0] = np.where(rising, crossing, -1.0)
    view[src, cell, 1] = np.where(rising, 1.0, crossing)
    return view


def stencil_reach(in_view: np.ndarray, n_stencil: int) -> np.ndarray:
    """(n_sat, n_time) bool: the data cells whose signal the time stencil of some integration
    in view (``in_view``, (n_sat, n_time) bool) reads. Where a satellite rises or sets within
    an integration the operators interpolate its signal from cells on both sides, so those
    beyond the horizon keep their values; the view zeroes what they would add there."""
    n_time = in_view.shape[1]
    start = ri_kernels.stencil_starts(n_time, min(n_stencil, n_time))
    reach = np.zeros(in_view.shape[::-1], bool)
    for l in range(min(n_stencil, n_time)):
        np.logical_or.at(reach, start + l, in_view.T)
    return reach.T


def signal_in_view(meta, config, view: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Where each satellite's RFI signal lives, (n_sat, n_time) bool, and the fraction of the
    observation each is in view, (n_sat,). view: ``satellite_view(meta, config)``. With none,
    the integrations in view at their centres (``satellites_in_view``); with one, the cells
    that the in-view integrations' stencils read (``stencil_reach``) and the part of the
    integrations above the minimum elevation."""
    in_view = satellites_in_view(meta, config)
    in_view_fraction = in_view.mean(axis=1)
    if view is not None:
        in_view_fraction = np.mean(view[..., 1] - view[..., 0], axis=1) / 2
        in_view = stencil_reach(view[..., 1] > view[..., 0], config.rfi_vis.time_stencil)
    return in_view, in_view_fraction


def rfi_time_scales(meta, config) -> np.ndarray:
    """Correlation time (s) of each satellite's RFI signal, (n_sat,) float64.

    "fixed": ``rfi_signal.corr_time_s`` for all. "geometric": a satellite's amplitude on an
    antenna is the station beam towards it, whose sidelobes are ``theta = c / (f_top D)`` wide
    (D the station diameter, f_top the top of the band); crossing them at the sightline's
    largest angular speed ``omega`` (``geometry.satellite_angular_speed``), the amplitude
    swings with period ``theta / omega``, and a Gaussian kernel of length
    ``theta / (2 pi omega)`` keeps that period's power at exp(-1/2) of the peak. Capped at
    ``corr_time_s``, and at least one integration: the signal lives on the data grid, which
    cannot hold a faster swing (a Gaussian kernel shorter than a cell aliases on it). A LEO
    satellite at 550 km (0.74 deg/s overhead) would need 0.65 s at 150 MHz with 38 m stations,
    so gets the integration time; a GPS satellite (about 0.01 deg/s) about 50 s.
    """
    ceiling = config.rfi_signal.corr_time_s
    # The shared signal's swings across the beam are in its known factor: what is left, the
    # emission, keeps the long time.
    fixed = config.rfi_signal.time_scale == "fixed" or config.rfi_signal.signal == "shared"
    if fixed or meta.n_sat == 0:
        return np.full(meta.n_sat, ceiling)
    return beam_crossing_time_s(meta, ceiling)


def beam_crossing_time_s(meta, ceiling: float) -> np.ndarray:
    """The geometric time scale of ``rfi_time_scales`` (s), (n_sat,): how long each
    satellite's amplitude on an antenna stays put as it crosses the station beam's
    sidelobes, between one integration and ``ceiling``."""
    if meta.n_sat == 0:
        return np.zeros(0)
    omega = geometry.satellite_angular_speed(
        meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad
    ).max(axis=1)
    f_top = float(np.max(meta.freqs_hz)) + meta.chan_width / 2
    theta = geometry.C / (f_top * meta.dish_diameter_m)
    length = theta / (2 * np.pi * np.maximum(omega, 1e-30))
    return np.clip(length, min(meta.int_time, ceiling), ceiling)


def rfi_antenna_factor(meta, in_view: np.ndarray) -> np.ndarray:
    """The shared RFI signal's per-antenna factor, (n_ant, n_sat, n_freq, n_time) float64.

    The satellite's field at antenna a is its emission times the station beam's voltage towards
    it over its distance: b(pi D f sin(theta_a) / c) / r_a, with b the Airy voltage pattern of
    a station of diameter D = ``dish_diameter_m`` tracking the phase centre
    (``observation.beam``), theta_a the satellite's angle from the phase centre and r_a its
    range, at the cell centres. Normalised per satellite to rms 1 over the antennas, channels
    and the times it is in view (``in_view``, (n_sat, n_time) bool; 0 elsewhere), so that the
    shared signal keeps the units and the prior scale of a per-antenna one.
    """
    range_m, sin_off = geometry.satellite_sightlines(
        meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad, meta.ra_rad, meta.dec_rad
    )
    freqs = np.asarray(meta.freqs_hz, np.float64)
    x = beam.beam_x(meta.dish_diameter_m, freqs[None, None, :, None], sin_off[:, :, None, :])
    factor = beam.airy_voltage(x) / range_m[:, :, None, :]
    factor = factor * np.asarray(in_view, bool)[None, :, None, :]
    rms = np.sqrt(np.mean(factor**2, axis=(0, 2, 3)) / np.maximum(np.mean(in_view, axis=1), 1e-30))
    return factor / np.where(rms > 0, rms, 1.0)[None, :, None, None]
