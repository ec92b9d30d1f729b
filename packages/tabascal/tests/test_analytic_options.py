"""The analytic groups' cubic terms fitted to their own phases (rfi.analytic_options): the
cubic's bound against every pair's, and the visibilities against the configured terms'."""

import itertools

import numpy as np
import pytest

from tabascal.config import run_config
from tabascal.model import joint, rfi_signal, rfi_vis
from tabascal.store import read_observation


def test_cubic_bound_is_the_largest_pair_difference():
    rng = np.random.default_rng(4)
    delay = rng.normal(size=(6, 3, 10, 4)) * np.array([30.0, 2e-3, 3e-5, 4e-7])
    antennas = np.array([0, 2, 3, 5])
    freqs, chan_width, int_time = np.array([1.2e9, 1.3e9]), 1e5, 4.0
    c = rfi_vis.cubic_phase_bound(delay, antennas, freqs, chan_width, int_time)
    # Every pair of the antennas, one at a time: c = (pi/3) nu d3 (T/2)**3 at the band's top,
    # nu = 1300.05 MHz.
    pairs = itertools.combinations(antennas, 2)
    d3 = max(np.abs(delay[p, ..., 3] - delay[q, ..., 3]).max() for p, q in pairs)
    np.testing.assert_allclose(c, np.pi / 3 * 1300.05 * 2.0**3 * d3, rtol=1e-13)
    assert rfi_vis.cubic_phase_bound(delay[..., :3], antennas, freqs, chan_width, int_time) == 0


def _rfi_vis(obs, precision, **rfi):
    """The model's RFI visibilities from its data-started signal, every baseline analytic."""
    config = run_config.load({"precision": precision, "rfi": {"quadrature_limit": 0, **rfi}})
    model = joint.build(obs, run_config.model_config(config), init="data", seed=0)
    c, spec = model.constants, model.spec
    amp = rfi_signal.forward(model.params.rfi, c.rfi_signal)
    vis = rfi_vis.forward(
        amp, c.phase, c.delay_us, c.freq_mhz, c.groups, spec.groups, spec.n_bl, spec.rfi_vis
    )
    (options,) = model.info["rfi_analytic_options"].values()
    return np.asarray(vis), options["cubic_terms"]


# (store, tolerance, the cubic terms "auto" takes, largest difference from the configured
# three terms' visibilities measured, in noise): navigation satellites, which need none; a
# rising LEO, whose cubic takes one term at the default tolerance and none at ten times it.
CASES = [
    ("small_store", 0.1, 0, 3.6e-8),
    ("rising_store", 0.1, 1, 1.6e-10),
    ("rising_store", 1.0, 0, 4.3e-3),
]


@pytest.mark.usefixtures("x64")  # precision "double": the truncation apart from float32's rounding
@pytest.mark.parametrize("store, tolerance, chosen, measured", CASES)
def test_fitted_options_predict_within_their_share_of_the_tolerance(
    request, store, tolerance, chosen, measured
):
    obs = read_observation(request.getfixturevalue(store))
    auto, options = _rfi_vis(obs, "double", tolerance=tolerance)
    fixed, configured = _rfi_vis(obs, "double", tolerance=tolerance, analytic_options="fixed")
    assert options == chosen and configured == 3
    apart = np.abs(auto - fixed).max() / np.min(obs.noise)
    print(f"{store} tolerance {tolerance}: {options}, {apart:.2e} of the noise apart")
    # Within the operator's share of the tolerance, which the choice promises, and near the
    # measured figure.
    assert apart <= rfi_vis.OPERATOR_ERROR_SHARE * tolerance
    assert apart <= 100 * measured
