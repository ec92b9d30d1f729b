"""simulate -o obs.ms, the MS conventions it writes, and the import-ms / export-ms commands."""

import dataclasses
from datetime import UTC, datetime

import numpy as np
import pytest
import zarr
from casacore import tables
from msbuild import build_ms
from sgp4.api import WGS72, Satrec
from sgp4.exporter import export_tle

from tabascal.cli import main
from tabascal.measurement_set import frames, open_observation, read_observation_ms
from tabascal.observation import geometry as geo
from tabascal.observation.tle import TleOrbits
from tabascal.store import read_observation

SMALL = """
array: {n_stations: 6}
observation: {n_time: 4, n_freq: 2, flag_fraction: 0.1, sefd_spread: 0.1}
sky: {n_sources: 2}
"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """The same simulation written as a zarr store and as a Measurement Set."""
    where = tmp_path_factory.mktemp("sim")
    (where / "sim.yaml").write_text(SMALL)
    for name in ("obs.zarr", "obs.ms"):
        args = ["simulate", "--preset", "demo", "-c", str(where / "sim.yaml"), "--seed", "3"]
        assert main([*args, "-o", str(where / name), "-q"]) == 0
    return where


def test_simulated_ms_reads_as_the_simulated_store(simulated):
    store = read_observation(simulated / "obs.zarr", truth=False)
    ms = open_observation(simulated / "obs.ms")
    assert ms.truth is None and np.ndim(store.noise) == 1
    for f in dataclasses.fields(store):
        a, b = getattr(store, f.name), getattr(ms, f.name)
        if f.name == "orbits":
            assert b.names == a.names
            for name in ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad"):
                np.testing.assert_array_equal(getattr(b, name), getattr(a, name))
        elif f.name == "metadata":
            assert b["simulation"] == a["simulation"] and b["creator"] == a["creator"]
        elif f.name == "noise":  # SIGMA is float32 in a Measurement Set
            np.testing.assert_allclose(b, a, rtol=6e-8)
        elif isinstance(a, np.ndarray):
            np.testing.assert_array_equal(b, a)
            assert b.dtype == a.dtype, f.name
        elif isinstance(a, float):
            # The phase centre goes through casacore's J2000 conversion and back: equal to the
            # last bit or two (measured 0 alone, 2.4e-16 after other MS tests in the process,
            # as casacore's measures caches warm).
            assert b == pytest.approx(a, rel=1e-14, abs=1e-14), f.name
        else:
            assert b == a, f.name


def test_ms_visibilities_follow_the_casa_convention(simulated):
    """A source's fringe phase in tabascal's convention, 2 pi f (tau[a1] - tau[a2]), equals
    -2 pi (u l + v m + w (n - 1)) / lambda with the MS's own UVW and the source's J2000 offset
    (l, m) from the MS phase centre: data and UVW make a consistent Measurement Set."""
    m = read_observation(simulated / "obs.zarr", truth=False)
    src_ra, src_dec = m.ra_rad + 0.02, m.dec_rad - 0.015
    tau = geo.sky_delays(m.ant_itrf, m.times_s, m.gast0_rad, m.ra_rad, m.dec_rad, src_ra, src_dec)
    ours = 2 * np.pi * m.freqs_hz[-1] * 1e-6 * (tau[m.a1, 0] - tau[m.a2, 0])  # (n_bl, n_time)
    epoch = datetime.fromisoformat(m.epoch_utc)
    t_mid = float(m.times_s[0] + m.times_s[-1]) / 2
    args = (m.ant_itrf, epoch, m.gast0_rad, t_mid)
    ra0, dec0 = frames.phase_centre_to_j2000(m.ra_rad, m.dec_rad, *args)
    ra, dec = frames.phase_centre_to_j2000(src_ra, src_dec, *args)
    l = np.cos(dec) * np.sin(ra - ra0)
    mm = np.sin(dec) * np.cos(dec0) - np.cos(dec) * np.sin(dec0) * np.cos(ra - ra0)
    n = np.sin(dec) * np.sin(dec0) + np.cos(dec) * np.cos(dec0) * np.cos(ra - ra0)
    with tables.table(str(simulated / "obs.ms"), ack=False) as ms:
        uvw = ms.getcol("UVW").reshape(m.n_time, m.n_bl, 3).transpose(1, 0, 2)
    theirs = -2 * np.pi * (uvw @ np.array([l, mm, n - 1])) * m.freqs_hz[-1] / geo.C
    assert np.abs(ours).max() > 50  # rad: a sign or frame error could not hide
    # measured 8.6e-5 of the phase: annual aberration scales apparent offsets from the phase
    # centre by 1 + v/c cos(angle) relative to J2000 ones, which imaging conventions ignore
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=2e-4 * np.abs(ours).max())


@pytest.fixture
def compilation_cache(tmp_path):
    """jax's persistent compilation cache, so that a second identical fit is not recompiled
    (reset, since jax decides once per process, at its first compilation, whether to cache)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    old = [getattr(jax.config, name) for name in names]
    jax.config.update(names[0], str(tmp_path / "xla-cache"))
    jax.config.update(names[1], 0.0)
    cc.reset_cache()
    yield
    for name, value in zip(names, old, strict=True):
        jax.config.update(name, value)
    cc.reset_cache()


@pytest.fixture(scope="module")
def twin_observations(tmp_path_factory):
    """One simulation opened as its zarr store and as the Measurement Set written from it.
    The noise, 2500 Jy / sqrt(2 x 200 kHz x 2.5 s) = 2.5 Jy, is exact in the MS's float32
    SIGMA, so both routes can see identical data."""
    from tabascal.measurement_set import write_measurement_set
    from tabascal.simulate import simulate, simulation_config

    where = tmp_path_factory.mktemp("twins")
    overrides = {
        "array": {"n_stations": 5},
        "observation": {"n_time": 4, "n_freq": 2, "chan_width_hz": 200e3, "int_time_s": 2.5},
        "sky": {"n_sources": 2},
    }
    simulate(simulation_config("demo", overrides, seed=5), where / "obs.zarr")
    write_measurement_set(where / "obs.zarr", where / "obs.ms")
    return [open_observation(where / name) for name in ("obs.zarr", "obs.ms")]


# The MS route reads the phase centre back through casacore's J2000 conversion, whose nutation
# and aberration casacore interpolates between the epochs it has cached: bit for bit in a
# process that converted nothing before, a few units in the last place of the phase centre
# after other Measurement Set tests (measured: 0 alone; after them, double 2.0e-8 relative at
# worst, in the delays' phases, which multiply the phase centre's error; single 0, where the
# difference is below float32's rounding, which a few units in its last place allow for).
MODEL_INPUTS_RTOL = {"single": 1e-6, "double": 2e-6}


@pytest.mark.parametrize("precision", ["single", "double"])
def test_simulated_ms_builds_the_same_model_inputs_as_the_store(twin_observations, precision):
    """Every array the fit reads (data, flags, noise, geometry, delays, phases, tables and the
    initial parameters) is the same whether the observation came from the store or from the MS
    written from it, integers and flags exactly, floats to casacore's conversion of the phase
    centre (``MODEL_INPUTS_RTOL``); so is the model's static spec (its RFI groups)."""
    import jax

    from tabascal.fitting import run_config
    from tabascal.model import joint

    config = run_config.model_config(run_config.load({"precision": precision}))
    with jax.enable_x64(precision == "double"):
        models = [joint.build(obs, config, init="data", seed=0) for obs in twin_observations]
        trees = [(m.params, m.constants, m.data) for m in models]
        leaves, structure = zip(*map(jax.tree.flatten, trees), strict=True)
    assert structure[0] == structure[1] and models[0].spec == models[1].spec
    assert len(leaves[0]) > 20  # the parameters, constants and data were all compared
    worst = 0.0
    for a, b in zip(*leaves, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        a, b = np.asarray(a), np.asarray(b)
        if not np.issubdtype(a.dtype, np.inexact):
            np.testing.assert_array_equal(b, a)
            continue
        scale = np.maximum(np.abs(a), np.finfo(a.dtype).tiny)
        worst = max(worst, float(np.max(np.abs(b - a) / scale, initial=0.0)))
        np.testing.assert_allclose(b, a, rtol=MODEL_INPUTS_RTOL[precision], atol=0)
    print(f"{precision}: worst relative difference {worst:.1e}")


def test_simulated_ms_fits_to_the_same_chi_squared_as_the_store(
    twin_observations, tmp_path, compilation_cache
):
    """simulate -> MS -> run and simulate -> zarr -> run reach the same reduced chi-squared, in
    float64 (in float32, adabelief's first updates, nearly lr * sign(gradient), turn
    rounding-level differences into whole steps: a phase centre off by 7e-15 rad once moved
    chi2_final by 1e-3 after 3 steps). The run leaves jax's 64-bit mode as it found it."""
    import jax

    from tabascal.fitting import job, run_config

    # the per-antenna signal from the data start: the quick fit this test was written for
    config = run_config.load({"precision": "double",
                              "rfi": {"signal": "per_antenna", "time_stencil": 3},
                              "fit": {"steps": 3, "second_phase_steps": 0, "polish_steps": 0,
                                      "init": "data", "checkpoint_every": 0},
                              "output": {"plots": False}})  # fmt: skip
    assert not jax.config.jax_enable_x64
    summaries = [
        job.run(obs, tmp_path / f"fit-{k}", config, progress=False)
        for k, obs in enumerate(twin_observations)
    ]
    assert not jax.config.jax_enable_x64
    assert summaries[0]["chi2_final"] < 0.5 * summaries[0]["chi2_init"]
    for key in ("chi2_init", "chi2_final"):
        # measured: equal in a process that converted nothing before; up to 1.4e-9 apart
        # (chi2_final) after other Measurement Set tests (see MODEL_INPUTS_RTOL)
        print(f"{key}: {abs(summaries[1][key] / summaries[0][key] - 1):.1e} apart")
        assert summaries[1][key] == pytest.approx(summaries[0][key], rel=1.5e-7, abs=0)


def _tle_file(path, numbers):
    lines = []
    for k, number in enumerate(numbers):
        sat = Satrec()
        epoch_days = datetime(2024, 6, 21, 6, tzinfo=UTC) - datetime(1949, 12, 31, tzinfo=UTC)
        n = np.sqrt(geo.GM_EARTH / (geo.R_EARTH + 20_180e3) ** 3) * 60.0
        sat.sgp4init(WGS72, "i", number, epoch_days.total_seconds() / 86400, 0.0, 0.0, 0.0,
                     0.0, 0.0, 0.96, 0.5 * k, n, 1.0 + k)  # fmt: skip
        lines += [f"GPS {number}", *export_tle(sat)]
    path.write_text("\n".join(lines) + "\n")


def test_import_ms_with_tle_then_export_ms(tmp_path, capsys):
    ms = tmp_path / "a.ms"
    build_ms(ms, n_time=3)
    _tle_file(tmp_path / "gps.tle", [41019, 40294])
    store = tmp_path / "a.zarr"
    args = ["import-ms", str(ms), "-o", str(store), "--tle", str(tmp_path / "gps.tle")]
    assert main([*args, "--satellites", "40294", "--correlation", "xx"]) == 0
    out = capsys.readouterr().out
    assert "1 satellites, elevation during the observation:\n    GPS 40294" in out
    assert "correlation XX" in out
    obs = read_observation(store)
    assert isinstance(obs.orbits, TleOrbits) and obs.orbits.catalogue_numbers == (40294,)
    np.testing.assert_array_equal(obs.vis, read_observation_ms(ms, correlation="XX").vis)

    results = zarr.open_group(str(tmp_path / "results.zarr"), mode="w")
    arrays = {"sky_vis": obs.vis, "rfi_vis": obs.vis, "residual": obs.vis, "a1": obs.a1}
    for name, value in (arrays | {"a2": obs.a2}).items():
        results.create_array(name, data=value)
    export = ["export-ms", str(tmp_path / "results.zarr"), "--ms", str(ms), "--correlation", "XX"]
    assert main(export) == 0
    assert "added TAB_SKY_DATA, TAB_RFI_DATA, TAB_RES_DATA" in capsys.readouterr().out
    assert main(export) == 2
    assert "already has column TAB_SKY_DATA" in capsys.readouterr().err
    back = read_observation_ms(ms, column="TAB_SKY_DATA", correlation="XX")
    np.testing.assert_array_equal(back.vis, obs.vis)


def test_import_ms_errors_go_to_stderr(tmp_path, capsys):
    build_ms(tmp_path / "a.ms", n_spw=2)
    assert main(["import-ms", str(tmp_path / "a.ms"), "-o", str(tmp_path / "a.zarr")]) == 2
    assert "choose one with --spw" in capsys.readouterr().err
    args = ["import-ms", str(tmp_path / "a.ms"), "-o", str(tmp_path / "a.zarr")]
    assert main([*args, "--satellites", "1"]) == 2
    assert "--satellites needs --tle FILE" in capsys.readouterr().err
    assert not (tmp_path / "a.zarr").exists()
