import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from poa_mc.config import ConfigError, loads_grid
from poa_mc.games import best_response, pd_moves, ratio_of_independent, splits
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
    assert err(PD.replace("[games.pd]", "[games.cache]")) == "games.cache"


def test_a_pd_game_run_writes_its_table_plot_and_summary(tmp_path):
    from poa_mc.cli.main import main

    from poa_mc.runner import run_grid

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
    from poa_mc.runner import run_grid

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
