"""Figures of a reduced run (PNG, drawn off-screen, no display needed).

plots/poa_vs_load.png   PoA-hat and counterfactual PoA against load, one panel per topology
plots/poa_heatmap.png   PoA-hat of the selfish policy over topology x load, each cell with its interval
plots/ttft_p99.png      TTFT P99 against load, one line per policy, one panel per topology
plots/pareto.png        throughput against TTFT P99, one line per policy over load, the Pareto front marked
plots/ttft_cdf.png      empirical CDF of per-request TTFT per policy, one panel per (topology, load)
plots/e2e_cdf.png       the same for end-to-end latency

The CDFs read the per-request samples; a run without samples gets the other four. Intervals are
95% across replicas; a run with one replica has none, and its figures say so instead of drawing
bands of NaN.

`plot_run` draws every figure a run has (`figure_names`), each by `draw_figure` from the run's
files: in this process, or in the worker processes `poa-mc run` starts (poa_mc.plots.figure_workers).

matplotlib is imported inside the functions (`import poa_mc.plots.plots` stays cheap for the CLI), and
figures are built as `matplotlib.figure.Figure` objects, never through pyplot: no global figure
state to leak, and no backend switch in a user's notebook that imports this module.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl

from poa_mc.io.files import atomic_write_bytes
from poa_mc.io.load import load as load_run
from poa_mc.io.store import RunDir

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

_DPI = 110
_PANEL = (5.2, 3.9)  # inches per panel of the per-topology figures
_ONE_PANEL = (7.0, 4.6)  # a single topology (the paper presets) gets room for 17 loads and the legend
_NAMED_MAX = 8  # policies drawn in colour with a legend entry; the rest as grey lines
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_REGIME_COLOURS = {"below": "tab:green", "transition": "tab:orange", "saturated": "tab:red"}
_CDF_TICKS = (0.0, 0.25, 0.5, 0.75, 0.9, 0.99)
_CDF_METRICS = {"ttft_ms": ("ttft_cdf.png", "TTFT"), "e2e_ms": ("e2e_cdf.png", "end-to-end latency")}


# -- small pure helpers (tested directly) ------------------------------------------------------


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


def has_intervals(frame: pl.DataFrame, columns: Sequence[str]) -> bool:
    """Whether any of the `_lo`/`_hi` pairs of `columns` holds a finite interval (one replica: none)."""
    for c in columns:
        lo, hi = f"{c}_lo", f"{c}_hi"
        if lo in frame.columns and hi in frame.columns:
            both = np.isfinite(_floats(frame[lo])) & np.isfinite(_floats(frame[hi]))
            if both.any():
                return True
    return False


def no_interval_note(replicas: int | None) -> str:
    """What a figure without intervals says in their place."""
    if replicas is not None and replicas < 2:
        return f"{replicas} replica: no intervals"
    return "no intervals"


def thin_load_labels(values: Sequence[float] | np.ndarray, *, log: bool, width_in: float, fontsize: float = 8) -> list:
    """The loads to label on an axis `width_in` inches wide so that no two labels overlap.

    Ends first, then (on a log2 axis) powers of two, then the rest left to right: 1..512 with
    17 loads keeps 1, 2, 4, ..., 512 and drops 80, 96, ... where they would collide.
    """
    v = np.unique(np.asarray(values, dtype=float))
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if v.size <= 1:
        return v.tolist()
    pos = np.log2(v) if log else v
    usable = width_in / 1.1  # matplotlib pads the data range by 5% on each side
    at = (pos - pos[0]) / (pos[-1] - pos[0]) * usable
    half = np.array([len(f"{x:g}") * fontsize * 0.62 / 72 + 0.1 for x in v]) / 2

    def rank(i: int) -> tuple[bool, bool, int]:
        pow2 = log and float(np.log2(v[i])).is_integer()
        return (i not in (0, v.size - 1), not pow2, i)

    kept: list[int] = []
    for i in sorted(range(v.size), key=rank):
        if all(abs(at[i] - at[j]) >= half[i] + half[j] for j in kept):
            kept.append(i)
    return v[sorted(kept)].tolist()


def _floats(s: pl.Series) -> np.ndarray:
    # nulls (polars) and NaN/inf (numpy) both mean "no value" to a plot
    a = s.cast(pl.Float64).fill_null(np.nan).to_numpy()
    return np.where(np.isfinite(a), a, np.nan)


def _num(v: float) -> str:
    return f"{v:g}"


def _ratio(v: float) -> str:
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.3g}"


# -- figure plumbing ---------------------------------------------------------------------------


def _figure(rows: int, cols: int, panel: tuple[float, float], **share: Any) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    # constrained layout keeps suptitles, shared labels, colorbars and outside legends apart
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **share)
    return fig, list(axes.ravel())


def _panel_size(n: int) -> tuple[float, float]:
    return _ONE_PANEL if n == 1 else _PANEL


def _axis_width(n: int) -> float:
    return _panel_size(n)[0] - 1.2  # less the y label and tick labels


def _panels(n: int, **share: Any) -> tuple[Figure, list[Axes]]:
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, flat = _figure(rows, cols, _panel_size(n), **share)
    for k, ax in enumerate(flat[n:], start=n):
        ax.set_visible(False)
        above = k - cols
        if share.get("sharex") and 0 <= above < n:  # its x labels were hidden for the empty panel below
            flat[above].xaxis.set_tick_params(labelbottom=True)
    return fig, flat[:n]


def _save(fig: Figure, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    atomic_write_bytes(Path(path), buf.getvalue())  # like every file of a run: never half a PNG
    return Path(path)


def _legend_below(fig: Figure, axes: Sequence[Axes], ncol: int = 3, **kw: Any) -> None:
    """One legend for the whole figure, under the panels: per-axes legends covered data."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    if handles:
        ncol = legend_columns([len(lab) for lab in labels], fig.get_figwidth(), ncol)
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=8, frameon=False, **kw)


def legend_columns(label_chars: Sequence[int], width_in: float, most: int, fontsize: float = 8) -> int:
    """The most legend columns (up to `most`) whose entries fit across `width_in` inches.

    matplotlib fills columns top to bottom, so a column is as wide as its longest label.
    """
    n = len(label_chars)
    for ncol in range(min(most, n), 1, -1):
        rows = -(-n // ncol)
        cols = [label_chars[i : i + rows] for i in range(0, n, rows)]
        # DejaVu Sans averages ~0.55 em a character; handle, its pad and the column gap are 4.8 em
        if sum((max(c) * 0.55 + 4.8) * fontsize / 72 for c in cols) <= width_in:
            return ncol
    return 1


def _log_ticks(axis: Axis, lo: float, hi: float, fmt: Any = _num) -> None:
    """Readable labels on a log axis: decades and, when there is room for them, the values between."""
    from matplotlib import ticker

    if not (lo > 0 and hi > lo):
        return
    span = math.log10(hi / lo)
    if span > 3.5:
        major = ticker.LogLocator(10, subs=(1.0,), numticks=40)
    elif span > 1.2:
        major = ticker.LogLocator(10, subs=(1.0, 2.0, 5.0), numticks=40)
    elif span > 0.45:
        major = ticker.LogLocator(10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0), numticks=40)
    else:  # under half a decade a log locator finds one tick or none
        major = ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10])
    axis.set_major_locator(major)
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: fmt(v)))
    axis.set_minor_locator(ticker.LogLocator(10, subs=np.arange(2.0, 10.0), numticks=40))
    axis.set_minor_formatter(ticker.NullFormatter())


def _load_col(df: pl.DataFrame) -> tuple[str, str, str]:
    """Column of the load, its axis label, and a short prefix for panel titles."""
    if df.height and df["load_axis"][0] == "rate":
        return "rate", "arrival rate (req/s)", "rate "
    return "concurrency", "concurrency C (closed-loop clients)", "C="


def _log_loads(x: np.ndarray) -> bool:
    x = x[np.isfinite(x)]
    return bool(x.size > 1 and x.min() > 0 and x.max() / x.min() >= 8)


def _set_load_axis(ax: Axes, x: np.ndarray, width_in: float) -> None:
    """Ticks at the simulated loads themselves (not powers of ten), labelled where they fit."""
    from matplotlib import ticker

    x = np.unique(x[np.isfinite(x)])
    log = _log_loads(x)
    if log:
        ax.set_xscale("log", base=2)
    if x.size == 0:
        return
    labelled = thin_load_labels(x, log=log, width_in=width_in)
    ax.set_xticks(labelled, [_num(v) for v in labelled])
    ax.set_xticks([v for v in x.tolist() if v not in labelled], minor=True)
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.tick_params(axis="x", labelsize=8)


def _policy_styles(frame: pl.DataFrame, selfish: str | None) -> dict[str, dict[str, Any]]:
    """Colour, marker, width and legend label per policy, in grid order.

    All policies are named when few; else the non-kv kinds (adaptive, oracle, ...), the selfish
    policy and the first kv policy, up to _NAMED_MAX, and the rest share one grey legend entry.
    Earlier named lines are drawn wider so that a later one on top of them leaves them visible,
    and the selfish policy dashed above all.
    """
    from matplotlib import rcParams

    policies = frame["policy"].unique(maintain_order=True).to_list()
    kinds = dict(zip(frame["policy"].to_list(), frame["policy_kind"].to_list()))
    if len(policies) <= _NAMED_MAX:
        named = policies
    else:
        first_kv = next((p for p in policies if kinds.get(p) == "kv"), policies[0])
        named = [p for p in policies if p in (first_kv, selfish) or kinds.get(p) != "kv"][:_NAMED_MAX]
    colours = rcParams["axes.prop_cycle"].by_key()["color"]
    styles: dict[str, dict[str, Any]] = {}
    grey_label = f"{len(policies) - len(named)} other kv settings"
    for pol in policies:
        if pol in named:
            i = named.index(pol)
            styles[pol] = dict(
                color=colours[i % len(colours)],
                marker=_MARKERS[i % len(_MARKERS)],
                markersize=4.5,
                linewidth=max(2.6 - 0.3 * i, 1.1),
                zorder=3 + i,
                label=pol,
            )
            if pol == selfish:  # dashed on top: visible where a baseline draws the same curve
                styles[pol].update(linestyle=(0, (4, 2)), linewidth=1.6, zorder=4 + _NAMED_MAX)
                styles[pol]["label"] = f"{pol} (selfish)"
        else:
            styles[pol] = dict(color="grey", alpha=0.5, linewidth=0.8, zorder=2, label=grey_label)
            grey_label = "_"  # one legend entry for all grey lines
    return styles


# -- the figures -------------------------------------------------------------------------------


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
    styles = _policy_styles(summary, selfish)
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
    for ax in axes:
        _log_ticks(ax.yaxis, lo, hi)
    note = "95% bands across replicas" if bands else no_interval_note(replicas)
    fig.suptitle(f"Time to first token, 99th percentile of each cell's requests\n{note}", fontsize=11)
    _legend_below(fig, axes, ncol=4)
    return fig


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


def _ecdf(values: np.ndarray, points: int = 1200) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their CDF at up to `points` order statistics, denser in the top 1%:
    a line of millions of steps draws no better than a thousand and makes a slow, large PNG."""
    v = np.sort(values[np.isfinite(values) & (values > 0)])
    n = v.size
    if n <= points:
        k = np.arange(n)
    else:
        k = np.unique(np.r_[np.linspace(0, n - 1, points).round(), np.linspace(0.99 * (n - 1), n - 1, 200).round()])
        k = k.astype(np.int64)
    return v[k], (k + 1) / max(n, 1)


def latency_cdf_figure(
    samples: pl.LazyFrame,
    cells: pl.DataFrame,
    metric: str = "ttft_ms",
    *,
    selfish: str | None = None,
    max_loads: int = 4,
    max_replicas: int | None = None,
) -> Figure | None:
    """Empirical CDF of a per-request latency per policy, one panel per (topology, load).

    Rows are topologies; columns up to `max_loads` loads spread over the grid's range (all when
    few). Requests of all replicas are pooled, or of replicas 0..max_replicas-1 only: replicas
    are independent, so a subset is an unbiased sample and keeps a 65,536-replica run from
    loading billions of rows. None when the samples lack the column (a run without samples):
    the caller skips the figure.
    """
    if metric not in samples.collect_schema().names() or not cells.height:
        return None
    load, _, prefix = _load_col(cells)
    loads = sorted(cells[load].unique().drop_nulls().to_list())
    if not loads:
        return None
    at = np.linspace(0, len(loads) - 1, min(len(loads), max_loads)).round().astype(int)
    picks = [loads[i] for i in sorted(set(at.tolist()))]
    chosen = cells.filter(pl.col(load).is_in(picks))
    # Only two columns of the chosen cells are read: the hive filter skips the other cells' files.
    keep = pl.col("cell_id").is_in(chosen["cell_id"].to_list())
    if max_replicas is not None:  # rows are sorted by replica: row-group statistics skip the rest
        keep = keep & (pl.col("replica") < max_replicas)
    data = samples.filter(keep).select("cell_id", metric).group_by("cell_id").agg(pl.col(metric)).collect()
    if not data.height:
        return None
    by_cell = dict(zip(data["cell_id"].to_list(), data[metric].to_list()))
    topologies = chosen["topology"].unique(maintain_order=True).to_list()
    styles = _policy_styles(cells, selfish)
    panels = [(topo, lv) for topo in topologies for lv in picks]
    if len(topologies) == 1 and len(picks) > 2:  # one topology: wrap its loads two by two, not one long strip
        cols = 2
        fig, axes = _figure(-(-len(picks) // 2), 2, (5.0, 3.5), sharey=True)
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
    else:
        cols = len(picks)  # same load down a column: those panels share the x-scale
        fig, axes = _figure(len(topologies), cols, (4.3, 3.3), sharex="col", sharey=True)
    rows = -(-len(panels) // cols)
    name = _CDF_METRICS.get(metric, (None, metric))[1]
    requests = []
    for k, (topo, lv) in enumerate(panels):
        r, c = divmod(k, cols)
        ax = axes[k]
        here = chosen.filter((pl.col("topology") == topo) & (pl.col(load) == lv))
        for cell_id, pol in zip(here["cell_id"].to_list(), here["policy"].to_list()):
            values = by_cell.get(cell_id)
            if values is None:
                continue
            xs, ps = _ecdf(np.asarray(values, dtype=float))
            requests.append(len(values))
            style = {key: v for key, v in styles[pol].items() if key not in ("marker", "markersize")}
            ax.plot(xs, ps, drawstyle="steps-post", **style)
        ax.set_xscale("log")
        ax.set_title(f"{topo}, {prefix}{lv:g}", fontsize=9)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        if r == rows - 1 or k + cols >= len(panels):
            ax.set_xlabel(f"{name} (ms)")
        if c == 0:
            ax.set_ylabel("share of requests ≤ x")
    # ticks at the quantiles one reads off a latency CDF; the P99 tick is the tail's line
    axes[0].set_ylim(0, 1.01)
    axes[0].set_yticks(_CDF_TICKS, [f"{p:.2f}" for p in _CDF_TICKS])
    for ax in axes[: len(panels)]:  # each x-scale gets ticks fitted to its own range
        _log_ticks(ax.xaxis, *ax.get_xlim())
    lo, hi = (min(requests), max(requests)) if requests else (0, 0)
    per_cell = f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"
    pooled = "all replicas" if max_replicas is None else f"replicas 0 to {max_replicas - 1}"
    fig.suptitle(
        f"Empirical CDF of per-request {name} per policy, {pooled} pooled ({per_cell} requests a cell)", fontsize=11
    )
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


def _samples_and_cells(root: Path) -> tuple[pl.LazyFrame, pl.DataFrame, dict[str, Any]] | None:
    """The run's samples and cell map, or None when there are none to read (samples off)."""
    try:
        run = load_run(root)
        cells = run.cells
        wanted = ("cell_id", "topology", "load_axis", "concurrency", "rate", "policy", "policy_kind")
        cells = cells.select([c for c in wanted if c in cells.collect_schema().names()]).collect()
        return run.samples, cells, run.manifest
    except FileNotFoundError:
        return None


_CDF_ROWS_PER_CELL = 250_000  # enough for a smooth CDF down to its P99.9


def _cdf_replica_cap(run: dict[str, Any]) -> int | None:
    """How many replicas the CDFs pool: all unless a cell holds more than _CDF_ROWS_PER_CELL rows."""
    replicas, requests = run.get("replicas"), run.get("requests")
    if not replicas or not requests:
        return None
    cap = max(1, _CDF_ROWS_PER_CELL // int(requests))
    return cap if cap < int(replicas) else None


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


_GAME_FIGURES = {
    "pd_game.png": "pd_game_path",
    "planner.png": "planner_moves_path",
    "cache_game.png": "cache_game_path",
}


def figure_names(root: str | Path) -> list[str]:
    """The figures of the reduced run in DIR, by file name, in the order plot_run lists them."""
    run_dir = RunDir(root)
    names = []
    if _height(run_dir.poa_path):
        names += ["poa_vs_load.png", "poa_heatmap.png"]
    if _height(run_dir.summary_path):
        names += ["ttft_p99.png", "pareto.png"]
    names += [name for name, attr in _GAME_FIGURES.items() if _height(getattr(run_dir, attr))]
    if _samples_and_cells(run_dir.root) is not None:
        names += [name for name, _ in _CDF_METRICS.values()]
    return names


def _height(path: Path) -> int:
    return pl.scan_parquet(path).select(pl.len()).collect().item() if path.exists() else 0


def draw_figure(root: str | Path, name: str) -> Path | None:
    """Draw one of figure_names(DIR) into DIR/plots/ from the run's files; its path, or None where
    there is nothing to draw (a CDF of a run whose samples hold no requests)."""
    run_dir = RunDir(root)
    path = run_dir.plots_dir / name
    run_dir.plots_dir.mkdir(parents=True, exist_ok=True)
    if name in _GAME_FIGURES:
        game = pl.read_parquet(run_dir.pd_game_path) if run_dir.pd_game_path.exists() else None
        if name == "planner.png":
            return _save(planner_figure(pl.read_parquet(run_dir.planner_moves_path), game), path)
        if name == "pd_game.png":
            return _save(pd_game_figure(game), path)
        return _save(cache_game_figure(pl.read_parquet(run_dir.cache_game_path)), path)
    summary = pl.read_parquet(run_dir.summary_path)
    poa = pl.read_parquet(run_dir.poa_path)
    selfish = poa["selfish_policy"][0] if poa.height and "selfish_policy" in poa.columns else None
    if name == "poa_vs_load.png":
        return plot_poa_vs_load(poa, path, replicas=_replicas(summary))
    if name == "poa_heatmap.png":
        return plot_poa_heatmap(poa, path, replicas=_replicas(summary))
    if name == "ttft_p99.png":
        return plot_ttft_p99(summary, path, selfish=selfish)
    if name == "pareto.png":
        return plot_pareto(summary, path, selfish=selfish)
    metric = next((m for m, (file, _) in _CDF_METRICS.items() if file == name), None)
    if metric is None:
        raise ValueError(f"no figure called {name!r} (one of {figure_names(root)})")
    found = _samples_and_cells(run_dir.root)
    if found is None:
        return None
    samples, cells, manifest = found
    cap = _cdf_replica_cap(manifest.get("grid", {}).get("run", {}))
    fig = latency_cdf_figure(samples, cells, metric, selfish=selfish, max_replicas=cap)
    return None if fig is None else _save(fig, path)


class Drawers(Protocol):
    """Processes that draw figures by name (poa_mc.plots.figure_workers.FigureWorkers, which calls
    back into this module: the protocol keeps the dependency one way)."""

    count: int

    def draw(self, root: str | Path, names: list[str]) -> list[Path | None]: ...


def plot_run(root: str | Path, workers: Drawers | None = None) -> list[Path]:
    """Draw every figure of a reduced run into DIR/plots/; returns the paths written. With
    `workers` (poa_mc.plots.figure_workers), the figures are drawn in their processes, in parallel."""
    names = figure_names(root)
    if workers is not None and workers.count:
        paths = workers.draw(root, names)
    else:
        paths = [draw_figure(root, name) for name in names]
    return [p for p in paths if p is not None]
