"""A schedule's per-stage summary (poa_mc/stats/stages.py): the columns of a cell's summary row per
stage, each stage's figures from its own requests, and its benchmark throughput's interval covering
a known answer."""

import numpy as np
import pytest

from poa_mc.engine.engine import simulate
from poa_mc.model.spec_json import spec_to_json
from poa_mc.model.spec_workload import Stage
from poa_mc.stats.accumulate import accumulate
from poa_mc.stats.cell_stats import cell_stats
from poa_mc.stats.stages import STAGE_COLUMNS, stage_rows
from tests.test_engine_theory import queue_cell
from tests.test_kernels_schedule import staged

POA = {"window": 4, "social_cost": "mean_ttft"}


def _cell(spec):
    return {"cell_id": "c", "spec_json": spec_to_json(spec)}


def test_a_stage_row_has_the_summary_columns_and_its_own_requests():
    spec = staged(queue_cell(1, rate_rps=700.0), [Stage(700.0, 300), Stage(300.0, 200)])
    res = simulate(spec, replicas=6, requests=500, warmup=100, seed=31, stream=0)
    rows = stage_rows(res.samples, _cell(spec), POA, None)
    assert [r["stage"] for r in rows] == [0, 1]
    assert [r["stage_load"] for r in rows] == [700.0, 300.0] and [r["stage_requests"] for r in rows] == [300, 200]
    whole = cell_stats(accumulate(res.samples, {}, spec, POA, None), _cell(spec), POA).row
    for row in rows:
        assert set(whole) - {"offered_rps"} <= set(row) and set(STAGE_COLUMNS) <= set(row)
        assert row["requests"] == row["stage_requests"]
    # stage 1's mean TTFT is the mean over its own requests only
    assert rows[1]["ttft_mean_ms"] == pytest.approx(res.samples["ttft_ms"][:, 300:].mean())
    assert rows[0]["stage_end_ms"] > rows[1]["stage_start_ms"] - 50  # windows meet (stragglers overlap)
    assert rows[1]["offered_rps"] == 300.0


def test_samples_of_another_length_are_an_error():
    spec = staged(queue_cell(1, rate_rps=700.0), [Stage(700.0, 30), Stage(300.0, 20)])
    res = simulate(spec, replicas=2, requests=50, warmup=0, seed=32, stream=0)
    cut = {k: v[:, :40] for k, v in res.samples.items()}
    with pytest.raises(ValueError, match="40 requests per replica, its stages 50"):
        stage_rows(cut, _cell(spec), POA, None)


def test_stage_throughput_interval_covers_the_benchmark_rate():
    """A stage's throughput is its n requests over first arrival -> last completion. In M/M/1 FCFS
    (service 1 ms) at steady state that span has mean (n - 1) / lam + 1 / (mu - lam) (the gaps, then
    the last request's sojourn): the target n / E[span] is known. 60 independent runs of 16 replicas,
    two stages of 400 requests: the 95% interval of each stage must hold it in 52..60 of 60
    (binomial(60, 0.95): P(< 52) = 1.5%, four stages' checks together about 6%)."""
    n, mu = 400, 1.0
    lams = (0.8, 0.5)
    spec = staged(queue_cell(1, rate_rps=800.0), [Stage(800.0, n), Stage(500.0, n)])
    hits = np.zeros(2, dtype=int)
    runs = 60
    for i in range(runs):
        res = simulate(spec, replicas=16, requests=2 * n, warmup=400, seed=1000 + i, stream=0)
        rows = stage_rows(res.samples, _cell(spec), POA, None)
        for k, lam in enumerate(lams):
            target = n / ((n - 1) / lam + 1 / (mu - lam)) * 1000.0  # per second
            hits[k] += rows[k]["throughput_rps_lo"] <= target <= rows[k]["throughput_rps_hi"]
    assert (hits >= 52).all(), f"covered {hits.tolist()} of {runs}"


def test_a_run_with_a_schedule_writes_its_stages(tmp_path):
    """`poa-mc run` on a grid with [schedule]: stages.parquet (a row per cell and stage, cell columns
    first), its plot, its table on the console, and poa_mc.load(DIR).stages."""
    from click.testing import CliRunner

    import poa_mc
    from poa_mc.cli.main import main
    from tests.test_parse_schedule import grid

    p = tmp_path / "g.toml"
    p.write_text(grid())
    r = CliRunner().invoke(main, ["run", "--grid", str(p), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "stages (95% intervals across replicas)" in r.output and "stages.parquet" in r.output
    stages = poa_mc.load(tmp_path / "out").stages.collect()
    assert stages.height == 4 * 3 and stages.columns[:7] == ["index", "topology", "n_prefill", "n_decode",
                                                           "load_axis", "policy", "policy_kind"]  # fmt: skip
    assert stages["stage_requests"].to_list() == [10, 20, 30] * 4
    assert (tmp_path / "out" / "plots" / "stages.png").stat().st_size > 10_000


def test_export_writes_the_stages_table_too(tmp_path):
    """`poa-mc export` of a run with a [schedule]: stages.csv beside the other tables, its rows."""
    from click.testing import CliRunner

    from poa_mc.cli.main import main
    from poa_mc.io.export import export_run
    from tests.test_parse_schedule import grid

    p = tmp_path / "g.toml"
    p.write_text(grid(loads="[2.0, 6.0]", schedule="[schedule]\nrequests = [10, 20]"))
    assert CliRunner().invoke(main, ["run", "--grid", str(p), "--out", str(tmp_path / "out"), "-q"]).exit_code == 0
    res = export_run(tmp_path / "out", tmp_path / "csv")
    assert res.rows["stages"] == 4 * 2 and (tmp_path / "csv" / "stages.csv").is_file()
