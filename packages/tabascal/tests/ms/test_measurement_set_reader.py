"""Reading Measurement Sets: every field, correlations, flags, noise, selections, row ranges."""

import logging
from datetime import UTC, datetime

import numpy as np
import pytest
from casacore import tables
from casacore.measures import measures
from casacore.quanta import quantity
from msbuild import build_ms, expected_cube

from tabascal.measurement_set import MeasurementSetReader, MsError, read_observation_ms
from tabascal.observation import geometry as geo

EPOCH = datetime(2024, 6, 21, 10, 0, 1, tzinfo=UTC)  # first TIME centre minus INTERVAL / 2


def _all(written):
    return np.ones(written.time.size, bool)


def test_round_trip_of_every_field(tmp_path):
    w = build_ms(tmp_path / "a.ms", n_ant=5, n_time=4, n_chan=3, corr=("XX", "YY"))
    obs = read_observation_ms(tmp_path / "a.ms", correlation="XX")
    n_time = 4
    np.testing.assert_array_equal(obs.a1, w.ant1[:10])
    np.testing.assert_array_equal(obs.a2, w.ant2[:10])
    assert obs.a1.dtype == np.int32 and (obs.n_bl, obs.n_bl_total, obs.rows) == (
        10,
        10,
        slice(0, 10),
    )
    np.testing.assert_array_equal(obs.ant_itrf, w.positions)
    assert obs.dish_diameter_m == 13.5
    start = datetime(2024, 6, 21, 10, 0, tzinfo=UTC)
    assert obs.epoch_utc == start.isoformat()
    np.testing.assert_allclose(obs.times_s, (np.arange(n_time) + 0.5) * 2.0, rtol=0, atol=1e-6)
    assert obs.int_time == 2.0 and obs.chan_width == w.chan_width
    np.testing.assert_array_equal(obs.freqs_hz, w.freqs[0])
    assert obs.gast0_rad == geo.greenwich_sidereal_angle(start)
    vis = expected_cube(w, w.data[..., 0], _all(w), n_time)
    np.testing.assert_array_equal(obs.vis, vis)
    flags = expected_cube(w, w.flag[..., 0] | w.flag_row[:, None], _all(w), n_time)
    np.testing.assert_array_equal(obs.flags, flags)
    np.testing.assert_array_equal(obs.noise, w.sigma[:10, 0].astype(np.float64))
    assert obs.orbits.n_sat == 0 and obs.truth is None
    ms = obs.metadata["measurement_set"]
    assert ms["antenna_names"] == [f"M{a:03d}" for a in range(5)]
    assert (ms["spw"], ms["field"], ms["correlation"], ms["column"]) == (0, 0, "XX", "DATA")


def test_phase_centre_gives_casacore_w(tmp_path):
    """w of every baseline from tabascal's geometry with the converted phase centre equals
    casacore's own J2000 uvw computation (w is frame-independent; u and v are not)."""
    w = build_ms(tmp_path / "a.ms", n_ant=5, n_time=2)
    obs = read_observation_ms(tmp_path / "a.ms")
    ours = geo.antenna_uvw(obs.ant_itrf, obs.times_s, obs.gast0_rad, obs.ra_rad, obs.dec_rad)
    dm = measures()
    rel = w.positions - w.positions.mean(axis=0)
    baselines = dm.baseline("itrf", *(quantity(rel[:, k].tolist(), "m") for k in range(3)))
    ra, dec = w.phase_dir[0]
    for k, t in enumerate(np.unique(w.time)):
        dm.do_frame(dm.epoch("UTC", f"{float(t) / 86400!r}d"))
        dm.do_frame(dm.position("ITRF", *(f"{float(x)!r}m" for x in w.positions.mean(axis=0))))
        dm.do_frame(dm.direction("J2000", f"{float(ra)!r}rad", f"{float(dec)!r}rad"))
        theirs = np.asarray(dm.to_uvw(baselines)["xyz"].get_value()).reshape(-1, 3)
        w_ours = ours[k, obs.a2, 2] - ours[k, obs.a1, 2]
        w_theirs = theirs[obs.a2, 2] - theirs[obs.a1, 2]
        # measured 2e-6 m on baselines up to 1.1 km (3e-9 rad); ignoring precession: ~6 m
        np.testing.assert_allclose(w_ours, w_theirs, rtol=0, atol=1e-4)


def test_stokes_i_from_parallel_hands(tmp_path):
    w = build_ms(tmp_path / "a.ms", corr=("XX", "XY", "YX", "YY"), n_time=3)
    obs = read_observation_ms(tmp_path / "a.ms", correlation="I")
    i = 0.5 * (w.data[..., 0] + w.data[..., 3])
    np.testing.assert_allclose(obs.vis, expected_cube(w, i, _all(w), 3), rtol=1e-6)
    either = w.flag[..., 0] | w.flag[..., 3] | w.flag_row[:, None]
    np.testing.assert_array_equal(obs.flags, expected_cube(w, either, _all(w), 3))
    s = w.sigma[:10].astype(np.float64)
    np.testing.assert_allclose(obs.noise, 0.5 * np.hypot(s[:, 0], s[:, 3]), rtol=1e-15)
    assert obs.metadata["measurement_set"]["correlation"] == "I = (XX + YY) / 2"


@pytest.mark.parametrize(
    "corr, wanted, index",
    [(("XX", "YY"), "YY", 1), (("RR", "RL", "LR", "LL"), "LL", 3), (("RR", "LL"), "rr", 0),
     (("I",), "I", 0)],
)  # fmt: skip
def test_correlation_is_chosen_by_its_type(tmp_path, corr, wanted, index):
    w = build_ms(tmp_path / "a.ms", corr=corr, n_time=2)
    obs = read_observation_ms(tmp_path / "a.ms", correlation=wanted)
    np.testing.assert_array_equal(obs.vis, expected_cube(w, w.data[..., index], _all(w), 2))
    np.testing.assert_array_equal(obs.noise, w.sigma[:10, index].astype(np.float64))


def test_missing_correlation_is_named(tmp_path):
    build_ms(tmp_path / "a.ms", corr=("RR", "LL"), n_time=2)
    with pytest.raises(MsError, match="correlation XX is not in the data, which hold RR, LL"):
        read_observation_ms(tmp_path / "a.ms", correlation="XX")
    build_ms(tmp_path / "b.ms", corr=("XX", "XY"), n_time=2)
    with pytest.raises(MsError, match=r"Stokes I needs .* the data hold XX, XY"):
        read_observation_ms(tmp_path / "b.ms")


def test_scalar_sigma_and_non_finite_data(tmp_path):
    w = build_ms(tmp_path / "a.ms", sigma="scalar", n_time=2)
    with tables.table(str(tmp_path / "a.ms"), readonly=False, ack=False) as ms:
        ms.putcell("DATA", 3, np.full((3, 2), np.nan, np.complex64))
    obs = read_observation_ms(tmp_path / "a.ms", correlation="XX")
    assert obs.noise.shape == () and obs.noise == np.float64(np.float32(1.25))
    assert obs.flags[3, :, 0].all()
    expected = expected_cube(w, w.flag[..., 0] | w.flag_row[:, None], _all(w), 2)
    expected[3, :, 0] = True
    np.testing.assert_array_equal(obs.flags, expected)


def test_sigma_varying_in_time_is_averaged_in_quadrature(tmp_path, caplog):
    w = build_ms(tmp_path / "a.ms", sigma="varying", n_time=3)
    with caplog.at_level(logging.WARNING):
        obs = read_observation_ms(tmp_path / "a.ms", correlation="XX")
    assert "SIGMA varies in time" in caplog.text
    s = expected_cube(w, w.sigma[:, 0].astype(np.float64), _all(w), 3)  # (n_bl, n_time)
    good = ~expected_cube(w, w.flag_row, _all(w), 3)
    good[~good.any(axis=1)] = True
    expected = np.sqrt(np.sum(np.where(good, s**2, 0), axis=1) / good.sum(axis=1))
    np.testing.assert_allclose(obs.noise, expected, rtol=1e-15)


def test_autocorrelations_are_left_out(tmp_path):
    w = build_ms(tmp_path / "a.ms", autocorrelations=True, n_time=2)
    obs = read_observation_ms(tmp_path / "a.ms", correlation="XX")
    cross = w.ant1 != w.ant2
    np.testing.assert_array_equal(obs.vis, expected_cube(w, w.data[..., 0], cross, 2))
    assert obs.n_bl == 10
    assert obs.metadata["measurement_set"]["autocorrelation_rows_dropped"] == 10


def test_baseline_order_may_change_between_integrations(tmp_path):
    w = build_ms(tmp_path / "a.ms", n_time=3)
    order = np.random.default_rng(1).permutation(10)  # integration 1 in another order
    with tables.table(str(tmp_path / "a.ms"), readonly=False, ack=False) as ms:
        for name in ("ANTENNA1", "ANTENNA2", "DATA", "FLAG", "FLAG_ROW", "SIGMA"):
            ms.putcol(name, ms.getcol(name, startrow=10, nrow=10)[order], startrow=10, nrow=10)
    obs = read_observation_ms(tmp_path / "a.ms", correlation="XX")
    np.testing.assert_array_equal(obs.vis, expected_cube(w, w.data[..., 0], _all(w), 3))


def test_descending_channels_are_reversed(tmp_path):
    w = build_ms(tmp_path / "a.ms", descending=True, n_time=2)
    obs = read_observation_ms(tmp_path / "a.ms", correlation="XX")
    np.testing.assert_array_equal(obs.freqs_hz, w.freqs[0][::-1])
    assert obs.chan_width == w.chan_width
    vis = expected_cube(w, w.data[:, ::-1, 0], _all(w), 2)
    np.testing.assert_array_equal(obs.vis, vis)


def test_spectral_window_and_field_selection(tmp_path):
    w = build_ms(tmp_path / "a.ms", n_spw=2, n_time=4)
    obs = read_observation_ms(tmp_path / "a.ms", correlation="XX", spw=1)
    np.testing.assert_array_equal(obs.freqs_hz, w.freqs[1])
    np.testing.assert_array_equal(obs.vis, expected_cube(w, w.data[..., 0], w.ddid == 1, 4))
    w = build_ms(tmp_path / "b.ms", n_field=2, n_time=4)
    obs = read_observation_ms(tmp_path / "b.ms", correlation="XX", field=1)
    np.testing.assert_array_equal(obs.vis, expected_cube(w, w.data[..., 0], w.field_id == 1, 2))
    assert obs.epoch_utc == datetime(2024, 6, 21, 10, 0, 4, tzinfo=UTC).isoformat()


def test_antennas_without_baselines_are_left_out(tmp_path):
    build_ms(tmp_path / "a.ms", n_time=2)
    with tables.table(str(tmp_path / "a.ms"), readonly=False, ack=False) as ms:
        a1, a2 = ms.getcol("ANTENNA1"), ms.getcol("ANTENNA2")
        ms.removerows(np.flatnonzero((a1 == 2) | (a2 == 2)))
    obs = read_observation_ms(tmp_path / "a.ms", correlation="XX")
    assert obs.metadata["measurement_set"]["antenna_ids"] == [0, 1, 3, 4]
    assert obs.n_ant == 4 and obs.n_bl == 6 and obs.a2.max() == 3


@pytest.mark.parametrize("n_spw", [1, 3])
def test_row_range_reads_only_its_rows(tmp_path, monkeypatch, n_spw):
    """A baseline block reads its own rows of the big columns and no others, counted by
    wrapping casacore's getcol (contiguous runs for one window, a row selection for three)."""
    build_ms(tmp_path / "a.ms", n_spw=n_spw, n_time=4, n_ant=6)
    full = read_observation_ms(tmp_path / "a.ms", spw=0)
    counted = []
    original = tables.table.getcol

    def getcol(self, name, *args, **kwargs):
        out = original(self, name, *args, **kwargs)
        if name in ("DATA", "FLAG"):
            counted.append((name, len(out)))
        return out

    monkeypatch.setattr(tables.table, "getcol", getcol)
    with MeasurementSetReader(tmp_path / "a.ms", spw=0) as reader:
        block = reader.read(slice(4, 9))
    np.testing.assert_array_equal(block.vis, full.vis[4:9])
    np.testing.assert_array_equal(block.flags, full.flags[4:9])
    np.testing.assert_array_equal(block.noise, full.noise[4:9])
    np.testing.assert_array_equal(block.a1, full.a1[4:9])
    assert block.rows == slice(4, 9) and block.n_bl_total == 15
    assert sum(n for name, n in counted if name == "DATA") == 5 * 4
    assert reader.stats.rows_read == 3 * 5 * 4  # DATA, FLAG and FLAG_ROW
