"""RFI visibilities of every baseline, with baselines grouped by the fine sampling they need.

A baseline whose RFI fringe winds through ``c`` cycles across a cell (an integration, or a
channel) needs more fine samples than a short one whose fringe barely turns. Fine samples are
Gauss-Legendre nodes by default (``sampling: gauss``; ``ri_kernels.gauss_legendre_offsets``):
averaging ``exp(i w y)``, ``w = pi c``, over the cell with ``n`` nodes errs by at most
``2^(2n) (n!)^4 / ((2n + 1) ((2n)!)^3) w^(2n)`` relative to the signal's ``|A|^2``
(Abramowitz & Stegun 25.4.30), which falls faster than any power of ``n`` once ``n > w / 2``.
The midpoint rule (``sampling: midpoint``) errs by at most
``|sin(pi c) (1 / (n sin(pi c / n)) - 1 / (pi c))| <= min(pi^2 c^2, pi c) / (6 n^2)`` for
``n > c`` and takes powers of two. Either way each baseline gets the fewest samples that hold
the error below ``tolerance`` times the noise for the RFI signal-to-noise of the data,
separately in time and in frequency: a LEO satellite at 10^5 times the noise that crosses a
channel with 1.6 cycles of fringe needs 8 Gauss nodes there against the midpoint rule's
cap of 256. Baselines needing the same time sampling form a group; groups needing at most
``quadrature_limit`` time samples use the quadrature operator, the rest the analytic operator,
which integrates time in closed form (the "hybrid"). Each group calls its ri_kernels seam with
its own index arrays and writes its rows of the output.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import ri_kernels
from tabascal.config import option_field
from tabascal.model.fine_sampling import SAMPLINGS, required_samples

OPERATORS = ("quadrature", "analytic")
# Whether analytic groups keep their phase moments across steps: within the cache budget
# (auto), always or never ("on" and "off" would read as booleans in YAML).
PHASE_CACHES = ("auto", "always", "never")
# Whether each analytic group takes the fewest cubic-phase terms its phases need (auto), or
# the configured ones (fixed).
ANALYTIC_OPTIONS = ("auto", "fixed")
# The analytic operator's truncation is held to this fraction of the averaging tolerance, so
# that it adds little to the fine sampling's error.
OPERATOR_ERROR_SHARE = 0.1
# The planned phase bounds are the known orbits'; fitted orbit corrections move a delay's
# derivatives by a few percent at most (offsets of seconds and kilometres against ranges of
# hundreds of kilometres), well within this factor.
PHASE_BOUND_MARGIN = 2.0
# The time stencil's points are the analytic operator's monomial coefficients, which
# ri_kernels caps; the frequency stencil takes the same cap.
MAX_STENCIL = ri_kernels.MAX_COEFFICIENTS


@dataclass(frozen=True)
class RfiVisConfig:
    """Static settings of the RFI-visibility component.

    quadrature_limit: groups needing at most this many time samples per integration use the
      quadrature operator; the rest the analytic one. 0 makes every group analytic.
    tolerance: largest time- or frequency-averaging error allowed, as a fraction of the noise.
    max_samples: cap on fine samples per cell (time and frequency).
    sampling: fine-sample rule, "gauss" (Gauss-Legendre nodes) or "midpoint".
    time_stencil: Lagrange points per time stencil (quadrature) and coefficients (analytic).
    freq_stencil: Lagrange points per frequency stencil.
    segments, terms, cubic_terms: options of the analytic operator (see ri_kernels); under
      ``analytic_options`` "auto" cubic_terms is the most a group takes, and segments what it
      takes unless one piece does as well.
    analytic_options: "auto": each analytic group takes the fewest cubic terms its own phases
      need, at most ``cubic_terms``, and one piece per integration where its phases' curvature
      allows (``analytic_spec``); "fixed": ``segments`` and ``cubic_terms`` as set.
    channel_terms: under "auto", the most terms of the analytic operator's series across a
      channel that a group takes (its moments then formed, and kept, once per channel, not
      per fine channel); 0 (the default), or "fixed": at every fine channel.
    max_groups: most groups (compiled operator calls); the smallest are merged upwards.
    memory_budget_mb: fine-grid working memory of each operator call (MiB), which sets how many
      cells (and baselines) the operators evaluate at once. On the baseline axis each device
      takes its share, this divided by the number of devices (``row_placement.plan_rows``).
    phase_cache: whether the analytic groups' phase moments, which fixed orbits make the same
      at every step, are formed once per fit and kept (``ri_kernels.
      analytic_moments_with_indices``): "auto" keeps the groups' moments in order while their
      total per device fits the budget, "always" keeps every group's, "never" none (formed
      at every evaluation, as the operator does alone).
    phase_cache_mb: the budget, most MiB of kept moments per device under "auto"; None (the
      default) sets it from each device's memory (``phase_cache_budget_bytes``).
    phase_cache_fraction: with ``phase_cache_mb`` None, the budget as a fraction of a device's
      memory (``planning.memory.device_memory_bytes``).
    """

    # With an analytic group's phase moments kept across steps (phase_cache, the default), the
    # analytic operator is cheaper than quadrature from a few time samples per integration,
    # while the demo's groups (1 to 3 samples) stay cheapest on quadrature. With the moments
    # formed at every step (phase_cache never, or the source axis) a quadrature group costs
    # less below ~30 samples: set 32 there. Figures: docs/science.md, "The defaults and why".
    quadrature_limit: int = option_field(
        4,
        "groups needing at most this many time samples per integration use quadrature, "
        "the rest the analytic operator (0 = all analytic)",
        min=0,
        max=4096,
    )
    tolerance: float = option_field(
        0.1, "largest averaging error allowed, as a fraction of the noise", min=1e-6
    )
    max_samples: int = option_field(256, "most fine samples per cell", min=1, max=4096)
    # Seven points follow a LEO's swings through the station beam's sidelobes, which three
    # cannot; GNSS satellites are held as well by either (docs/science.md, "What the data grid
    # can hold").
    time_stencil: int = option_field(7, "Lagrange points per time stencil", min=1, max=MAX_STENCIL)
    # The signal's spectrum and the station beam vary across a channel, which one point (a
    # constant across it) cannot hold; three points cut the floor several-fold for 1.6x the
    # step time (docs/science.md, "What the data grid can hold" and "The defaults and why").
    freq_stencil: int = option_field(
        3, "Lagrange points per frequency stencil", min=1, max=MAX_STENCIL
    )
    segments: int = option_field(
        2, "analytic operator: pieces per integration", min=1, max=ri_kernels.MAX_SEGMENTS
    )
    terms: int = option_field(
        6, "analytic operator: curvature expansion terms", min=1, max=ri_kernels.MAX_TERMS
    )
    cubic_terms: int = option_field(
        3, "analytic operator: cubic-phase terms", min=0, max=ri_kernels.MAX_CUBIC_TERMS
    )
    # Navigation satellites' delays barely bend within an integration: one cubic term or none
    # holds their moments to the tolerance, on one piece where no piece is then curved
    # (analytic_spec), at a fraction of three terms' cost (docs/kernels.md, "Memory and
    # speed"). The series across a channel is off by default: it holds the visibilities
    # within the tolerance, not to the rounding, so it changes every fit with an analytic
    # group of several fine channels, and on a TPU it slows the value and gradient at three
    # terms (docs/science.md, "The defaults and why").
    channel_terms: int = option_field(
        0,
        "analytic operator: most terms of its series across a channel under analytic_options "
        "auto, which forms a group's phase moments once per channel (0: at every fine channel)",
        min=0,
        max=ri_kernels.MAX_CHANNEL_TERMS,
    )
    analytic_options: str = option_field(
        "auto",
        "analytic operator's options: the fewest cubic-phase terms each group's phases need, "
        "at most rfi.cubic_terms, on one piece per integration where no piece is then curved "
        "(auto), or rfi.segments and rfi.cubic_terms as set (fixed)",
        choices=ANALYTIC_OPTIONS,
    )
    max_groups: int = option_field(4, "most baseline groups (compiled operator calls)", min=1)
    memory_budget_mb: float = option_field(
        ri_kernels.DEFAULT_MEMORY_BUDGET_BYTES / 2**20,
        "fine-grid working memory of each RFI "
        "operator call; on the baseline axis each device takes this divided by the number of "
        "devices",
        "MiB",
        min=1e-3,
    )
    sampling: str = option_field(
        "gauss",
        "fine samples across a cell: Gauss-Legendre nodes, or the midpoint rule (powers of two)",
        choices=SAMPLINGS,
    )
    phase_cache: str = option_field(
        "auto",
        "keep the analytic groups' phase moments across steps: within the budget (auto; "
        "phase_cache_mb), always or never",
        choices=PHASE_CACHES,
    )
    phase_cache_mb: float | None = option_field(
        None,
        "most kept phase moments per device under phase_cache auto; null: "
        "phase_cache_fraction of each device's memory",
        "MiB",
        min=0.0,
    )
    # The moments replace the most costly work of an analytic group's step, which then runs
    # at less than half its time. Half a device's memory leaves the other half to the step,
    # whose working set where the moments are large is a fraction of theirs (docs/science.md,
    # "The defaults and why").
    phase_cache_fraction: float = option_field(
        0.5,
        "with phase_cache_mb null, the most kept phase moments per device as a fraction of "
        "its memory (a GPU's allocator limit; on CPU the host's memory shared by its devices)",
        min=0.0,
        max=1.0,
    )

    @property
    def memory_budget_bytes(self) -> int:
        return max(int(self.memory_budget_mb * 2**20), 1)


@dataclass(frozen=True)
class GroupSpec:
    """Static description of one group: its operator and fine sampling."""

    operator: str  # "quadrature" or "analytic"
    n_time_samples: int  # fine samples per integration (1 for analytic: time is exact)
    n_freq_samples: int  # fine samples per channel
    # Analytic groups: the operator's cubic-phase terms and pieces per integration; None
    # takes the configuration's.
    cubic_terms: int | None = None
    segments: int | None = None
    # Terms of the operator's series across a channel (``analytic_spec``): moments formed, and
    # kept, at each channel's centre; 0 or None: at every fine channel.
    channel_terms: int | None = None
    # With channel terms: whether the series takes the curvature's change across a channel
    # to first order (2 or 3 more moments), or drops it where that is within the error.
    channel_bend: bool = True

    @property
    def name(self) -> str:
        """The group's name in summary.json (``rfi_groups``, ``rfi_phase_cache``)."""
        return f"{self.operator} t{self.n_time_samples} f{self.n_freq_samples}"


class GroupTables(NamedTuple):
    """Arrays of one group, handed to its operator as traced arguments.

    indices: ri_kernels index arrays of the group's baselines. rows: (n_rows,) int32 rows of
    the output the group writes. tables: its operator's ``ri_kernels.QuadratureTables`` or
    ``ri_kernels.AnalyticTables``, in the model's real dtype with int32 starts. moments: None,
    or for an analytic group the phase moments of its rows kept across steps
    (``with_phase_cache``). Where a satellite is in view for only part of some integrations
    (``satellites.satellite_view``), a quadrature group's tables are per source, its fine samples
    in the in-view part (``ri_kernels.in_view_stencils``), and an analytic group's view is
    that part, (n_src, n_time, 2) in x; otherwise view is None.
    """

    indices: ri_kernels.BaselineIndices
    rows: jax.Array
    tables: ri_kernels.QuadratureTables | ri_kernels.AnalyticTables
    moments: jax.Array | None = None
    view: jax.Array | None = None


def _merge_small_groups(n_t: np.ndarray, max_groups: int) -> np.ndarray:
    """Raise the sampling of the smallest groups to their next level until few remain.

    Each group is one more compiled operator call, so a handful of baselines at their own
    level costs more in compilation than sampling them a little finer does at run time.
    """
    n_t = n_t.copy()
    levels, counts = np.unique(n_t, return_counts=True)
    while levels.size > max_groups:
        i = int(np.argmin(counts[:-1]))  # never the finest level: nothing lies above it
        n_t[n_t == levels[i]] = levels[i + 1]
        levels, counts = np.unique(n_t, return_counts=True)
    return n_t


def plan_groups(
    time_cycles, freq_cycles, snr: float, config: RfiVisConfig
) -> tuple[np.ndarray, tuple[GroupSpec, ...]]:
    """Assign every baseline to a group.

    time_cycles, freq_cycles: (n_bl,) fringe winding per integration and per channel
    (``geometry.rfi_fringe_winding``). snr: largest RFI power over the noise.
    Returns ``(labels, specs)``: (n_bl,) int32 group of each baseline and the groups' specs,
    quadrature groups by increasing time sampling, then the analytic group. A group's
    frequency sampling is the finest any of its baselines needs.
    """
    args = (snr, config.tolerance, config.max_samples, config.sampling)
    n_t = required_samples(time_cycles, *args)
    n_f = required_samples(freq_cycles, *args)
    analytic = n_t > config.quadrature_limit
    # The analytic group integrates time exactly; mark it with a level above every other.
    level = np.where(analytic, config.max_samples * 2, n_t)
    level = _merge_small_groups(level, config.max_groups)
    levels, labels = np.unique(level, return_inverse=True)
    specs = []
    for g, lev in enumerate(levels):
        members = labels == g
        operator = "analytic" if lev > config.quadrature_limit else "quadrature"
        n_time = 1 if operator == "analytic" else int(lev)
        specs.append(GroupSpec(operator, n_time, int(n_f[members].max())))
    return labels.reshape(-1).astype(np.int32), tuple(specs)


def make_group_tables(
    spec: GroupSpec,
    rows: np.ndarray,
    a1: np.ndarray,
    a2: np.ndarray,
    n_ant: int,
    n_freq: int,
    n_time: int,
    chan_width: float,
    int_time: float,
    config: RfiVisConfig,
    dtype,
    view=None,
    chan_spacing: float | None = None,
) -> GroupTables:
    """The tables and indices of one group (host side). rows: (n_rows,) output rows; view:
    None, or (n_src, n_time, 2) the part of each integration in which each source is in view,
    in x = 2 tau / int_time (``satellites.satellite_view``). The fine samples lie across a
    channel's width ``chan_width`` (Hz); the signal is interpolated to them from the channel
    centres, ``chan_spacing`` apart (Hz; None: the width, channels side by side)."""
    chan_mhz = chan_width * 1e-6
    spacing_mhz = chan_mhz if chan_spacing is None else chan_spacing * 1e-6
    dnu_mhz, freq_scale = _fine_samples(chan_mhz, spec.n_freq_samples, config.sampling)
    w_freq, start_freq = ri_kernels.lagrange_stencils(
        n_freq, dnu_mhz / spacing_mhz, min(config.freq_stencil, n_freq)
    )
    w_freq = w_freq * freq_scale
    stencil = min(config.time_stencil, n_time)
    if spec.operator == "quadrature":
        dt, time_scale = _fine_samples(int_time, spec.n_time_samples, config.sampling)
        if view is None:
            w_time, start_time = ri_kernels.lagrange_stencils(n_time, dt / int_time, stencil)
            w_time = w_time * time_scale
        else:
            w_time, positions, start_time = ri_kernels.in_view_stencils(
                n_time, dt / int_time, time_scale, stencil, np.asarray(view) / 2
            )
            dt = positions * int_time
        view = None  # held in the per-source tables
        tables = ri_kernels.QuadratureTables(w_freq, start_freq, w_time, start_time, dnu_mhz, dt)
    else:
        g_time, start_time = ri_kernels.monomial_stencils(n_time, stencil)
        tables = ri_kernels.AnalyticTables(
            w_freq, start_freq, g_time, start_time, dnu_mhz, int_time
        )
    real = jnp.dtype(dtype)

    def on_device(x):  # in the model's real dtype, the stencil starts int32
        return jnp.asarray(x, jnp.int32 if np.asarray(x).dtype.kind == "i" else real)

    return GroupTables(
        indices=ri_kernels.make_indices(n_ant, a1[rows], a2[rows]),
        rows=jnp.asarray(rows, jnp.int32),
        tables=jax.tree.map(on_device, tables),
        view=None if view is None else jnp.asarray(view, real),
    )


def _fine_samples(width: float, n: int, sampling: str) -> tuple[np.ndarray, np.ndarray]:
    """Fine-sample offsets across a cell and the scale of each sample's interpolation
    weights (ones for the midpoint rule; see ``ri_kernels.gauss_legendre_offsets``)."""
    if sampling == "gauss":
        return ri_kernels.gauss_legendre_offsets(width, n)
    return ri_kernels.fine_offsets(width, n), np.ones(n)


def snr_from_data(vis: np.ndarray, flags: np.ndarray, noise) -> float:
    """Largest unflagged |vis| over the smallest noise: an upper bound on RFI power / noise."""
    peak = np.max(np.where(flags, 0.0, np.abs(vis)), initial=0.0)
    return float(peak / np.min(noise))


def _analytic_options(spec: GroupSpec, config: RfiVisConfig) -> dict:
    """The analytic operator's options of ``spec``. A group with channel terms forms its
    moments at its channels' centres, and keeps them there (``plan_phase_cache``)."""
    return {
        "segments": config.segments if spec.segments is None else spec.segments,
        "terms": config.terms,
        "cubic_terms": config.cubic_terms if spec.cubic_terms is None else spec.cubic_terms,
        "channel_terms": spec.channel_terms or 0,
        "channel_bend": spec.channel_bend,
        "memory_budget_bytes": config.memory_budget_bytes,
    }


def analytic_options_report(specs, config: RfiVisConfig) -> dict:
    """Each analytic group's operator options (pieces, curvature and cubic terms, terms
    across a channel and whether they take the bend), by the group's name in ``rfi_groups``,
    for summary.json and ``tabascal plan``."""
    report = {}
    names = ("segments", "terms", "cubic_terms", "channel_terms", "channel_bend")
    for spec in specs:
        if spec.operator == "analytic":
            options = _analytic_options(spec, config)
            report[spec.name] = {k: options[k] for k in names}
    return report


def cubic_phase_bound(delay_us, antennas, freqs_hz, chan_width: float, int_time: float):
    """The largest |c| (rad) of the phase cubics ``phi0 + a x + b x**2 + c x**3`` of the pairs
    among ``antennas`` in any integration, at the top of the band: the analytic operator's
    ``c = (pi / 3) nu d3 (T/2)**3``, d3 a pair's difference of the delays' third time
    derivatives (us/s**3), nu in MHz, T the integration time (s).

    delay_us: (n_ant, n_src, n_time, n_deriv + 1) delays and their time derivatives; the
    spread of d3 over the antennas bounds every pair's difference. Without a third derivative
    the bound is zero.
    """
    spread = _derivative_spread(delay_us, antennas, 3)
    return math.pi / 3 * _top_mhz(freqs_hz, chan_width) * (int_time / 2) ** 3 * spread


def curvature_phase_bound(delay_us, antennas, freqs_hz, chan_width: float, int_time: float):
    """The largest |b| (rad) of the same cubics (:func:`cubic_phase_bound`): the analytic
    operator's ``b = pi nu d2 (T/2)**2``, d2 a pair's difference of the delays' second time
    derivatives (us/s**2). Zero without a second derivative."""
    spread = _derivative_spread(delay_us, antennas, 2)
    return math.pi * _top_mhz(freqs_hz, chan_width) * (int_time / 2) ** 2 * spread


def rate_phase_bound(delay_us, antennas, chan_width: float, int_time: float):
    """The largest |epsilon| (rad) of the same pairs: the time-frequency cross term
    ``2 pi dnu d1 T/2`` of the analytic operator's series across a channel
    (``ri_kernels.channel_series_error``), dnu at the channel's edge (MHz) and d1 a pair's
    difference of delay rates (us/s). Zero without a first derivative."""
    spread = _derivative_spread(delay_us, antennas, 1)
    return 2 * math.pi * (chan_width / 2 * 1e-6) * spread * (int_time / 2)


def _derivative_spread(delay_us, antennas, order: int) -> float:
    """The largest spread over ``antennas`` of the delays' ``order``-th time derivative."""
    d = np.asarray(delay_us)
    if d.shape[-1] <= order or len(antennas) == 0:
        return 0.0
    dk = d[np.asarray(antennas), ..., order]
    return float((dk.max(axis=0) - dk.min(axis=0)).max(initial=0.0))


def _top_mhz(freqs_hz, chan_width: float) -> float:
    """The top of the band (MHz)."""
    return (float(np.max(freqs_hz)) + chan_width / 2) * 1e-6


def analytic_spec(
    spec: GroupSpec,
    cubic: float,
    snr: float,
    config: RfiVisConfig,
    dtype,
    curvature: float = math.inf,
    rate: float = math.inf,
    channel_ratio: float = math.inf,
):
    """An analytic group's spec with the fewest cubic terms its phases need
    (``ri_kernels.fewest_cubic_terms``), and one piece per integration instead of
    ``config.segments`` where that holds them with no more cubic terms and no piece at or
    above the curvature expansion's switch (``ri_kernels.curvature_switch``), under
    ``config.analytic_options`` "auto"; else ``spec`` as it is.

    cubic, curvature: the largest |c| and |b| of the group's phases (``cubic_phase_bound``,
    ``curvature_phase_bound``), each taken ``PHASE_BOUND_MARGIN`` times over for fitted orbit
    corrections. snr: largest RFI power over the noise: the truncation is held within
    ``OPERATOR_ERROR_SHARE`` of ``config.tolerance`` of the noise, relative to the signal
    ``tolerance share / snr``. dtype: the model's real dtype.

    Under "auto" a group with more than one fine channel also takes the fewest terms, at
    most ``config.channel_terms``, of the operator's series across a channel
    (``ri_kernels.fewest_channel_terms``) that hold its cross term ``rate``
    (``rate_phase_bound``) and its curvature's change across a channel (its bend,
    ``channel_ratio``, half a channel over its frequency, times ``curvature`` + ``cubic``),
    each taken ``PHASE_BOUND_MARGIN`` times over, within half that error: with the bend
    dropped where that holds (navigation satellites), else taken to first order (LEO). Its
    moments are then formed once per channel instead of at each fine channel (float32, 16
    antennas, 4 channels, 32 satellites, 7 fine channels, 2 pieces, 1 cubic term, two channel
    terms, the bend dropped: a CPU's forward evaluation 357 -> 156 ns per element, value and
    gradient 818 -> 401 ns, benchmarks/analytic_options.py), and kept at the centres
    (``plan_phase_cache``): every route then does the same arithmetic.

    One piece is the cheaper (float32, 32 satellites, 7 time points: a TPU v5e's value and
    gradient 19.5 ns per element at one piece and one cubic term against 28.2 at two; a
    CPU's forward evaluation 219 ns against 276 with no cubic term,
    benchmarks/analytic_options.py) while no piece is curved. A piece's curvature is |b| at
    one piece and a quarter of it at two: on the LEO scenes (benchmarks/scenarios) the
    analytic groups' |b| reaches 0.38-0.43 rad, which at one piece puts 4-13% of their
    elements above float32's switch of 0.20 rad, each at about twenty times the cost, and
    none at two; navigation satellites and the rising LEO's group stay below 0.04 rad.
    """
    if spec.operator != "analytic" or config.analytic_options == "fixed":
        return spec
    error = OPERATOR_ERROR_SHARE * config.tolerance / snr if snr > 0 else math.inf

    def fewest(segments):
        return ri_kernels.fewest_cubic_terms(
            PHASE_BOUND_MARGIN * cubic,
            error,
            segments=segments,
            cubic_terms=config.cubic_terms,
            dtype=dtype,
        )

    cubic_terms, segments = fewest(config.segments), config.segments
    straight = PHASE_BOUND_MARGIN * curvature < ri_kernels.curvature_switch(config.terms, dtype)
    if segments > 1 and straight and (on_one := fewest(1)) <= cubic_terms:
        cubic_terms, segments = on_one, 1
    channel_terms, bent = 0, True
    if spec.n_freq_samples > 1 and config.channel_terms:
        # the bend dropped where that holds (fewer moments), else taken to first order
        for bent in (False, True):
            channel_terms = ri_kernels.fewest_channel_terms(
                PHASE_BOUND_MARGIN * rate,
                error / 2,
                bend=PHASE_BOUND_MARGIN * channel_ratio * (curvature + cubic),
                channel_bend=bent,
                channel_terms=config.channel_terms,
                dtype=dtype,
            )
            if channel_terms:
                break
    return dataclasses.replace(
        spec,
        cubic_terms=cubic_terms,
        segments=segments,
        channel_terms=channel_terms,
        channel_bend=bent,
    )


def evaluate_group(
    spec: GroupSpec,
    tables: GroupTables,
    amp: jax.Array,
    phase: jax.Array,
    delay_us: jax.Array,
    freq_mhz: jax.Array,
    config: RfiVisConfig,
    amp_factor: jax.Array | None = None,
) -> jax.Array:
    """Visibilities (n_rows, n_freq, n_time) of one group's baselines.

    amp: (n_ant, n_src, n_freq, n_time) complex; or, with ``amp_factor`` (each antenna's real
    factor, (n_ant, n_src, n_freq, n_time)), the part every antenna shares, (1, n_src, n_freq,
    n_time) (``rfi_signal.forward_parts``); phase: (n_ant, n_src, n_freq, n_time) real (rad);
    delay_us: (n_ant, n_src, n_time, n_path); freq_mhz: (n_freq,).
    """
    signal = (tables.indices, amp, phase, delay_us, tables.tables, freq_mhz)
    if spec.operator == "quadrature":
        return ri_kernels.quadrature_eval_with_indices(
            *signal, memory_budget_bytes=config.memory_budget_bytes, amp_factor=amp_factor
        )
    return ri_kernels.analytic_eval_with_indices(
        *signal,
        **_analytic_options(spec, config),
        moments=tables.moments,
        view=tables.view,
        amp_factor=amp_factor,
    )


def moments_shape(
    spec: GroupSpec, rows: tuple, model_shape, config, centres: bool = False
) -> tuple:
    """Shape of an analytic group's kept phase moments (``ri_kernels.
    analytic_moments_with_indices``): ``(n_mom, *rows, n_freq, n_time, n_src, n_int_f)``,
    2 n_coef - 1 moments, n_coef the time stencil's points; with ``centres``, those at the
    channels' centres of its ``channel_terms`` J, (n_mom + J + 2, ..., 1). rows: the group's
    row axes, ``(n_rows,)``, or ``(n_dev, n_rows)`` split over devices. model_shape: (n_src,
    n_freq, n_time)."""
    n_src, n_freq, n_time = model_shape
    n_mom = 2 * min(config.time_stencil, n_time) - 1
    if centres:  # J + 2 orders more (ri_kernels.analytic_moments_with_indices)
        return (n_mom + spec.channel_terms + 2, *rows, n_freq, n_time, n_src, 1)
    return (n_mom, *rows, n_freq, n_time, n_src, spec.n_freq_samples)


def moments_bytes(
    spec: GroupSpec, n_rows: int, model_shape, config, cplx, centres: bool = False
) -> int:
    """Bytes of an analytic group's kept phase moments for ``n_rows`` rows (0 for a quadrature
    group, and with ``centres`` for a group without channel terms)."""
    if spec.operator != "analytic" or (centres and not spec.channel_terms):
        return 0
    shape = moments_shape(spec, (n_rows,), model_shape, config, centres)
    return math.prod(shape) * np.dtype(cplx).itemsize


#: The budget under phase_cache "auto" where neither ``phase_cache_mb`` nor the device's
#: memory is known.
FALLBACK_PHASE_CACHE_BYTES = 2**30


def phase_cache_budget_bytes(config: RfiVisConfig, device_bytes: int | None) -> tuple[int, str]:
    """The most bytes of kept phase moments per device under phase_cache "auto", and where
    that figure came from, in words: ``config.phase_cache_mb`` where set, else
    ``config.phase_cache_fraction`` of ``device_bytes`` (a device's memory), else 1 GiB."""
    if config.phase_cache_mb is not None:
        return int(config.phase_cache_mb * 2**20), "phase_cache_mb"
    if device_bytes is None:
        return FALLBACK_PHASE_CACHE_BYTES, "the device's memory unknown: 1 GiB"
    fraction = config.phase_cache_fraction
    budget = int(fraction * device_bytes)
    return budget, f"phase_cache_fraction {fraction:g} of {device_bytes / 2**30:.1f} GiB"


#: How ``plan_phase_cache`` keeps a group's moments: at every fine channel, or at the
#: channels' centres (n_int_f times fewer, each fine channel's made from them at every step).
KEPT_AT_CHANNELS, KEPT_AT_CENTRES = "channels", "centres"


def plan_phase_cache(
    sizes_bytes,
    specs: tuple[GroupSpec, ...],
    config: RfiVisConfig,
    budget_bytes: int,
    centre_bytes=None,
):
    """Which groups keep their phase moments, and how: per group False (formed at every
    step), ``KEPT_AT_CHANNELS`` or ``KEPT_AT_CENTRES``, from each group's moment bytes per
    device ``sizes_bytes`` (``moments_bytes``), ``config.phase_cache`` and the budget per
    device under "auto" (``phase_cache_budget_bytes``). ``centre_bytes``: each group's bytes
    kept at its channels' centres (``moments_bytes(..., centres=True)``), nonzero for a group
    with channel terms, which keeps them so: the same series as where they are formed, so
    that a fit's arithmetic does not depend on which route keeps them (n_int_f times fewer
    bytes, for the series' work at every step)."""
    keep, total = [], 0
    centre_bytes = centre_bytes or [0] * len(specs)
    for spec, size, centre in zip(specs, sizes_bytes, centre_bytes, strict=True):
        choice, kept = False, centre or size
        wanted = spec.operator == "analytic" and config.phase_cache != "never"
        if wanted and (config.phase_cache == "always" or total + kept <= budget_bytes):
            choice, total = (KEPT_AT_CENTRES if centre else KEPT_AT_CHANNELS), total + kept
        keep.append(choice)
    return tuple(keep)


def phase_cache_report(
    sizes_bytes, specs, keep, config: RfiVisConfig, budget: tuple[int, str], centre_bytes=None
) -> dict:
    """What ``plan_phase_cache`` chose under ``budget`` (``phase_cache_budget_bytes``), for
    summary.json and ``tabascal plan``: each analytic group's moments per device at every
    fine channel, and where kept, how ("at") and what they take ("kept_mib_per_device")."""
    groups, kept_total = {}, 0
    centre_bytes = centre_bytes or [0] * len(specs)
    for spec, size, kept, centre in zip(specs, sizes_bytes, keep, centre_bytes, strict=True):
        if spec.operator == "analytic":
            groups[spec.name] = {"kept": bool(kept), "mib_per_device": size / 2**20}
        if kept:
            kept_size = centre if kept == KEPT_AT_CENTRES else size
            groups[spec.name].update(at=kept, kept_mib_per_device=kept_size / 2**20)
            kept_total += kept_size
    return {
        "mode": config.phase_cache,
        "budget_mib": budget[0] / 2**20,
        "budget_from": budget[1],
        "groups": groups,
        "kept_mib_per_device": kept_total / 2**20,
    }


def group_moments(spec: GroupSpec, tables: GroupTables, phase, delay_us, freq_mhz, config):
    """The phase moments of an analytic group's rows (``ri_kernels``), formed once: at every
    fine channel, or at the channels' centres for a group with channel terms
    (``KEPT_AT_CENTRES``)."""
    options = _analytic_options(spec, config)
    return ri_kernels.analytic_moments_with_indices(
        tables.indices,
        phase,
        delay_us,
        tables.tables,
        freq_mhz,
        **options,
        view=tables.view,
    )


def forward(
    amp: jax.Array,
    phase: jax.Array,
    delay_us: jax.Array,
    freq_mhz: jax.Array,
    groups: tuple[GroupTables, ...],
    specs: tuple[GroupSpec, ...],
    n_bl: int,
    config: RfiVisConfig,
    amp_factor: jax.Array | None = None,
) -> jax.Array:
    """RFI visibilities (n_bl, n_freq, n_time) of every baseline, each group writing its rows;
    amp and amp_factor as ``evaluate_group`` takes them."""
    n_freq, n_time = amp.shape[2], amp.shape[3]
    vis = jnp.zeros((n_bl, n_freq, n_time), amp.dtype)
    for spec, tables in zip(specs, groups, strict=True):
        out = evaluate_group(spec, tables, amp, phase, delay_us, freq_mhz, config, amp_factor)
        vis = vis.at[tables.rows].set(out, unique_indices=True)
    return vis
