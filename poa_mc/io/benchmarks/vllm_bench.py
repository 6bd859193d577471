"""vLLM's ``vllm bench serve --save-result`` JSON, read into one `LoadPoint` per result object,
with the per-request table when the result keeps per-request lists. The field names and units below
were read in vLLM's own sources (docs/sources.md, "Benchmark result formats"); no code of theirs is
used.

vLLM ``vllm bench serve --save-result`` (vllm-project/vllm ``vllm/benchmarks/serve.py``)
-------------------------------------------------------------------------------------------
- One JSON object ("vllm-bench-serve"); ``--append-result`` appends further objects, one a line,
  each read as its own load point. ``completed`` (successful requests), ``failed``, ``duration``
  (s), ``request_throughput`` (req/s), ``request_rate`` (a number, or the string "inf"),
  ``max_concurrency`` (int or null); ``{mean,median,std}_{ttft,tpot,itl,e2el}_ms`` and
  ``p{P}_{metric}_ms`` for the ``--metric-percentiles`` (default 99) of the
  ``--percentile-metrics`` (default ttft,tpot,itl): milliseconds. ITL statistics are over every
  token gap of every request. Per-request lists, in SECONDS (perf_counter differences:
  ``vllm/benchmarks/lib/endpoint_request_func.py``): ``latencies`` (kept in every saved result),
  and with ``--save-detailed`` also ``ttfts``, ``itls`` (a list of gaps per request; tabled here as
  their mean), ``input_lens``, ``output_lens`` (tokens) and ``errors`` ("" for a success). Failed
  requests stay in the lists (ttft 0, latency 0, output_len 0) and are dropped here by their
  ``errors`` entry (or, with no ``errors`` list, by their latency of 0.0). Load: a finite
  ``request_rate`` makes a "rate" point (``max_concurrency`` then only caps it); otherwise
  ``max_concurrency`` makes a "concurrency" point.
"""

from __future__ import annotations

import math

import polars as pl

from poa_mc.io.benchmarks.common import (
    PER_REQUEST_SCHEMA,
    BenchmarkFormatError,
    LoadPoint,
    check_count,
    check_number,
    fill_from_table,
    per_request_table,
    require_key,
)

_VLLM_LISTS = ("ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")


def is_vllm(d: dict) -> bool:
    return "completed" in d and "duration" in d and ("request_throughput" in d or "mean_e2el_ms" in d)


def vllm_point(src: str, d: dict, line: int | None = None) -> LoadPoint:
    what = "vLLM bench serve result"
    requests = check_count(src, require_key(src, d, "completed", what, line), "'completed'", line)
    duration = check_number(src, require_key(src, d, "duration", what, line), "'duration'", line)
    throughput = None
    if d.get("request_throughput") is not None:
        throughput = check_number(src, d["request_throughput"], "'request_throughput'", line)
    failed = check_count(src, d["failed"], "'failed'", line) if d.get("failed") is not None else None

    axis, load = None, None
    rate = d.get("request_rate")
    if rate is not None and rate != "inf" and not (isinstance(rate, float) and math.isinf(rate)):
        axis, load = "rate", check_number(src, rate, "'request_rate'", line)
    elif d.get("max_concurrency") is not None:
        axis, load = "concurrency", check_number(src, d["max_concurrency"], "'max_concurrency'", line)

    def stats(metric: str) -> dict[str, float]:
        out = {}
        keys = {
            "mean": (f"mean_{metric}_ms",),
            "p50": (f"median_{metric}_ms", f"p50_{metric}_ms"),
            "p90": (f"p90_{metric}_ms",),
            "p99": (f"p99_{metric}_ms",),
        }
        for stat, candidates in keys.items():
            for k in candidates:
                if d.get(k) is not None:
                    out[stat] = check_number(src, d[k], f"'{k}'", line)
                    break
        return out

    point = LoadPoint(
        source=src,
        format="vllm-bench-serve",
        load_axis=axis,
        load=load,
        requests=requests,
        duration_s=duration,
        throughput_rps=throughput,
        ttft_ms=stats("ttft"),
        itl_ms=stats("itl"),
        e2e_ms=stats("e2el"),
        per_request=_vllm_table(src, d, line),
        failed=failed,
    )
    return fill_from_table(point)


def _vllm_table(src: str, d: dict, line: int | None) -> pl.DataFrame | None:
    present = [k for k in _VLLM_LISTS if d.get(k) is not None]
    if not any(k in present for k in ("ttfts", "itls", "latencies")):
        return None
    for k in present:
        if not isinstance(d[k], list):
            raise BenchmarkFormatError(src, f"'{k}' is not a list", line)
    n = len(d[present[0]])
    for k in present[1:]:
        if len(d[k]) != n:
            raise BenchmarkFormatError(src, f"'{k}' has {len(d[k])} entries but '{present[0]}' has {n}", line)
    errors = d.get("errors")
    cols: dict[str, list] = {c: [] for c in PER_REQUEST_SCHEMA}
    for i in range(n):
        # a failed request: its errors entry, or (lists saved without errors) its latency of 0.0
        if errors[i] if errors is not None else ("latencies" in present and d["latencies"][i] == 0):
            continue
        for col, key in (("ttft_ms", "ttfts"), ("e2e_ms", "latencies")):
            v = d[key][i] if key in present else None
            cols[col].append(None if v is None else check_number(src, v, f"'{key}[{i}]'", line) * 1e3)
        gaps = d["itls"][i] if "itls" in present else None
        if gaps is None:
            cols["itl_ms"].append(None)
        elif not isinstance(gaps, list):
            raise BenchmarkFormatError(src, f"'itls[{i}]' is not a list", line)
        else:
            secs = [check_number(src, g, f"'itls[{i}][{j}]'", line) for j, g in enumerate(gaps)]
            cols["itl_ms"].append(sum(secs) / len(secs) * 1e3 if secs else None)
        for col, key in (("isl", "input_lens"), ("osl", "output_lens")):
            v = d[key][i] if key in present else None
            cols[col].append(None if v is None else check_count(src, v, f"'{key}[{i}]'", line))
    return per_request_table(cols)
