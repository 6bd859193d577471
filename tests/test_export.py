"""`poa-mc export`: CSV and NDJSON that read back to the Parquet values; bad input exits 2, writes nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from poa_mc.cli.main import main
from poa_mc.io.export import ExportError, export_run, flatten_for_csv
from tests import fake_engine
from tests.grids_for_tests import SMALL

TABLES = ("summary", "poa", "cells")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small complete run (8 cells, 1P/2D and 1P/3D: candidate arrays of two widths) from the fake engine."""
    import poa_mc.run.runner

    tmp = tmp_path_factory.mktemp("export")
    grid = tmp / "small.toml"
    grid.write_text(SMALL)
    out = tmp / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(poa_mc.run.runner, "_default_simulate", lambda: fake_engine.simulate)
        r = CliRunner().invoke(main, ["run", "--grid", str(grid), "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    return out


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _samples(run_dir: Path) -> list[tuple[str, pl.DataFrame]]:
    order = pl.read_parquet(run_dir / "cells.parquet")["cell_id"].to_list()
    return [(cid, pl.read_parquet(run_dir / "samples" / f"cell_id={cid}" / "part.parquet")) for cid in order]


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns
    assert a.height == b.height
    for name in a.columns:
        x, y = a[name].to_list(), b[name].to_list()
        for i, (u, v) in enumerate(zip(x, y)):
            if isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v):
                continue
            assert u == v, f"{name}[{i}]: {u!r} != {v!r}"


def test_csv_round_trip(run_dir, tmp_path):
    dest = tmp_path / "csv" / "nested"  # parents are created
    r = invoke("export", run_dir, "--format", "csv", "--to", dest, "--samples")
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in dest.iterdir())
    assert names == ["cells.csv", "manifest.json", "poa.csv", "samples.csv", "summary.csv"]
    assert "summary.csv (8 rows)" in r.output
    assert json.loads((dest / "manifest.json").read_text()) == json.loads((run_dir / "manifest.json").read_text())
    for t in TABLES:
        want = pl.read_parquet(run_dir / f"{t}.parquet")
        back = pl.read_csv(dest / f"{t}.csv", infer_schema_length=None)
        _same(back.cast(dict(want.schema)), want)  # values equal once read back with the Parquet types
    # samples: one file, cell_id first, arrays flattened to name_0..name_{W-1}, W the widest cell's
    back = pl.read_csv(dest / "samples.csv", infer_schema_length=None)
    parts = _samples(run_dir)
    widest = max(df.schema["cand_tokens"].size for _, df in parts)
    # one schema across the cells of a run: the narrower topology's columns are NaN-padded
    assert min(df.schema["cand_tokens"].size for _, df in parts) == widest
    assert back.columns[0] == "cell_id"
    assert [c for c in back.columns if c.startswith("cand_tokens_")] == [f"cand_tokens_{i}" for i in range(widest)]
    assert back.height == sum(df.height for _, df in parts)
    row = 0
    for cid, df in parts:
        got = back.slice(row, df.height)
        row += df.height
        assert got["cell_id"].unique().to_list() == [cid]
        for name, dtype in df.schema.items():
            if isinstance(dtype, pl.Array):
                for i in range(widest):
                    col = got[f"{name}_{i}"].cast(dtype.inner)
                    if i < dtype.size:
                        _same(col.to_frame(), df[name].arr.get(i).alias(f"{name}_{i}").to_frame())
                    else:
                        assert col.null_count() == df.height  # narrower cell: padded with empty fields
            else:
                _same(got.select(pl.col(name).cast(dtype)), df.select(name))
    assert back[f"cand_tokens_{widest - 1}"].is_nan().any()


def test_json_is_ndjson_and_round_trips(run_dir, tmp_path):
    dest = tmp_path / "json"
    r = invoke("export", run_dir, "--format", "json", "--to", dest, "--samples")
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in dest.iterdir())
    assert names == ["cells.ndjson", "manifest.json", "poa.ndjson", "samples.ndjson", "summary.ndjson"]

    def strict(s: str):
        raise AssertionError(f"non-standard JSON constant {s}")

    for t in (*TABLES, "samples"):
        lines = (dest / f"{t}.ndjson").read_text().splitlines()
        records = [json.loads(ln, parse_constant=strict) for ln in lines]  # plain JSON: no NaN or Infinity
        assert all(isinstance(rec, dict) for rec in records)
    for t in TABLES:
        want = pl.read_parquet(run_dir / f"{t}.parquet")
        back = pl.read_ndjson(dest / f"{t}.ndjson", schema=dict(want.schema))
        _same(back, want.with_columns(pl.selectors.float().fill_nan(None)))  # NaN comes back as null
    recs = [json.loads(ln) for ln in (dest / "samples.ndjson").read_text().splitlines()]
    start = 0
    for cid, df in _samples(run_dir):
        chunk = recs[start : start + df.height]
        start += df.height
        assert {rec["cell_id"] for rec in chunk} == {cid}
        assert [rec["cand_tokens"] for rec in chunk] == [
            [None if math.isnan(v) else v for v in row] for row in df["cand_tokens"].to_list()
        ]
        assert [rec["ttft_ms"] for rec in chunk] == df["ttft_ms"].to_list()
    assert start == len(recs)


def test_without_samples_and_replacing_files(run_dir, tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    (dest / "summary.csv").write_text("old")
    res = export_run(run_dir, dest, "csv")
    assert [p.name for p in res.files] == ["summary.csv", "poa.csv", "cells.csv", "manifest.json"]
    assert res.rows == {"summary": 8, "poa": 4, "cells": 8}
    assert (dest / "keep.txt").read_text() == "mine"
    assert (dest / "summary.csv").read_text().startswith("cell_id,")
    assert not (dest / "samples.csv").exists()
    assert not list(dest.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("src", "args", "needle"),
    [
        ("{tmp}/missing", ["--to", "{tmp}/o"], "{tmp}/missing: no such directory"),
        ("{tmp}", ["--to", "{tmp}/o"], "{tmp}: no manifest.json; not a poa-mc run directory"),
        ("{tmp}/afile", ["--to", "{tmp}/o"], "{tmp}/afile: is not a directory"),
        ("{run}", ["--to", "{tmp}/o", "--format", "xml"], "--format: 'xml' is not one of csv, json"),
        ("{run}", ["--to", "{tmp}/afile"], "--to {tmp}/afile: exists and is not a directory"),
        ("{run}", ["--to", "{tmp}/afile/sub"], "--to {tmp}/afile/sub: cannot write there"),
    ],
)
def test_bad_input_exits_2_with_one_line(run_dir, tmp_path, src, args, needle):
    (tmp_path / "afile").write_text("not a folder")
    fill = {"tmp": tmp_path, "run": run_dir}
    needle = needle.format(**fill)
    r = CliRunner().invoke(main, ["export", src.format(**fill), *[a.format(**fill) for a in args]])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], r.stderr
    assert not (tmp_path / "o").exists()
    assert (tmp_path / "afile").read_text() == "not a folder"


def test_no_summary_is_bad_input(run_dir, tmp_path):
    import shutil

    partial = tmp_path / "partial"
    shutil.copytree(run_dir, partial)
    (partial / "summary.parquet").unlink()
    r = invoke("export", partial, "--to", tmp_path / "o")
    assert r.exit_code == 2
    assert r.stderr.strip() == f"Error: {partial}: no summary.parquet; run `poa-mc reduce {partial}` first"
    assert not (tmp_path / "o").exists()


def test_failure_midway_leaves_nothing(run_dir, tmp_path, monkeypatch):
    import poa_mc.io.export

    def boom(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(poa_mc.io.export, "_write_samples", boom)
    fresh = tmp_path / "fresh"
    with pytest.raises(OSError):
        export_run(run_dir, fresh, "csv", samples=True)
    assert not fresh.exists()  # it created the folder, and removed it again
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "summary.csv").write_text("old")
    with pytest.raises(OSError):
        export_run(run_dir, kept, "json", samples=True)
    assert sorted(p.name for p in kept.iterdir()) == ["summary.csv"]  # no temp file, no new table
    assert (kept / "summary.csv").read_text() == "old"
    r = invoke("export", run_dir, "--to", kept, "--samples")
    assert r.exit_code == 1 and r.stderr.startswith("Error: OSError")


def test_library_errors(run_dir, tmp_path):
    with pytest.raises(ExportError, match="--format"):
        export_run(run_dir, tmp_path / "o", "parquet")
    assert not (tmp_path / "o").exists()


def test_flatten_for_csv_nested_columns():
    df = pl.DataFrame(
        {
            "a": pl.Series([[1.0, float("nan")], [2.0, 3.0]], dtype=pl.Array(pl.Float64, 2)),
            "l": [[1, 2], []],
            "s": [{"k": 1}, None],
        }
    )
    out = flatten_for_csv(df, {"a": 3})
    assert out.columns == ["a_0", "a_1", "a_2", "l", "s"]
    assert out["a_2"].null_count() == 2
    assert out["l"].to_list() == ["[1,2]", "[]"]
    assert json.loads(out["s"][0]) == {"k": 1}
