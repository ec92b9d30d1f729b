"""The observation store: a zarr v3 group chunked along the baseline axis.

Layout (format ``tabascal.observation``, version 1; n_bl baselines, n_ant antennas, n_freq
channels, n_time integrations, n_sat satellites, n_src sky sources):

=============================  ==============================  =========  ===================
array                          shape                           dtype      unit
=============================  ==============================  =========  ===================
vis                            (n_bl, n_freq, n_time)          complex64  Jy
flags                          (n_bl, n_freq, n_time)          bool       True = bad
noise                          (), (n_bl,) or (n_bl, n_freq)   float64    Jy, std of Re and Im
a1, a2                         (n_bl,)                         int32      antenna index
ant_itrf                       (n_ant, 3)                      float64    m (ITRF)
times_s                        (n_time,)                       float64    s from the start
freqs_hz                       (n_freq,)                       float64    Hz
satellites/altitude_m          (n_sat,)                        float64    m
satellites/inclination_rad,    (n_sat,)                        float64    rad
raan_rad, arg_lat_rad
truth/sky_vis, truth/rfi_vis   (n_bl, n_freq, n_time)          complex64  Jy
truth/gains                    (n_ant, n_freq, n_time)         complex64  1
truth/rfi_amp                  (n_ant, n_sat, n_freq, n_time)  float32    sqrt(Jy)
truth/rfi_eirp_w_hz            (n_sat, n_freq, n_time)         float64    W/Hz
truth/source_ra_rad, _dec_rad  (n_src,)                        float64    rad
truth/source_flux_jy           (n_src, n_freq)                 float64    Jy
=============================  ==============================  =========  ===================

Group attributes: ``format``, ``format_version``, ``epoch_utc`` (ISO 8601 start),
``gast0_rad``, ``int_time`` (s), ``chan_width`` (Hz, each channel's width), ``ra_rad``,
``dec_rad`` (phase centre), ``dish_diameter_m``, ``satellite_names`` (list or null) and
``metadata`` (free JSON).
Satellites given as TLE element sets (:class:`tabascal.observation.tle.TleOrbits`) are kept
instead of the ``satellites/*`` arrays in the attribute ``satellite_tle`` = {``line1``:
[...], ``line2``: [...], ``ut1_utc_s``: float} and propagated from the store's ``epoch_utc`` and
``gast0_rad`` when read. This addition keeps ``format_version`` 1: every version-1 store reads
as before, and a reader without TLE support refuses such a store by naming the missing
``satellites/altitude_m`` array rather than misreading it. A store without satellites has
``satellites/*`` arrays of length 0.
Ground transmitters and aircraft (:mod:`tabascal.observation.emitters`) follow the satellites
in the emitter order of every per-emitter array and of ``satellite_names``: each transmitter's
WGS84 position in ``emitters/ground/lat_rad``, ``lon_rad``, ``height_m`` (n_ground,), the
aircraft tracks' samples one after another in ``emitters/aircraft/times_s`` (n_samples,) and
``itrf`` (n_samples, 3), with ``track_start`` (n_aircraft + 1,) where each begins. A store
holding them is ``format_version`` 2, so that a reader of version 1 alone refuses it rather than
reading its satellites alone; every other store stays version 1.
A noise per baseline and channel (the same in every integration) is an addition that keeps
``format_version`` 1: a reader that knows only () and (n_bl,) refuses such a store by naming
the noise's shape rather than misreading it.
Baseline-shaped arrays share one chunking along the baseline axis (whole channel and time axes
in each chunk), so a process reads its own rows only. Writes go to a hidden sibling directory
renamed into place at the end: a failed write leaves nothing under the final name.

Integrity. The writer writes every chunk of every array, even one equal to the fill value
(which zarr leaves out by default), and says so in the group attribute ``every_chunk_written``
= true; every array's codecs end with a crc32c checksum (``zarr.codecs.Crc32cCodec``). Both keep
``format_version`` 1: zarr decodes the checksum by itself, so an older reader reads these stores,
and this reader reads older ones. Opening a store (:class:`StoreReader`, and ``store_info``,
``read_meta``, ``read_observation``) refuses one that lacks chunks, naming each array and its
missing rows; ``allow_missing=True`` reads missing vis and flags chunks as flagged cells
instead. In a store without ``every_chunk_written`` an absent chunk may hold the fill value
only (all-flagged flags, all-zero truth), so there only the vis and noise chunks are checked.
A chunk that does not decode is a StoreError naming the array, its rows and its chunk, and
:func:`verify_store` reads every chunk and lists every missing or undecodable one.
"""

from tabascal.store.format import (
    FORMAT,
    FORMAT_VERSION,
    ChunkDamage,
    Observation,
    ObservationMeta,
    StoreError,
    StoreInfo,
    StoreVerification,
    Truth,
    default_chunk_rows,
    row_blocks,
)
from tabascal.store.reader import (
    StoreReader,
    read_meta,
    read_observation,
    store_info,
    verify_store,
)
from tabascal.store.summary import (
    ObservationSummary,
    summarize,
    summary_lines,
    verification_lines,
)
from tabascal.store.writer import ObservationWriter, write_observation

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ChunkDamage",
    "Observation",
    "ObservationMeta",
    "ObservationSummary",
    "ObservationWriter",
    "StoreError",
    "StoreInfo",
    "StoreReader",
    "StoreVerification",
    "Truth",
    "default_chunk_rows",
    "read_meta",
    "read_observation",
    "row_blocks",
    "store_info",
    "summarize",
    "summary_lines",
    "verification_lines",
    "verify_store",
    "write_observation",
]
