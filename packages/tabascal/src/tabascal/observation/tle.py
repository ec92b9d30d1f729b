"""Satellite orbits from two-line element sets (TLE), propagated with SGP4.

Propagation is the ``sgp4`` package (Vallado's C++ SGP4/SDP4, with the WGS72 constants the
element sets are fitted with). It gives positions and velocities in TEME, the frame of the true
equator and the mean equinox of each instant, which is the Earth-fixed frame (ITRF without
polar motion) rotated about z by the Greenwich mean sidereal angle: ``r_earth = Rz(-GMST) r_teme``.

Frame conversion. tabascal's inertial frame is the ITRF rotated about z by
``gast(t) = gast0_rad + OMEGA_EARTH t`` (:mod:`tabascal.observation.geometry`), so a TEME
vector becomes

    ``r(t) = Rz(phi(t)) r_teme(t)``,  ``phi(t) = gast0_rad + OMEGA_EARTH t - GMST(t)``,

with GMST the IAU 1982 angle of :func:`tabascal.observation.geometry.greenwich_sidereal_angle` at
UT1 = UTC + ``ut1_utc_s``. ``phi(0) = gast0_rad - GMST(epoch)`` is zero when gast0_rad is the
GMST of the start, as the simulator and ``import-ms`` set it; phi then drifts at
``OMEGA_EARTH - dGMST/dt``, about -8.6e-12 rad/s (OMEGA_EARTH is the IERS rate, the GMST
formula's differs in the 10th digit). GMST(t) - GMST(epoch) is evaluated from the formula's
increments, so phi stays exact to ~1e-14 rad over years. Each satellite thus sits exactly
where SGP4 puts it relative to the rotating Earth, hence relative to the antennas; velocities
include the ``dphi/dt`` term. Taking UT1 = UTC (``ut1_utc_s = 0``) misplaces a satellite along the
Earth's rotation by ``OMEGA_EARTH |UT1 - UTC| r``: up to 1.7 km for GNSS orbits (|UT1 - UTC| <
0.9 s), comparable with the element sets' own error (about 1 km at their epoch, growing by
kilometres per day); give ``ut1_utc_s`` from IERS Bulletin A to remove it.

Derivatives. The 1st to 3rd time derivatives are central differences of the SGP4 positions
over a 7-point stencil of step ``h = STEP_ANGLE_RAD / n`` (n the mean motion; h = 14 s for a
550 km orbit, 100 s for GPS): sixth-order for the velocity and acceleration, fourth-order for
the third derivative, whose truncation ``7/120 (n h)^4`` = 3e-9 and SGP4's rounding amplified
by ``h^-3`` (measured 2e-9 at this step) give ~5e-9 relative; the velocity and acceleration
are good to 1e-11. SGP4's own velocity is not used: it departs from the derivative of SGP4's
positions by 1e-6 (LEO) to 4e-6 (GNSS) of the speed, and the delay model needs derivatives
of the positions it uses.

Accuracy (tests/test_tle.py). Against the sgp4 package's published verification vectors
(SGP4-VER.TLE / tcppver.out, Vallado et al. 2006: 32 element sets, 666 times, near-Earth and
deep-space), rotated back to TEME, positions agree to 1.2e-7 km at worst (the sgp4 package's
own test allows 2e-7 km). Rotated to the Earth-fixed frame as the antennas are, they agree with
the TEME -> PEF rotation by GMST(UT1) to 3e-5 m. A zero-eccentricity element set made from a
:class:`tabascal.observation.geometry.CircularOrbits` orbit follows the circle to 16 km (6e-4 of the
radius, GPS altitude) and 15 km (2e-3, 550 km) over an hour: SGP4 models the Earth's J2 and,
for deep-space orbits, the Moon and Sun, which a Keplerian circle does not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from sgp4.api import SGP4_ERRORS, WGS72, Satrec, jday

from tabascal import TabascalError
from tabascal.observation.geometry import OMEGA_EARTH, R_EARTH, greenwich_sidereal_angle, rotate_z

log = logging.getLogger(__name__)

STEP_ANGLE_RAD = 0.015  # mean anomaly per differencing step (see module docstring)
MAX_DERIV = 3
STALE_DAYS = 3.0  # warn when an element set is older or newer than this at the observation


class TleError(TabascalError, ValueError):
    """An element set that cannot be read or propagated; the message names it."""


@dataclass(frozen=True)
class TleEntry:
    """One element set of a file: its title line (or None) and its two lines."""

    name: str | None
    line1: str
    line2: str

    @property
    def catalogue_number(self) -> int:
        return int(Satrec.twoline2rv(self.line1, self.line2, WGS72).satnum)


def _checksum_ok(line: str) -> bool:
    digits = sum(int(c) for c in line[:68] if c.isdigit()) + line[:68].count("-")
    return len(line) >= 69 and line[68].isdigit() and digits % 10 == int(line[68])


def parse_tle(text: str, source: str = "<text>") -> list[TleEntry]:
    """Element sets of a TLE text (two-line or three-line format, blank lines ignored).

    Raises :class:`TleError` naming the line for an unpaired line or a bad checksum.
    """
    lines = [ln.rstrip() for ln in text.splitlines()]
    entries, name, k = [], None, 0
    while k < len(lines):
        line = lines[k]
        if not line.strip():
            k += 1
            continue
        if line.startswith("1 "):
            second = lines[k + 1] if k + 1 < len(lines) else ""
            if not second.startswith("2 "):
                raise TleError(
                    f"{source}: line {k + 1} starts an element set but line {k + 2} is not its "
                    "second line (starting '2 ')"
                )
            for offset, ln in ((0, line), (1, second)):
                if not _checksum_ok(ln):
                    raise TleError(
                        f"{source}: line {k + 1 + offset} has a wrong checksum (last digit); "
                        "the element set is corrupt"
                    )
            entries.append(TleEntry(name, line, second))
            name, k = None, k + 2
        elif line.startswith("2 "):
            raise TleError(f"{source}: line {k + 1} is a second line without a first line")
        else:
            name = line[2:].strip() if line.startswith("0 ") else line.strip()
            k += 1
    return entries


def _as_datetime(epoch_utc) -> datetime:
    epoch = datetime.fromisoformat(epoch_utc) if isinstance(epoch_utc, str) else epoch_utc
    return epoch.replace(tzinfo=UTC) if epoch.tzinfo is None else epoch.astimezone(UTC)


def _gmst_since(epoch: datetime, times_s: np.ndarray) -> np.ndarray:
    """GMST(epoch + t) - GMST(epoch) (rad): (n_time,) float64.

    The IAU 1982 formula of geometry.greenwich_sidereal_angle, written as increments modulo
    whole turns so that no large angle is rounded (1e-14 rad over years).
    """
    c0 = (epoch - datetime(2000, 1, 1, 12, tzinfo=UTC)).total_seconds() / 86400.0 / 36525.0
    days = times_s / 86400.0
    dc = days / 36525.0
    c = c0 + dc
    # 360 days is whole turns but for its fraction: keep only that (exact) part
    deg = (
        360.0 * (days % 1.0)
        + 0.98564736629 * days
        + 0.000387933 * dc * (c + c0)
        - dc * (c**2 + c * c0 + c0**2) / 38710000.0
    )
    return np.deg2rad(deg)


@dataclass(frozen=True, eq=False)
class TleOrbits:
    """SGP4 orbits of n_sat satellites in the inertial frame of an observation.

    line1, line2: n_sat TLE lines each. epoch_utc: the observation start (ISO 8601 string or
    datetime; stored as a string), which ``times_s`` count from. gast0_rad: the observation's
    Greenwich sidereal angle at the start (default: GMST of epoch_utc, as the simulator uses).
    names: n_sat strings or None. ut1_utc_s: UT1 - UTC (s) for the Earth's orientation.
    Implements :class:`tabascal.observation.geometry.Orbits`.
    """

    line1: tuple[str, ...]
    line2: tuple[str, ...]
    epoch_utc: str
    gast0_rad: float | None = None
    names: tuple[str, ...] | None = None
    ut1_utc_s: float = 0.0

    def __post_init__(self):
        line1, line2 = tuple(self.line1), tuple(self.line2)
        if len(line1) != len(line2):
            raise TleError(f"TleOrbits: {len(line1)} first lines but {len(line2)} second lines")
        epoch = _as_datetime(self.epoch_utc)
        satrecs = []
        for k, (a, b) in enumerate(zip(line1, line2, strict=True)):
            try:
                satrecs.append(Satrec.twoline2rv(a, b, WGS72))
            except ValueError as err:
                raise TleError(f"TleOrbits: element set {k} cannot be read: {err}") from None
        if self.names is not None and len(self.names) != len(line1):
            raise TleError(f"TleOrbits: {len(self.names)} names for {len(line1)} satellites")
        gmst0 = greenwich_sidereal_angle(epoch + timedelta(seconds=float(self.ut1_utc_s)))
        gast0 = gmst0 if self.gast0_rad is None else float(self.gast0_rad)
        set_ = object.__setattr__
        set_(self, "line1", line1)
        set_(self, "line2", line2)
        set_(self, "epoch_utc", epoch.isoformat())
        set_(self, "gast0_rad", gast0)
        set_(self, "ut1_utc_s", float(self.ut1_utc_s))
        set_(self, "names", None if self.names is None else tuple(str(n) for n in self.names))
        set_(self, "_satrecs", tuple(satrecs))
        set_(self, "_jd", jday(*epoch.timetuple()[:5], epoch.second + epoch.microsecond * 1e-6))
        set_(self, "_epoch_ut1", epoch + timedelta(seconds=float(self.ut1_utc_s)))
        set_(self, "_phi0", gast0 - gmst0)

    @property
    def n_sat(self) -> int:
        return len(self.line1)

    @property
    def catalogue_numbers(self) -> tuple[int, ...]:
        return tuple(int(s.satnum) for s in self._satrecs)

    @property
    def altitude_m(self) -> np.ndarray:
        """Mean semi-major axis minus R_EARTH (m): (n_sat,) float64."""
        return np.array([s.a * s.radiusearthkm * 1e3 - R_EARTH for s in self._satrecs])

    @property
    def inclination_rad(self) -> np.ndarray:
        """Mean inclination at the element set's epoch: (n_sat,) float64."""
        return np.array([s.inclo for s in self._satrecs], dtype=np.float64)

    @property
    def mean_motion(self) -> np.ndarray:
        """Kozai mean motion (rad/s): (n_sat,) float64."""
        return np.array([s.no_kozai / 60.0 for s in self._satrecs], dtype=np.float64)

    def element_epochs(self) -> list[datetime]:
        """Each element set's own epoch (UTC)."""
        start = datetime(2000, 1, 1, 12, tzinfo=UTC)
        return [
            start + timedelta(days=(s.jdsatepoch - 2451545.0) + s.jdsatepochF)
            for s in self._satrecs
        ]

    def label(self, s: int) -> str:
        return self.names[s] if self.names is not None else f"NORAD {self.catalogue_numbers[s]}"

    def _positions(self, s: int, times_s: np.ndarray) -> np.ndarray:
        """Positions (m) of satellite s in the inertial frame: (n_time, 3) float64."""
        jd, fr = self._jd
        e, r, _ = self._satrecs[s].sgp4_array(np.full(times_s.shape, jd), fr + times_s / 86400.0)
        bad = np.flatnonzero(e)
        if bad.size:
            code = int(e[bad[0]])
            raise TleError(
                f"SGP4 cannot propagate '{self.label(s)}' to {times_s[bad[0]]:.1f} s after "
                f"{self.epoch_utc}: {SGP4_ERRORS.get(code, f'error {code}')} (element set epoch "
                f"{self.element_epochs()[s]:%Y-%m-%d %H:%M})"
            )
        turned = _gmst_since(self._epoch_ut1, times_s)
        return rotate_z(r * 1e3, self._phi0 + OMEGA_EARTH * times_s - turned)

    def inertial(self, times_s, n_deriv: int = 0) -> np.ndarray:
        """Positions and derivatives: (n_deriv + 1, n_sat, n_time, 3) float64, m/s^k.

        Derivatives by differencing SGP4 positions (see the module docstring).
        """
        if not 0 <= n_deriv <= MAX_DERIV:
            raise ValueError(f"TleOrbits.inertial: n_deriv must be 0 to {MAX_DERIV}, got {n_deriv}")
        t = np.atleast_1d(np.asarray(times_s, dtype=np.float64))
        out = np.empty((n_deriv + 1, self.n_sat, t.size, 3))
        for s in range(self.n_sat):
            if n_deriv == 0:
                out[0, s] = self._positions(s, t)
                continue
            h = STEP_ANGLE_RAD / self.mean_motion[s]
            stencil = (t[None, :] + h * np.arange(-3, 4)[:, None]).ravel()
            p = self._positions(s, stencil).reshape(7, t.size, 3)
            for k in range(n_deriv + 1):
                out[k, s] = np.tensordot(_STENCIL[k], p, axes=1) / h**k
        return out


# 7-point central-difference weights of the k-th derivative (times h^k)
_STENCIL = (
    np.array([0, 0, 0, 1, 0, 0, 0]),
    np.array([-1, 9, -45, 0, 45, -9, 1]) / 60,
    np.array([2, -27, 270, -490, 270, -27, 2]) / 180,
    np.array([1, -8, 13, 0, -13, 8, -1]) / 8,
)


def load_tle_orbits(
    path,
    catalogue_numbers,
    epoch_utc,
    *,
    gast0_rad: float | None = None,
    ut1_utc_s: float = 0.0,
) -> TleOrbits:
    """Orbits of the satellites ``catalogue_numbers`` (NORAD numbers, in that order; None: every
    satellite of the file) from the TLE file at ``path``, for an observation starting at
    ``epoch_utc`` (ISO string or datetime) with sidereal angle ``gast0_rad`` (default its GMST).

    Where a file holds several element sets of a satellite, the one whose epoch is closest to
    the observation is used; a warning is logged when it is more than STALE_DAYS away.
    Raises :class:`TleError` naming a missing file, a catalogue number not in it, or a bad line.
    """
    path = Path(path)
    try:
        entries = parse_tle(path.read_text(), str(path))
    except FileNotFoundError:
        raise TleError(f"TLE file {path} does not exist") from None
    if not entries:
        raise TleError(f"TLE file {path} holds no element sets")
    epoch = _as_datetime(epoch_utc)
    by_number: dict[int, list[TleEntry]] = {}
    for entry in entries:
        by_number.setdefault(entry.catalogue_number, []).append(entry)
    wanted = list(by_number) if catalogue_numbers is None else [int(n) for n in catalogue_numbers]
    missing = [n for n in wanted if n not in by_number]
    if missing:
        known = ", ".join(str(n) for n in list(by_number)[:10])
        more = f" and {len(by_number) - 10} more" if len(by_number) > 10 else ""
        raise TleError(
            f"TLE file {path} has no element set for catalogue number(s) "
            f"{', '.join(str(n) for n in missing)} (it holds {known}{more})"
        )
    if len(set(wanted)) != len(wanted):
        raise TleError(f"catalogue numbers must be distinct, got {wanted}")
    chosen = []
    for number in wanted:
        ages = [_age_days(e, epoch) for e in by_number[number]]
        best = int(np.argmin(np.abs(ages)))
        if abs(ages[best]) > STALE_DAYS:
            log.warning(
                "element set of %d is %.1f days from the observation; SGP4 errors grow by "
                "kilometres per day away from an element set's epoch",
                number,
                ages[best],
            )
        chosen.append(by_number[number][best])
    names = tuple(e.name or f"NORAD {n}" for e, n in zip(chosen, wanted, strict=True))
    return TleOrbits(
        line1=tuple(e.line1 for e in chosen),
        line2=tuple(e.line2 for e in chosen),
        epoch_utc=epoch.isoformat(),
        gast0_rad=gast0_rad,
        names=names,
        ut1_utc_s=ut1_utc_s,
    )


def _age_days(entry: TleEntry, epoch: datetime) -> float:
    sat = Satrec.twoline2rv(entry.line1, entry.line2, WGS72)
    jd, fr = jday(*epoch.timetuple()[:5], epoch.second + epoch.microsecond * 1e-6)
    return (jd - sat.jdsatepoch) + (fr - sat.jdsatepochF)
