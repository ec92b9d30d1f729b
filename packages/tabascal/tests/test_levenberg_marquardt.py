"""The Levenberg-Marquardt solver (``fitting.levenberg_marquardt``) against problems whose
optimum is known in closed form, and its count of passes against an independent count of the
model evaluations it made."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tabascal.fitting import levenberg_marquardt, optimiser


def _lm_config(**settings) -> optimiser.FitConfig:
    """A fit of Levenberg-Marquardt steps alone (no gradient phases)."""
    settings = {"steps": 0, "second_phase_steps": 0, "polish": "levenberg-marquardt", **settings}
    return optimiser.FitConfig(**settings)


def _ridge_problem(seed=0, n_data=60, n_params=12):
    """A whitened linear least-squares problem as the fit's: loss(p) = (|A p - b|^2 + |p|^2)
    / 2N, its columns scaled over four orders of magnitude (as the RFI's modes and the sky's
    are) and two of them nearly parallel (as a gain and the RFI it multiplies)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n_data, n_params)) * np.logspace(-1, 3, n_params)
    a[:, 1] = a[:, 0] * 1.001 + 1e-3 * rng.standard_normal(n_data)
    b = rng.standard_normal(n_data) * 50.0
    return a, b


def _ridge_loss_and_curvature(a, b):
    n = a.shape[0]
    a, b = jnp.asarray(a), jnp.asarray(b)

    def loss(p, _):
        r = a @ p - b
        value = (jnp.sum(r**2) + jnp.sum(p**2)) / (2 * n)
        return value, {"chi2": jnp.sum(r**2) / n}

    def curvature(p, v, _):
        del p
        return (a.T @ (a @ v) + v) / n

    return loss, curvature


@pytest.mark.usefixtures("x64")
def test_linear_least_squares_reaches_the_closed_form_optimum():
    """On a linear problem the Gauss-Newton model is exact: the steps converge on (A'A +
    I)^-1 A'b, here at condition number ~1e8 before the preconditioner."""
    a, b = _ridge_problem()
    loss, curvature = _ridge_loss_and_curvature(a, b)
    # The stacked system [A; I] p = [b; 0] by QR (numpy's lstsq): its condition is the square
    # root of the normal equations'.
    stacked = np.vstack([a, np.eye(a.shape[1])])
    exact = np.linalg.lstsq(stacked, np.concatenate([b, np.zeros(a.shape[1])]), rcond=None)[0]
    config = _lm_config(
        polish_steps=30, polish_cg_steps=40, forcing=1e-6, tolerance=1e-14, gradient_tolerance=1e-20
    )
    optimizer = optimiser.make_optimizer(config)
    state, history = optimiser.run(
        optimiser.make_step(loss, optimizer, curvature),
        optimiser.init_state(jnp.zeros(a.shape[1]), optimizer),
        None,
        config,
        progress=False,
    )
    # Measured 2.2e-11 of the optimum's size (float64): the products are the normal
    # equations', whose condition (~1e8 here) bounds what any solve on them reaches.
    error = np.max(np.abs(np.asarray(state.params) - exact)) / np.max(np.abs(exact))
    assert error < 1e-9
    assert history.stopped == "converged"
    assert len(history.loss) < 30


def _rosenbrock(p, _):
    """Rosenbrock's function as least squares, r = (10 (p1 - p0^2), 1 - p0): its minimum, 0,
    is at (1, 1)."""
    r = jnp.stack([10.0 * (p[1] - p[0] ** 2), 1.0 - p[0]])
    value = 0.5 * jnp.sum(r**2)
    return value, {"chi2": value}


def _rosenbrock_gauss_newton(p, v, _):
    def residuals(q):
        return jnp.stack([10.0 * (q[1] - q[0] ** 2), 1.0 - q[0]])

    _, jv = jax.jvp(residuals, (p,), (v,))
    return jax.vjp(residuals, p)[1](jv)[0]


@pytest.mark.usefixtures("x64")
def test_nonlinear_least_squares_reaches_the_rosenbrock_minimum():
    """From (-1.2, 1), the classic start, the damped steps follow the curved valley to its
    minimum at (1, 1): steps the Gauss-Newton model overrates are refused or halved, and the
    damping falls as the model becomes good."""
    config = _lm_config(polish_steps=100, polish_cg_steps=2, forcing=1e-12, tolerance=0.0)
    optimizer = optimiser.make_optimizer(config)
    state, history = optimiser.run(
        optimiser.make_step(_rosenbrock, optimizer, _rosenbrock_gauss_newton),
        optimiser.init_state(jnp.array([-1.2, 1.0]), optimizer),
        None,
        config,
        progress=False,
    )
    # Measured: 0 from (1, 1) to every digit, the loss falling below 1e-20 by step 24.
    np.testing.assert_allclose(np.asarray(state.params), [1.0, 1.0], atol=1e-10)
    assert np.all(np.diff(history.loss) <= 1e-15)  # a step never raises the loss


class _Counted:
    """Counts the model evaluations a compiled step makes, from the host (a callback in each
    traced function), independently of the solver's own count."""

    def __init__(self, a, b):
        self.loss, self.curvature = _ridge_loss_and_curvature(a, b)
        self.values = 0
        self.products = 0

    def _tick(self, kind):
        def bump():
            setattr(self, kind, getattr(self, kind) + 1)

        jax.debug.callback(bump, ordered=True)

    def counted_loss(self, p, inputs):
        self._tick("values")
        return self.loss(p, inputs)

    def counted_curvature(self, p, v, inputs):
        self._tick("products")
        return self.curvature(p, v, inputs)


@pytest.mark.usefixtures("x64")
def test_passes_count_every_evaluation_the_steps_made():
    """fit.passes: a value and gradient, or a Gauss-Newton product, is one pass; a loss alone
    is half of one. Counted here by callbacks in the loss and the product: each step's value
    and gradient (one loss evaluation under jax.value_and_grad), the line of losses its update
    tries, and the products of its solve and of the preconditioner's probes."""
    a, b = _ridge_problem(seed=1)
    counted = _Counted(a, b)
    config = _lm_config(polish_steps=4, polish_cg_steps=6, tolerance=0.0)
    optimizer = optimiser.make_optimizer(config)
    _, history = optimiser.run(
        optimiser.make_step(counted.counted_loss, optimizer, counted.counted_curvature),
        optimiser.init_state(jnp.zeros(a.shape[1]), optimizer),
        None,
        config,
        progress=False,
    )
    jax.effects_barrier()
    steps = len(history.loss)
    assert steps == 4
    # Every loss evaluation beyond the steps' own is a lone loss (half a pass).
    expected = steps + counted.products + 0.5 * (counted.values - steps)
    assert history.passes[-1] == expected
    assert np.all(np.diff(history.passes) > 0)
    assert history.summary()["passes"] == expected


def test_gradient_phase_steps_are_one_pass_each():
    """Before the polish each step is one value and gradient: one pass."""
    config = optimiser.FitConfig(steps=5, second_phase_steps=2, polish_steps=0)
    optimizer = optimiser.make_optimizer(config)
    loss = lambda x, _: (jnp.sum(x**2), {"chi2": jnp.sum(x**2)})  # noqa: E731
    _, history = optimiser.run(
        optimiser.make_step(loss, optimizer),
        optimiser.init_state(jnp.ones(3), optimizer),
        None,
        config,
        progress=False,
    )
    np.testing.assert_array_equal(history.passes, np.arange(1.0, 8.0))
    assert history.summary() == {"steps": 7, "passes": 7.0, "stopped": "steps"}


def _block_diagonal_matrix(rng, rows, b):
    """(rows, b, b) symmetric positive definite blocks."""
    a = rng.standard_normal((rows, b, b))
    return np.einsum("rij,rkj->rik", a, a) + b * np.eye(b)


@pytest.mark.usefixtures("x64")
def test_block_estimate_of_a_block_diagonal_matrix_is_exact():
    """Where no product couples two rows, each row's block comes out exactly, whatever the
    rows' signs: a leaf of (3, 4, 2) in blocks over its last two axes (3 rows of 8), and one
    of (5,) whole (one row of 5)."""
    rng = np.random.default_rng(2)
    blocks = {"a": _block_diagonal_matrix(rng, 3, 8), "b": _block_diagonal_matrix(rng, 1, 5)}
    like = {"a": jnp.zeros((3, 4, 2)), "b": jnp.zeros(5)}

    def product(v):
        a = jnp.einsum("rij,rj->ri", blocks["a"], v["a"].reshape(3, 8)).reshape(3, 4, 2)
        return {"a": a, "b": blocks["b"][0] @ v["b"]}

    axes = {"['a']": 2, "['b']": None}
    estimate = levenberg_marquardt.estimate_blocks(product, like, axes.get, None, seed=3)
    # Measured 0 (float64): each entry is one product's entry times a sign squared.
    np.testing.assert_allclose(estimate[0], blocks["a"], rtol=1e-15)
    np.testing.assert_allclose(estimate[1], blocks["b"], rtol=1e-15)


@pytest.mark.usefixtures("x64")
def test_block_estimate_averages_other_rows_coupling_over_the_signs():
    """Rows coupled by off-block terms: each estimate is the block plus the other rows'
    coupling times products of random signs, so over many seeds the mean of the estimates
    converges on the blocks (the bias is 0), the spread falling as one over the square root
    of the seeds."""
    rng = np.random.default_rng(4)
    rows, b = 6, 3
    dense = rng.standard_normal((rows * b, rows * b)) * 0.3
    dense = dense @ dense.T + np.kron(np.eye(rows), 3 * np.eye(b))
    exact = np.stack([dense[r * b : (r + 1) * b, r * b : (r + 1) * b] for r in range(rows)])
    like = jnp.zeros((rows, b))

    def product(v):
        return (jnp.asarray(dense) @ v.reshape(-1)).reshape(rows, b)

    # One program for every seed: traced, the seed does not make each draw compile its own.
    @jax.jit
    def estimate(seed):
        return levenberg_marquardt.estimate_blocks(product, like, lambda _: 1, None, seed=seed)[0]

    estimates = np.stack([estimate(k) for k in range(400)])
    one_error = np.abs(estimates[0] - exact).max()
    mean_error = np.abs(estimates.mean(axis=0) - exact).max()
    # Measured: one draw off by 1.83 at most, the mean of 400 by 0.092 (a twentieth of it).
    assert one_error > 0.3
    assert mean_error < one_error / 8


@pytest.mark.usefixtures("x64")
def test_rows_alike_give_the_same_blocks_however_the_rows_are_ordered_or_padded():
    """The sky's rows (one per baseline, which no product couples) take probes alike on
    every row, so a layout that permutes the rows and pads them (the baseline axis) gets the
    same blocks, in its own order."""
    rng = np.random.default_rng(5)
    blocks = _block_diagonal_matrix(rng, 5, 2)

    def product_of(bl):
        return lambda v: jnp.einsum("rij,rj->ri", bl, v)

    order = np.array([3, 0, 4, 1, 2])
    padded = np.concatenate([blocks[order], np.eye(2)[None] * 7.0])
    alike = lambda _: True  # noqa: E731
    estimate = levenberg_marquardt.estimate_blocks(
        product_of(blocks), jnp.zeros((5, 2)), lambda _: 1, alike, seed=0
    )[0]
    other = levenberg_marquardt.estimate_blocks(
        product_of(jnp.asarray(padded)), jnp.zeros((6, 2)), lambda _: 1, alike, seed=9
    )[0]
    np.testing.assert_array_equal(other[:5], estimate[order])


def test_the_solver_refuses_to_run_without_the_gauss_newton_product():
    config = _lm_config(polish_steps=1)
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(lambda x, _: (jnp.sum(x**2), {"chi2": 0.0}), optimizer)
    with pytest.raises(ValueError, match="Gauss-Newton product"):
        step(optimiser.init_state(jnp.ones(2), optimizer), None)


def test_cg_steps_default_to_fifty_with_levenberg_marquardt():
    assert _lm_config().polish_cg_steps == optimiser.LM_CG_STEPS == 50
    assert _lm_config().polish_steps == optimiser.LM_STEPS_MAX
    assert optimiser.FitConfig(polish="trust-region").polish_cg_steps == 400


@pytest.mark.slow
def test_summary_reports_the_passes_the_stop_and_where_the_time_went(small_store, tmp_path):
    """summary.json's ``fit``: two gradient steps (a pass each), then two Levenberg-Marquardt
    steps on the 8-station store, each its value and gradient (one pass), one to three
    products, its loss at the step and at most six halvings of it (half a pass each), and the
    first also the preconditioner's probes; and where the run's time went."""
    from tabascal import fitting
    from tabascal.fitting import run_config
    from tabascal.store import read_observation

    fit = {"steps": 2, "second_phase_steps": 0, "polish": "levenberg-marquardt"}
    fit.update(polish_steps=2, polish_cg_steps=3, checkpoint_every=100, init="data")
    config = run_config.load({"fit": fit, "output": {"plots": False}})
    out = tmp_path / "out"
    summary = fitting.run(read_observation(small_store), out, config, progress=False)
    on_disk = json.loads((out / "summary.json").read_text())["fit"]
    assert on_disk == {k: summary["fit"][k] for k in on_disk}
    assert on_disk["steps"] == 4 and on_disk["stopped"] == "steps"
    with np.load(out / "checkpoints" / "checkpoint.npz") as saved:
        passes = saved["history_passes"]
    assert passes[-1] == on_disk["passes"]
    np.testing.assert_array_equal(passes[:2], [1.0, 2.0])
    second = passes[3] - passes[2]  # a step's value and gradient, 1 to 3 products, its loss
    assert 1 + 1 + 0.5 <= second <= 1 + 3 + 0.5 * 7
    # The first also pays its probes: at least the 2 x 2 entries of a satellite's signal
    # modes (real and imaginary, two or more frequency modes, one or more time modes).
    assert passes[2] - passes[1] >= 1 + 1 + 0.5 + 4
    assert on_disk["seconds"] > 0
    timings = json.loads((out / "summary.json").read_text())["timings"]
    parts = ("setup_s", "compile_s", "iterations_s", "writing_s")
    assert all(timings[part] > 0 for part in parts)
    assert timings["iterations_s"] == on_disk["seconds"]
    # The parts are consecutive spans of the run, so they fill no more than its whole.
    assert sum(timings[part] for part in parts) <= timings["total_s"]


@pytest.mark.usefixtures("x64")
def test_a_leaf_with_no_entries_rides_along():
    """The gains of ``gains.kind: unitary`` have no modes: a leaf of shape (n_ant, n_freq, 0)
    has no blocks to estimate or invert, and the other leaves' steps are as without it."""
    a, b = _ridge_problem(seed=3, n_data=20, n_params=4)
    loss, curvature = _ridge_loss_and_curvature(a, b)

    def with_empty(fn):
        return lambda p, *rest: fn(p["x"], *rest)

    def curvature_with_empty(p, v, inputs):
        return {"x": curvature(p["x"], v["x"], inputs), "g": jnp.zeros_like(v["g"])}

    config = _lm_config(polish_steps=3, tolerance=0.0)
    runs = []
    for params, step_loss, step_curvature in [
        (jnp.zeros(4), loss, curvature),
        ({"x": jnp.zeros(4), "g": jnp.zeros((2, 3, 0))}, with_empty(loss), curvature_with_empty),
    ]:
        optimizer = optimiser.make_optimizer(config)
        state, _ = optimiser.run(
            optimiser.make_step(step_loss, optimizer, step_curvature),
            optimiser.init_state(params, optimizer),
            None,
            config,
            progress=False,
        )
        runs.append(state.params)
    np.testing.assert_array_equal(runs[1]["x"], runs[0])
    assert runs[1]["g"].shape == (2, 3, 0)
