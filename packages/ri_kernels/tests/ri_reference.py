"""Independent references for the operator tests, written straight from docs/kernels.md
("The mathematics").

The numpy references loop over baselines, cells and fine samples and rebuild each antenna's
phase from its own delay series; the jnp reference builds every antenna's fine grid densely
and multiplies pairs directly, so that its autodiff can be compared with the operators'.
None of them shares code with the package beyond the table builders and the tables' types.
Each takes the operators' arguments after ``indices``: ``(amp, phase, delay_us, tables,
freq_mhz)``, as ``quadrature_args`` and ``analytic_args`` give them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ri_kernels import (
    AnalyticTables,
    QuadratureTables,
    fine_offsets,
    lagrange_stencils,
    monomial_stencils,
)

PAIRS = {np.float32: np.complex64, np.float64: np.complex128}


class Scene(NamedTuple):
    """Signals and tables of one test observation, all float64/complex128 numpy."""

    amp: np.ndarray  # (n_ant, n_rfi, n_freq, n_time)
    phase: np.ndarray  # (n_ant, n_rfi, n_freq, n_time) rad
    delay_us: np.ndarray  # (n_ant, n_rfi, n_time, n_path)
    w_freq: np.ndarray
    start_freq: np.ndarray
    w_time: np.ndarray
    start_time: np.ndarray
    g_time: np.ndarray
    start_g: np.ndarray
    dnu_mhz: np.ndarray
    dt: np.ndarray
    int_time: float
    freq_mhz: np.ndarray


def make_scene(
    seed,
    n_ant=4,
    n_rfi=2,
    n_freq=3,
    n_time=5,
    n_int_f=2,
    n_int_t=4,
    n_path=3,
    n_sf=3,
    n_st=3,
    n_coef=3,
    chan_width_mhz=0.25,
    int_time=2.0,
    rate_us_s=5e-3,
    omega_per_s=1e-3,
):
    """A random observation with realistic scales.

    Delays are relative to the array mean (tens of us); the k-th derivative is the rate times
    omega**(k - 1), omega ~ 1e-3 /s being the angular rate of a low orbit seen from the ground.
    """
    rng = np.random.default_rng(seed)
    shape = (n_ant, n_rfi, n_freq, n_time)
    amp = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    phase = rng.uniform(0, 2 * np.pi, shape)
    delay = np.empty((n_ant, n_rfi, n_time, n_path))
    delay[..., 0] = rng.uniform(-20, 20, delay.shape[:3])
    for k in range(1, n_path):
        delay[..., k] = rate_us_s * omega_per_s ** (k - 1) * rng.normal(size=delay.shape[:3])
    dnu = fine_offsets(chan_width_mhz, n_int_f)
    dt = fine_offsets(int_time, n_int_t)
    w_freq, start_freq = lagrange_stencils(n_freq, dnu / chan_width_mhz, min(n_sf, n_freq))
    w_time, start_time = lagrange_stencils(n_time, dt / int_time, min(n_st, n_time))
    g_time, start_g = monomial_stencils(n_time, min(n_coef, n_time))
    freq = 1000.0 + chan_width_mhz * np.arange(n_freq)
    return Scene(
        amp,
        phase,
        delay,
        w_freq,
        start_freq,
        w_time,
        start_time,
        g_time,
        start_g,
        dnu,
        dt,
        int_time,
        freq,
    )


def quadrature_args(scene: Scene, real=np.float64):
    """Seam arguments after ``indices``, ``(amp, phase, delay_us, tables, freq_mhz)``, cast to
    one precision pair."""
    s = scene
    time = (s.w_time.astype(real), s.start_time, s.dt.astype(real))
    return _args(s, real, QuadratureTables, *time)


def analytic_args(scene: Scene, real=np.float64):
    s = scene
    return _args(s, real, AnalyticTables, s.g_time.astype(real), s.start_g, real(s.int_time))


def _args(scene: Scene, real, kind, time_weights, start_time, time_offsets):
    """The seam arguments with tables of type ``kind`` and the given time tables."""
    s = scene
    tables = kind(
        s.w_freq.astype(real),
        s.start_freq,
        time_weights,
        start_time,
        s.dnu_mhz.astype(real),
        time_offsets,
    )
    signal = (s.amp.astype(PAIRS[real]), s.phase.astype(real), s.delay_us.astype(real))
    return (*signal, tables, s.freq_mhz.astype(real))


def _antenna_phase(phase, delay, f_mhz, dnu, tau):
    """phase + 2 pi ((f + dnu) dtau(tau) + dnu delay_0) of one antenna; delay: (n_rfi, n_path)."""
    dtau = sum(delay[:, k, None] * tau**k / math.factorial(k) for k in range(1, delay.shape[1]))
    return phase[:, None] + 2 * np.pi * ((f_mhz + dnu) * dtau + dnu * delay[:, 0, None])


def quadrature_reference(a1, a2, amp, phase, delay_us, tables, freq_mhz):
    """Brute-force quadrature visibilities (n_bl, n_freq, n_time), complex128."""
    w_freq, start_freq, w_time, start_time, dnu_mhz, dt = tables
    args = [np.asarray(x, np.float64) for x in (phase, delay_us, w_freq, w_time, dnu_mhz, dt)]
    phase, delay_us, w_freq, w_time, dnu_mhz, dt = args
    amp, freq_mhz = np.asarray(amp, np.complex128), np.asarray(freq_mhz, np.float64)
    _, _, n_freq, n_time = amp.shape
    vis = np.zeros((len(a1), n_freq, n_time), np.complex128)
    for b, (p, q) in enumerate(zip(a1, a2, strict=True)):
        for f in range(n_freq):
            for t in range(n_time):
                total = 0j
                for u in range(dnu_mhz.size):
                    for v in range(dt.size):
                        signal = []
                        for a in (p, q):
                            fine = np.zeros(amp.shape[1], np.complex128)
                            for k in range(w_freq.shape[1]):
                                for l in range(w_time.shape[1]):
                                    weight = w_freq[f, k, u] * w_time[t, l, v]
                                    fine += weight * amp[a, :, start_freq[f] + k, start_time[t] + l]
                            phi = _antenna_phase(
                                phase[a, :, f, t],
                                delay_us[a, :, t],
                                freq_mhz[f],
                                dnu_mhz[u],
                                dt[v : v + 1],
                            )
                            signal.append(fine * np.exp(1j * phi[:, 0]))
                        total += np.sum(signal[0] * np.conj(signal[1]))
                vis[b, f, t] = total / (dnu_mhz.size * dt.size)
    return vis


def _gauss_legendre_nodes(max_phase_rate):
    """Composite 16-point Gauss-Legendre rule on [-1, 1], each panel spanning at most 4 rad of
    phase: the rule's error for exp(i theta) over a panel is ~2**32 / 32! ~ 2e-26."""
    panels = int(np.ceil(2 * max_phase_rate / 4)) + 2
    x16, w16 = np.polynomial.legendre.leggauss(16)
    edges = np.linspace(-1, 1, panels + 1)
    half = (edges[1] - edges[0]) / 2
    x = ((edges[:-1] + edges[1:])[:, None] / 2 + half * x16).ravel()
    return x, np.tile(w16 * half, panels)


def analytic_reference(a1, a2, amp, phase, delay_us, tables, freq_mhz, view=None):
    """Time average over each cell of the polynomial amplitudes and the full delay series,
    by dense Gauss-Legendre quadrature in float64: (n_bl, n_freq, n_time) complex128. With
    ``view`` ((n_rfi, n_time, 2), the part [lo, hi] of x in [-1, 1] of each cell in which each
    source is in view) each source's integrand is integrated over its part alone, still
    divided by the whole cell."""
    w_freq, start_freq, g_time, start_time, dnu_mhz, int_time = tables
    amp = np.asarray(amp, np.complex128)
    phase, delay_us, w_freq, g_time, dnu_mhz, freq_mhz = (
        np.asarray(x, np.float64) for x in (phase, delay_us, w_freq, g_time, dnu_mhz, freq_mhz)
    )
    half = float(int_time) / 2
    _, _, n_freq, n_time = amp.shape
    vis = np.zeros((len(a1), n_freq, n_time), np.complex128)
    for b, (p, q) in enumerate(zip(a1, a2, strict=True)):
        for f in range(n_freq):
            for t in range(n_time):
                for u in range(dnu_mhz.size):
                    nu = freq_mhz[f] + dnu_mhz[u]
                    diff = delay_us[p, :, t] - delay_us[q, :, t]
                    rate = sum(
                        2 * np.pi * nu * np.abs(diff[:, k]).max() * half**k / math.factorial(k - 1)
                        for k in range(1, diff.shape[1])
                    )
                    x, w = _gauss_legendre_nodes(rate)
                    if view is None:
                        x, w = np.broadcast_to(x, (amp.shape[1], x.size)), w[None, :]
                    else:
                        lo, hi = (np.asarray(view, np.float64)[:, t, k, None] for k in (0, 1))
                        x, w = (lo + hi) / 2 + (hi - lo) / 2 * x, (hi - lo) / 2 * w
                    terms = []
                    for a in (p, q):
                        coef = np.zeros((amp.shape[1], g_time.shape[2]), np.complex128)
                        for k in range(w_freq.shape[1]):
                            for l in range(g_time.shape[1]):
                                weight = w_freq[f, k, u] * g_time[t, l]
                                stencil = amp[a, :, start_freq[f] + k, start_time[t] + l]
                                coef += stencil[:, None] * weight[None, :]
                        poly = np.sum(
                            coef[:, :, None] * x[:, None, :] ** np.arange(coef.shape[1])[:, None],
                            axis=1,
                        )
                        phi = _antenna_phase(
                            phase[a, :, f, t], delay_us[a, :, t], freq_mhz[f], dnu_mhz[u], half * x
                        )
                        terms.append(poly * np.exp(1j * phi))
                    integrand = terms[0] * np.conj(terms[1])  # (n_rfi, nodes)
                    vis[b, f, t] += np.sum(w * integrand) / 2 / dnu_mhz.size
    return vis


def quadrature_jnp(a1, a2, amp, phase, delay_us, tables, freq_mhz):
    """Dense jnp quadrature: every antenna's whole fine grid, then a product per pair."""
    w_freq, start_freq, w_time, start_time, dnu_mhz, dt = tables
    n_freq, n_time = amp.shape[2:]
    f_rows = np.asarray(start_freq)[:, None] + np.arange(w_freq.shape[1])  # (n_freq, n_sf)
    t_rows = np.asarray(start_time)[:, None] + np.arange(w_time.shape[1])
    stencil = amp[:, :, f_rows[:, :, None, None], t_rows[None, None, :, :]]  # a r f k t l
    fine = jnp.einsum("arfktl,fku,tlv->arftuv", stencil, w_freq, w_time)
    powers = jnp.stack([dt**k / math.factorial(k) for k in range(delay_us.shape[3])])
    dtau = jnp.einsum("artk,kv->artv", delay_us[..., 1:], powers[1:])
    nu = freq_mhz[:, None] + dnu_mhz[None, :]  # (n_freq, n_int_f)
    cycles = nu[None, None, :, None, :, None] * dtau[:, :, None, :, None, :]
    cycles = cycles + dnu_mhz[:, None] * delay_us[:, :, None, :, 0, None, None]
    phi = phase[..., None, None] + 2 * np.pi * cycles
    signal = fine * jnp.exp(1j * phi)
    vis = jnp.sum(signal[np.asarray(a1)] * jnp.conj(signal[np.asarray(a2)]), axis=(1, 4, 5))
    return vis.reshape(len(a1), n_freq, n_time) / (dnu_mhz.size * dt.size)


def analytic_jnp(a1, a2, amp, phase, delay_us, tables, freq_mhz, n_nodes=512):
    """Dense jnp Gauss-Legendre average of the analytic operator's integrand (phase cubic in
    x), for autodiff with respect to amp; accurate where windings stay below ~n_nodes / 8."""
    w_freq, start_freq, g_time, start_time, dnu_mhz, int_time = tables
    x, w = np.polynomial.legendre.leggauss(n_nodes)
    half = int_time / 2
    f_rows = np.asarray(start_freq)[:, None] + np.arange(w_freq.shape[1])
    t_rows = np.asarray(start_time)[:, None] + np.arange(g_time.shape[1])
    stencil = amp[:, :, f_rows[:, :, None, None], t_rows[None, None, :, :]]
    coef = jnp.einsum("arfktl,fku,tlm->arftum", stencil, w_freq, g_time)
    poly = jnp.einsum("arftum,mx->arftux", coef, x[None, :] ** np.arange(coef.shape[-1])[:, None])
    orders = min(delay_us.shape[3], 4)
    powers = jnp.stack([(half * x) ** k / math.factorial(k) for k in range(orders)])
    dtau = jnp.einsum("artk,kx->artx", delay_us[..., 1:orders], powers[1:orders])
    nu = freq_mhz[:, None] + dnu_mhz[None, :]
    cycles = nu[None, None, :, None, :, None] * dtau[:, :, None, :, None, :]
    cycles = cycles + dnu_mhz[:, None] * delay_us[:, :, None, :, 0, None, None]
    signal = poly * jnp.exp(1j * (phase[..., None, None] + 2 * np.pi * cycles))
    product = signal[np.asarray(a1)] * jnp.conj(signal[np.asarray(a2)])
    return jnp.einsum("brftux,x->bft", product, w / 2) / dnu_mhz.size
