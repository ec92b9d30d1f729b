"""rfi_vis.plan_phase_cache: which analytic groups keep their phase moments, from their sizes
and rfi.phase_cache; moments_bytes against the arrays ri_kernels returns."""

import numpy as np
import pytest

from tabascal.model import rfi_vis
from tabascal.model.rfi_vis import GroupSpec, RfiVisConfig

QUAD, ANALYTIC = GroupSpec("quadrature", 4, 2), GroupSpec("analytic", 1, 3)
MIB = 2**20
C, CENTRES = rfi_vis.KEPT_AT_CHANNELS, rfi_vis.KEPT_AT_CENTRES


@pytest.mark.parametrize(
    ("mode", "budget_mib", "sizes_mib", "want"),
    [
        ("auto", 10, [0, 4, 5], (False, C, C)),  # 9 MiB fit in 10
        ("auto", 8, [0, 4, 5], (False, C, False)),  # the second would pass the budget
        ("auto", 3, [0, 4, 2], (False, False, C)),  # a later, smaller group still fits
        ("always", 0, [0, 4, 5], (False, C, C)),  # every analytic group, past any budget
        ("never", 1e6, [0, 4, 5], (False, False, False)),
    ],
)
def test_the_plan_keeps_analytic_groups_in_order_within_the_budget(
    mode, budget_mib, sizes_mib, want
):
    config = RfiVisConfig(phase_cache=mode, phase_cache_mb=budget_mib)
    specs = (QUAD, ANALYTIC, ANALYTIC)
    sizes = [s * MIB for s in sizes_mib]
    budget = rfi_vis.phase_cache_budget_bytes(config, device_bytes=2**40)
    assert budget == (budget_mib * MIB, "phase_cache_mb")  # set: the device's memory unused
    keep = rfi_vis.plan_phase_cache(sizes, specs, config, budget[0])
    assert keep == want
    report = rfi_vis.phase_cache_report(sizes[:2], specs[:2], keep[:2], config, budget)
    assert report["mode"] == mode and set(report["groups"]) == {"analytic t1 f3"}
    assert report["kept_mib_per_device"] == (4 if keep[1] else 0)
    assert report["budget_mib"] == budget_mib and report["budget_from"] == "phase_cache_mb"


def test_without_phase_cache_mb_the_budget_is_a_fraction_of_the_device_memory():
    config = RfiVisConfig()
    assert config.phase_cache_mb is None and config.phase_cache_fraction == 0.5
    budget, source = rfi_vis.phase_cache_budget_bytes(config, device_bytes=6 * 2**30)
    assert budget == 3 * 2**30 and source == "phase_cache_fraction 0.5 of 6.0 GiB"
    quarter = RfiVisConfig(phase_cache_fraction=0.25)
    assert rfi_vis.phase_cache_budget_bytes(quarter, 6 * 2**30)[0] == 1.5 * 2**30
    # 2.5 GiB of moments: kept within half of 6 GiB, formed at every step within a quarter
    sizes, specs = [2.5 * 2**30], (ANALYTIC,)
    assert rfi_vis.plan_phase_cache(sizes, specs, config, budget) == (C,)
    assert rfi_vis.plan_phase_cache(sizes, specs, quarter, 1.5 * 2**30) == (False,)
    # where the device's memory is unknown, 1 GiB
    assert rfi_vis.phase_cache_budget_bytes(config, None) == (
        2**30,
        "the device's memory unknown: 1 GiB",
    )


def test_moments_bytes_are_the_bytes_of_the_moments_ri_kernels_forms():
    n_ant, n_src, n_freq, n_time = 4, 2, 3, 5
    config = RfiVisConfig(time_stencil=3)
    a1, a2 = np.triu_indices(n_ant, 1)
    tables = rfi_vis.make_group_tables(
        ANALYTIC, np.arange(a1.size), a1, a2, n_ant, n_freq, n_time, 1e5, 2.0, config, np.float32
    )
    rng = np.random.default_rng(0)
    phase = rng.uniform(0, 6, (n_ant, n_src, n_freq, n_time)).astype(np.float32)
    delay = (rng.normal(size=(n_ant, n_src, n_time, 4)) * 1e-3).astype(np.float32)
    freq = np.linspace(1000, 1001, n_freq).astype(np.float32)
    moments = rfi_vis.group_moments(ANALYTIC, tables, phase, delay, freq, config)
    assert moments.dtype == np.complex64
    assert moments.shape == (5, a1.size, n_freq, n_time, n_src, ANALYTIC.n_freq_samples)
    size = rfi_vis.moments_bytes(ANALYTIC, a1.size, (n_src, n_freq, n_time), config, np.complex64)
    assert size == moments.nbytes
    assert rfi_vis.moments_bytes(QUAD, a1.size, (n_src, n_freq, n_time), config, np.complex64) == 0
    # and the size ri_kernels documents: 8 (2 n_coef - 1) bytes per pair, cell, source and
    # fine channel in complex64
    n_cells = a1.size * n_freq * n_time * n_src * ANALYTIC.n_freq_samples
    assert size == 8 * (2 * 3 - 1) * n_cells


def test_a_group_with_channel_terms_keeps_its_moments_at_the_channels_centres():
    """A group with channel terms keeps its moments at its channels' centres (the series it
    forms them with where they are not kept), within the budget by their own bytes, and says
    so; their bytes are those of the array ri_kernels returns."""
    n_ant, n_src, n_freq, n_time = 4, 2, 3, 5
    config = RfiVisConfig(time_stencil=3, phase_cache_mb=3.0)
    spec = GroupSpec("analytic", 1, 7, channel_terms=2)
    a1, a2 = np.triu_indices(n_ant, 1)
    tables = rfi_vis.make_group_tables(
        spec, np.arange(a1.size), a1, a2, n_ant, n_freq, n_time, 1e5, 2.0, config, np.float32
    )
    rng = np.random.default_rng(0)
    phase = rng.uniform(0, 6, (n_ant, n_src, n_freq, n_time)).astype(np.float32)
    delay = (rng.normal(size=(n_ant, n_src, n_time, 4)) * 1e-3).astype(np.float32)
    freq = np.linspace(1000, 1001, n_freq).astype(np.float32)
    moments = rfi_vis.group_moments(spec, tables, phase, delay, freq, config)
    # 2 n_coef - 1 + J + 2 moments at one point per channel
    assert moments.shape == (9, a1.size, n_freq, n_time, n_src, 1)
    model_shape = (n_src, n_freq, n_time)
    at_centres = rfi_vis.moments_bytes(spec, a1.size, model_shape, config, np.complex64, True)
    assert at_centres == moments.nbytes
    assert rfi_vis.moments_bytes(ANALYTIC, a1.size, model_shape, config, np.complex64, True) == 0
    # per channel 5 MiB, at the centres 1 MiB: within 3 MiB the centres fit, and the group
    # without channel terms does not
    sizes, centres = [0, 5 * MIB, 5 * MIB], [0, 1 * MIB, 0]
    specs = (QUAD, spec, ANALYTIC)
    keep = rfi_vis.plan_phase_cache(sizes, specs, config, 3 * MIB, centres)
    assert keep == (False, CENTRES, False)
    # at the centres even where every fine channel's would fit; past the budget, formed
    assert rfi_vis.plan_phase_cache([0, 2 * MIB], specs[:2], config, 3 * MIB, centres[:2]) == (
        False,
        CENTRES,
    )
    assert rfi_vis.plan_phase_cache(sizes, specs, config, 0.5 * MIB, centres) == (False,) * 3
    budget = (3 * MIB, "phase_cache_mb")
    report = rfi_vis.phase_cache_report(sizes[:2], specs[:2], keep[:2], config, budget, centres[:2])
    group = report["groups"][spec.name]
    assert group == {"kept": True, "mib_per_device": 5, "at": CENTRES, "kept_mib_per_device": 1}
    assert report["kept_mib_per_device"] == 1
