"""The figures of a run's summary and PoA frames: PoA against load, the PoA heatmap, TTFT P99
against load and the throughput/latency Pareto figure, each as a Figure and as a PNG file.

They read the reduced frames only (summary.parquet, poa.parquet), not the per-request samples
(cdf_figures.py), so every reduced run has them. Intervals are 95% across replicas; a run with one
replica has none, and its figures say so instead of drawing bands of NaN. matplotlib is imported
inside the functions (style.py says why).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from poa_mc.plots.style import (
    _axis_width,
    _floats,
    _legend_below,
    _load_col,
    _log_loads,
    _log_ticks,
    _num,
    _panels,
    _policy_styles,
    _ratio,
    _save,
    _set_load_axis,
    has_intervals,
    no_interval_note,
    thin_load_labels,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_REGIME_COLOURS = {"below": "tab:green", "transition": "tab:orange", "saturated": "tab:red"}


def pareto_front(throughput: Sequence[float] | np.ndarray, latency: Sequence[float] | np.ndarray) -> np.ndarray:
    """Mask of the points no other point dominates (at least as much throughput and at most as
    much latency, better in one). Equal points are all on the front; NaN points never are."""
    x = np.asarray(throughput, dtype=float)
    y = np.asarray(latency, dtype=float)
    on = np.zeros(x.shape, dtype=bool)
    ok = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    # Sweep from the highest throughput down: a point is on the front iff its latency beats
    # every point of strictly higher throughput and is the lowest among its throughput ties.
    order = ok[np.lexsort((y[ok], -x[ok]))]
    best = math.inf
    i = 0
    while i < order.size:
        j = i
        while j < order.size and x[order[j]] == x[order[i]]:
            j += 1
        group = order[i:j]
        lowest = y[group[0]]
        if lowest < best:
            on[group[y[group] == lowest]] = True
            best = lowest
        i = j
    return on


def _shade_regimes(ax: Axes, d: pl.DataFrame, x: np.ndarray) -> None:
    """Shade each load point's regime (midpoints between loads as edges) and mark the knee."""
    from matplotlib.transforms import blended_transform_factory

    if "regime" not in d.columns or not d.height:
        return
    edges = np.r_[x[0], np.sqrt(x[:-1] * x[1:]) if np.all(x > 0) else (x[:-1] + x[1:]) / 2, x[-1]]
    for i, regime in enumerate(d["regime"].to_list()):
        colour = _REGIME_COLOURS.get(regime)
        if colour is not None:
            ax.axvspan(edges[i], edges[i + 1], color=colour, alpha=0.08, linewidth=0, label=f"regime: {regime}")
    knee = d["knee"][0] if "knee" in d.columns else None
    if knee is not None and np.isfinite(knee):
        ax.axvline(knee, color="black", linestyle="--", linewidth=1, label="knee of the selfish policy's TTFT curve")
        lo, hi = d["knee_lo"][0], d["knee_hi"][0]
        bounds = lo is not None and hi is not None and np.isfinite([lo, hi]).all()
        text = f"knee {knee:.0f}" + (f" [{lo:.0f}, {hi:.0f}]" if bounds else "")
        g_lo, g_hi = (d[c][0] if c in d.columns else None for c in ("knee_grid_lo", "knee_grid_hi"))
        if g_lo is not None and g_hi is not None and g_hi > g_lo:
            # the grid cannot place the knee closer than its load points either side: hatched between them
            ax.axvspan(g_lo, g_hi, facecolor="none", edgecolor="grey", hatch="//", linewidth=0, alpha=0.35,
                       label="load points either side of the knee")  # fmt: skip
        ax.text(
            knee,
            0.97,
            text,
            rotation=90,
            ha="right",
            va="top",
            fontsize=7,
            transform=blended_transform_factory(ax.transData, ax.transAxes),
            bbox=dict(facecolor="white", alpha=0.75, edgecolor="none", pad=1.5),  # readable over the curves
        )
    elif "knee_reason" in d.columns and d["knee_reason"][0]:
        reason = str(d["knee_reason"][0])
        ax.text(0.02, 0.03, "no knee: " + (reason if len(reason) <= 60 else reason[:57] + "..."), fontsize=6.5,
                transform=ax.transAxes, color="dimgrey")  # fmt: skip


def poa_vs_load_figure(poa: pl.DataFrame, *, replicas: int | None = None) -> Figure:
    """PoA-hat and counterfactual PoA against load, one panel per topology, on one y-scale."""
    load, xlabel, _ = _load_col(poa)
    topologies = poa["topology"].unique(maintain_order=True).to_list()
    fig, axes = _panels(len(topologies), sharey=True)
    kind = poa["social_cost_kind"][0] if poa.height else ""
    bands = has_intervals(poa, ("poa_hat", "poa_cf"))
    tops = np.r_[_floats(poa["poa_hat"]), _floats(poa["poa_cf"]), 1.0]
    if bands:
        tops = np.r_[tops, _floats(poa["poa_hat_hi"]), _floats(poa["poa_cf_hi"])]
    for k, (ax, topo) in enumerate(zip(axes, topologies)):
        d = poa.filter(pl.col("topology") == topo).sort(load)
        x = _floats(d[load])
        how = ", ".join(
            str(d[c][0]) + suffix
            for c, suffix in (("poa_stage", " decision"), ("poa_cost", " cost"), ("poa_pricing", " pricing"))
            if c in d.columns and d.height
        )
        _shade_regimes(ax, d, x)
        for col, label, colour in (
            ("poa_hat", f"PoA-hat ({how})", "tab:red"),
            ("poa_cf", f"counterfactual PoA ({kind}, measured)", "tab:blue"),
        ):
            y = _floats(d[col])
            ax.plot(x, y, marker="o", markersize=5, color=colour, label=label)
            if col == "poa_hat" and np.isfinite(y).any() and np.nanmin(y) < 1.0:
                # frozen pricing and the observed cost have no >= 1 bound: say what a dip means
                ax.text(
                    0.02,
                    0.04,
                    "PoA-hat < 1: the estimator's bias, not better than optimal",
                    transform=ax.transAxes,
                    fontsize=7,
                    color=colour,
                    va="bottom",
                )
            if not np.isfinite(y).any():  # else the line is just missing and the reader left guessing
                ax.text(
                    0.02,
                    0.96 if col == "poa_hat" else 0.88,
                    f"{label.split(' (')[0]}: no value at any load",
                    transform=ax.transAxes,
                    fontsize=7.5,
                    color=colour,
                    va="top",
                )
            if bands:
                ax.fill_between(
                    x,
                    _floats(d[f"{col}_lo"]),
                    _floats(d[f"{col}_hi"]),
                    color=colour,
                    alpha=0.2,
                    linewidth=0,
                    label=f"{label.split(' (')[0]}: 95% interval",
                )
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
        _set_load_axis(ax, x, _axis_width(len(topologies)))
        ax.set_title(topo)
        ax.set_xlabel(xlabel)
        if k % 3 == 0:
            ax.set_ylabel("ratio to the best found (1 = no loss)")
        ax.grid(True, alpha=0.3)
    if np.nanmax(tops) > 20:
        axes[0].set_yscale("log")
        lo, hi = axes[0].get_ylim()
        for ax in axes:
            _log_ticks(ax.yaxis, lo, hi, _ratio)
    selfish = poa["selfish_policy"][0] if "selfish_policy" in poa.columns and poa.height else "?"
    note = "95% bands across replicas" if bands else no_interval_note(replicas)
    fig.suptitle(f"Price of Anarchy of the selfish policy {selfish} against load\n{note}", fontsize=11)
    _legend_below(fig, axes, ncol=2)
    return fig


def poa_heatmap_figure(poa: pl.DataFrame, *, replicas: int | None = None) -> Figure:
    """PoA-hat of the selfish policy over topology x load, each cell with its value and interval."""
    import matplotlib
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.figure import Figure

    load, label, _ = _load_col(poa)
    topologies = poa["topology"].unique(maintain_order=True).to_list()
    loads = sorted(poa[load].unique().drop_nulls().to_list())
    shape = (len(topologies), len(loads))
    z, zlo, zhi = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    cols = [c if c in poa.columns else "poa_hat" for c in ("poa_hat", "poa_hat_lo", "poa_hat_hi")]
    for row in poa.select("topology", load, *cols).iter_rows():
        if row[1] is None:
            continue
        ij = topologies.index(row[0]), loads.index(row[1])
        for grid, v in zip((z, zlo, zhi), row[2:]):
            grid[ij] = np.nan if v is None or not np.isfinite(v) else v
    bands = np.isfinite(zlo).any() and np.isfinite(zhi).any()
    # Many loads go down the page (one row per load), where value and interval have room.
    flip = len(loads) > 10 and len(loads) > len(topologies)
    if flip:
        z, zlo, zhi = z.T, zlo.T, zhi.T
    rows, ncols = z.shape
    cell_w, cell_h = (1.25, 0.42) if bands else (0.8, 0.36)
    fig = Figure(figsize=(max(5.5, 2.8 + cell_w * ncols), max(3.0, 1.9 + cell_h * max(rows, 2))), layout="constrained")
    ax = fig.subplots()
    good = z[np.isfinite(z) & (z > 0)]
    vmin, vmax = (good.min(), good.max()) if good.size else (1.0, 1.0)
    if vmax - vmin < 1e-9:  # all equal (often all 1): Normalize would divide by zero
        vmin, vmax = vmin - 0.05, vmax + 0.05
    norm = LogNorm(vmin=vmin, vmax=vmax) if vmin > 0 and vmax / vmin > 10 else Normalize(vmin=vmin, vmax=vmax)
    cmap = matplotlib.colormaps["magma_r"].with_extremes(bad="#eeeeee")
    im = ax.imshow(np.ma.masked_invalid(z), aspect="auto", cmap=cmap, norm=norm)
    for i in range(rows):
        for j in range(ncols):
            if not np.isfinite(z[i, j]):
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="grey")
                continue
            text = _ratio(z[i, j])
            if np.isfinite(zlo[i, j]) and np.isfinite(zhi[i, j]):
                text += f"\n[{_ratio(zlo[i, j])}, {_ratio(zhi[i, j])}]"
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=7.5 if bands else 8,
                color="white" if norm(z[i, j]) > 0.6 else "black",
            )
    load_labels, topo_labels = [_num(v) for v in loads], topologies
    if flip:
        ax.set_yticks(range(rows), load_labels)
        ax.set_xticks(range(ncols), topo_labels)
        ax.set_ylabel(label)
        ax.set_xlabel("topology (prefill/decode workers)")
    else:
        ax.set_xticks(range(ncols), load_labels)
        ax.set_yticks(range(rows), topo_labels)
        ax.set_xlabel(label)
        ax.set_ylabel("topology (prefill/decode workers)")
    ax.tick_params(labelsize=8)
    selfish = poa["selfish_policy"][0] if "selfish_policy" in poa.columns and poa.height else "?"
    stage = f", {poa['poa_stage'][0]} decision" if "poa_stage" in poa.columns and poa.height else ""
    if not np.isfinite(z).any():
        note = "no PoA-hat at any point (n/a: one candidate, no game)"
    elif bands:
        note = "value [95% interval across replicas]" + ("; n/a: one candidate, no game" if np.isnan(z).any() else "")
    else:
        note = no_interval_note(replicas)
    ax.set_title(f"PoA-hat of the selfish policy {selfish}{stage}\n{note}", fontsize=9)
    if np.isfinite(z).any():  # a colour scale of nothing would only mislead
        fig.colorbar(im, ax=ax, label=f"PoA-hat of {selfish} (1 = no loss)")
    return fig


def ttft_p99_figure(summary: pl.DataFrame, *, selfish: str | None = None, replicas: int | None = None) -> Figure:
    """TTFT P99 against load, one line per policy, one panel per topology, on one y-scale."""
    load, xlabel, _ = _load_col(summary)
    topologies = summary["topology"].unique(maintain_order=True).to_list()
    styles = _policy_styles(summary, selfish, _lowest(summary, "ttft_p99_ms", load))
    bands = has_intervals(summary, ("ttft_p99_ms",))
    fig, axes = _panels(len(topologies), sharey=True)
    all_loads = _floats(summary[load])
    for k, (ax, topo) in enumerate(zip(axes, topologies)):
        for pol, style in styles.items():
            d = summary.filter((pl.col("topology") == topo) & (pl.col("policy") == pol)).sort(load)
            if not d.height:
                continue
            x = _floats(d[load])
            ax.plot(x, _floats(d["ttft_p99_ms"]), **style)
            if bands and style["color"] != "grey":
                ax.fill_between(
                    x,
                    _floats(d["ttft_p99_ms_lo"]),
                    _floats(d["ttft_p99_ms_hi"]),
                    color=style["color"],
                    alpha=0.2,
                    linewidth=0,
                )
        _set_load_axis(ax, all_loads, _axis_width(len(topologies)))
        ax.set_yscale("log")
        ax.set_title(topo)
        ax.set_xlabel(xlabel)
        if k % 3 == 0:
            ax.set_ylabel("TTFT P99 (ms)")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
    lo, hi = axes[0].get_ylim()
    marked = _mark_unstable(axes, topologies, summary, load)
    for ax in axes:
        _log_ticks(ax.yaxis, lo, hi)
    note = "95% bands across replicas" if bands else no_interval_note(replicas)
    if marked:
        note += "; x: unstable (arrivals beyond capacity: no steady-state TTFT)"
    fig.suptitle(f"Time to first token, 99th percentile of each cell's requests\n{note}", fontsize=11)
    _legend_below(fig, axes, ncol=4)
    return fig


def _lowest(summary: pl.DataFrame, metric: str, load: str) -> dict[str, int]:
    """Per policy, at how many (topology, load) points it has the lowest `metric`."""
    d = summary.filter(pl.col(metric).is_not_null() & pl.col(metric).is_not_nan())
    if not d.height:
        return {}
    top = d.sort(metric).group_by(["topology", load], maintain_order=True).first()
    return dict(top.group_by("policy").len().iter_rows())


def _mark_unstable(axes: list, topologies: list, summary: pl.DataFrame, load: str) -> bool:
    """An x at the top of a panel at each load where some policy's cell is unstable (an open loop
    beyond capacity: its TTFT has no steady-state value, so its line stops there)."""
    if "unstable" not in summary.columns:
        return False
    marked = False
    for ax, topo in zip(axes, topologies):
        over = summary.filter((pl.col("topology") == topo) & pl.col("unstable").fill_null(False))
        if over.height:
            x = np.unique(_floats(over[load]))
            ax.plot(x, np.full(len(x), 0.97), "x", color="black", ms=7, transform=ax.get_xaxis_transform())
            marked = True
    return marked


def pareto_figure(summary: pl.DataFrame, *, selfish: str | None = None) -> Figure:
    """Throughput against TTFT P99 per topology: each policy a line over load, the front marked.

    The front is over every (policy, load) point of a panel: what no other policy at any load
    beats in both throughput and tail latency.
    """
    load, _, prefix = _load_col(summary)
    topologies = summary["topology"].unique(maintain_order=True).to_list()
    styles = _policy_styles(summary, selfish)
    first = next(iter(styles))
    fig, axes = _panels(len(topologies), sharex=True, sharey=True)
    log_x = _log_loads(_floats(summary["throughput_rps"]))
    notes = []
    for k, (ax, topo) in enumerate(zip(axes, topologies)):
        t = summary.filter(pl.col("topology") == topo)
        for pol, style in styles.items():
            d = t.filter(pl.col("policy") == pol).sort(load)
            if d.height:
                ax.plot(_floats(d["throughput_rps"]), _floats(d["ttft_p99_ms"]), **style)
        x, y = _floats(t["throughput_rps"]), _floats(t["ttft_p99_ms"])
        on = pareto_front(x, y)
        order = np.argsort(x[on])
        ax.plot(
            x[on][order],
            y[on][order],
            color="black",
            alpha=0.18,
            linewidth=7,
            solid_capstyle="round",
            zorder=1,
            label="Pareto front (nothing has more throughput and lower TTFT P99)",
        )
        ax.plot(
            x[on],
            y[on],
            linestyle="none",
            marker="o",
            markersize=9,
            markerfacecolor="none",
            markeredgecolor="black",
            markeredgewidth=0.9,
            zorder=20,
        )
        # which load each point is: labelled along the first policy's line where labels fit
        d = t.filter(pl.col("policy") == first).sort(load)
        if d.height:
            dx, dy, dl = _floats(d["throughput_rps"]), _floats(d["ttft_p99_ms"]), _floats(d[load])
            keep = set(thin_load_labels(dx, log=log_x, width_in=_axis_width(len(topologies)) * 0.8, fontsize=9))
            for xi, yi, li in zip(dx, dy, dl):
                if xi in keep and np.isfinite(yi):
                    notes.append(
                        ax.annotate(
                            f"{prefix}{li:g}",
                            (xi, yi),
                            xytext=(5, -9),
                            textcoords="offset points",
                            fontsize=6.5,
                            color=styles[first]["color"],
                            zorder=25,
                        )
                    )
        ax.set_yscale("log")
        if log_x:
            ax.set_xscale("log")
        ax.set_title(topo)
        ax.set_xlabel("throughput (requests/s)")
        if k % 3 == 0:
            ax.set_ylabel("TTFT P99 (ms)")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
    ylo, yhi = axes[0].get_ylim()
    xlo, xhi = axes[0].get_xlim()
    for ax in axes:
        _log_ticks(ax.yaxis, ylo, yhi)
        if log_x:
            _log_ticks(ax.xaxis, xlo, xhi)
    if log_x:  # room on the right for the last point's load label
        axes[0].set_xlim(xlo, xhi * (xhi / xlo) ** 0.06)
    else:
        axes[0].set_xlim(xlo, xhi + 0.06 * (xhi - xlo))
    for note in notes:  # a label under a point by the bottom frame goes above it instead
        fy = note.axes.transAxes.inverted().transform(note.axes.transData.transform(note.xy))[1]
        if fy < 0.12:
            note.xyann = (5, 5)
    fig.suptitle("Throughput against TTFT P99, one point per load (better: right and down)", fontsize=11)
    _legend_below(fig, axes, ncol=4)
    return fig


# -- files -------------------------------------------------------------------------------------


def plot_poa_vs_load(poa: pl.DataFrame, path: Path, *, replicas: int | None = None) -> Path:
    return _save(poa_vs_load_figure(poa, replicas=replicas), path)


def plot_poa_heatmap(poa: pl.DataFrame, path: Path, *, replicas: int | None = None) -> Path:
    return _save(poa_heatmap_figure(poa, replicas=replicas), path)


def plot_ttft_p99(summary: pl.DataFrame, path: Path, *, selfish: str | None = None) -> Path:
    return _save(ttft_p99_figure(summary, selfish=selfish, replicas=_replicas(summary)), path)


def plot_pareto(summary: pl.DataFrame, path: Path, *, selfish: str | None = None) -> Path:
    return _save(pareto_figure(summary, selfish=selfish), path)


def _replicas(summary: pl.DataFrame) -> int | None:
    if "replicas" not in summary.columns or not summary.height:
        return None
    return int(summary["replicas"].min())
