import pytest

from poa_mc.model.config import loads_grid
from poa_mc.model.grid import assign_shards, estimate_cost, parse_shard
from tests.grids_for_tests import SMALL


def test_cells_order_ids_and_streams():
    cells = loads_grid(SMALL).cells()
    assert [c.index for c in cells] == list(range(8))
    assert [(c.topology, c.concurrency, c.policy) for c in cells[:3]] == [
        ("1P/2D", 4, "greedy"),
        ("1P/2D", 4, "rr"),
        ("1P/2D", 32, "greedy"),
    ]
    assert len({c.cell_id for c in cells}) == 8
    assert all(c.cell_id.startswith("c") and len(c.cell_id) == 12 for c in cells)
    # common random numbers: one stream per (topology, load) point, shared by its policies
    by_point = {}
    for c in cells:
        by_point.setdefault(c.point, set()).add(c.stream)
    assert all(len(s) == 1 for s in by_point.values())
    assert len({next(iter(s)) for s in by_point.values()}) == 4
    assert all(0 <= c.stream < 2**31 for c in cells)
    assert cells[0].candidates() == 2 and cells[-1].candidates() == 3


def test_ids_stable_when_grid_grows_or_reorders():
    a = {c.label(): (c.cell_id, c.stream) for c in loads_grid(SMALL).cells()}
    bigger = SMALL.replace('["1P/2D", "1P/3D"]', '["1P/3D", "1P/4D", "1P/2D"]').replace("[4, 32]", "[32, 8, 4]")
    b = {c.label(): (c.cell_id, c.stream) for c in loads_grid(bigger).cells()}
    assert all(b[k] == v for k, v in a.items())
    # ...and change when the cell itself changes
    c = {x.label(): x.cell_id for x in loads_grid(SMALL.replace("osl = 16", "osl = 17")).cells()}
    assert all(c[k] != v[0] for k, v in a.items())


def test_assign_shards_deterministic_complete_balanced():
    grid = loads_grid(SMALL)
    cells = grid.cells()
    s3 = assign_shards(cells, 3, grid.run)
    assert s3 == assign_shards(list(cells), 3, grid.run)
    assert set(s3) == {0, 1, 2}
    loads = [sum(estimate_cost(c, grid.run) for c, s in zip(cells, s3) if s == k) for k in range(3)]
    costs = [estimate_cost(c, grid.run) for c in cells]
    lower_bound = max(sum(costs) / 3, max(costs))  # no assignment can beat this makespan
    assert max(loads) <= 4 / 3 * lower_bound  # the LPT guarantee
    # the assignment does not depend on the listing order of the cells
    rev = list(reversed(cells))
    s_rev = assign_shards(rev, 3, grid.run)
    assert {c.cell_id: s for c, s in zip(rev, s_rev)} == {c.cell_id: s for c, s in zip(cells, s3)}
    assert assign_shards(cells, 1, grid.run) == [0] * len(cells)
    assert sorted(assign_shards(cells, 20, grid.run)) == list(range(8))  # more shards than cells
    with pytest.raises(ValueError):
        assign_shards(cells, 0)


def test_parse_shard():
    assert parse_shard("0/4") == (0, 4)
    assert parse_shard("3/4") == (3, 4)
    for bad in ("4/4", "-1/2", "1", "a/b", "1/0"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_check_memory_refuses_what_cannot_fit_and_names_the_key():
    from poa_mc.engine.memory import check_memory
    from poa_mc.model.config import loads_grid
    from poa_mc.model.sections import ConfigError
    from tests.grids_for_tests import SMALL

    grid = loads_grid(SMALL)
    check_memory(grid.cells(), grid.run, available=8 << 30)  # 6 x 48 requests: nothing to say
    long = loads_grid(SMALL.replace("requests = 48", "requests = 200000"))
    with pytest.raises(ConfigError) as e:
        check_memory(long.cells(), long.run, available=16 << 20)  # one replica's outputs alone are bigger
    assert e.value.path == "run.requests" and "out_" in str(e.value)
    big = loads_grid(SMALL.replace("replicas = 6", "replicas = 2000000"))
    with pytest.raises(ConfigError) as e:
        check_memory(big.cells(), big.run, available=8 << 30)  # the results of 96 M requests
    assert e.value.path == "run.replicas" and "--shard" in str(e.value) and "run.samples" in str(e.value)
    # 20,000 replicas of 20,000 requests: every sample kept is far too much; none kept, the run
    # streams through one batch at a time and only the replicas' accumulator rows (~31 KB at most) stay
    wide = SMALL.replace("replicas = 6", "replicas = 20000").replace("requests = 48", "requests = 20000")
    with pytest.raises(ConfigError, match="run.samples"):
        check_memory(loads_grid(wide).cells(), loads_grid(wide).run, available=8 << 30)
    lean = loads_grid(wide.replace("warmup = 8", 'warmup = 8\nsamples = "none"'))
    check_memory(lean.cells(), lean.run, available=8 << 30)
    huge = loads_grid(SMALL.replace("replicas = 6", 'replicas = 2000000\nsamples = "none"'))
    with pytest.raises(ConfigError, match="accumulators"):  # 2 M rows of histogram spans do not fit
        check_memory(huge.cells(), huge.run, available=8 << 30)


def test_check_memory_names_what_makes_a_replica_big():
    from poa_mc.engine.memory import check_memory
    from poa_mc.model.config import loads_grid
    from poa_mc.model.sections import ConfigError
    from tests.grids_for_tests import SMALL

    grid = loads_grid(SMALL.replace('["1P/2D", "1P/3D"]', '["1P/3000000D"]'))
    with pytest.raises(ConfigError) as e:
        check_memory(grid.cells(), grid.run, available=1 << 30)
    assert e.value.path == "grid.topology" and ("wk_" in str(e.value) or "pc" in str(e.value))
