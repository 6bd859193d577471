import numpy as np
import polars as pl
import pytest

import poa_mc
from poa_mc.config import loads_grid
from poa_mc.reduce import IncompleteRunError, reduce_run
from poa_mc.runner import run_grid
from poa_mc.store import RunDirError
from tests import fake_engine
from tests.grids_for_tests import SMALL

SUMMARY_COLUMNS = [
    "topology",
    "n_prefill",
    "n_decode",
    "concurrency",
    "rate",
    "policy",
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_mean_ms",
    "e2e_mean_ms",
    "e2e_p99_ms",
    "throughput_rps",
    "output_tps",
    "hit_rate",
    "poa_hat",
]
POA_COLUMNS = [
    "poa_hat",
    "poa_hat_lo",
    "poa_hat_hi",
    "poa_cf",
    "poa_cf_lo",
    "poa_cf_hi",
    "best_policy",
    "social_cost_selfish",
    "social_cost_best",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("reduce") / "run"
    run_grid(loads_grid(SMALL), out=out, simulate=fake_engine.simulate, quiet=True, finish=False)
    return out


def test_reduce_outputs_schema_and_values(run_dir):
    summary, poa = reduce_run(run_dir)
    for col in SUMMARY_COLUMNS:
        assert col in summary.columns, col
        if col not in ("topology", "n_prefill", "n_decode", "concurrency", "rate", "policy"):
            assert f"{col}_lo" in summary.columns and f"{col}_hi" in summary.columns
    assert summary.height == 8 and poa.height == 4
    for col in POA_COLUMNS:
        assert col in poa.columns
    ok = summary.filter(pl.col("ttft_p99_ms_lo") <= pl.col("ttft_p99_ms")).height
    assert ok == 8
    assert (summary["ttft_p99_ms"] >= summary["ttft_p50_ms"]).all()
    assert (poa["poa_cf"] >= 1.0).all() and (poa["poa_cf_lo"] <= poa["poa_cf"] + 1e-12).all()
    assert set(poa["best_policy"]) <= {"greedy", "rr"}
    # the poa table carries the selfish cell's own PoA-hat
    joined = poa.join(summary.filter(pl.col("policy") == "greedy"), on=["topology", "concurrency"])
    np.testing.assert_allclose(joined["poa_hat"], joined["poa_hat_right"])
    # social cost of the selfish policy = its mean TTFT (social_cost = mean_ttft)
    np.testing.assert_allclose(joined["social_cost_selfish"], joined["ttft_mean_ms"])


def test_reduce_is_deterministic(run_dir):
    reduce_run(run_dir)
    first = (run_dir / "summary.parquet").read_bytes(), (run_dir / "poa.parquet").read_bytes()
    reduce_run(run_dir)
    assert ((run_dir / "summary.parquet").read_bytes(), (run_dir / "poa.parquet").read_bytes()) == first


def test_overrides_change_poa_hat(run_dir):
    s8, _ = reduce_run(run_dir)
    s2, _ = reduce_run(run_dir, overrides={"window": 2})
    assert not np.allclose(s8["poa_hat"].to_numpy(), s2["poa_hat"].to_numpy())
    reduce_run(run_dir)


def test_load_returns_lazy_frames(run_dir):
    reduce_run(run_dir)
    run = poa_mc.load(run_dir)
    assert isinstance(run.samples, pl.LazyFrame)
    per_cell = run.samples.group_by("cell_id").len().collect()
    assert per_cell.height == 8 and set(per_cell["len"]) == {6 * 48}
    assert run.cells.collect().height == 8 and run.poa.collect().height == 4
    assert run.manifest["seed"] == 7


def test_incomplete_and_foreign_cells(tmp_path, run_dir):
    import shutil

    part = tmp_path / "part"
    shutil.copytree(run_dir, part)
    victim = min((part / "samples").iterdir())
    shutil.rmtree(victim)
    with pytest.raises(IncompleteRunError, match="1 of 8 cells"):
        reduce_run(part)
    summary, poa = reduce_run(part, allow_partial=True)
    assert summary.height == 7 and poa.height == 3
    shutil.copytree(
        run_dir / "samples" / min(p.name for p in (run_dir / "samples").iterdir()),
        part / "samples" / "cell_id=cdeadbeef000",
    )
    with pytest.raises(RunDirError, match="another grid"):
        reduce_run(part, allow_partial=True)


def test_reduce_names_what_differs_in_a_foreign_cell(run_dir, tmp_path):
    import json
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    meta_path = sorted((copy / "meta").glob("*.json"))[0]
    meta = json.loads(meta_path.read_text())
    meta.update(fingerprint="0" * 16, seed=99)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match="seed 99 there"):
        reduce_run(copy)
