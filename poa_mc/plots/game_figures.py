"""The figures of a run's games: the prefill/decode split game (Game 1), the Planner moving the
split over time, and the caching game (Game 2), each as a Figure from its frame.

They are apart from the run figures (run_figures.py) because they draw the games' frames
(pd_game.parquet, planner_moves.parquet, cache_game.parquet), which only grids with a [games]
section have. matplotlib is imported inside the functions (style.py says why).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from poa_mc.plots.style import _PANEL, _figure, _floats, _legend_below, _log_ticks, _panels

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def pd_game_figure(game: pl.DataFrame) -> Figure:
    """Game 1: each pool's cost and the social cost over the splits of the GPU budget, each as a
    multiple of its best split (one log axis for quantities of different units), one panel per
    load; equilibria starred, the social optimum ringed."""
    load = "concurrency" if "concurrency" in game.columns else "rate"
    loads = game[load].unique(maintain_order=True).to_list()
    fig, axes = _panels(len(loads), sharey=True)
    lines = (
        ("prefill_cost", "tab:blue", "prefill pool: " + game["prefill_cost_kind"][0]),
        ("decode_cost", "tab:orange", "decode pool: " + game["decode_cost_kind"][0]),
        ("social_cost", "black", "social: " + game["social_cost_kind"][0]),
    )
    for ax, value in zip(axes, loads):
        d = game.filter(pl.col(load) == value).sort("n_prefill")
        x = np.arange(d.height)
        for col, colour, label in lines:
            y = _floats(d[col])
            best = np.nanmin(y) if np.isfinite(y).any() else np.nan
            ax.plot(x, y / best, color=colour, marker="o", ms=4, label=label)
            lo, hi = _floats(d[f"{col}_lo"]), _floats(d[f"{col}_hi"])
            if np.isfinite(lo).any():
                ax.fill_between(x, lo / best, hi / best, color=colour, alpha=0.15, lw=0)
            if col == "social_cost":
                eq = d["is_equilibrium"].to_numpy()
                opt = d["is_optimum"].to_numpy()
                ax.plot(x[eq], (y / best)[eq], "*", color="tab:red", ms=14, label="equilibrium", zorder=5)
                ax.plot(x[opt], (y / best)[opt], "o", mfc="none", mec="tab:green", mew=2, ms=13,
                        label="social optimum", zorder=5)  # fmt: skip
        ax.set_xticks(x, d["topology"].to_list(), rotation=45 if d.height > 6 else 0)
        ax.set_yscale("log")
        poa, lo, hi = d["poa_pd"][0], d["poa_pd_lo"][0], d["poa_pd_hi"][0]
        txt = f"PoA_PD {poa:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and math.isfinite(lo) else "")
        ax.set_title(f"{'C' if load == 'concurrency' else 'rate'}={value:g}: {txt}", fontsize=10)
        ax.set_xlabel("split (prefill/decode workers)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("cost / its best split")
    _log_ticks(axes[0].yaxis, *axes[0].get_ylim())
    fig.suptitle("Prefill/decode split game over the GPU budget (95% bands across replicas)")
    _legend_below(fig, axes, ncol=5)
    return fig


def _fraction(v: float) -> str:
    """1/16, 1/4, 1, 4: a capacity ratio as people write it."""
    if v < 1 and abs(1 / v - round(1 / v)) < 1e-9:
        return f"1/{round(1 / v)}"
    return f"{v:.3g}"


def cache_game_figure(game: pl.DataFrame) -> Figure:
    """Game 2: PoA_KV (selfish over the best coordinated placement) against each worker's cache
    capacity as a multiple of the working set, one line per popularity skew, one panel per
    (topology, load); below, each placement's prefix hit rate. 95% intervals as bands."""
    load = "concurrency" if "concurrency" in game.columns else "rate"
    game = game.with_columns(base=pl.col("topology").str.split(" ").list.first())
    panels = game.select("base", load).unique(maintain_order=True).rows()
    from matplotlib import colormaps, ticker

    n = len(panels)
    # panels compare (topologies, loads): one y-scale per row (PoA_KV; hit rates)
    fig, flat = _figure(2, n, (_PANEL[0], 3.7), sharex=True, sharey="row")
    axes = np.array(flat, dtype=object).reshape(2, n)
    alphas = sorted(game["zipf_alpha"].unique().to_list())
    colours = colormaps["viridis"](np.linspace(0.0, 0.85, max(len(alphas), 1)))
    styles = {"selfish": "-", "coordinated": "--"}
    policies = game.select("policy", "role").unique(maintain_order=True).rows()
    markers = dict(zip([p for p, _ in policies], "osD^vP*X"))
    for j, (base, value) in enumerate(panels):
        d = game.filter((pl.col("base") == base) & (pl.col(load) == value))
        top, bottom = axes[0, j], axes[1, j]
        for colour, alpha in zip(colours, alphas):
            e = d.filter(pl.col("zipf_alpha") == alpha).sort("prefill_kv_blocks")
            first = e.filter(pl.col("role") == "selfish")
            ws = _floats(first["working_set_blocks"])
            x = _floats(first["prefill_kv_blocks"]) / np.where(ws > 0, ws, np.nan)
            y, lo, hi = (_floats(first[c]) for c in ("poa_kv", "poa_kv_lo", "poa_kv_hi"))
            top.plot(x, y, color=colour, marker="o", ms=4, label=f"zipf alpha {alpha:g}")
            if np.isfinite(lo).any():
                top.fill_between(x, lo, hi, color=colour, alpha=0.18, lw=0)
            for policy, role in policies:
                f = e.filter(pl.col("policy") == policy)
                bottom.plot(x, _floats(f["hit_rate"]), color=colour, ls=styles[role], marker=markers[policy], ms=4,
                            label=f"{policy}, alpha {alpha:g}")  # fmt: skip
        top.axhline(1.0, color="grey", lw=1, ls=":")
        top.set_title(f"{base}, {'C' if load == 'concurrency' else 'rate'}={value:g}", fontsize=10)
        top.grid(True, alpha=0.3)
        bottom.grid(True, alpha=0.3)
        bottom.set_xscale("log")
        bottom.axvline(1.0, color="grey", lw=1, ls=":")
        top.axvline(1.0, color="grey", lw=1, ls=":")
        bottom.set_xlabel("cache per worker / working set")
        ratios = sorted({float(v) for v in (_floats(d["prefill_kv_blocks"]) / _floats(d["working_set_blocks"]))
                         if math.isfinite(v) and v > 0})  # fmt: skip
        if ratios:
            bottom.set_xticks(ratios, [_fraction(v) for v in ratios])
            bottom.xaxis.set_minor_locator(ticker.NullLocator())
    axes[0, 0].set_ylabel("PoA_KV = selfish / best coordinated")
    axes[1, 0].set_ylabel("prefix hit rate")
    kind = game["social_cost_kind"][0]
    fig.suptitle(f"Caching game: selfish against coordinated caches (social cost {kind}, 95% bands)")
    _legend_below(fig, list(axes[1]), ncol=4)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    axes[0, 0].legend(handles, labels, fontsize=8, frameon=False)
    return fig


def planner_figure(moves: pl.DataFrame, game: pl.DataFrame | None, shown: int = 4) -> Figure:
    """The Planner: prefill workers over time from each start split (up to `shown` replicas each,
    thin steps), one panel per load, with the static game's equilibrium and optimum as bands
    (the game's policy only)."""
    from matplotlib import colormaps

    load = "concurrency" if "concurrency" in moves.columns else "rate"
    if game is not None and game.height:
        moves = moves.filter(pl.col("policy") == game["policy"][0])  # the game's policy
    loads = moves[load].unique(maintain_order=True).to_list()
    fig, axes = _panels(len(loads), sharey=True)
    starts = moves["start"].unique(maintain_order=True).to_list()
    colours = colormaps["tab10"](np.arange(len(starts)) % 10)
    for ax, value in zip(axes, loads):
        d = moves.filter(pl.col(load) == value)
        for colour, start in zip(colours, starts):
            e = d.filter(pl.col("start") == start)
            for k, rep in enumerate(sorted(e["replica"].unique().to_list())[:shown]):
                f = e.filter(pl.col("replica") == rep).sort("from_ms")
                x = np.append(_floats(f["from_ms"]), f["until_ms"][-1]) / 1000.0
                y = np.append(_floats(f["n_prefill"]), f["n_prefill"][-1])
                ax.step(x, y + 0.06 * (k - shown / 2), where="post", color=colour, lw=1.2, alpha=0.8,
                        label=f"from {start}" if k == 0 else "_")  # fmt: skip
        if game is not None and game.height:
            g = game.filter(pl.col(load) == value)
            for col, colour, name in (
                ("is_equilibrium", "tab:red", "equilibrium"),
                ("is_optimum", "tab:green", "optimum"),
            ):
                for n_p in g.filter(pl.col(col))["n_prefill"].to_list():
                    ax.axhspan(n_p - 0.3, n_p + 0.3, color=colour, alpha=0.12, lw=0, label=f"static {name}")
        ax.set_title(f"{'C' if load == 'concurrency' else 'rate'}={value:g}", fontsize=10)
        ax.set_xlabel("simulated time (s)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("prefill workers")
    fig.suptitle(f"The Planner moving the split (up to {shown} replicas from each start)")
    _legend_below(fig, axes, ncol=5)
    return fig
