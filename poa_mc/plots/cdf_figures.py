"""The latency CDF figures of a run: the empirical CDF of per-request TTFT and end-to-end latency
per policy, one panel per (topology, load), read from the run's per-request samples.

They are apart from the other run figures (run_figures.py) because they read the samples, not the
reduced frames: a run without samples has none, and a run of many replicas pools only as many as
make a smooth CDF. matplotlib is imported inside the functions (style.py says why).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from poa_mc.io.load import load as load_run
from poa_mc.plots.style import _figure, _legend_below, _load_col, _log_ticks, _policy_styles

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_CDF_TICKS = (0.0, 0.25, 0.5, 0.75, 0.9, 0.99)
_CDF_METRICS = {"ttft_ms": ("ttft_cdf.png", "TTFT"), "e2e_ms": ("e2e_cdf.png", "end-to-end latency")}


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
