import json

import numpy as np
import polars as pl
import pytest

from poa_mc.io.files import atomic_write_json
from poa_mc.io.store import RunDir, RunDirError, fingerprint, samples_frame
from poa_mc.model.config import loads_grid
from poa_mc.run.runner import build_manifest, cells_frame
from tests.grids_for_tests import SMALL


def test_fingerprint_ignores_out_and_backend_but_not_seed():
    a = loads_grid(SMALL).to_dict()
    b = loads_grid(SMALL.replace('name = "small"', 'name = "small"\nout = "elsewhere"\nbackend = "cpu"')).to_dict()
    c = loads_grid(SMALL.replace("seed = 7", "seed = 8")).to_dict()
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)
    assert fingerprint(a) != fingerprint(a, version="9.9.9")


def test_atomic_write_leaves_no_temporary(tmp_path):
    atomic_write_json(tmp_path / "x" / "m.json", {"a": 1})
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["m.json"]
    assert json.loads((tmp_path / "x" / "m.json").read_text()) == {"a": 1}


def _prepare(tmp_path, text=SMALL, resume=False):
    grid = loads_grid(text)
    run_dir = RunDir(tmp_path / "run")
    return grid, run_dir, run_dir.prepare(build_manifest(grid, "cpu"), cells_frame(grid.cells()), resume=resume)


def test_prepare_creates_and_accepts_the_same_run(tmp_path):
    grid, run_dir, existed = _prepare(tmp_path)
    assert not existed
    assert run_dir.manifest_path.exists() and run_dir.cells_path.exists()
    cells = pl.read_parquet(run_dir.cells_path)
    assert cells.height == 8 and cells["cell_id"].to_list() == [c.cell_id for c in grid.cells()]
    assert cells.schema["concurrency"] == pl.Int64 and cells["rate"].null_count() == 8
    _, _, existed = _prepare(tmp_path, resume=True)
    assert existed


def test_prepare_refuses_another_run_and_names_the_difference(tmp_path):
    _prepare(tmp_path)
    with pytest.raises(RunDirError, match="seed 7 there, 8 here"):
        _prepare(tmp_path, SMALL.replace("seed = 7", "seed = 8"), resume=True)
    with pytest.raises(RunDirError, match="grid differs at loads"):
        _prepare(tmp_path, SMALL.replace("[4, 32]", "[4, 16]"))


def test_prepare_refuses_a_foreign_nonempty_dir(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="no manifest"):
        _prepare(tmp_path)


def test_cell_commit_point_is_the_accumulators_file(tmp_path):
    grid, run_dir, _ = _prepare(tmp_path)
    fp = run_dir.read_manifest()["fingerprint"]
    cid = grid.cells()[0].cell_id
    # meta alone (a run killed between the two writes) is not a complete cell
    atomic_write_json(run_dir.meta_path(cid), {"fingerprint": fp})
    assert run_dir.complete_cells() == set()
    df = samples_frame(
        {"seq": np.zeros((2, 3), np.int64), "ttft_ms": np.ones((2, 3))},
        {"cand_tokens": np.ones((2, 3, 2)), "chosen": np.zeros((2, 3), np.int32)},
    )
    # samples written, accumulators not yet (a run killed in between): not complete either
    run_dir.write_cell(cid, pl.DataFrame({"n": [3, 3]}), {"fingerprint": fp, "wall_s": 1.0}, df)
    assert run_dir.complete_cells(fp) == {cid}
    run_dir.acc_path(cid).unlink()
    assert run_dir.complete_cells(fp) == set()
    run_dir.write_cell(cid, pl.DataFrame({"n": [3, 3]}), {"fingerprint": fp, "wall_s": 1.0}, df)
    assert run_dir.complete_cells(fp) == {cid}
    assert run_dir.complete_cells("other") == set()
    back = run_dir.read_samples(cid)
    assert back.columns == ["replica", "seq", "ttft_ms", "cand_tokens", "chosen"]
    assert back["replica"].to_list() == [0, 0, 0, 1, 1, 1]
    assert back.schema["cand_tokens"] == pl.Array(pl.Float64, 2)
    m = run_dir.finalize_manifest()
    assert m["cells"][cid]["wall_s"] == 1.0
    assert not list(run_dir.samples_dir.rglob("*.tmp"))


def test_samples_frame_pads_candidates_to_the_grids_width():
    from poa_mc.io.store import samples_frame

    samples = {"ttft_ms": np.ones((2, 3))}
    cands = {"cand_tokens": np.arange(12.0).reshape(2, 3, 2), "chosen": np.zeros((2, 3), dtype=np.int32)}
    df = samples_frame(samples, cands, width=4)
    assert df.schema["cand_tokens"] == pl.Array(pl.Float64, 4)
    got = np.stack(df["cand_tokens"].to_numpy())
    np.testing.assert_array_equal(got[:, :2], np.arange(12.0).reshape(6, 2))
    assert np.isnan(got[:, 2:]).all()
    assert samples_frame(samples, cands).schema["cand_tokens"] == pl.Array(pl.Float64, 2)


def test_temporaries_are_found_while_other_shards_create_and_remove_directories(tmp_path):
    # a shard starting beside another probes --out with a directory it removes at once
    # (runner.check_out_dir); the other's clean-up walked into it and failed its start (ENOENT)
    import os
    import tempfile
    import threading

    for i in range(20):
        (tmp_path / f"cell_id={i}").mkdir()
        (tmp_path / f"cell_id={i}" / "part.parquet").write_text("x")
    stale = tmp_path / "cell_id=3" / ".part.parquet.tmp"  # a name of no known writer: removed
    stale.write_text("half")
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            os.rmdir(tempfile.mkdtemp(prefix=".poa-mc-probe-", dir=tmp_path))

    t = threading.Thread(target=probe)
    t.start()
    try:
        for _ in range(1000):  # Path.rglob failed about a third of these
            RunDir(tmp_path).remove_temporaries()
    finally:
        stop.set()
        t.join()
    assert not stale.exists()
    assert all((tmp_path / f"cell_id={i}" / "part.parquet").exists() for i in range(20))
