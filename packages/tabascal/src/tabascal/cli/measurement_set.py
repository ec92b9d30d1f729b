"""The ``tabascal import-ms`` and ``tabascal export-ms`` commands.

Each ``add_<name>(subparsers)`` registers its parser and sets ``func``, which receives the
parsed arguments and returns an exit status. Heavy modules are imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys

from tabascal import TabascalError

CORRELATIONS = ("I", "XX", "YY", "RR", "LL")  # as measurement_set.correlations.CORRELATIONS
NOISE_METHODS = ("column", "estimate")  # as measurement_set.reader.NOISE_METHODS


def _selection_arguments(parser, column_help: str) -> None:
    parser.add_argument("--column", default="DATA", help=column_help)
    parser.add_argument(
        "--correlation",
        default="I",
        type=str.upper,
        choices=CORRELATIONS,
        help="correlation to fit: a parallel hand, or Stokes I (stored, or (XX+YY)/2 or "
        "(RR+LL)/2) [default I]",
    )
    parser.add_argument(
        "--spw",
        type=_spw_argument,
        metavar="SPW",
        help="spectral window id (needed if several), or several read side by side as one "
        "band: ids separated by commas (0,1) or all; their channels must be of equal width "
        "and spacing, and each window must begin one spacing above where the one below ends",
    )
    parser.add_argument("--field", type=int, help="field id (needed if several)")
    parser.add_argument(
        "--time-tolerance",
        type=float,
        default=0.1,  # as measurement_set.selection.TIME_TOLERANCE
        metavar="FRACTION",
        help="how far a row's TIME may lie from its integration of the grid, as a fraction of "
        "INTERVAL (at least 0.001, below 0.5) [default 0.1]",
    )


def _spw_argument(text: str) -> int | str | tuple[int, ...]:
    """``N``, ``N,M,...`` or ``all`` as a window id, ids or 'all'."""
    if text.strip().lower() == "all":
        return "all"
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a spectral window id, ids separated by commas (0,1), or all"
        ) from None
    return ids[0] if len(ids) == 1 else ids


def _range_argument(text: str) -> slice:
    """``A:B`` (either may be left out, negative counts from the end) as a slice."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        return slice(*(int(p) if p.strip() else None for p in parts))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a range START:STOP of indices (e.g. 10:200, :64, =-8:)"
        ) from None


def _fail(command: str, err: BaseException) -> int:
    print(f"tabascal {command}: error: {err}", file=sys.stderr)
    return 2


def _elevation_lines(meta) -> list[str]:
    import numpy as np

    from tabascal.observation.geometry import satellite_elevation

    el = np.rad2deg(satellite_elevation(meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad))
    return [
        f"    {meta.orbits.label(s):<16} {el[s].min():6.1f} to {el[s].max():6.1f} deg"
        + ("  (below the horizon throughout: the fit will refuse it)" if el[s].max() <= 0 else "")
        for s in range(meta.n_sat)
    ]


def _grid_lines(meta, info: dict) -> list[str]:
    """What import-ms did to read the MS's rows as a (time, baseline) grid, one line each."""
    from tabascal.measurement_set.selection import SPACING_RTOL

    lines = []
    if info["correlation_in_place_of"]:
        lines.append(
            f"  Stokes {info['correlation_in_place_of']} asked: the data hold one correlation, "
            f"{info['correlation']}, read in its place (an unpolarised sky has XX = YY = I)"
        )
    if not info["rows_in_time_order"]:
        lines.append("  rows not in time order: read sorted by time, then baseline")
    if info["max_time_offset"] > SPACING_RTOL:  # more than timestamps' own rounding
        lines.append(
            f"  timestamps up to {info['max_time_offset']:.3g} INTERVAL off the grid "
            f"(tolerance {info['time_tolerance']:g}): each row placed on its nearest integration"
        )
    if info["rows_filled"]:
        lines.append(
            f"  {info['rows_filled']} (integration, baseline) rows missing from the MS "
            f"({info['integrations_filled']} whole integrations): filled as flagged, "
            f"{info['rows_filled'] * meta.n_freq} cells of vis 0"
        )
    if info.get("channels_filled"):
        lines.append(
            f"  {info['channels_filled']} channels of the grid missing between those read: "
            f"filled as flagged, {info['channels_filled'] * meta.n_bl * meta.n_time} cells of "
            "vis 0"
        )
    return lines


def _noise_lines(info: dict, per_channel_asked: bool = False) -> list[str]:
    """Where the noise came from and why, and its form (per baseline, or per baseline and
    channel), for the import summary."""
    noise = info["noise"]
    per_channel = noise.get("per_channel", False)
    median = f"median {noise['median']:.4g} Jy"
    if noise["method"] == "column":
        remark = f" as asked, {median}; {noise['reason']}" if noise["reason"] else f", {median}"
        lines = [f"  noise from {noise['column']}{remark}"]
        if per_channel:
            lines.append("    per baseline and channel: each cell's quadratic mean over time")
        elif per_channel_asked:
            lines.append(f"    per baseline: {noise['column']} has no channel axis")
        return lines
    along = "adjacent-integration" if noise["axis"] == "integrations" else "adjacent-channel"
    within = " within each channel" if per_channel else ""
    estimated = f"noise estimated from {along} differences{within}"
    first = f"  {noise['reason']}: {estimated}" if noise["reason"] else f"  {estimated} as asked"
    fitted = "channel by channel " if per_channel else ""
    return [
        f"{first}, {median}",
        f"    per-antenna factors fitted {fitted}to the baselines' estimates, which scatter by "
        f"{100 * noise['scatter']:.1f} % about them ({100 * noise['expected_scatter']:.1f} % "
        "expected from their samples)",
    ]


def _range_lines(meta, info: dict) -> list[str]:
    """The channels and integrations read, when not all of them."""
    lines = []
    start, stop = info["channels"]
    windows = info.get("window_channels", [])
    if stop - start < info["channels_in_window"]:
        of = "the window's" if len(windows) < 2 else "the band's"
        lines.append(
            f"  channels {start}:{stop} of {of} {info['channels_in_window']} "
            f"({meta.freqs_hz[0] / 1e6:.6g} to {meta.freqs_hz[-1] / 1e6:.6g} MHz)"
        )
        if len(windows) > 1:
            each = ", ".join(
                f"{w['spw']}: {w['channels'][0]}:{w['channels'][1]} of {w['channels_in_window']}"
                for w in windows
            )
            lines.append(f"    MS channels of each window read: {each}")
    start, stop = info["integrations"]
    if stop - start < info["integrations_in_grid"]:
        lines.append(f"  integrations {start}:{stop} of {info['integrations_in_grid']}")
    return lines


def _import_ms(args: argparse.Namespace) -> int:
    from tabascal.measurement_set import import_measurement_set

    if args.satellites and not args.tle:
        return _fail("import-ms", ValueError("--satellites needs --tle FILE"))
    try:
        meta = import_measurement_set(
            args.ms,
            args.output,
            overwrite=args.overwrite,
            column=args.column,
            correlation=args.correlation,
            spw=args.spw,
            field=args.field,
            tle_file=args.tle,
            satellites=args.satellites or None,
            ground_file=args.ground,
            aircraft_file=args.aircraft,
            ut1_utc_s=args.ut1_utc,
            time_tolerance=args.time_tolerance,
            channels=args.channels,
            times=args.times,
            noise=args.noise,
            noise_per_channel=args.noise_per_channel,
        )
    except FileExistsError:
        return _fail("import-ms", ValueError(f"{args.output} exists; add --overwrite"))
    except TabascalError as err:
        return _fail("import-ms", err)
    info = meta.metadata["measurement_set"]
    spw = info["spw"]
    windows = f"spectral window {spw}"
    if isinstance(spw, list):
        windows = f"spectral windows {', '.join(map(str, spw))} side by side"
    print(
        f"wrote {args.output} from {args.ms} ({info['column']}, correlation "
        f"{info['correlation']}, {windows}, field {info['field']})"
    )
    print(
        f"  {meta.n_ant} stations, {meta.n_bl} baselines, {meta.n_freq} channels, "
        f"{meta.n_time} integrations of {meta.int_time:g} s from {meta.epoch_utc}"
    )
    for line in _range_lines(meta, info):
        print(line)
    if info["autocorrelation_rows_dropped"]:
        print(f"  {info['autocorrelation_rows_dropped']} autocorrelation rows left out")
    for line in _grid_lines(meta, info):
        print(line)
    for line in _noise_lines(info, args.noise_per_channel):
        print(line)
    if meta.n_sat:
        print(f"  {meta.n_sat} satellites, elevation during the observation:")
        for line in _elevation_lines(meta):
            print(line)
    else:
        print(
            "  no satellites: give --tle FILE --satellites N ... (or satellites in the run "
            "configuration) before fitting"
        )
    print(f"see: tabascal inspect {args.output}")
    return 0


def add_import_ms(subparsers) -> None:
    parser = subparsers.add_parser(
        "import-ms",
        help="convert a Measurement Set into an observation store",
        description="Read one data column, correlation, spectral window and field of a "
        "Measurement Set into a zarr observation store. Rows may come in any order; each is "
        "placed on the nearest integration of a grid spaced by INTERVAL, and baselines or "
        "integrations without rows are filled as flagged; autocorrelations are left out. "
        "The noise comes from the MS's SIGMA or WEIGHT columns, or, where those are "
        "placeholders, is estimated from the data; the summary says which and why. "
        """Needs the 'ms' extra: pip install "tabascal[ms]".""",
    )
    parser.add_argument("ms", help="the Measurement Set")
    parser.add_argument("-o", "--output", required=True, help="store to create (e.g. obs.zarr)")
    _selection_arguments(parser, "data column to read [default DATA]")
    parser.add_argument(
        "--channels",
        type=_range_argument,
        metavar="A:B",
        help="channels to read, by their index in the spectral window as the MS stores it, "
        "or, of several windows, in their band from its lowest frequency (Python slice: "
        "10:200, :64; from the end with '=': --channels=-8:) [default: all]",
    )
    parser.add_argument(
        "--times",
        type=_range_argument,
        metavar="A:B",
        help="integrations to read, by their index in time order (Python slice, as --channels) "
        "[default: all]",
    )
    parser.add_argument(
        "--noise",
        choices=NOISE_METHODS,
        help="column: the noise column that describes --column (SIGMA_SPECTRUM, "
        "WEIGHT_SPECTRUM, SIGMA, WEIGHT); estimate: from the data, by differences of adjacent "
        "integrations fitted to per-antenna factors [default: the column, unless it is a "
        "placeholder (SIGMA 1 everywhere, a constant WEIGHT): then the estimate]",
    )
    parser.add_argument(
        "--noise-per-channel",
        action="store_true",
        help="one noise per baseline and channel instead of per baseline: from SIGMA_SPECTRUM "
        "or WEIGHT_SPECTRUM, each cell's quadratic mean over time; estimated, from differences "
        "of adjacent integrations within each channel, fitted to per-antenna factors channel "
        "by channel (a per-row SIGMA or WEIGHT, which has no channel axis, still gives one "
        "per baseline)",
    )
    parser.add_argument("--tle", help="TLE file of the satellites' orbits")
    parser.add_argument(
        "--satellites",
        type=int,
        nargs="+",
        metavar="N",
        help="catalogue numbers of the satellites in --tle [default: all in the file]",
    )
    parser.add_argument(
        "--ground",
        metavar="FILE",
        help="CSV of ground transmitters: a header naming name, lat_deg, lon_deg, height_m "
        "(WGS84), then one transmitter a line",
    )
    parser.add_argument(
        "--aircraft",
        metavar="FILE",
        help="CSV of aircraft tracks as ADS-B decoders write them: a header naming time (ISO "
        "8601 UTC or Unix seconds), lat, lon, a height (height_m, geoaltitude or alt_ft) and "
        "optionally the aircraft (callsign, icao24), then one position a line",
    )
    parser.add_argument(
        "--ut1-utc",
        type=float,
        default=0.0,
        metavar="S",
        help="UT1 - UTC in s (IERS Bulletin A) for the TLE orbits [default 0]",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing store")
    parser.set_defaults(func=_import_ms)


def _export_lines(args: argparse.Namespace, report, cleaned: str | None) -> list[str]:
    """What export-ms wrote, one line a product, for its summary; ``cleaned``: the cleaned
    data's column, None when the results hold no gains."""
    corr = f"correlation {report.correlations}"
    lines = [f"  {', '.join(report.columns[:3])}: the fit in {corr}, 0 in every other cell"]
    written = set(report.columns)
    per_satellite = [c for c in report.columns if c.startswith("TAB_RFI_SAT")]
    if per_satellite:
        lines.append(
            f"  {', '.join(per_satellite)}: each satellite's fitted RFI alone (before the "
            f"gains; its name in the column's comment) in {corr}, 0 in every other cell"
        )
    if cleaned is None:
        lines.append(f"  no cleaned data: {args.results} holds no gains")
    elif cleaned in written:
        lines.append(
            f"  {cleaned}: {report.data_column} minus the fitted RFI (with the "
            f"fitted gains) in {corr}; every other cell as {report.data_column}"
        )
    weights = [c for c in report.columns if "WEIGHT" in c]
    if weights:
        per_hand = " (each hand 1/(2 noise^2))" if " = " in report.correlations else ""
        others = "as it was" if not weights[0].startswith("TAB_") else "0"
        lines.append(
            f"  {', '.join(weights)}: 1/noise^2 of the fit{per_hand}; every other cell {others}"
        )
    elif report.noise_from is None:
        lines.append(
            f"  no weights: {args.results} does not record the noise the fit used (written "
            "before tabascal run recorded it); give --data STORE (the store the fit read)"
        )
    if report.n_flagged is not None:
        share = 100 * report.n_flagged / max(1, report.n_cells)
        lines.append(
            f"  TAB_FLAG_RESIDUAL: {report.n_flagged} of {report.n_cells} cells ({share:.2g} %) "
            f"with |residual| > {args.flag_residual:g} noise, in every correlation"
        )
    if "FLAG" in written:
        lines.append("  FLAG: ORed with TAB_FLAG_RESIDUAL")
    lines += _noise_source_lines(args, report)
    for original, backup in report.backups.items():
        lines.append(f"  the original {original} kept in {backup}")
    (c0, c1, n_chan), (t0, t1, n_time) = report.channels, report.integrations
    if c1 - c0 < n_chan or t1 - t0 < n_time:
        lines.append(
            f"  only channels {c0}:{c1} of {n_chan} and integrations {t0}:{t1} of {n_time}, "
            "which the fit read, hold its values"
        )
    lines += [f"  {line}" for line in report.recovered]
    return lines


def _noise_source_lines(args: argparse.Namespace, report) -> list[str]:
    """Where the noise of the weights and residual flags came from, for export-ms's summary."""
    from tabascal.measurement_set.export import NOISE_FROM_RESULTS

    if report.noise_from is None:
        return []
    median = f"median {report.noise_median:.4g} Jy"
    if report.noise_from == NOISE_FROM_RESULTS:
        return [f"  noise: the fit's, as {args.results} records it, {median}"]
    return [
        f"  noise: the store's, {median}: {args.results} does not record the fit's (written "
        "before tabascal run recorded it), which differs after a run with data.noise: estimate"
    ]


def _fitted_selection(args: argparse.Namespace) -> dict:
    """The options naming what of the MS the fit read (the same for the columns and the gains
    table)."""
    return {
        "store": args.data,
        "column": args.column,
        "correlation": args.correlation,
        "spw": args.spw,
        "field": args.field,
        "time_tolerance": args.time_tolerance,
    }


def _write_gains_table(args: argparse.Namespace):
    from tabascal.measurement_set.gains_table import write_gains_table

    return write_gains_table(
        args.results,
        args.ms,
        args.gains_table,
        **_fitted_selection(args),
        overwrite=args.overwrite_gains_table,
    )


def _gains_table_lines(report) -> list[str]:
    """What the gains table holds, for export-ms's summary."""
    windows = ", ".join(map(str, report.spws))
    hands = " and ".join(report.fitted)
    same = " (equal: a Stokes I fit)" if len(report.fitted) > 1 else ""
    share = 100 * report.n_flagged / max(1, report.n_cells)
    lines = [
        f"wrote the gains table {report.path} (B Jones, for applycal): {report.n_rows} rows, "
        f"{report.n_antennas} antennas x {report.n_integrations} integrations x spectral "
        f"window(s) {windows}",
        f"  gains of receptor(s) {hands}{same}, reference antenna {report.ref_antenna}; "
        f"{report.n_flagged} of the fit's {report.n_cells} antenna cells ({share:.2g} %) "
        "flagged (no unflagged baseline there)",
    ]
    if report.n_fitted < report.n_antennas:
        lines.append(
            f"  {report.n_antennas - report.n_fitted} antennas of the MS without data in the "
            "fit: flagged"
        )
    return lines


def _export_ms(args: argparse.Namespace) -> int:
    from tabascal.measurement_set import export_results
    from tabascal.measurement_set.export import default_cleaned_column, records_fit_noise
    from tabascal.measurement_set.gains_table import check_gains_table

    cleaned = args.cleaned_column or default_cleaned_column(args.results)
    gains = None
    try:
        if args.gains_table is not None:  # refused before any column is written
            check_gains_table(args.results, args.gains_table, overwrite=args.overwrite_gains_table)
        report = export_results(
            args.results,
            args.ms,
            **_fitted_selection(args),
            overwrite_columns=args.overwrite_columns,
            cleaned_column=cleaned,
            overwrite_column=args.overwrite_column,
            weights=args.data is not None or records_fit_noise(args.results),
            write_weights=args.write_weights,
            flag_residual=args.flag_residual,
            write_flags=args.write_flags,
            per_satellite=args.per_satellite,
        )
        if args.gains_table is not None:
            gains = _write_gains_table(args)
    except TabascalError as err:
        return _fail("export-ms", err)
    added = [c for c in report.columns if c not in report.replaced]
    if added:
        print(f"added {', '.join(added)} to {args.ms}: {report.n_rows} rows")
        if report.replaced:
            print(f"  replaced {', '.join(report.replaced)}")
    else:
        print(f"replaced {', '.join(report.replaced)} in {args.ms}: {report.n_rows} rows")
    for line in _export_lines(args, report, cleaned):
        print(line)
    for line in [] if gains is None else _gains_table_lines(gains):
        print(line)
    return 0


def add_export_ms(subparsers) -> None:
    parser = subparsers.add_parser(
        "export-ms",
        help="write a fit's sky, RFI, residuals and cleaned data into the Measurement Set",
        description="Add the columns TAB_SKY_DATA, TAB_RFI_DATA and TAB_RES_DATA (shaped and "
        "stored like the data column) holding a fit's results in the cells and correlation(s) "
        "it was fitted from, and the cleaned data: the data less the fitted RFI; the weights "
        "1/noise^2 (TAB_WEIGHT) with the noise the fit used, which results.zarr records (for "
        "results that do not, the store's: --data), and, with --flag-residual, flags. "
        "Existing columns are modified only when named (--cleaned-column, --write-weights, "
        "--write-flags). Each column is written under a temporary name and renamed when "
        "complete. With --gains-table, also the fitted gains as a CASA calibration table for "
        "applycal.",
    )
    parser.add_argument("results", help="results store of tabascal run (out/results.zarr)")
    parser.add_argument("--ms", required=True, help="the Measurement Set the data came from")
    parser.add_argument(
        "--data",
        metavar="STORE",
        help="the observation store the fit read (from import-ms): export-ms then writes into "
        "its selection (channels and integrations too), and takes the noise from it for "
        "results that do not record the fit's",
    )
    _selection_arguments(parser, "the data column the fit read [default: the store's, or DATA]")
    # Without these defaults the store's options (--data) could not be told from the defaults.
    parser.set_defaults(column=None, correlation=None, time_tolerance=None)
    parser.add_argument(
        "--cleaned-column",
        metavar="NAME",
        help="column of the cleaned data, the data column less the fitted RFI; CORRECTED_DATA "
        "is written only when named here [default TAB_CLEANED_DATA]",
    )
    parser.add_argument(
        "--overwrite-column",
        action="store_true",
        help="replace an existing --cleaned-column that is not a TAB_* column (CORRECTED_DATA)",
    )
    parser.add_argument(
        "--write-weights",
        action="store_true",
        help="write the weights into WEIGHT (and WEIGHT_SPECTRUM) instead of TAB_WEIGHT, the "
        "originals kept in TAB_WEIGHT_BACKUP (TAB_WEIGHT_SPECTRUM_BACKUP) unless those exist",
    )
    parser.add_argument(
        "--flag-residual",
        type=float,
        metavar="K",
        help="flag cells whose |residual| exceeds K times the noise, in TAB_FLAG_RESIDUAL",
    )
    parser.add_argument(
        "--write-flags",
        action="store_true",
        help="OR the --flag-residual flags into FLAG, the original kept in TAB_FLAG_BACKUP "
        "unless that exists",
    )
    parser.add_argument(
        "--overwrite-columns", action="store_true", help="replace existing TAB_* columns"
    )
    parser.add_argument(
        "--per-satellite",
        action="store_true",
        help="also write each satellite's fitted RFI (before the gains) into TAB_RFI_SAT<k>, k "
        "its index in the store; needs results with rfi_vis_by_satellite (tabascal run with "
        "output.per_satellite)",
    )
    parser.add_argument(
        "--gains-table",
        metavar="PATH",
        help="also write the fitted gains as a CASA calibration table (B Jones, one row per "
        "integration and antenna) that applycal applies: V / (g_i conj(g_j))",
    )
    parser.add_argument(
        "--overwrite-gains-table",
        action="store_true",
        help="replace an existing --gains-table (a table; anything else is refused)",
    )
    parser.set_defaults(func=_export_ms)
