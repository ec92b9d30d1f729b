import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tabascal.fitting import checkpoint, optimiser, phases, solvers


def _fit_config(**settings) -> optimiser.FitConfig:
    """A FitConfig with no second phase and no polish unless they are given (left unset, they
    follow ``steps``), the polish L-BFGS unless another is given."""
    settings = {"second_phase_steps": 0, "polish_steps": 0, "polish": "lbfgs", **settings}
    return optimiser.FitConfig(**settings)


def test_unset_phases_follow_the_first_phase_at_a_half_and_two_and_a_half_times():
    config = optimiser.FitConfig(steps=6, polish="lbfgs")
    assert (config.second_phase_steps, config.polish_steps, config.total_steps) == (3, 15, 24)
    lbfgs = optimiser.FitConfig(polish="lbfgs")
    assert (lbfgs.steps, lbfgs.second_phase_steps, lbfgs.polish_steps) == (200, 100, 500)
    assert optimiser.FitConfig(steps=6, polish="newton", polish_steps=0).total_steps == 9


def _toy_loss(params, inputs):
    # A least-squares problem with a known minimiser, params["x"] == inputs["target"].
    r = params["x"] - inputs["target"]
    chi2 = jnp.sum(r**2) / r.size
    return chi2 + 0.0 * params["y"], {"chi2": chi2}


def _start():
    params = {"x": jnp.zeros(5), "y": jnp.ones(())}
    inputs = {"target": jnp.arange(5.0)}
    return params, inputs


def test_fit_converges_on_a_quadratic():
    config = _fit_config(optimizer="adam", learning_rate=0.1, steps=300)
    optimizer = optimiser.make_optimizer(config)
    params, inputs = _start()
    state, history = optimiser.run(
        optimiser.make_step(_toy_loss, optimizer),
        optimiser.init_state(params, optimizer),
        inputs,
        config,
        progress=False,
    )
    assert history.loss.shape == (300,)
    assert history.loss[-1] < 1e-3 * history.loss[0]
    np.testing.assert_allclose(state.params["x"], np.arange(5.0), atol=0.05)


def test_held_gains_stay_at_their_start_through_the_gradient_phases():
    """Under ``hold_gains`` the gradient phases' steps leave every gains leaf as it started
    (bit for bit) and move the others as they would unheld."""
    from tabascal.model.joint import ModelParams

    def loss(p, _):
        chi2 = sum(jnp.sum((x - 2.0) ** 2) for x in jax.tree.leaves(p))
        return chi2, {"chi2": chi2}

    start = ModelParams(sky=jnp.zeros(3), rfi=jnp.zeros((2, 2)), gains=jnp.ones(4))
    ends = {}
    for held in (True, False):
        config = _fit_config(optimizer="adabelief", steps=5, hold_gains=held)
        optimizer = optimiser.make_optimizer(config)
        state, _ = optimiser.run(
            optimiser.make_step(loss, optimizer),
            optimiser.init_state(jax.tree.map(jnp.copy, start), optimizer),  # donated
            None,
            config,
            progress=False,
        )
        ends[held] = state.params
    np.testing.assert_array_equal(ends[True].gains, start.gains)
    assert np.all(np.asarray(ends[False].gains) > 1.1)  # 5 steps of 0.1 towards 2
    for name in ("sky", "rfi"):
        np.testing.assert_array_equal(getattr(ends[True], name), getattr(ends[False], name))
        assert np.all(np.asarray(getattr(ends[True], name)) > 0.1)


@pytest.mark.usefixtures("x64")  # float64, so that the ratios hold to 1e-12
def test_second_phase_runs_at_a_tenth_of_the_step_size():
    # Plain SGD on f(x) = x^2 / 2 with one parameter: each step moves x by -lr * x, so the
    # ratio of successive x is (1 - lr) in the first phase and (1 - lr/10) in the second.
    config = _fit_config(optimizer="sgd", learning_rate=0.2, steps=3, second_phase_steps=3)
    optimizer = optimiser.make_optimizer(config)
    state = optimiser.init_state(jnp.array(1.0), optimizer)
    step = optimiser.make_step(lambda x, _: (0.5 * x**2, {"chi2": x**2}), optimizer)
    xs = [1.0]
    for _ in range(6):
        state, _, _ = step(state, None)
        xs.append(float(state.params))
    ratios = np.array(xs[1:]) / np.array(xs[:-1])
    np.testing.assert_allclose(ratios, [0.8, 0.8, 0.8, 0.98, 0.98, 0.98], rtol=1e-12)


def test_resume_from_checkpoint_equals_an_uninterrupted_run(tmp_path):
    config = _fit_config(learning_rate=0.05, steps=12, second_phase_steps=8, checkpoint_every=5)
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(_toy_loss, optimizer)
    # The step donates its state, so every run starts from freshly made parameters.
    params, inputs = _start()
    whole, whole_history = optimiser.run(
        step, optimiser.init_state(params, optimizer), inputs, config, progress=False
    )

    # Stop after 10 steps (two checkpoints), then resume from the checkpoint on disk.
    first = _fit_config(**{**config.__dict__, "steps": 10, "second_phase_steps": 0})
    partial_state, _ = optimiser.run(
        optimiser.make_step(_toy_loss, optimiser.make_optimizer(config)),
        optimiser.init_state(_start()[0], optimizer),
        inputs,
        first,
        checkpoint_dir=tmp_path,
        progress=False,
    )
    assert int(partial_state.step) == 10
    template = optimiser.init_state(_start()[0], optimizer)
    loaded, history = checkpoint.load_checkpoint(tmp_path, template)
    assert int(loaded.step) == 10 and history.loss.shape == (10,)
    resumed, resumed_history = optimiser.run(
        step, loaded, inputs, config, history=history, progress=False
    )
    np.testing.assert_array_equal(resumed.params["x"], whole.params["x"])
    np.testing.assert_array_equal(resumed_history.loss, whole_history.loss)


def test_checkpoint_of_another_shape_is_refused(tmp_path):
    optimizer = optimiser.make_optimizer(_fit_config())
    params, _ = _start()
    state = optimiser.init_state(params, optimizer)
    checkpoint.save_checkpoint(tmp_path, state, checkpoint.FitHistory(np.zeros(0), np.zeros(0)))
    other = optimiser.init_state({"x": jnp.zeros(6), "y": jnp.ones(())}, optimizer)
    with pytest.raises(ValueError, match="shape"):
        checkpoint.load_checkpoint(tmp_path, other)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpoint.load_checkpoint(tmp_path / "missing", state)


def test_unknown_optimizer_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="adabelief, adam, sgd"):
        optimiser.make_optimizer(_fit_config(optimizer="lbfgs"))


@pytest.mark.usefixtures("x64")
def test_fit_stops_where_the_loss_has_settled_and_not_before():
    """SGD on 1 + x^2 / 2 from x = 1: x_n = 0.8^n, so the loss 1 + 0.32 0.64^n settles; the fit
    stops at the first step where it fell by less than stop_tolerance of itself over
    stop_window steps, found here from the closed form."""
    config = _fit_config(
        optimizer="sgd", learning_rate=0.2, steps=500, stop_tolerance=1e-6, stop_window=20
    )
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(lambda x, _: (1 + 0.5 * x**2, {"chi2": x**2}), optimizer)
    state, history = optimiser.run(
        step, optimiser.init_state(jnp.array(1.0), optimizer), None, config, progress=False
    )
    # Each step reports the loss at the parameters it starts from: step k (1-based), 0.8^(k-1).
    closed = 1 + 0.5 * 0.64 ** np.arange(500)
    first = next(n for n in range(21, 501) if closed[n - 21] - closed[n - 1] < 1e-6 * closed[n - 1])
    assert len(history.loss) == int(state.step) == first < 500  # 51 steps
    np.testing.assert_allclose(history.loss, closed[:first], rtol=1e-12)
    never = _fit_config(optimizer="sgd", learning_rate=0.2, steps=60)
    _, all_steps = optimiser.run(
        step, optimiser.init_state(jnp.array(1.0), optimizer), None, never, progress=False
    )
    assert len(all_steps.loss) == 60


def _valley_loss(params, inputs):
    """A quadratic valley with condition number 1e4: 0.5 sum_i h_i (x_i - t_i)^2, whose
    minimiser (t) and minimum (0) are known in closed form."""
    r = params - inputs["target"]
    value = 0.5 * jnp.sum(inputs["curvature"] * r**2)
    return value, {"chi2": value}


def _valley():
    return jnp.zeros(6), {
        "target": jnp.linspace(-1.0, 1.0, 6),
        "curvature": jnp.logspace(0.0, 4.0, 6),
    }


@pytest.mark.usefixtures("x64")
def test_lbfgs_polish_reaches_the_minimum_of_an_ill_conditioned_valley_the_gradient_phase_circles():
    """Adam at a fixed step size hovers about the minimum of a valley of condition number 1e4;
    the L-BFGS steps after it find the closed-form minimiser."""
    gradient_only = _fit_config(optimizer="adam", learning_rate=0.05, steps=100)
    polished = _fit_config(optimizer="adam", learning_rate=0.05, steps=100, polish_steps=30)
    ends = {}
    for name, config in (("adam", gradient_only), ("polished", polished)):
        optimizer = optimiser.make_optimizer(config)
        params, inputs = _valley()
        state, history = optimiser.run(
            optimiser.make_step(_valley_loss, optimizer),
            optimiser.init_state(params, optimizer),
            inputs,
            config,
            progress=False,
        )
        assert history.loss.shape == (config.total_steps,)
        ends[name] = (np.asarray(state.params), history)
    target = np.linspace(-1.0, 1.0, 6)
    adam_error = np.max(np.abs(ends["adam"][0] - target))
    polish_error = np.max(np.abs(ends["polished"][0] - target))
    # Measured: adam alone 4.2e-3 from the minimiser; with the polish 2.9e-11.
    assert adam_error > 1e-3
    assert polish_error < 3e-9
    # The first 100 steps are the same adam steps either way (to 7e-14: two compiled
    # programs round alike only nearly).
    np.testing.assert_allclose(ends["polished"][1].loss[:100], ends["adam"][1].loss, rtol=1e-11)


@pytest.mark.usefixtures("x64")
def test_resume_across_the_switch_to_lbfgs_equals_an_uninterrupted_run(tmp_path):
    config = _fit_config(
        optimizer="adam", learning_rate=0.05, steps=6, second_phase_steps=2, polish_steps=6
    )
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(_valley_loss, optimizer)
    params, inputs = _valley()
    whole, whole_history = optimiser.run(
        step, optimiser.init_state(params, optimizer), inputs, config, progress=False
    )
    # Stop after 10 steps (two of them L-BFGS), checkpoint, and resume from the file.
    first = _fit_config(**{**config.__dict__, "polish_steps": 2})
    optimiser.run(
        step,
        optimiser.init_state(_valley()[0], optimizer),
        inputs,
        first,
        checkpoint_dir=tmp_path,
        progress=False,
    )
    template = optimiser.init_state(_valley()[0], optimizer)
    # Written in the polish, the checkpoint holds the polish's state alone: read with the
    # gradient phases' template and no optimiser, it is refused, not misread.
    with pytest.raises(ValueError, match="different model configuration"):
        checkpoint.load_checkpoint(tmp_path, template)
    loaded, history = checkpoint.load_checkpoint(tmp_path, template, optimizer)
    assert int(loaded.step) == 10 and int(loaded.opt_state.count) == 10
    assert loaded.opt_state.first is None and loaded.opt_state.polish is not None
    resumed, resumed_history = optimiser.run(
        step, loaded, inputs, config, history=history, progress=False
    )
    np.testing.assert_array_equal(resumed.params, whole.params)
    np.testing.assert_array_equal(resumed_history.loss, whole_history.loss)


def test_newton_polish_defaults_to_a_fortieth_of_the_first_phase_and_unknown_ones_are_refused():
    config = optimiser.FitConfig(polish="newton", steps=800)
    assert (config.steps, config.second_phase_steps, config.polish_steps) == (800, 400, 10)
    assert config.polish_cg_steps == 400
    assert optimiser.FitConfig(polish="newton", steps=3).polish_steps == 1  # rounded up
    assert optimiser.FitConfig(polish="newton", steps=200).polish_steps == 5
    assert optimiser.FitConfig(polish="newton", steps=400).polish_steps == 10  # at most 10
    with pytest.raises(ValueError, match="choose one of"):
        optimiser.FitConfig(polish="bfgs")


def test_levenberg_marquardt_is_the_default_after_200_gradient_steps_and_no_second_phase():
    config = optimiser.FitConfig()
    assert config.polish == "levenberg-marquardt" and config.polish_cg_steps == 50
    assert (config.steps, config.second_phase_steps, config.polish_steps) == (200, 0, 60)
    assert config.total_steps == 260 and not config.hold_gains
    assert optimiser.FitConfig(steps=10).second_phase_steps == 0
    assert optimiser.FitConfig(second_phase_steps=4).total_steps == 264


def test_trust_region_polish_takes_a_quarter_of_the_first_phase_at_most_100():
    config = optimiser.FitConfig(polish="trust-region", steps=800)
    assert config.polish_tolerance == 0.1 and config.polish_cg_steps == 400
    assert (config.steps, config.second_phase_steps, config.polish_steps) == (800, 400, 100)
    assert optimiser.FitConfig(polish="trust-region", steps=3).polish_steps == 1  # rounded up
    assert optimiser.FitConfig(polish="trust-region", steps=200).polish_steps == 50
    assert optimiser.FitConfig(polish="trust-region", steps=401).polish_steps == 100  # at most


@pytest.mark.usefixtures("x64")
def test_one_newton_step_reaches_the_minimum_of_an_ill_conditioned_valley():
    """On a quadratic of 6 parameters, conjugate gradients solve H d = -g (6 iterations in
    exact arithmetic; rounding, at condition number 1e4, leaves 5.4e-6 after 6, 1.6e-12 after
    8), so one Newton step from the start lands on the minimiser."""
    config = _fit_config(steps=0, polish="newton", polish_steps=1, polish_cg_steps=12)
    optimizer = optimiser.make_optimizer(config)
    params, inputs = _valley()
    state, _ = optimiser.run(
        optimiser.make_step(_valley_loss, optimizer),
        optimiser.init_state(params, optimizer),
        inputs,
        config,
        progress=False,
    )
    error = np.max(np.abs(np.asarray(state.params) - np.linspace(-1.0, 1.0, 6)))
    # Measured 1.1e-16 from the closed-form minimiser (float64).
    assert error < 1e-14
    assert float(state.opt_state.polish.step_size) == 1.0  # the full step, no backtracking
    assert not bool(state.opt_state.polish.negative_curvature)


def _quartic(x, _):
    """sum(x^4 - x^2): minimised at 1 / sqrt(2) in each coordinate, negative curvature
    within |x| < 1 / sqrt(6)."""
    value = jnp.sum(x**4 - x**2)
    return value, {"chi2": value}


def _saddle(x, _):
    """(x0^2 - x1^2) / 2: Hessian diag(1, -1)."""
    value = 0.5 * (x[0] ** 2 - x[1] ** 2)
    return value, {"chi2": value}


@pytest.mark.usefixtures("x64")
def test_newton_polish_leaves_negative_curvature_down_the_gradient_and_finds_the_minimum():
    """f = sum(x^4 - x^2) from x = 0.1, where the Hessian (12 x^2 - 2) is negative: the first
    conjugate-gradient iteration meets negative curvature, the step goes down the gradient,
    and the Newton steps after it converge on the minimiser 1 / sqrt(2) in each coordinate."""

    loss = _quartic
    config = _fit_config(steps=0, polish="newton", polish_steps=1, polish_cg_steps=4)
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(loss, optimizer)
    state = optimiser.init_state(jnp.array([0.1, 0.2]), optimizer)
    state, _, _ = step(state, None)
    assert bool(state.opt_state.polish.negative_curvature)
    assert int(state.opt_state.polish.cg_iterations) == 1  # of 4: none after the bend
    first = np.asarray(state.params)
    assert np.all(first > [0.1, 0.2])  # moved down the gradient, away from the maximum at 0
    for _ in range(7):
        state, _, _ = step(state, None)
    # Measured: 0.41, 0.12 (a backtracked step), then quadratic convergence from the third
    # step (2.9e-2, 1.6e-3, 5.7e-6, 6.9e-11) to 0 from 1/sqrt(2) at the seventh.
    np.testing.assert_allclose(np.asarray(state.params), 2**-0.5, atol=1e-14)
    np.testing.assert_allclose(float(loss(state.params, None)[0]), -0.5, atol=1e-14)


@pytest.mark.usefixtures("x64")
def test_newton_polish_keeps_the_conjugate_gradient_step_taken_before_negative_curvature():
    """f = (x0^2 - x1^2) / 2 from (1, 0.1): the first conjugate-gradient direction, -g with
    g = (1, -0.1), has curvature g.H.g = 0.99 > 0, the second -0.042 (by hand), so the solve
    stops after two of its eight iterations and keeps the first step, d = -(g.g / g.H.g) g =
    -(1.01 / 0.99) g; the loss falls from 0.495 to -0.020 along it, so the full step is taken."""

    loss = _saddle
    config = _fit_config(steps=0, polish="newton", polish_steps=1, polish_cg_steps=8)
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(loss, optimizer)
    start = np.array([1.0, 0.1])
    state, _, _ = step(optimiser.init_state(jnp.asarray(start), optimizer), None)
    newton = state.opt_state.polish
    assert int(newton.cg_iterations) == 2
    assert bool(newton.negative_curvature)
    assert float(newton.step_size) == 1.0
    g = np.array([1.0, -0.1])
    # Measured 0 (float64): the same two operations as the closed form.
    np.testing.assert_allclose(np.asarray(state.params), start - (1.01 / 0.99) * g, atol=1e-15)


def _trust_update(x, radius):
    """One ``newton_trust_region`` update of ``_saddle`` at ``x`` with trust radius
    ``radius``: the step and the new state."""
    polish = solvers.newton_trust_region(8)
    state = polish.init(x)._replace(radius=jnp.asarray(radius, jnp.float32))
    value_fn = lambda p: _saddle(p, None)[0]  # noqa: E731
    grad = jnp.array([x[0], -x[1]])
    return polish.update(grad, state, x, value=value_fn(x), grad=grad, value_fn=value_fn)


@pytest.mark.usefixtures("x64")
def test_trust_region_step_stops_at_the_radius_along_the_first_direction():
    """From (1, 0.1) with radius 0.5: the first conjugate-gradient iterate, -(1.01 / 0.99) g
    (length 1.025), lies outside, so the step is -g cut to length 0.5. On a quadratic the
    model is the loss (their ratio 1), so the full step is taken and, at the radius, the
    radius doubles."""
    x = jnp.array([1.0, 0.1])
    step, state = _trust_update(x, 0.5)
    g = np.array([1.0, -0.1])
    # Measured 0 (float64): the same operations as the closed form.
    np.testing.assert_allclose(np.asarray(step), -0.5 * g / np.linalg.norm(g), atol=1e-15)
    assert int(state.cg_iterations) == 1 and not bool(state.negative_curvature)
    assert float(state.step_size) == 1.0
    assert float(state.radius) == 1.0


@pytest.mark.usefixtures("x64")
def test_trust_region_step_follows_negative_curvature_to_the_radius():
    """From (1, 0.1) with radius 10: the first iterate d1 (inside) is kept and the second
    direction p1, of negative curvature, followed from it to ||d1 + tau p1|| = 10, where
    ``newton_cg`` would stop at d1. The reference is the two iterations by hand in numpy."""
    x = np.array([1.0, 0.1])
    hessian = np.diag([1.0, -1.0])
    g = hessian @ x
    p0 = -g
    alpha = (g @ g) / (p0 @ hessian @ p0)
    d1 = alpha * p0
    r1 = -g - alpha * hessian @ p0
    p1 = r1 + (r1 @ r1) / (g @ g) * p0
    assert p1 @ hessian @ p1 < 0  # the second direction bends down
    taus = np.roots([p1 @ p1, 2 * d1 @ p1, d1 @ d1 - 100.0])
    expected = d1 + taus.max() * p1
    step, state = _trust_update(jnp.asarray(x), 10.0)
    # Measured 1.8e-15 (float64).
    np.testing.assert_allclose(np.asarray(step), expected, atol=1e-12)
    assert np.linalg.norm(np.asarray(step)) == pytest.approx(10.0, rel=1e-12)
    assert int(state.cg_iterations) == 2 and bool(state.negative_curvature)
    assert float(state.step_size) == 1.0 and float(state.radius) == 20.0
    assert _saddle(x + np.asarray(step), None)[0] < -40  # from 0.495


@pytest.mark.usefixtures("x64")
def test_trust_region_polish_finds_the_minimum_of_a_nonconvex_loss():
    """f = sum(x^4 - x^2) from (0.1, 0.2), where the Hessian is negative: the first step
    (no radius yet) goes down the gradient as ``newton_cg``'s, sets the radius, and the steps
    after it converge on the minimiser 1 / sqrt(2) in each coordinate, the radius held where
    the model's predictions fall below the loss's rounding."""

    loss = _quartic
    config = _fit_config(steps=0, polish="trust-region", polish_steps=1, polish_cg_steps=4)
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(loss, optimizer)
    state = optimiser.init_state(jnp.array([0.1, 0.2]), optimizer)
    radii = []
    for _ in range(12):
        state, _, _ = step(state, None)
        radii.append(float(state.opt_state.polish.radius))
    print("radii", radii)
    # Measured: 0.417 at every step (the first step's length; no step reached it after).
    assert np.isfinite(radii[0])  # set by the first step
    assert min(radii) > 0.1
    np.testing.assert_allclose(np.asarray(state.params), 2**-0.5, atol=1e-14)
    np.testing.assert_allclose(float(loss(state.params, None)[0]), -0.5, atol=1e-14)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("polish", ["newton", "trust-region"])
def test_newton_polishes_stop_once_two_steps_lower_the_posterior_by_less_than_the_tolerance(
    polish,
):
    """f = x^4 / 4 from x = 1: a Newton step takes x to 2x / 3 (f' / f'' = x / 3; conjugate
    gradients solve the one-dimensional system exactly, the step inside the trust radius that
    the first, longer step set), so the loss step n starts from is (2/3)^(4n) / 4, and the
    polish stops at the first step after which two steps' outcomes are known to have lowered
    it by less than polish_tolerance nats together: found here from the closed form, with the
    loss in nats (n_points 1) and per point (n_points 1000, tolerance the same in nats)."""

    def polish_from_one(scale, **settings):
        """The polish alone on x^4 / (4 scale) from x = 1, with n_points = scale."""

        def loss(x, _):
            return 0.25 * x**4 / scale, {"chi2": x**2}

        config = _fit_config(steps=0, polish=polish, polish_cg_steps=4, **settings)
        optimizer = optimiser.make_optimizer(config)
        return optimiser.run(
            optimiser.make_step(loss, optimizer),
            optimiser.init_state(jnp.array(1.0), optimizer),
            None,
            config,
            progress=False,
            n_points=scale,
        )

    closed = 0.25 * (2 / 3) ** (4 * np.arange(200))
    first = next(n for n in range(3, 200) if closed[n - 3] - closed[n - 1] < 1e-6)
    for scale in (1.0, 1000.0):
        state, history = polish_from_one(scale, polish_steps=200, polish_tolerance=1e-6)
        assert len(history.loss) == int(state.step) == first < 200  # 11 steps
        np.testing.assert_allclose(history.loss * scale, closed[:first], rtol=1e-12)
    _, history = polish_from_one(1.0, polish_steps=30, polish_tolerance=0.0)
    assert len(history.loss) == 30


@pytest.mark.parametrize("polish", ["trust-region", "lbfgs"])
def test_each_phase_runs_its_own_program_holding_only_its_own_optimiser_state(polish):
    """The gradient phases' step carries AdaBelief's two moments and no polish state; the
    polish's carries its own state and not the moments, which are deleted as it begins. Sizes
    from XLA's buffer assignment of the two compiled programs, float32, n = 4096."""
    from tabascal.planning import memory

    n = 4096
    config = _fit_config(
        optimizer="adabelief", steps=3, polish=polish, polish_steps=2, polish_memory=5
    )
    optimizer = optimiser.make_optimizer(config)
    params, inputs = {"x": jnp.zeros(n), "y": jnp.ones(())}, {"target": jnp.arange(n * 1.0)}
    state = optimiser.init_state(params, optimizer)
    step, programs = optimiser.compile_step(
        optimiser.make_step(_toy_loss, optimizer), state, inputs
    )
    assert set(programs) == {"gradient", "polish"}
    arguments = {k: memory.stage_memory(p).arguments for k, p in programs.items()}
    vector = 4 * n  # one float32 copy of x (or of the target)
    # Measured: gradient 65564 bytes (x, two moments, the target and 28 of scalars); polish
    # 32784 with the trust region (x, the target, scalars), 229460 with L-BFGS (also its 2 x 5
    # past steps, and the last parameters and update).
    assert 4 * vector <= arguments["gradient"] < 4 * vector + 1024
    held = {"trust-region": 2, "lbfgs": 2 + 2 * 5 + 2}[polish]
    assert held * vector <= arguments["polish"] < held * vector + 1024

    for _ in range(3):
        state, _, _ = step(state, inputs)
    moments = jax.tree.leaves(state.opt_state.first)
    assert state.opt_state.polish is None and moments
    state, _, _ = step(state, inputs)  # the first polish step
    assert state.opt_state.first is None and state.opt_state.polish is not None
    assert all(leaf.is_deleted() for leaf in moments)


def test_a_checkpoint_holding_both_phases_states_is_refused_with_what_to_do(tmp_path):
    """Checkpoints written before the phases became two programs held AdaBelief's state and
    the polish's side by side; this version says so rather than that the model differs."""
    config = _fit_config(optimizer="adabelief", steps=2, polish="trust-region", polish_steps=1)
    optimizer = optimiser.make_optimizer(config)
    state = optimiser.init_state(_start()[0], optimizer)
    polish = phases.polish_form(state, optimizer).opt_state.polish
    both = state._replace(
        opt_state=state.opt_state._replace(polish=jax.tree.map(jnp.zeros_like, polish))
    )
    empty = checkpoint.FitHistory(np.zeros(0), np.zeros(0))
    checkpoint.save_checkpoint(tmp_path, both, empty)
    with pytest.raises(ValueError, match=r"both phases' optimiser states.*without --resume"):
        checkpoint.load_checkpoint(tmp_path, state, optimizer)


def _sky_state(n_groups: int, optimizer):
    from tabascal.model import joint, sky

    z = tuple(jnp.full((3 + g, 2, 5), 0.5 + g) for g in range(n_groups))
    params = joint.ModelParams(sky.SkyParams(z), jnp.arange(4.0), jnp.ones(2), None)
    return optimiser.init_state(params, optimizer)


def test_a_checkpoint_from_before_the_sky_groups_resumes_with_one_group(tmp_path):
    """Checkpoints written before the sky's groups named the sky's one array of modes
    "...sky.z" (``jax.tree_util.keystr`` of an array field) where one group's is "...sky.z[0]":
    with sky.groups 1 they are read as that group's; with more groups the refusal says so."""
    optimizer = optimiser.make_optimizer(_fit_config(optimizer="adabelief"))
    state = _sky_state(1, optimizer)
    state = state._replace(step=jnp.asarray(7, state.step.dtype))
    empty = checkpoint.FitHistory(np.zeros(0), np.zeros(0))
    path = checkpoint.save_checkpoint(tmp_path, state, empty)
    with np.load(path) as saved:
        arrays = dict(saved)
    names = [str(name) for name in arrays["leaf_names"]]
    old = [name.replace(".sky.z[0]", ".sky.z") for name in names]
    assert sum(name != new for name, new in zip(old, names, strict=True)) == 3  # params, mu, nu
    np.savez(path, **{**arrays, "leaf_names": np.array(old)})

    loaded, _ = checkpoint.load_checkpoint(tmp_path, _sky_state(1, optimizer))
    assert int(loaded.step) == 7
    for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"one array for every baseline.*sky.groups set to 1"):
        checkpoint.load_checkpoint(tmp_path, _sky_state(2, optimizer))


def _rosenbrock(x, _):
    """Rosenbrock's valley as least squares: residuals (x0 - 1, 10 (x1 - x0^2)), minimum 0 at
    (1, 1)."""
    residual = jnp.stack([x[0] - 1.0, 10.0 * (x[1] - x[0] ** 2)])
    value = 0.5 * jnp.sum(residual**2)
    return value, {"chi2": value}


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("polish", ["newton", "trust-region"])
def test_gauss_newton_polish_takes_the_products_it_is_given_and_reaches_the_minimum(polish):
    """With polish_curvature gauss-newton the conjugate gradients multiply by the curvature_fn
    make_step is given (here J' J v with the residuals' Jacobian written out), and Gauss-Newton
    steps from (-1.2, 1) reach Rosenbrock's minimum; without a curvature_fn the step is refused
    with what to pass."""
    traced = []

    def gauss_newton(x, v, _):
        traced.append(True)
        jacobian = jnp.array([[1.0, 0.0], [-20.0 * x[0], 10.0]])
        return jacobian.T @ (jacobian @ v)

    config = _fit_config(
        steps=0, polish=polish, polish_steps=1, polish_cg_steps=4, polish_curvature="gauss-newton"
    )
    optimizer = optimiser.make_optimizer(config)
    step = optimiser.make_step(_rosenbrock, optimizer, gauss_newton)
    state = optimiser.init_state(jnp.array([-1.2, 1.0]), optimizer)
    for _ in range(40):
        state, loss, _ = step(state, None)
        if float(loss) > 0:  # at the minimum the gradient, hence every direction, is zero
            assert not bool(state.opt_state.polish.negative_curvature)  # J' J never bends
    assert traced
    # Measured: (1, 1) to 0 (the last steps are Newton's on a zero residual).
    np.testing.assert_allclose(np.asarray(state.params), [1.0, 1.0], atol=1e-12)

    bare = optimiser.make_step(_rosenbrock, optimizer)
    with pytest.raises(ValueError, match=r"gauss-newton' needs the model's Gauss-Newton product"):
        bare(optimiser.init_state(jnp.array([-1.2, 1.0]), optimizer), None)


def test_unknown_polish_curvature_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"polish_curvature 'exact' is not known.*gauss-newton"):
        _fit_config(polish_curvature="exact")
