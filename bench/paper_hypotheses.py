"""The paper's fingerprints, mechanism by mechanism (docs/paper-comparison.md, "Hypothesis by
hypothesis").

Runs each paper preset (70B 1P/5D, 70B 1P/2D, 340B 1P/2D) under each variant below, with four of
its policies (the static default router, two other (temperature, overlap weight) settings and the
adaptive controller), and prints one row per (preset, variant): the knee of the static router's
mean-TTFT curve with its interval, the regimes it shows, PoA-hat (the preset's observed flavour)
at C = 64, 128 and 512, how far the router settings spread TTFT P99 below and above the knee, and
what the controller changes against the static router (TTFT P99 and PoA-hat) at C = 128 and 512.

    python bench/paper_hypotheses.py --out /tmp/hyp [--only 70b-1p5d] [--variants stack vllm ...] [--json F]
    python bench/paper_hypotheses.py --out /tmp/hyp --plot docs/img/paper-hypotheses.png   (from runs made)

Variants (every value from docs/sources.md; none fitted to the paper):
  stack       the released stack alone: Dynamo's mocker handover, no nodes (the presets before the
              handover and the links)
  vllm        + vLLM 0.14.1's NixlConnector handover
  preset      + nodes and links (3 HGX B200 nodes): the presets as shipped
  pool100     preset + a client pool of 100 connections (aiohttp's and httpx's default)
  pool2500    preset + AIPerf's default pool of 2,500
  pool100c    pool100, PoA-hat's observed cost from the client's TTFT ([poa] observed_from = "client")
  stack-pool  stack + the pool of 100 (the pool alone)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

PRESETS = ("paper-70b-1p5d", "paper-70b-1p2d", "paper-340b-1p2d")
KEEP = ("dynamo-default", "kv-t0.7-w1", "kv-t1-w0.1", "adaptive")
_MOCKER = {"handover": '"mocker"', "gpus_per_node": "0"}
_POOL = "\n[client]\nmax_connections = 100\n"
_CLIENT_POA = 'observed_from = "client"'
VARIANTS: dict[str, tuple[dict[str, str], str, str]] = {  # cluster keys, tables added, [poa] key
    "stack": (_MOCKER, "", ""),
    "vllm": ({"gpus_per_node": "0"}, "", ""),
    "preset": ({}, "", ""),
    "pool100": ({}, _POOL, ""),
    "pool100c": ({}, _POOL, _CLIENT_POA),
    "pool2500": ({}, "\n[client]\nmax_connections = 2500\n", ""),
    "stack-pool": (_MOCKER, _POOL, ""),
}


def _preset_text(name: str) -> str:
    from importlib import resources

    return (resources.files("poa_mc.data") / "grids" / f"{name}.toml").read_text()


def variant_grid(preset: str, variant: str) -> str:
    """The preset's TOML with four policies and the variant's cluster keys and tables."""
    text = _preset_text(preset)
    head, rest = text.split("[[policy]]", 1)
    blocks = rest.split("[[policy]]")
    tail_at = blocks[-1].find("\n[controller]")
    tail, blocks[-1] = blocks[-1][tail_at:], blocks[-1][:tail_at] + "\n"
    kept = [b for b in blocks if re.search(r'name = "([^"]+)"', b).group(1) in KEEP]
    keys, extra, poa_key = VARIANTS[variant]
    for key, value in keys.items():
        head, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", head)
        if not n:
            head = head.replace("[cluster]\n", f"[cluster]\n{key} = {value}\n", 1)
    head = head.replace(f'name = "{preset}"', f'name = "{preset}-{variant}"')
    if poa_key:
        tail = tail.replace("\n[poa]\n", f"\n[poa]\n{poa_key}\n", 1)
    return head + "".join("[[policy]]" + b for b in kept) + tail + extra


def fingerprints(out: Path) -> dict:
    s = pl.read_parquet(out / "summary.parquet")
    poa = pl.read_parquet(out / "poa.parquet")
    static = s.filter(pl.col("policy") == "dynamo-default").sort("concurrency")
    knee = static["knee"][0]
    row: dict = {
        "knee": None if knee is None or knee != knee else round(float(knee), 1),
        "knee_lo": None if knee is None or knee != knee else round(float(static["knee_lo"][0]), 1),
        "knee_hi": None if knee is None or knee != knee else round(float(static["knee_hi"][0]), 1),
        "regimes": sorted(set(static["regime"].to_list())),
    }
    for c in (64, 128, 512):
        at = poa.filter(pl.col("concurrency") == c)
        v, lo, hi = (float(at[k][0]) if len(at) else float("nan") for k in ("poa_hat", "poa_hat_lo", "poa_hat_hi"))
        row[f"poa_hat_{c}"] = [round(v, 2), round(lo, 2), round(hi, 2)] if v == v else None
    for c in (64, 512):
        at = s.filter(pl.col("concurrency") == c)
        p99 = at.filter(pl.col("policy") != "adaptive")["ttft_p99_ms"]
        row[f"router_spread_{c}"] = round(float(p99.max() / p99.min()), 2)  # worst/best static setting
        row[f"ttft_p99_{c}"] = round(float(at.filter(pl.col("policy") == "dynamo-default")["ttft_p99_ms"][0]), 1)
        row[f"rps_{c}"] = round(float(at.filter(pl.col("policy") == "dynamo-default")["throughput_rps"][0]), 1)
    for c in (128, 512):
        at = s.filter(pl.col("concurrency") == c)
        base = at.filter(pl.col("policy") == "dynamo-default")
        ctl = at.filter(pl.col("policy") == "adaptive")
        row[f"ctl_p99_gain_{c}"] = round(float(base["ttft_p99_ms"][0] / ctl["ttft_p99_ms"][0]), 2)  # > 1: lower
        row[f"ctl_p99_{c}"] = [round(float(ctl[k][0]), 1) for k in ("ttft_p99_ms", "ttft_p99_ms_lo", "ttft_p99_ms_hi")]
        row[f"static_p99_{c}"] = [
            round(float(base[k][0]), 1) for k in ("ttft_p99_ms", "ttft_p99_ms_lo", "ttft_p99_ms_hi")
        ]
    return row


def plot(out: Path, png: Path) -> None:
    """Mean TTFT over load (left) and PoA-hat (right) of the static router on 70B 1P/5D, 70B 1P/2D
    and 340B 1P/2D, as shipped and with a client pool of 100, beside the paper's knee (96, 128]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6))
    styles = {"preset": "-", "pool100": "--", "pool100c": ":"}
    colors = dict(zip(PRESETS, ("tab:blue", "tab:orange", "tab:green")))
    for preset in PRESETS:
        for variant, ls in styles.items():
            run = out / f"{preset}-{variant}" / "run"
            if not (run / "summary.parquet").exists():
                continue
            label = f"{preset.removeprefix('paper-')} {variant}"
            s = (
                pl.read_parquet(run / "summary.parquet")
                .filter(pl.col("policy") == "dynamo-default")
                .sort("concurrency")
            )
            if variant != "pool100c":
                ax.plot(s["concurrency"], s["ttft_mean_ms"], ls, color=colors[preset], marker=".", label=label)
            p = pl.read_parquet(run / "poa.parquet").sort("concurrency")
            bx.plot(p["concurrency"], p["poa_hat"], ls, color=colors[preset], marker=".", label=label)
    for a in (ax, bx):
        a.axvspan(96, 128, color="grey", alpha=0.2, label="the paper's knee, C in (96, 128]")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("concurrency C (closed loop)")
        a.grid(True, which="both", alpha=0.3)
    ax.set_ylabel("mean TTFT as the client sees it, ms")
    ax.set_title("static router: TTFT (a pool of 100: dashed)")
    bx.set_ylabel("PoA-hat, observed flavour")
    bx.set_title("PoA-hat (observed from the decision; dotted: from the client)")
    bx.axhspan(200, 309, color="red", alpha=0.1, label="the paper's explosion, 200-309")
    bx.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", default=None, help="presets (without 'paper-')")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, help="draw the runs already in --out into this PNG, run nothing")
    ap.add_argument("--table", action="store_true", help="print the rows of the runs already in --out, run nothing")
    a = ap.parse_args(argv)
    if a.plot:
        plot(a.out, a.plot)
        return 0
    if a.table:
        for preset in PRESETS:
            for variant in a.variants:
                run = a.out / f"{preset}-{variant}" / "run"
                if (run / "poa.parquet").exists():
                    print(json.dumps({"preset": preset, "variant": variant, **fingerprints(run)}))
        return 0
    presets = [p for p in PRESETS if a.only is None or p.removeprefix("paper-") in a.only]
    rows = []
    for preset in presets:
        for variant in a.variants:
            d = a.out / f"{preset}-{variant}"
            d.mkdir(parents=True, exist_ok=True)
            grid = d / "grid.toml"
            grid.write_text(variant_grid(preset, variant))
            t0 = time.perf_counter()
            cmd = [
                sys.executable,
                "-m",
                "poa_mc.cli.main",
                "run",
                "--grid",
                str(grid),
                "--out",
                str(d / "run"),
                "--quiet",
            ]
            subprocess.run(cmd, check=True)
            row = {"preset": preset, "variant": variant, "wall_s": round(time.perf_counter() - t0, 1)}
            row.update(fingerprints(d / "run"))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
