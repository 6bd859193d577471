"""The runner's cell loop: a cell's files are written while the next cell simulates, in cell
order, and a cell that fails keeps every cell before it whole."""

import threading

import pytest

from poa_mc.engine.engine import EngineError
from poa_mc.io.store import RunDir, RunDirError
from poa_mc.model.config import loads_grid
from poa_mc.model.sections import ConfigError
from poa_mc.run import runner
from tests import fake_engine
from tests.grids_for_tests import SMALL


def _recording_writes(monkeypatch) -> list[tuple[str, str]]:
    writes: list[tuple[str, str]] = []
    real = RunDir.write_cell

    def write_cell(self, cell_id, *args, **kwargs):
        real(self, cell_id, *args, **kwargs)
        writes.append((cell_id, threading.current_thread().name))

    monkeypatch.setattr(RunDir, "write_cell", write_cell)
    return writes


@pytest.mark.parametrize("beside", [True, False])
def test_cells_are_written_in_order_beside_the_next_cell_when_small(monkeypatch, tmp_path, beside):
    if not beside:  # every cell's samples over the bound: written before the next starts
        monkeypatch.setattr(runner, "WRITE_BESIDE_BYTES", 0)
    writes = _recording_writes(monkeypatch)
    lines: list[str] = []  # the thread that accounts for each written cell, in order
    real_done = runner.RunConsole.cell_done

    def cell_done(self, *args, **kwargs):
        lines.append(threading.current_thread().name)
        return real_done(self, *args, **kwargs)

    monkeypatch.setattr(runner.RunConsole, "cell_done", cell_done)
    grid = loads_grid(SMALL)
    report = runner.run_grid(grid, out=tmp_path / "out", simulate=fake_engine.simulate, quiet=True)
    order = [c.cell_id for c in grid.cells()]
    assert sorted(w[0] for w in writes) == sorted(order) and report.ran == order
    # files on the commit threads; their accounting on the writer thread beside the next cell, or
    # on the main thread before it
    assert {w[1] for w in writes} <= {f"poa-mc-commit_{i}" for i in range(runner.COMMIT_THREADS)}
    assert set(lines) == ({"poa-mc-writer_0"} if beside else {"MainThread"})
    assert report.complete == len(order) and report.reduced
    assert not list((tmp_path / "out").rglob("*.tmp"))


def test_a_failed_cell_keeps_every_cell_before_it_whole(monkeypatch, tmp_path):
    import time

    real = RunDir.write_cell

    def slow_write(self, *args, **kwargs):  # still writing when the next cell fails
        time.sleep(0.3)
        real(self, *args, **kwargs)

    monkeypatch.setattr(RunDir, "write_cell", slow_write)
    calls = []

    def simulate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise EngineError("the third cell fails")
        return fake_engine.simulate(*args, **kwargs)

    grid = loads_grid(SMALL)
    out = tmp_path / "out"
    with pytest.raises(runner.CellFailed, match="the third cell fails"):
        runner.run_grid(grid, out=out, simulate=simulate, quiet=True)
    first_two = {c.cell_id for c in grid.cells()[:2]}
    run_dir = RunDir(out)
    for cell_id in first_two:  # the second was being written while the third simulated
        assert run_dir.acc_path(cell_id).is_file() and run_dir.sample_path(cell_id).is_file()
    assert not list(out.rglob("*.tmp"))


def _engine_with(**forced):
    """The engine as a stand-in whose keyword arguments `forced` replaces (and records the calls)."""
    from poa_mc.engine import engine

    calls = []

    def simulate(*args, reduce=None, overlap=False, after=None, **kwargs):
        calls.append({"overlap": overlap, "after": after})
        kw = {"overlap": overlap, "after": after, **forced}
        return engine.simulate(*args, reduce=reduce, **kw, **kwargs)

    return simulate, calls


def test_a_cells_last_reduction_runs_beside_the_next_cell(tmp_path):
    """Each cell leaves its last reduction running and the next cell waits for it before its own
    first: the files are those of cells reduced one after the other."""
    import polars as pl

    grid = loads_grid(SMALL)
    overlapped, calls = _engine_with()
    runner.run_grid(grid, out=tmp_path / "a", simulate=overlapped, quiet=True)
    assert all(c["overlap"] for c in calls) and calls[0]["after"] is None
    assert all(c["after"] is not None for c in calls[1:])
    serial, _ = _engine_with(overlap=False, after=None)
    runner.run_grid(grid, out=tmp_path / "b", simulate=serial, quiet=True)
    a, b = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    for c in grid.cells():
        assert pl.read_parquet(a.acc_path(c.cell_id)).equals(pl.read_parquet(b.acc_path(c.cell_id)))
        assert pl.read_parquet(a.sample_path(c.cell_id)).equals(pl.read_parquet(b.sample_path(c.cell_id)))
        assert a.read_meta(c.cell_id)["cell_s"] > 0
    assert pl.read_parquet(a.summary_path).equals(pl.read_parquet(b.summary_path))


def test_a_failed_reduction_fails_the_run_and_keeps_the_cells_before_it(monkeypatch, tmp_path):
    """A cell whose last reduction fails (while the next cell simulates) is not written; the cells
    before it are whole, and the run stops with that error."""
    from poa_mc.stats import accumulate

    real, calls = accumulate.accumulate, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the second cell's reduction fails")
        return real(*args, **kwargs)

    monkeypatch.setattr(accumulate, "accumulate", failing)
    grid = loads_grid(SMALL)
    overlapped, _ = _engine_with()
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="the second cell's reduction fails"):
        runner.run_grid(grid, out=out, simulate=overlapped, quiet=True)
    cells = [c.cell_id for c in grid.cells()]
    run_dir = RunDir(out)
    assert run_dir.acc_path(cells[0]).is_file() and not run_dir.acc_path(cells[1]).exists()
    assert not list(out.rglob("*.tmp"))


def test_the_summary_takes_the_cells_statistics_worked_out_as_they_were_written(monkeypatch, tmp_path):
    """The run's summary does not read its accumulators back, and equals a summary from disk."""
    import polars as pl

    from poa_mc.stats.reduce import reduce_run

    reads = []
    real = RunDir.read_acc
    monkeypatch.setattr(RunDir, "read_acc", lambda self, cid: reads.append(cid) or real(self, cid))
    grid = loads_grid(SMALL)
    overlapped, _ = _engine_with()
    out = tmp_path / "out"
    runner.run_grid(grid, out=out, simulate=overlapped, quiet=True)
    assert reads == []
    run_dir = RunDir(out)
    ran = pl.read_parquet(run_dir.summary_path), pl.read_parquet(run_dir.poa_path)
    again = reduce_run(out)
    assert len(reads) == len(grid.cells())
    assert ran[0].equals(again[0]) and ran[1].equals(again[1])


def test_the_test_double_implements_the_engines_interface():
    """The runner calls every engine alike (poa_mc.engine.interface.Simulate): the stand-in and the
    engine take its arguments, by the same names, kinds and defaults."""
    import inspect

    from poa_mc.engine import engine
    from poa_mc.engine.interface import Simulate

    declared = inspect.signature(Simulate.__call__).parameters
    for impl in (engine.simulate, fake_engine.simulate):
        params = inspect.signature(impl).parameters
        for name, p in declared.items():
            if name == "self":
                continue
            assert name in params, (impl, name)
            assert params[name].kind == p.kind and params[name].default == p.default, (impl, name)
    extra = set(inspect.signature(fake_engine.simulate).parameters) - set(declared)
    assert extra == set(), extra  # the stand-in takes nothing the runner does not pass


def test_runs_killed_at_random_moments_and_resumed_equal_an_uninterrupted_run(tmp_path):
    """The short version of bench/soak_kills.py: a small grid's runs killed with SIGKILL (their
    whole process group) at random moments of start-up, cells, summary and plots, resumed until
    one ends by itself; every final summary and poa table equals the uninterrupted run's."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "bench" / "soak_kills.py"
    r = subprocess.run([sys.executable, str(script), "--kills", "8", "--seed", "3", "--work", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["kills"] >= 8 and got["mismatches"] == 0 and got["failures"] == [], got


def test_a_warm_up_that_follows_the_load_lets_resume_add_higher_loads(tmp_path):
    """[run] warmup_per_client: each closed-loop cell warms up max(warmup, k x C) requests; a grid
    grown by a higher load resumes (the cells run keep their warm-up) and the new cell gets its own."""
    seen = {}

    def simulate(spec, **kw):
        seen[spec.workload.concurrency] = kw["warmup"]
        return fake_engine.simulate(spec, **kw)

    grid = SMALL.replace("warmup = 8", "warmup = 8\nwarmup_per_client = 2")
    out = tmp_path / "out"
    runner.run_grid(loads_grid(grid), out=out, simulate=simulate, quiet=True)
    assert seen == {4: 8, 32: 64}
    seen.clear()
    grown = grid.replace("concurrency = [4, 32]", "concurrency = [4, 32, 48]")
    report = runner.run_grid(loads_grid(grown), out=out, simulate=simulate, quiet=True, resume=True)
    assert seen == {48: 96} and len(report.ran) == 4 and len(report.skipped) == 8
    with pytest.raises(RunDirError, match="run.warmup_per_client 2 there, 3 here"):
        runner.run_grid(loads_grid(grown.replace("warmup_per_client = 2", "warmup_per_client = 3")), out=out,
                        simulate=simulate, quiet=True, resume=True)  # fmt: skip
    with pytest.raises(ConfigError, match="run.warmup_per_client"):
        loads_grid(grid.replace("warmup_per_client = 2", "warmup_per_client = -1"))
