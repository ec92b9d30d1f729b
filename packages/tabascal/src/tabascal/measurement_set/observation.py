"""One entry point for observations in either format: a tabascal store or a Measurement Set."""

from __future__ import annotations

from pathlib import Path

from tabascal.store import StoreInfo, read_observation, store_info


def is_measurement_set(path) -> bool:
    """Whether ``path`` names a Measurement Set: a casacore table directory (with table.dat),
    or a path ending in .ms (any case) that does not exist yet."""
    path = Path(path)
    return (path / "table.dat").is_file() or (path.suffix.lower() == ".ms" and not path.exists())


def open_observation(path, rows: slice | None = None, *, truth: bool = True, **ms_options):
    """Baseline ``rows`` (all when None) of the observation at ``path``, a zarr store or a
    Measurement Set, as a :class:`tabascal.store.Observation`.

    ``ms_options`` (column, correlation, spw, field, orbits, tle_file, satellites, ut1_utc_s,
    time_tolerance, channels, times, noise, noise_per_channel) apply to Measurement Sets only
    (see :class:`MeasurementSetReader`); a Measurement Set without python-casacore raises
    :class:`MissingExtraError`, which says how to install it.
    """
    if is_measurement_set(path):
        from tabascal.measurement_set.reader import read_observation_ms

        return read_observation_ms(path, rows, **ms_options)
    if ms_options:
        raise ValueError(
            f"{path} is a tabascal store; options {sorted(ms_options)} apply to Measurement Sets"
        )
    return read_observation(path, rows, truth=truth)


def observation_info(path, **ms_options) -> StoreInfo:
    """Sizes of the observation at ``path`` (a store's from its metadata; a Measurement Set's
    from its small columns, with chunk_rows = n_bl and format_version 0; without reading the
    data, even when the noise is to be estimated from them)."""
    if not is_measurement_set(path):
        return store_info(path)
    from tabascal.measurement_set.reader import MeasurementSetReader

    with MeasurementSetReader(path, **ms_options) as reader:
        m = reader.meta
        return StoreInfo(
            n_bl=m.n_bl,
            n_ant=m.n_ant,
            n_freq=m.n_freq,
            n_time=m.n_time,
            n_sat=m.n_sat,
            chunk_rows=m.n_bl,
            noise_per_baseline=reader.noise_per_baseline,
            has_truth=False,
            format_version=0,
            noise_per_channel=reader.noise_per_channel,
        )
