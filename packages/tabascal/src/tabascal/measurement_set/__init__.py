"""CASA Measurement Sets in and out of tabascal (optional extra ``tabascal[ms]``).

- :func:`open_observation` reads a baseline block of a zarr store or a Measurement Set as a
  :class:`tabascal.store.Observation`; :class:`MeasurementSetReader` and
  :func:`read_observation_ms` read Measurement Sets (one spectral window, field, data column
  and correlation, a range of channels and integrations; rows by (time, baseline); see
  :mod:`.reader` and :mod:`.selection`); the noise from SIGMA or WEIGHT, or estimated from the
  data where those are placeholders (:mod:`.noise`, plain numpy; :class:`NoiseSource` says
  which).
- :func:`import_measurement_set` converts one into a store (``tabascal import-ms``).
- :func:`export_results` adds a fit's TAB_SKY_DATA, TAB_RFI_DATA and TAB_RES_DATA columns to
  the Measurement Set the data came from (``tabascal export-ms``).
- :func:`write_measurement_set` writes a store as a Measurement Set (``tabascal simulate -o
  obs.ms``).

python-casacore is imported only when a Measurement Set is touched; without it those calls
raise :class:`MissingExtraError` saying ``pip install "tabascal[ms]"``.
"""

from tabascal.measurement_set._casacore import INSTALL_HINT, MissingExtraError
from tabascal.measurement_set.correlations import CORRELATIONS, correlation_plan
from tabascal.measurement_set.export import RESULT_COLUMNS, ExportReport, export_results
from tabascal.measurement_set.import_ms import import_measurement_set
from tabascal.measurement_set.observation import (
    is_measurement_set,
    observation_info,
    open_observation,
)
from tabascal.measurement_set.reader import MeasurementSetReader, NoiseSource, read_observation_ms
from tabascal.measurement_set.selection import MsError, MsSelection
from tabascal.measurement_set.writer import write_measurement_set

__all__ = [
    "CORRELATIONS",
    "INSTALL_HINT",
    "RESULT_COLUMNS",
    "ExportReport",
    "MeasurementSetReader",
    "MissingExtraError",
    "MsError",
    "MsSelection",
    "NoiseSource",
    "correlation_plan",
    "export_results",
    "import_measurement_set",
    "is_measurement_set",
    "observation_info",
    "open_observation",
    "read_observation_ms",
    "write_measurement_set",
]
