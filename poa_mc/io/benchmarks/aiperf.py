"""AIPerf's JSON outputs: the per-request JSON Lines and the JSON summary, each read into one
`LoadPoint` (its CSV summary shares genai-perf's layout and is read in `csv_summary`). The field
names and units below were read in AIPerf's own sources (docs/sources.md, "Benchmark result
formats"); no code of theirs is used.

AIPerf (ai-dynamo/aiperf, v0.1.1, commit db4f6397; the newer src/ layout keeps the same keys)
-------------------------------------------------------------------------------------------
- ``profile_export.jsonl`` (format "aiperf-records"): one JSON object a line, ``{"metadata",
  "metrics", "error"}``. metadata: ``request_start_ns``, ``request_end_ns`` (epoch ns),
  ``benchmark_phase`` (only "profiling" records are read). metrics: ``{tag: {"value", "unit"}}`` in
  display units: ``time_to_first_token``, ``inter_token_latency`` (the request's mean gap),
  ``request_latency`` ("ms"), ``input_sequence_length``, ``output_sequence_length`` ("tokens"). A
  record whose ``error`` is not null is a failed request (counted, not tabled). requests = the
  records without error; duration = last ``request_end_ns`` - first ``request_start_ns``.
  Sources: ``docs/tutorials/working-with-profile-exports.md``,
  ``aiperf/post_processors/record_export_results_processor.py``, ``aiperf/metrics/types/*.py``
  (tags, units, display units), ``aiperf/common/enums/metric_enums.py`` (unit tags ns/us/ms/sec).
- ``profile_export_aiperf.json`` ("aiperf-json"): ``{tag: {"unit", "avg", "p1".."p99", "min",
  "max", "std"}}`` per metric, in display units: ``time_to_first_token``, ``inter_token_latency``,
  ``request_latency`` ("ms"), ``request_count`` ("requests", avg only), ``error_request_count``,
  ``request_throughput`` ("requests/sec"), ``benchmark_duration`` ("sec"); the load from
  ``input_config.loadgen.concurrency`` / ``request_rate``. Sources:
  ``aiperf/common/models/export_models.py`` (JsonExportData, JsonMetricResult),
  ``aiperf/exporters/json_exporter.py``, ``aiperf/common/config/loadgen_config.py``.

The JSONL file does not state the load; it is taken from the artifact folder's name
(`common.load_from_folder`), as is the JSON summary's where its ``input_config`` lacks it.
"""

from __future__ import annotations

from pathlib import Path

from poa_mc.io.benchmarks.common import (
    PER_REQUEST_SCHEMA,
    STATS,
    BenchmarkFormatError,
    LoadPoint,
    check_count,
    check_number,
    fill_from_table,
    load_from_folder,
    ms_per_unit,
    per_request_table,
    require_key,
)

_AIPERF_TIME = (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_token_latency"), ("e2e_ms", "request_latency"))
_AIPERF_TOKENS = (("isl", "input_sequence_length"), ("osl", "output_sequence_length"))
_AIPERF_TAGS = ("request_count", "request_latency", "request_throughput", "time_to_first_token")


def is_aiperf_record(d: dict) -> bool:
    return "metadata" in d and "metrics" in d


def is_aiperf_summary(d: dict) -> bool:
    return any(isinstance(d.get(t), dict) and "unit" in d[t] for t in _AIPERF_TAGS)


def aiperf_records_point(p: Path, src: str, records: list[tuple[int, dict]]) -> LoadPoint:
    cols: dict[str, list] = {c: [] for c in PER_REQUEST_SCHEMA}
    starts: list[int] = []
    ends: list[int] = []
    failed = 0
    for n, rec in records:
        md = rec.get("metadata")
        if not is_aiperf_record(rec) or not isinstance(md, dict):
            raise BenchmarkFormatError(src, "not an AIPerf record (no 'metadata' object and 'metrics')", n)
        if md.get("benchmark_phase", "profiling") != "profiling":
            continue
        for key, acc in (("request_start_ns", starts), ("request_end_ns", ends)):
            if md.get(key) is not None:
                acc.append(check_count(src, md[key], f"'metadata.{key}'", n))
        if rec.get("error") is not None:
            failed += 1
            continue
        metrics = rec["metrics"]
        if not isinstance(metrics, dict):
            raise BenchmarkFormatError(src, "'metrics' is not an object", n)
        for col, tag in _AIPERF_TIME + _AIPERF_TOKENS:
            m = metrics.get(tag)
            if m is None:
                cols[col].append(None)
                continue
            if not isinstance(m, dict) or "value" not in m:
                raise BenchmarkFormatError(src, f"'metrics.{tag}' is not an object with a 'value'", n)
            if col in ("isl", "osl"):
                cols[col].append(check_count(src, m["value"], f"'metrics.{tag}.value'", n))
            else:
                scale = ms_per_unit(src, m.get("unit"), f"'metrics.{tag}.unit'", n)
                cols[col].append(check_number(src, m["value"], f"'metrics.{tag}.value'", n) * scale)
    table = per_request_table(cols)
    duration = (max(ends) - min(starts)) / 1e9 if starts and ends else None
    axis, load = load_from_folder(p)
    point = LoadPoint(
        source=src,
        format="aiperf-records",
        load_axis=axis,
        load=load,
        requests=table.height,
        duration_s=duration,
        throughput_rps=table.height / duration if duration else None,
        per_request=table,
        failed=failed,
    )
    return fill_from_table(point)


def aiperf_summary_point(p: Path, src: str, doc: dict) -> LoadPoint:
    what = "AIPerf summary"

    def metric(tag: str) -> dict | None:
        m = doc.get(tag)
        if m is not None and not isinstance(m, dict):
            raise BenchmarkFormatError(src, f"'{tag}' is not an object")
        return m

    def times(tag: str) -> dict[str, float]:
        m = metric(tag)
        if m is None:
            return {}
        scale = ms_per_unit(src, m.get("unit"), f"'{tag}.unit'")
        out = {}
        for ours, theirs in zip(STATS, ("avg", "p50", "p90", "p99")):
            if m.get(theirs) is not None:
                out[ours] = check_number(src, m[theirs], f"'{tag}.{theirs}'") * scale
        return out

    requests = check_count(src, require_key(src, doc, "request_count.avg", what), "'request_count.avg'")
    failed = None
    if (m := metric("error_request_count")) is not None and m.get("avg") is not None:
        failed = check_count(src, m["avg"], "'error_request_count.avg'")
    duration = None
    if (m := metric("benchmark_duration")) is not None and m.get("avg") is not None:
        ms = ms_per_unit(src, m.get("unit"), "'benchmark_duration.unit'")
        duration = check_number(src, m["avg"], "'benchmark_duration.avg'") * ms / 1e3
    throughput = None
    if (m := metric("request_throughput")) is not None and m.get("avg") is not None:
        throughput = check_number(src, m["avg"], "'request_throughput.avg'")
    axis, load = None, None
    config = doc.get("input_config")
    loadgen = config.get("loadgen") if isinstance(config, dict) else None
    if isinstance(loadgen, dict):
        if loadgen.get("request_rate") is not None:
            axis, load = "rate", check_number(src, loadgen["request_rate"], "'input_config.loadgen.request_rate'")
        elif loadgen.get("concurrency") is not None:
            axis, load = "concurrency", check_number(src, loadgen["concurrency"], "'input_config.loadgen.concurrency'")
    if axis is None:
        axis, load = load_from_folder(p)
    return LoadPoint(
        source=src,
        format="aiperf-json",
        load_axis=axis,
        load=load,
        requests=requests,
        duration_s=duration,
        throughput_rps=throughput,
        ttft_ms=times("time_to_first_token"),
        itl_ms=times("inter_token_latency"),
        e2e_ms=times("request_latency"),
        failed=failed,
    )
