"""Without python-casacore (the 'ms' extra) tabascal works, and Measurement Sets say how to get it.

The plain test session has no python-casacore; here its absence is also forced, so that the
check holds in any environment.
"""

import re
import sys

import numpy as np
import pytest

from tabascal.cli import main
from tabascal.measurement_set import (
    MissingExtraError,
    is_measurement_set,
    open_observation,
)
from tabascal.store import read_observation

HINT = 'pip install "tabascal[ms]"'


@pytest.fixture
def no_casacore(monkeypatch):
    for name in ("casacore", "casacore.tables", "casacore.measures", "casacore.quanta"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


def test_ms_paths_say_how_to_install_the_extra(tmp_path, no_casacore, capsys):
    (tmp_path / "obs.ms").mkdir()
    (tmp_path / "obs.ms" / "table.dat").write_bytes(b"")
    assert is_measurement_set(tmp_path / "obs.ms") and is_measurement_set(tmp_path / "new.MS")
    with pytest.raises(
        MissingExtraError, match=re.escape(f"install tabascal with the 'ms' extra: {HINT}")
    ):
        open_observation(tmp_path / "obs.ms")
    assert main(["import-ms", str(tmp_path / "obs.ms"), "-o", str(tmp_path / "o.zarr")]) == 2
    assert HINT in capsys.readouterr().err
    assert main(["export-ms", str(tmp_path / "r.zarr"), "--ms", str(tmp_path / "obs.ms")]) == 2
    assert HINT in capsys.readouterr().err
    args = ["simulate", "--preset", "demo", "-o", str(tmp_path / "sim.ms")]
    assert main(args) == 2
    assert HINT in capsys.readouterr().err and not (tmp_path / "sim.ms").exists()


def test_zarr_stores_open_without_the_extra(tmp_path, no_casacore):
    from test_store import _observation

    from tabascal.store import write_observation

    write_observation(tmp_path / "obs.zarr", _observation())
    assert not is_measurement_set(tmp_path / "obs.zarr")
    block = open_observation(tmp_path / "obs.zarr", rows=slice(1, 3))
    np.testing.assert_array_equal(block.vis, read_observation(tmp_path / "obs.zarr").vis[1:3])
    with pytest.raises(ValueError, match="apply to Measurement Sets"):
        open_observation(tmp_path / "obs.zarr", correlation="XX")
