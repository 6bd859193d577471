"""Benchmark result readers (poa_mc.io.benchmarks) on the shipped samples (poa_mc/data/benchmarks/,
made-up numbers) and on broken copies of them. No simulations: fast."""

import json
import re
import shutil
from importlib import resources
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from poa_mc.io.benchmarks.common import FORMATS, PER_REQUEST_SCHEMA, UNKNOWN, BenchmarkFormatError, LoadPoint
from poa_mc.io.benchmarks.read import read_benchmark

DATA = Path(str(resources.files("poa_mc.data") / "benchmarks"))
JSONL = DATA / "aiperf_profile_export.jsonl"
AIPERF_JSON = DATA / "aiperf_profile_export_aiperf.json"
AIPERF_CSV = DATA / "aiperf_profile_export_aiperf.csv"
GENAI_CSV = DATA / "genai_perf_profile_export_genai_perf.csv"
VLLM = DATA / "vllm_bench_serve.json"
STAGES = [DATA / f"inference_perf_stage_{i}_lifecycle_metrics.json" for i in (0, 1)]


def one(path) -> LoadPoint:
    points = read_benchmark(path)
    assert len(points) == 1
    return points[0]


def raises(path, *fragments) -> str:
    """The one-line message of the BenchmarkFormatError that reading `path` raises."""
    with pytest.raises(BenchmarkFormatError) as info:
        read_benchmark(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    for f in fragments:
        assert f in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------
# the samples, value by value


def test_aiperf_records():
    p = one(JSONL)
    assert p.format == "aiperf-records" and p.source == str(JSONL)
    assert (p.load_axis, p.load) == (None, None)  # the folder's name states no load
    assert p.requests == 20 and p.failed == 1  # 21 lines, one with an error
    t = p.per_request
    assert t.height == 20 and dict(t.schema) == PER_REQUEST_SCHEMA
    first = t.row(0, named=True)
    assert first == {"ttft_ms": 158.935441, "itl_ms": 14.236976, "e2e_ms": 1824.661661, "isl": 532, "osl": 118}
    # duration: last request_end_ns - first request_start_ns, exactly (epoch ns exceed a float's precision)
    recs = [json.loads(line)["metadata"] for line in JSONL.read_text().splitlines()]
    span = max(r["request_end_ns"] for r in recs) - min(r["request_start_ns"] for r in recs)
    assert p.duration_s == span / 1e9 and p.throughput_rps == pytest.approx(20 / p.duration_s)
    assert p.ttft_ms["mean"] == pytest.approx(t["ttft_ms"].mean())
    assert p.e2e_ms["p90"] == pytest.approx(float(np.percentile(t["e2e_ms"].to_numpy(), 90)))
    assert set(p.ttft_ms) == set(p.itl_ms) == set(p.e2e_ms) == {"mean", "p50", "p90", "p99"}


def test_aiperf_summary_json_agrees_with_its_records():
    s = one(AIPERF_JSON)
    assert s.format == "aiperf-json" and s.per_request is None
    assert (s.load_axis, s.load) == ("concurrency", 8.0)  # input_config.loadgen.concurrency
    assert s.requests == 20 and s.failed == 1
    assert s.ttft_ms["p99"] == pytest.approx(209.24649175) and s.e2e_ms["mean"] == pytest.approx(1813.67390285)
    r = one(JSONL)
    for field in ("ttft_ms", "itl_ms", "e2e_ms"):
        for stat, v in getattr(s, field).items():
            assert getattr(r, field)[stat] == pytest.approx(v, rel=1e-9), (field, stat)
    assert s.duration_s == pytest.approx(r.duration_s, rel=1e-9)  # "sec" in the file
    assert s.throughput_rps == pytest.approx(r.throughput_rps, rel=1e-9)


def test_aiperf_csv_is_the_json_rounded():
    c = one(AIPERF_CSV)
    assert c.format == "aiperf-csv" and (c.load_axis, c.load) == (None, None)
    assert c.requests == 20 and c.failed == 1 and c.duration_s == 5.35 and c.throughput_rps == 3.74
    assert c.ttft_ms == {"mean": 144.35, "p50": 134.45, "p90": 202.44, "p99": 209.25}
    assert c.e2e_ms["p50"] == 1825.50
    j = one(AIPERF_JSON)
    for field in ("ttft_ms", "itl_ms", "e2e_ms"):
        for stat, v in getattr(j, field).items():
            assert abs(getattr(c, field)[stat] - v) <= 0.005 + 1e-9, (field, stat)


def test_genai_perf_csv():
    g = one(GENAI_CSV)
    assert g.format == "genai-perf-csv" and g.per_request is None
    assert g.requests == 160 and g.throughput_rps == 8.34 and g.duration_s is None and g.failed is None
    assert g.e2e_ms == {"mean": 1912.40, "p50": 1889.25, "p90": 2154.38, "p99": 2431.06}  # "1,912.40" read
    assert g.ttft_ms == {"mean": 231.47, "p50": 205.33, "p90": 430.05, "p99": 588.31}
    assert g.itl_ms["p50"] == 13.11


@pytest.mark.parametrize(
    "folder,axis,load",
    [("llama-openai-chat-concurrency16", "concurrency", 16.0), ("llama-openai-chat-request_rate10.5", "rate", 10.5)],
)
def test_load_from_an_artifact_folder_name(tmp_path, folder, axis, load):
    for sample in (GENAI_CSV, AIPERF_CSV, JSONL):
        d = tmp_path / sample.stem / folder
        d.mkdir(parents=True)
        copy = d / sample.name
        shutil.copy(sample, copy)
        p = one(copy)
        assert (p.load_axis, p.load) == (axis, load)


def test_vllm_bench_serve_converts_seconds():
    raw = json.loads(VLLM.read_text())
    v = one(VLLM)
    assert v.format == "vllm-bench-serve"
    assert (v.load_axis, v.load) == ("concurrency", 4.0)  # request_rate "inf", max_concurrency 4
    assert v.requests == raw["completed"] == 11 and v.failed == 1
    assert v.duration_s == raw["duration"] and v.throughput_rps == raw["request_throughput"]
    assert v.ttft_ms == {
        "mean": raw["mean_ttft_ms"],
        "p50": raw["median_ttft_ms"],
        "p90": raw["p90_ttft_ms"],
        "p99": raw["p99_ttft_ms"],
    }
    assert v.e2e_ms["p99"] == raw["p99_e2el_ms"] and v.itl_ms["mean"] == raw["mean_itl_ms"]
    t = v.per_request
    assert t.height == 11 and dict(t.schema) == PER_REQUEST_SCHEMA  # the failed request (errors[7]) dropped
    assert [i for i, e in enumerate(raw["errors"]) if e] == [7]
    first = t.row(0, named=True)
    assert first["ttft_ms"] == pytest.approx(raw["ttfts"][0] * 1000)  # seconds in the file
    assert first["e2e_ms"] == pytest.approx(raw["latencies"][0] * 1000)
    assert first["itl_ms"] == pytest.approx(np.mean(raw["itls"][0]) * 1000)
    assert (first["isl"], first["osl"]) == (raw["input_lens"][0], raw["output_lens"][0])
    assert t["isl"].to_list() == [x for x, e in zip(raw["input_lens"], raw["errors"]) if not e]
    # the summary was computed from the same lists: the table in ms reproduces it
    assert t["ttft_ms"].mean() == pytest.approx(raw["mean_ttft_ms"])
    assert t["e2e_ms"].median() == pytest.approx(raw["median_e2el_ms"])


def test_vllm_rate_appended_results_and_missing_summary(tmp_path):
    raw = json.loads(VLLM.read_text())
    a = dict(raw, request_rate=2.5)
    b = {k: x for k, x in raw.items() if "e2el" not in k and k not in ("ttfts", "itls", "input_lens", "output_lens")}
    p = tmp_path / "appended.json"  # --append-result: one object a line
    p.write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")
    first, second = read_benchmark(p)
    assert (first.load_axis, first.load) == ("rate", 2.5)
    assert (second.load_axis, second.load) == ("concurrency", 4.0)
    # no e2el statistics saved: computed from `latencies` (seconds), the failed request dropped
    t = second.per_request
    assert t.height == 11 and t["ttft_ms"].null_count() == 11 and t["isl"].null_count() == 11
    ok = [x * 1000 for x, e in zip(raw["latencies"], raw["errors"]) if not e]
    assert second.e2e_ms["mean"] == pytest.approx(np.mean(ok)) and second.ttft_ms == one(VLLM).ttft_ms
    # without an errors list, the failed request is known by its latency of 0.0
    c = {k: x for k, x in raw.items() if k != "errors"}
    q = tmp_path / "no_errors.json"
    q.write_text(json.dumps(c))
    assert one(q).per_request.height == 11


def test_inference_perf_stages():
    raws = [json.loads(s.read_text()) for s in STAGES]
    points = [one(s) for s in STAGES]
    for i, (p, raw) in enumerate(zip(points, raws)):
        assert p.format == "inference-perf" and p.stage == i and p.per_request is None
        assert p.load_axis == "rate" and p.load == raw["load_summary"]["requested_rate"]
        lat = raw["successes"]["latency"]
        assert p.ttft_ms["mean"] == pytest.approx(lat["time_to_first_token"]["mean"] * 1000)  # seconds in the file
        assert p.ttft_ms["p50"] == pytest.approx(lat["time_to_first_token"]["median"] * 1000)
        assert p.e2e_ms["p99"] == pytest.approx(lat["request_latency"]["p99"] * 1000)
        assert p.itl_ms["p90"] == pytest.approx(lat["inter_token_latency"]["p90"] * 1000)
        assert p.duration_s == raw["benchmark_time_seconds"]
        assert p.throughput_rps == raw["successes"]["throughput"]["requests_per_sec"]
    assert [(p.load, p.requests, p.failed) for p in points] == [(2.0, 60, 0), (4.0, 118, 2)]
    assert 100 < points[0].ttft_ms["mean"] < points[1].ttft_ms["mean"] < 300


def test_inference_perf_report_folder(tmp_path):
    for i, s in reversed(list(enumerate(STAGES))):
        shutil.copy(s, tmp_path / f"stage_{i}_lifecycle_metrics.json")
    raw = json.loads(STAGES[1].read_text())
    raw["load_summary"]["concurrency"] = 32  # a concurrent stage: its concurrency wins over the rate
    (tmp_path / "stage_10_lifecycle_metrics.json").write_text(json.dumps(raw))
    (tmp_path / "summary_lifecycle_metrics.json").write_text("{}")  # not a stage: not read
    (tmp_path / "config.yaml").write_text("load: {}\n")
    points = read_benchmark(tmp_path)
    assert [p.stage for p in points] == [0, 1, 10]
    assert [(p.load_axis, p.load) for p in points] == [("rate", 2.0), ("rate", 4.0), ("concurrency", 32.0)]
    assert read_benchmark(DATA)[1].requests == 118  # the prefixed sample names count as stage files


# ---------------------------------------------------------------------------------------------
# detection from the content


@pytest.mark.parametrize(
    "sample,neutral,fmt",
    [
        (JSONL, "records.txt", "aiperf-records"),
        (AIPERF_JSON, "summary.json", "aiperf-json"),
        (AIPERF_CSV, "summary.csv", "aiperf-csv"),
        (GENAI_CSV, "export.csv", "genai-perf-csv"),
        (VLLM, "result.json", "vllm-bench-serve"),
        (STAGES[0], "report.json", "inference-perf"),
    ],
)
def test_detection_by_content(tmp_path, sample, neutral, fmt):
    copy = tmp_path / neutral
    shutil.copy(sample, copy)
    assert [p.format for p in read_benchmark(copy)] == [fmt]


def test_every_sample_has_a_format():
    seen = {p.format for f in DATA.iterdir() if f.suffix in (".json", ".jsonl", ".csv") for p in read_benchmark(f)}
    assert seen == set(FORMATS)
    assert isinstance(one(VLLM).per_request, pl.DataFrame)


# ---------------------------------------------------------------------------------------------
# bad input: one line naming the file (and the line, the key, the row or the column)


def test_truncated_jsonl_line(tmp_path):
    lines = JSONL.read_text().splitlines()
    lines[16] = lines[16][: len(lines[16]) // 2]  # line 17 cut short
    p = tmp_path / "runs" / "a.jsonl"
    p.parent.mkdir()
    p.write_text("\n".join(lines) + "\n")
    msg = raises(p, f"{p}:17: not a JSON object")
    assert str(p) + ":17:" in msg


def test_jsonl_line_not_an_object_and_negative_latency(tmp_path):
    lines = JSONL.read_text().splitlines()
    p = tmp_path / "b.jsonl"
    p.write_text("\n".join(lines[:3] + ["[1, 2]"] + lines[3:]))
    raises(p, f"{p}:4: not a JSON object")
    rec = json.loads(lines[4])
    rec["metrics"]["time_to_first_token"]["value"] = -3.5
    p.write_text("\n".join(lines[:4] + [json.dumps(rec)] + lines[5:]))
    raises(p, f"{p}:5: 'metrics.time_to_first_token.value' is negative")
    rec["metrics"]["time_to_first_token"]["value"] = 12.0
    rec["metrics"]["time_to_first_token"]["unit"] = "fortnights"
    p.write_text("\n".join(lines[:4] + [json.dumps(rec)] + lines[5:]))
    raises(p, f"{p}:5: 'metrics.time_to_first_token.unit'", "not a time unit")


def test_unknown_json(tmp_path):
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"model": "x", "results": [1, 2, 3]}))
    assert raises(p) == f"{p}: {UNKNOWN}"
    p.write_text("[1, 2, 3]")
    assert raises(p) == f"{p}: {UNKNOWN}"
    p.write_text('{"a": 1}\n{"a": 2}\n')  # JSON Lines of something else
    assert raises(p) == f"{p}: {UNKNOWN}"


def test_broken_json_names_its_line(tmp_path):
    p = tmp_path / "cut.json"
    p.write_text(STAGES[0].read_text()[:300])
    assert re.fullmatch(rf"{re.escape(str(p))}:\d+: not valid JSON \(column \d+: .+\)", raises(p))


def test_csv_missing_a_required_column(tmp_path):
    rows = GENAI_CSV.read_text().splitlines()
    head = rows[0].split(",")
    drop = head.index("p99")
    cut = []
    for r in rows:
        if r.startswith("Metric,avg") or r.startswith("Time To") or r.startswith("Inter Token"):
            cells = r.split(",")
            r = ",".join(cells[:drop] + cells[drop + 1 :])
        cut.append(r)
    p = tmp_path / "x.csv"
    p.write_text("\n".join(cut) + "\n")
    assert raises(p) == f"{p}: genai-perf export lacks column 'p99'"


def test_csv_missing_a_required_row_or_bad_cell(tmp_path):
    text = GENAI_CSV.read_text()
    p = tmp_path / "y.csv"
    p.write_text("\n".join(r for r in text.splitlines() if not r.startswith("Request Latency")))
    assert raises(p) == f"{p}: genai-perf export lacks row 'Request Latency (ms)'"
    p.write_text(text.replace("Request Count (count),160.00", "Request Count (count),many"))
    raises(p, "row 'Request Count (count)' column 'Value' is not a number")
    p.write_text(text.replace("231.47,88.12", "-231.47,88.12"))
    raises(p, "row 'Time To First Token (ms)' column 'avg' is negative")
    p.write_text("a,b,c\n1,2,3\n")
    assert raises(p) == f"{p}: {UNKNOWN}"
    q = tmp_path / "z.csv"
    q.write_text("\n".join(r for r in AIPERF_CSV.read_text().splitlines() if not r.startswith("Request Count")))
    assert raises(q) == f"{q}: AIPerf CSV export lacks row 'Request Count'"


def test_negative_or_non_finite_latency(tmp_path):
    raw = json.loads(VLLM.read_text())
    p = tmp_path / "result.json"
    p.write_text(json.dumps(dict(raw, p99_ttft_ms=-1.0)))
    raises(p, f"{p}: 'p99_ttft_ms' is negative (-1)")
    p.write_text(json.dumps(dict(raw, ttfts=[-0.1] + raw["ttfts"][1:])))
    raises(p, "'ttfts[0]' is negative")
    p.write_text(json.dumps(dict(raw, itls=raw["itls"][:-1])))
    raises(p, "'itls' has 11 entries but 'ttfts' has 12")
    rep = json.loads(STAGES[0].read_text())
    rep["successes"]["latency"]["time_to_first_token"]["p90"] = float("nan")
    q = tmp_path / "stage_0_lifecycle_metrics.json"
    q.write_text(json.dumps(rep))  # Python writes NaN, as the tools' json.dump would
    raises(q, "'successes.latency.time_to_first_token.p90' is not finite")
    s = json.loads(AIPERF_JSON.read_text())
    s["request_latency"]["p50"] = "fast"
    r = tmp_path / "profile_export_aiperf.json"
    r.write_text(json.dumps(s))
    raises(r, "'request_latency.p50' is not a number")


def test_missing_keys_and_files(tmp_path):
    s = json.loads(AIPERF_JSON.read_text())
    del s["request_count"]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(s))
    assert raises(p) == f"{p}: AIPerf summary lacks key 'request_count.avg'"
    rep = json.loads(STAGES[0].read_text())
    del rep["successes"]["count"]
    p.write_text(json.dumps(rep))
    assert raises(p) == f"{p}: inference-perf report lacks key 'successes.count'"
    raises(tmp_path / "nothing.json", "no such file")
    e = tmp_path / "empty.csv"
    e.write_text("\n\n")
    assert raises(e) == f"{e}: empty file"
    d = tmp_path / "folder"
    d.mkdir()
    raises(d, "no inference-perf stage_N_lifecycle_metrics.json")
