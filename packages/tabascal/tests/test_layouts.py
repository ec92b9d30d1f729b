import numpy as np
import pytest

from tabascal.observation import geometry as geo
from tabascal.observation.stations import (
    SKA_LOW_SITE,
    ArrayReference,
    read_layout,
    ska_low_like_enu,
    ska_low_like_itrf,
)


def _min_separation(xyz):
    d = np.linalg.norm(xyz[:, None] - xyz[None], axis=-1)
    d[np.diag_indices(len(xyz))] = np.inf
    return d.min()


@pytest.mark.parametrize("n", [2, 7, 16, 96, 512])
def test_generated_layout_has_n_separated_stations_and_is_deterministic(n):
    enu = ska_low_like_enu(n)
    assert enu.shape == (n, 3)
    np.testing.assert_array_equal(enu, ska_low_like_enu(n))
    assert _min_separation(enu) >= 1.5 * 38.0


def test_512_station_layout_resembles_ska_low():
    enu = ska_low_like_enu(512)
    radius = np.linalg.norm(enu[:, :2], axis=1)
    assert np.sum(radius < 600.0) == 224  # the dense core
    longest = np.linalg.norm(enu[:, None, :2] - enu[None, :, :2], axis=-1).max()
    assert 60e3 < longest < 70e3
    assert radius.max() == pytest.approx(37_500.0, abs=2 * 1.72 * 38.0)


def test_crowded_arms_move_outwards_instead_of_overlapping():
    enu = ska_low_like_enu(600, max_radius_m=2000.0)
    assert _min_separation(enu) >= 1.5 * 38.0
    assert np.linalg.norm(enu[:, :2], axis=1).max() > 2000.0


def test_itrf_layout_sits_on_the_site():
    itrf = ska_low_like_itrf(16, max_radius_m=1500.0)
    lat, lon, h = geo.itrf_to_geodetic(itrf)
    np.testing.assert_allclose(np.rad2deg(lat), SKA_LOW_SITE.lat_deg, atol=0.02)
    np.testing.assert_allclose(np.rad2deg(lon), SKA_LOW_SITE.lon_deg, atol=0.02)
    # the ellipsoid curves away below a tangent plane: a station r from the centre is r^2 / 2R up
    r = np.linalg.norm(ska_low_like_enu(16, max_radius_m=1500.0), axis=1)
    np.testing.assert_allclose(h - SKA_LOW_SITE.height_m, r**2 / (2 * geo.R_EARTH), rtol=0.01)


def test_read_enu_layout_with_names_and_comments(tmp_path):
    path = tmp_path / "layout.txt"
    path.write_text("# name east north up\nS1 0 0 0\n\nS2, 100.0, 0, 0  # east\nS3 0 200 1\n")
    ref = ArrayReference(-30.0, 21.0, 1000.0)
    itrf, names = read_layout(path, "enu", ref)
    assert names == ("S1", "S2", "S3")
    assert np.linalg.norm(itrf[1] - itrf[0]) == pytest.approx(100.0, abs=1e-6)
    assert np.linalg.norm(itrf[2] - itrf[0]) == pytest.approx(np.hypot(200, 1), abs=1e-6)
    np.testing.assert_allclose(itrf[0], ref.enu_to_itrf(np.zeros((1, 3)))[0])


def test_read_itrf_layout_round_trips(tmp_path):
    itrf = ska_low_like_itrf(5, max_radius_m=1500.0)
    path = tmp_path / "itrf.txt"
    np.savetxt(path, itrf, fmt="%.6f")
    got, names = read_layout(path, "itrf")
    assert names is None
    np.testing.assert_allclose(got, itrf, atol=1e-6)


@pytest.mark.parametrize(
    ("text", "frame", "message"),
    [
        ("0 0 0\n1 2\n", "enu", "line 2"),
        ("0 0 0\n", "enu", "need at least 2"),
        ("0 0 0\n10 0 0\n", "itrf", "not geocentric ITRF"),
        ("a 0 0 0\n10 0 0\n", "enu", "every station has a name or none"),
    ],
)
def test_bad_layout_files_are_refused_with_the_reason(tmp_path, text, frame, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_layout(path, frame, SKA_LOW_SITE)


def test_enu_layout_needs_a_reference(tmp_path):
    path = tmp_path / "l.txt"
    path.write_text("0 0 0\n1 0 0\n")
    with pytest.raises(ValueError, match="reference position is required"):
        read_layout(path, "enu")
