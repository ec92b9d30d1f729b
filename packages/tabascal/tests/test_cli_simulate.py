import numpy as np
import pytest
import yaml

from tabascal.cli import main
from tabascal.simulate import simulation_config
from tabascal.store import read_observation

SMALL = """
array: {n_stations: 6}
observation: {n_time: 3, n_freq: 1, flag_fraction: 0.1}
sky: {n_sources: 2}
"""


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    where = tmp_path_factory.mktemp("cli")
    (where / "sim.yaml").write_text(SMALL)
    out = where / "obs.zarr"
    rc = main(
        [
            "simulate",
            "--preset",
            "demo",
            "-c",
            str(where / "sim.yaml"),
            "-o",
            str(out),
            "--seed",
            "7",
            "-q",
        ]
    )
    assert rc == 0
    return where, out


def test_simulate_writes_the_configured_store(small_store, capsys):
    _, out = small_store
    obs = read_observation(out)
    assert (obs.n_ant, obs.n_bl, obs.n_freq, obs.n_time, obs.n_sat) == (6, 15, 1, 3, 2)
    assert obs.metadata["simulation"]["seed"] == 7
    assert obs.truth is not None


def test_inspect_prints_sizes_levels_flags_and_satellites(small_store, capsys):
    _, out = small_store
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    obs = read_observation(out)
    assert "6 of 38 m; 15 baselines" in text
    assert "1 x 100 kHz" in text and "3 x 2 s" in text
    assert f"noise         {float(obs.noise):.4g} Jy" in text
    assert f"flagged       {100 * obs.flags.mean():.2f} %" in text
    rfi = np.sqrt(np.mean(np.abs(obs.truth.rfi_vis[~obs.flags]) ** 2))
    assert f"RFI rms   {rfi:10.4g} Jy" in text
    assert "satellites    2" in text and "GPS-01" in text and "elevation" in text


def test_existing_output_needs_overwrite(small_store, capsys):
    where, out = small_store
    args = ["simulate", "--preset", "demo", "-c", str(where / "sim.yaml"), "-o", str(out), "-q"]
    assert main(args) == 2
    assert "already exists" in capsys.readouterr().err
    before = out.stat().st_ino
    assert main([*args, "--seed", "7", "--overwrite"]) == 0  # the fixture's run: compiled
    assert out.stat().st_ino != before  # a new store was renamed into place
    assert read_observation(out).n_bl == 15


def test_unknown_config_key_is_named_with_a_suggestion(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("observation: {n_tme: 3}\n")
    rc = main(["simulate", "-c", str(tmp_path / "bad.yaml"), "-o", str(tmp_path / "x.zarr")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown config key 'observation.n_tme'; did you mean 'observation.n_time'?" in err
    assert not (tmp_path / "x.zarr").exists()


def test_print_config_round_trips_through_yaml(capsys):
    assert main(["simulate", "--preset", "bench-96", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == simulation_config("bench-96")


def test_dry_run_plans_without_writing(tmp_path, capsys):
    out = tmp_path / "big.zarr"
    assert main(["simulate", "--preset", "bench-96", "-o", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "96 stations, 4560 baselines, 1 channels, 90 integrations, 32 satellites" in text
    assert "fine samples per cell: RFI" in text
    assert not out.exists()


def test_inspect_refuses_what_is_not_a_store(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.zarr")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["simulate", "inspect"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "-h"])
    assert exit_.value.code == 0
    assert f"usage: tabascal {command}" in capsys.readouterr().out
