"""The configuration of ``tabascal run``: its schema, defaults and conversion to model settings.

Every key, its unit and its default is listed in ``docs/config.md``; ``tabascal run
--list-keys`` prints the same from this schema. A config file need only name what it changes.
"""

from __future__ import annotations

import os

from tabascal.config import ConfigError, Option, Section, validate
from tabascal.fitting import optimiser
from tabascal.model import gains, joint, rfi_signal, rfi_vis, sky

SHARD_AXES = ("none", "source", "baseline")
SHARD_AXIS_ENV = "TABASCAL_SHARD_AXIS"

_SKY = Section(
    "Sky: a Fourier Gaussian process per baseline over (channel, time).",
    {
        "bandwidth_hz": Option(float, 2.0e5, "correlation bandwidth in frequency", "Hz", min=1.0),
        "knee_factor": Option(
            float, 1.0, "time knee, a multiple of the baseline's largest sky fringe rate", min=0.01
        ),
        "rolloff": Option(float, 0.25, "roll-off beyond the knee, fraction of the knee", min=0.01),
        "cutoff": Option(float, 1e-3, "relative power below which modes are dropped", min=1e-12,
                         max=0.5),
        "sigma": Option(
            float, None, "prior std per cell; null estimates it from the data", "Jy",
            min=0.0, nullable=True,
        ),
        "fov_radius_deg": Option(
            float, None, "radius of the field whose fringes the sky follows; null = the "
            "station beam's first null at the lowest channel", "deg", min=0.0, max=90.0,
            nullable=True,
        ),
    },
)  # fmt: skip

_RFI = Section(
    "RFI: per (satellite, antenna) signal and the visibility operators.",
    {
        "corr_time_s": Option(float, 100.0, "correlation time of the signal", "s", min=1e-3),
        "time_scale": Option(
            str, "geometric", "fixed: corr_time_s for every satellite; geometric: each satellite's "
            "own, the time it takes to cross a sidelobe of the station beam over 2 pi, at most "
            "corr_time_s", choices=rfi_signal.TIME_SCALES,
        ),
        "bandwidth_hz": Option(float, 1.0e6, "correlation bandwidth of the signal", "Hz", min=1.0),
        "sigma": Option(
            float, None, "prior std of the signal per cell; null estimates it from the data",
            "Jy^0.5", min=0.0, nullable=True,
        ),
        "quadrature_limit": Option(
            int, 32, "groups needing at most this many time samples per integration use "
            "quadrature, the rest the analytic operator (0 = all analytic)", min=0, max=4096,
        ),
        "tolerance": Option(
            float, 0.1, "largest averaging error allowed, as a fraction of the noise", min=1e-6
        ),
        "max_samples": Option(int, 256, "most fine samples per cell", min=1, max=4096),
        "sampling": Option(
            str, "gauss", "fine samples across a cell: Gauss-Legendre nodes, or the midpoint "
            "rule (powers of two)", choices=rfi_vis.SAMPLINGS,
        ),
        "max_groups": Option(int, 4, "most baseline groups (compiled operator calls)", min=1),
        "time_stencil": Option(int, 3, "Lagrange points per time stencil", min=1, max=9),
        "freq_stencil": Option(int, 1, "Lagrange points per frequency stencil", min=1, max=9),
        "segments": Option(int, 2, "analytic operator: pieces per integration", min=1, max=1024),
        "terms": Option(int, 6, "analytic operator: curvature expansion terms", min=1, max=32),
        "cubic_terms": Option(int, 3, "analytic operator: cubic-phase terms", min=0, max=8),
        "memory_budget_mb": Option(
            float, 256.0, "fine-grid working memory of each RFI operator call; on the baseline "
            "axis each device takes this divided by the number of devices", "MiB", min=1e-3,
        ),
    },
)  # fmt: skip

_GAINS = Section(
    "Antenna gains.",
    {
        "kind": Option(str, "gp", "unitary (fixed at 1) or gp (Gaussian process in time)",
                       choices=gains.KINDS),
        "corr_time_s": Option(float, 1800.0, "correlation time of the gains", "s", min=1e-3),
        "amp_sigma": Option(float, 0.05, "prior std of the log amplitude", min=1e-9),
        "phase_sigma": Option(float, 0.2, "prior std of the phase", "rad", min=1e-9),
        "ref_ant": Option(int, 0, "reference antenna, whose phase is fixed at 0", min=0),
    },
)  # fmt: skip

SCHEMA = Section(
    "tabascal run configuration",
    {
        "precision": Option(str, "single", "float precision of the model",
                            choices=tuple(joint.PRECISIONS)),
        "sky": _SKY,
        "rfi": _RFI,
        "gains": _GAINS,
        "fit": Section(
            "The optimisation.",
            {
                "optimizer": Option(
                    str, "adabelief", "optax optimiser", choices=optimiser.OPTIMIZERS
                ),
                "learning_rate": Option(float, 0.1, "step size of the first phase", min=0.0),
                "steps": Option(int, 400, "steps in the first phase", min=0),
                "second_phase_steps": Option(
                    int, 0, "further steps at a tenth of the step size", min=0
                ),
                "checkpoint_every": Option(
                    int, 100, "checkpoint every this many steps (0 = never)", min=0
                ),
                "stop_tolerance": Option(
                    float, 0.0, "stop before the steps run out once the loss falls by less "
                    "than this fraction of itself over stop_window steps (0 = never)", min=0.0,
                ),
                "stop_window": Option(int, 50, "steps over which stop_tolerance is measured",
                                      min=1),
                "init": Option(str, "data", "initial parameters: data-based estimates, a draw "
                               "from the prior, the store's truth, or data-based estimates with "
                               "each satellite's RFI from the fringe-stopped data",
                               choices=joint.INITS),
                "seed": Option(int, 0, "seed of the prior draw (init: prior)", min=0),
            },
        ),
        "satellites": Section(
            "Satellite orbits, when they are not (or not only) in the observation.",
            {
                "tle_file": Option(
                    str, None, "TLE file whose orbits replace the observation's", nullable=True
                ),
                "min_elevation_deg": Option(
                    float, 0.0, "a satellite contributes no RFI where it is at or below this "
                    "elevation at the array centre", "deg", min=-90.0, max=90.0,
                ),
                "catalogue_numbers": Option(
                    list, None, "NORAD catalogue numbers to take from tle_file; null takes "
                    "every satellite in it", items=int, nullable=True,
                ),
            },
        ),
        "output": Section(
            "What is written besides results.zarr and summary.json.",
            {
                "plots": Option(bool, True, "write PNG plots"),
                "plot_baselines": Option(int, 3, "baselines shown in the visibility plot", min=1),
            },
        ),
        "sharding": Section(
            "Splitting the work across devices.",
            {
                "axis": Option(
                    str, None, f"none, source or baseline; null takes ${SHARD_AXIS_ENV} "
                    "(default none)", choices=SHARD_AXES, nullable=True,
                ),
                "reuse_plan": Option(
                    bool, False, "baseline axis only: permute the baselines by the "
                    "antenna-reuse plan, so that each device touches few antennas",
                ),
            },
        ),
    },
)  # fmt: skip


def load(data: dict | None) -> dict:
    """Validated configuration with every default filled in."""
    return validate(SCHEMA, data)


def model_config(config: dict) -> joint.ModelConfig:
    """The model settings of a validated configuration."""
    s, r, g = config["sky"], config["rfi"], config["gains"]
    return joint.ModelConfig(
        sky=sky.SkyConfig(
            bandwidth_hz=s["bandwidth_hz"], knee_factor=s["knee_factor"],
            rolloff=s["rolloff"], cutoff=s["cutoff"],
        ),
        rfi_signal=rfi_signal.RfiSignalConfig(
            corr_time_s=r["corr_time_s"], bandwidth_hz=r["bandwidth_hz"],
            time_scale=r["time_scale"],
        ),
        rfi_vis=rfi_vis.RfiVisConfig(
            quadrature_limit=r["quadrature_limit"], tolerance=r["tolerance"],
            max_samples=r["max_samples"], time_stencil=r["time_stencil"],
            freq_stencil=r["freq_stencil"], segments=r["segments"], terms=r["terms"],
            cubic_terms=r["cubic_terms"], max_groups=r["max_groups"],
            memory_budget_mb=r["memory_budget_mb"], sampling=r["sampling"],
        ),
        gains=gains.GainsConfig(
            kind=g["kind"], corr_time_s=g["corr_time_s"], amp_sigma=g["amp_sigma"],
            phase_sigma=g["phase_sigma"], ref_ant=g["ref_ant"],
        ),
        sky_sigma=s["sigma"],
        rfi_sigma=r["sigma"],
        fov_radius_deg=s["fov_radius_deg"],
        min_elevation_deg=config["satellites"]["min_elevation_deg"],
        precision=config["precision"],
    )  # fmt: skip


def fit_config(config: dict) -> optimiser.FitConfig:
    f = config["fit"]
    return optimiser.FitConfig(
        optimizer=f["optimizer"],
        learning_rate=f["learning_rate"],
        steps=f["steps"],
        second_phase_steps=f["second_phase_steps"],
        checkpoint_every=f["checkpoint_every"],
        stop_tolerance=f["stop_tolerance"],
        stop_window=f["stop_window"],
    )


def shard_axis(cli_value: str | None, config: dict) -> str:
    """The shard axis: the command line wins, then the config, then $TABASCAL_SHARD_AXIS."""
    for value, source in (
        (cli_value, "--shard-axis"),
        (config["sharding"]["axis"], "config key 'sharding.axis'"),
        (os.environ.get(SHARD_AXIS_ENV), f"${SHARD_AXIS_ENV}"),
    ):
        if value is None or value == "":
            continue
        if value not in SHARD_AXES:
            raise ConfigError(f"{source} = {value!r}; choose one of {', '.join(SHARD_AXES)}")
        return value
    return "none"


def reuse_plan(cli_value: bool | None, config: dict, axis: str) -> bool:
    """Whether to use the antenna-reuse plan: the command line wins, then the config. Only the
    baseline axis has one; asking for it on another axis is an error."""
    source, value = "--reuse-plan", cli_value
    if value is None:
        source, value = "config key 'sharding.reuse_plan'", config["sharding"]["reuse_plan"]
    if value and axis != "baseline":
        raise ConfigError(
            f"{source} asks for the antenna-reuse plan, but the shard axis is {axis!r}; the "
            "plan permutes baselines, so it needs the baseline axis (--shard-axis baseline)"
        )
    return bool(value)
