"""Derivatives of the analytic operator with respect to the centre phases and the delays.

The scene is test_analytic's (3 antennas, 5 baselines with both orientations and an
autocorrelation, 2 sources, 2 x 6 cells, 2 fine channels, delays with orders 0..3): twelve
winding regimes, one per (source, integration), up to |a| = 1e4 rad, across the closed
form's branch edges. References: central finite differences of the operator itself, the
quadrature operator's own autodiff at Gauss-Legendre time samples where both operators give
the same values, and float64 for float32.

The loss is a real scalar of the visibilities: the real part of a fixed random projection
plus weighted |vis|^2 terms, so that every cell's value and its square both count.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import analytic_args, make_scene
from test_analytic import A1, FREQ_MHZ, IDX, INT_TIME, SHAPE, _regime_case

from ri_kernels import (
    QuadratureTables,
    analytic_eval_with_indices,
    analytic_moments_with_indices,
    gauss_legendre_offsets,
    lagrange_stencils,
    make_indices,
    quadrature_eval_with_indices,
)

N_TIME, N_RFI = SHAPE["n_time"], SHAPE["n_rfi"]
# Phase per unit of each delay order at the channel centre (rad per us, us/s, ...): order 0
# moves the phase by 2 pi dnu d0 only, |dnu| = 0.0625 MHz here; order k by 2 pi nu (T/2)^k / k!.
RAD_PER_ORDER = np.array(
    [2 * math.pi * 0.0625]
    + [2 * math.pi * FREQ_MHZ * (INT_TIME / 2) ** k / math.factorial(k) for k in (1, 2, 3)]
)


class _Loss:
    """Re sum(proj vis) + sum(weights |vis|^2) of the visibilities ``vis_of(phase, delay)``
    (of shape ``shape``), and the difference of the loss at two visibilities, formed from
    their difference without cancelling the loss's large terms (the high-winding regimes'
    derivatives are 1e-5 of the loss)."""

    def __init__(self, vis_of, shape, seed=0):
        rng = np.random.default_rng(seed)
        self.vis_of = vis_of
        self.proj = rng.normal(size=shape) + 1j * rng.normal(size=shape)
        self.weights = rng.uniform(0.5, 1.5, size=shape)

    def __call__(self, phase, delay):
        vis = self.vis_of(phase, delay)
        return jnp.sum((self.proj * vis).real) + jnp.sum(self.weights * jnp.abs(vis) ** 2)

    def difference(self, up, down):
        """loss(up) - loss(down) of two visibilities."""
        step = up - down
        squares = (step * np.conj(up + down)).real  # |up|^2 - |down|^2
        return float(np.sum((self.proj * step).real) + np.sum(self.weights * squares))


def _analytic_loss(args, **options):
    def vis(phase, delay):
        return analytic_eval_with_indices(IDX, args[0], phase, delay, *args[3:], **options)

    return _Loss(vis, (A1.size, *args[0].shape[2:]))


def _relative_errors(grad, reference):
    """Largest error of (phase, delay) gradients relative to the reference's largest, for the
    phase and each delay order 0..3."""
    split = [{"phase": np.asarray(g[0])} for g in (grad, reference)]
    for parts, g in zip(split, (grad, reference), strict=True):
        parts.update({f"delay order {k}": np.asarray(g[1])[..., k] for k in range(4)})
    mine, ref = split
    return {k: float(f"{np.abs(mine[k] - ref[k]).max() / np.abs(ref[k]).max():.1e}") for k in ref}


def _directions(args, rng):
    """One direction per regime (source r, integration t) and per argument (phase, delay
    orders 0..3): random over antennas (and channels) at (r, t) alone, each delay order
    scaled so that a unit step moves the phase by about 1 rad. Yields (regime, what, phase
    direction, delay direction)."""
    phase, delay = args[1], args[2]
    for r in range(N_RFI):
        for t in range(N_TIME):
            d_phase = np.zeros_like(phase)
            d_phase[:, r, :, t] = rng.normal(size=d_phase[:, r, :, t].shape)
            yield r * N_TIME + t, "phase", d_phase, np.zeros_like(delay)
            for k in range(4):
                d_delay = np.zeros_like(delay)
                d_delay[:, r, t, k] = rng.normal(size=delay.shape[0]) / RAD_PER_ORDER[k]
                yield r * N_TIME + t, f"delay order {k}", np.zeros_like(phase), d_delay


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize(("segments", "terms", "cubic_terms"), [(2, 6, 3), (4, 16, 3), (1, 6, 0)])
def test_phase_and_delay_gradients_equal_finite_differences_in_every_regime(
    segments, terms, cubic_terms
):
    args, _ = _regime_case(segments, cubic_terms > 0)
    options = {"segments": segments, "terms": terms, "cubic_terms": cubic_terms}
    loss = _analytic_loss(args, **options)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))(args[1], args[2])
    vis_of = jax.jit(loss.vis_of)
    step = 1e-4  # rad of phase per unit direction
    steps = (2 * step, step, -step, -2 * step)
    worst = {}
    for regime, what, d_phase, d_delay in _directions(args, np.random.default_rng(1)):
        vis = [np.asarray(vis_of(args[1] + s * d_phase, args[2] + s * d_delay)) for s in steps]
        # The fourth-order central difference: its truncation is (1e-4)^4 of the fifth
        # derivative, the rounding of the visibilities' differences about 1e-12 here.
        fd = (8 * loss.difference(vis[1], vis[2]) - loss.difference(vis[0], vis[3])) / (12 * step)
        mine = float(np.sum(grad[0] * d_phase) + np.sum(grad[1] * d_delay))
        if cubic_terms == 0 and what == "delay order 3":
            # Without the cubic the moments do not depend on d3: both exactly zero.
            assert mine == 0 and fd == 0, (regime, mine, fd)
            continue
        error = abs(mine - fd) / abs(fd)
        worst[what] = max(worst.get(what, 0.0), error)
    print(options, {k: f"{v:.1e}" for k, v in worst.items()})
    # Measured at most 5.7e-8, 4.9e-8 and 1.0e-8 for the three option sets, relative to each
    # derivative: 1.5e-12 absolute in the |a| = 1e4 regime, whose derivatives are 1e-5 of the
    # largest, as the rounding of the differences leaves it.
    assert max(worst.values()) < 5e-6


@pytest.mark.usefixtures("x64")
def test_forward_and_reverse_mode_agree_on_a_random_tangent():
    args, _ = _regime_case(2, True)
    rng = np.random.default_rng(2)
    amp, phase, delay = args[:3]
    tangents = (
        rng.normal(size=amp.shape) + 1j * rng.normal(size=amp.shape),
        rng.normal(size=phase.shape),
        rng.normal(size=delay.shape) / RAD_PER_ORDER,
    )
    shape = (A1.size, *amp.shape[2:])
    cotangent = rng.normal(size=shape) + 1j * rng.normal(size=shape)

    def vis(amp, phase, delay):
        return analytic_eval_with_indices(IDX, amp, phase, delay, *args[3:])

    _, jvp = jax.jit(lambda p, t: jax.jvp(vis, p, t))((amp, phase, delay), tangents)
    _, vjp_of = jax.vjp(vis, amp, phase, delay)
    vjp = vjp_of(cotangent)
    # <v, J t> = <J^T v, t> under Re sum(a b), the pairing JAX transposes complex maps by.
    lhs = float(np.sum(cotangent * np.asarray(jvp)).real)
    rhs = sum(float(np.sum(np.asarray(g) * t).real) for g, t in zip(vjp, tangents, strict=True))
    print(f"<v, J t> = {lhs:.15e}, <J^T v, t> = {rhs:.15e}: {abs(lhs - rhs) / abs(lhs):.1e}")
    assert abs(lhs - rhs) <= 1e-13 * abs(lhs)  # measured 2.0e-16
    assert all(np.any(np.asarray(g)) for g in vjp)


def _gauss_scene():
    """A scene both operators average exactly: |a| up to 26 rad, |b| 2.9 and |c| 0.23 rad;
    the quadrature at 32 Gauss-Legendre times per cell with the analytic operator's amplitude
    interpolant (3-point Lagrange stencils, which ``monomial_stencils`` expands)."""
    scene = make_scene(
        11, n_ant=3, n_freq=2, n_time=4, n_path=4, int_time=1.0, rate_us_s=5e-3, omega_per_s=0.3
    )
    dt, scale = gauss_legendre_offsets(scene.int_time, 32)
    w_time, start_time = lagrange_stencils(4, dt / scene.int_time, 3)
    assert np.array_equal(scene.start_g, start_time)
    analytic = analytic_args(scene)
    quadrature_tables = QuadratureTables(
        analytic[3].w_freq, analytic[3].start_freq, w_time * scale, start_time, scene.dnu_mhz, dt
    )
    quadrature = (*analytic[:3], quadrature_tables, scene.freq_mhz)
    return analytic, quadrature


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
def test_phase_and_delay_gradients_equal_the_quadrature_operators():
    analytic, quadrature = _gauss_scene()
    a1, a2 = np.triu_indices(3)
    idx = make_indices(3, a1, a2)
    shape = (a1.size, *analytic[0].shape[2:])

    def vis_analytic(phase, delay):
        return analytic_eval_with_indices(
            idx, analytic[0], phase, delay, *analytic[3:], segments=4, terms=16, cubic_terms=3
        )

    def vis_quadrature(phase, delay):
        return quadrature_eval_with_indices(idx, quadrature[0], phase, delay, *quadrature[3:])

    phase, delay = analytic[1], analytic[2]
    values = [np.asarray(f(phase, delay)) for f in (vis_analytic, vis_quadrature)]
    value_error = np.abs(values[0] - values[1]).max() / np.abs(values[1]).max()
    grads = [
        jax.grad(_Loss(f, shape), argnums=(0, 1))(phase, delay)
        for f in (vis_analytic, vis_quadrature)
    ]
    relative = _relative_errors(*grads)
    print(f"values {value_error:.1e} apart; gradients {relative}")
    # Measured 1.2e-15 (values) and at most 5.0e-15 (delay order 3) of the largest.
    assert value_error < 1e-13
    assert max(relative.values()) < 5e-13, relative


def _cast(args, real):
    """Seam arguments in the precision pair of ``real`` (the integer starts unchanged)."""
    complex_of = {np.float32: np.complex64, np.float64: np.complex128}
    return jax.tree.map(
        lambda x: (
            x.astype(complex_of[real] if np.iscomplexobj(x) else real)
            if x.dtype.kind in "fc"
            else x
        ),
        args,
    )


@pytest.mark.slow
def test_float32_gradients_are_within_the_float64_ones():
    args, _ = _regime_case(2, True)
    args = _cast(args, np.float32)
    assert not jax.config.jax_enable_x64
    grad32 = jax.grad(_analytic_loss(args), argnums=(0, 1))(args[1], args[2])
    with jax.enable_x64(True):
        # float64 from the same float32 inputs: the difference is float32 arithmetic alone.
        exact = _cast(args, np.float64)
        grad64 = jax.grad(_analytic_loss(exact), argnums=(0, 1))(exact[1], exact[2])
        grad64 = [np.asarray(g) for g in grad64]
    relative = _relative_errors(grad32, grad64)
    print(f"float32 against float64: {relative}")
    # Measured 4.2e-7 (phase), 1.5e-7, 2.4e-7, 1.1e-7, 1.8e-7 (delay orders 0..3) of the
    # largest, across windings up to 1e4 rad.
    assert max(relative.values()) < 5e-5, relative


def test_delay_orders_above_three_have_exactly_zero_derivative():
    scene = make_scene(31, n_path=6, rate_us_s=0.3, omega_per_s=1e-2, **SHAPE)
    args = analytic_args(scene, np.float32)
    grad = jax.grad(_analytic_loss(args), argnums=1)(args[1], args[2])
    assert grad.shape == args[2].shape
    assert np.all(np.asarray(grad)[..., :4].any(axis=(0, 1, 2)))  # orders 0..3 are live
    assert not np.any(np.asarray(grad)[..., 4:])


@pytest.mark.slow
def test_kept_moments_are_constants_of_phase_and_delay():
    scene = make_scene(5, n_path=4, rate_us_s=0.3, **SHAPE)
    args = analytic_args(scene, np.float32)
    moments = analytic_moments_with_indices(IDX, *args[1:])

    def loss(amp, phase, delay, moments=None):
        vis = analytic_eval_with_indices(IDX, amp, phase, delay, *args[3:], moments=moments)
        return jnp.sum(jnp.abs(vis) ** 2)

    formed = jax.grad(loss, argnums=(0, 1, 2))(*args[:3])
    kept = jax.grad(loss, argnums=(0, 1, 2))(*args[:3], moments)
    assert np.any(np.asarray(formed[1])) and np.any(np.asarray(formed[2]))
    assert not np.any(np.asarray(kept[1])) and not np.any(np.asarray(kept[2]))
    error = np.abs(np.asarray(kept[0]) - formed[0]).max() / np.abs(formed[0]).max()
    print(f"amp gradient with kept moments: {error:.1e} from the formed ones")
    # Measured 0; the bound is about 16 float32 roundings of the largest value.
    assert error < 1e-6


@pytest.mark.parametrize(
    ("argnums", "slopes"), [(0, False), (1, False), (2, True), ((0, 1, 2), True)]
)
def test_extra_moments_are_formed_only_for_delay_tangents(argnums, slopes):
    """The phase-moment slopes (W_{n_mom}.., named in the program) appear only in a
    derivative along a delay: an amp gradient forms exactly the moments of a value."""
    from ri_kernels._pair_moments import MOMENTS, SLOPES

    scene = make_scene(5, n_path=4, rate_us_s=0.3, **SHAPE)
    args = analytic_args(scene, np.float32)

    def loss(amp, phase, delay):
        vis = analytic_eval_with_indices(IDX, amp, phase, delay, *args[3:])
        return jnp.sum(jnp.abs(vis) ** 2)

    program = str(jax.make_jaxpr(jax.grad(loss, argnums))(*args[:3]))
    assert f"name={MOMENTS}" in program
    assert (f"name={SLOPES}" in program) == slopes


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
def test_blocks_and_kept_residuals_give_the_same_phase_and_delay_gradients():
    """Budgets that split the work into blocks, with reverse mode keeping the moments and
    their slopes (the three more), the moments alone, or neither, give the gradient of one
    block holding everything."""
    from ri_kernels._analytic import _block_plan, _bytes_per_pair_cell

    args, _ = _regime_case(2, True)
    n_freq, n_time = args[0].shape[2:]
    n_int_f = args[3].dnu_mhz.size
    per_moment = IDX.n_bl * n_freq * n_time * N_RFI * n_int_f * 16  # complex128
    per_pair_cell = _bytes_per_pair_cell(args[0], n_int_f, 5, 2, 6, 3)
    whole = jax.grad(_analytic_loss(args), argnums=(0, 1))(args[1], args[2])
    for budget in (8 * per_moment, 6 * per_moment, 1):
        assert _block_plan(IDX.n_bl, n_freq, n_time, per_pair_cell, budget)[1].n_cell_blocks > 1
        loss = _analytic_loss(args, memory_budget_bytes=budget)
        blocked = jax.grad(loss, argnums=(0, 1))(args[1], args[2])
        relative = _relative_errors(blocked, whole)
        print(f"budget {budget} B: {relative}")
        # Measured at most 5.3e-16: the same arithmetic per cell, the antennas' cotangents
        # summed over the blocks in another order.
        assert max(relative.values()) < 5e-14, relative
