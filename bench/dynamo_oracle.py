#!/usr/bin/env python3
"""Optional oracle: run one NVIDIA Dynamo offline mocker replay and print JSON.

This script is never imported by the tests. It needs only the
`ai-dynamo-runtime` wheel (the replay engine is its native module
`dynamo._core`); it is imported lazily and the script exits with a message
if it is absent.

How the replay is driven
------------------------
`dynamo._core.run_mocker_synthetic_trace_replay(isl, osl, requests, ...)`
builds a synthetic trace in Rust and replays it on a virtual clock:

* Closed loop: with `replay_concurrency=C` the first C requests arrive at
  t=0 and every later request arrives exactly when an earlier one finishes
  (no think time). TTFT is measured from that arrival.
* Prefix groups: each request draws a group uniformly at random
  (seeded by `arrival_seed`); the first round(ratio * ceil(isl/block)) blocks
  of its prompt are that group's shared blocks, the rest are unique.
* Disaggregation: passing `prefill_engine_args` and `decode_engine_args`
  (each with `worker_type`) gives prefill-first P/D serving; passing
  `extra_engine_args` with `num_workers` gives aggregated serving.
* Timing: the mocker's default polynomial timing model (no AIS perf data).
* KV transfer: set on the *prefill* engine as bytes/token and GB/s (1e9);
  the delay is isl * bytes / bandwidth (full prompt, cached part included).
* The KV router breaks ties between equal-cost workers at random without a
  seed, so two runs with the same --seed can differ slightly.

All reported numbers are computed here from the per-request records, so
`--warmup W` can drop the first W requests (by arrival) from the statistics.

`--random-groups` replays a trace instead (`run_mocker_trace_replay`, Mooncake
JSONL with hash_ids, written to a temporary file): the same requests, each
request's prefix group drawn at random from Python's `random.Random(--seed)`.
In 1.6.1's synthetic replay at a fixed concurrency the group sequence does not
depend on `arrival_seed` (the same reuse, request by request, for seeds 1, 2, 3,
4, 42 and 12345 at C = 1), so its "seeds" repeat one workload and only the
router's unseeded tie-breaks differ; with this flag each seed is another
workload (bench/oracle_random_groups.sh, docs/engine.md).
"""

import argparse
import json
import math
import os
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("disagg", "agg"), default="disagg")
    p.add_argument("--isl", type=int, default=4096)
    p.add_argument("--osl", type=int, default=256)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64, help="closed-loop C")
    p.add_argument("--prefix-ratio", type=float, default=0.0)
    p.add_argument("--prefix-groups", type=int, default=0)
    p.add_argument("--prefill-workers", type=int, default=1)
    p.add_argument("--decode-workers", type=int, default=1)
    p.add_argument("--workers", type=int, default=1, help="aggregated mode")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--prefill-blocks", type=int, default=16384)
    p.add_argument("--decode-blocks", type=int, default=16384)
    p.add_argument("--blocks", type=int, default=16384, help="aggregated mode")
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-batched-tokens", type=int, default=None)
    p.add_argument("--router", choices=("kv", "round_robin"), default="kv")
    p.add_argument("--router-temperature", type=float, default=0.0)
    p.add_argument("--kv-bytes-per-token", type=int, default=None)
    p.add_argument("--kv-bandwidth-gbs", type=float, default=None)
    p.add_argument("--seed", type=int, default=42, help="trace/group seed")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument(
        "--random-groups", action="store_true", help="replay a trace whose groups are drawn from --seed (see above)"
    )
    return p.parse_args(argv)


def random_groups_trace(args, path):
    """Mooncake-style JSONL: --requests rows of --isl tokens, the first round(ratio * blocks) hash
    ids of each its group's (drawn uniformly with random.Random(--seed)), the rest its own."""
    import random

    rng = random.Random(args.seed)
    blocks = args.isl // args.block_size
    shared = round(args.prefix_ratio * blocks)
    own = 1 << 40
    with open(path, "w") as f:
        for _ in range(args.requests):
            g = rng.randrange(max(args.prefix_groups, 1))
            ids = [g * 100_000 + j for j in range(shared)] + list(range(own, own + blocks - shared))
            own += blocks - shared
            row = {"timestamp": 0, "input_length": args.isl, "output_length": args.osl, "hash_ids": ids}
            f.write(json.dumps(row) + "\n")


def engine(args, worker_type, blocks, transfer=False):
    """One worker pool's engine config in the mocker's canonical form."""
    e = {"worker_type": worker_type, "block_size": args.block_size, "num_gpu_blocks": blocks}
    if args.max_num_seqs is not None:
        e["max_num_seqs"] = args.max_num_seqs
    if args.max_batched_tokens is not None:
        e["max_num_batched_tokens"] = args.max_batched_tokens
    if transfer and args.kv_bytes_per_token and args.kv_bandwidth_gbs:
        e["kv_transfer_bytes_per_token"] = args.kv_bytes_per_token
        e["kv_transfer_bandwidth"] = args.kv_bandwidth_gbs
    return {"engine": e}


def quantile(sorted_xs, q):
    """Nearest-rank (lower) quantile of an already sorted list, the replay's own convention and
    bench/regimes.py's."""
    return sorted_xs[max(0, math.ceil(q * len(sorted_xs)) - 1)]


def steady_throughput(records, concurrency):
    """Completions per second between the C-th and the (N - C)-th completion: the closed loop at
    full load, without its start-up and its drain (a replay stops arriving after N requests,
    poa-mc keeps its load on until the N-th measured request ends)."""
    done = sorted(r["terminal_time_ms"] for r in records)
    c = min(concurrency, len(done) // 4)
    lo, hi = c, len(done) - 1 - c
    return (hi - lo) / (done[hi] - done[lo]) * 1000.0


def summarize(records, warmup, concurrency):
    recs = sorted(records, key=lambda r: (r["arrival_time_ms"], r["first_token_ms"]))[warmup:]
    if not recs:
        sys.exit("dynamo_oracle: --warmup leaves no requests to measure")
    ttft = sorted(r["ttft_ms"] for r in recs)
    decode_ms = sum(r["last_token_ms"] - r["first_token_ms"] for r in recs)
    gaps = sum(r["output_length"] - 1 for r in recs)
    window_ms = max(r["terminal_time_ms"] for r in recs) - min(r["arrival_time_ms"] for r in recs)
    return {
        "num_requests": len(recs),
        "ttft_mean_ms": sum(ttft) / len(ttft),
        "ttft_p50_ms": quantile(ttft, 0.50),
        "ttft_p99_ms": quantile(ttft, 0.99),
        # token-weighted: total decode time over total inter-token gaps
        "itl_mean_ms": decode_ms / gaps if gaps else None,
        "throughput_rps": len(recs) / window_ms * 1000.0,
        "steady_rps": steady_throughput(recs, concurrency),
        "prefix_hit_rate": (sum(r["reused_input_tokens"] for r in recs) / sum(r["input_length"] for r in recs)),
        "readmissions": sum(r.get("readmission_count", 0) for r in recs),
    }


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("DYN_LOG", "warn")  # the router logs every pick
    try:
        from dynamo._core import KvRouterConfig, run_mocker_synthetic_trace_replay, run_mocker_trace_replay
    except ImportError as exc:
        sys.exit(
            f"dynamo_oracle: NVIDIA Dynamo is not installed ({exc}); "
            "pip install ai-dynamo-runtime==1.6.1 (it holds the replay engine, dynamo._core)"
        )

    kw = dict(
        replay_concurrency=args.concurrency,
        router_mode="kv_router" if args.router == "kv" else "round_robin",
        router_config=KvRouterConfig(router_temperature=args.router_temperature),
        shared_prefix_ratio=args.prefix_ratio,
        num_prefix_groups=args.prefix_groups,
        arrival_seed=args.seed,
        capture_per_request=True,
    )
    if args.mode == "agg":
        kw.update(extra_engine_args=engine(args, "aggregated", args.blocks), num_workers=args.workers)
    else:
        kw.update(
            prefill_engine_args=engine(args, "prefill", args.prefill_blocks, transfer=True),
            decode_engine_args=engine(args, "decode", args.decode_blocks),
            num_prefill_workers=args.prefill_workers,
            num_decode_workers=args.decode_workers,
        )

    t0 = time.perf_counter()
    if args.random_groups:
        import tempfile

        for k in ("shared_prefix_ratio", "num_prefix_groups", "arrival_seed"):
            kw.pop(k)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.jsonl")
            random_groups_trace(args, path)
            result = run_mocker_trace_replay([path], trace_block_size=args.block_size, **kw)
    else:
        result = run_mocker_synthetic_trace_replay(args.isl, args.osl, args.requests, **kw)
    wall = time.perf_counter() - t0

    out = summarize(result.per_request, args.warmup, args.concurrency)
    out["sim_duration_ms"] = result.summary["duration_ms"]
    out["wall_s"] = wall
    out["config"] = vars(args)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
