"""inference-perf's stage reports (``stage_N_lifecycle_metrics.json``), each read into one
`LoadPoint`, and the pattern of their file names, by which `read.read_benchmark` finds the stages
in a report folder. The field names and units below were read in inference-perf's own sources
(docs/sources.md, "Benchmark result formats"); no code of theirs is used.

inference-perf (kubernetes-sigs/inference-perf, v0.6.1-29, commit 7de5ef2; same keys since v0.3.0)
-------------------------------------------------------------------------------------------
- ``stage_N_lifecycle_metrics.json`` ("inference-perf"; also ``summary_lifecycle_metrics.json``,
  which has no load): ``load_summary.requested_rate`` (req/s) and ``load_summary.concurrency`` (for
  concurrent stages; it wins), ``successes.count``, ``failures.count``,
  ``successes.latency.{time_to_first_token, inter_token_latency, request_latency}`` each
  ``{"mean", "min", "max", "median", "p90", "p99", ...}`` or null, in SECONDS (perf_counter
  differences; docs/metrics.md says ms, the code and docs/reports.md say seconds);
  ``successes.throughput.requests_per_sec``; ``benchmark_time_seconds`` (from v0.5). ITL statistics
  are over every token gap. A folder given to `read_benchmark` is read as an inference-perf report
  folder: each ``stage_N_lifecycle_metrics.json`` in it, by N. Sources:
  ``inference_perf/reportgen/base.py`` (summarize, summarize_requests, generate_reports),
  ``inference_perf/config/reportgen/config.py`` (default percentiles), ``docs/reports.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

from poa_mc.io.benchmarks.common import STATS, BenchmarkFormatError, LoadPoint, check_count, check_number, require_key

STAGE_FILE = re.compile(r"^(?!adapter_)(?:.*_)?stage_(\d+)_lifecycle_metrics\.json$")


def is_inference_perf(d: dict) -> bool:
    return isinstance(d.get("successes"), dict) and ("load_summary" in d or "failures" in d)


def inference_perf_point(p: Path, src: str, doc: dict) -> LoadPoint:
    what = "inference-perf report"
    succ = doc["successes"]
    requests = check_count(src, require_key(src, doc, "successes.count", what), "'successes.count'")
    latency = succ.get("latency") or {}
    if not isinstance(latency, dict):
        raise BenchmarkFormatError(src, "'successes.latency' is not an object")

    def stats(name: str) -> dict[str, float]:
        s = latency.get(name)
        if s is None:
            return {}
        if not isinstance(s, dict):
            raise BenchmarkFormatError(src, f"'successes.latency.{name}' is not an object")
        out = {}
        for stat, keys in zip(STATS, (("mean",), ("median", "p50"), ("p90",), ("p99",))):
            for k in keys:
                if s.get(k) is not None:
                    out[stat] = check_number(src, s[k], f"'successes.latency.{name}.{k}'") * 1e3
                    break
        return out

    throughput = None
    tp = succ.get("throughput")
    if isinstance(tp, dict) and tp.get("requests_per_sec") is not None:
        throughput = check_number(src, tp["requests_per_sec"], "'successes.throughput.requests_per_sec'")
    duration = None
    if doc.get("benchmark_time_seconds") is not None:
        duration = check_number(src, doc["benchmark_time_seconds"], "'benchmark_time_seconds'")
    failed = None
    fails = doc.get("failures")
    if isinstance(fails, dict) and fails.get("count") is not None:
        failed = check_count(src, fails["count"], "'failures.count'")
    axis, load = None, None
    ls = doc.get("load_summary")
    if isinstance(ls, dict):
        if ls.get("concurrency") is not None:
            axis, load = "concurrency", check_number(src, ls["concurrency"], "'load_summary.concurrency'")
        elif ls.get("requested_rate") is not None:
            axis, load = "rate", check_number(src, ls["requested_rate"], "'load_summary.requested_rate'")
    m = STAGE_FILE.match(p.name)
    return LoadPoint(
        source=src,
        format="inference-perf",
        load_axis=axis,
        load=load,
        requests=requests,
        duration_s=duration,
        throughput_rps=throughput,
        ttft_ms=stats("time_to_first_token"),
        itl_ms=stats("inter_token_latency"),
        e2e_ms=stats("request_latency"),
        stage=int(m.group(1)) if m else None,
        failed=failed,
    )
