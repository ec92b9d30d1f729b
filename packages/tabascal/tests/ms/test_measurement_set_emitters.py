"""Ground transmitters and aircraft through Measurement Sets: simulated into one and read back,
and named by files at import-ms (--ground, --aircraft)."""

import numpy as np
import pytest

from tabascal.cli import main
from tabascal.observation import emitters
from tabascal.store import read_meta

SMALL = """
array: {n_stations: 5}
observation: {n_time: 4, n_freq: 2}
sky: {n_sources: 1}
satellites: {count: 1}
emitters:
  ground:
    - {name: TOWER, lat_deg: -26.70, lon_deg: 116.90, height_m: 500.0}
  aircraft:
    - {name: JET, lat_deg: -26.95, lon_deg: 116.79, heading_deg: 20.0}
"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """The same simulation with a ground transmitter and an aircraft, as a store and an MS."""
    where = tmp_path_factory.mktemp("sim")
    (where / "sim.yaml").write_text(SMALL)
    for name in ("obs.zarr", "obs.ms"):
        args = ["simulate", "--preset", "demo", "-c", str(where / "sim.yaml"), "--seed", "3"]
        assert main([*args, "-o", str(where / name), "-q"]) == 0
    return where


def test_a_simulated_ms_keeps_its_emitters_through_import(simulated):
    assert main(["import-ms", str(simulated / "obs.ms"), "-o", str(simulated / "in.zarr")]) == 0
    store, imported = read_meta(simulated / "obs.zarr"), read_meta(simulated / "in.zarr")
    assert imported.orbits.kinds == ("satellite", "ground", "aircraft")
    assert imported.orbits.names == store.orbits.names
    assert imported.orbits.label(1) == "TOWER" and imported.orbits.label(2) == "JET"
    # The positions as simulated, to the bit (the MS keyword holds them in float64)
    times = store.times_s
    np.testing.assert_array_equal(
        imported.orbits.inertial(times, 3), store.orbits.inertial(times, 3)
    )


def test_import_ms_takes_ground_and_aircraft_files(simulated, tmp_path):
    ground = tmp_path / "ground.csv"
    ground.write_text("name,lat_deg,lon_deg,height_m\nFM,-26.60,116.95,420\nTV,-27.0,116.5,610\n")
    tracks = tmp_path / "tracks.csv"
    epoch = read_meta(simulated / "obs.zarr").epoch_utc
    start = np.datetime64(epoch[:19])
    lines = ["time,callsign,lat,lon,alt_ft"]
    for k in range(12):
        when = str(start + np.timedelta64(k - 2, "s")) + "Z"
        lines.append(f"{when},QFA12,{-26.9 + 0.002 * k},{116.8 + 0.001 * k},{35000}")
    tracks.write_text("\n".join(lines) + "\n")
    out = tmp_path / "in.zarr"
    args = ["import-ms", str(simulated / "obs.ms"), "-o", str(out)]
    assert main([*args, "--ground", str(ground), "--aircraft", str(tracks)]) == 0
    meta = read_meta(out)
    # The files' emitters take the place of those the MS holds; its satellite stays.
    assert meta.orbits.kinds == ("satellite", "ground", "ground", "aircraft")
    assert [meta.orbits.label(s) for s in (1, 2, 3)] == ["FM", "TV", "QFA12"]
    _, towers, aircraft = emitters.split(meta.orbits)
    np.testing.assert_array_equal(towers.height_m, [420.0, 610.0])
    np.testing.assert_array_equal(aircraft.tracks[0].times_s, np.arange(-2.0, 10.0))


def test_import_ms_refuses_a_bad_track_file_before_writing(simulated, tmp_path, capsys):
    tracks = tmp_path / "tracks.csv"
    tracks.write_text("time,lat,lon\n0,1,2\n")
    out = tmp_path / "in.zarr"
    args = ["import-ms", str(simulated / "obs.ms"), "-o", str(out), "--aircraft", str(tracks)]
    assert main(args) != 0
    assert "no column for the height" in capsys.readouterr().err
    assert not out.exists()
