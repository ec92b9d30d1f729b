"""PNG plots of a fit: the loss curve and data, model and residual of a few baselines.

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
