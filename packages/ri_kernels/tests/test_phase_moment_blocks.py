"""The blocked CPU evaluation of the phase moments against the one-chunk evaluation.

Above one chunk of elements, the moments are computed in cache-sized blocks split between
independent loops, with the moment index first, and the elements at or above the curvature
switch are gathered and evaluated again; a batch of at most one chunk takes both methods on
every element at once. The two must agree element for element, including the padding of the
last block and the elements patched afterwards.
"""

import numpy as np
import pytest

from ri_kernels._phase_moments import (
    _CHUNK,
    _CPU_BLOCK,
    cubic_moments_by_order,
    phase_moments,
    working_cubic,
)

N_MOMENTS = 5


def _cubics(size, seed=0):
    """Benchmark-like phases: fast linear winding, curvature on both sides of the switch,
    a small cubic, and a few elements with no winding at all."""
    rng = np.random.default_rng(seed)
    phi0 = rng.uniform(-np.pi, np.pi, size)
    a = rng.normal(0, 300, size)
    a[::97] = rng.uniform(-20, 20, a[::97].size)
    a[::389] = 0.0
    b = rng.normal(0, 0.4, size)
    c = rng.normal(0, 0.05, size)
    return phi0, a, b, c


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
def test_blocked_moments_equal_one_chunk_evaluation_float64():
    size = 3 * _CPU_BLOCK + 37  # an odd block count: the loops' padding is exercised
    cubics = _cubics(size)
    re, im = cubic_moments_by_order(working_cubic(*cubics), N_MOMENTS)
    assert re.shape == im.shape == (N_MOMENTS, size)
    blocked = np.asarray(re + 1j * im).T
    chunks = [
        np.asarray(phase_moments(*(v[i : i + _CHUNK] for v in cubics), N_MOMENTS))
        for i in range(0, size, _CHUNK)
    ]
    reference = np.concatenate(chunks)
    # Curved elements are present, so the patch runs.
    assert np.any(np.abs(cubics[2]) / 4 >= 0.01)
    np.testing.assert_allclose(blocked, reference, rtol=0, atol=1e-13)


@pytest.mark.slow
def test_blocked_moments_keep_the_input_dtype_and_shape_float32():
    cubics = tuple(v.astype(np.float32).reshape(3, -1) for v in _cubics(3 * _CPU_BLOCK))
    re, im = cubic_moments_by_order(working_cubic(*cubics), N_MOMENTS)
    assert re.dtype == im.dtype == np.float32
    assert re.shape == (N_MOMENTS, 3, _CPU_BLOCK)
    trailing = np.asarray(phase_moments(*cubics, N_MOMENTS))
    np.testing.assert_allclose(np.moveaxis(np.asarray(re + 1j * im), 0, -1), trailing, atol=1e-6)
