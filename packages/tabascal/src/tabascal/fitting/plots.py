"""PNG plots of a fit: the loss curve, data, model and residual of a few baselines, and each
satellite's fitted RFI amplitude with its elevation.

Uses matplotlib's non-interactive Agg canvas directly, so plotting works on machines without a
display and never touches pyplot's global state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plot_loss(loss: np.ndarray, chi2: np.ndarray, path: Path) -> Path:
    """Loss and reduced chi-squared against step, both (steps,), on log axes."""
    figure = _figure(8, 3.2)
    left, right = figure.subplots(1, 2)
    steps = np.arange(1, len(loss) + 1)
    left.plot(steps, loss - min(loss.min(), 0.0) + 1e-12)
    left.set(xlabel="step", ylabel="loss (shifted to be positive)", yscale="log", title="Loss")
    right.plot(steps, chi2)
    right.axhline(1.0, color="grey", lw=0.8, ls="--")
    right.set(xlabel="step", ylabel="reduced chi-squared", yscale="log", title="Fit quality")
    figure.savefig(path, dpi=100)
    return Path(path)


def plot_baselines(
    times_s: np.ndarray,
    data: np.ndarray,
    model: np.ndarray,
    residual: np.ndarray,
    labels: list[str],
    path: Path,
) -> Path:
    """|data|, |model| and |residual| against time for a few baselines at one channel.

    Args:
      times_s: (n_time,) seconds from the start of the observation.
      data, model, residual: (n_show, n_time) complex visibilities (data units, e.g. Jy).
      labels: one title per row, e.g. ``"baseline 3-7, 150.0 MHz"``.
    """
    n_show = len(labels)
    figure = _figure(8, 2.2 * n_show)
    axes = np.atleast_1d(figure.subplots(n_show, 1, sharex=True))
    for ax, d, m, r, label in zip(axes, data, model, residual, labels, strict=True):
        ax.plot(times_s, np.abs(d), ".", ms=3, label="|data|")
        ax.plot(times_s, np.abs(m), "-", lw=1.2, label="|model|")
        ax.plot(times_s, np.abs(r), "-", lw=0.8, label="|data - model|")
        ax.set(ylabel="amplitude", title=label)
    axes[0].legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("time (s)")
    figure.savefig(path, dpi=100)
    return Path(path)


#: Most panels of ``plot_satellites``: the brightest satellites when there are more.
MOST_SATELLITES = 16


def plot_satellites(
    times_s: np.ndarray,
    signal_rms: np.ndarray,
    elevation_deg: np.ndarray,
    labels: list[str],
    path: Path,
    most: int = MOST_SATELLITES,
) -> Path:
    """Each satellite's fitted RFI amplitude against time, its elevation on a twin axis.

    One panel per satellite, in the store's order; of more than ``most`` satellites, the
    ``most`` brightest (largest peak of ``signal_rms``), the figure's title saying so.

    Args:
      times_s: (n_time,) seconds from the start of the observation.
      signal_rms: (n_sat, n_time) rms over antennas and channels of the fitted |amp| (Jy^0.5).
      elevation_deg: (n_sat, n_time) elevation at the array centre (deg).
      labels: (n_sat,) the satellites' names.
    """
    n_sat = len(labels)
    brightest = np.argsort(-np.max(signal_rms, axis=1), kind="stable")[:most]
    shown = np.sort(brightest)
    figure = _figure(8, 2.2 * len(shown))
    axes = np.atleast_1d(figure.subplots(len(shown), 1, sharex=True))
    for ax, s in zip(axes, shown, strict=True):
        amp = ax.plot(times_s, signal_rms[s], "-", lw=1.2, label="fitted |amp|, rms")
        ax.set(ylabel="Jy$^{1/2}$", title=f"{labels[s]} (satellite {s})")
        twin = ax.twinx()
        el = twin.plot(times_s, elevation_deg[s], "--", lw=0.8, color="C1", label="elevation")
        twin.set_ylabel("elevation (deg)")
    axes[0].legend(handles=[*amp, *el], loc="upper right", fontsize="small")
    axes[-1].set_xlabel("time (s)")
    if len(shown) < n_sat:
        figure.suptitle(f"the {len(shown)} brightest of {n_sat} satellites")
    figure.savefig(path, dpi=100)
    return Path(path)
