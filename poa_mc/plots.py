"""Figures of a reduced run (PNG, matplotlib Agg backend, no display needed).

plots/poa_vs_load.png   PoA-hat and counterfactual PoA against load, one panel per topology,
                        95% interval bands
plots/poa_heatmap.png   PoA-hat over topology x load
plots/ttft_p99.png      TTFT P99 against load, one line per policy, one panel per topology
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.colors import LogNorm, Normalize

from poa_mc.store import RunDir


def _load_col(df: pl.DataFrame) -> tuple[str, str]:
    if df.height and df["load_axis"][0] == "rate":
        return "rate", "arrival rate (req/s)"
    return "concurrency", "concurrency C (closed-loop clients)"


def _panels(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _finite(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), a, np.nan)


def _set_load_scale(ax: plt.Axes, x: np.ndarray) -> None:
    x = np.unique(x[np.isfinite(x) & (x > 0)])
    if x.size > 1 and x.max() / x.min() >= 8:
        ax.set_xscale("log", base=2)
    if 0 < x.size <= 12:  # label the simulated loads themselves, not powers of two
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()
        if x.size > 6:  # dense loads on a log axis crowd their labels: tilt them
            ax.tick_params(axis="x", labelrotation=45, labelsize=8)


_REGIME_COLOURS = {"below": "tab:green", "transition": "tab:orange", "saturated": "tab:red"}


def _shade_regimes(ax: plt.Axes, d: pl.DataFrame, x: np.ndarray) -> None:
    """Shade each load point's regime (midpoints between loads as edges) and mark the knee."""
    if "regime" not in d.columns or not d.height:
        return
    regimes = d["regime"].to_list()
    edges = np.r_[x[0], np.sqrt(x[:-1] * x[1:]) if np.all(x > 0) else (x[:-1] + x[1:]) / 2, x[-1]]
    seen = set()
    for i, regime in enumerate(regimes):
        colour = _REGIME_COLOURS.get(regime)
        if colour is None:
            continue
        ax.axvspan(edges[i], edges[i + 1], color=colour, alpha=0.08, linewidth=0,
                   label=None if regime in seen else f"regime: {regime}")  # fmt: skip
        seen.add(regime)
    knee = d["knee"][0] if "knee" in d.columns else None
    if knee is not None and np.isfinite(knee):
        ax.axvline(knee, color="black", linestyle="--", linewidth=1,
                   label=f"knee {knee:.0f} [{d['knee_lo'][0]:.0f}, {d['knee_hi'][0]:.0f}]")  # fmt: skip


def plot_poa_vs_load(poa: pl.DataFrame, path: Path) -> Path:
    load, xlabel = _load_col(poa)
    topologies = poa["topology"].unique(maintain_order=True).to_list()
    fig, axes = _panels(len(topologies))
    kind = poa["social_cost_kind"][0] if poa.height else ""
    for ax, topo in zip(axes, topologies):
        d = poa.filter(pl.col("topology") == topo).sort(load)
        x = d[load].to_numpy().astype(float)
        how = ", ".join(
            str(d[c][0]) + suffix
            for c, suffix in (("poa_stage", " decision"), ("poa_cost", " cost"), ("poa_pricing", " pricing"))
            if c in d.columns and d.height
        )
        _shade_regimes(ax, d, x)
        for col, label, color in (
            ("poa_hat", f"PoA-hat ({how})", "tab:red"),
            ("poa_cf", f"counterfactual PoA ({kind}, measured)", "tab:blue"),
        ):
            y = _finite(d[col].to_numpy())
            ax.plot(x, y, marker="o", color=color, label=label)
            ax.fill_between(
                x,
                _finite(d[f"{col}_lo"].to_numpy()),
                _finite(d[f"{col}_hi"].to_numpy()),
                color=color,
                alpha=0.2,
                linewidth=0,
            )
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
        ymax = np.nanmax(np.r_[_finite(d["poa_hat_hi"].to_numpy()), _finite(d["poa_cf_hi"].to_numpy()), 1.0])
        if ymax > 20:
            ax.set_yscale("log")
        _set_load_scale(ax, x)
        ax.set_title(f"{topo}: Price of Anarchy vs load")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ratio to the best found (1 = no loss)")
        ax.grid(True, alpha=0.3)
        # below the axes: regime shading and the knee would otherwise sit under the legend
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2, frameon=False)
    fig.suptitle("Price of Anarchy with 95% confidence bands (across replicas)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_poa_heatmap(poa: pl.DataFrame, path: Path) -> Path:
    load, xlabel = _load_col(poa)
    topologies = poa["topology"].unique(maintain_order=True).to_list()
    loads = sorted(poa[load].unique().to_list())
    z = np.full((len(topologies), len(loads)), np.nan)
    for row in poa.iter_rows(named=True):
        z[topologies.index(row["topology"]), loads.index(row[load])] = row["poa_hat"]
    z = _finite(z)
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 + 0.6 * len(loads)), 2.6 + 0.7 * len(topologies)))
    good = z[np.isfinite(z) & (z > 0)]
    norm = (
        LogNorm(vmin=good.min(), vmax=good.max())
        if good.size and good.max() / good.min() > 10
        else Normalize(vmin=np.nanmin(z) if good.size else 0, vmax=np.nanmax(z) if good.size else 1)
    )
    im = ax.imshow(z, aspect="auto", cmap="magma_r", norm=norm)
    for i in range(z.shape[0]):
        for j in range(z.shape[1]):
            if np.isfinite(z[i, j]):
                frac = norm(z[i, j])
                ax.text(
                    j,
                    i,
                    f"{z[i, j]:.3g}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if frac > 0.6 else "black",
                )
    ax.set_xticks(range(len(loads)), [f"{v:g}" for v in loads])
    ax.set_yticks(range(len(topologies)), topologies)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("topology (prefill/decode workers)")
    ax.set_title("PoA-hat of the selfish policy over topology x load", fontsize=10)
    fig.colorbar(im, ax=ax, label="PoA-hat (ratio)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_NAMED_MAX = 8  # policies drawn in colour with a legend entry; the rest as grey lines


def _named_policies(summary: pl.DataFrame, policies: list[str]) -> list[str]:
    """Which policies get a colour: all when few; else the non-kv kinds (adaptive, oracle, ...)
    and the first kv policy (the grid's default), up to _NAMED_MAX."""
    if len(policies) <= _NAMED_MAX:
        return policies
    kinds = dict(zip(summary["policy"].to_list(), summary["policy_kind"].to_list()))
    first_kv = next((p for p in policies if kinds.get(p) == "kv"), policies[0])
    named = [p for p in policies if p == first_kv or kinds.get(p) != "kv"]
    return named[:_NAMED_MAX]


def plot_ttft_p99(summary: pl.DataFrame, path: Path) -> Path:
    load, xlabel = _load_col(summary)
    topologies = summary["topology"].unique(maintain_order=True).to_list()
    policies = summary["policy"].unique(maintain_order=True).to_list()
    named = _named_policies(summary, policies)
    fig, axes = _panels(len(topologies))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, topo in zip(axes, topologies):
        grey_label = f"{len(policies) - len(named)} other kv settings"
        for pol in policies:
            d = summary.filter((pl.col("topology") == topo) & (pl.col("policy") == pol)).sort(load)
            if not d.height:
                continue
            x = d[load].to_numpy().astype(float)
            y = d["ttft_p99_ms"].to_numpy()
            if pol not in named:
                ax.plot(x, y, color="grey", alpha=0.5, linewidth=0.8, label=grey_label)
                grey_label = None
                continue
            c = colors[named.index(pol) % len(colors)]
            ax.plot(x, y, marker="o", markersize=4, color=c, label=pol)
            ax.fill_between(
                x, d["ttft_p99_ms_lo"].to_numpy(), d["ttft_p99_ms_hi"].to_numpy(), color=c, alpha=0.2, linewidth=0
            )
        _set_load_scale(ax, summary[load].to_numpy().astype(float))
        ax.set_yscale("log")
        ax.set_title(f"{topo}: TTFT P99 vs load")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("TTFT P99 (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(title="policy", fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2, frameon=False)
    fig.suptitle("Time to first token, 99th percentile per replica, 95% bands")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_run(root: str | Path) -> list[Path]:
    """Draw every figure of a reduced run into DIR/plots/; returns the paths written."""
    run_dir = RunDir(root)
    summary = pl.read_parquet(run_dir.summary_path)
    poa = pl.read_parquet(run_dir.poa_path)
    run_dir.plots_dir.mkdir(parents=True, exist_ok=True)
    out = []
    if poa.height:
        out.append(plot_poa_vs_load(poa, run_dir.plots_dir / "poa_vs_load.png"))
        out.append(plot_poa_heatmap(poa, run_dir.plots_dir / "poa_heatmap.png"))
    if summary.height:
        out.append(plot_ttft_p99(summary, run_dir.plots_dir / "ttft_p99.png"))
    return out
