import subprocess
import sys

from tabascal.cli import build_parser, main


def test_no_command_prints_usage_and_fails():
    result = subprocess.run([sys.executable, "-m", "tabascal"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: tabascal" in result.stderr


def test_every_command_has_help():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"demo", "simulate", "inspect", "run", "plan"} <= set(commands)
    for name, sub in commands.items():
        assert sub.format_help().startswith(f"usage: tabascal {name}"), name


def test_demo_memory_table_gives_each_axis_against_one_device():
    from tabascal.cli.fit import _memory_lines

    one = {"arguments": 4 * 2**20, "outputs": 2**20, "temporaries": 8 * 2**20, "aliased": 2**20}
    four = {"arguments": 2**20, "outputs": 2**19, "temporaries": 2 * 2**20, "aliased": 2**19}
    lines = _memory_lines({"none": (1, one), "baseline": (4, four)})
    assert lines[-2].split() == ["none", "1", "4.00", "1.00", "8.00", "1.00", "12.00", "1.00"]
    assert lines[-1].split() == ["baseline", "4", "1.00", "0.25", "2.00", "0.25", "3.00", "0.25"]


def test_devices_can_still_be_set_after_jax_is_imported_but_not_started():
    # The simulator's modules import jax while the parser is built; the device count must
    # still take effect (a fresh interpreter, since this one has started jax).
    import os
    import subprocess
    import sys

    code = (
        "from tabascal.cli import build_parser\n"
        "from tabascal.cli.fit import use_devices\n"
        "import sys\n"
        "build_parser()\n"
        "assert 'jax' in sys.modules\n"
        "assert use_devices(3) is None\n"
        "import jax\n"
        "print(jax.device_count())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split()[-1] == "3"


def test_every_error_class_of_tabascal_derives_from_tabascal_error_and_its_builtin():
    from tabascal import TabascalError
    from tabascal.config import ConfigError
    from tabascal.fitting.job import OutputExistsError
    from tabascal.measurement_set import MissingExtraError, MsError
    from tabascal.observation.tle import TleError
    from tabascal.parallel.processes import LaunchError, PeerFailure
    from tabascal.simulate import SimulationError
    from tabascal.store import StoreError

    expected = {
        ConfigError: ValueError, StoreError: ValueError, MsError: ValueError,
        TleError: ValueError, SimulationError: ValueError, LaunchError: ValueError,
        MissingExtraError: ImportError, OutputExistsError: FileExistsError,
        PeerFailure: RuntimeError,
    }  # fmt: skip
    for cls, builtin in expected.items():
        assert issubclass(cls, TabascalError) and issubclass(cls, builtin), cls


def test_a_store_error_is_reported_by_the_command_with_exit_status_2(tmp_path, capsys):
    missing = tmp_path / "missing.zarr"
    assert main(["inspect", str(missing)]) == 2
    assert "tabascal inspect: error:" in capsys.readouterr().err


def _run_summary(**extra):
    """A summary.json of tabascal run with the keys every run writes, and ``extra``."""
    return {
        "chi2_init": 10.0, "chi2_final": 1.0, "steps": 5, "seconds_fit": 1.0, "n_devices": 1,
        "shard_axis": "none", "per_device_peak_bytes": [2**30], "collectives": {},
    } | extra  # fmt: skip


def test_run_summary_names_the_brightest_satellites_the_per_satellite_cubes_and_orbits():
    from tabascal.cli.fit import _summary_lines

    satellites = [
        {"index": k, "name": name, "peak_over_noise": peak, "rms_over_noise": rms}
        for k, (name, peak, rms) in enumerate(
            [("GPS-01", 12.5, 3.25), ("LEO-02", 310.0, 41.0), ("GAL-03", 0.5, 0.125),
             ("GPS-04", 40.0, 7.5)]
        )
    ]  # fmt: skip
    orbits = {
        "fit": "ric",
        "satellites": [
            {"name": "GPS-01", "time_offset_s": 0.25, "time_offset_prior_s": 1.0,
             "position_offset_m": {"radial": 12.0, "in_track": -450.0, "cross_track": 0.5}},
            {"name": "LEO-02", "time_offset_s": -0.0125, "time_offset_prior_s": 1.0,
             "position_offset_m": {"radial": -3.0, "in_track": 20.0, "cross_track": -1.5}},
        ],
    }  # fmt: skip
    written = {"written": True, "mode": "auto", "mib": 0.5, "budget_mib": 1024.0, "reason": None}
    lines = _summary_lines(
        _run_summary(satellites=satellites, rfi_vis_by_satellite=written, orbits=orbits)
    )
    assert lines[4:] == [
        "  brightest satellites  peak and rms of the fitted RFI in the data / noise",
        "    LEO-02                     310           41",
        "    GPS-04                      40          7.5",
        "    GPS-01                    12.5         3.25",
        "    ... and 1 more in summary.json",
        "  rfi_vis_by_satellite  written to results.zarr (0.5 MiB)",
        "  orbit offsets         time (s)   radial, in-track, cross-track (m)",
        "    GPS-01                 +0.25   +12, -450, +0.5",
        "    LEO-02               -0.0125   -3, +20, -1.5",
    ]
    reason = "output.per_satellite is never"
    left_out = {"written": False, "mode": "never", "mib": 0.5, "budget_mib": 1024.0}
    time_only = {"fit": "time_offset", "satellites": [orbits["satellites"][0]]}
    lines = _summary_lines(
        _run_summary(
            satellites=satellites[:1],
            rfi_vis_by_satellite=left_out | {"reason": reason},
            orbits=time_only,
        )
    )
    assert lines[4:] == [
        "  brightest satellites  peak and rms of the fitted RFI in the data / noise",
        "    GPS-01                    12.5         3.25",
        "  rfi_vis_by_satellite  not written: output.per_satellite is never",
        "  orbit offsets         time (s)",
        "    GPS-01                 +0.25",
    ]
    # A fit without satellites' figures or orbit corrections prints none of these lines.
    assert len(_summary_lines(_run_summary(satellites=[], orbits=None))) == 4


def test_run_summary_prints_chi_squared_to_four_significant_figures_with_its_zeros():
    from tabascal.cli.fit import _summary_lines

    line = _summary_lines(_run_summary(chi2_init=45.213, chi2_final=1.0))[0]
    assert line == "  reduced chi-squared   45.21 -> 1.000"  # not "-> 1", as if rounded
    line = _summary_lines(_run_summary(chi2_init=10822.0, chi2_final=0.99031))[0]
    assert line == "  reduced chi-squared   1.082e+04 -> 0.9903"


def test_run_summary_gives_the_passes_and_why_the_fit_stopped_where_counted():
    from tabascal.cli.fit import _summary_lines

    fit = {"steps": 29, "passes": 890.0, "stopped": "converged", "seconds": 13.6}
    line = _summary_lines(_run_summary(steps=29, seconds_fit=13.6, fit=fit))[1]
    assert line == "  steps                 29 in 13.6 s (890 passes; stopped: converged)"
    # A summary written before passes were counted has no "fit": the line is as it was.
    assert _summary_lines(_run_summary())[1] == "  steps                 5 in 1.0 s"


def test_run_summary_lists_at_most_eight_satellites_orbit_offsets():
    from tabascal.cli.fit import _summary_lines

    entries = [{"name": f"SAT-{k:02d}", "time_offset_s": 0.001 * k} for k in range(11)]
    lines = _summary_lines(_run_summary(orbits={"fit": "time_offset", "satellites": entries}))
    assert lines[4] == "  orbit offsets         time (s)"
    assert [line.split()[0] for line in lines[5:13]] == [f"SAT-{k:02d}" for k in range(8)]
    assert lines[13:] == ["    ... and 3 more in summary.json"]
