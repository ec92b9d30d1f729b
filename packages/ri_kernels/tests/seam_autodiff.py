"""The scene and one compiled (value, JVP, VJP) function per seam, shared by the derivative
and seam tests.

The index set is a traced argument, so every baseline list of the same length on this scene
reuses one compiled function, as the seams do inside ``shard_map``.
"""

import functools

import jax
import numpy as np
from ri_reference import analytic_args, make_scene, quadrature_args

from ri_kernels import analytic_eval_with_indices, quadrature_eval_with_indices

N_ANT = 7
A1, A2 = np.triu_indices(N_ANT)  # 28 baselines, autocorrelations included
SCENE = make_scene(51, n_ant=N_ANT, n_freq=2, n_time=3, n_int_t=3, rate_us_s=0.02)
ARGS = {"quadrature": quadrature_args, "analytic": analytic_args}

SEAMS = {"quadrature": quadrature_eval_with_indices, "analytic": analytic_eval_with_indices}
# The seams' arguments after indices, (amp, phase, delay_us, tables, freq_mhz), as ten leaves:
# amp, phase, delay_us, the six tables' fields and freq_mhz. Those given tangents: the
# quadrature's amp, phase, delay_us, w_freq, w_time, dnu_mhz, dt, freq_mhz; the analytic's
# amp, phase, delay_us, w_freq, g_time, dnu_mhz, int_time, freq_mhz. The rest are the integer
# stencil starts.
POSITIONS = (0, 1, 2, 3, 5, 7, 8, 9)


def leaves(name, scene=SCENE, real=np.float64):
    """The ten leaves of a seam's arguments after ``indices``, numpy arrays."""
    return [np.asarray(x) for x in jax.tree.leaves(ARGS[name](scene, real))]


@functools.partial(jax.jit, static_argnums=0)
def value_jvp_vjp(name, indices, args, tangents, cotangent):
    """Value, JVP along ``tangents`` and VJP of ``cotangent`` of one seam.

    args: the ten leaves of the seam's arguments after ``indices`` (:func:`leaves`); tangents:
    one per entry of POSITIONS; cotangent: like the visibilities. Returns (vis, jvp, vjp) with
    vjp one cotangent per entry of POSITIONS.
    """
    structure = jax.tree.structure(ARGS[name](SCENE))

    def vis_of(*values):
        full = list(args)
        for position, value in zip(POSITIONS, values, strict=True):
            full[position] = value
        return SEAMS[name](indices, *jax.tree.unflatten(structure, full))

    primals = [args[p] for p in POSITIONS]
    vis, jvp_of = jax.linearize(vis_of, *primals)
    return vis, jvp_of(*tangents), jax.linear_transpose(jvp_of, *primals)(cotangent)
