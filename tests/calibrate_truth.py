"""A benchmark of known truth for the calibrate tests: a deployment simulated with known profile
parameters at another seed (its noise: the finite run), written in each supported format by each
tool's documented schema (poa_mc/io/benchmarks/), with the deployment file that names them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from poa_mc.engine.engine import simulate
from poa_mc.model.config import loads_grid
from poa_mc.run.calibrate.figures import apply_spec, cell_figures

TRUTH = {"prefill_scale": 1.4, "decode_scale": 0.8, "prefill_host_request_ms": 3.0}
FIT = {"prefill_scale": [0.5, 2.5], "decode_scale": [0.4, 2.0], "prefill_host_request_ms": [0.0, 10.0]}
LOADS = (2, 8, 24)
BENCH_REQUESTS = 1200  # a benchmark's requests per load point
FIGS = ("ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99", "itl_mean", "e2e_mean", "e2e_p99", "throughput")

GRID = """
[run]
name = "deployment"
seed = 5
replicas = {replicas}
requests = {requests}
warmup = 60

[profile]
name = "dynamo-mocker"

[workload]
isl = 1024
osl = {{ dist = "uniform", low = 32, high = 96 }}
prefix_groups = 4
prefix_ratio = 0.5

[cluster]
flow = "prefill_first"
{cluster}

[grid]
topology = ["1P/2D"]
concurrency = {loads}

[[policy]]
name = "router"
kind = "kv"
"""


# a disaggregated deployment whose transfers take time: Llama-3.1-70B's bf16 KV (2 x 80 layers x
# 8 KV heads x 128 x 2 bytes per token) over a link of 20 GB/s, 13 ms per 1,024-token prompt
TRANSFER_CLUSTER = "kv_bytes_per_token = 327680"
TRANSFER_TRUTH = {"transfer_gbps": 20.0, "prefill_host_request_ms": 3.0}
TRANSFER_FIT = {"transfer_gbps": [5.0, 80.0], "prefill_host_request_ms": [0.0, 10.0]}
# vLLM's handover on the decode workers: 160 read descriptors per block (K and V of 80 layers),
# each posted in 6 us (2.4 us measured on one machine, NIXL issue 1514: a slower host's)
HANDOVER_CLUSTER = 'kv_bytes_per_token = 327680\nhandover = "vllm"\nnixl_descriptors_per_block = 160'
HANDOVER_TRUTH = {"nixl_post_us": 6.0, "prefill_host_request_ms": 3.0}
HANDOVER_FIT = {"nixl_post_us": [0.5, 12.0], "prefill_host_request_ms": [0.0, 10.0]}


def measured(
    seed: int = 99, replicas: int = 1, requests: int = BENCH_REQUESTS, *, truth: dict = TRUTH, cluster: str = ""
) -> dict[int, dict[str, float]]:
    """Each load's figures, simulated at `truth` with `seed`: one run of BENCH_REQUESTS requests, as
    a benchmark's."""
    grid = loads_grid(GRID.format(replicas=replicas, requests=requests, loads=list(LOADS), cluster=cluster))
    out = {}
    for cell in grid.cells():
        spec = apply_spec(cell.spec, truth)
        res = simulate(spec, replicas=replicas, requests=requests, warmup=60, seed=seed, stream=cell.stream,
                       record_candidates=False)  # fmt: skip
        out[cell.concurrency] = dict(zip(FIGS, cell_figures(res, FIGS)))
    return out


def write_aiperf(folder: Path, c: int, f: dict[str, float], requests: int) -> Path:
    """AIPerf's profile_export_aiperf.json (aiperf/exporters/json_exporter.py's layout)."""
    d = {
        "request_throughput": {"unit": "requests/sec", "avg": f["throughput"]},
        "request_latency": {"unit": "ms", "avg": f["e2e_mean"], "p99": f["e2e_p99"]},
        "time_to_first_token": {
            "unit": "ms",
            "avg": f["ttft_mean"],
            "p50": f["ttft_p50"],
            "p90": f["ttft_p90"],
            "p99": f["ttft_p99"],
        },  # fmt: skip
        "inter_token_latency": {"unit": "ms", "avg": f["itl_mean"]},
        "request_count": {"unit": "requests", "avg": requests},
        "benchmark_duration": {"unit": "sec", "avg": requests / f["throughput"]},
        "input_config": {"loadgen": {"concurrency": c, "request_count": requests}},
    }
    p = folder / f"aiperf-c{c}" / "profile_export_aiperf.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(d))
    return p


def write_vllm(folder: Path, c: int, f: dict[str, float], requests: int) -> Path:
    """`vllm bench serve --save-result` (vllm/benchmarks/serve.py's result keys), summary only."""
    d = {
        "completed": requests, "failed": 0, "duration": requests / f["throughput"],
        "request_throughput": f["throughput"], "request_rate": "inf", "max_concurrency": c,
        "mean_ttft_ms": f["ttft_mean"], "median_ttft_ms": f["ttft_p50"], "p90_ttft_ms": f["ttft_p90"],
        "p99_ttft_ms": f["ttft_p99"], "mean_itl_ms": f["itl_mean"], "mean_e2el_ms": f["e2e_mean"],
        "p99_e2el_ms": f["e2e_p99"],
    }  # fmt: skip
    p = folder / f"vllm-c{c}.json"
    p.write_text(json.dumps(d))
    return p


def write_genai_perf(folder: Path, c: int, f: dict[str, float], requests: int) -> Path:
    """genai-perf's profile_export_genai_perf.csv in its artifact folder (the load in the folder's name)."""
    rows = [
        "Metric,avg,min,max,p99,p95,p90,p75,p50,p25,p10,p5,p1",
        f"Time To First Token (ms),{f['ttft_mean']},,,{f['ttft_p99']},,{f['ttft_p90']},,{f['ttft_p50']},,,,",
        f"Request Latency (ms),{f['e2e_mean']},,,{f['e2e_p99']},,,,,,,,",
        f"Inter Token Latency (ms),{f['itl_mean']},,,,,,,,,,,",
        "",
        "Metric,Value",
        f"Request Throughput (per sec),{f['throughput']}",
        f"Request Count (count),{requests}",
    ]
    p = folder / f"model-openai-chat-concurrency{c}" / "profile_export_genai_perf.csv"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(rows) + "\n")
    return p


WRITERS = {"aiperf": write_aiperf, "vllm": write_vllm, "genai-perf": write_genai_perf}


def deployment(folder: Path, fmt: str, figs: dict[int, dict[str, float]], *, replicas: int = 4,
               requests: int = BENCH_REQUESTS, figures=("ttft_mean", "ttft_p99", "itl_mean", "throughput"),
               held_out: bool = True, fit: dict = FIT, cluster: str = "") -> Path:  # fmt: skip
    """The deployment file and its measured files in `fmt`; returns the file."""
    files = [WRITERS[fmt](folder, c, figs[c], BENCH_REQUESTS) for c in LOADS]
    text = GRID.format(replicas=replicas, requests=requests, loads=list(LOADS), cluster=cluster)
    names = json.dumps([str(f.relative_to(folder)) for f in files])
    fit = ", ".join(f"{k} = {v}" for k, v in fit.items())
    text += f"\n[calibrate]\nmeasured = {names}\nfit = {{ {fit} }}\nfigures = {json.dumps(list(figures))}\n"
    text += f"held_out = {'true' if held_out else 'false'}\n"
    p = folder / "deployment.toml"
    p.write_text(text)
    return p


def as_array(figs: dict[int, dict[str, float]], figures) -> np.ndarray:
    return np.array([[figs[c][f] for f in figures] for c in LOADS])


STAGES = (24, 2, 8)  # a staged benchmark's concurrency, in the order its stages ran


def _staged_grid(replicas: int, cluster: str = "") -> str:
    text = GRID.format(replicas=replicas, requests=0, loads=list(STAGES), cluster=cluster)
    text = text.replace("requests = 0\n", "")  # a [schedule] sets each stage's requests
    return text


def measured_stages(seed: int = 99, *, truth: dict = TRUTH) -> list[dict[str, float]]:
    """Each stage's figures from one run of STAGES back to back at `truth` (BENCH_REQUESTS each):
    a benchmark's staged sweep, caches and clients carried from stage to stage."""
    text = _staged_grid(1) + f"\n[schedule]\nrequests = {[BENCH_REQUESTS] * len(STAGES)}\n"
    cell = loads_grid(text).cells()[0]
    res = simulate(apply_spec(cell.spec, truth), replicas=1, requests=BENCH_REQUESTS * len(STAGES), warmup=60,
                   seed=seed, stream=cell.stream, record_candidates=False)  # fmt: skip
    ends = (0, *cell.spec.workload.stage_ends())
    return [dict(zip(FIGS, cell_figures(res, FIGS, stage=slice(a, b)))) for a, b in zip(ends, ends[1:])]


def staged_deployment(folder: Path, figs: list[dict[str, float]], *, replicas: int = 4, fit: dict = FIT) -> Path:
    """The deployment file of a staged benchmark, its stages as `vllm bench serve` files in run order."""
    files = []
    for k, (c, f) in enumerate(zip(STAGES, figs)):
        sub = folder / f"stage{k}"
        sub.mkdir(parents=True, exist_ok=True)
        files.append(write_vllm(sub, c, f, BENCH_REQUESTS))
    names = json.dumps([str(f.relative_to(folder)) for f in files])
    fit_s = ", ".join(f"{k} = {v}" for k, v in fit.items())
    text = _staged_grid(replicas)
    text += f'\n[calibrate]\nmeasured = {names}\nfit = {{ {fit_s} }}\nreplay = "schedule"\nheld_out = false\n'
    p = folder / "deployment.toml"
    p.write_text(text)
    return p
