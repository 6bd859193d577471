"""The CSV summaries of AIPerf and genai-perf, read into one `LoadPoint` each. Both tools write the
same layout (a per-request section ``Metric,<stats>``, a blank row, a system section
``Metric,Value``, rows labelled "<name> (<unit>)"), so one reader serves both; it tells the two
apart (`_csv_flavour`) by their column order, labels and, last, the file name. Neither file states
the load; it is taken from the artifact folder's name (`common.load_from_folder`). The field names
and units below were read in the tools' own sources (docs/sources.md, "Benchmark result formats");
no code of theirs is used.

AIPerf (ai-dynamo/aiperf, v0.1.1, commit db4f6397)
-------------------------------------------------------------------------------------------
- ``profile_export_aiperf.csv`` ("aiperf-csv"): a section ``Metric,avg,min,max,p1,p5,p10,p25,p50,
  p75,p90,p95,p99,std`` with one row per metric named "<header> (<unit>)" ("Time to First Token
  (ms)", "Inter Token Latency (ms)", "Request Latency (ms)"), a blank row, then ``Metric,Value``
  ("Request Count", "Request Throughput (requests/sec)", "Benchmark Duration (sec)"; the unit is
  left out for "requests" and "count"). Sources: ``aiperf/exporters/csv_exporter.py``,
  ``aiperf/common/constants.py`` (STAT_KEYS).

genai-perf (triton-inference-server/perf_analyzer, ``genai-perf/``, 0.0.16dev, commit 263c5f6e)
-------------------------------------------------------------------------------------------
- ``profile_export_genai_perf.csv`` ("genai-perf-csv"): ``Metric,avg,min,max,p99,p95,p90,p75,p50,
  p25,p10,p5,p1``, rows named ``name.replace("_", " ").title()`` plus " (unit)": "Time To First
  Token (ms)", "Inter Token Latency (ms)", "Request Latency (ms)" (the first two only for streaming
  runs); a blank row; ``Metric,Value``: "Request Throughput (per sec)", "Request Count (count)".
  Values are written ``f"{value:,.2f}"`` (so "1,912.40", quoted) and "N/A" where missing. No
  duration. Sources: ``genai-perf/genai_perf/export_data/csv_exporter.py``,
  ``genai-perf/genai_perf/export_data/exporter_utils.py``, ``genai-perf/genai_perf/metrics/metrics.py``
  and ``llm_metrics.py`` (names, units), ``genai-perf/tests/test_exporters/test_csv_exporter.py``.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from poa_mc.io.benchmarks.common import (
    STATS,
    UNKNOWN,
    BenchmarkFormatError,
    LoadPoint,
    check_count,
    check_number,
    load_from_folder,
    ms_per_unit,
)

_LABEL = re.compile(r"^(?P<name>.*?)\s*(?:\((?P<unit>[^()]*)\))?\s*$")
# (our column, metric name as both tools write it, lower-cased)
_CSV_TIME = (("ttft_ms", "time to first token"), ("itl_ms", "inter token latency"), ("e2e_ms", "request latency"))
_CSV_REQUIRED_STATS = ("avg", "p50", "p90", "p99")
_CSV_LABELS = {
    "genai-perf-csv": {"latency": "Request Latency (ms)", "count": "Request Count (count)"},
    "aiperf-csv": {"latency": "Request Latency (ms)", "count": "Request Count"},
}
_CSV_NAMES = {"genai-perf-csv": "genai-perf export", "aiperf-csv": "AIPerf CSV export"}


def _csv_sections(src: str, text: str) -> list[list[list[str]]]:
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        raise BenchmarkFormatError(src, f"not valid CSV ({e})") from None
    sections: list[list[list[str]]] = [[]]
    for row in rows:
        if not any(cell.strip() for cell in row):
            if sections[-1]:
                sections.append([])
        else:
            sections[-1].append([cell.strip() for cell in row])
    return [s for s in sections if s]


def _csv_flavour(name: str, request_header: list[str] | None, labels: set[str]) -> str | None:
    if request_header is not None and "std" in request_header:
        return "aiperf-csv"
    if "Request Throughput (requests/sec)" in labels or "Time to First Token (ms)" in labels:
        return "aiperf-csv"
    if "Request Throughput (per sec)" in labels or "Time To First Token (ms)" in labels:
        return "genai-perf-csv"
    if request_header is not None and "p99" in request_header and "p50" in request_header:
        if request_header.index("p99") < request_header.index("p50"):
            return "genai-perf-csv"
    if "genai_perf" in name or "genai-perf" in name:
        return "genai-perf-csv"
    if "aiperf" in name:
        return "aiperf-csv"
    return None


def read_csv_text(p: Path, src: str, text: str) -> list[LoadPoint]:
    sections = _csv_sections(src, text)
    request: list[list[str]] | None = None
    system: list[list[str]] | None = None
    for sec in sections:
        head = sec[0]
        if head[:2] == ["Metric", "Value"] and system is None:
            system = sec
        elif head and head[0] == "Metric" and len(head) > 2 and request is None:
            request = sec
    if request is None and system is None:
        raise BenchmarkFormatError(src, UNKNOWN)
    labels = {row[0] for sec in (request or [], system or []) for row in sec[1:] if row}
    fmt = _csv_flavour(p.name.lower(), request[0] if request else None, labels)
    if fmt is None:
        raise BenchmarkFormatError(src, UNKNOWN)
    what = _CSV_NAMES[fmt]
    if request is None:
        raise BenchmarkFormatError(src, f"{what} lacks its per-request section (header 'Metric,avg,...')")
    if system is None:
        raise BenchmarkFormatError(src, f"{what} lacks its system section (header 'Metric,Value')")
    header = request[0]
    for stat in _CSV_REQUIRED_STATS:
        if stat not in header:
            raise BenchmarkFormatError(src, f"{what} lacks column '{stat}'")

    def cell(label: str, column: str, raw: str) -> float | None:
        raw = raw.strip()
        if raw in ("", "N/A"):
            return None
        try:
            value = float(raw.replace(",", ""))
        except ValueError:
            raise BenchmarkFormatError(src, f"row '{label}' column '{column}' is not a number ({raw!r:.40})") from None
        return check_number(src, value, f"row '{label}' column '{column}'")

    # name (lower-cased) -> (label, unit, {stat: raw})
    req_rows: dict[str, tuple[str, str | None, dict[str, str]]] = {}
    for row in request[1:]:
        m = _LABEL.match(row[0])
        assert m is not None  # the pattern matches any string
        req_rows.setdefault(m["name"].lower(), (row[0], m["unit"], dict(zip(header[1:], row[1:]))))
    sys_rows: dict[str, tuple[str, str | None, str]] = {}
    for row in system[1:]:
        m = _LABEL.match(row[0])
        assert m is not None
        sys_rows.setdefault(m["name"].lower(), (row[0], m["unit"], row[1] if len(row) > 1 else ""))

    if "request latency" not in req_rows:
        raise BenchmarkFormatError(src, f"{what} lacks row '{_CSV_LABELS[fmt]['latency']}'")
    if "request count" not in sys_rows:
        raise BenchmarkFormatError(src, f"{what} lacks row '{_CSV_LABELS[fmt]['count']}'")

    lat: dict[str, dict[str, float]] = {}
    for col, name in _CSV_TIME:
        lat[col] = {}
        if name not in req_rows:
            continue
        label, unit, values = req_rows[name]
        scale = ms_per_unit(src, unit, f"the unit of row '{label}'")
        for ours, theirs in zip(STATS, _CSV_REQUIRED_STATS):
            v = cell(label, theirs, values.get(theirs, ""))
            if v is not None:
                lat[col][ours] = v * scale

    label, _, raw = sys_rows["request count"]
    count = cell(label, "Value", raw)
    if count is None or count != int(count):
        raise BenchmarkFormatError(src, f"row '{label}' column 'Value' is not a whole number ({raw!r:.40})")
    throughput = None
    if "request throughput" in sys_rows:
        label, _, raw = sys_rows["request throughput"]
        throughput = cell(label, "Value", raw)
    duration = None
    if "benchmark duration" in sys_rows:
        label, unit, raw = sys_rows["benchmark duration"]
        v = cell(label, "Value", raw)
        if v is not None:
            duration = v * ms_per_unit(src, unit, f"the unit of row '{label}'") / 1e3
    failed = None
    if "error request count" in sys_rows:
        label, _, raw = sys_rows["error request count"]
        v = cell(label, "Value", raw)
        failed = None if v is None else check_count(src, v, f"row '{label}' column 'Value'")
    axis, load = load_from_folder(p)
    return [
        LoadPoint(
            source=src,
            format=fmt,
            load_axis=axis,
            load=load,
            requests=int(count),
            duration_s=duration,
            throughput_rps=throughput,
            ttft_ms=lat["ttft_ms"],
            itl_ms=lat["itl_ms"],
            e2e_ms=lat["e2e_ms"],
            failed=failed,
        )
    ]
