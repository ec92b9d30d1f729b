"""RFI-visibility operators for radio interferometers, in pure JAX.

Two operators turn per-antenna RFI signals on the data's (channel, time) grid into baseline
visibilities averaged over each channel and integration: by quadrature over fine samples
(:func:`quadrature_eval_with_indices`, its tables a :class:`QuadratureTables`) or in closed
form over time (:func:`analytic_eval_with_indices`, its tables an :class:`AnalyticTables`),
whose phase moments, fixed when the phases and delays are, can be formed once
(:func:`analytic_moments_with_indices`) and reused at every call. Baseline lists are validated
once on the host by :func:`make_indices` (several per-device lists at once, sized to what they
touch, by :func:`make_index_sets`); the table builders make the interpolation tables.
``MAX_SEGMENTS``, ``MAX_TERMS``, ``MAX_CUBIC_TERMS`` and ``MAX_CHANNEL_TERMS`` bound the
analytic operator's options, ``MAX_COEFFICIENTS`` its monomial coefficients per time stencil;
:func:`fewest_cubic_terms` and :func:`fewest_channel_terms` the fewest cubic terms and terms
across a channel that phases of a given bound need, and
:func:`curvature_switch` the curvature above which a piece takes the costlier curved method.
"""

from ri_kernels._analytic import analytic_eval_with_indices
from ri_kernels._analytic_moments import analytic_moments_with_indices
from ri_kernels._blocks import DEFAULT_MEMORY_BUDGET_BYTES
from ri_kernels._indices import BaselineIndices, make_index_sets, make_indices, stack_indices
from ri_kernels._phase_moments import (
    MAX_CHANNEL_TERMS,
    MAX_CUBIC_TERMS,
    MAX_SEGMENTS,
    MAX_TERMS,
    channel_series_error,
    cubic_series_error,
    curvature_switch,
    fewest_channel_terms,
    fewest_cubic_terms,
)
from ri_kernels._quadrature import quadrature_eval_with_indices
from ri_kernels._tables import (
    MAX_COEFFICIENTS,
    AnalyticTables,
    QuadratureTables,
    fine_offsets,
    gauss_legendre_offsets,
    in_view_stencils,
    lagrange_stencils,
    monomial_stencils,
    stencil_starts,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MEMORY_BUDGET_BYTES",
    "MAX_CHANNEL_TERMS",
    "MAX_COEFFICIENTS",
    "MAX_CUBIC_TERMS",
    "MAX_SEGMENTS",
    "MAX_TERMS",
    "AnalyticTables",
    "BaselineIndices",
    "QuadratureTables",
    "__version__",
    "analytic_eval_with_indices",
    "analytic_moments_with_indices",
    "channel_series_error",
    "cubic_series_error",
    "curvature_switch",
    "fewest_channel_terms",
    "fewest_cubic_terms",
    "fine_offsets",
    "gauss_legendre_offsets",
    "in_view_stencils",
    "lagrange_stencils",
    "make_index_sets",
    "make_indices",
    "monomial_stencils",
    "quadrature_eval_with_indices",
    "stack_indices",
    "stencil_starts",
]
