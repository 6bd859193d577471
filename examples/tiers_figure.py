"""What lower KV tiers change under the agentic trace: draws docs/img/tiers.png from a run of the
built-in `agentic-tiers` grid (or docs/img/tiers-g4.png from its G4 variant, docs/tiers.md) and
prints the figures docs/tiers.md quotes.

    poa-mc run --grid agentic-tiers --out runs/agentic-tiers
    python examples/tiers_figure.py runs/agentic-tiers [--out docs/img/tiers.png]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

import poa_mc  # noqa: E402

ALL_VARIANTS = {
    "g1": ("G1 (HBM) alone", "tab:red"),
    "g1+g2+g3": ("G1 + G2 + G3", "tab:blue"),
    "g1+g2+g3+g4": ("G1 + G2 + G3 + G4", "tab:green"),
}
TIERS = (("g1", 1.0), ("g2", 0.6), ("g3", 0.3), ("g4", 0.15))
TOPOLOGIES = {"1P/4D": "o", "2P/8D": "s"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--out", default="docs/img/tiers.png")
    ap.add_argument(
        "--title", default="agentic trace (80 multi-turn sessions), Llama-3.1-70B fp8 on B200 TP4 (aic table)"
    )
    args = ap.parse_args()
    run = poa_mc.load(args.run)
    s = run.summary.collect().with_columns(
        pl.col("topology").str.split(" ").list.get(0).alias("topo"),
        pl.col("topology").str.split(" ").list.get(1).alias("variant"),
    )
    p = run.poa.collect().with_columns(
        pl.col("topology").str.split(" ").list.get(0).alias("topo"),
        pl.col("topology").str.split(" ").list.get(1).alias("variant"),
    )
    present = set(s["variant"].to_list())
    variants = {k: v for k, v in ALL_VARIANTS.items() if k in present}
    tiers = [t for t in TIERS if f"hit_rate_{t[0]}" in s.columns]
    kv = s.filter(pl.col("policy") == "kv").sort("concurrency")
    cols = ["topo", "variant", "concurrency", "ttft_mean_ms", "ttft_p99_ms"]
    cols += [f"hit_rate_{t}" for t, _ in tiers] + ["onboard_ms_mean"]
    print(kv.select(cols))
    poa_cols = ["topology", "concurrency", "poa_cf", "poa_cf_lo", "poa_cf_hi", "best_policy"]
    print(p.sort("topo", "variant", "concurrency").select(poa_cols))

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    for (topo, variant), f in kv.group_by(["topo", "variant"], maintain_order=True):
        label, colour = variants[variant]
        x = f["concurrency"].to_numpy()
        y = f["ttft_mean_ms"].to_numpy()
        err = np.vstack([y - f["ttft_mean_ms_lo"].to_numpy(), f["ttft_mean_ms_hi"].to_numpy() - y])
        ax[0].errorbar(x, y, yerr=err, color=colour, marker=TOPOLOGIES[topo], capsize=3, label=f"{topo}, {label}")
    ax[0].set(xscale="log", yscale="log", xlabel="concurrency C (clients)", ylabel="mean TTFT, ms",
              title="TTFT, KV router")  # fmt: skip
    ticks = sorted(set(kv["concurrency"].to_list()))
    ax[0].set_xticks(ticks, [str(c) for c in ticks])
    ax[0].xaxis.set_minor_formatter(NullFormatter())
    ax[0].legend(fontsize=8)

    two = kv.filter(pl.col("topo") == "2P/8D")
    width = 0.76 / len(variants)
    loads = sorted(set(two["concurrency"].to_list()))
    for i, variant in enumerate(variants):
        f = two.filter(pl.col("variant") == variant).sort("concurrency")
        x = np.arange(len(loads)) + (i - (len(variants) - 1) / 2) * width
        bottom = np.zeros(len(loads))
        for tier, shade in tiers:
            h = f[f"hit_rate_{tier}"].to_numpy()
            if variant != "g1+g2+g3+g4" and tier == "g4":
                continue
            label = f"{variants[variant][0]}: {tier.upper()}" if variant != "g1" or tier == "g1" else None
            ax[1].bar(x, h, width, bottom=bottom, color=variants[variant][1], alpha=shade, edgecolor="black", lw=0.4,
                      label=label)  # fmt: skip
            bottom += h
    ax[1].set_xticks(np.arange(len(loads)), [str(c) for c in loads])
    # the legend above the bars, in room made for it
    ax[1].set(ylim=(0, 1.5 if len(variants) > 2 else 1.3), yticks=np.linspace(0, 1, 6))
    ax[1].legend(fontsize=7, loc="upper center", ncol=2)
    ax[1].set(xlabel="concurrency C", ylabel="prompt blocks found cached", title="hit rate by tier, 2P/8D, KV router")

    two_p = p.filter(pl.col("topo") == "2P/8D").sort("concurrency")
    for variant, (label, colour) in variants.items():
        f = two_p.filter(pl.col("variant") == variant)
        x = f["concurrency"].to_numpy()
        y = f["poa_cf"].to_numpy()
        err = np.vstack([y - f["poa_cf_lo"].to_numpy(), f["poa_cf_hi"].to_numpy() - y])
        ax[2].errorbar(x, y, yerr=err, color=colour, marker="s", capsize=3, label=label)
    ax[2].axhline(1.0, color="grey", lw=0.8, ls=":")
    ax[2].set(xscale="log", xlabel="concurrency C", ylabel="PoA (mean TTFT, KV router / best policy)",
              title="Price of Anarchy, 2P/8D (95% intervals)")  # fmt: skip
    ax[2].set_xticks(ticks, [str(c) for c in ticks])
    ax[2].xaxis.set_minor_formatter(NullFormatter())
    ax[2].legend(fontsize=8)
    fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
