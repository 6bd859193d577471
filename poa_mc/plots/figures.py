"""Which figures a reduced run has, and drawing them by name from its files (PNG, drawn
off-screen, no display needed).

plots/poa_vs_load.png   PoA-hat and counterfactual PoA against load, one panel per topology
plots/poa_heatmap.png   PoA-hat of the selfish policy over topology x load, each cell with its interval
plots/ttft_p99.png      TTFT P99 against load, one line per policy, one panel per topology
plots/pareto.png        throughput against TTFT P99, one line per policy over load, the Pareto front marked
plots/ttft_cdf.png      empirical CDF of per-request TTFT per policy, one panel per (topology, load)
plots/e2e_cdf.png       the same for end-to-end latency
plots/pd_game.png       grids with [games.pd]: the prefill/decode split game, one panel per load
plots/planner.png       grids with [games.pd.planner]: the Planner moving the split over time
plots/cache_game.png    grids with [games.cache]: the caching game, one panel per (topology, load)
plots/stages.png        grids with [schedule]: each stage's TTFT and request rate over time

The CDFs read the per-request samples; a run without samples gets the other four. Intervals are
95% across replicas; a run with one replica has none, and its figures say so instead of drawing
bands of NaN.

`plot_run` draws every figure a run has (`figure_names`), each by `draw_figure` from the run's
files: in this process, or in the worker processes `poa-mc run` starts (poa_mc.plots.figure_workers).

Drawing by name from the run's files, and nothing else, is what lets a worker process draw a
figure with no more than the run's directory and the figure's file name, and the PNG be the same
to the byte as one drawn in-process. The figures themselves are drawn by run_figures.py,
cdf_figures.py and game_figures.py, with the helpers they share in style.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import polars as pl

from poa_mc.io.store import RunDir
from poa_mc.plots.cdf_figures import _CDF_METRICS, _cdf_replica_cap, _samples_and_cells, latency_cdf_figure
from poa_mc.plots.game_figures import cache_game_figure, pd_game_figure, planner_figure
from poa_mc.plots.run_figures import _replicas, plot_pareto, plot_poa_heatmap, plot_poa_vs_load, plot_ttft_p99
from poa_mc.plots.stages_figure import stages_figure
from poa_mc.plots.style import _save

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
    if _height(run_dir.stages_path):
        names.append("stages.png")
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
    if name == "stages.png":
        return _save(stages_figure(pl.read_parquet(run_dir.stages_path), selfish), path)
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
