"""plots/stages.png: a load schedule's stages ([schedule], stages.parquet) over time, one column per
topology: TTFT P50 and P99 per stage (top) and each stage's request rate against its offered rate
or concurrency (bottom), one colour per policy, each stage drawn across its window (first arrival
to last completion, replicas' means) with its 95% interval as a band."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from poa_mc.plots.style import _figure, _legend_below, _panel_size, _policy_styles

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _once(label: str, i: int) -> str:
    """A legend entry for a line's first segment only."""
    return label if i == 0 else "_"


def stages_figure(stages: pl.DataFrame, selfish: str | None = None) -> Figure:
    topologies = stages["topology"].unique(maintain_order=True).to_list()
    n = len(topologies)
    fig, axes = _figure(2, n, _panel_size(n), sharex="col")
    styles = _policy_styles(stages, selfish)
    open_loop = "offered_rps" in stages.columns and stages["offered_rps"].drop_nulls().len() > 0
    for j, topo in enumerate(topologies):
        top, bottom = axes[j], axes[n + j]
        for policy, st in styles.items():
            d = stages.filter((pl.col("topology") == topo) & (pl.col("policy") == policy)).sort("stage")
            if d.height == 0:
                continue
            colour = st["color"]
            for i, row in enumerate(d.iter_rows(named=True)):
                x = (row["stage_start_ms"] / 1000.0, row["stage_end_ms"] / 1000.0)
                for q, ls in (("p50", ":"), ("p99", "-")):
                    v, lo, hi = (row.get(f"ttft_{q}_ms{p}") for p in ("", "_lo", "_hi"))
                    if v is None:
                        continue
                    top.plot(x, (v, v), color=colour, ls=ls, lw=1.8, label=_once(f"{st['label']} TTFT {q.upper()}", i))
                    if lo is not None and hi is not None:
                        top.fill_between(x, lo, hi, color=colour, alpha=0.15, lw=0)
                v, lo, hi = (row.get(f"throughput_rps{p}") for p in ("", "_lo", "_hi"))
                bottom.plot(x, (v, v), color=colour, lw=1.8, label=_once(f"{st['label']} completed", i))
                if lo is not None and hi is not None:
                    bottom.fill_between(x, lo, hi, color=colour, alpha=0.15, lw=0)
                if open_loop:
                    off = row["offered_rps"]
                    bottom.plot(x, (off, off), color="0.3", ls="--", lw=1.0, label=_once("offered", i + j))
                bottom.text(
                    sum(x) / 2, 0.02, f"{row['stage']}", transform=bottom.get_xaxis_transform(), ha="center", fontsize=7
                )
        top.set_title(topo)
        top.set_yscale("log")
        top.set_ylabel("TTFT ms (per stage)")
        bottom.set_ylabel("requests/s (per stage)")
        bottom.set_xlabel("simulated time s (stage numbers at the foot)")
        bottom.set_ylim(bottom=0)
    load = "rate" if open_loop else "concurrency"
    fig.suptitle(f"load schedule ({load} stages), 95% intervals across replicas")
    _legend_below(fig, axes)
    return fig
