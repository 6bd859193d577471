"""Trace loaders (poa_mc.model.traces) and `dist = "trace"` in grid files. No simulations: fast."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from poa_mc.cli.main import main
from poa_mc.model.config import loads_grid
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_error import SpecError
from poa_mc.model.traces import load_azure, load_burstgpt, load_mooncake, load_trace, sample_path
from tests.grids_for_tests import SMALL

SAMPLES = [("mooncake_sample", "mooncake", 300), ("azure_sample", "azure", 400), ("burstgpt_sample", "burstgpt", None)]


@pytest.mark.parametrize("name,fmt,rows", SAMPLES)
def test_shipped_samples_load(name, fmt, rows):
    path = sample_path(name)
    assert path is not None and path.is_file()
    t = load_trace(path, fmt)
    n = len(t)
    assert 200 <= n <= 500 and (rows is None or n == rows)
    assert t.isl.dtype == np.int64 and t.osl.dtype == np.int64 and t.arrival_ms.dtype == np.float64
    assert len(t.osl) == len(t.arrival_ms) == n
    assert (t.isl >= 100).all() and (t.isl <= 8000).all()
    assert (t.osl >= 10).all() and (t.osl <= 1000).all()
    assert (np.diff(t.arrival_ms) >= 0).all() and t.arrival_ms[0] >= 0
    assert len(t.sha256) == 64 and t.source == str(path)


def test_burstgpt_sample_drops_failures():
    path = sample_path("burstgpt_sample")
    lines = path.read_text().splitlines()[1:]
    failed = sum(1 for line in lines if line.split(",")[3] == "0")
    assert failed > 0
    assert len(load_burstgpt(path)) == len(lines) - failed


def test_mooncake_known_values(tmp_path):
    p = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1000, "output_length": 20, "hash_ids": [1, 2]},
        {"timestamp": 250, "input_length": 30, "output_length": 5, "hash_ids": [1], "session_id": "s", "delay": 3},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    t = load_mooncake(p)
    assert t.isl.tolist() == [1000, 30] and t.osl.tolist() == [20, 5]
    assert t.arrival_ms.tolist() == [0.0, 250.0] and t.hash_ids == [[1, 2], [1]]


def test_azure_known_values(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:47.1805900,1020,7\n"
        "2023-11-16 18:15:48,5,0\n"
    )
    t = load_azure(p)
    assert t.isl.tolist() == [374, 1020, 5] and t.osl.tolist() == [44, 7, 0]
    assert np.allclose(t.arrival_ms, [0.0, 500.0, 1319.41])


def test_burstgpt_known_values(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "6,GPT-4,1000,0,1000,API log\n"
        "7.5,ChatGPT,12,300,312,Conversation log\n"
    )
    t = load_burstgpt(p)
    assert t.isl.tolist() == [472, 12] and t.osl.tolist() == [18, 300]
    assert t.arrival_ms.tolist() == [5000.0, 7500.0]


@pytest.mark.parametrize(
    "fmt,text,where",
    [
        ("azure", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n", "line 1: missing column(s) GeneratedTokens"),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\n2023-11-16 18:15:47,x,4\n",
            "line 3",
        ),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\nyesterday,3,4\n", "line 3"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "empty trace"),
        (
            "burstgpt",
            "Timestamp,Request tokens,Response tokens\n1,2,3\n2,-5,3\n",
            "line 3: Request tokens must be >= 0",
        ),
        ("burstgpt", "Timestamp,Request tokens,Response tokens\n1,2,0\n", "empty trace"),
        ("burstgpt", "Timestamp,Model,Response tokens\n1,a,3\n", "missing column(s) Request tokens"),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 3, "output_length": 4, "hash_ids": []}\n{"timestamp": 1}\n',
            "line 2",
        ),
        ("mooncake", '{"timestamp": 0, "input_length": 3, "output_length": 4, "hash_ids": []}\n\n{oops\n', "line 3"),
        ("mooncake", '{"timestamp": 0, "input_length": 2.5, "output_length": 4, "hash_ids": []}\n', "line 1"),
        ("mooncake", "", "empty trace"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, fmt, text, where):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        load_trace(p, fmt)
    assert str(p) in e.value.message and where in e.value.message


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_mooncake(tmp_path / "nope.jsonl")


def _grid(isl: str, osl: str = "16") -> str:
    return SMALL.replace("isl = 512", f"isl = {isl}").replace("osl = 16", f"osl = {osl}")


def test_grid_trace_dist_resolves_to_empirical():
    grid = loads_grid(_grid('{ dist = "trace", file = "mooncake_sample", format = "mooncake" }'))
    trace = load_mooncake(sample_path("mooncake_sample"))
    assert grid.workload.isl.kind == "empirical"
    assert grid.workload.isl.values == tuple(trace.isl.tolist())
    d = grid.to_dict()["workload"]["isl"]
    assert "values" not in d and d["trace"]["sha256"] == trace.sha256 and d["trace"]["count"] == len(trace)
    json.dumps(grid.to_dict())


def test_grid_trace_relative_path_and_max(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "b.csv").write_text("Timestamp,Request tokens,Response tokens\n1,10,900\n2,20,40\n")
    text = _grid("512", '{ dist = "trace", file = "traces/b.csv", format = "burstgpt", max = 100 }')
    (tmp_path / "g.toml").write_text(text)
    grid = loads_grid(text, str(tmp_path / "g.toml"))
    assert grid.workload.osl.values == (100, 40)
    assert grid.to_dict()["workload"]["osl"]["trace"]["max"] == 100


@pytest.mark.parametrize(
    "isl,path",
    [
        ('{ dist = "trace", file = "nope.jsonl", format = "mooncake" }', "workload.isl.file"),
        ('{ dist = "trace", file = "mooncake_sample", format = "sharegpt" }', "workload.isl.format"),
        ('{ dist = "trace", file = "mooncake_sample" }', "workload.isl.format"),
        ('{ dist = "trace", file = "mooncake_sample", format = "azure" }', "workload.isl.file"),
        ('{ dist = "trace", file = "mooncake_sample", format = "mooncake", max = 0 }', "workload.isl.max"),
        ('{ dist = "trace", file = "mooncake_sample", format = "mooncake", cap = 9 }', "workload.isl.cap"),
    ],
)
def test_grid_trace_errors_name_the_key(isl, path):
    with pytest.raises(ConfigError) as e:
        loads_grid(_grid(isl))
    assert e.value.path == path


def test_cli_validate_bad_trace_path_exits_2(tmp_path):
    g = tmp_path / "g.toml"
    g.write_text(_grid('{ dist = "trace", file = "missing/trace.jsonl", format = "mooncake" }'))
    r = CliRunner().invoke(main, ["validate", str(g)])
    assert r.exit_code == 2
    assert "workload.isl.file" in r.output


def test_cells_table_stores_long_trace_values_compactly():
    import json

    from poa_mc.model.grid import expand
    from poa_mc.run.runner import cells_frame

    grid = loads_grid(
        """
[run]
name = "t"
replicas = 2
requests = 10
warmup = 1
[workload]
isl = { dist = "trace", file = "mooncake_sample", format = "mooncake" }
osl = 8
[grid]
topology = ["1P/1D"]
concurrency = [2]
[[policy]]
name = "kv"
kind = "kv"
[poa]
selfish = "kv"
"""
    )
    frame = cells_frame(expand(grid))
    isl = json.loads(frame["isl"][0])
    assert isl["kind"] == "empirical" and isl["values"]["count"] == 300 and len(isl["values"]["sha256"]) == 64
    assert len(frame["spec_json"][0]) < 4000
