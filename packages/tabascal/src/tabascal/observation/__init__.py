"""Where the array and the emitters are: the geometry of the sky and the Earth (``geometry``),
orbits from two-line elements (``tle``), orbits displaced along their radial, in-track and
cross-track directions (``orbit_offsets``), ground transmitters and aircraft tracks
(``emitters``), station positions (``stations``) and the station beam (``beam``).

The face gives the kinds of orbit, the readers of element sets and station layouts, and the
satellites' elevation; the geometry's formulas are used from ``geometry`` itself.
"""

from tabascal.observation.emitters import AircraftTracks, Emitters, GroundEmitters, Track
from tabascal.observation.geometry import CircularOrbits, Orbits, satellite_elevation
from tabascal.observation.orbit_offsets import OffsetOrbits
from tabascal.observation.stations import ArrayReference, read_layout, ska_low_like_itrf
from tabascal.observation.tle import TleError, TleOrbits, load_tle_orbits, parse_tle

__all__ = [
    "AircraftTracks",
    "ArrayReference",
    "CircularOrbits",
    "Emitters",
    "GroundEmitters",
    "OffsetOrbits",
    "Orbits",
    "TleError",
    "TleOrbits",
    "Track",
    "load_tle_orbits",
    "parse_tle",
    "read_layout",
    "satellite_elevation",
    "ska_low_like_itrf",
]
