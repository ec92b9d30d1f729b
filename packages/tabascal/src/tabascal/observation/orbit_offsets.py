"""Orbits displaced along track and in the radial / in-track / cross-track frame.

A TLE element set puts a satellite about a kilometre from where it is at the set's epoch, and
the error grows from there, mostly along track. :class:`OffsetOrbits` displaces any orbits
(``geometry.Orbits``: circular or SGP4) by a constant time offset and a constant offset in
each satellite's own radial / in-track / cross-track (RIC) frame: satellite s at time t is

    x'(t) = x(t + dt_s) + dr_s e_r + di_s e_i + dc_s e_c,

the frame taken at t + dt_s: ``e_r = x / |x|``, ``e_c = (x cross v) / |x cross v|``, ``e_i = e_c
cross e_r``. The frame turns about ``e_c`` at ``omega = |x cross v| / |x|^2``; its derivatives
are taken at that rate held constant (exact for a circular orbit; for an eccentric one the
error is of the order of the eccentricity times the offset), so

    d^k/dt^k (dr e_r + di e_i) = omega^k (the in-plane offset turned by k x 90 degrees).

The simulator hands a fit such displaced orbits (``satellites.orbit_error``); the fit's orbit
corrections (``tabascal.model.orbit_corrections``) undo them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tabascal.observation.geometry import Orbits

#: Names of the three position offsets, in the order of the last axis of ``ric_offset_m``.
RIC = ("radial", "in_track", "cross_track")


def ric_frame(state: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The RIC unit vectors and the frame's turning rate from positions and velocities.

    state: (>= 2, n_sat, n_time, 3), position then velocity (``Orbits.inertial`` with
    n_deriv >= 1). Returns e_r, e_i, e_c (each (n_sat, n_time, 3)) and omega (n_sat, n_time)
    rad/s.
    """
    x, v = state[0], state[1]
    r = np.linalg.norm(x, axis=-1, keepdims=True)
    h = np.cross(x, v)
    h_norm = np.linalg.norm(h, axis=-1, keepdims=True)
    e_r, e_c = x / r, h / h_norm
    return e_r, np.cross(e_c, e_r), e_c, (h_norm / r**2)[..., 0]


def ric_offsets(state: np.ndarray, ric_m: np.ndarray, n_deriv: int) -> np.ndarray:
    """The displacement ``dr e_r + di e_i + dc e_c`` and its derivatives, (n_deriv + 1, n_sat,
    n_time, 3) m/s^k, for offsets ric_m (n_sat, 3) and the orbits' state (see ``ric_frame``)."""
    e_r, e_i, e_c, omega = ric_frame(state)
    d = np.asarray(ric_m, np.float64)[:, None, :, None]  # (n_sat, 1, 3, 1)
    in_plane = d[:, :, 0] * e_r + d[:, :, 1] * e_i  # (n_sat, n_time, 3)
    turned = d[:, :, 0] * e_i - d[:, :, 1] * e_r  # in_plane turned by +90 degrees
    out = []
    for k in range(n_deriv + 1):
        sign = -1.0 if k % 4 in (2, 3) else 1.0
        part = in_plane if k % 2 == 0 else turned
        term = sign * omega[..., None] ** k * part
        out.append(term + d[:, :, 2] * e_c if k == 0 else term)
    return np.stack(out)


@dataclass(frozen=True, eq=False)
class OffsetOrbits:
    """``base`` orbits displaced by ``time_offset_s`` (n_sat,) s and ``ric_offset_m`` (n_sat,
    3) m (radial, in-track, cross-track): see the module docstring. Has the ``Orbits``
    protocol; with every offset zero its positions are ``base``'s exactly."""

    base: Orbits
    time_offset_s: np.ndarray
    ric_offset_m: np.ndarray

    def __post_init__(self):
        n_sat = self.base.n_sat
        dt = np.asarray(self.time_offset_s, np.float64).reshape(-1)
        ric = np.asarray(self.ric_offset_m, np.float64)
        if dt.shape == (1,) and n_sat != 1:
            dt = np.full(n_sat, dt[0])
        if ric.shape == (3,):
            ric = np.broadcast_to(ric, (n_sat, 3)).copy()
        if dt.shape != (n_sat,) or ric.shape != (n_sat, 3):
            raise ValueError(
                f"OffsetOrbits: time_offset_s {dt.shape} and ric_offset_m {ric.shape} must be "
                f"({n_sat},) and ({n_sat}, 3) for {n_sat} satellites (or one value for all)"
            )
        if not (np.all(np.isfinite(dt)) and np.all(np.isfinite(ric))):
            raise ValueError("OffsetOrbits: the offsets must be finite")
        object.__setattr__(self, "time_offset_s", dt)
        object.__setattr__(self, "ric_offset_m", ric)

    @property
    def names(self):
        return self.base.names

    @property
    def n_sat(self) -> int:
        return self.base.n_sat

    def label(self, s: int) -> str:
        return self.base.label(s)

    def __getattr__(self, name: str):
        # Element attributes (altitude_m, mean_motion, epochs, ...) are the base orbits'.
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def inertial(self, times_s, n_deriv: int = 0) -> np.ndarray:
        """Displaced positions and derivatives: (n_deriv + 1, n_sat, n_time, 3) float64."""
        times = np.asarray(times_s, np.float64)
        state = np.empty((max(n_deriv, 1) + 1, self.n_sat, times.shape[0], 3))
        for dt in np.unique(self.time_offset_s):
            sats = self.time_offset_s == dt
            state[:, sats] = self.base.inertial(times + dt, max(n_deriv, 1))[:, sats]
        if not np.any(self.ric_offset_m):
            return state[: n_deriv + 1]
        return state[: n_deriv + 1] + ric_offsets(state, self.ric_offset_m, n_deriv)
