import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from poa_mc.model.config import loads_grid
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_json import spec_from_dict
from poa_mc.stats.games import (
    Ratio,
    best_response,
    cache_game_frame,
    pd_game_frame,
    pd_moves,
    planner_runs,
    poa_pd_interval,
    ratio_of_independent,
    splits,
    working_set_blocks,
)
from tests import fake_engine
from tests.grids_for_tests import SMALL

PD = (
    SMALL.replace('topology = ["1P/2D", "1P/3D"]\n', "").replace('flow = "decode_first"', 'flow = "prefill_first"')
    + "\n[games.pd]\ngpu_budget = 8\nprefill_gpus = 2\ndecode_gpus = 2\n"
)


def test_splits_fill_the_budget_with_whole_workers():
    assert splits(8, 2, 2) == [(1, 3), (2, 2), (3, 1)]
    assert splits(10, 4, 2) == [(1, 3), (2, 1)]  # 2 GPUs of 10 stay idle at 2P: a decode worker needs 2
    assert splits(3, 2, 2) == []


def test_best_response_finds_equilibria_and_cycles_on_a_move_graph():
    # 0 -> 1 -> 2 -> 0 is a cycle of the dynamics; 3 -> 4 and 4 is an equilibrium
    graph = {0: [1], 1: [2], 2: [0], 3: [4], 4: []}
    dyn = best_response(5, lambda i: graph[i])
    assert dyn.equilibria == [4] and dyn.cycles == [[0, 1, 2]]
    assert dyn.ends == {3: 4, 4: 4}


def test_pd_moves_on_a_hand_table_with_one_equilibrium():
    # equal GPUs per worker, so a move compares log-relative changes: from split 0 the prefill
    # pool gains ln 2 against the decode pool's ln 1.1 (takes); from 2 it would gain ln(2/1.5) =
    # 0.29 against ln(2/1.3) = 0.43 (does not), and the decode pool would gain 0.17 against the
    # prefill pool's ln 2 (does not either): 2 is the equilibrium, and from 3 the decode pool takes
    # back (0.43 > 0.29)
    cost_p = np.array([8.0, 4.0, 2.0, 1.5, 1.4])
    cost_d = np.array([1.0, 1.1, 1.3, 2.0, 4.0])
    moves = pd_moves(cost_p, cost_d, [1, 2, 3, 4, 5], [5, 4, 3, 2, 1], 2, 2)
    assert [moves(i) for i in range(5)] == [[1], [2], [], [2], [3]]
    dyn = best_response(5, moves)
    assert dyn.equilibria == [2] and not dyn.cycles and set(dyn.ends.values()) == {2}


def test_pd_moves_with_costs_that_are_not_convex_has_two_equilibria():
    cost_p = np.array([4.0, 2.0, 1.9, 1.0, 0.95])
    cost_d = np.array([1.0, 1.2, 1.3, 1.45, 3.0])
    dyn = best_response(5, pd_moves(cost_p, cost_d, [1, 2, 3, 4, 5], [5, 4, 3, 2, 1], 1, 1))
    assert dyn.equilibria == [1, 3]


def test_ratio_of_independent_estimates():
    r = ratio_of_independent(110.0, 2.0, 100.0, 1.0)
    s = math.sqrt((2 / 110) ** 2 + (1 / 100) ** 2)
    assert r.value == pytest.approx(1.1)
    assert (r.lo, r.hi) == pytest.approx((1.1 * math.exp(-1.959964 * s), 1.1 * math.exp(1.959964 * s)))
    assert math.isnan(ratio_of_independent(0.0, 1.0, 1.0, 1.0).value)


def _pd_summary(rng: np.random.Generator, social: list[float], replicas: int, loads: int, col: str = "e2e_mean_ms"):
    """A summary.parquet of `loads` independent loads (trials) of five splits 1P/5D .. 5P/1D whose
    pool costs (noise-free) put the one equilibrium at 3P/3D (test_pd_moves_on_a_hand_table...),
    and whose social cost `col` at each split is the mean of `replicas` replicas, each the true
    cost times 5% lognormal noise, independent across splits, with its 95% t-interval (as reduce
    writes e2e_mean_ms). A benefit column gets the value 1 / cost and its interval inverted."""
    from poa_mc.stats.intervals import _t_quantile

    true = np.asarray(social)
    x = true[None, :, None] * np.exp(0.05 * rng.standard_normal((loads, true.size, replicas)))
    m = x.mean(axis=2)
    half = _t_quantile(replicas, 0.95) * x.std(axis=2, ddof=1) / math.sqrt(replicas)
    lo, hi = m - half, m + half
    if col in ("goodput_rps", "slo_attainment", "throughput_rps"):
        m, lo, hi = 1.0 / m, 1.0 / hi, 1.0 / lo
    n_p = np.tile(np.arange(1, 6), loads)
    return pl.DataFrame({
        "load_axis": "concurrency", "concurrency": np.repeat(np.arange(loads), 5), "policy": "greedy",
        "topology": [f"{a}P/{6 - a}D" for a in n_p], "n_prefill": n_p, "n_decode": 6 - n_p, "replicas": replicas,
        "ttft_mean_ms": np.tile([8.0, 4.0, 2.0, 1.5, 1.4], loads),
        "itl_mean_ms": np.tile([1.0, 1.1, 1.3, 2.0, 4.0], loads),
        col: m.ravel(), f"{col}_lo": lo.ravel(), f"{col}_hi": hi.ravel(),
    })  # fmt: skip


PD_GAME = {"policy": "greedy", "prefill_gpus": 1, "decode_gpus": 1, "prefill_cost": "ttft_mean_ms",
           "decode_cost": "itl_mean_ms", "social_cost": "e2e_mean_ms"}  # fmt: skip


@pytest.mark.parametrize("poa", [1.008, 1.066])
def test_poa_pd_interval_covers_near_ties_and_is_not_one_when_the_equilibrium_looks_optimal(poa):
    # 2,000 loads, each a trial: true social costs 1.3, 1.0, poa, 1.15, 1.4 with the equilibrium at
    # split 2, so the true PoA_PD is `poa` (1.008: a near tie with the optimum, split 1), 8
    # replicas. Before (z = 1.96 on the equilibrium over the estimated optimum, [1, 1] whenever the
    # two were the same split) these data covered 1.008 in 61% of trials ([1, 1] in 37%), 1.066 in 94%.
    # A true coverage of 0.87 would pass >= 0.9 over 2,000 trials with probability < 1e-4.
    loads = 2000
    summary = _pd_summary(np.random.default_rng(46), [1.3, 1.0, poa, 1.15, 1.4], 8, loads)
    frame = pd_game_frame(summary, PD_GAME)
    eq = frame.filter(pl.col("is_equilibrium"))
    assert eq.height == loads and (eq["n_prefill"] == 3).all()  # deterministically split 2 (3P/3D)
    lo, hi, value = (eq[c].to_numpy() for c in ("poa_pd_lo", "poa_pd_hi", "poa_pd"))
    assert np.isfinite(lo).all() and np.isfinite(hi).all() and (lo >= 1.0).all()
    assert ((lo <= value) & (value <= hi)).all()
    assert np.mean((lo <= poa) & (poa <= hi)) >= 0.9
    looks_optimal = eq["is_optimum"].to_numpy()  # the estimated equilibrium is the estimated optimum
    assert (value[looks_optimal] == 1.0).all() and (hi[looks_optimal] > 1.0).mean() >= 0.99
    # [1, 1] only when every rival is confidently worse: a miss, at most (1 - 0.95) / (2 m) likely
    assert np.mean((lo == 1.0) & (hi == 1.0)) <= 0.01
    best = frame.filter(pl.col("is_equilibrium"))["poa_pd_best_lo", "poa_pd_best_hi"]  # one equilibrium: the same
    np.testing.assert_array_equal(best.to_numpy(), eq["poa_pd_lo", "poa_pd_hi"].to_numpy())


def test_poa_pd_interval_on_a_benefit_column_matches_the_cost_column():
    # goodput's cost is 1 / goodput, and the log-scale se of 1 / v is that of v: the same intervals
    a = pd_game_frame(_pd_summary(np.random.default_rng(7), [1.3, 1.0, 1.05, 1.15, 1.4], 8, 20), PD_GAME)
    b = pd_game_frame(_pd_summary(np.random.default_rng(7), [1.3, 1.0, 1.05, 1.15, 1.4], 8, 20, "goodput_rps"),
                      {**PD_GAME, "social_cost": "goodput_rps"})  # fmt: skip
    for c in ("poa_pd", "poa_pd_lo", "poa_pd_hi"):
        np.testing.assert_allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=1e-12)


def test_poa_pd_interval_by_hand():
    from poa_mc.stats.intervals import _t_ppf

    # two splits, the equilibrium (0) estimated optimal by a hair: PoA_PD 1, and the interval's top
    # is the rival's upper bound (one rival: no Bonferroni), Welch df = 2 (r - 1) = 14 for equal ses
    r = poa_pd_interval([0.99, 1.0], [0.02, 0.02], [8, 8], 0)
    half = _t_ppf(0.975, 14) * math.hypot(0.02, 0.02)
    assert (r.value, r.lo) == (1.0, 1.0) and r.hi == pytest.approx(0.99 * math.exp(half))
    # three splits: Bonferroni over 2 rivals; Welch df with unequal ses and replicas
    r = poa_pd_interval([1.1, 1.0, 1.3], [0.02, 0.03, 0.01], [8, 4, 16], 0)
    v0, v1, v2 = 0.02**2, 0.03**2, 0.01**2
    df1, df2 = (v0 + v1) ** 2 / (v0**2 / 7 + v1**2 / 3), (v0 + v2) ** 2 / (v0**2 / 7 + v2**2 / 15)
    h1, h2 = _t_ppf(1 - 0.05 / 4, df1) * math.sqrt(v0 + v1), _t_ppf(1 - 0.05 / 4, df2) * math.sqrt(v0 + v2)
    assert r.value == pytest.approx(1.1)
    assert r.lo == pytest.approx(max(1.0, 1.1 * math.exp(-h1), 1.1 / 1.3 * math.exp(-h2)))
    assert r.hi == pytest.approx(max(1.1 * math.exp(h1), 1.1 / 1.3 * math.exp(h2)))
    # every rival confidently worse: [1, 1], rightly (theta = 1)
    assert poa_pd_interval([1.0, 2.0], [0.01, 0.01], [8, 8], 0) == Ratio(1.0, 1.0, 1.0)
    # the equilibrium's own se missing: NaN bounds; a rival's missing: left out (no upper bound if
    # its point ratio is above the others'); a lone split: exactly 1
    assert math.isnan(poa_pd_interval([1.1, 1.0], [math.nan, 0.02], [8, 8], 0).lo)
    r = poa_pd_interval([1.1, 1.0, 1.3], [0.02, math.nan, 0.02], [8, 8, 8], 0)
    assert r.value == pytest.approx(1.1) and r.lo == 1.0 and math.isnan(r.hi)
    r = poa_pd_interval([1.1, 1.5, 1.0], [0.02, math.nan, 0.02], [8, 8, 8], 0)
    assert r.lo > 1.0 and r.hi > 1.1
    assert poa_pd_interval([1.0], [0.01], [8], 0) == Ratio(1.0, 1.0, 1.0)


def test_games_pd_table_sets_the_topologies_and_is_validated():
    grid = loads_grid(PD)
    assert [t.label for t in grid.topologies] == ["1P/3D", "2P/2D", "3P/1D"]
    assert grid.pd_game.policy == "greedy"  # [poa].selfish by default
    assert grid.to_dict()["pd_game"]["gpu_budget"] == 8
    assert "pd_game" not in loads_grid(SMALL).to_dict()  # other grids keep their fingerprint

    def err(text: str) -> str:
        with pytest.raises(ConfigError) as e:
            loads_grid(text)
        return e.value.path

    assert err(PD.replace("[grid]\n", '[grid]\ntopology = ["1P/2D"]\n')) == "grid.topology"
    assert err(PD.replace("gpu_budget = 8", "gpu_budget = 4")) == "games.pd.gpu_budget"
    assert err(PD + 'prefill_cost = "latency"\n') == "games.pd.prefill_cost"
    assert err(PD + 'policy = "nobody"\n') == "games.pd.policy"
    assert err(PD.replace("gpu_budget = 8\n", "")) == "games.pd.gpu_budget"
    assert err(PD.replace("[games.pd]", "[games.cache]")) == "games.cache.gpu_budget"


def test_a_pd_game_run_writes_its_table_plot_and_summary(tmp_path):
    from poa_mc.cli.main import main
    from poa_mc.run.runner import run_grid

    out = tmp_path / "run"
    report = run_grid(loads_grid(PD), out=out, simulate=fake_engine.simulate, quiet=True)
    assert report.reduced and (out / "plots" / "pd_game.png").exists()
    game = pl.read_parquet(out / "pd_game.parquet")
    assert game.height == 2 * 3  # 2 loads x 3 splits of the greedy policy
    for _, d in game.group_by("concurrency"):
        assert d["is_optimum"].sum() == 1 and d["is_equilibrium"].sum() == d["equilibria"][0] >= 1
        best = d.filter(pl.col("is_optimum"))["social_cost"][0]
        assert best == d["social_cost"].min()
        worst_eq = d.filter(pl.col("is_equilibrium"))["social_cost"].max()
        assert d["poa_pd"][0] == pytest.approx(worst_eq / best)
    r = CliRunner().invoke(main, ["games", str(out)])
    assert r.exit_code == 0 and "PoA_PD" in r.output and "equilibrium" in r.output


def test_a_benefit_as_social_cost_is_maximised(tmp_path):
    from poa_mc.run.runner import run_grid

    text = PD + 'social_cost = "goodput_rps"\n\n[slo]\nttft_ms = 400.0\n'
    out = tmp_path / "run"
    run_grid(loads_grid(text), out=out, simulate=fake_engine.simulate, quiet=True)
    game = pl.read_parquet(out / "pd_game.parquet")
    summary = pl.read_parquet(out / "summary.parquet").filter(pl.col("policy") == "greedy")
    for (load,), d in game.group_by(["concurrency"]):
        goodput = summary.filter(pl.col("concurrency") == load).sort("n_prefill")["goodput_rps"].to_numpy()
        np.testing.assert_allclose(d.sort("n_prefill")["social_cost"].to_numpy(), 1.0 / goodput)  # cost = 1 / benefit
        best = d.filter(pl.col("is_optimum"))
        assert best["social_cost"][0] == pytest.approx(1.0 / goodput.max())
        worst_eq = d.filter(pl.col("is_equilibrium"))["social_cost"].max()
        assert d["poa_pd"][0] == pytest.approx(
            worst_eq * goodput.max()
        )  # = goodput at the optimum / at the equilibrium


# ---- Game 2: the caching game

CACHE = (
    SMALL.replace('topology = ["1P/2D", "1P/3D"]', 'topology = ["2P/2D"]')
    .replace('flow = "decode_first"', 'flow = "prefill_first"')
    .replace('name = "rr"\nkind = "round_robin"', 'name = "global"\nkind = "kv"\ncache = "global"')
    + '\n[[policy]]\nname = "hash"\nkind = "hash"\n'
    + "\n[games.cache]\nprefill_kv_blocks = [8, 64]\nzipf_alpha = [0.0, 1.1]\n"
)


def test_games_cache_table_sweeps_capacity_and_skew_and_is_validated():
    grid = loads_grid(CACHE)
    assert [t.label for t in grid.topologies] == [
        "2P/2D kv=8 a=0", "2P/2D kv=8 a=1.1", "2P/2D kv=64 a=0", "2P/2D kv=64 a=1.1",
    ]  # fmt: skip
    game = grid.cache_game
    assert game.selfish == "greedy" and game.coordinated == ("global", "hash") and game.social_cost == "mean_ttft"
    cells = grid.cells()
    assert {c.spec.cluster.prefill_kv_blocks for c in cells} == {8, 64}
    assert {(c.spec.workload.popularity, c.spec.workload.zipf_alpha) for c in cells} == {("zipf", 0.0), ("zipf", 1.1)}
    # the policies of a point share its streams (common random numbers), and so do the variants
    assert len({c.stream for c in cells if c.concurrency == 4}) == 1
    assert "cache_game" not in loads_grid(SMALL).to_dict()
    assert "prefill_kv_blocks" not in loads_grid(SMALL).to_dict()["topologies"][0]  # fingerprints kept

    def err(text: str) -> str:
        with pytest.raises(ConfigError) as e:
            loads_grid(text)
        return e.value.path

    # a 512-token prompt takes 8 blocks
    assert err(CACHE.replace("[8, 64]", "[7, 64]")) == "games.cache.prefill_kv_blocks[0]"
    assert err(CACHE.replace("[8, 64]", "[8, 8]")) == "games.cache.prefill_kv_blocks[1]"
    assert err(CACHE.replace("prefill_kv_blocks = [8, 64]\n", "")) == "games.cache.prefill_kv_blocks"
    assert err(CACHE.replace("[0.0, 1.1]", "[-1.0]")) == "games.cache.zipf_alpha[0]"
    assert err(CACHE + 'coordinated = ["greedy"]\n') == "games.cache.coordinated[0]"
    assert err(CACHE + 'selfish = "nobody"\n') == "games.cache.selfish"
    assert err(CACHE + 'social_cost = "latency"\n') == "games.cache.social_cost"
    assert err(CACHE.replace('flow = "prefill_first"', 'flow = "decode_first"')) == "games.cache"
    assert err(CACHE + "\n[games.pd]\ngpu_budget = 8\n") == "games.cache"
    assert err(CACHE.replace('cache = "global"', 'cache = "pooled"')) == "policy[1].cache"


def test_global_cache_needs_the_prefill_first_path():
    text = SMALL.replace('name = "rr"\nkind = "round_robin"', 'name = "rr"\nkind = "kv"\ncache = "global"')
    with pytest.raises(ConfigError) as e:
        loads_grid(text)  # decode_first
    assert e.value.path == "policy[1].cache"


def _cells_frame(points: list[tuple[int, int, float, list[str]]]) -> pl.DataFrame:
    """cells.parquet rows for cache_game_frame: (point, kv blocks, alpha, policies)."""
    import json

    rows = []
    for point, kv, alpha, policies in points:
        spec = {
            "cluster": {"prefill_kv_blocks": kv, "block_size": 64},
            "workload": {"isl": {"kind": "fixed", "value": 1024}, "prefix_groups": 8, "prefix_ratio": 0.5,
                         "popularity": "zipf", "zipf_alpha": alpha},
        }  # fmt: skip
        for p in policies:
            rows.append({"cell_id": f"{point}-{p}", "index": len(rows), "point": point, "topology": f"2P/2D kv={kv}",
                         "n_prefill": 2, "n_decode": 2, "load_axis": "concurrency", "concurrency": 16, "rate": None,
                         "policy": p, "spec_json": json.dumps(spec)})  # fmt: skip
    return pl.DataFrame(rows)


def test_cache_game_frame_on_a_synthetic_table():
    rng = np.random.default_rng(4)
    base = rng.uniform(50, 150, size=40)  # common streams: every policy's replica i saw the same requests
    costs = {"0-selfish": 1.5 * base, "0-hash": 2.0 * base, "0-global": 1.2 * base + rng.normal(0, 0.5, 40),
             "1-selfish": base, "1-hash": base}  # point 1 lacks its global cell: skipped  # fmt: skip
    cells = _cells_frame([(0, 64, 0.0, ["selfish", "hash", "global"]), (1, 256, 1.0, ["selfish", "hash"])])
    game = {"selfish": "selfish", "coordinated": ["hash", "global"], "social_cost": "mean_ttft"}
    frame = cache_game_frame(cells, costs, dict.fromkeys(costs, 0.5), game)
    assert frame["policy"].to_list() == ["selfish", "hash", "global"]
    assert frame["role"].to_list() == ["selfish", "coordinated", "coordinated"]
    r = frame.row(0, named=True)
    assert r["poa_kv"] == pytest.approx(1.5 * base.mean() / costs["0-global"].mean())
    assert r["best_coordinated"] == "global" and r["poa_kv_lo"] < r["poa_kv"] < r["poa_kv_hi"]
    assert r["working_set_blocks"] == 8 * 8 and r["pool_kv_blocks"] == 128
    hash_row = frame.row(1, named=True)
    assert hash_row["poa_kv_vs"] == pytest.approx(0.75)  # selfish is better than hashing here: PoA_KV < 1
    assert hash_row["poa_kv_vs_lo"] == pytest.approx(0.75) == hash_row["poa_kv_vs_hi"]  # exactly proportional


def test_working_set_counts_every_groups_shared_prefix_at_the_longest_prompt():
    spec = {"cluster": {"block_size": 64}, "workload": {"isl": {"kind": "uniform", "low": 100, "high": 4096},
            "prefix_groups": 32, "prefix_ratio": 0.75}}  # fmt: skip
    assert working_set_blocks(spec_from_dict(spec)) == 32 * 48
    spec["workload"]["isl"] = {"kind": "empirical", "values": {"count": 10**6, "sha256": "x"}}
    assert working_set_blocks(spec_from_dict(spec)) == -1


def test_poa_kv_is_one_when_every_worker_caches_the_whole_working_set():
    # fixed prompts: a worker's chain of a group is whole after its first request, and with ample
    # blocks and a long warm-up every worker holds every group before anything is measured, so
    # the selfish caches hit exactly what the pooled one does and PoA_KV's interval covers 1
    from poa_mc.engine.engine import simulate
    from poa_mc.model.spec import CellSpec
    from poa_mc.model.spec_cluster import ClusterSpec
    from poa_mc.model.spec_policy import PolicySpec
    from poa_mc.model.spec_workload import Dist, WorkloadSpec
    from poa_mc.stats.counterfactual import ratio_to_best

    def cell(cache: str) -> CellSpec:
        return CellSpec(
            cluster=ClusterSpec(n_prefill=3, n_decode=2),
            workload=WorkloadSpec(
                isl=Dist("fixed", 1536),
                osl=Dist("uniform", low=4, high=24),
                prefix_groups=8,
                prefix_ratio=0.5,
                concurrency=48,
            ),  # fmt: skip
            policy=PolicySpec(kind="kv", cache=cache),
        )

    kw = dict(replicas=24, requests=300, warmup=300, seed=3, stream=1)
    selfish, pooled = simulate(cell("per_worker"), **kw).samples, simulate(cell("global"), **kw).samples
    usable = 1536 // 64 // 2  # the shared prefix: half the prompt
    assert pooled["cached_blocks"].sum() == usable * pooled["cached_blocks"].size
    assert selfish["cached_blocks"].sum() >= 0.999 * usable * selfish["cached_blocks"].size
    rho, lo, hi, _ = ratio_to_best(selfish["ttft_ms"].mean(axis=1), {"global": pooled["ttft_ms"].mean(axis=1)})
    assert lo < 1.0 < hi and hi - lo < 0.02, (rho, lo, hi)


def test_a_cache_game_run_writes_its_table_plot_and_summary(tmp_path):
    from poa_mc.cli.main import main
    from poa_mc.run.runner import run_grid

    out = tmp_path / "run"
    report = run_grid(loads_grid(CACHE), out=out, simulate=fake_engine.simulate, quiet=True)
    assert report.reduced and (out / "plots" / "cache_game.png").exists()
    game = pl.read_parquet(out / "cache_game.parquet")
    assert game.height == 2 * 2 * 2 * 3  # capacities x skews x loads x the game's policies
    summary = pl.read_parquet(out / "summary.parquet")
    for _, d in game.group_by(["topology", "concurrency"]):
        assert d["policy"].to_list() == ["greedy", "global", "hash"]
        costs = dict(zip(d["policy"], d["social_cost"]))
        best = min(costs["global"], costs["hash"])
        assert d["poa_kv"][0] == pytest.approx(costs["greedy"] / best)
        assert d["best_coordinated"][0] == min(("global", "hash"), key=costs.get)
        hits = summary.filter((pl.col("topology") == d["topology"][0]) & (pl.col("concurrency") == d["concurrency"][0]))
        assert sorted(hits["hit_rate"].to_list()) == sorted(d["hit_rate"].to_list())
    from poa_mc.plots.game_figures import cache_game_figure

    fig = cache_game_figure(game)  # two panels (loads): PoA_KV on one y-scale, hit rates on another
    shared = fig.axes[0].get_shared_y_axes()
    assert shared.joined(fig.axes[0], fig.axes[1]) and fig.axes[2].get_shared_y_axes().joined(fig.axes[2], fig.axes[3])
    assert not shared.joined(fig.axes[0], fig.axes[2])
    r = CliRunner().invoke(main, ["games", str(out)])
    assert r.exit_code == 0 and "caching game" in r.output and "PoA_KV" in r.output
    r = CliRunner().invoke(main, ["games", str(tmp_path)])
    assert r.exit_code == 2 and "no manifest.json" in r.output


def test_game_presets_load():
    from poa_mc.cli.common import builtin_grids
    from poa_mc.model.config import load_grid

    cache = load_grid(builtin_grids()["cache-game"])
    assert cache.cache_game.coordinated == ("hash", "global") and len(cache.topologies) == 8
    kinds = {p.name: (p.kind, p.cache) for p in cache.policies}
    assert kinds["global"] == ("kv", "global") and kinds["hash"][0] == "hash"
    assert load_grid(builtin_grids()["pd-game"]).pd_game.gpu_budget == 16


# ---- the Planner moving Game 1's split

PLANNER = (
    PD
    + '\n[games.pd.planner]\ninterval_ms = 200.0\nstarts = ["1P/3D", "3P/1D"]\n'
    + "\n[slo]\nttft_ms = 150.0\nitl_ms = 30.0\n"
)


def test_games_pd_planner_adds_a_run_from_each_start_and_is_validated():
    grid = loads_grid(PLANNER)
    assert [t.label for t in grid.topologies] == ["1P/3D", "2P/2D", "3P/1D", "1P/3D planner", "3P/1D planner"]
    planner = grid.pd_game.planner
    assert (planner.interval_ms, planner.ttft_ms, planner.itl_ms, planner.startup_ms) == (200.0, 150.0, 30.0, 0.0)
    cells = [c for c in grid.cells() if c.topology.endswith("planner")]
    assert len(cells) == 2 * 2 * 2 and all(c.spec.planner == planner for c in cells)  # starts x loads x policies
    assert all(c.spec.planner is None for c in grid.cells() if not c.topology.endswith("planner"))
    assert "planner" not in loads_grid(PD).to_dict()["pd_game"]  # a game without it keeps its fingerprint
    every = loads_grid(PLANNER.replace('starts = ["1P/3D", "3P/1D"]\n', ""))
    assert sum(t.planner for t in every.topologies) == 3  # default: from every split

    def err(text: str) -> str:
        with pytest.raises(ConfigError) as e:
            loads_grid(text)
        return e.value.path

    assert err(PLANNER.replace('"3P/1D"]', '"4P/0D"]')) == "games.pd.planner.starts[1]"
    assert err(PLANNER.replace('"3P/1D"]', '"1P/3D"]')) == "games.pd.planner.starts[1]"
    assert err(PLANNER.replace("interval_ms = 200.0", "interval_ms = 0.5")) == "games.pd.planner.interval_ms"
    assert err(PLANNER.replace("interval_ms = 200.0", "interval = 200.0")) == "games.pd.planner.interval"
    assert err(PLANNER.replace("itl_ms = 30.0\n", "")) == "games.pd.planner"  # its targets come from [slo]
    assert err(PLANNER.replace('kind = "kv"', 'kind = "pull"', 1)) == "policy[0].kind"


def test_planner_runs_shares_reversals_and_final_split():
    path = [(1, 3), (2, 2), (3, 1)]
    nan = np.nan
    # replica 0: 1P -> 2P at 10 -> 3P at 30 -> 2P at 50 (a reversal) in the window [20, 60];
    # replica 1 never moves
    ms = np.array([[10.0, 30.0, 50.0], [nan, nan, nan]])
    n_p = np.array([[2.0, 3.0, 2.0], [nan, nan, nan]])
    runs = planner_runs(path, (1, 3), ms, n_p, np.array([20.0, 20.0]), np.array([60.0, 60.0]))
    np.testing.assert_allclose(runs.share[0], [0.0, 0.5, 0.5])  # 2P on [20, 30] and [50, 60], 3P on [30, 50]
    np.testing.assert_allclose(runs.share[1], [1.0, 0.0, 0.0])
    assert runs.final.tolist() == [1, 0] and runs.moves.tolist() == [3, 0] and runs.reversals.tolist() == [1, 0]


def test_a_planner_run_writes_its_table_plot_and_summary(tmp_path):
    from poa_mc.cli.main import main
    from poa_mc.run.runner import run_grid

    text = PLANNER.replace("requests = 48", "requests = 600").replace("replicas = 6", "replicas = 3")
    out = tmp_path / "run"
    report = run_grid(loads_grid(text), out=out, quiet=True)
    assert report.reduced and (out / "plots" / "planner.png").exists()
    frame = pl.read_parquet(out / "planner.parquet")
    assert frame.height == 2 * 2 * 2 * 3  # loads x starts x policies x splits
    for _, d in frame.group_by(["concurrency", "start", "policy"]):
        assert d["time_share"].sum() == pytest.approx(1.0)
        assert d["final_share"].sum() == pytest.approx(1.0)
    static = pl.read_parquet(out / "pd_game.parquet")
    assert static.height == 2 * 3  # the planner's cells are not splits of the static game
    moves = pl.read_parquet(out / "planner_moves.parquet")
    assert (moves.filter(pl.col("from_ms") == 0)["split"] == moves.filter(pl.col("from_ms") == 0)["start"]).all()
    summary = pl.read_parquet(out / "summary.parquet").filter(pl.col("topology").str.ends_with("planner"))
    assert np.isnan(summary["poa_hat"].to_numpy()).all() and np.isnan(summary["prefill_util"].to_numpy()).all()
    r = CliRunner().invoke(main, ["games", str(out)])
    assert r.exit_code == 0 and "Planner" in r.output and "PoA_PD" in r.output
