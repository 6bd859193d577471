"""poa_mc/kernels/poa_hat.py: PoA-hat's window solver (the Hungarian method over worker slots, the
flow solver over workers), the pairwise sums, and each replica's window sums worked out in the
kernels against the host's compiled and generic paths (poa_mc.stats.poa_hat)."""

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from poa_mc.kernels import cpu


@pytest.mark.parametrize("whole", [True, False])
def test_assignment_over_ascending_slots_scans_first_free_slots_to_the_same_bits(whole):
    """Slot-priced matrices (columns slot-major over k workers, each worker's price non-decreasing
    in the slot, ties included): the solve that scans taken columns and each worker's first free
    slot gives the full scan's assignment value bit for bit, and scipy's optimum."""
    rng = np.random.default_rng(7 if whole else 8)
    checked = 0
    for _ in range(3000):
        n, k, slots = (int(x) for x in rng.integers(1, 10, 3))
        if slots * k < n:
            continue
        base = rng.integers(0, 5, (n, 1, k)) if whole else rng.uniform(-3.0, 5.0, (n, 1, k))
        steps = rng.integers(0, 3, (n, slots, k)) if whole else rng.exponential(1.0, (n, slots, k))
        a = np.ascontiguousarray((base + np.cumsum(steps, axis=1)).reshape(n, slots * k), dtype=np.float64)
        assert cpu.slots_ascend(a, k)
        pruned, full = cpu.assign_min(a, k), cpu.assign_min(a, slots * k)
        assert pruned == full
        r, col = linear_sum_assignment(a)
        assert pruned == pytest.approx(float(a[r, col].sum()), rel=1e-12, abs=1e-9)
        # the same slots laid out worker by worker (frozen pricing's matrices)
        b = np.ascontiguousarray(a.reshape(n, slots, k).transpose(0, 2, 1).reshape(n, slots * k))
        assert cpu.assign_min(b, k, True) == cpu.assign_min(b, slots * k)
        checked += 1
    assert checked > 2000
    # a worker whose later slot is cheaper is not ascending: such a matrix is scanned whole
    assert not cpu.slots_ascend(np.array([[2.0, 0.0, 1.0, 0.0]]), 2)


def _full_window_opt(f_blk, a_blk, t_blk, slots):
    """A whole-block window's OPT the long way: its matrix built whole (slot-major), every column
    scanned by the Hungarian solve."""
    n, k = f_blk.shape
    g = np.maximum(np.arange(slots)[:, None] - t_blk[None, :], 0.0) * a_blk[None, :]  # (slots, k)
    a = np.ascontiguousarray(np.maximum(f_blk[:, None, :] + g[None], 0.0).reshape(n, slots * k))
    return cpu.assign_min(a, slots * k), a


def test_whole_block_windows_solved_over_workers_equal_the_hungarian_to_the_bit():
    """Router prices with no weight on tokens are whole block counts, f_blk[i, w] plus what slot s
    of w adds; such windows are solved by shortest routes over the workers (flow_opt), which must
    give the Hungarian solve's OPT bit for bit: on windows of equal rows (the recorded windows of a
    saturated cell), near-equal ones, and ones whose optimum moves earlier decisions."""
    rng = np.random.default_rng(21)
    checked = congested = 0
    for _ in range(4000):
        n, k = int(rng.integers(1, 11)), int(rng.integers(1, 7))
        slots = int(rng.integers(-(-n // k), n + 2))
        kind = rng.integers(0, 3)
        if kind == 0:  # every decision saw the same loads
            f_blk = np.repeat(rng.integers(0, 9, (1, k)) * 64.0, n, axis=0)
        elif kind == 1:  # near-equal rows: many ties
            f_blk = rng.integers(0, 9, (1, k)) * 64.0 + rng.integers(0, 3, (n, k)) * 64.0
        else:
            f_blk = rng.integers(0, 500, (n, k)).astype(np.float64)
        a_blk = rng.integers(0, 70, k).astype(np.float64)
        t_blk = rng.integers(0, 4, k).astype(np.float64)
        f_tok, a_tok, t_tok = rng.uniform(0, 9000, (n, k)), rng.integers(0, 4000, k) * 1.0, t_blk.copy()
        assert cpu.whole_block_prices(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, 0.0, np.empty(0))
        want, a = _full_window_opt(f_blk, a_blk, t_blk, slots)
        got = cpu.window_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, 0.0, 64.0, np.empty(0))
        assert got == want
        r, col = linear_sum_assignment(a)
        assert got == float(a[r, col].sum())
        greedy = sum(f_blk[i].min() for i in range(n))  # each decision alone on its cheapest worker
        congested += got > greedy and kind == 2  # windows whose slots' prices decide
        checked += 1
    assert checked == 4000 and congested > 100
    # two workers; the second decision is cheapest where the first went, which then moves: OPT 1
    f = np.array([[0.0, 1.0], [0.0, 10.0]])
    args = (f, f, np.full(2, 100.0), np.full(2, 100.0), np.zeros(2), np.zeros(2), 2, 0.0, 64.0, np.empty(0))
    assert cpu.window_opt(*args) == 1.0
    # a weight on tokens, a fractional or negative load, or a step table: not whole block prices
    z, one = np.zeros((1, 2)), np.ones(2)
    assert not cpu.whole_block_prices(z, z, one, one, one, one, 2, 1.0, np.empty(0))
    assert not cpu.whole_block_prices(z, z + 0.5, one, one, one, one, 2, 0.0, np.empty(0))
    assert not cpu.whole_block_prices(z, z - 1.0, one, one, one, one, 2, 0.0, np.empty(0))
    assert not cpu.whole_block_prices(z, z, one, one, one, one, 2, 0.0, np.ones(3))
    assert not cpu.whole_block_prices(z + np.inf, z, one, one, one, one, 2, 0.0, np.empty(0))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 16, 127, 128, 129, 136, 300, 1000, 4099, 70001])
def test_pairwise_sums_are_numpys_row_sums_to_the_bit(n):
    """The kernels sum a replica's realized costs and OPTs as numpy's x.sum(axis=1) does (its
    pairwise summation), so that their sums are the host's to the bit: on values of every
    magnitude and sign, where another order of additions rounds differently."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((4, n)) * 10.0 ** rng.uniform(-6, 6, (4, n))
    np.testing.assert_array_equal(cpu.pairwise_rows(x), x.sum(axis=1))
    if n >= 1000:  # the order matters on such values: a running sum rounds differently somewhere
        assert any(sum(row.tolist()) != s for row, s in zip(x, x.sum(axis=1)))


def _cell(flow="prefill_first", n_p=1, n_d=3, concurrency=24, **policy):
    from poa_mc.model.spec import CellSpec
    from poa_mc.model.spec_cluster import ClusterSpec
    from poa_mc.model.spec_policy import PolicySpec
    from poa_mc.model.spec_workload import Dist, WorkloadSpec

    return CellSpec(
        cluster=ClusterSpec(n_prefill=n_p, n_decode=n_d, flow=flow),
        workload=WorkloadSpec(isl=Dist("uniform", low=64, high=3000), osl=Dist("fixed", 20), prefix_groups=6,
                              prefix_ratio=0.5, concurrency=concurrency),
        policy=PolicySpec(kind="kv", **policy),
    )  # fmt: skip


def _client_cell():
    """A pool of 16 connections for 24 clients, 0.5 ms away: TTFT as the client sees it."""
    import dataclasses

    from poa_mc.model.spec_workload import ClientSpec

    spec = _cell()
    client = ClientSpec(max_connections=16, overhead_ms=0.5)
    return dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, client=client))


def test_the_observed_cost_from_the_client_prices_its_waits_too():
    """The same decisions priced by the whole TTFT its client saw (pool wait included) cost more
    than by the latency from the decision on; OPT is priced the same way in both."""
    spec = _client_cell()
    client, _ = _sums(spec, {"window": 8, "cost": "observed", "observed_from": "client"}, True)
    decision, _ = _sums(spec, {"window": 8, "cost": "observed"}, True)
    np.testing.assert_array_equal(client["poa_opt"], decision["poa_opt"])
    assert (client["poa_actual"] > decision["poa_actual"]).all()


def _sums(spec, settings, kernels: bool):
    """The cell's accumulators through the engine's streamed reduction, with the kernels working
    PoA-hat out (kernels) or the host, and what the kernels handed the host."""

    from poa_mc.engine.engine import simulate
    from poa_mc.stats.accumulate import accumulate

    seen = []
    spec_d = spec

    def reduce(cols, rep, logs):
        seen.append(cols.get("poa_kernel"))
        return accumulate(cols, rep, spec_d, settings, {}, logs)

    run = dict(replicas=4, requests=160, warmup=20, seed=3, stream=1, keep=0, reduce=reduce, tally=True, slo={})
    acc = simulate(spec, **run, **({"poa": settings} if kernels else {})).reduced()
    return acc, seen


CASES = {  # (cell, [poa]): each decision's times, each price, each solver
    "decode-after-prefill-flow": (_cell(), {"window": 8}),
    "decode-step": (_cell(), {"window": 8, "cost": "ttft"}),
    "observed-step": (_cell(), {"window": 8, "cost": "observed"}),
    "observed-client": (_client_cell(), {"window": 8, "cost": "observed", "observed_from": "client"}),
    "few-slots": (_cell(), {"window": 16, "slots": 8}),
    "decode-token-weight": (_cell(n_p=2, n_d=2, decode_overlap_weight=0.5), {"window": 8}),
    "prefill": (_cell(n_p=2, n_d=2), {"window": 8, "stage": "prefill"}),
    "decode-first": (_cell("decode_first"), {"window": 8, "overlap_weight": 1.0}),
    "aggregated": (_cell("aggregated", n_p=0, n_d=3), {"window": 6}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernels_window_sums_equal_the_hosts_to_the_bit(case):
    """Each replica's PoA-hat sums worked out in the kernels from its request rows equal the host's
    from the recorded columns (poa_mc.stats.poa_hat), to the bit: for each decision (prefill_first's
    prefill and decode choices, the other flows' decode choice), price (the router cost with and
    without a weight on tokens, the tabulated step, the observed latency) and solver (over the
    workers, the Hungarian method), with fewer slots than decisions too."""
    spec, poa = CASES[case]
    got, seen = _sums(spec, poa, True)
    want, host = _sums(spec, poa, False)
    assert all(s is not None and np.isfinite(s).all() for s in seen), "the kernels left it to the host"
    assert all(h is None for h in host)
    assert (got["poa_windows"] == 160 // poa["window"]).all()
    assert np.isfinite(got["poa_opt"]).all() and (got["poa_opt"] > 0).all()
    for k in ("poa_actual", "poa_opt", "poa_windows"):
        np.testing.assert_array_equal(got[k], want[k])
    if poa.get("cost", "router") == "router":  # priced and realized alike: OPT <= ACTUAL
        assert (got["poa_opt"] <= got["poa_actual"]).all()


def test_a_window_off_the_step_table_is_left_to_the_host_with_the_same_numbers(monkeypatch):
    """A block count past the kernels' step table: the kernels mark the replica (NaN) and the host
    works the batch out from its rows, with the numbers it would have had."""
    from poa_mc.stats import poa_plan

    spec, poa = CASES["decode-step"]
    want, _ = _sums(spec, poa, False)
    monkeypatch.setattr(poa_plan, "STEP_TABLE_MAX", 2)
    got, seen = _sums(spec, poa, True)
    assert all(s is not None and np.isnan(s[:, 1]).all() for s in seen)
    for k in ("poa_actual", "poa_opt", "poa_windows"):
        np.testing.assert_array_equal(got[k], want[k])


def test_sums_made_for_other_settings_are_refused():
    """Kernel sums carry the [poa] settings they were made for: a reduction with others raises
    rather than reporting them."""

    from poa_mc.stats.accumulate import poa_hat_sums
    from poa_mc.stats.poa_plan import settings

    spec = _cell()
    cols = {"ttft_ms": np.zeros((2, 8)), "poa_kernel": np.ones((2, 3)), "poa_settings": settings({"window": 8})}
    assert poa_hat_sums(cols, spec, {"window": 8})[2] == 1
    with pytest.raises(ValueError, match="worked PoA-hat out for"):
        poa_hat_sums(cols, spec, {"window": 4})


def test_the_plan_leaves_to_the_host_what_the_kernels_do_not_solve():
    """kernel_params: the host keeps frozen pricing, no load accounting, the predicted-TTFT flavours
    of an arrival decision, planner cells and one-candidate decisions."""

    from poa_mc.stats.poa_plan import kernel_params, plan

    spec = _cell()
    assert kernel_params(plan(spec, {"window": 8}), spec, 100) is not None
    for poa in ({"window": 8, "pricing": "frozen"}, {"window": 8, "freeze": False}, {"window": 200}):
        assert kernel_params(plan(spec, poa), spec, 100) is None, poa
    first = _cell("decode_first")
    assert kernel_params(plan(first, {"window": 8, "cost": "ttft"}), first, 100) is None
    one = _cell(n_d=1)
    assert not plan(one, {"window": 8}).game
    assert kernel_params(plan(one, {"window": 8}), one, 100) is None
