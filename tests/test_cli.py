import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from poa_mc.cli.main import main

from tests import fake_engine
from tests.grids_for_tests import SMALL

HERE = Path(__file__).parent


@pytest.fixture()
def grid_file(tmp_path):
    p = tmp_path / "small.toml"
    p.write_text(SMALL)
    return p


@pytest.fixture()
def fake(monkeypatch):
    import poa_mc.runner

    monkeypatch.setattr(poa_mc.runner, "_default_simulate", lambda: fake_engine.simulate)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_help_on_every_command():
    for cmd in ([], ["run"], ["validate"], ["presets"], ["reduce"], ["plot"]):
        r = invoke(*cmd, "--help")
        assert r.exit_code == 0, r.output
        assert "Usage:" in r.output
    assert "Exit codes" in invoke("--help").output


def test_validate_ok_and_bad(grid_file, tmp_path):
    r = invoke("validate", grid_file)
    assert r.exit_code == 0 and "8 cells" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text(SMALL.replace('["1P/2D", "1P/3D"]', '["1P/2D", "1P2D"]'))
    r = invoke("validate", bad)
    assert r.exit_code == 2
    assert 'grid.topology[1]: "1P2D" is not of the form xP/yD' in r.output
    assert invoke("validate", tmp_path / "missing.toml").exit_code == 2


def test_bad_grid_writes_nothing(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(SMALL.replace('selfish = "greedy"', 'selfish = "nobody"'))
    r = invoke("run", "--grid", bad, "--out", tmp_path / "out", "-q")
    assert r.exit_code == 2 and "poa.selfish" in r.output
    assert not (tmp_path / "out").exists()
    assert invoke("run", "--grid", bad.parent / "small.toml", "--shard", "3/2").exit_code == 2


def test_presets_list_and_show():
    r = invoke("presets")
    assert r.exit_code == 0 and "quickstart" in r.output and "dynamo-mocker" in r.output
    r = invoke("presets", "--show", "quickstart")
    assert r.exit_code == 0 and "[grid]" in r.output
    r = invoke("presets", "--show", "dynamo-mocker")
    assert r.exit_code == 0 and "p2" in r.output
    assert invoke("presets", "--show", "nope").exit_code == 2


def test_run_shards_then_reduce_and_plot(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    r = invoke("run", "--grid", grid_file, "--out", out, "--shard", "0/2")
    assert r.exit_code == 0, r.output
    assert "poa-mc reduce" in r.output and not (out / "summary.parquet").exists()
    r = invoke("reduce", out)
    assert r.exit_code == 2 and "cells have no samples" in r.output
    r = invoke("run", "--grid", grid_file, "--out", out, "--shard", "1/2")
    assert r.exit_code == 0, r.output
    assert (out / "summary.parquet").exists() and (out / "plots" / "poa_vs_load.png").exists()
    assert pl.read_parquet(out / "poa.parquet").height == 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["cells"]) == 8 and all(c["sim_rps"] > 0 for c in manifest["cells"].values())
    assert manifest["seed"] == 7 and manifest["poa_mc_version"]
    r = invoke("reduce", out, "--window", "2", "--no-plot")
    assert r.exit_code == 0 and "8 cells" in r.output
    # decode_first makes no prefill routing decision: an override naming it is bad input
    r = invoke("reduce", out, "--stage", "prefill", "--no-plot")
    assert r.exit_code == 2 and "--stage" in r.output and "no prefill routing decision" in r.output
    assert invoke("reduce", out, "--pricing", "frozen", "--no-plot").exit_code == 0
    assert invoke("plot", out).exit_code == 0
    assert invoke("plot", tmp_path).exit_code == 2


def test_resume_refuses_other_seed(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    other = tmp_path / "other.toml"
    other.write_text(SMALL.replace("seed = 7", "seed = 8"))
    for extra in (["--resume"], []):
        r = invoke("run", "--grid", other, "--out", out, *extra)
        assert r.exit_code == 2 and "seed 7 there, 8 here" in r.output
    r = invoke("run", "--grid", grid_file, "--out", out, "--resume")
    assert r.exit_code == 0 and "ran 0 cell(s), 8 already complete" in r.output


def _cli(args, env_extra=None, kill_after=None):
    env = {**os.environ, **(env_extra or {})}
    cmd = [sys.executable, str(HERE / "_kill_after.py"), str(kill_after if kill_after is not None else -1), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)


def test_kill_and_resume_equals_clean_run(grid_file, tmp_path):
    """The real engine, a real SIGKILL after 3 cells, then --resume: same bytes as a clean run."""
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    args = ["run", "--grid", str(grid_file), "-q"]
    r = _cli([*args, "--out", str(killed)], kill_after=3)
    assert r.returncode == -9, r.stderr
    done = sorted(p.parent.name for p in (killed / "samples").glob("cell_id=*/part.parquet"))
    assert len(done) == 3
    assert not list(killed.rglob("*.tmp"))  # killed between cells: no half-written file anywhere
    assert not (killed / "summary.parquet").exists()
    r = _cli([*args, "--out", str(killed), "--resume"])
    assert r.returncode == 0, r.stderr
    r = _cli([*args, "--out", str(clean)])
    assert r.returncode == 0, r.stderr
    parts = sorted(p.relative_to(clean) for p in clean.glob("samples/cell_id=*/part.parquet"))
    assert len(parts) == 8
    for rel in parts:
        assert (killed / rel).read_bytes() == (clean / rel).read_bytes(), rel
    for name in ("summary.parquet", "poa.parquet", "cells.parquet"):
        assert (killed / name).read_bytes() == (clean / name).read_bytes(), name
