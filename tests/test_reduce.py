import math

import numpy as np
import polars as pl
import pytest

import poa_mc
from poa_mc.io.store import RunDirError
from poa_mc.model.config import loads_grid
from poa_mc.model.spec_json import spec_from_dict, spec_to_json
from poa_mc.run.runner import run_grid
from poa_mc.stats.reduce import IncompleteRunError, reduce_run
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
    # 1P/2D and 1P/3D cells share one schema: the candidate columns of the grid's widest cell
    full = run.samples.collect()
    assert full.height == 8 * 6 * 48
    assert full.schema["cand_tokens"] == pl.Array(pl.Float64, 4)
    assert pl.read_parquet(run_dir / "samples" / "*" / "*.parquet").height == full.height


def test_incomplete_and_foreign_cells(tmp_path, run_dir):
    import shutil

    part = tmp_path / "part"
    shutil.copytree(run_dir, part)
    victim = min((part / "acc").iterdir())  # a cell's commit point
    shutil.rmtree(victim)
    with pytest.raises(IncompleteRunError, match="1 of 8 cells"):
        reduce_run(part)
    summary, poa = reduce_run(part, allow_partial=True)
    assert summary.height == 7 and poa.height == 3
    shutil.copytree(
        run_dir / "acc" / min(p.name for p in (run_dir / "acc").iterdir()),
        part / "acc" / "cell_id=cdeadbeef000",
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
    meta.update(fingerprint="0" * 16, sim_key="1" * 16, seed=99)  # another seed: another sim key too
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match="seed 99 there"):
        reduce_run(copy)


def _decode_stage_frame(decided: list[float], blocks: list[list[float]], chosen: list[int]) -> pl.DataFrame:
    """One replica of a 1P/2D prefill_first cell, rows in arrival order; the decode decisions came
    in the order of `decided` (prefill ends), each request booking 2 blocks and staying all along."""
    n = len(decided)
    width = 3  # one prefill column, then the two decode workers
    cand = [[0.0, *b] for b in blocks]
    return pl.DataFrame(
        {
            "replica": [0] * n,
            "seq": list(range(n)),
            "arrival_ms": [0.0] * n,
            "e2e_ms": [100.0] * n,
            "cand_tokens": pl.Series([[0.0] * width] * n, dtype=pl.Array(pl.Float64, width)),
            "cand_blocks": pl.Series(cand, dtype=pl.Array(pl.Float64, width)),
            "prefill_worker": [0] * n,
            "decode_worker": chosen,
            "prefill_added_tokens": [128] * n,
            "prefill_added_blocks": [2] * n,
            "decode_added_tokens": [0] * n,
            "decode_added_blocks": [2] * n,
            "decode_decided_ms": decided,
        }
    )


def test_poa_hat_over_the_decode_decision_follows_the_decision_order():

    from poa_mc.model.spec import CellSpec
    from poa_mc.model.spec_cluster import ClusterSpec
    from poa_mc.model.spec_policy import PolicySpec
    from poa_mc.model.spec_profile import ProfileSpec
    from poa_mc.stats.accumulate import poa_hat_sums
    from poa_mc.stats.reduce import samples_to_columns

    # four decode decisions, all sent to worker 0, in the order seq 1, 3, 0, 2 (prefill ends);
    # the router's view (active blocks + the request's 2) in that order: [2, 2], [4, 2], [6, 2],
    # [8, 2]. ACTUAL = 2 + 4 + 6 + 8 = 20; OPT puts two on each worker: 2 + 4 + 2 + 4 = 12
    by_decision = {1: [2.0, 2.0], 3: [4.0, 2.0], 0: [6.0, 2.0], 2: [8.0, 2.0]}
    df = _decode_stage_frame([3.0, 1.0, 4.0, 2.0], [by_decision[i] for i in range(4)], [0, 0, 0, 0])
    cols = samples_to_columns(df.with_columns(ttft_ms=pl.lit(1.0), isl=pl.lit(128)))
    spec = CellSpec(cluster=ClusterSpec(n_prefill=1, n_decode=2), policy=PolicySpec(), profile=ProfileSpec())
    poa = {"window": 4, "cost": "router", "stage": "auto", "pricing": "slot"}
    actual, opt, windows = poa_hat_sums(cols, spec, poa)
    assert windows == 1 and actual[0] / opt[0] == pytest.approx(20 / 12)
    # the prefill decision has one candidate: no game, no number
    actual, opt, windows = poa_hat_sums(cols, spec, {**poa, "stage": "prefill"})
    assert windows == 0 and np.isnan(actual).all() and np.isnan(opt).all()


def test_itl_quantiles_slo_and_worker_stats_on_a_hand_case():
    import dataclasses

    from poa_mc.model.spec_cluster import ClusterSpec
    from poa_mc.stats import sketch
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import _slo_stats, _worker_stats

    # two replicas of 4 requests; ITL is undefined for the one-token answers (osl = 1)
    itl = np.array([[5.0, 10.0, 99.0, 20.0], [7.0, 8.0, 9.0, 99.0]])
    osl = np.array([[10, 10, 1, 10], [10, 10, 10, 1]])
    ttft = np.array([[100.0, 300.0, 50.0, 100.0], [100.0, 100.0, 100.0, 900.0]])
    cols = {"ttft_ms": ttft, "e2e_ms": ttft + 90 * itl, "itl_ms": itl, "osl": osl}
    spec = spec_from_dict({"cluster": dataclasses.asdict(ClusterSpec(n_prefill=1, n_decode=2, decode_kv_blocks=100))})
    acc = accumulate(cols, {}, spec, {"window": 4}, {"ttft_ms": 200.0, "itl_ms": 15.0})
    q50 = sketch.quantile(acc["hist_itl"], 0.5, acc["min_itl"], acc["max_itl"], acc["hist_itl_lo"])
    np.testing.assert_allclose(q50, [10.0, 8.0], rtol=sketch.RESOLUTION)  # nearest rank of the 3 defined
    assert acc["n_itl"].tolist() == [3, 3] and acc["max_itl"].tolist() == [20.0, 9.0]
    # met: replica 0 -> requests 0 and 2 (1: TTFT, 3: ITL); replica 1 -> 0, 1, 2 (3: TTFT)
    assert acc["slo_met"].tolist() == [2, 3]
    row: dict = {}
    rate = (np.array([4.0, 8.0]), np.array([2.0, 4.0]))  # requests in flight, mean time in flight (s)
    _slo_stats(row, acc["slo_met"], 4, *rate)
    assert row["slo_attainment"] == pytest.approx((2 / 4 + 3 / 4) / 2)
    assert row["goodput_rps"] == pytest.approx((4 * 2 / 4 + 8 * 3 / 4) / (2.0 + 4.0))  # a ratio of sums
    row = {}
    _slo_stats(row, accumulate(cols, {}, spec, {"window": 4}, {})["slo_met"], 4, *rate)
    assert math.isnan(row["slo_attainment"]) and math.isnan(row["goodput_rps"])  # no [slo]: null

    rep = {"prefill_busy_ms": 50.0, "decode_busy_ms": 150.0, "decode_batch_ms": 600.0,
           "decode_kv_block_ms": 5000.0, "measured_ms": 100.0}  # fmt: skip
    acc = {f"replica_{k}": np.array([v]) for k, v in rep.items()}
    row = {}
    _worker_stats(row, acc, spec)
    assert row["prefill_util"] == pytest.approx(0.5) and row["decode_util"] == pytest.approx(0.75)
    assert row["decode_batch_mean"] == pytest.approx(3.0) and row["kv_occupancy_mean"] == pytest.approx(0.25)
    spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, flow="aggregated"))  # no prefill pool
    row = {}
    _worker_stats(row, acc, spec)
    assert math.isnan(row["prefill_util"]) and row["decode_util"] == pytest.approx(0.75)


@pytest.mark.parametrize("clients,think,n", [(16, 0.0, 100), (8, 5.0, 200)])
def test_throughput_is_the_steady_state_rate_whatever_the_run_length(clients, think, n):
    """Mean value analysis of a closed loop (one exponential server of 1 ms, clients thinking
    `think` ms): X = clients / (R + Z). Short runs estimate it without the C / n bias of requests
    over first arrival -> last completion (-12% at 16 clients and 100 requests per replica)."""

    from poa_mc.engine.engine import simulate
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import request_rate
    from poa_mc.stats.intervals import ratio_interval
    from tests.test_engine_theory import mva_response, queue_cell

    spec = queue_cell(1, clients=clients, think_ms=think)
    res = simulate(spec, replicas=400, requests=n, warmup=200, seed=21, stream=0)
    acc = accumulate(res.samples, res.replica, spec, {"window": 4})
    x = clients / (mva_response(clients, 1.0, think) + think) * 1000.0  # per second
    est = ratio_interval(*request_rate(acc, n))
    se = (est.hi - est.lo) / (2 * 1.96)
    assert abs(est.value - x) <= 4 * se, (est, x)
    if clients == 16:  # the old estimator, far outside its own standard error
        old = n / (res.replica["window_ms"] / 1000.0)
        assert (x - old.mean()) > 10 * old.std(ddof=1) / np.sqrt(old.size) and old.mean() / x < 0.9


def test_hit_rates_per_tier_and_onboarding_on_a_hand_case():
    """docs/outputs.md: hit_rate_g1 ... g4 split hit_rate by the tier the blocks came from (G1 is
    what the lower tiers did not serve) and sum to it; onboard_ms_mean is the mean copy wait."""

    from poa_mc.model.spec import CellSpec
    from poa_mc.model.spec_cluster import ClusterSpec
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import cell_stats

    cluster = ClusterSpec(n_prefill=1, n_decode=2, g2_blocks=100, g3_blocks=100, g2_gbps=10.0, g3_gbps=1.0)
    spec = CellSpec(cluster=cluster)
    ttft = np.array([[100.0, 300.0, 50.0, 100.0], [100.0, 100.0, 100.0, 900.0]])
    cols = {
        "ttft_ms": ttft, "e2e_ms": ttft + 100, "itl_ms": np.full((2, 4), 5.0), "osl": np.full((2, 4), 10),
        "prompt_blocks": np.full((2, 4), 10), "cached_blocks": np.array([[10, 5, 0, 8], [4, 4, 4, 4]]),
        "cached_g2": np.array([[2, 1, 0, 0], [1, 0, 0, 0]]), "cached_g3": np.array([[0, 0, 0, 3], [0, 1, 0, 0]]),
        "cached_g4": np.array([[0, 0, 0, 0], [0, 0, 2, 0]]),
        "onboard_ms": np.array([[1.0, 0, 0, 2.0], [0.5, 0.5, 0, 0]]),
    }  # fmt: skip
    poa = {"window": 4, "social_cost": "mean_ttft"}
    row = cell_stats(accumulate(cols, {}, spec, poa, {}), {"cell_id": "c", "spec_json": spec_to_json(spec)}, poa).row
    assert row["hit_rate"] == pytest.approx(39 / 80)
    assert row["hit_rate_g2"] == pytest.approx(4 / 80) and row["hit_rate_g3"] == pytest.approx(4 / 80)
    assert row["hit_rate_g4"] == pytest.approx(2 / 80) and row["hit_rate_g1"] == pytest.approx(29 / 80)
    assert sum(row[f"hit_rate_g{k}"] for k in (1, 2, 3, 4)) == pytest.approx(row["hit_rate"])
    assert row["onboard_ms_mean"] == pytest.approx(4.0 / 8) and row["onboard_ms_mean_lo"] == 0.0  # clipped at 0
    # G1 alone: no tier columns at all
    g1 = {k: v for k, v in cols.items() if not k.startswith(("cached_g", "onboard"))}
    spec1 = CellSpec(cluster=ClusterSpec(n_prefill=1, n_decode=2))
    row = cell_stats(accumulate(g1, {}, spec1, poa, {}), {"cell_id": "c", "spec_json": spec_to_json(spec1)}, poa).row
    assert "hit_rate_g1" not in row and "onboard_ms_mean" not in row


@pytest.mark.parametrize("rho", [0.6, 0.9, 0.95])
def test_open_loop_throughput_covers_the_arrival_rate(rho):
    """An open loop that keeps up completes what arrives: M/M/1 (1 ms service) at load rho, 40
    independent cells of 16 replicas x 400 requests after the relaxation rule's warm-up
    (poa_mc.stats.warmup). throughput_rps counts the completions between the first and the last measured
    arrival over that window; its interval covers the arrival rate in at least 34 of 40 cells
    (nominal 38), and the mean over cells is within 3 Monte Carlo standard errors of it. The window
    that ended at the last measured completion (a straggler) read high."""

    from poa_mc.engine.engine import simulate
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import request_rate
    from poa_mc.stats.intervals import ratio_interval
    from poa_mc.stats.warmup import check
    from tests.test_engine_theory import queue_cell

    rate, cells, reps, n = rho * 1000.0, 40, 16, 400
    warm = check(np.ones((2, 16)), n, 0, utilisation=rho).suggested
    spec = queue_cell(1, rate_rps=rate)
    res = simulate(spec, replicas=cells * reps, requests=n, warmup=warm, seed=31, stream=int(rho * 100))
    acc = accumulate(res.samples, res.replica, spec, {"window": 4})
    values, covered, old = [], 0, []
    for c in range(cells):
        part = {k: v[c * reps : (c + 1) * reps] for k, v in acc.items() if np.ndim(v) and len(v) == cells * reps}
        est = ratio_interval(*request_rate(part, n, open_loop=True))
        values.append(est.value)
        covered += est.lo <= rate <= est.hi
        old.append(ratio_interval(*request_rate(part, n, open_loop=False)).value)
    se = np.std(values, ddof=1) / np.sqrt(cells)
    assert abs(np.mean(values) - rate) < 3 * se and covered >= 34, (np.mean(values), se, covered)
    assert np.mean(old) > np.mean(values)  # the straggler-ended window reads the rate higher


def test_mm1_p99_through_the_kernels_tally_and_the_summary():
    """The engine's M/M/1 (10 ms exponential service, 80 req/s: load 0.8) through the tally's
    histograms and cell_stats: the cell's TTFT P99 interval holds ln(100) / (mu - lam) = 230.3 ms,
    and ttft_p99_run_ms (each replica's P99 of its 400 requests, averaged) reads far below it."""
    import dataclasses
    import json

    from poa_mc.engine.engine import simulate
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import cell_stats
    from tests.test_engine_theory import queue_cell

    spec = queue_cell(1, rate_rps=80.0, service_ms=10.0)
    res = simulate(spec, replicas=64, requests=400, warmup=1100, seed=41, stream=0)
    sd = dataclasses.asdict(spec)
    acc = accumulate(res.samples, res.replica, spec, {"window": 4})  # the kernels' tally code, run here
    cell = {"cell_id": "mm1", "spec_json": json.dumps(sd)}
    row = cell_stats(acc, cell, {"stage": "auto", "social_cost": "mean_ttft"}, 1100).row
    true = math.log(100.0) / (100.0 - 80.0) * 1000.0
    assert row["ttft_p99_ms_lo"] <= true <= row["ttft_p99_ms_hi"], row
    assert row["ttft_p99_run_ms_hi"] < true * 0.9
    assert row["warmup_suggested"] is None  # 1,100 >= 3 relaxation times at the measured load


def test_identical_replicas_are_flagged_and_their_shares_keep_a_width():
    """A cell whose replicas all come out the same (nothing random drives it) says so; its shares
    still get an interval of nonzero width inside [0, 1] (Clopper-Pearson on the trials), never
    [1, 1]."""
    from poa_mc.stats.cell_stats import _identical
    from poa_mc.stats.proportions import proportion_interval

    acc = {"n": np.full(4, 100), "sum_ttft_ms": np.full(4, 5.0), "sum_e2e_ms": np.full(4, 9.0)}
    assert _identical(acc)
    acc["sum_ttft_ms"] = np.array([5.0, 5.0, 5.0, 5.1])
    assert not _identical(acc)
    met = proportion_interval(np.full(4, 100.0), np.full(4, 100.0))
    assert met.value == 1.0 and met.hi == 1.0 and 0.95 < met.lo < 1.0


def test_a_ttft_win_bought_with_a_slower_decode_is_flagged():
    """poa.parquet's ttft_win_slows_decode: the best-TTFT policy beats the selfish one clearly, has
    the higher ITL and no lower E2E (the closed-loop effect, docs/outputs.md): flagged. The same
    TTFT win with a clearly lower E2E, or with a lower ITL, is a real win: not flagged."""
    from poa_mc.stats.cell_stats import CellStats
    from poa_mc.stats.counterfactual import counterfactual_poa
    from poa_mc.stats.reduce import _wins_by_slowing_decode

    rng = np.random.default_rng(5)
    noise = rng.normal(0.0, 5.0, 32)
    ttft = {"kv": 1100.0 + noise, "kv-t1": 930.0 + noise}

    def stats(e2e_t1: float, itl_t1: float) -> dict:
        e2e = {"kv": 4004.0 + noise, "kv-t1": e2e_t1 + noise + rng.normal(0.0, 1.0, 32)}
        itl = {"kv": 9.67, "kv-t1": itl_t1}
        return {p: CellStats({"itl_mean_ms": itl[p]}, {"mean_ttft": ttft[p], "mean_e2e": e2e[p]}) for p in ttft}

    win = counterfactual_poa(ttft, "kv")
    assert win.best_policy == "kv-t1" and win.lo > 1.0
    ids = {"kv": "kv", "kv-t1": "kv-t1"}
    assert _wins_by_slowing_decode(stats(4010.0, 10.31), ids, "kv", win)
    assert not _wins_by_slowing_decode(stats(3500.0, 10.31), ids, "kv", win)  # E2E clearly lower too
    assert not _wins_by_slowing_decode(stats(4010.0, 9.0), ids, "kv", win)  # decode not slower
    tie = counterfactual_poa({"kv": ttft["kv"], "kv-t1": ttft["kv"] + 0.1 * noise}, "kv")
    assert not _wins_by_slowing_decode(stats(4010.0, 10.31), ids, "kv", tie)  # no clear TTFT win


def test_the_knee_comes_with_the_load_points_either_side_and_a_reason():
    """summary.parquet's knee_grid_lo/hi bracket the knee by the grid's own load points (the interval
    does not know the curve between them), and knee_reason says why a curve has no knee."""
    from poa_mc.stats.cell_stats import CellStats
    from poa_mc.stats.reduce import _knees

    loads = [10, 40, 80, 120, 160, 200, 240]
    rng = np.random.default_rng(3)
    rows, stats = [], {}
    for j, c in enumerate(loads):
        cid = f"c{j}"
        rows.append({"cell_id": cid, "index": j, "topology": "2P/8D", "policy": "kv", "load_axis": "concurrency",
                     "concurrency": c})  # fmt: skip
        ttft = max(100.0, 100.0 * c / 100.0) * np.exp(rng.normal(0.0, 0.01, 32))  # a hinge at C = 100
        stats[cid] = CellStats({}, {"mean_ttft": ttft})
    out = _knees(pl.DataFrame(rows), stats, seed=1, n_boot=200)
    k = out["c0"]
    assert 80 < k["knee"] < 120 and (k["knee_grid_lo"], k["knee_grid_hi"]) == (80.0, 120.0), k
    assert k["knee_reason"]
    few = _knees(pl.DataFrame(rows[:3]), {r["cell_id"]: stats[r["cell_id"]] for r in rows[:3]}, seed=1, n_boot=200)
    assert few["c0"]["knee_grid_lo"] is None and few["c0"]["knee_reason"].startswith("too few load points")


@pytest.mark.parametrize("rate,unstable", [(150.0, True), (80.0, False)])
def test_an_overloaded_open_loop_reports_its_capacity_not_a_throughput(rate, unstable):
    """M/M/1 with service 10 ms (capacity 100 req/s): offered 150 req/s the queue grows through the
    run, the cell is unstable, its capacity interval holds 100 and it has no throughput or TTFT;
    offered 80 it is stable and reports both as before."""
    from poa_mc.engine.engine import simulate
    from poa_mc.model.spec_json import spec_to_json
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import cell_stats
    from tests.test_engine_theory import queue_cell

    spec = queue_cell(1, rate_rps=rate, service_ms=10.0)
    res = simulate(spec, replicas=32, requests=400, warmup=200, seed=43, stream=0)
    acc = accumulate(res.samples, res.replica, spec, {"window": 4})
    row = cell_stats(acc, {"cell_id": "c", "spec_json": spec_to_json(spec)}, {"social_cost": "mean_ttft"}, 200).row
    assert row["offered_rps"] == rate and row["unstable"] is unstable
    if unstable:
        assert row["capacity_rps_lo"] <= 100.0 <= row["capacity_rps_hi"], row
        assert row["throughput_rps"] is None and row["ttft_p99_ms"] is None and row["warmup_suggested"] is None
    else:
        assert "capacity_rps" not in row and row["throughput_rps_lo"] <= rate <= row["throughput_rps_hi"]


def test_with_an_slo_the_poa_table_compares_goodputs(tmp_path):
    grid = loads_grid(SMALL + "\n[slo]\nttft_ms = 900.0\n")
    run_grid(grid, out=tmp_path / "run", simulate=fake_engine.simulate, quiet=True, finish=False)
    summary, poa = reduce_run(tmp_path / "run")
    assert poa["poa_cf_goodput"].null_count() == 0 and (poa["poa_cf_goodput"] >= 1.0).all()
    assert (poa["poa_cf_goodput_lo"] <= poa["poa_cf_goodput"]).all() and poa["poa_cf_goodput_lo"].is_finite().all()
    assert set(poa["best_policy_goodput"]) <= {"greedy", "rr"}
    for row in poa.iter_rows(named=True):  # the best goodput over the selfish one's, as summary.parquet has them
        g = summary.filter((pl.col("topology") == row["topology"]) & (pl.col("concurrency") == row["concurrency"]))
        rates = dict(zip(g["policy"], g["goodput_rps"]))
        assert row["poa_cf_goodput"] == pytest.approx(max(1.0, max(rates.values()) / rates["greedy"]))


def test_a_tiny_ttft_win_is_not_worth_the_warning():
    """A TTFT gain of 0.1%, however significant (the quickstart's 1.001 [1.001, 1.001]), bought with
    a slower decode is not flagged: the warning needs a gain of 1% beyond doubt."""
    from poa_mc.stats.cell_stats import CellStats
    from poa_mc.stats.counterfactual import counterfactual_poa
    from poa_mc.stats.reduce import _wins_by_slowing_decode

    rng = np.random.default_rng(2)
    common = rng.normal(0.0, 20.0, 64)
    ttft = {"kv": 2549.4 + common, "oracle": 2547.0 + common + rng.normal(0.0, 0.1, 64)}
    win = counterfactual_poa(ttft, "kv")
    assert win.best_policy == "oracle" and 1.0 < win.lo < 1.01
    e2e = {p: 4000.0 + common for p in ttft}
    stats = {p: CellStats({"itl_mean_ms": 6.62 if p == "kv" else 6.64}, {"mean_ttft": ttft[p], "mean_e2e": e2e[p]})
             for p in ttft}  # fmt: skip
    assert not _wins_by_slowing_decode(stats, {"kv": "kv", "oracle": "oracle"}, "kv", win)
