"""Observation geometry: Earth rotation, uvw, circular satellite orbits and delays.

Float64 numpy on the host; the simulator and the model both call these functions, so they share
one geometry. Conventions:

- Antenna positions are ITRF (Earth-fixed, geocentric, m). The inertial frame is ITRF rotated
  about z by the Greenwich apparent sidereal angle ``GAST(t) = gast0_rad + OMEGA_EARTH * t``,
  ``t`` in s from the observation start (the epoch). Precession, nutation and polar motion are
  ignored: the inertial frame is "true of date".
- The phase centre (``ra_rad``, ``dec_rad``) is the inertial unit vector
  ``s0 = (cos dec cos ra, cos dec sin ra, sin dec)``. Per-antenna ``(u, v, w)`` (m) are the
  antenna's inertial position projected on east ``(-sin ra, cos ra, 0)``, north
  ``(-sin dec cos ra, -sin dec sin ra, cos dec)`` and ``s0``; a baseline's uvw is
  ``uvw[a1] - uvw[a2]``.
- Satellites move in the same inertial frame. Any object with the :class:`Orbits` protocol
  (``n_sat``, ``names``, ``label(s)``, ``inertial(times_s, n_deriv)``) can be passed where
  orbits are taken: :class:`CircularOrbits` here, or SGP4 orbits from TLE element sets
  (:class:`tabascal.observation.tle.TleOrbits`). Circular orbits are
  ``r(t) = Rz(raan) Rx(incl) Rz(u0) R [cos nt, sin nt, 0]`` with ``R = R_EARTH + altitude``,
  ``n = sqrt(GM_EARTH / R^3)`` and ``t`` from the epoch.
- The delay of satellite s at antenna a is ``tau = -(|x_sat - x_ant| + w_ant) / c`` minus its
  mean over antennas (per satellite and time). The per-antenna signal is
  ``S_a = A_a exp(+2 pi i f tau_a)`` and a baseline's visibility ``S_a1 conj(S_a2)``. A point
  source in direction ``s`` has the far-field delay ``tau = -(-s.x_ant + w_ant) / c``; it is the
  limit of the satellite delay for a distant emitter, and is zero for ``s = s0``: the sky
  visibility ``sum I B exp(2 pi i f (tau[a1] - tau[a2]))`` is fringe-stopped at the phase centre.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Protocol, runtime_checkable

import numpy as np

C = 299_792_458.0  # speed of light, m/s
OMEGA_EARTH = 7.292115e-5  # Earth's sidereal rotation rate, rad/s (IERS)
R_EARTH = 6_378_137.0  # WGS84 equatorial radius, m
GM_EARTH = 3.986004418e14  # Earth's gravitational parameter, m^3/s^2 (WGS84)
WGS84_F = 1.0 / 298.257223563  # WGS84 flattening


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def rotate_z(xyz: np.ndarray, angle) -> np.ndarray:
    """Rotate ``xyz`` (..., 3) about z by ``angle`` rad (broadcast against ``xyz[..., 0]``).

    ITRF to inertial at time t is ``rotate_z(x, gast(t, gast0_rad))``.
    """
    c, s = np.cos(angle), np.sin(angle)
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    return np.stack([c * x - s * y, s * x + c * y, np.broadcast_to(z, (c * x).shape)], axis=-1)


def gast(times_s, gast0_rad: float) -> np.ndarray:
    """Greenwich sidereal angle (rad) at ``times_s`` (s from the start)."""
    return gast0_rad + OMEGA_EARTH * _f64(times_s)


def antenna_inertial(ant_itrf, times_s, gast0_rad: float, n_deriv: int = 0) -> np.ndarray:
    """Antenna positions in the inertial frame and their time derivatives.

    ant_itrf: (n_ant, 3) ITRF m. times_s: (n_time,) s from the start.
    Returns (n_deriv + 1, n_ant, n_time, 3) float64: ``[k]`` is the k-th derivative (m/s^k).
    """
    ant = _f64(ant_itrf)[:, None, :]
    theta = gast(times_s, gast0_rad)[None, :]
    return np.stack([earth_turn(ant, theta, k) for k in range(n_deriv + 1)])


def earth_turn(xyz, theta, m: int = 0) -> np.ndarray:
    """The m-th time derivative of ``Rz(theta(t))`` applied to the fixed ``xyz`` (..., 3), the
    turn from ITRF to the inertial frame at the sidereal angle ``theta`` (broadcast against
    ``xyz[..., 0]``): ``OMEGA_EARTH^m Rz(theta + m pi / 2)`` on the equatorial plane, nothing
    on z for m >= 1."""
    if m == 0:
        return rotate_z(xyz, theta)
    return OMEGA_EARTH**m * rotate_z(xyz * np.array([1.0, 1.0, 0.0]), theta + m * np.pi / 2)


def phase_centre_basis(ra_rad: float, dec_rad: float) -> np.ndarray:
    """Rows: the inertial unit vectors along u (east), v (north) and w (towards the source)."""
    sa, ca, sd, cd = np.sin(ra_rad), np.cos(ra_rad), np.sin(dec_rad), np.cos(dec_rad)
    return np.array([[-sa, ca, 0.0], [-sd * ca, -sd * sa, cd], [cd * ca, cd * sa, sd]])


def radec_to_unit(ra_rad, dec_rad) -> np.ndarray:
    """Inertial unit vectors (..., 3) of directions (ra, dec) in rad."""
    ra, dec = _f64(ra_rad), _f64(dec_rad)
    return np.stack([np.cos(dec) * np.cos(ra), np.cos(dec) * np.sin(ra), np.sin(dec)], axis=-1)


def antenna_uvw(ant_itrf, times_s, gast0_rad: float, ra_rad: float, dec_rad: float) -> np.ndarray:
    """Per-antenna (u, v, w) in m: (n_time, n_ant, 3) float64.

    A baseline's uvw is ``uvw[:, a1] - uvw[:, a2]``.
    """
    pos = antenna_inertial(ant_itrf, times_s, gast0_rad)[0]
    return np.einsum("ij,atj->tai", phase_centre_basis(ra_rad, dec_rad), pos)


@runtime_checkable
class Orbits(Protocol):
    """What the geometry needs of a set of satellite orbits.

    n_sat: number of satellites. names: n_sat strings or None. ``label(s)``: a name for
    messages. ``inertial(times_s, n_deriv)``: positions in the inertial frame and their first
    ``n_deriv`` time derivatives at ``times_s`` (n_time,) s from the observation start, as
    (n_deriv + 1, n_sat, n_time, 3) float64 in m/s^k.
    """

    names: tuple[str, ...] | None

    @property
    def n_sat(self) -> int: ...

    def label(self, s: int) -> str: ...

    def inertial(self, times_s, n_deriv: int = 0) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class CircularOrbits:
    """Circular orbits of n_sat satellites, elements at the epoch (the observation start).

    altitude_m, inclination_rad, raan_rad (right ascension of the ascending node, measured in the
    inertial frame from its x axis) and arg_lat_rad (argument of latitude u0 at the epoch): each
    (n_sat,) float64. names: optional tuple of n_sat strings.
    """

    altitude_m: np.ndarray
    inclination_rad: np.ndarray
    raan_rad: np.ndarray
    arg_lat_rad: np.ndarray
    names: tuple[str, ...] | None = None

    def __post_init__(self):
        fields = ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad")
        arrays = {f: np.atleast_1d(_f64(getattr(self, f))) for f in fields}
        n_sat = arrays["altitude_m"].shape[0]
        for f, a in arrays.items():
            if a.shape != (n_sat,):
                raise ValueError(
                    f"CircularOrbits: {f} has shape {a.shape}, expected ({n_sat},) like altitude_m"
                )
            object.__setattr__(self, f, a)
        if np.any(arrays["altitude_m"] <= 0):
            raise ValueError("CircularOrbits: every altitude_m must be positive")
        if self.names is not None:
            names = tuple(str(n) for n in self.names)
            if len(names) != n_sat:
                raise ValueError(f"CircularOrbits: {len(names)} names for {n_sat} satellites")
            object.__setattr__(self, "names", names)

    @property
    def n_sat(self) -> int:
        return self.altitude_m.shape[0]

    @property
    def radius_m(self) -> np.ndarray:
        return R_EARTH + self.altitude_m

    @property
    def mean_motion(self) -> np.ndarray:
        """Angular rate along the orbit, rad/s: (n_sat,)."""
        return np.sqrt(GM_EARTH / self.radius_m**3)

    @property
    def period_s(self) -> np.ndarray:
        return 2 * np.pi / self.mean_motion

    def label(self, s: int) -> str:
        return self.names[s] if self.names is not None else f"satellite {s}"

    def inertial(self, times_s, n_deriv: int = 0) -> np.ndarray:
        """Positions and exact derivatives: (n_deriv + 1, n_sat, n_time, 3) float64, m/s^k."""
        t = _f64(times_s)[None, :]
        n = self.mean_motion[:, None]
        u = self.arg_lat_rad[:, None] + n * t
        ci, si = np.cos(self.inclination_rad)[:, None], np.sin(self.inclination_rad)[:, None]
        out = []
        for k in range(n_deriv + 1):
            scale = self.radius_m[:, None] * n**k
            c, s = scale * np.cos(u + k * np.pi / 2), scale * np.sin(u + k * np.pi / 2)
            in_plane = np.stack([c, s * ci, s * si], axis=-1)
            out.append(rotate_z(in_plane, self.raan_rad[:, None]))
        return np.stack(out).reshape(n_deriv + 1, self.n_sat, t.shape[1], 3)


def satellite_inertial(orbits: Orbits, times_s, n_deriv: int = 0) -> np.ndarray:
    """Satellite positions and derivatives: (n_deriv + 1, n_sat, n_time, 3) float64, m/s^k."""
    return orbits.inertial(times_s, n_deriv)


def satellite_positions(orbits: Orbits, times_s) -> np.ndarray:
    """Inertial satellite positions (m): (n_sat, n_time, 3) float64."""
    return satellite_inertial(orbits, times_s)[0]


def _range_derivatives(sep: np.ndarray) -> np.ndarray:
    """Derivatives of |d(t)| from those of d: sep (K+1, ..., 3) -> (K+1, ...).

    From rho^2 = q = d.d, Leibniz gives q^(k) = sum_j C(k,j) rho^(j) rho^(k-j), solved for rho^(k).
    """
    n = sep.shape[0]
    q = [
        sum(comb(k, j) * np.sum(sep[j] * sep[k - j], axis=-1) for j in range(k + 1))
        for k in range(n)
    ]
    rho = [np.sqrt(q[0])]
    for k in range(1, n):
        cross = sum(comb(k, j) * rho[j] * rho[k - j] for j in range(1, k))
        rho.append((q[k] - cross) / (2 * rho[0]))
    return np.stack(rho)


def rfi_delays(
    ant_itrf, orbits: Orbits, times_s, gast0_rad, ra_rad, dec_rad, n_deriv: int = 3
) -> np.ndarray:
    """Near-field satellite delays relative to the array mean, with analytic time derivatives.

    ant_itrf: (n_ant, 3) ITRF m; times_s: (n_time,) s from the start.
    Returns delay_us (n_ant, n_sat, n_time, n_deriv + 1) float64: ``[..., 0]`` is
    ``tau = -(|x_sat - x_ant| + w_ant)/c`` minus its mean over antennas, in us; ``[..., k]`` its
    k-th time derivative in us/s^k (derivatives of both rotating vectors, exact).
    """
    ant = antenna_inertial(ant_itrf, times_s, gast0_rad, n_deriv)  # (K+1, a, t, 3)
    sat = satellite_inertial(orbits, times_s, n_deriv)  # (K+1, s, t, 3)
    rho = _range_derivatives(sat[:, None] - ant[:, :, None])  # (K+1, a, s, t)
    w = ant @ radec_to_unit(ra_rad, dec_rad)  # (K+1, a, t)
    tau_us = -(rho + w[:, :, None, :]) * (1e6 / C)
    tau_us -= tau_us.mean(axis=1, keepdims=True)
    return np.moveaxis(tau_us, 0, -1)


def centre_phase(delay_us, freqs_hz) -> np.ndarray:
    """Phase ``2 pi f tau`` at channel centres, reduced to one turn: [-pi, pi] float64.

    delay_us: (n_ant, n_sat, n_time) or (n_ant, n_sat, n_time, K) float64 (only ``[..., 0]`` is
    used); freqs_hz: (n_freq,). Returns (n_ant, n_sat, n_freq, n_time). f tau is formed in float64
    cycles (~1e5 at most) before the integer turns are removed, so nothing is lost.
    """
    tau = _f64(delay_us)
    if tau.ndim == 4:
        tau = tau[..., 0]
    cycles = (_f64(freqs_hz) * 1e-6)[None, None, :, None] * tau[:, :, None, :]
    return 2 * np.pi * (cycles - np.round(cycles))


def sky_delays(
    ant_itrf, times_s, gast0_rad, ra_rad, dec_rad, src_ra_rad, src_dec_rad
) -> np.ndarray:
    """Far-field delays of point sources relative to the array mean, in us.

    ``tau = -(-s.x_ant + w_ant)/c`` (zero for a source at the phase centre).
    src_ra_rad, src_dec_rad: (n_src,). Returns (n_ant, n_src, n_time) float64.
    """
    pos = antenna_inertial(ant_itrf, times_s, gast0_rad)[0]  # (a, t, 3)
    s = radec_to_unit(np.atleast_1d(src_ra_rad), np.atleast_1d(src_dec_rad))  # (src, 3)
    rel = s - radec_to_unit(ra_rad, dec_rad)
    tau_us = np.einsum("sj,atj->ast", rel, pos) * (1e6 / C)
    return tau_us - tau_us.mean(axis=0, keepdims=True)


def geodetic_up(itrf) -> np.ndarray:
    """Unit normal to the WGS84 ellipsoid (local "up") at ITRF points (..., 3)."""
    lat, lon, _ = itrf_to_geodetic(itrf)
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=-1)


def satellite_elevation(ant_itrf, orbits: Orbits, times_s, gast0_rad) -> np.ndarray:
    """Elevation (rad) of each satellite above the local horizon at the array centre.

    The array centre is the mean ITRF antenna position; "up" is the WGS84 normal there.
    Returns (n_sat, n_time) float64.
    """
    centre = _f64(ant_itrf).mean(axis=0)
    theta = gast(times_s, gast0_rad)
    up = rotate_z(geodetic_up(centre)[None, :], theta[:, None])[:, 0]  # (t, 3)
    rel = satellite_positions(orbits, times_s) - rotate_z(centre[None, :], theta[:, None])[:, 0]
    rel /= np.linalg.norm(rel, axis=-1, keepdims=True)
    return np.arcsin(np.clip(np.sum(rel * up, axis=-1), -1.0, 1.0))


def satellite_angular_speed(ant_itrf, orbits: Orbits, times_s, gast0_rad) -> np.ndarray:
    """Angular speed (rad/s) of each satellite's sightline from the array centre,
    ``|rho x rho'| / |rho|^2`` with rho the satellite's position relative to the centre in the
    inertial frame (the Earth's rotation included). Returns (n_sat, n_time) float64."""
    centre = _f64(ant_itrf).mean(axis=0, keepdims=True)
    ant = antenna_inertial(centre, times_s, gast0_rad, 1)[:, 0]  # (2, t, 3)
    sat = satellite_inertial(orbits, times_s, 1)  # (2, s, t, 3)
    rho, rate = sat[0] - ant[0], sat[1] - ant[1]
    return np.linalg.norm(np.cross(rho, rate), axis=-1) / np.sum(rho * rho, axis=-1)


def satellite_sightlines(ant_itrf, orbits, times_s, gast0_rad, ra_rad, dec_rad):
    """Range and off-axis angle of each satellite seen from each antenna.

    Returns (range_m, sin_offset), each (n_ant, n_sat, n_time) float64: the distance to the
    satellite and the sine of its angle from the phase centre (where a tracking station points).
    """
    ant = antenna_inertial(ant_itrf, times_s, gast0_rad)[0]  # (a, t, 3)
    rel = satellite_positions(orbits, times_s)[None] - ant[:, None]  # (a, s, t, 3)
    range_m = np.linalg.norm(rel, axis=-1)
    cos_off = (rel @ radec_to_unit(ra_rad, dec_rad)) / range_m
    return range_m, np.sqrt(np.clip(1.0 - cos_off**2, 0.0, 1.0))


def _field_bound(per_antenna, a1, a2, fov_radius_rad, block: int) -> np.ndarray:
    """max over t of ``|(x, y)| sin r + |z| (1 - cos r)`` of each baseline's difference of
    ``per_antenna`` (n_time, n_ant, 3): (n_bl,) float64, ``block`` baselines at a time (at 2048
    stations a whole (n_time, n_bl, 3) difference is 7.5 GB)."""
    a1, a2 = np.asarray(a1), np.asarray(a2)
    out = np.empty(a1.shape[0])
    sin_r, versin_r = np.sin(fov_radius_rad), 1 - np.cos(fov_radius_rad)
    for start in range(0, a1.shape[0], block):
        rows = slice(start, start + block)
        d = per_antenna[:, a1[rows]] - per_antenna[:, a2[rows]]  # (t, block, 3)
        bound = np.hypot(d[..., 0], d[..., 1]) * sin_r + np.abs(d[..., 2]) * versin_r
        out[rows] = bound.max(axis=0)
    return out


def max_sky_fringe_rate(
    ant_itrf, a1, a2, times_s, gast0_rad, ra_rad, dec_rad, freqs_hz, fov_radius_rad,
    block: int = 4096,
) -> np.ndarray:  # fmt: skip
    """Largest fringe rate (Hz) of a sky source within ``fov_radius_rad`` of the phase centre.

    For a source at (l, m) the fringe-stopped phase is ``f/c (u l + v m + w (n - 1))``; its rate
    is bounded by ``f/c (|(du, dv)/dt| sin r + |dw/dt| (1 - cos r))``, maximised over times and
    the top channel. a1, a2: (n_bl,) int. Returns (n_bl,) float64.
    """
    vel = antenna_inertial(ant_itrf, times_s, gast0_rad, n_deriv=1)[1]  # (a, t, 3)
    duvw = np.einsum("ij,atj->tai", phase_centre_basis(ra_rad, dec_rad), vel)
    return _field_bound(duvw, a1, a2, fov_radius_rad, block) * np.max(freqs_hz) / C


def max_sky_delay_s(
    ant_itrf, a1, a2, times_s, gast0_rad, ra_rad, dec_rad, fov_radius_rad, block: int = 4096
) -> np.ndarray:
    """Largest delay (s) of a sky source within ``fov_radius_rad`` of the phase centre.

    A source at (l, m) reaches the two antennas of a baseline ``(u l + v m + w (n - 1)) / c``
    apart (u, v, w in m), bounded by ``(|(u, v)| sin r + |w| (1 - cos r)) / c``: the inverse of
    the bandwidth over which the baseline's sky decorrelates. Maximised over times.
    a1, a2: (n_bl,) int. Returns (n_bl,) float64.
    """
    uvw = antenna_uvw(ant_itrf, times_s, gast0_rad, ra_rad, dec_rad)
    return _field_bound(uvw, a1, a2, fov_radius_rad, block) / C


def rfi_fringe_winding(delay_us, a1, a2, freqs_hz, int_time, chan_width, block: int = 4096):
    """Largest phase winding of each baseline's RFI across one cell, in cycles.

    delay_us: (n_ant, n_sat, n_time, n_deriv + 1 >= 2) from :func:`rfi_delays` at cell centres;
    a1, a2: (n_bl,). Returns (time_cycles, freq_cycles), each (n_bl,) float64, maxima over
    satellites and cells: ``f_top (|d1| T + |d2| T^2/8)`` across an integration of
    ``T = int_time`` s (the d2 term when a second derivative is given) and ``chan_width |d0|``
    across a channel, with d_k the baseline's delay difference (us/s^k) and f_top (MHz) the top
    edge of the band.
    """
    a1, a2 = np.asarray(a1), np.asarray(a2)
    f_top_mhz = (np.max(freqs_hz) + chan_width / 2) * 1e-6
    time_cycles = np.empty(a1.shape[0])
    freq_cycles = np.empty(a1.shape[0])
    for start in range(0, a1.shape[0], block):
        rows = slice(start, start + block)
        d = delay_us[a1[rows]] - delay_us[a2[rows]]  # (bl, s, t, K)
        rate = np.abs(d[..., 1]) * int_time
        if d.shape[-1] > 2:
            rate = rate + np.abs(d[..., 2]) * int_time**2 / 8
        time_cycles[rows] = f_top_mhz * rate.max(axis=(1, 2))
        freq_cycles[rows] = chan_width * 1e-6 * np.abs(d[..., 0]).max(axis=(1, 2))
    return time_cycles, freq_cycles


def geodetic_to_itrf(lat_rad, lon_rad, height_m) -> np.ndarray:
    """WGS84 geodetic latitude, longitude (rad) and height (m) to ITRF (..., 3) m."""
    lat, lon, h = _f64(lat_rad), _f64(lon_rad), _f64(height_m)
    e2 = WGS84_F * (2 - WGS84_F)
    n = R_EARTH / np.sqrt(1 - e2 * np.sin(lat) ** 2)
    return np.stack(
        [
            (n + h) * np.cos(lat) * np.cos(lon),
            (n + h) * np.cos(lat) * np.sin(lon),
            (n * (1 - e2) + h) * np.sin(lat),
        ],
        axis=-1,
    )


def itrf_to_geodetic(itrf):
    """ITRF (..., 3) m to WGS84 (lat_rad, lon_rad, height_m), by fixed-point iteration."""
    xyz = _f64(itrf)
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    e2 = WGS84_F * (2 - WGS84_F)
    p = np.hypot(x, y)
    lat = np.arctan2(z, p * (1 - e2))
    for _ in range(8):  # converges to < 1e-15 rad within 5 steps at terrestrial heights
        n = R_EARTH / np.sqrt(1 - e2 * np.sin(lat) ** 2)
        h = p / np.cos(lat) - n
        lat = np.arctan2(z, p * (1 - e2 * n / (n + h)))
    n = R_EARTH / np.sqrt(1 - e2 * np.sin(lat) ** 2)
    return lat, np.arctan2(y, x), p / np.cos(lat) - n


def enu_to_itrf(enu, lat_rad: float, lon_rad: float, height_m: float) -> np.ndarray:
    """Local east-north-up offsets (n, 3) m about a WGS84 reference point to ITRF (n, 3) m."""
    sl, cl, sp, cp = np.sin(lon_rad), np.cos(lon_rad), np.sin(lat_rad), np.cos(lat_rad)
    east = np.array([-sl, cl, 0.0])
    north = np.array([-sp * cl, -sp * sl, cp])
    up = np.array([cp * cl, cp * sl, sp])
    ref = geodetic_to_itrf(lat_rad, lon_rad, height_m)
    return ref + _f64(enu) @ np.stack([east, north, up])


def greenwich_sidereal_angle(epoch_utc) -> float:
    """Greenwich mean sidereal angle (rad) at a UTC ``datetime`` (IAU 1982 GMST).

    UT1 is taken equal to UTC (|UT1 - UTC| < 0.9 s) and the equation of the equinoxes (< 1.2 s)
    is neglected: the simulator stores the angle it used, so the geometry stays consistent.
    """
    from datetime import UTC, datetime

    j2000 = datetime(2000, 1, 1, 12, tzinfo=UTC)
    epoch = epoch_utc if epoch_utc.tzinfo else epoch_utc.replace(tzinfo=UTC)
    d = (epoch - j2000).total_seconds() / 86400.0
    t = d / 36525.0
    deg = 280.46061837 + 360.98564736629 * d + 0.000387933 * t**2 - t**3 / 38710000.0
    return float(np.deg2rad(deg % 360.0))
