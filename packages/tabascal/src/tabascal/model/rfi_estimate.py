"""A first estimate of each satellite's per-antenna RFI signal from the data (init "fringe").

Each satellite's phase on every antenna is known (``phase``: 2 pi f tau at the cell centres).
Multiplying baseline (p, q) by ``exp(-i (phase[p, r] - phase[q, r]))`` stops satellite r's
fringe: what remains of its contribution is ``s_pq A[p, r] conj(A[q, r])``, with ``s_pq`` the
known factor by which the fringe's winding across the cell averages it down (``smearing``,
to first order in the delay), while the sky and the other satellites keep turning. Each
baseline's stopped data are first averaged over a window of integrations about the
satellite's amplitude's time scale (``window_cells``; least squares with the product held
constant across it), which averages the turning terms down without smearing the satellite's
own. Per cell (channel, integration) the averaged products of the baselines are then a
rank-one Hermitian matrix with its diagonal missing (no autocorrelations), fitted by
alternating least squares, each update averaged with the previous iterate:

    A[p] <- (A[p] + sum_q w_pq M_pq A[q] / sum_q w_pq |A[q]|^2) / 2

over the unflagged baselines whose fringe for satellite r winds by less than half a cycle per
cell (``geometry.rfi_fringe_winding``'s measure, per satellite). Satellites are taken in turn,
brightest first (by the power of the data stopped for each one's fringe and averaged over the
integrations), each from the data less the others' current estimates, for a few sweeps.
On the benchmark scenarios the smearing factor and the window each cut the estimate's error
several-fold (docs/science.md, "The defaults and why"). Where several LEOs are up at once (the
eight-satellite shell) it stays poor (errors of a third to three times each LEO's own
products): on the short baselines where one LEO's fringe is slow, so are the others', and
taking satellites in turn does not separate them (more sweeps diverge). So the model's
visibilities of each satellite's estimate are then weighed against the data together with the
others' (``source_weights``, over a few integrations at a time): an estimate the data bear
out keeps its amplitude, one that explains the data worse than leaving the satellite out is
scaled down towards nothing. On the shell that takes the start's RFI error from 425 to 24
times the noise (the data start's: 164; docs/science.md, "The defaults and why").

A satellite much fainter than another in the same cells is not recovered: the bright one's
estimate errs by about the faint one's share of the data (measured: a satellite at 1/10 of
another's amplitude leaves the bright one 0.7% off, which is 60 times the faint one's own
product), and the fit takes it from there. The common phase of a satellite's amplitudes in a
cell is arbitrary; it is fixed by making the reference antenna's real and positive, so that
the estimate is smooth in time where the truth is. Host-side numpy, float64; the fit's own
model then takes over (``rfi_signal.init_from_estimate`` turns the estimate into whitened
parameters). Its arrays have a baseline and a satellite axis together, (n_bl, n_src, n_freq,
n_time): it is for observations that fit in one process's memory, as init "truth" is.
"""

from __future__ import annotations

import numpy as np

# Fringe winding (cycles per cell) above which a baseline is left out of a satellite's
# estimate: the cell average then falls below sinc(0.5) = 0.64 of the unsmeared product, and
# the first-order smearing factor stops describing it well. (Measured on the shell: 0.9,
# with twice the baselines, made the LEOs' estimates no better.)
MAX_WINDING = 0.5


def satellite_winding(delay_us, a1, a2, freqs_hz, int_time, chan_width) -> np.ndarray:
    """Largest fringe winding per cell of each satellite on each baseline: (n_bl, n_src),
    cycles across an integration (``f_top |d1| T``) or a channel (``chan_width |d0|``),
    whichever is larger."""
    f_top_mhz = (np.max(freqs_hz) + chan_width / 2) * 1e-6
    d = delay_us[a1] - delay_us[a2]  # (n_bl, n_src, n_time, K)
    time = f_top_mhz * np.abs(d[..., 1]) * int_time
    freq = chan_width * 1e-6 * np.abs(d[..., 0])
    return np.maximum(time, freq).max(axis=2)


def smearing(delay_us, a1, a2, freqs_hz, int_time, chan_width, src) -> np.ndarray:
    """The factor by which averaging over a cell scales satellite ``src``'s fringe-stopped
    product on each baseline, to first order in the delay: sinc(f d1 T) sinc(dnu d0), with the
    baseline's delay difference d0 (us) and its rate d1 (us/s) at each cell centre, f the
    channel (MHz), T the integration and dnu the channel width. (n_bl, n_freq, n_time) real,
    negative past a sinc's first zero."""
    d = delay_us[a1, src] - delay_us[a2, src]  # (n_bl, n_time, K)
    freq_mhz = np.asarray(freqs_hz, np.float64)[None, :, None] * 1e-6
    time = np.sinc(freq_mhz * d[:, None, :, 1] * int_time)
    return time * np.sinc(chan_width * 1e-6 * d[:, None, :, 0])


def _rank_one(stopped, weight, a1, a2, n_ant, ref_ant, n_iter):
    """Per cell, A with sum_b weight_b |stopped_b - A[a1_b] conj(A[a2_b])|^2 least:
    stopped, weight (n_bl, n_freq, n_time) -> A (n_ant, n_freq, n_time) complex."""
    _, n_freq, n_time = stopped.shape
    power = np.zeros((n_ant, n_freq, n_time))
    count = np.zeros((n_ant, n_freq, n_time))
    for ends in (a1, a2):
        np.add.at(power, ends, weight * np.abs(stopped))
        np.add.at(count, ends, weight)
    amp = np.sqrt(power / np.maximum(count, 1e-30)).astype(np.complex128)
    for _ in range(n_iter):
        numerator = np.zeros((n_ant, n_freq, n_time), np.complex128)
        denominator = np.zeros((n_ant, n_freq, n_time))
        np.add.at(numerator, a1, weight * stopped * amp[a2])
        np.add.at(numerator, a2, weight * stopped.conj() * amp[a1])
        np.add.at(denominator, a1, weight * np.abs(amp[a2]) ** 2)
        np.add.at(denominator, a2, weight * np.abs(amp[a1]) ** 2)
        update = np.where(denominator > 0, numerator / np.maximum(denominator, 1e-300), 0.0)
        # The plain update maps c A to A / conj(c) and so oscillates; averaging it with the
        # previous iterate converges (as in StEFCal, Salvini & Wijnholds 2014).
        amp = 0.5 * (amp + update)
    gauge = amp[ref_ant] / np.maximum(np.abs(amp[ref_ant]), 1e-300)
    return amp * np.where(np.abs(amp[ref_ant]) > 0, gauge.conj(), 1.0)[None]


def _windowed(stopped, weight, smear, window: int):
    """Each baseline's product over a window of ``window`` integrations centred on each one
    (fewer at the ends), by least squares on ``stopped = smear * product + noise`` with the
    product held constant across the window: (sum w s M) / (sum w s^2), and its weight
    sum w s^2. The sky's and the other satellites' fringes, which keep turning, average down;
    the satellite's own product, smooth over its time scale, does not. (n_bl, n_freq, n_time)
    each."""
    num, den = weight * smear * stopped, weight * smear**2
    window = min(window, 2 * ((stopped.shape[-1] - 1) // 2) + 1)  # at most n_time
    if window > 1:
        kernel = np.ones(window)

        def box(x):
            return np.apply_along_axis(np.convolve, -1, x, kernel, mode="same")

        num, den = box(num.real) + 1j * box(num.imag), box(den)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0), den


def estimate_rfi_signal(
    vis,
    flags,
    phase,
    delay_us,
    a1,
    a2,
    freqs_hz,
    int_time,
    chan_width,
    *,
    ref_ant: int = 0,
    sweeps: int = 3,
    n_iter: int = 10,
    window_cells=None,
) -> np.ndarray:
    """Per-antenna RFI signal estimate, (n_ant, n_src, n_freq, n_time) complex128.

    vis, flags: (n_bl, n_freq, n_time) data and flags; phase: (n_ant, n_src, n_freq, n_time)
    centre phases (rad); delay_us: (n_ant, n_src, n_time, K >= 2) delays and derivatives;
    a1, a2: (n_bl,); freqs_hz: (n_freq,); int_time (s), chan_width (Hz). window_cells: None,
    or (n_src,) integrations over which each satellite's stopped data are averaged (made odd
    and at most n_time; 1 for none): about its amplitude's time scale. A satellite no baseline
    sees unsmeared gets zeros.
    """
    vis = np.where(flags, 0.0, np.asarray(vis, np.complex128))
    a1, a2 = np.asarray(a1), np.asarray(a2)
    n_ant, n_src = phase.shape[:2]
    usable = satellite_winding(delay_us, a1, a2, freqs_hz, int_time, chan_width) < MAX_WINDING
    fringe = np.exp(1j * (phase[a1] - phase[a2]))  # (n_bl, n_src, n_freq, n_time)
    weight = [
        ((~np.asarray(flags, bool)) * usable[:, r, None, None]).astype(float) for r in range(n_src)
    ]
    smear = [smearing(delay_us, a1, a2, freqs_hz, int_time, chan_width, r) for r in range(n_src)]

    windows = np.ones(n_src, int) if window_cells is None else np.asarray(window_cells, int)
    windows = np.maximum(windows, 1) // 2 * 2 + 1  # odd: centred on each integration

    def fit(r, data):
        # the window's least squares takes the smearing out: its products are unsmeared
        products, w = _windowed(data * fringe[:, r].conj(), weight[r], smear[r], windows[r])
        return _rank_one(products, w, a1, a2, n_ant, ref_ant, n_iter)

    # The order, brightest first, by each satellite's coherent power: the data stopped for
    # its fringe and averaged over the integrations. Its own contribution then adds up, the
    # sky's and the other satellites' turn and cancel. (Ordering by the power of a rank-one fit
    # to each alone misordered 8 stations' two GNSS satellites: a rank-one fit of 28 baselines
    # takes much of any data's power.)
    coherent = [
        np.sum(weight[r][..., 0] * np.abs(np.mean(vis * fringe[:, r].conj(), axis=2)) ** 2)
        for r in range(n_src)
    ]
    order = list(np.argsort(coherent)[::-1])
    amp = np.zeros((n_ant, n_src, *vis.shape[1:]), np.complex128)
    # Every satellite's current contribution, (n_src, n_bl, n_freq, n_time), kept up to date.
    own = np.zeros((n_src, *vis.shape), np.complex128)
    for _ in range(sweeps):
        for r in order:
            others = own.sum(axis=0) - own[r]
            amp[:, r] = fit(r, vis - others)
            own[r] = fringe[:, r] * smear[r] * amp[a1, r] * amp[a2, r].conj()
    return amp


def source_weights(vis, flags, per_source, *, window_cells: int = 1) -> np.ndarray:
    """The weight of each satellite's estimated visibilities that best explains the data
    together with the others', per integration: (n_src, n_time) >= 0.

    vis, flags: (n_bl, n_freq, n_time); per_source: (n_src, n_bl, n_freq, n_time), each
    satellite's visibilities from its estimate. In each window of ``window_cells``
    integrations centred on an integration (fewer at the ends), the non-negative least-squares
    weights w minimise sum_unflagged |vis - sum_r w_r per_source_r|^2 over the window's
    baselines and channels. The sky is left in the data: it adds noise to the weights, small
    beside RFI the size an estimate is worth making for. An estimate that the data bear out
    gets a weight near 1; one that explains less of the data than leaving the satellite out
    (the products of satellites the estimate could not separate) gets less, down to 0 (the
    satellite then starts from nothing there); a satellite out of view has no visibilities
    and weight 0. The estimate's amplitudes scale by the square root of the weight.
    """
    from scipy.optimize import nnls

    keep = ~np.asarray(flags, bool)
    vis = np.where(keep, np.asarray(vis, np.complex128), 0.0)
    model = np.where(keep[None], np.asarray(per_source, np.complex128), 0.0)
    n_src, n_time = model.shape[0], vis.shape[-1]
    # Per integration, the normal equations' Gram matrix and right-hand side.
    gram = np.einsum("rbft,sbft->trs", model.conj(), model).real
    rhs = np.einsum("rbft,bft->tr", model.conj(), vis).real
    half = max(int(window_cells), 1) // 2
    weights = np.zeros((n_src, n_time))
    for t in range(n_time):
        span = slice(max(t - half, 0), min(t + half + 1, n_time))
        g, b = gram[span].sum(axis=0), rhs[span].sum(axis=0)
        seen = np.diag(g) > 0
        if seen.any():
            # Scaled to a unit diagonal so that faint satellites are not lost to rounding.
            scale = np.sqrt(np.diag(g)[seen])
            sub = g[np.ix_(seen, seen)] / np.outer(scale, scale)
            # |vis - M w|^2 = |L^T w - L^-1 b|^2 + const with G = L L^T: the least squares
            # nnls takes (a small ridge keeps L defined where two estimates coincide).
            low = np.linalg.cholesky(sub + 1e-10 * np.eye(len(sub)))
            target = np.linalg.solve(low, b[seen] / scale)
            weights[seen, t] = nnls(low.T, target)[0] / scale
    return weights
