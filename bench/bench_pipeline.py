"""The whole `poa-mc run` process on the reference cell, as a user waits for it.

The cell of bench/bench_engine.py (dynamo-mocker, isl 4096, osl 256, 16 prefix groups, prefix
ratio 0.5, prefill_first, kv, 1P/5D, C = 64, 2000 measured + 200 warm-up requests per replica),
run by the CLI in a child process at each replica count: prints simulated requests per second of
the whole process and of the engine alone (the cell's `wall_s`), where the rest of the time went
(start-up to the first cell, summarising, plots), peak RSS and bytes of samples per replica, and
appends a row per count and `[run] samples` setting to bench/RESULTS.md with --record. Kernels
must be compiled already (run once first).

    python bench/bench_pipeline.py [--replicas 256 2560] [--samples none all] [--record]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_engine import cpu_model

GRID = """
[run]
name = "pipeline"
seed = 1
replicas = {replicas}
requests = 2000
warmup = 200
backend = "cpu"
samples = "{samples}"

[profile]
name = "dynamo-mocker"

[workload]
isl = 4096
osl = 256
prefix_groups = 16
prefix_ratio = 0.5
arrival = "closed"

[cluster]
flow = "prefill_first"

[grid]
topology = ["1P/5D"]
concurrency = [64]

[[policy]]
name = "kv"
kind = "kv"

[poa]
selfish = "kv"
"""


def run_once(replicas: int, samples: str) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp())
    grid = tmp / "grid.toml"
    grid.write_text(GRID.format(replicas=replicas, samples=samples))
    out = tmp / "run"
    cmd = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "poa_mc.cli.main", "run", "--grid", str(grid),
           "--out", str(out)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    marks: dict[str, float] = {}
    last = ""
    for line in proc.stderr:
        now = time.perf_counter() - t0
        if line.startswith("[1/"):
            marks["cell_done"] = now
        elif line.startswith("summarising"):
            marks["summarising"] = now
        elif line.startswith("drawing plots"):
            marks["plots"] = now
        last = line.strip() or last
    proc.wait()
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"poa-mc run failed ({proc.returncode}): {last}")
    rss_kib = int(re.findall(r"^\d+$", last, re.M)[-1]) if re.findall(r"^\d+$", last, re.M) else 0
    meta = json.loads(next((out / "meta").glob("*.json")).read_text())
    kept = sum(f.stat().st_size for f in (out / "samples").rglob("*.parquet"))
    acc = sum(f.stat().st_size for f in (out / "acc").rglob("*.parquet"))
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "total": total,
        "engine": float(meta["wall_s"]),
        "simulated": float(meta["simulated"]),
        "first_cell": marks.get("cell_done", float("nan")),
        "summarising": marks.get("plots", total) - marks.get("summarising", total),
        "plots": total - marks.get("plots", total),
        "rss_mib": rss_kib / 1024,
        "sample_bytes_per_replica": kept / replicas,
        "acc_bytes_per_replica": acc / replicas,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, nargs="+", default=[256, 2560])
    ap.add_argument("--samples", nargs="+", default=["none", "all"], help="[run] samples settings to run")
    ap.add_argument("--record", action="store_true", help="append the results to bench/RESULTS.md")
    a = ap.parse_args()
    rows = []
    for n in a.replicas:
        for kept in a.samples:
            m = run_once(n, kept)
            line = (
                f"1P/5D C=64 {n}x2000(+200), samples {kept}: {m['simulated']:,.0f} requests; whole process "
                f"{m['total']:.1f} s = {m['simulated'] / m['total']:,.0f} req/s; engine {m['engine']:.2f} s = "
                f"{m['simulated'] / m['engine']:,.0f} req/s; first cell done at {m['first_cell']:.1f} s, "
                f"summarising {m['summarising']:.1f} s, plots {m['plots']:.1f} s; peak RSS {m['rss_mib']:.0f} MiB; "
                f"on disk per replica: samples {m['sample_bytes_per_replica'] / 1024:.0f} KiB, "
                f"accumulators {m['acc_bytes_per_replica'] / 1024:.1f} KiB"
            )
            print(line, flush=True)
            rows.append(line)
    if a.record:
        out = Path(__file__).with_name("RESULTS.md")
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        cmd = "python " + " ".join(["bench/bench_pipeline.py", *sys.argv[1:]])
        with out.open("a") as f:
            for line in rows:
                f.write(f"| {stamp} | {cpu_model()}, {os.cpu_count()} cores | `{cmd}` | {line} |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
