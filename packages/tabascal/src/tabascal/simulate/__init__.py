"""Simulator of satellite-contaminated interferometric observations.

Point sources through an Airy beam, satellites on circular orbits whose RFI reaches each
station through the same beam with inverse-square attenuation, cell averaging by quadrature at
exact geometry, smooth antenna gains, radiometer noise and random flags, written to the
observation store. See ``docs/data.md`` for the physics and the presets.
"""

from tabascal.observation.beam import airy_voltage, first_null_rad
from tabascal.simulate.averaging import FineSampling, node_count, rfi_sampling, sky_sampling
from tabascal.simulate.presets import PRESETS, SCHEMA, simulation_config
from tabascal.simulate.satellites import ORBIT_KINDS, RfiEmission, SimulationError
from tabascal.simulate.scene import Scene, SkyModel, build_scene
from tabascal.simulate.simulation import SimulationPlan, plan, rfi_amplitudes, simulate

__all__ = [
    "ORBIT_KINDS",
    "PRESETS",
    "SCHEMA",
    "FineSampling",
    "RfiEmission",
    "Scene",
    "SimulationError",
    "SimulationPlan",
    "SkyModel",
    "airy_voltage",
    "build_scene",
    "first_null_rad",
    "node_count",
    "plan",
    "rfi_amplitudes",
    "rfi_sampling",
    "simulate",
    "simulation_config",
    "sky_sampling",
]
