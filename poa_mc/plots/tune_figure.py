"""tune.png (`poa-mc tune`): per load point, the candidates over the search space's first two
settings (or the objective over the one), coloured by their last round's objective, the winner
starred and the policy's own settings crossed. For a controller (one table for every load): the
candidates' score over the first two settings, and the winner's validated gain over each baseline
at each load, with its 95% interval."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from poa_mc.plots.style import _panels, _save


def _last(d: pl.DataFrame) -> pl.DataFrame:
    """Each candidate's last round at one point, with the number of rounds it ran (`rounds`: it
    ran one more each time it survived, in each race it took part in)."""
    rounds = d.group_by("candidate").len().rename({"len": "rounds"})
    return d.sort("rung").group_by("candidate", maintain_order=True).last().join(rounds, on="candidate")


def tune_figure(hist: pl.DataFrame, settings: list[str], objective: str):  # noqa: ANN201 - a matplotlib Figure
    points = hist.select("topology", "load").unique(maintain_order=True).rows()
    fig, axes = _panels(len(points), sharex=False)
    axis = hist["load_axis"][0]
    for ax, (topo, load) in zip(axes, points):
        d = hist.filter((pl.col("topology") == topo) & (pl.col("load") == load))
        last = _last(d)
        top = d["rung"].max()
        winner = last.filter(pl.col("rung") == top)
        own = last.filter(pl.col("candidate") == 0)
        if len(settings) >= 2:
            x, y = settings[0], settings[1]
            sc = ax.scatter(last[x], last[y], c=last["objective"], s=20 + 25 * last["rounds"], cmap="viridis_r")
            fig.colorbar(sc, ax=ax, label=objective)
            ax.plot(winner[x], winner[y], "*", color="red", markersize=16, label="winner")
            ax.plot(own[x], own[y], "kx", markersize=11, mew=2, label="own settings")
            ax.set_ylabel(y)
        else:
            x = settings[0]
            ax.scatter(last[x], last["objective"], s=20 + 25 * last["rounds"], color="tab:blue")
            ax.plot(winner[x], winner["objective"], "*", color="red", markersize=16, label="winner")
            ax.plot(own[x], own["objective"], "kx", markersize=11, mew=2, label="own settings")
            ax.set_ylabel(objective)
        ax.set_xlabel(x)
        ax.set_title(f"{topo}, {axis} {load:g}")
        ax.grid(True, alpha=0.35)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Router settings searched for {objective} (marker size: rounds survived)", fontsize=11)
    return fig


def controller_figure(hist: pl.DataFrame, won: pl.DataFrame, settings: list[str], objective: str):  # noqa: ANN201
    fig, (left, right) = _panels(2, sharex=False)
    first = hist.select("topology", "load").row(0)
    d = hist.filter((pl.col("topology") == first[0]) & (pl.col("load") == first[1]))  # scores are per candidate
    last = _last(d)
    winner = last.filter(pl.col("rung") == d["rung"].max())
    own = last.filter(pl.col("candidate") == 0)
    x, y = settings[0], settings[1] if len(settings) > 1 else "score"
    cmap = "viridis" if objective == "goodput" else "viridis_r"  # the better end yellow
    sc = left.scatter(last[x], last[y], c=last["score"], s=20 + 25 * last["rounds"], cmap=cmap)
    fig.colorbar(sc, ax=left, label=f"score (relative {objective})")
    left.plot(winner[x], winner[y], "*", color="red", markersize=16, label="winner")
    left.plot(own[x], own[y], "kx", markersize=11, mew=2, label="own table")
    left.set_xlabel(x)
    left.set_ylabel(y)
    left.set_title("candidates (marker size: rounds survived)")
    left.legend(fontsize=8)
    per = won.filter(pl.col("load").is_not_null())
    axis = per["load_axis"][0]
    for k, (name, rows) in enumerate(per.group_by("baseline", maintain_order=True)):
        g = rows["gain"].to_numpy() * 100
        err = [g - rows["gain_lo"].to_numpy() * 100, rows["gain_hi"].to_numpy() * 100 - g]
        x = rows["load"].to_numpy() * (1.04**k)  # side by side, not on top of each other
        right.errorbar(x, g, yerr=err, fmt="o", ms=4, capsize=2, color=f"C{k}", label=f"over {name[0]}")
    right.axhline(0.0, color="black", lw=0.8)
    right.set_xscale("log", base=2)
    right.set_xlabel(axis)
    right.set_ylabel(f"gain in {objective}, % (95% interval)")
    right.set_title("the winner, validated on fresh seeds")
    right.grid(True, alpha=0.35)
    right.legend(fontsize=8)
    fig.suptitle("The adaptive controller's table searched", fontsize=11)
    return fig


def plot_tune(
    hist: pl.DataFrame, won: pl.DataFrame, settings: list[str], objective: str, joint: bool, path: Path
) -> Path:
    if joint:
        return _save(controller_figure(hist, won, settings, objective), path)
    return _save(tune_figure(hist, settings, objective), path)
