import shutil

import numpy as np
import polars as pl
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.text import Text

from poa_mc.model.config import loads_grid
from poa_mc.plots.cdf_figures import _cdf_replica_cap, latency_cdf_figure
from poa_mc.plots.figures import plot_run
from poa_mc.plots.run_figures import (
    pareto_figure,
    pareto_front,
    plot_poa_heatmap,
    plot_poa_vs_load,
    poa_heatmap_figure,
    poa_vs_load_figure,
    ttft_p99_figure,
)
from poa_mc.plots.style import _log_ticks, has_intervals, legend_columns, no_interval_note, thin_load_labels
from poa_mc.run.runner import run_grid
from tests import fake_engine
from tests.grids_for_tests import SMALL

PNG = b"\x89PNG\r\n\x1a\n"
ALL = ["e2e_cdf.png", "pareto.png", "poa_heatmap.png", "poa_vs_load.png", "ttft_cdf.png", "ttft_p99.png"]


def _run(out, grid_text):
    report = run_grid(loads_grid(grid_text), out=out, simulate=fake_engine.simulate, quiet=True)
    assert report.reduced
    return out


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("plots") / "run", SMALL)


@pytest.fixture(scope="module")
def one_replica(tmp_path_factory):
    assert "replicas = 6" in SMALL
    return _run(tmp_path_factory.mktemp("plots1") / "run", SMALL.replace("replicas = 6", "replicas = 1"))


def _texts(fig: Figure) -> str:
    fig.canvas.draw()  # tick labels exist only once drawn
    return "\n".join(t.get_text() for t in fig.findobj(Text))


def _bands(fig: Figure) -> int:
    return sum(isinstance(c, PolyCollection) for ax in fig.axes for c in ax.collections)


def _with_poa_hat(poa: pl.DataFrame, intervals: bool) -> pl.DataFrame:
    # The fake engine leaves PoA-hat NaN; the heatmap needs values to show.
    v = pl.lit(1.2) + pl.col("point").cast(pl.Float64) * 0.1
    lo, hi = (v - 0.01, v + 0.01) if intervals else (pl.lit(np.nan), pl.lit(np.nan))
    return poa.with_columns(v.alias("poa_hat"), lo.alias("poa_hat_lo"), hi.alias("poa_hat_hi"))


def test_plot_run_writes_every_figure(reduced):
    paths = plot_run(reduced)
    assert sorted(p.name for p in paths) == ALL
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 10_000
    assert not list((reduced / "plots").glob(".*.tmp"))  # written atomically, nothing left behind


def test_run_without_samples_still_plots_the_rest(reduced, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reduced, run)
    shutil.rmtree(run / "samples")
    shutil.rmtree(run / "plots")
    paths = plot_run(run)
    assert sorted(p.name for p in paths) == ["pareto.png", "poa_heatmap.png", "poa_vs_load.png", "ttft_p99.png"]
    assert not list((run / "plots").glob("*cdf*"))


def test_one_replica_figures_say_so_and_draw_no_bands(one_replica, reduced):
    summary = pl.read_parquet(one_replica / "summary.parquet")
    poa = pl.read_parquet(one_replica / "poa.parquet")
    assert (summary["replicas"] == 1).all() and not has_intervals(summary, ("ttft_p99_ms",))
    assert sorted(p.name for p in (one_replica / "plots").glob("*.png")) == ALL  # drawn by the run itself
    for fig in (
        ttft_p99_figure(summary, replicas=1),
        poa_vs_load_figure(poa, replicas=1),
        poa_heatmap_figure(_with_poa_hat(poa, intervals=False), replicas=1),
    ):
        text = _texts(fig)
        assert "1 replica: no intervals" in text and "95%" not in text and "[" not in text
        assert _bands(fig) == 0
    # the same figures of a 6-replica run do draw and label their bands
    many = pl.read_parquet(reduced / "summary.parquet")
    fig = ttft_p99_figure(many, replicas=6)
    assert "95% bands" in _texts(fig) and "no intervals" not in _texts(fig) and _bands(fig) > 0


def test_heatmap_names_the_selfish_policy_and_shows_intervals(reduced):
    poa = _with_poa_hat(pl.read_parquet(reduced / "poa.parquet"), intervals=True)
    fig = poa_heatmap_figure(poa, replicas=6)
    text = _texts(fig)
    assert "selfish policy greedy" in text
    assert "PoA-hat of greedy" in text  # colorbar label
    assert "1.200\n[1.190, 1.210]" in text and "1.500\n[1.490, 1.510]" in text


def test_shared_y_scale_and_one_legend(reduced):
    summary = pl.read_parquet(reduced / "summary.parquet")
    poa = pl.read_parquet(reduced / "poa.parquet")
    for fig in (ttft_p99_figure(summary), poa_vs_load_figure(poa), pareto_figure(summary)):
        a, b = fig.axes[:2]
        assert a.get_shared_y_axes().joined(a, b)
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    labels = [t.get_text() for t in pareto_figure(summary, selfish="greedy").legends[0].get_texts()]
    assert "greedy (selfish)" in labels and any(lab.startswith("Pareto front") for lab in labels)


def test_cdf_panels_per_topology_and_load(reduced):
    import poa_mc

    run = poa_mc.load(reduced)
    fig = latency_cdf_figure(run.samples, run.cells.collect(), "ttft_ms")
    titles = sorted(ax.get_title() for ax in fig.axes if ax.get_visible())
    assert titles == ["1P/2D, C=32", "1P/2D, C=4", "1P/3D, C=32", "1P/3D, C=4"]
    assert all(ax.get_xscale() == "log" for ax in fig.axes)
    # every policy drawn in every panel, reaching 1 at the largest sample
    for ax in fig.axes:
        assert len(ax.get_lines()) == 2
        assert all(line.get_ydata()[-1] == 1.0 for line in ax.get_lines())
    assert "all replicas pooled (288 requests a cell)" in fig.get_suptitle()  # 6 replicas x 48 requests
    # a huge run pools its first replicas only, and says so
    few = latency_cdf_figure(run.samples, run.cells.collect(), "e2e_ms", max_replicas=2)
    assert "replicas 0 to 1 pooled (96 requests a cell)" in few.get_suptitle()
    assert _cdf_replica_cap({"replicas": 65536, "requests": 400}) == 625
    assert _cdf_replica_cap({"replicas": 16, "requests": 1200}) is None
    empty = pl.LazyFrame(schema={"cell_id": pl.String, "replica": pl.Int32})  # what load() gives without samples
    assert latency_cdf_figure(empty, run.cells.collect(), "ttft_ms") is None


def test_pareto_front_hand_made():
    x = [1, 2, 3, 3, 2, np.nan, 4, 4]
    y = [10, 5, 7, 6, 5, 1, 20, 20]
    # (1,10) and (3,7) dominated; the (2,5) pair and the (4,20) pair tie, so all four stay; NaN never
    assert pareto_front(x, y).tolist() == [False, True, False, True, True, False, True, True]
    assert pareto_front([1, 2, 3], [3, 2, 1]).tolist() == [False, False, True]
    assert pareto_front([], []).tolist() == []


def test_pareto_front_matches_brute_force():
    g = np.random.default_rng(3)
    x, y = g.integers(0, 12, 300).astype(float), g.integers(0, 12, 300).astype(float)
    dominated = [bool(np.any((x >= x[i]) & (y <= y[i]) & ((x > x[i]) | (y < y[i])))) for i in range(x.size)]
    assert pareto_front(x, y).tolist() == [not d for d in dominated]


def test_load_labels_thin_out_without_collisions():
    paper = [1, 2, 4, 8, 16, 32, 64, 80, 96, 112, 128, 144, 160, 192, 256, 384, 512]
    kept = thin_load_labels(paper, log=True, width_in=4.0)
    assert {1, 2, 4, 8, 16, 32, 64, 128, 256, 512} <= set(kept)
    assert not {80, 96, 112, 144} & set(kept)
    assert thin_load_labels(paper, log=True, width_in=60.0) == paper  # room for all: all labelled
    assert thin_load_labels([8, 48, 160], log=False, width_in=4.0) == [8, 48, 160]


def test_log_axis_labels_between_decades():
    fig = Figure()
    ax = fig.subplots()
    ax.set_yscale("log")
    ax.set_ylim(12, 50)
    _log_ticks(ax.yaxis, 12, 50)
    fig.canvas.draw()
    labels = {t.get_text() for t in ax.get_yticklabels() if 12 <= t.get_position()[1] <= 50}
    assert {"15", "20", "30"} <= labels and not any("$" in lab for lab in labels)


def test_small_helpers():
    frame = pl.DataFrame({"a_lo": [np.nan, None], "a_hi": [np.nan, 2.0]})
    assert not has_intervals(frame, ("a",))
    assert has_intervals(frame.with_columns(pl.Series("a_lo", [np.nan, 1.0])), ("a",))
    assert no_interval_note(1) == "1 replica: no intervals"
    assert legend_columns([10, 10, 10], 10.0, 3) == 3
    assert legend_columns([70, 70, 70, 70], 7.0, 4) == 1


def test_plots_survive_nan_and_inf(reduced, tmp_path):
    poa = pl.read_parquet(reduced / "poa.parquet")
    poa = poa.with_columns(
        pl.when(pl.col("point") == 0).then(np.nan).otherwise(pl.col("poa_hat")).alias("poa_hat"),
        pl.when(pl.col("point") == 1).then(np.inf).otherwise(pl.col("poa_cf_hi")).alias("poa_cf_hi"),
    )
    assert plot_poa_vs_load(poa, tmp_path / "a.png").read_bytes()[:8] == PNG
    assert plot_poa_heatmap(poa, tmp_path / "b.png").read_bytes()[:8] == PNG


def test_a_poa_hat_below_one_is_said_not_to_beat_the_optimum(reduced):
    poa = pl.read_parquet(reduced / "poa.parquet")
    note = "not better than optimal"
    assert note not in _texts(poa_vs_load_figure(poa.with_columns(pl.lit(1.3).alias("poa_hat"))))
    dipped = poa.with_columns(pl.lit(0.93).alias("poa_hat"))  # the paper's frozen flavour can do this
    assert note in _texts(poa_vs_load_figure(dipped))


def test_the_winner_is_named_even_among_many_kv_settings():
    """More kv settings than a legend names: the one with the lowest TTFT P99 at some load is drawn
    in colour and its label says where it wins, never one of the grey lines (issue: kv-t1 hidden)."""
    from poa_mc.plots.run_figures import _lowest
    from poa_mc.plots.style import _policy_styles

    names = [f"kv-{i}" for i in range(12)]
    rows = [
        {"topology": "2P/8D", "concurrency": c, "policy": p, "policy_kind": "kv",
         "ttft_p99_ms": 100.0 + i - (50.0 if (p == "kv-9" and c >= 120) else 0.0)}
        for c in (40, 120, 160) for i, p in enumerate(names)
    ]  # fmt: skip
    summary = pl.DataFrame(rows)
    best = _lowest(summary, "ttft_p99_ms", "concurrency")
    assert best == {"kv-0": 1, "kv-9": 2}
    styles = _policy_styles(summary, "kv-0", best)
    assert styles["kv-9"]["color"] != "grey" and styles["kv-9"]["label"] == "kv-9 (best at 2 loads)"
    assert styles["kv-0"]["label"] == "kv-0 (selfish) (best at 1 load)"
    assert styles["kv-5"]["color"] == "grey"
