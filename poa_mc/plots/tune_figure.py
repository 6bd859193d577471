"""tune.png (`poa-mc tune`): per load point, the candidates over the search space's first two
settings (or the objective over the one), coloured by their last round's objective, the winner
starred and the policy's own settings crossed."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from poa_mc.plots.style import _panels, _save


def tune_figure(hist: pl.DataFrame, settings: list[str], objective: str):  # noqa: ANN201 - a matplotlib Figure
    points = hist.select("topology", "load").unique(maintain_order=True).rows()
    fig, axes = _panels(len(points), sharex=False)
    axis = hist["load_axis"][0]
    for ax, (topo, load) in zip(axes, points):
        d = hist.filter((pl.col("topology") == topo) & (pl.col("load") == load))
        last = d.sort("rung").group_by("candidate", maintain_order=True).last()
        top = d["rung"].max()
        winner = last.filter(pl.col("rung") == top)
        own = last.filter(pl.col("candidate") == 0)
        if len(settings) >= 2:
            x, y = settings[0], settings[1]
            sc = ax.scatter(last[x], last[y], c=last["objective"], s=20 + 25 * last["rung"], cmap="viridis_r")
            fig.colorbar(sc, ax=ax, label=objective)
            ax.plot(winner[x], winner[y], "*", color="red", markersize=16, label="winner")
            ax.plot(own[x], own[y], "kx", markersize=11, mew=2, label="own settings")
            ax.set_ylabel(y)
        else:
            x = settings[0]
            ax.scatter(last[x], last["objective"], s=20 + 25 * last["rung"], color="tab:blue")
            ax.plot(winner[x], winner["objective"], "*", color="red", markersize=16, label="winner")
            ax.plot(own[x], own["objective"], "kx", markersize=11, mew=2, label="own settings")
            ax.set_ylabel(objective)
        ax.set_xlabel(x)
        ax.set_title(f"{topo}, {axis} {load:g}")
        ax.grid(True, alpha=0.35)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Router settings searched for {objective} (marker size: rounds survived)", fontsize=11)
    return fig


def plot_tune(hist: pl.DataFrame, settings: list[str], objective: str, path: Path) -> Path:
    return _save(tune_figure(hist, settings, objective), path)
