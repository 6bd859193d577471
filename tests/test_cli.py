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
    import poa_mc.run.runner

    monkeypatch.setattr(poa_mc.run.runner, "_default_simulate", lambda: fake_engine.simulate)


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


def test_a_bad_figure_worker_count_is_bad_input_and_writes_nothing(grid_file, tmp_path, monkeypatch, fake):
    out = tmp_path / "out"
    monkeypatch.setenv("POA_MC_FIGURE_WORKERS", "two")
    r = invoke("run", "--grid", grid_file, "--out", out, "-q")
    assert r.exit_code == 2 and "POA_MC_FIGURE_WORKERS='two'" in r.output, r.output
    assert not out.exists()
    monkeypatch.setenv("POA_MC_FIGURE_WORKERS", "0")  # none: the figures are drawn in-process
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    pngs = {p.name: p.stat().st_mtime_ns for p in (out / "plots").glob("*.png")}
    assert pngs
    monkeypatch.setenv("POA_MC_FIGURE_WORKERS", "-1")
    for args in (["plot", out], ["reduce", out]):
        r = invoke(*args)
        assert r.exit_code == 2 and "POA_MC_FIGURE_WORKERS='-1'" in r.output, r.output
    assert {p.name: p.stat().st_mtime_ns for p in (out / "plots").glob("*.png")} == pngs


def test_the_console_script_leaves_with_every_line_delivered_and_its_exit_code(tmp_path):
    """`poa-mc` (cli.main:entry) leaves through os._exit once main returns: what it printed still
    arrives whole through a pipe, and the exit code is main's (0; 2 for bad input)."""
    from importlib.metadata import entry_points

    assert [e.value for e in entry_points(group="console_scripts") if e.name == "poa-mc"] == ["poa_mc.cli.main:entry"]
    r = subprocess.run([sys.executable, "-m", "poa_mc.cli.main", "presets"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == invoke("presets").output
    bad = tmp_path / "bad.toml"
    bad.write_text("[run]\nreplicas = 0\n")
    r = subprocess.run([sys.executable, "-m", "poa_mc.cli.main", "validate", str(bad)], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "run.replicas" in r.stderr


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
    assert r.exit_code == 2 and "cells are not complete yet" in r.output
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


def test_a_kill_inside_a_batch_loses_only_that_batchs_cells(grid_file, tmp_path):
    """The engine's batches of cells (poa_mc/engine/cell_batch.py: 100 replicas a cell, two cells a
    launch on the CPU): a SIGKILL in the third launch, its kernels done, keeps the first two
    launches' four cells whole and none of the third's; --resume ends equal to a clean run."""
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    args = ["run", "--grid", str(grid_file), "-q", "--replicas", "100"]
    r = _cli([*args, "--out", str(killed)], kill_after="b2")
    assert r.returncode == -9, r.stderr
    done = sorted(p.parent.name for p in (killed / "samples").glob("cell_id=*/part.parquet"))
    assert len(done) == 4
    assert not list(killed.rglob("*.tmp"))
    r = _cli([*args, "--out", str(killed), "--resume"])
    assert r.returncode == 0, r.stderr
    r = _cli([*args, "--out", str(clean)])
    assert r.returncode == 0, r.stderr
    for rel in sorted(p.relative_to(clean) for p in clean.glob("samples/cell_id=*/part.parquet")):
        assert (killed / rel).read_bytes() == (clean / rel).read_bytes(), rel
    for name in ("summary.parquet", "poa.parquet"):
        assert (killed / name).read_bytes() == (clean / name).read_bytes(), name


# --- bad input and environment faults: exit 2, one line, nothing written ----------------------


def _nothing_written(out):
    return not out.exists() or not any(out.iterdir())


def test_memory_that_cannot_fit_is_refused_before_writing(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    for cmd in (["validate", grid_file], ["run", "--grid", grid_file, "--out", out]):
        r = invoke(*cmd, "--replicas", "200000", "--requests", "20000000")
        assert r.exit_code == 2, r.output
        assert ("run.replicas" in r.output or "run.requests" in r.output) and "GiB" in r.output
    assert _nothing_written(out)


def test_out_under_a_file_or_unwritable(grid_file, tmp_path, fake, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = invoke("run", "--grid", grid_file, "--out", afile / "sub")
    errors = [ln for ln in r.output.splitlines() if not ln.startswith("warning:")]
    assert r.exit_code == 2 and len(errors) == 1 and "is a file, not a directory" in errors[0]
    import poa_mc.run.runner

    # root ignores permission bits, so a read-only file system is simulated where it is detected
    monkeypatch.setattr(poa_mc.run.runner.os, "access", lambda *a, **k: False)
    out = tmp_path / "ro" / "out"
    r = invoke("run", "--grid", grid_file, "--out", out)
    assert r.exit_code == 2 and "not writable" in r.output
    assert not (tmp_path / "ro").exists()
    # permission bits that say yes on a file system that says no (a read-only mount): the probe
    # folder check_out_dir tries to create is what finds out
    monkeypatch.setattr(poa_mc.run.runner.os, "access", lambda *a, **k: True)

    def read_only(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(poa_mc.run.runner.tempfile, "mkdtemp", read_only)
    r = invoke("run", "--grid", grid_file, "--out", out)
    errors = [ln for ln in r.output.splitlines() if not ln.startswith("warning:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Read-only file system" in errors[0], r.output
    assert not (tmp_path / "ro").exists()


def test_backend_cuda_without_a_gpu_writes_nothing(grid_file, tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    for cmd in (
        ["run", "--grid", str(grid_file), "--out", str(out), "--backend", "cuda"],
        ["validate", str(grid_file), "--set", "run.backend=cuda"],
    ):  # validate refuses what run would
        r = subprocess.run([sys.executable, "-m", "poa_mc.cli.main", *cmd],
                           capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip
        assert r.returncode == 2, r.stderr
        errors = [ln for ln in r.stderr.splitlines() if not ln.startswith("warning:")]
        assert len(errors) == 1 and "--backend cuda: no CUDA device" in errors[0]
    assert _nothing_written(out)


# --- overrides, resume of a grown grid, the console ---------------------------------------------


def test_set_and_shortcuts_reach_the_run(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    r = invoke("run", "--grid", grid_file, "--out", out, "-q", "--replicas", "3", "--seed", "11",
               "--set", "grid.concurrency=[4]", "--set", "policy[1].kind=random")  # fmt: skip
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 11 and manifest["grid"]["run"]["replicas"] == 3
    assert manifest["grid"]["loads"] == [4] and manifest["grid"]["policies"][1]["kind"] == "random"
    assert pl.read_parquet(out / "summary.parquet").height == 4
    r = invoke("run", "--grid", grid_file, "--out", tmp_path / "o2", "--set", "run.replica=3")
    assert r.exit_code == 2 and "run.replica: unknown key (did you mean 'replicas'?)" in r.output


def test_resume_runs_only_the_new_cells_of_a_grown_grid(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    before = {p: p.read_bytes() for p in out.glob("samples/*/part.parquet")}
    grown = ["--set", "grid.concurrency=[4, 32, 64]", "--set", 'grid.topology=["1P/2D", "1P/3D", "2P/3D"]']
    r = invoke("run", "--grid", grid_file, "--out", out, *grown)
    assert r.exit_code == 2 and "--resume runs only the new cells" in r.output  # without --resume: refused
    r = invoke("run", "--grid", grid_file, "--out", out, "--resume", *grown)
    assert r.exit_code == 0, r.output
    assert "ran 10 cell(s), 8 already complete" in r.output and "18/18 cells" in r.output
    assert all(p.read_bytes() == b for p, b in before.items())  # the old cells were not rerun
    assert pl.read_parquet(out / "summary.parquet").height == 18
    # shrinking, or changing how cells are simulated, is refused with what to do
    r = invoke("run", "--grid", grid_file, "--out", out, "--resume", "--set", "grid.concurrency=[4]")
    assert r.exit_code == 2 and "no longer has" in r.output and "another --out" in r.output
    r = invoke("run", "--grid", grid_file, "--out", out, "--resume", "--requests", "40", *grown)
    assert r.exit_code == 2 and "run.requests 48 there, 40 here" in r.output


def test_validate_meets_the_out_directory_as_run_would(grid_file, tmp_path, fake):
    """validate --out DIR refuses what `run --out DIR` would (exit 2, naming what differs); without
    --out, a valid grid whose [run].out holds another run is valid, with a note."""
    out = tmp_path / "out"
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    files = sorted(p for p in out.rglob("*"))
    r = invoke("validate", grid_file, "--out", out)
    assert r.exit_code == 0 and "note:" not in r.output  # the same run: run would reuse it
    r = invoke("validate", grid_file, "--out", out, "--seed", "8")
    assert r.exit_code == 2 and f"--out {out}" in r.output and "holds a different run" in r.output
    assert "ok:" not in r.output
    r = invoke("validate", grid_file, "--out", out, "--warmup", "9")
    assert r.exit_code == 2 and "run.warmup 8 there, 9 here" in r.output, r.output  # named, not "loads"
    r = invoke("validate", grid_file, "--set", f"run.out={out}", "--seed", "8")
    assert r.exit_code == 0 and "ok:" in r.output and "note: `run` would refuse" in r.output
    assert "holds a different run" in r.output
    r = invoke("validate", grid_file, "--out", out, "--set", "grid.concurrency=[4, 32, 64]")
    assert r.exit_code == 0 and "note:" in r.output and "--resume" in r.output  # a grown grid
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    r = invoke("validate", grid_file, "--out", stray)
    assert r.exit_code == 2 and "holds no manifest.json" in r.output
    assert sorted(p for p in out.rglob("*")) == files  # validate wrote nothing


def test_resume_removes_a_dead_writers_temporary_file(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    assert invoke("run", "--grid", grid_file, "--out", out, "-q", "--shard", "0/2").exit_code == 0
    cell = next(out.glob("samples/cell_id=*"))
    stale = [cell / ".part.parquet.99999999.tmp"]  # an older name, and a dead pid on this host
    from poa_mc.io.files import HOST as _HOST

    stale.append(cell / f".part.parquet.{_HOST}.99999999.tmp")
    alive = cell / f".part.parquet.otherhost.{os.getpid()}.tmp"  # another host's shard: not ours to delete
    for p in [*stale, alive]:
        p.write_bytes(b"")
    assert invoke("run", "--grid", grid_file, "--out", out, "-q", "--resume").exit_code == 0
    assert not any(p.exists() for p in stale) and alive.exists()


def test_console_off_a_terminal_prints_a_line_per_cell_and_the_table(grid_file, tmp_path, fake):
    r = CliRunner().invoke(main, ["run", "--grid", str(grid_file), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert sum(ln.startswith("[") and "/8] 1P/" in ln for ln in lines) == 8
    assert any("summarising 8 cells" in ln for ln in lines)
    table = r.output[r.output.index("results (95% intervals") :]
    for head in ("TTFT p50 ms", "TTFT p99 ms", "ITL ms", "req/s", "PoA-hat", "PoA cf"):
        assert head in table
    assert "greedy *" in table  # the selfish policy is marked; its rows carry PoA cf
    quiet = CliRunner().invoke(main, ["run", "--grid", str(grid_file), "--out", str(tmp_path / "q"), "-q"])
    assert quiet.exit_code == 0 and all(ln.startswith("warning:") for ln in quiet.output.splitlines())


def test_validate_prints_the_expected_time_from_the_measured_speed(grid_file, tmp_path, monkeypatch):
    monkeypatch.setenv("POA_MC_SPEED_FILE", str(tmp_path / "speed.json"))
    r = invoke("validate", grid_file)
    assert r.exit_code == 0 and "no run timed on this machine" in r.output and "cost units" not in r.output
    from poa_mc.model.config import load_grid
    from poa_mc.model.grid import estimate_cost
    from poa_mc.run import speed

    grid = load_grid(grid_file)
    work = sum(estimate_cost(c, grid.run) for c in grid.cells())
    speed.record("cpu", cost=work * 10, seconds=20.0)  # this machine: 10 grids of work in 20 s
    r = invoke("validate", grid_file, "--set", "run.backend=cpu")
    assert r.exit_code == 0 and "about 2.2 s of simulation" in r.output, r.output  # 2 s + 8 cells x 0.02 s


@pytest.mark.parametrize("sig, says", [("SIGINT", "interrupted"), ("SIGTERM", "stopped by SIGTERM"),
                                       ("SIGHUP", "stopped by SIGHUP")])  # fmt: skip
def test_ctrl_c_stops_at_once_leaves_nothing_half_written_and_resumes(grid_file, tmp_path, sig, says):
    """A real SIGINT (Ctrl-C), SIGTERM (Slurm's time limit, preemption) or SIGHUP (a closed
    terminal) while the real engine simulates: exit 128 + the signal within moments, a line saying
    how to resume, no temporary file; --resume then finishes the grid."""
    import signal
    import time

    signum = getattr(signal, sig)
    out = tmp_path / "out"
    args = ["run", "--grid", str(grid_file), "--out", str(out), "--set", "grid.concurrency=[32]",
            "--replicas", "1200", "--requests", "1500", "--backend", "cpu"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "poa_mc.cli.main", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in proc.stderr:  # the first cell is done: kernels compiled, the second is simulating
        if line.startswith("[1/4]"):
            break
    time.sleep(0.3)
    t0 = time.perf_counter()
    proc.send_signal(signum)
    rest = proc.stderr.read()
    rc = proc.wait(timeout=60)
    waited = time.perf_counter() - t0
    assert rc == 128 + signum, rest
    assert rest.startswith(f"{says}: "), rest
    assert waited < 1.0, f"took {waited:.2f} s to stop"
    assert "--resume" in rest and "cells are complete" in rest
    assert not list(out.rglob("*.tmp"))
    done = len(list(out.glob("samples/*/part.parquet")))
    assert 1 <= done < 4 and not (out / "summary.parquet").exists()
    r = subprocess.run([sys.executable, "-m", "poa_mc.cli.main", *args, "--resume", "-q"],
                       capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert len(list(out.glob("samples/*/part.parquet"))) == 4 and (out / "summary.parquet").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (["run", "--replicas", "abc"], "'--replicas': 'abc' is not a valid integer"),
        (["frob"], "No such command 'frob'"),
        (["validate"], "Missing argument 'FILE'"),
        (["run", "--out", ""], "'--out': empty path"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args, says):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and r.output.splitlines() == [next(ln for ln in r.output.splitlines())]
    assert r.output.startswith("Error: ") and says in r.output


def test_validate_refuses_an_out_it_could_not_write(grid_file, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = invoke("validate", grid_file, "--out", afile / "sub")
    assert r.exit_code == 2 and "is a file, not a directory" in r.output


def test_damaged_run_directories_are_named_not_crashed_on(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    samples = next(out.glob("samples/*/part.parquet"))
    samples.write_bytes(b"garbage")
    r = invoke("plot", out)  # the latency CDFs read the samples
    assert r.exit_code == 2 and str(samples) in r.output and "not a readable Parquet file" in r.output, r.output
    part = next(out.glob("acc/*/part.parquet"))  # the summary reads the accumulators
    part.write_bytes(b"garbage")
    r = invoke("reduce", out)  # the size and checksum the run recorded no longer match: the cell is named
    assert r.exit_code == 2 and str(part) in r.output and "is damaged" in r.output and "--resume" in r.output
    (out / "manifest.json").write_text("{not json")
    plots = {p: p.stat().st_mtime_ns for p in (out / "plots").glob("*.png")}
    for cmd in (["reduce", out], ["plot", out], ["run", "--grid", grid_file, "--out", out, "--resume"]):
        r = invoke(*cmd)
        assert r.exit_code == 2 and "manifest.json: not valid JSON (line 1, column 2)" in r.output, (cmd, r.output)
    assert {p: p.stat().st_mtime_ns for p in (out / "plots").glob("*.png")} == plots  # no figure redrawn
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "manifest.json").write_text(json.dumps({"fingerprint": "x", "grid": {"poa": {}}, "seed": 1}))
    r = invoke("reduce", bare)
    assert r.exit_code == 2 and "cells.parquet: missing" in r.output


def test_reduce_with_no_samples_at_all_is_refused(grid_file, tmp_path, fake):
    out = tmp_path / "out"
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    import shutil

    shutil.rmtree(out / "acc")  # what a poa-mc before 0.2.0 left: samples, no accumulators
    r = invoke("reduce", out, "--allow-partial")
    assert r.exit_code == 2 and "samples without accumulators" in r.output
    shutil.rmtree(out / "samples")
    r = invoke("reduce", out, "--allow-partial")
    assert r.exit_code == 2 and "no cell is complete" in r.output


def test_an_open_loop_beyond_capacity_names_the_rate(tmp_path):
    text = (
        SMALL.replace('flow = "decode_first"', 'flow = "decode_first"\nmax_inflight = 64')
        .replace("prefix_groups = 4", 'prefix_groups = 4\narrival = "poisson"')
        .replace("concurrency = [4, 32]", "rate = [5.0, 100000.0]")
    )
    grid = tmp_path / "open.toml"
    grid.write_text(text)
    r = invoke("run", "--grid", grid, "--out", tmp_path / "out", "--set", 'grid.topology=["1P/2D"]')
    assert r.exit_code == 2, r.output
    assert "grid.rate[1]: cell 1P/2D rate=100000/s" in r.output and "max_inflight" in r.output


def test_build_aic_writes_a_table_a_grid_can_use(tmp_path, monkeypatch):
    import importlib.util

    out = tmp_path / "h100.json"
    args = ["profiles", "build-aic", "--model", "nvidia/Llama-3.1-70B-Instruct-FP8", "--system", "h100_sxm",
            "--tp", "4", "--out", out]  # fmt: skip
    if importlib.util.find_spec("aiconfigurator_core") is None:
        r = invoke(*args)
        assert r.exit_code == 2 and "pip install -e '.[aic]'" in r.output and not out.exists()
        return
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "h100.json.part").exists()
    grid = tmp_path / "g.toml"
    grid.write_text(
        '[profile]\nkind = "aic"\ntable = "h100.json"\n'
        '[grid]\ntopology = ["1P/2D"]\nconcurrency = [4]\n[[policy]]\nname = "kv"\nkind = "kv"\n'
    )
    monkeypatch.chdir(tmp_path.parent)  # the table is found next to the grid, not in the working directory
    r = invoke("validate", grid)
    assert r.exit_code == 0, r.output
    r = invoke(*args[:-1], tmp_path / "nope" / "x.json")
    assert r.exit_code == 2 and "--out" in r.output
    r = invoke("profiles", "build-aic", "--model", "no/such-model", "--system", "h100_sxm", "--tp", "4", "--out", out)
    assert r.exit_code == 2 and r.output.startswith("Error: aiconfigurator refused"), r.output


def test_aic_models_lists_what_build_aic_accepts():
    import importlib.util

    r = invoke("profiles", "aic-models")
    if importlib.util.find_spec("aiconfigurator_core") is None:
        assert r.exit_code == 2 and "pip install -e '.[aic]'" in r.output
        return
    assert r.exit_code == 0, r.output
    assert "nvidia/Llama-3.1-70B-Instruct-FP8" in r.output and "b200_sxm" in r.output and "h200_sxm" in r.output


@pytest.mark.parametrize("warm", [False, True])
def test_a_cold_kernel_cache_is_announced_before_the_first_cell(grid_file, tmp_path, monkeypatch, warm):
    """On a cold cache the first cell compiles for about a minute: the run says so first, and
    says nothing of it when the kernels are cached (the real engine; is_warm stands in for the
    cache's state, the kernels themselves are compiled already)."""
    import poa_mc.kernels._cache as cache

    monkeypatch.setattr(cache, "is_warm", lambda target: warm)
    r = invoke("run", "--grid", grid_file, "--out", tmp_path / "out", "--backend", "cpu")
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.output.splitlines() if "compiling the cpu kernels" in ln]
    assert len(said) == (0 if warm else 1)
    if not warm:
        assert r.output.index("compiling the cpu kernels") < r.output.index("[1/8]")
    quiet = invoke("run", "--grid", grid_file, "--out", tmp_path / "quiet", "--backend", "cpu", "-q")
    assert quiet.exit_code == 0 and ("compiling the cpu kernels" in quiet.output) is not warm  # also with -q
    v = invoke("validate", grid_file)
    assert ("after compiling the cpu kernels once" in v.output) is not warm  # and validate's estimate says so


REPLAY_PRESSURE = """
[run]
name = "finite"
replicas = 2
requests = 200
warmup = 0

[workload]
isl = 300
osl = 150
prefix_groups = 3
prefix_ratio = 0.4

[cluster]
decode_kv_blocks = 30
decode_admission = "replay"

[grid]
topology = ["1P/2D"]
concurrency = [24]

[[policy]]
name = "kv"
kind = "kv"
"""


def test_run_drain_is_a_finite_run_and_the_replays_starvation_names_it(tmp_path):
    """[run] drain = true reaches the engine (no arrival after the measured requests, as a
    benchmark with a fixed request count runs); the replay's admission rule, which starves
    preempted requests under sustained KV pressure, fails naming the keys a user can set."""
    grid = tmp_path / "finite.toml"
    grid.write_text(REPLAY_PRESSURE)
    r = invoke("run", "--grid", grid, "--out", tmp_path / "on", "-q", "--backend", "cpu")
    assert r.exit_code == 2, r.output
    assert 'cluster.decode_admission = "fcfs", or run.drain = true' in r.output, r.output
    r = invoke("run", "--grid", grid, "--out", tmp_path / "finite", "-q", "--backend", "cpu", "--set", "run.drain=true")
    assert r.exit_code == 0, r.output
    meta = [json.loads(p.read_text()) for p in (tmp_path / "finite" / "meta").glob("*.json")]
    assert [m["simulated"] for m in meta] == [2 * 200]  # every replica stops arriving at its 200th request
    manifest = json.loads((tmp_path / "finite" / "manifest.json").read_text())
    assert manifest["grid"]["run"]["drain"] is True
    r = invoke("validate", grid, "--set", "run.drain=1")
    assert r.exit_code == 2 and "run.drain" in r.output and "true or false" in r.output, r.output


def test_damaged_cells_are_found_named_and_recomputed_by_resume(grid_file, tmp_path, fake):
    """A truncated accumulators file and a samples file altered in place (same size, as a bad disk
    block or a half-synced network file system leaves them): `status` lists both cells as damaged,
    `reduce` names the cell and the command that repairs it, and `run --resume` simulates exactly
    those cells again, the run then equal to the undamaged one."""
    out = tmp_path / "out"
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    before = {name: pl.read_parquet(out / name) for name in ("summary.parquet", "poa.parquet")}
    accs = sorted(out.glob("acc/*/part.parquet"))
    cut = accs[0]
    cut.write_bytes(cut.read_bytes()[:-100])
    flipped = sorted(out.glob("samples/*/part.parquet"))[-1]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    cells = {cut.parent.name.split("=")[1], flipped.parent.name.split("=")[1]}
    assert len(cells) == 2
    stamps = {p: p.stat().st_mtime_ns for p in accs if p != cut and p.parent.name.split("=")[1] not in cells}

    r = invoke("status", out, "--json")
    assert r.exit_code == 0, r.output
    js = json.loads(r.output)["cells"]
    assert set(js["damaged"]) == cells and js["pending"] == 2, js
    r = invoke("status", out)
    assert "damaged cells (2" in r.output and "--resume" in r.output, r.output
    r = invoke("reduce", out)
    assert r.exit_code == 2 and "is damaged" in r.output and f"--out {out} --resume" in r.output, r.output

    r = invoke("run", "--grid", grid_file, "--out", out, "--resume", "-q")
    assert r.exit_code == 0 and "2 damaged cell(s) are simulated again" in r.output, r.output
    assert all(p.stat().st_mtime_ns == ns for p, ns in stamps.items()), "an undamaged cell was rewritten"
    assert json.loads(invoke("status", out, "--json").output)["cells"]["damaged"] == []
    for name, frame in before.items():
        assert pl.read_parquet(out / name).equals(frame, null_equal=True), name
    manifest = json.loads((out / "manifest.json").read_text())
    rec = manifest["cells"][cut.parent.name.split("=")[1]]["files"]["acc"]
    assert rec["bytes"] == cut.stat().st_size and len(rec["sha256"]) == 64


@pytest.fixture()
def small_disk(tmp_path):
    """A 600 KiB tmpfs, mounted for the test (root only): a disk that fills mid-run, for real."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def test_a_full_disk_mid_run_is_one_line_nothing_half_written_and_resume_completes(grid_file, tmp_path, small_disk):
    """ENOSPC on a real (tmpfs) file system part-way through a grid: exit 2 with one line naming
    the file, no temporary or partial file, finished cells kept; once there is room, --resume
    completes the run, equal to one written to a roomy disk."""
    args = ["run", "--grid", str(grid_file), "--replicas", "64", "--requests", "400", "--backend", "cpu", "-q"]

    def poa(*extra):
        return subprocess.run([sys.executable, "-m", "poa_mc.cli.main", *args, *map(str, extra)],
                              capture_output=True, text=True, timeout=600, check=False)  # fmt: skip

    out = small_disk / "run"
    r = poa("--out", out)
    errors = [ln for ln in r.stderr.splitlines() if not ln.startswith("warning:")]
    assert r.returncode == 2 and len(errors) == 1, r.stderr
    assert errors[0].startswith(f"Error: cannot write {out}/") and "No space left on device" in errors[0], errors[0]
    assert "Traceback" not in r.stderr and not list(out.rglob("*.tmp"))
    kept = list(out.glob("acc/*/part.parquet"))
    assert 1 <= len(kept) < 8, kept
    for part in out.glob("samples/*/part.parquet"):  # every Parquet file there is whole
        pl.read_parquet(part)
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    assert poa("--out", out, "--resume").returncode == 0
    assert poa("--out", tmp_path / "roomy").returncode == 0
    for name in ("summary.parquet", "poa.parquet"):
        a, b = pl.read_parquet(out / name), pl.read_parquet(tmp_path / "roomy" / name)
        assert a.equals(b, null_equal=True), name


def test_resume_refuses_cells_of_another_engine_unless_recompute(grid_file, tmp_path, fake, monkeypatch):
    """Each cell remembers the engine sources that made it: --resume by an edited engine refuses
    (nothing written) rather than mix two engines in one summary; --recompute simulates those
    cells again; reduce refuses a directory whose cells two engines made."""
    import poa_mc.run.runner as runner
    from poa_mc.version import engine_source

    out = tmp_path / "out"
    monkeypatch.setattr(runner, "engine_source", lambda: "0ld0ld0ld0ld0ld0")  # an older checkout
    assert invoke("run", "--grid", grid_file, "--out", out, "-q").exit_code == 0
    before = pl.read_parquet(out / "summary.parquet")
    monkeypatch.setattr(runner, "engine_source", engine_source)
    accs = sorted(out.glob("acc/*/part.parquet"))
    accs[0].unlink()  # one cell to do
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    r = invoke("run", "--grid", grid_file, "--out", out, "--resume", "-q")
    assert r.exit_code == 2 and "7 cell(s)" in r.output and "engine_source 0ld0ld0ld0ld0ld0 there" in r.output
    errors = [ln for ln in r.output.splitlines() if not ln.startswith("warning:")]
    assert "--recompute" in r.output and len(errors) == 1, r.output
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == stamps  # nothing written
    assert invoke("run", "--grid", grid_file, "--out", out, "--recompute", "-q").exit_code == 2

    r = invoke("run", "--grid", grid_file, "--out", out, "--resume", "--recompute", "-q")
    assert r.exit_code == 0 and "7 cell(s) made by another engine are simulated again" in r.output, r.output
    metas = [json.loads(p.read_text()) for p in (out / "meta").glob("*.json")]
    assert len(metas) == 8 and {m["engine_source"] for m in metas} == {engine_source()}
    assert json.loads((out / "manifest.json").read_text())["engine_source"] == engine_source()
    assert pl.read_parquet(out / "summary.parquet").equals(before, null_equal=True)

    one = next((out / "meta").glob("*.json"))
    one.write_text(json.dumps({**json.loads(one.read_text()), "engine_source": "0ld0ld0ld0ld0ld0"}))
    r = invoke("reduce", out)
    assert r.exit_code == 2 and "engines of different sources" in r.output, r.output


def test_two_runs_into_one_directory_share_the_cells_never_one_cell_twice(grid_file, tmp_path):
    """Two `poa-mc run` of one grid into one --out at the same time: each cell is simulated and
    written by one of them (a per-cell claim), the other takes it as done or waits for it; both
    end with the whole run, equal to a run alone."""
    args = ["run", "--grid", str(grid_file), "--replicas", "384", "--requests", "600", "--backend", "cpu"]
    cmd = [sys.executable, "-m", "poa_mc.cli.main", *args]
    out = tmp_path / "shared"
    procs = [subprocess.Popen([*cmd, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]  # fmt: skip
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    ran = [int(next(ln for ln in log.splitlines() if ln.startswith("ran ")).split()[1]) for log in logs]
    assert sum(ran) == 8 and min(ran) > 0, (ran, logs)  # shared: no cell simulated twice
    alone = tmp_path / "alone"
    assert subprocess.run([*cmd, "--out", str(alone), "-q"], capture_output=True, timeout=600).returncode == 0
    for name in ("summary.parquet", "poa.parquet"):
        assert pl.read_parquet(out / name).equals(pl.read_parquet(alone / name), null_equal=True), name
