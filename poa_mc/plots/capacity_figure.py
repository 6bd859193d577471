"""capacity.png (`poa-mc capacity`): per topology, each policy's highest load meeting the SLO, with
the bracket its 95% intervals leave (poa_mc.run.capacity), one panel per topology on one scale."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from poa_mc.plots.style import _panels, _save


def capacity_figure(frame: pl.DataFrame):  # noqa: ANN201 - a matplotlib Figure
    topologies = frame["topology"].unique(maintain_order=True).to_list()
    fig, axes = _panels(len(topologies), sharex=True)
    axis = frame["load_axis"][0] if frame.height else "load"
    for ax, topo in zip(axes, topologies):
        d = frame.filter(pl.col("topology") == topo)
        names = d["policy"].to_list()
        y = list(range(len(names)))
        for i, row in enumerate(d.iter_rows(named=True)):
            cap = row["capacity"]
            if cap is None:
                ax.text(
                    0.02, i, "missed at the smallest load", va="center", fontsize=8, transform=ax.get_yaxis_transform()
                )
                continue
            colour = "tab:green" if row["status"] == "within" else "tab:orange"
            ax.barh(i, cap, color=colour, alpha=0.7, height=0.6)
            lo, hi = row["capacity_lo"], row["capacity_hi"]
            if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
                ax.errorbar(cap, i, xerr=[[max(cap - lo, 0.0)], [max(hi - cap, 0.0)]], fmt="none", ecolor="black",
                            capsize=3, linewidth=1)  # fmt: skip
            if row["status"] == "above":
                ax.text(cap, i, "  >", va="center", fontsize=9)
        ax.set_yticks(y, names, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(topo)
        ax.set_xlabel(
            "highest " + ("concurrency" if axis == "concurrency" else "arrival rate (req/s)") + " meeting the SLO"
        )
        ax.grid(True, axis="x", alpha=0.35)
    slo = frame["slo"][0] if frame.height else ""
    fig.suptitle(
        f"Capacity under the SLO: {slo}\nbars: the highest probed load that met it; whiskers: from the highest\n"
        "met beyond the 95% intervals to the lowest missed beyond them; orange '>': met at the largest load",
        fontsize=10,
    )
    return fig


def plot_capacity(frame: pl.DataFrame, path: Path) -> Path:
    return _save(capacity_figure(frame), path)
