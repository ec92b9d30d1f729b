"""Cell-averaged visibilities from per-antenna signals on fine samples, by a Gram product.

Each cell (channel f, integration t) is averaged by Gauss-Legendre quadrature with ``n_freq``
nodes across the channel and ``n_time`` across the integration. Exact geometry (delays, ranges,
beam angles) is evaluated at every fine time on the host in float64; the per-antenna signal
``S[a, r](nu, t) = A * exp(2 pi i nu tau)`` is formed on the device and, with
``X[a, (r, u, v)] = sqrt(w_u w_v) S[a, r](nu_u, t_v)``, every baseline's average is
``(X X^H)[a1, a2]``. This is the simulator's own reference path, independent of ri_kernels.

Node counts: Gauss-Legendre with n nodes integrates ``exp(i a x)`` over [-1, 1] to 1e-10 once
``n >= a / 2 + 12`` (measured for a = 0.1 .. 1000); :func:`node_count` adds margin. ``a`` is
half the phase range of a baseline's product across the cell (pi times the fringe winding in
cycles) plus the change of the Airy argument, whose pattern varies at most like exp(i x).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.observation import geometry as geo
from tabascal.observation.beam import beam_x, interpolate_voltage
from tabascal.parallel.backends import float64_device


def node_count(half_range_rad: float) -> int:
    """Gauss-Legendre nodes for an integrand of "bandwidth" ``half_range_rad`` on [-1, 1]."""
    a = max(float(half_range_rad), 0.0)
    return int(np.ceil(0.6 * a + 4 * a ** (1 / 3) + 8))


def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes in [-1, 1] and weights summing to 1: (n,), (n,) float64."""
    x, w = np.polynomial.legendre.leggauss(n)
    return x, w / 2


@dataclass(frozen=True)
class FineSampling:
    """Quadrature nodes per integration and per channel, and the windings that set them
    (half phase ranges in rad, beam included)."""

    n_time: int
    n_freq: int
    time_half_range_rad: float
    freq_half_range_rad: float

    @classmethod
    def from_ranges(cls, time_rad: float, freq_rad: float) -> FineSampling:
        return cls(node_count(time_rad), node_count(freq_rad), float(time_rad), float(freq_rad))


def _edges(meta) -> np.ndarray:
    return np.arange(meta.n_time + 1) * meta.int_time


def rfi_sampling(meta) -> FineSampling:
    """Nodes for the RFI: from the delay derivatives at cell centres (spread over antennas
    bounds every baseline) and the satellites' beam-angle changes between cell edges."""
    args = (meta.gast0_rad, meta.ra_rad, meta.dec_rad)
    delay = geo.rfi_delays(meta.ant_itrf, meta.orbits, meta.times_s, *args, n_deriv=2)
    f_top_mhz = (meta.freqs_hz.max() + meta.chan_width / 2) * 1e-6
    spread = np.ptp(delay, axis=0)  # (s, t, 3)
    t_int = meta.int_time
    time_cycles = f_top_mhz * (spread[..., 1] * t_int + spread[..., 2] * t_int**2 / 8)
    freq_cycles = meta.chan_width * 1e-6 * spread[..., 0]
    _, sin_off = geo.satellite_sightlines(meta.ant_itrf, meta.orbits, _edges(meta), *args)
    dx_time = beam_x(meta.dish_diameter_m, f_top_mhz * 1e6, np.abs(np.diff(sin_off, axis=-1)))
    dx_freq = beam_x(meta.dish_diameter_m, meta.chan_width, sin_off)
    # + 1: the slow EIRP variations (periods of minutes) and rounding
    time_rad = np.pi * time_cycles.max(initial=0) + dx_time.max(initial=0) + 1
    freq_rad = np.pi * freq_cycles.max(initial=0) + dx_freq.max(initial=0)
    return FineSampling.from_ranges(time_rad, freq_rad)


def sky_offsets(meta, sky) -> np.ndarray:
    """Sine of each source's angle from the phase centre: (n_src,)."""
    cos = geo.radec_to_unit(sky.ra_rad, sky.dec_rad) @ geo.radec_to_unit(meta.ra_rad, meta.dec_rad)
    return np.sqrt(np.clip(1 - cos**2, 0, 1))


def sky_sampling(meta, sky) -> FineSampling:
    """Nodes for the sky: the change of each source's delay spread between cell edges (its
    fringe is nearly linear across a cell; the margin covers the rest)."""
    if sky.ra_rad.size == 0:
        return FineSampling.from_ranges(0.0, 0.0)
    args = (meta.gast0_rad, meta.ra_rad, meta.dec_rad, sky.ra_rad, sky.dec_rad)
    tau = geo.sky_delays(meta.ant_itrf, _edges(meta), *args)  # (a, src, t+1)
    f_top_mhz = (meta.freqs_hz.max() + meta.chan_width / 2) * 1e-6
    time_cycles = f_top_mhz * np.ptp(np.diff(tau, axis=-1), axis=0).max()
    freq_cycles = meta.chan_width * 1e-6 * np.ptp(tau, axis=0).max()
    dx_freq = beam_x(meta.dish_diameter_m, meta.chan_width, sky_offsets(meta, sky)).max()
    return FineSampling.from_ranges(np.pi * time_cycles + 1, np.pi * freq_cycles + dx_freq)


def fine_times(meta, cells: slice, nodes: np.ndarray) -> np.ndarray:
    """Fine sample times of integrations ``cells``: (n_cells, n_nodes) s from the start."""
    return meta.times_s[cells, None] + nodes[None, :] * meta.int_time / 2


@partial(jax.jit, static_argnames=("group",))
def _cell_vis(
    amp0, tau_us, sin_off, spec_index, nu_mhz, sqrt_wf, sqrt_wt, table, consts, a1, a2, *, group
):
    """Visibilities of one cell in every channel.

    amp0, tau_us, sin_off: (n_ant, n_src, n_t) float64 at the fine times (amplitude at the
    reference frequency without beam, sqrt(Jy); delay, us; sine of the beam angle).
    spec_index: (n_src,), amplitude ~ (nu/ref)^(index/2). nu_mhz: (n_freq, n_f) fine
    frequencies. sqrt_wf (n_f,), sqrt_wt (n_t,): square roots of the quadrature weights.
    consts: (ref_mhz, pi D / c * 1e6 in 1/(m MHz)). Returns (n_freq, n_bl) complex128.
    """
    n_ant, n_src, n_t = amp0.shape
    ref_mhz, beam_scale = consts[0], consts[1]

    def split(a):  # (a, src, n_t) -> (n_groups, a, src, group)
        return a.reshape(n_ant, n_src, n_t // group, group).transpose(2, 0, 1, 3)

    parts = (split(amp0 * sqrt_wt), split(tau_us), split(sin_off))

    def one_channel(nu):
        spec = (nu[None, :] / ref_mhz) ** (spec_index[:, None] / 2) * sqrt_wf  # (src, f)

        def add_group(gram, part):
            amp_g, tau_g, sin_g = part  # (a, src, group)
            x_beam = beam_scale * nu[None, None, :, None] * sin_g[:, :, None, :]
            beam = interpolate_voltage(table, x_beam, jnp)
            cycles = nu[None, None, :, None] * tau_g[:, :, None, :]
            phase = 2 * jnp.pi * (cycles - jnp.round(cycles))
            x = (amp_g[:, :, None, :] * spec[None, :, :, None] * beam) * jnp.exp(1j * phase)
            x = x.reshape(n_ant, -1)
            return gram + jnp.matmul(x, x.conj().T, precision="highest"), None

        gram, _ = jax.lax.scan(add_group, jnp.zeros((n_ant, n_ant), jnp.complex128), parts)
        return gram[a1, a2]

    return jax.lax.map(one_channel, nu_mhz)


def cells_vis(
    amp0,
    tau_us,
    sin_off,
    spec_index,
    nu_mhz,
    w_freq,
    w_time,
    table,
    ref_freq_hz,
    dish_diameter_m,
    a1,
    a2,
    max_group_elems: int = 2**22,
) -> np.ndarray:
    """Cell-averaged visibilities, float64 throughout: (n_cell, n_freq, n_bl) complex128.

    amp0, tau_us, sin_off: (n_cell, n_ant, n_src, n_t); other shapes as in ``_cell_vis``;
    w_freq, w_time are the quadrature weights (summing to 1). One compiled call per cell, so
    the blocking of cells never changes the program. Fine times go through the Gram product
    in groups of at most ``max_group_elems`` signal samples per channel, zero-weight padded.
    On a backend without float64 (a TPU) the cells are computed on the host's CPU device.
    """
    n_cell, n_ant, n_src, n_t = amp0.shape
    per_node = max(1, n_ant * n_src * nu_mhz.shape[1])
    group = int(max(1, min(n_t, max_group_elems // per_node)))
    pad = (-n_t) % group
    widths = ((0, 0), (0, 0), (0, pad))
    out = np.empty((n_cell, nu_mhz.shape[0], np.size(a1)), dtype=np.complex128)
    with jax.enable_x64(True), jax.default_device(float64_device()):
        fixed = dict(
            spec_index=jnp.asarray(spec_index, dtype=jnp.float64),
            nu_mhz=jnp.asarray(nu_mhz, dtype=jnp.float64),
            sqrt_wf=jnp.asarray(np.sqrt(w_freq)),
            sqrt_wt=jnp.asarray(np.pad(np.sqrt(w_time), (0, pad))),
            table=jnp.asarray(table),
            consts=jnp.asarray([ref_freq_hz * 1e-6, np.pi * dish_diameter_m / geo.C * 1e6]),
            a1=jnp.asarray(a1),
            a2=jnp.asarray(a2),
        )
        for c in range(n_cell):
            cell = (np.pad(a[c], widths) for a in (amp0, tau_us, sin_off))
            out[c] = np.asarray(_cell_vis(*cell, **fixed, group=group))
    return out
