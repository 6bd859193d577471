"""What every benchmark reader shares: the normalized load point (`LoadPoint`), the one error they
raise (`BenchmarkFormatError`, whose message is one line naming the file and, where it applies, the
line, key, row or column), the format names (FORMATS), the per-request table's schema, and the
helpers that check and convert every number kept, so that a number is checked the same way whatever
the file: a latency that is negative, not finite or not a number is an error.

Every latency is converted to milliseconds; only the statistics mean, p50, p90 and p99 are kept (a
median is p50). Where a summary lacks a latency figure but the file has per-request records, the
figure is computed from the records (numpy's linear-interpolation percentiles: `fill_from_table`).

AIPerf and genai-perf name their artifact folder after the load (``...-concurrency8``,
``...-request_rate10.0``: aiperf/common/config/user_config.py, genai-perf's
genai_perf/config/generate/perf_analyzer_config.py); for their files that do not state the load
(the CSVs, the JSONL), the load is taken from the parent folder's name when it has that form
(`load_from_folder`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

STATS = ("mean", "p50", "p90", "p99")
FORMATS = ("aiperf-records", "aiperf-json", "aiperf-csv", "genai-perf-csv", "vllm-bench-serve", "inference-perf")
PER_REQUEST_SCHEMA: dict[str, Any] = {
    "ttft_ms": pl.Float64,
    "itl_ms": pl.Float64,
    "e2e_ms": pl.Float64,
    "isl": pl.Int64,
    "osl": pl.Int64,
}
UNKNOWN = "unknown benchmark format (expected AIPerf, genai-perf, vLLM bench serve or inference-perf)"

# milliseconds per unit, for the unit tags the tools write
_MS_PER = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "sec": 1e3, "s": 1e3}


class BenchmarkFormatError(ValueError):
    """A benchmark file that cannot be read: unknown, malformed, or with a bad number. The message is
    one line, "<file>[:<line>]: <what>"."""

    def __init__(self, source: str, message: str, line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(re.sub(r"\s*[\r\n]+\s*", " ", f"{where}: {message}"))


@dataclass(eq=False)
class LoadPoint:
    """One measured load point (or stage). Latency dicts map statistic ("mean", "p50", "p90",
    "p99") to milliseconds, holding those the file gives; per_request (when the file has per-request
    records) has the columns of PER_REQUEST_SCHEMA, successful requests only, null where the format
    lacks a value. stage: the stage index of a staged run; failed: the failed requests, if stated."""

    source: str
    format: str
    load_axis: str | None  # "concurrency" | "rate" | None
    load: float | None
    requests: int
    duration_s: float | None
    throughput_rps: float | None
    ttft_ms: dict[str, float] = field(default_factory=dict)
    itl_ms: dict[str, float] = field(default_factory=dict)
    e2e_ms: dict[str, float] = field(default_factory=dict)
    per_request: pl.DataFrame | None = None
    stage: int | None = None
    failed: int | None = None


def check_number(src: str, value: Any, what: str, line: int | None = None) -> float:
    """A finite, non-negative number, or BenchmarkFormatError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BenchmarkFormatError(src, f"{what} is not a number ({value!r:.40})", line)
    v = float(value)
    if not math.isfinite(v):
        raise BenchmarkFormatError(src, f"{what} is not finite ({v})", line)
    if v < 0:
        raise BenchmarkFormatError(src, f"{what} is negative ({v:g})", line)
    return v


def check_count(src: str, value: Any, what: str, line: int | None = None) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value  # exact, even for epoch nanoseconds (beyond a float's 53 bits)
    v = check_number(src, value, what, line)
    if v != int(v):
        raise BenchmarkFormatError(src, f"{what} is not a whole number ({v:g})", line)
    return int(v)


def ms_per_unit(src: str, unit: Any, what: str, line: int | None = None) -> float:
    if unit not in _MS_PER:
        raise BenchmarkFormatError(src, f"{what} is {unit!r:.20}, not a time unit (ns, us, ms, sec)", line)
    return _MS_PER[unit]


def require_key(src: str, obj: dict, dotted: str, what: str, line: int | None = None) -> Any:
    """obj's value at a dotted key, or BenchmarkFormatError '<what> lacks key ...'."""
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or cur.get(part) is None:
            raise BenchmarkFormatError(src, f"{what} lacks key '{dotted}'", line)
        cur = cur[part]
    return cur


def _summary(values: list[float | None] | pl.Series) -> dict[str, float]:
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if v.size == 0:
        return {}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def fill_from_table(point: LoadPoint) -> LoadPoint:
    """Latency figures the summary lacks, from the per-request table."""
    if point.per_request is not None and point.per_request.height:
        for attr, col in (("ttft_ms", "ttft_ms"), ("itl_ms", "itl_ms"), ("e2e_ms", "e2e_ms")):
            if not getattr(point, attr):
                setattr(point, attr, _summary(point.per_request[col].to_list()))
    return point


def per_request_table(rows: dict[str, list]) -> pl.DataFrame:
    return pl.DataFrame({c: rows.get(c, []) for c in PER_REQUEST_SCHEMA}, schema=PER_REQUEST_SCHEMA)


_DIR_CONCURRENCY = re.compile(r"(?:^|-)concurrency(\d+)(?:-|$)")
_DIR_RATE = re.compile(r"(?:^|-)request_rate(\d+(?:\.\d+)?)(?:-|$)")


def load_from_folder(p: Path) -> tuple[str | None, float | None]:
    """The load an AIPerf or genai-perf artifact folder's name states (rate first), else none."""
    name = p.resolve().parent.name
    if m := _DIR_RATE.search(name):
        return "rate", float(m.group(1))
    if m := _DIR_CONCURRENCY.search(name):
        return "concurrency", float(m.group(1))
    return None, None
