"""calibration.png (`poa-mc calibrate`): per figure, the measured values against the load, the
calibrated simulation's, and each point's held-out prediction (fitted without that point)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from poa_mc.plots.style import _panels, _save

_UNITS = {"throughput": "req/s"}


def calibration_figure(rows: pl.DataFrame):  # noqa: ANN201 - a matplotlib Figure
    figures = rows["figure"].unique(maintain_order=True).to_list()
    fig, axes = _panels(len(figures), sharex=False)
    axis = rows["load_axis"][0] if rows.height else "load"
    for ax, name in zip(axes, figures):
        d = rows.filter(pl.col("figure") == name).sort("load")
        load = d["load"].to_list()
        ax.plot(load, d["measured"].to_list(), "ko", label="measured")
        ax.plot(load, d["simulated"].to_list(), "-", color="tab:blue", label="simulated, calibrated")
        if d["held_out_error"].null_count() == 0:
            held = [m * (1 + e) for m, e in zip(d["measured"].to_list(), d["held_out_error"].to_list())]
            ax.plot(load, held, "s", mfc="none", color="tab:orange", label="held out (fitted without it)")
        ax.set_title(name)
        ax.set_xlabel("concurrency" if axis == "concurrency" else "request rate (req/s)")
        ax.set_ylabel(_UNITS.get(name, "ms"))
        ax.grid(True, alpha=0.35)
    axes[0].legend(fontsize=8)
    fig.suptitle("Calibration: measured against simulated", fontsize=11)
    return fig


def plot_calibration(rows: pl.DataFrame, path: Path) -> Path:
    return _save(calibration_figure(rows), path)
