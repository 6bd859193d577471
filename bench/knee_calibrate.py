"""What `poa-mc calibrate` can tell about the paper's knee: two explanations of a knee at C in
(96, 128] on the 70B 1P/5D preset (docs/paper-comparison.md), each simulated as a benchmark, and
each calibrated with and without the other's mechanism.

  pool:  the preset as shipped (0.2 ms of prefill host time per request) behind a client pool of
         100 connections (aiohttp's and httpx's default);
  host:  no pool, 9 ms of prefill host time per request (what a knee in (96, 128] needs there).

Each truth is one run of 1,200 measured requests per load (C = 64, 96, 112, 128, 160) at another
seed, written as `vllm bench serve` result files; each deployment fits the prefill host time per
request and per pass (the aic table takes no scale) to TTFT mean and P99, ITL mean and throughput,
with the pool (max_connections = 100) or without it. A model that holds the truth's mechanism fits
within the benchmark's noise; one that lacks it cannot: its largest error per figure says so.

    python bench/knee_calibrate.py [--out /tmp/knee-cal]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from poa_mc.engine.engine import simulate  # noqa: E402
from poa_mc.model.config import loads_grid  # noqa: E402
from poa_mc.run.calibrate.deployment import load_deployment  # noqa: E402
from poa_mc.run.calibrate.figures import apply_spec, cell_figures  # noqa: E402
from poa_mc.run.calibrate.report import calibrate  # noqa: E402
from tests.calibrate_truth import write_vllm  # noqa: E402

PRESET = Path(__file__).resolve().parent.parent / "poa_mc" / "data" / "grids" / "paper-70b-1p5d.toml"
LOADS = [64, 96, 112, 128, 160]
REQUESTS = 1200
FIGS = ("ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99", "itl_mean", "e2e_mean", "e2e_p99", "throughput")
FITTED = ["ttft_mean", "ttft_p99", "itl_mean", "throughput"]
POOL = "\n[client]\nmax_connections = 100\n"
TRUTHS = {"pool": (POOL, {}), "host": ("", {"prefill_host_request_ms": 9.0})}


def base_grid(replicas: int, pool: str) -> str:
    """The preset with its static default router alone, the benchmark's loads, and the pool or not."""
    text = PRESET.read_text()
    text = text[: text.index("[[policy]]")]  # its own [run] ... [grid]
    text = re.sub(r"concurrency = \[[^\]]*\]", f"concurrency = {LOADS}", text)
    text = re.sub(r"replicas = \d+", f"replicas = {replicas}", text)
    text = re.sub(r"requests = \d+", f"requests = {REQUESTS}", text)
    text += '\n[[policy]]\nname = "dynamo-default"\nkind = "kv"\noverlap_weight = 1.0\ntemperature = 0.0\n'
    return text + pool


def measure(truth: str) -> dict[int, dict[str, float]]:
    pool, values = TRUTHS[truth]
    grid = loads_grid(base_grid(1, pool))
    out = {}
    for cell in grid.cells():
        res = simulate(apply_spec(cell.spec, values), replicas=1, requests=REQUESTS,
                       warmup=grid.run.warmup_for(cell.concurrency), seed=99, stream=cell.stream,
                       record_candidates=False)  # fmt: skip
        out[cell.concurrency] = dict(zip(FIGS, cell_figures(res, FIGS)))
    return out


def deployment(folder: Path, figs: dict[int, dict[str, float]], pool: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    files = [write_vllm(folder, c, figs[c], REQUESTS) for c in LOADS]
    text = base_grid(4, pool)
    text += "\n[calibrate]\nmeasured = " + json.dumps([f.name for f in files])
    text += "\nfit = { prefill_host_request_ms = [0.0, 20.0], prefill_host_pass_ms = [0.0, 10.0] }"
    text += f"\nfigures = {json.dumps(FITTED)}\nheld_out = false\n"
    p = folder / "deployment.toml"
    p.write_text(text)
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/knee-cal"))
    ap.add_argument("--bootstrap", type=int, default=0)
    a = ap.parse_args()
    for truth in TRUTHS:
        t0 = time.perf_counter()
        figs = measure(truth)
        said = [f"C={c} TTFT {f['ttft_mean']:.0f}/{f['ttft_p99']:.0f} ms, {f['throughput']:.1f} rps"
                for c, f in figs.items()]  # fmt: skip
        print(f"truth {truth}: " + "; ".join(said))
        for model, pool in (("with the pool", POOL), ("without the pool", "")):
            dep = load_deployment(deployment(a.out / truth / model.replace(" ", "-"), figs, pool))
            cal = calibrate(dep, simulate, bootstrap=a.bootstrap)
            f = cal.fit
            err = np.abs(f.simulated / np.array(dep.measured()) - 1.0).max(axis=0)
            values = ", ".join(
                f"{n} {v:.3g}" + ("" if np.isnan(lo) else f" [{lo:.3g}, {hi:.3g}]")
                for n, v, lo, hi in zip(f.names, f.values, f.lo, f.hi)
            )
            errors = ", ".join(f"{n} {e:.1%}" for n, e in zip(dep.figures, err))
            print(f"  model {model}: {values}; loss {f.loss:.4f}; largest |error| {errors}")
        print(f"  ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
