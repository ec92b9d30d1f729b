"""Working out a multi-process launch from flags and launcher variables (no processes started;
the runs themselves are tested in the repository's tests/test_multiprocess.py)."""

import pytest

from tabascal.parallel import processes
from tabascal.parallel.processes import Launch, LaunchError


def test_a_single_process_has_no_launch():
    assert processes.launch_from({}) is None
    assert processes.launch_from({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) is None


def test_explicit_values_win_over_the_launcher():
    env = {"WORLD_SIZE": "8", "RANK": "3", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    launch = processes.launch_from(env, coordinator="10.0.0.1:12355", num_processes=2, process_id=1)
    assert launch == Launch(2, 1, "10.0.0.1:12355", "command line")


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"WORLD_SIZE": "4", "RANK": "2", "MASTER_ADDR": "node7", "MASTER_PORT": "29500"},
            Launch(4, 2, "node7:29500", "torchrun-style variables"),
        ),
        ({"SLURM_NTASKS": "16", "SLURM_PROCID": "15"}, Launch(16, 15, None, "SLURM")),
        (
            {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"},
            Launch(2, 0, None, "Open MPI"),
        ),
    ],
)
def test_launcher_variables(env, expected):
    assert processes.launch_from(env) == expected


@pytest.mark.parametrize(
    "kwargs, env, message",
    [
        ({"coordinator": "h:1"}, {}, "--coordinator given without --num-processes, --process-id"),
        ({"coordinator": "h:1", "num_processes": 2, "process_id": 2}, {}, "outside 0...1"),
        ({"coordinator": "h", "num_processes": 2, "process_id": 0}, {}, "is not HOST:PORT"),
        ({"coordinator": "h:1", "num_processes": 0, "process_id": 0}, {}, "is not >= 1"),
        ({}, {"WORLD_SIZE": "2", "RANK": "0"}, "$MASTER_ADDR, $MASTER_PORT are not"),
        ({}, {"SLURM_NTASKS": "two", "SLURM_PROCID": "0"}, "$SLURM_NTASKS='two' is not an integer"),
    ],
)
def test_bad_launches_are_refused_with_the_reason(kwargs, env, message):
    with pytest.raises(LaunchError) as err:
        processes.launch_from(env, **kwargs)
    assert message in str(err.value)


def test_single_process_agreement_reraises_the_error():
    processes.agree(None, "nothing")
    with pytest.raises(KeyError, match="x"):
        with processes.stage("reading"):
            raise KeyError("x")


def test_failure_messages_survive_the_round_trip():
    row = processes._encode("ValueError: é" + "x" * 5000)
    assert row.shape == (processes.MESSAGE_BYTES + 1,)
    assert processes._decode(row).startswith("ValueError: é")
