"""`read_benchmark(path)`: the load points in a benchmark result file, whatever the tool that wrote
it. The format is told from the content (the extension and the file name only break ties): a file
whose first non-blank character is ``{`` or ``[`` is JSON (one document, or JSON Lines), anything
else CSV; each tool module's predicates then say whose it is, and its reader makes the load points.
A folder is read as an inference-perf report folder (each ``stage_N_lifecycle_metrics.json`` in it,
by N). A malformed or unknown file, or a bad number, raises `BenchmarkFormatError`, whose message is
one line naming the file and, where it applies, the line (JSON Lines) or the key, row or column.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from poa_mc.io.benchmarks.aiperf import aiperf_records_point, aiperf_summary_point, is_aiperf_record, is_aiperf_summary
from poa_mc.io.benchmarks.common import UNKNOWN, BenchmarkFormatError, LoadPoint
from poa_mc.io.benchmarks.csv_summary import read_csv_text
from poa_mc.io.benchmarks.inference_perf import STAGE_FILE, inference_perf_point, is_inference_perf
from poa_mc.io.benchmarks.vllm_bench import is_vllm, vllm_point


def read_benchmark(path: str | Path) -> list[LoadPoint]:
    """The load points in `path`: a benchmark file of a known format, or an inference-perf report
    folder. Raises BenchmarkFormatError."""
    p = Path(path)
    src = str(path)
    if p.is_dir():
        return _read_inference_perf_dir(p, src)
    if not p.is_file():
        raise BenchmarkFormatError(src, "no such file")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise BenchmarkFormatError(src, f"cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise BenchmarkFormatError(src, "not valid UTF-8", line) from None
    head = text.lstrip()
    if not head:
        raise BenchmarkFormatError(src, "empty file")
    if head[0] in "{[":
        return _read_json_text(p, src, text)
    return read_csv_text(p, src, text)


def _read_inference_perf_dir(p: Path, src: str) -> list[LoadPoint]:
    stages = sorted(
        (int(m.group(1)), f) for f in p.iterdir() if f.is_file() and (m := STAGE_FILE.match(f.name)) is not None
    )
    if not stages:
        raise BenchmarkFormatError(src, "a folder, and no inference-perf stage_N_lifecycle_metrics.json in it")
    points = []
    for _, f in stages:
        (point,) = read_benchmark(f)
        if point.format != "inference-perf":
            raise BenchmarkFormatError(str(f), "not an inference-perf stage report")
        points.append(point)
    return points


def _read_json_text(p: Path, src: str, text: str) -> list[LoadPoint]:
    if p.suffix.lower() != ".jsonl":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            if e.msg != "Extra data":
                raise BenchmarkFormatError(src, f"not valid JSON (column {e.colno}: {e.msg})", e.lineno) from None
        else:
            return _read_json_document(p, src, doc)
    return _read_json_records(p, src, _json_lines(src, text))


def _json_lines(src: str, text: str) -> list[tuple[int, dict]]:
    out = []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkFormatError(src, f"not a JSON object (column {e.colno}: {e.msg})", n) from None
        if not isinstance(obj, dict):
            raise BenchmarkFormatError(src, "not a JSON object", n)
        out.append((n, obj))
    return out


def _read_json_document(p: Path, src: str, doc: Any) -> list[LoadPoint]:
    if isinstance(doc, dict):
        if is_inference_perf(doc):
            return [inference_perf_point(p, src, doc)]
        if is_vllm(doc):
            return [vllm_point(src, doc)]
        if is_aiperf_summary(doc):
            return [aiperf_summary_point(p, src, doc)]
    raise BenchmarkFormatError(src, UNKNOWN)


def _read_json_records(p: Path, src: str, records: list[tuple[int, dict]]) -> list[LoadPoint]:
    if not records:
        raise BenchmarkFormatError(src, "empty file")
    first = records[0][1]
    if is_aiperf_record(first):
        return [aiperf_records_point(p, src, records)]
    if is_vllm(first):
        points = []
        for n, rec in records:
            if not is_vllm(rec):
                raise BenchmarkFormatError(src, "not a vLLM bench serve result like the lines before it", n)
            points.append(vllm_point(src, rec, n))
        return points
    raise BenchmarkFormatError(src, UNKNOWN)
