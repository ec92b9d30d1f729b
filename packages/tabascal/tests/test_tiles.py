"""Fitting an observation as a grid of (time x frequency) tiles: the plan, the configuration,
the stitched results, and a tiled fit against the whole one."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import zarr

from tabascal.cli import fit as fit_command
from tabascal.config import ConfigError
from tabascal.fitting import job, optimiser, results, run_config, tile_stitch
from tabascal.fitting.run_plan import OutputSettings
from tabascal.fitting.tiles import Tile, plan_tiles
from tabascal.parallel.blockwise import StoreRows
from tabascal.store import read_meta, read_observation


def _owners(tiles: list[Tile], n_time: int, n_freq: int) -> np.ndarray:
    """How many tiles' cores hold each (channel, integration) cell."""
    count = np.zeros((n_freq, n_time), int)
    for tile in tiles:
        count[slice(*tile.core_freq), slice(*tile.core_time)] += 1
    return count


@pytest.mark.parametrize(
    ("n_time", "n_freq", "time", "freq"),
    [(30, 2, 2, 1), (30, 2, 4, 2), (11, 7, 3, 2), (100, 64, 7, 5), (9, 1, "auto", 1)],
)
def test_cores_partition_the_observation_as_evenly_as_possible(n_time, n_freq, time, freq):
    tiles = plan_tiles(n_time, n_freq, 2.0, time=time, freq=freq, overlap_s=5.0)
    assert np.array_equal(_owners(tiles, n_time, n_freq), np.ones((n_freq, n_time), int))
    for axis in ("core_time", "core_freq"):
        sizes = {getattr(t, axis)[1] - getattr(t, axis)[0] for t in tiles}
        assert max(sizes) - min(sizes) <= 1, (axis, sizes)
    assert [t.index for t in tiles] == list(range(len(tiles)))


def test_cores_and_fitted_ranges_of_a_grid_with_overlaps():
    # 11 integrations of 2 s into 3 (4, 4, 3) and 7 channels into 2 (4, 3); an overlap of 3 s
    # is 2 integrations (rounded up), and 1 channel; both clipped at the edges. Time-major.
    tiles = plan_tiles(11, 7, 2.0, time=3, freq=2, overlap_s=3.0, overlap_channels=1)
    assert [(t.core_time, t.core_freq, t.time, t.freq) for t in tiles] == [
        ((0, 4), (0, 4), (0, 6), (0, 5)),
        ((0, 4), (4, 7), (0, 6), (3, 7)),
        ((4, 8), (0, 4), (2, 10), (0, 5)),
        ((4, 8), (4, 7), (2, 10), (3, 7)),
        ((8, 11), (0, 4), (6, 11), (0, 5)),
        ((8, 11), (4, 7), (6, 11), (3, 7)),
    ]
    assert tiles[3].name == "3-t2_10-f3_7"
    assert tiles[3].core_within() == (slice(1, 4), slice(2, 6))


def test_an_overlap_of_whole_integrations_is_not_rounded_up_further():
    # 0.2 s integrations: 0.6 s is 3 of them, though 0.6 / 0.2 is 2.9999999999999996.
    (first, second) = plan_tiles(20, 1, 0.2, time=2, overlap_s=0.6)
    assert first.time == (0, 13) and second.time == (7, 20)


def test_auto_is_one_tile_and_is_the_default():
    assert plan_tiles(30, 2, 2.0) == [Tile(0, (0, 30), (0, 2), (0, 30), (0, 2))]
    assert run_config.load(None)["tiles"] == {
        "time": "auto",
        "freq": "auto",
        "overlap_s": 0.0,
        "overlap_channels": 0,
        "workers": None,
        "scheduler": None,
    }


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"time": 16}, "'tiles.time' = 16 cuts 30 integrations into cores as small as 1 "
         "integration; each tile's core needs at least 2 integrations: set tiles.time to 15 or "
         "fewer"),
        ({"freq": 3}, "'tiles.freq' = 3 cuts 2 channels into cores as small as 0 channels; "
         "each tile's core needs at least 1 channel: set tiles.freq to 2 or fewer"),
        ({"time": 0}, "'tiles.time' = 0: give a whole number of tiles, 1 or more, or 'auto'"),
        ({"overlap_s": -1.0}, "'tiles.overlap_s' = -1.0: give the overlap in seconds, 0 or more"),
        ({"overlap_channels": 1.5}, "'tiles.overlap_channels' = 1.5: give a whole number of "
         "channels, 0 or more"),
    ],
)  # fmt: skip
def test_the_planner_refuses_tiles_too_small_or_counts_out_of_range(counts, message):
    with pytest.raises(ConfigError) as err:
        plan_tiles(30, 2, 2.0, **counts)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("tiles", "message"),
    [
        ({"time": 0}, "config key 'tiles.time': 0 is out of range; allowed >= 1 or 'auto'"),
        ({"freq": "many"}, "config key 'tiles.freq': expected an integer or 'auto', got 'many'"),
        ({"time": 2.5}, "config key 'tiles.time': expected an integer or 'auto', got 2.5"),
        ({"overlap_s": -2}, "config key 'tiles.overlap_s': -2.0 is out of range; allowed >= 0.0"),
        ({"overlap_channels": -1}, "'tiles.overlap_channels': -1 is out of range; allowed >= 0"),
        ({"overlap": 4}, "unknown config key 'tiles.overlap'; did you mean 'tiles.overlap_s'?"),
    ],
)
def test_config_errors_name_the_key_the_value_and_what_is_allowed(tiles, message):
    with pytest.raises(ConfigError) as err:
        run_config.load({"tiles": tiles})
    assert message in str(err.value)


def test_a_run_with_tiles_too_small_is_refused_before_any_work(small_store, tmp_path):
    config = run_config.load({"tiles": {"time": 20}})
    with pytest.raises(ConfigError, match=r"set tiles\.time to 15 or fewer"):
        job.run(read_observation(small_store), tmp_path / "out", config, progress=False)
    assert not (tmp_path / "out").exists()


# --- stitching, on tiles of known values --------------------------------------------------

# 5 baselines, 7 channels, 11 integrations of 2 s, in 3 x 2 tiles overlapping by one
# integration and one channel. Written out, not planned: the owner of each cell and each
# tile's fitted ranges, (time, freq) of tile 2 * i_time + i_freq.
OWNER_TIME = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
OWNER_FREQ = np.array([0, 0, 0, 0, 1, 1, 1])
FITTED = {
    0: ((0, 5), (0, 5)), 1: ((0, 5), (3, 7)), 2: ((3, 9), (0, 5)),
    3: ((3, 9), (3, 7)), 4: ((7, 11), (0, 5)), 5: ((7, 11), (3, 7)),
}  # fmt: skip


def _random_tile(rng, n_bl, n_ant, n_sat, time, freq):
    shape = (n_bl, freq[1] - freq[0], time[1] - time[0])

    def cube():
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)

    cubes = {name: cube() for name in ("sky_vis", "rfi_vis", "model_vis", "residual")}
    cubes["flags"] = rng.random(shape) < 0.2
    by_satellite = np.stack([cube() for _ in range(n_sat)])
    gains = (1 + 0.1 * rng.normal(size=(n_ant, *shape[1:]))).astype(np.complex64)
    return cubes, gains, by_satellite


def test_each_cell_of_the_stitched_results_is_its_owning_tiles(tmp_path):
    rng = np.random.default_rng(5)
    n_bl, n_ant, n_sat, n_freq, n_time = 5, 4, 2, 7, 11
    meta = SimpleNamespace(
        n_bl=n_bl, n_ant=n_ant, n_sat=n_sat, n_freq=n_freq, n_time=n_time,
        a1=np.array([0, 0, 0, 1, 2]), a2=np.array([1, 2, 3, 2, 3]),
        times_s=2.0 * np.arange(n_time) + 1.0, freqs_hz=150e6 + 1e5 * np.arange(n_freq),
    )  # fmt: skip
    grid = plan_tiles(n_time, n_freq, 2.0, time=3, freq=2, overlap_s=2.0, overlap_channels=1)
    assert {t.index: (t.time, t.freq) for t in grid} == FITTED
    # Each time band fitted with a noise of its own, per baseline (data.noise: estimate).
    band_noise = rng.uniform(1.0, 3.0, size=(3, n_bl)).astype(np.float32)
    written = {}
    for index, (time, freq) in FITTED.items():
        cubes, gains, by_satellite = _random_tile(rng, n_bl, n_ant, n_sat, time, freq)
        written[index] = (cubes, gains, by_satellite)
        stacked = results.Stacked(
            "rfi_vis_by_satellite",
            n_sat,
            [(k, np.arange(n_bl), by_satellite[k]) for k in range(n_sat)],
            {"satellites": ["A", "B"]},
        )
        whole = {"gains": gains, "a1": meta.a1, "a2": meta.a2, "noise": band_noise[index // 2]}
        folder = tmp_path / "tiles" / grid[index].name
        folder.mkdir(parents=True)
        results.write_results(
            folder / "results.zarr", [(np.arange(n_bl), cubes)], whole, n_bl, stacked
        )

    output = OutputSettings(
        plots=False, plot_baselines=1, per_satellite="auto", per_satellite_mb=1.0
    )
    stitched = tile_stitch.stitch(tmp_path, grid, meta, output)

    out = zarr.open_group(str(tmp_path / "results.zarr"), mode="r")
    for f in range(n_freq):
        for t in range(n_time):
            owner = 2 * OWNER_TIME[t] + OWNER_FREQ[f]
            (t0, _), (f0, _) = FITTED[owner]
            cubes, gains, by_satellite = written[owner]
            for name, cube in cubes.items():
                assert np.array_equal(out[name][:, f, t], cube[:, f - f0, t - t0]), (name, f, t)
            assert np.array_equal(out["gains"][:, f, t], gains[:, f - f0, t - t0])
            assert np.array_equal(
                out["rfi_vis_by_satellite"][:, :, f, t], by_satellite[:, :, f - f0, t - t0]
            )
    assert out["rfi_vis_by_satellite"].attrs["satellites"] == ["A", "B"]
    np.testing.assert_array_equal(out["times_s"][...], meta.times_s)
    # The noise: the inverse-variance mean of the bands' over the integrations each owns.
    owned = np.array([4.0, 4.0, 3.0])[:, None]
    noise = np.sum(owned / band_noise.astype(np.float64) ** 2, axis=0) / owned.sum()
    np.testing.assert_allclose(out["noise"][...], noise**-0.5, rtol=1e-6)
    # The chi-squared over every unflagged cell, each over its own tile's noise.
    cell_noise = band_noise[OWNER_TIME].T[:, None, :].astype(np.float64)
    kept = ~out["flags"][...]
    residual = out["residual"][...]
    chi2 = np.sum(np.abs(residual[kept]) ** 2 / np.broadcast_to(cell_noise, kept.shape)[kept] ** 2)
    assert stitched.chi2 == pytest.approx(chi2 / (2 * kept.sum()), rel=1e-9)


# --- a tiled fit of a simulated observation -----------------------------------------------

# Gradient steps alone: the whole fit and the two tiles each compile one optimisation program.
GRADIENT = {
    "fit": {"steps": 300, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 100},
    "output": {"plots": False},
}
# Two tiles in time (cores of 15 integrations of 2 s), each fitting 2 integrations past its core.
TWO_IN_TIME = {"time": 2, "overlap_s": 4.0}
TILE_NAMES = ["0-t0_17-f0_2", "1-t13_30-f0_2"]


@pytest.fixture(scope="module")
def fits(small_store, tmp_path_factory):
    """The small store fitted whole and as two tiles in time (read from the store, as the
    command does)."""
    root = tmp_path_factory.mktemp("tiles")
    whole = job.run(
        read_observation(small_store), root / "whole", run_config.load(GRADIENT), progress=False
    )
    rows = StoreRows(small_store, read_meta(small_store))
    config = run_config.load({**GRADIENT, "tiles": TWO_IN_TIME})
    tiles = job.run(rows, root / "tiled", config, progress=False)
    return SimpleNamespace(root=root, whole=whole, tiled=tiles)


def _errors_over_noise(out_dir, obs) -> dict:
    """RMSE over the noise of the fitted sky, and of the RFI and sky as they appear in the
    data (through the gains), against the simulation's truth, from results.zarr."""
    found = zarr.open_group(str(out_dir / "results.zarr"), mode="r")
    g, t, a1, a2 = found["gains"][...], obs.truth, obs.a1, obs.a2
    noise = float(np.mean(obs.noise))

    def rms(x):
        return float(np.sqrt(np.mean(np.abs(x) ** 2))) / noise

    return {
        "sky": rms(found["sky_vis"][...] - t.sky_vis),
        "rfi": rms(g[a1] * found["rfi_vis"][...] * g[a2].conj()
                   - t.gains[a1] * t.rfi_vis * t.gains[a2].conj()),
        "apparent_sky": rms(g[a1] * found["sky_vis"][...] * g[a2].conj()
                            - t.gains[a1] * t.sky_vis * t.gains[a2].conj()),
    }  # fmt: skip


def test_a_tiled_fit_recovers_the_rfi_and_sky_as_the_whole_fit_does(fits, small_store):
    obs = read_observation(small_store)
    whole = _errors_over_noise(fits.root / "whole", obs)
    tiled_ = _errors_over_noise(fits.root / "tiled", obs)
    # Measured (RMSE / noise, whole -> tiled): RFI 0.468 -> 0.408, sky 0.373 -> 0.458, apparent
    # sky 0.344 -> 0.411. Each tile's sky is fitted from half the observation, so it is a
    # little rougher; the RFI is as good or better.
    assert tiled_["rfi"] < 1.1 * whole["rfi"]
    assert tiled_["sky"] < 1.35 * whole["sky"]
    assert tiled_["apparent_sky"] < 1.3 * whole["apparent_sky"]
    # The summary's figures over the whole observation are those of the stitched results.
    truth = fits.tiled["truth"]
    assert truth["rfi"]["rmse_over_noise"] == pytest.approx(tiled_["rfi"], rel=1e-4)
    assert truth["sky"]["rmse_over_noise"] == pytest.approx(tiled_["sky"], rel=1e-4)
    # Both fits reach the noise: reduced chi-squared 1.071 whole, 1.008 tiled (measured).
    assert fits.tiled["chi2_final"] < 1.1 and fits.whole["chi2_final"] < 1.1


def test_the_fitted_tiles_are_stitched_cell_by_cell(fits):
    out = fits.root / "tiled"
    whole = zarr.open_group(str(out / "results.zarr"), mode="r")
    first, second = (
        zarr.open_group(str(out / "tiles" / name / "results.zarr"), mode="r") for name in TILE_NAMES
    )
    # Tile 0 fits integrations 0-16 and owns 0-14; tile 1 fits 13-29 and owns 15-29.
    for name in (*results.CUBES, "rfi_vis_by_satellite"):
        cube = whole[name][...]
        assert np.array_equal(cube[..., :15], first[name][..., :15]), name
        assert np.array_equal(cube[..., 15:], second[name][..., 2:]), name
    assert np.array_equal(whole["gains"][..., :15], first["gains"][..., :15])
    assert np.array_equal(whole["gains"][..., 15:], second["gains"][..., 2:])
    # The store's noise, the same in both tiles, one value per baseline as the whole fit's.
    assert np.array_equal(whole["noise"][...], first["noise"][...])
    summary = json.loads((out / "summary.json").read_text())
    assert [t["name"] for t in summary["tiles"]] == TILE_NAMES
    assert summary["steps"] == 600 and summary["tile_grid"]["overlap_integrations"] == 2
    # The plots are the tiles' own; the whole folder holds no checkpoint.
    assert sorted(p.name for p in out.iterdir()) == [
        "config.yaml",
        "results.zarr",
        "summary.json",
        "tiles",
    ]


def test_resume_skips_a_finished_tile_and_ends_as_an_uninterrupted_run(
    fits, small_store, tmp_path, monkeypatch
):
    """Interrupted as the second tile writes its first checkpoint (step 100), then resumed:
    the first tile is left as it was, the second continues from its checkpoint."""

    class Interrupted(Exception):
        pass

    saved = []
    save = optimiser.save_checkpoint

    def save_then_stop(directory, state, history):
        path = save(directory, state, history)
        saved.append(directory.parent.name)
        if directory.parent.name == TILE_NAMES[1] and interrupt:
            raise Interrupted
        return path

    monkeypatch.setattr(optimiser, "save_checkpoint", save_then_stop)
    rows = StoreRows(small_store, read_meta(small_store))
    config = run_config.load({**GRADIENT, "tiles": TWO_IN_TIME})
    out = tmp_path / "out"
    interrupt = True
    with pytest.raises(Interrupted):
        job.run(rows, out, config, progress=False)
    first = out / "tiles" / TILE_NAMES[0]
    stamps = {p: p.stat().st_mtime_ns for p in (first / "summary.json", first / "results.zarr")}
    assert not (out / "summary.json").exists()

    interrupt, saved[:] = False, []
    summary = job.run(rows, out, config, resume=True, progress=False)
    assert TILE_NAMES[0] not in saved and TILE_NAMES[1] in saved
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert [t["fitted"] for t in summary["tiles"]] == ["earlier", "now"]
    said = "\n".join(fit_command._summary_lines(summary))
    assert "tiles                 2 (2 in time x 1 in frequency, overlaps 2 integrations" in said
    assert "each in tiles/; 1 finished earlier" in said
    assert summary["chi2_final"] == fits.tiled["chi2_final"]
    assert summary["steps"] == fits.tiled["steps"]
    a = zarr.open_group(str(fits.root / "tiled" / "results.zarr"), mode="r")
    b = zarr.open_group(str(out / "results.zarr"), mode="r")
    for name in (*results.CUBES, "gains", "noise"):
        np.testing.assert_array_equal(a[name][...], b[name][...], err_msg=name)

    # Tiles begun with another configuration, or of another grid, are not resumed.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    changed = run_config.load({**GRADIENT, "fit": {**GRADIENT["fit"], "steps": 200}})
    changed["tiles"] = config["tiles"]
    with pytest.raises(ConfigError, match=r"tile 0-t0_17-f0_2 was begun .*\(fit\.steps differ"):
        job.run(rows, out, changed, resume=True, progress=False)
    (out / "tiles" / "0-t0_15-f0_2").mkdir()
    with pytest.raises(job.OutputExistsError, match="holds 0-t0_15-f0_2, which are not tiles"):
        job.run(rows, out, config, resume=True, progress=False)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
