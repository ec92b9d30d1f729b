"""Converting a Measurement Set into a tabascal observation store (``tabascal import-ms``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tabascal.measurement_set.reader import MeasurementSetReader
from tabascal.store import ObservationMeta, ObservationWriter, row_blocks


def import_measurement_set(
    ms_path, output, *, overwrite: bool = False, chunk_rows: int | None = None, **options
) -> ObservationMeta:
    """Write the Measurement Set ``ms_path`` as a new store at ``output``, block of baselines by
    block; ``options`` as for :class:`MeasurementSetReader`. Returns the store's metadata,
    whose ``metadata['measurement_set']['noise']`` says where the noise came from."""
    with MeasurementSetReader(ms_path, **options) as reader:
        noise = reader.noise  # first: an estimate reads the data once before they are written
        meta = dataclasses.replace(reader.meta, metadata=reader.metadata())
        scalar = np.ndim(noise) == 0
        with ObservationWriter(
            output,
            meta,
            noise=float(noise) if scalar else None,
            noise_per_channel=np.ndim(noise) == 2,
            overwrite=overwrite,
            chunk_rows=chunk_rows,
        ) as writer:
            for rows in row_blocks(meta.n_bl, writer.chunk_rows):
                obs = reader.read(rows)
                writer.write_rows(
                    rows.start, vis=obs.vis, flags=obs.flags, noise=None if scalar else obs.noise
                )
    return meta
