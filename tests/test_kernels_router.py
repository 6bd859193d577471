"""poa_mc/kernels/router.py: the router's active blocks, as poa-mc charged them and as Dynamo counts them
(`cluster.router_blocks`), on hand-worked bookings and over whole drained runs."""

from __future__ import annotations

import numpy as np
import pytest

from poa_mc.engine.memory import _shapes
from poa_mc.engine.packing import pack_params
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NSI, NWI, RI_STATUS, SI_ABP, WI_AB, WI_RG
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec
from poa_mc.stats.sketch import EDGES

R = cpu._K.router


def _state(groups: int, dedup: bool):
    wk_i = np.zeros((1, 3, NWI + (2 * groups if dedup else 0)), dtype=np.int32)
    slot_i = np.zeros((1, 8, NSI), dtype=np.int32)
    return wk_i, slot_i


def test_a_groups_prefix_counts_once_per_worker_while_one_of_its_requests_is_in_flight():
    """Dynamo's ActiveSequences: blocks are counted once per worker whoever holds them. Requests of
    64 blocks, group 0 with a 32-block prefix, group 1 with a 16-block one, on worker 0."""
    wk_i, slot_i = _state(groups=2, dedup=True)
    book = lambda s, g, pfx: R.book_active(wk_i, slot_i, 0, s, 0, g, pfx, 64, 0)  # noqa: E731
    assert book(0, 0, 32) == 64  # nothing in flight: all its blocks are new
    assert R.shared_active(wk_i, 0, 0, 0, 32) == 32 and R.shared_active(wk_i, 0, 1, 0, 32) == 0
    assert book(1, 0, 32) == 32  # the group's prefix is already there
    assert book(2, 1, 16) == 64
    assert wk_i[0, 0, WI_AB] == 160
    # potential blocks of one more group-0 request: here its 32 own, on the idle worker 1 all 64
    pc = np.zeros((1, 3, 2, 4), dtype=np.int32)  # nothing cached: the count ignores the cache anyway
    assert R.cand_blocks(wk_i, pc, 0, 0, 0, 0, 0, 32, 64) == 160 + 32
    assert R.cand_blocks(wk_i, pc, 0, 1, 1, 0, 0, 32, 64) == 64
    R.unbook_active(wk_i, slot_i, 0, 0, 0, 0)  # request 0 leaves: its 32 own blocks go, the prefix stays
    assert wk_i[0, 0, WI_AB] == 128 and R.shared_active(wk_i, 0, 0, 0, 32) == 32
    R.unbook_active(wk_i, slot_i, 0, 1, 0, 0)  # the group's last request: its prefix goes with it
    assert wk_i[0, 0, WI_AB] == 64 and R.shared_active(wk_i, 0, 0, 0, 32) == 0
    R.unbook_active(wk_i, slot_i, 0, 2, 0, 1)
    assert wk_i[0, 0, WI_AB] == 0 and not wk_i[0, 0, WI_RG:].any()


def test_without_dedup_each_request_books_its_blocks_less_the_cached_prefix():
    wk_i, slot_i = _state(groups=2, dedup=False)
    for s in range(2):
        assert R.book_active(wk_i, slot_i, 0, s, 0, 0, 32, 64, 32) == 32  # 32 blocks seen cached
    assert wk_i[0, 0, WI_AB] == 64 and slot_i[0, 1, SI_ABP] == 32
    # and a decision that assumes no KV reuse (g = -1) in a dedup state books the same way
    wk_i, slot_i = _state(groups=2, dedup=True)
    assert R.book_active(wk_i, slot_i, 0, 0, 0, -1, 32, 64, 0) == 64
    assert R.book_active(wk_i, slot_i, 0, 1, 0, -1, 32, 64, 0) == 64
    assert not wk_i[0, 0, WI_RG:].any()


def test_fewest_blocks_prefers_the_worker_where_the_group_is_in_flight():
    wk_i, slot_i = _state(groups=1, dedup=True)
    rep_i = np.zeros((1, 64), dtype=np.int64)
    key = cpu._K.rng.replica_key(1, 2, 3)
    R.book_active(wk_i, slot_i, 0, 0, 1, 0, 32, 40, 0)  # worker 1: 40 blocks, 32 of them group 0's prefix
    wk_i[0, 2, WI_AB] = 20  # worker 2: 20 blocks of other work
    # a group-0 request adds 8 new blocks on worker 1 (40 + 8) and 40 on worker 2 (20 + 40)
    assert R.fewest_blocks(wk_i, rep_i, 0, key, 1, 2, 0, 32) == 1
    assert R.fewest_blocks(wk_i, rep_i, 0, key, 1, 2, 0, 0) == 2  # no shared prefix: plain load


def _cell(flow: str, router_blocks: str, n_p: int = 2, n_d: int = 3) -> CellSpec:
    return CellSpec(
        cluster=ClusterSpec(n_prefill=n_p, n_decode=n_d, flow=flow, router_blocks=router_blocks),
        workload=WorkloadSpec(
            isl=Dist("uniform", low=256, high=2048),
            osl=Dist("fixed", 32),
            prefix_groups=4,
            prefix_ratio=0.5,
            concurrency=24,
        ),  # fmt: skip
        policy=PolicySpec(kind="kv"),
    )


@pytest.mark.parametrize("router_blocks", ["per_request", "dynamo"])
@pytest.mark.parametrize("flow,n_p", [("prefill_first", 2), ("aggregated", 0), ("decode_first", 1)])
def test_every_booking_is_released_by_the_end_of_a_drained_run(flow, n_p, router_blocks):
    """A finite run (no arrival after the measured requests) ends with nothing in flight: the
    router's active blocks and its groups in flight are back to zero on every worker."""
    spec = _cell(flow, router_blocks, n_p=n_p)
    ip, fp, tabs = pack_params(spec, requests=150, warmup=0, seed=5, stream=1, record_candidates=False, drain=True)
    n_w = spec.cluster.n_workers()
    out, _ = cpu.run_batch(ip, fp, tabs, EDGES, _shapes(ip, fp, n_w, 150, False), 3)
    assert (out["rep_i"][:, RI_STATUS] == 0).all()
    wk = out["wk_i"][:, :n_w]
    assert (wk[:, :, WI_AB] == 0).all(), wk[:, :, WI_AB]
    assert wk.shape[2] == NWI + (2 * 4 if router_blocks == "dynamo" else 0)
    assert not wk[:, :, NWI:].any()


def test_dynamo_counts_change_only_what_dynamo_does_differently():
    """prefill_first with one prefill worker: the prefill choice is no choice and the decode router
    assumes no KV reuse, so Dynamo's counting changes no result; aggregated workers do change."""
    from poa_mc.engine.engine import simulate

    def run(flow, n_p, rb):
        return simulate(_cell(flow, rb, n_p=n_p), replicas=2, requests=200, warmup=20, seed=3, stream=0)

    a, b = run("prefill_first", 1, "per_request"), run("prefill_first", 1, "dynamo")
    np.testing.assert_array_equal(a.samples["ttft_ms"], b.samples["ttft_ms"])
    np.testing.assert_array_equal(a.samples["decode_worker"], b.samples["decode_worker"])
    a, b = run("aggregated", 0, "per_request"), run("aggregated", 0, "dynamo")
    assert not np.array_equal(a.samples["decode_worker"], b.samples["decode_worker"])


def test_round_robin_rotates_the_decode_workers_of_prefill_first_too():
    """Dynamo's decode client takes turns as its prefill client does: in the order the decode
    choices are made, worker d, d + 1, ... (mod 3), each with its third of the requests; the
    prefill choice keeps its own counter (2 prefill workers alternate as before)."""
    from poa_mc.engine.engine import simulate

    spec = CellSpec(
        cluster=ClusterSpec(n_prefill=2, n_decode=3, flow="prefill_first"),
        workload=WorkloadSpec(isl=Dist("uniform", low=64, high=900), osl=Dist("fixed", 8), concurrency=7),
        policy=PolicySpec(kind="round_robin"),
    )
    res = simulate(spec, replicas=3, requests=90, warmup=0, seed=3, stream=0, drain=True)
    s, c = res.samples, res.candidates
    for r in range(3):
        # choices in the order they were made: by decision time, then by arrival (one prefill
        # worker's pass hands its requests on in queue order)
        order = np.lexsort((s["seq"][r], c["decode_decided_ms"][r]))
        dw = s["decode_worker"][r][order]
        np.testing.assert_array_equal(dw, (dw[0] + np.arange(len(dw))) % 3)
        pw = s["prefill_worker"][r][np.argsort(s["seq"][r])]
        np.testing.assert_array_equal(pw, (pw[0] + np.arange(len(pw))) % 2)


def test_a_decode_worker_never_chosen_is_scored_by_its_real_load_as_dynamo_0_9_0_does():
    """Dynamo 0.9.0's selector charges `unwrap_or(isl)` only to a worker its slot tracker has no
    state for; the tracker queries every registered worker, so one that has had no request yet is
    scored by its real load, 0 blocks, and is the least loaded (docs/sources.md, "The paper's
    stack as released"): no starvation of idle decode workers."""
    wk_i = np.zeros((1, 4, NWI), dtype=np.int32)
    rep_i = np.zeros((1, 40), dtype=np.int64)
    wk_i[0, 1, WI_AB] = 24  # decode workers 1..3 (worker 0 prefills): two busy, worker 3 never chosen
    wk_i[0, 2, WI_AB] = 8
    for key in range(5):  # whatever the tie draws
        assert R.fewest_blocks(wk_i, rep_i, 0, np.uint64(key), 1, 3, -1, 0) == 3


# ---- other routers' rules: llm-d's endpoint picker (llmd) and SGLang's cache-aware router (sglang)
# Three decode workers (aggregated: no prefill workers), 100 KV blocks each, block size 16, and a
# request of 640 tokens (40 whole blocks) of prefix group 0, all 40 of them shared prefix.
ISL, BS, PBLK = 640, 16, 40


def _routers_state(wp=3.0, wk=2.0, wq=2.0, cache=0.3, abs_t=64, rel_t=1.5):
    from poa_mc.kernels import layout as L

    wk_i = np.zeros((1, 3, NWI), dtype=np.int32)
    pc = np.zeros((1, 3, 2, 4), dtype=np.int32)  # one prefix group and a one-run ring
    rep_i = np.zeros((1, L.NRI), dtype=np.int64)
    ip = np.zeros(L.NP_I, dtype=np.int64)
    ip[L.P_NP], ip[L.P_ND], ip[L.P_DKV], ip[L.P_PKV], ip[L.P_B] = 0, 3, 100, 50, BS
    fp = np.zeros(L.NF_P, dtype=np.float64)
    fp[L.F_LLMD_WP], fp[L.F_LLMD_WK], fp[L.F_LLMD_WQ] = wp, wk, wq
    fp[L.F_SGL_CACHE], fp[L.F_SGL_ABS], fp[L.F_SGL_REL] = cache, abs_t, rel_t
    return wk_i, pc, rep_i, ip, fp


def _set_workers(wk_i, pc, told=(0, 0, 0), queued=(0, 0, 0), running=(0, 0, 0), used=(0, 0, 0), free=(0, 0, 0)):
    from poa_mc.kernels.layout import WI_FREE, WI_NRUN, WI_QN, WI_USED

    for w in range(3):
        pc[0, w, 0, 3] = told[w]  # the prefix blocks the router has been told w caches
        wk_i[0, w, WI_QN], wk_i[0, w, WI_NRUN] = queued[w], running[w]
        wk_i[0, w, WI_USED], wk_i[0, w, WI_FREE] = used[w], free[w]


def _choose(policy, wk_i, pc, rep_i, ip, fp, key=7):
    from poa_mc.kernels.layout import POLICY_ID

    return R.choose(
        POLICY_ID[policy], wk_i, pc, rep_i, 0, np.uint64(key), 0, 3, 0, PBLK, ISL, PBLK, BS, 1.0, 0.0, 2, 0, ip, fp
    )


def _llmd_example(**weights):
    wk_i, pc, rep_i, ip, fp = _routers_state(**weights)
    # worker:          0   1   2
    # told prefix:    30   0  10 blocks  -> prefix score 30/40 = 0.75, 0, 10/40 = 0.25
    # waiting:         4   0   2         -> queue score (4-4)/(4-0) = 0, (4-0)/4 = 1, (4-2)/4 = 0.5
    # held blocks: 90-10  70  40-20      -> KV usage 0.8, 0.7, 0.2: KV score 0.2, 0.3, 0.8
    _set_workers(wk_i, pc, told=(30, 0, 10), queued=(4, 0, 2), used=(90, 70, 40), free=(10, 0, 20))
    return wk_i, pc, rep_i, ip, fp


def test_llmd_scores_are_the_weighted_sum_of_its_three_normalised_scorers():
    wk_i, pc, rep_i, ip, fp = _llmd_example()
    # llm-d's default profile, prefix 3, KV utilisation 2, queue 2:
    want = (
        3 * 0.75 + 2 * 0.2 + 2 * 0.0,  # 2.65
        3 * 0.0 + 2 * 0.3 + 2 * 1.0,  # 2.6
        3 * 0.25 + 2 * 0.8 + 2 * 0.5,  # 3.35
    )
    got = [R.llmd_score(ip, fp, wk_i, pc, 0, w, 0, PBLK, ISL, BS, 0, 4) for w in range(3)]
    assert got == pytest.approx(want)
    assert _choose("llmd", wk_i, pc, rep_i, ip, fp) == 2


@pytest.mark.parametrize(
    "weights,winner",
    [
        (dict(wp=1.0, wk=0.0, wq=0.0), 0),  # the longest prefix (0.75)
        (dict(wp=0.0, wk=0.0, wq=1.0), 1),  # the shortest queue (score 1)
        (dict(wp=0.0, wk=1.0, wq=0.0), 2),  # the most free KV (0.8)
        (dict(wp=10.0, wk=2.0, wq=2.0), 0),  # 7.5 + 0.4 + 0 = 7.9 against 2.6 and 2.5 + 1.6 + 1 = 5.1
    ],
)
def test_llmd_weights_change_the_winner(weights, winner):
    wk_i, pc, rep_i, ip, fp = _llmd_example(**weights)
    for key in range(5):  # no tie: the same worker whatever the draws
        assert _choose("llmd", wk_i, pc, rep_i, ip, fp, key=key) == winner


def test_llmd_breaks_ties_at_random_among_the_highest_scores_only():
    wk_i, pc, rep_i, ip, fp = _routers_state(wp=0.0, wk=0.0, wq=1.0)
    # waiting 0, 3, 0: queue scores (3-0)/3 = 1, 0, 1: workers 0 and 2 tie at the top
    _set_workers(wk_i, pc, queued=(0, 3, 0))
    picks = [_choose("llmd", wk_i, pc, rep_i, ip, fp) for _ in range(400)]  # each decision draws anew
    counts = np.bincount(picks, minlength=3)
    assert counts[1] == 0
    assert 140 < counts[0] < 260 and counts[0] + counts[2] == 400  # about half each (200 +- 3 sd)
    # all equal: the queue scorer's neutral 1 everywhere, every worker drawn
    _set_workers(wk_i, pc, queued=(2, 2, 2))
    assert set(_choose("llmd", wk_i, pc, rep_i, ip, fp) for _ in range(200)) == {0, 1, 2}


@pytest.mark.parametrize("picker", ["random", "weighted_random"])
def test_llmds_random_pickers_pick_as_often_as_their_rule_says(picker):
    # the example's scores 2.65, 2.6, 3.35: llm-d's random-picker takes each worker a third of the
    # time whatever the scores, its weighted-random-picker in proportion to them (2.65 / 8.6, ...);
    # 6,000 decisions, each count within 4 binomial standard deviations of its expectation
    from poa_mc.kernels.layout import LLMD_PICK_RANDOM, LLMD_PICK_WEIGHTED, P_LLMD_PICK

    wk_i, pc, rep_i, ip, fp = _llmd_example()
    ip[P_LLMD_PICK] = LLMD_PICK_RANDOM if picker == "random" else LLMD_PICK_WEIGHTED
    n = 6000
    counts = np.bincount([_choose("llmd", wk_i, pc, rep_i, ip, fp) for _ in range(n)], minlength=3)
    scores = np.array([2.65, 2.6, 3.35])
    p = np.full(3, 1 / 3) if picker == "random" else scores / scores.sum()
    assert (np.abs(counts - n * p) <= 4 * np.sqrt(n * p * (1 - p))).all(), (counts, n * p)
    if picker == "weighted_random":  # no score above 0: uniform, as llm-d hands over to its random picker
        fp[:] = 0.0
        picks = np.bincount([_choose("llmd", wk_i, pc, rep_i, ip, fp) for _ in range(600)], minlength=3)
        assert (np.abs(picks - 200) <= 4 * np.sqrt(600 * 2 / 9)).all(), picks


def test_llmd_reads_a_prefill_workers_waiting_requests_and_its_pools_capacity():
    from poa_mc.kernels.layout import P_ND, P_NP, WI_FREE, WI_PASS_K, WI_QN, WI_USED

    wk_i, pc, rep_i, ip, fp = _routers_state()
    ip[P_NP], ip[P_ND] = 2, 1  # workers 0 and 1 prefill (50 blocks each), worker 2 decodes (100 blocks)
    wk_i[0, 0, WI_QN], wk_i[0, 0, WI_PASS_K] = 5, 2  # 5 queued, 2 of them in the current pass
    assert R.waiting_of(wk_i, 0, 0) == 3
    wk_i[0, 0, WI_USED], wk_i[0, 0, WI_FREE] = 30, 5
    wk_i[0, 2, WI_USED], wk_i[0, 2, WI_FREE] = 30, 5
    assert R.kv_usage(ip, wk_i, 0, 0) == pytest.approx(25 / 50)
    assert R.kv_usage(ip, wk_i, 0, 2) == pytest.approx(25 / 100)


def _sglang(loads, told, used, **thresholds):
    wk_i, pc, rep_i, ip, fp = _routers_state(**thresholds)
    # SGLang's load: requests queued plus running (split arbitrarily: only the sum counts)
    _set_workers(
        wk_i, pc, told=told, queued=tuple(x // 4 for x in loads), running=tuple(x - x // 4 for x in loads), used=used
    )
    return [_choose("sglang", wk_i, pc, rep_i, ip, fp, key=key) for key in range(6)]


def test_sglang_sends_to_the_shortest_queue_when_the_loads_are_imbalanced():
    # loads 70, 5, 23: 70 - 5 = 65 > 64 and 70 > 1.5 * 5: imbalanced, the least loaded despite
    # worker 0's 75% match
    assert _sglang((70, 5, 23), told=(30, 0, 10), used=(90, 70, 40)) == [1] * 6
    # two least loaded: the first of them, as Rust's min_by_key
    assert _sglang((70, 5, 5), told=(30, 0, 10), used=(90, 70, 40)) == [1] * 6


def test_sglang_balanced_and_a_match_above_the_threshold_goes_to_the_best_match():
    # 70 - 10 = 60 <= 64: balanced; match rates 30 * 16 / 640 = 0.75 > 0.3, 0, 0.25
    assert _sglang((70, 10, 23), told=(30, 0, 10), used=(90, 70, 40)) == [0] * 6
    # 200 - 135 = 65 > 64 but 200 <= 1.5 * 135 = 202.5: still balanced
    assert _sglang((200, 135, 150), told=(30, 0, 10), used=(90, 70, 40)) == [0] * 6


def test_sglang_balanced_and_no_good_match_goes_to_the_smallest_tree():
    # best match 5 blocks: 5 * 16 / 640 = 0.125 <= 0.3: the fewest cached blocks, worker 2's 40
    assert _sglang((70, 10, 23), told=(5, 0, 0), used=(90, 70, 40)) == [2] * 6
    # a rate equal to the threshold is not above it: 10 * 16 / 640 = 0.25 with cache_threshold 0.25
    assert _sglang((70, 10, 23), told=(10, 0, 0), used=(90, 70, 40), cache=0.25) == [2] * 6
    assert _sglang((70, 10, 23), told=(11, 0, 0), used=(90, 70, 40), cache=0.25) == [0] * 6
    # equal trees: ties at random
    wk_i, pc, rep_i, ip, fp = _routers_state()
    _set_workers(wk_i, pc, used=(40, 40, 40))
    assert set(_choose("sglang", wk_i, pc, rep_i, ip, fp) for _ in range(200)) == {0, 1, 2}


@pytest.mark.parametrize(
    "flow,topology", [("aggregated", "0P/3D"), ("decode_first", "1P/3D"), ("prefill_first", "3P/1D")]
)
def test_llmd_and_sglang_grids_simulate_on_the_cpu(flow, topology):
    """A tiny grid with both policies: every cell runs and every TTFT is finite."""
    from poa_mc.engine.engine import simulate
    from poa_mc.model.config import loads_grid

    grid = loads_grid(f"""
[run]
replicas = 2
requests = 60
warmup = 6
[workload]
isl = {{ dist = "uniform", low = 200, high = 1500 }}
osl = 16
prefix_groups = 3
prefix_ratio = 0.5
[cluster]
flow = "{flow}"
[grid]
topology = ["{topology}"]
concurrency = [12]
[[policy]]
name = "llm-d"
kind = "llmd"
[[policy]]
name = "llm-d-prefix"
kind = "llmd"
prefix_weight = 5.0
queue_weight = 1.0
kv_util_weight = 0.0
[[policy]]
name = "sglang"
kind = "sglang"
[[policy]]
name = "sglang-balance"
kind = "sglang"
balance_abs_threshold = 0
balance_rel_threshold = 1.0
""")
    for c in grid.cells():
        res = simulate(c.spec, replicas=2, requests=60, warmup=6, seed=4, stream=c.stream)
        ttft = np.asarray(res.samples["ttft_ms"])
        assert ttft.size == 2 * 60 and np.isfinite(ttft).all() and (ttft > 0).all(), c.label()


def test_llmd_and_sglang_on_the_cuda_target_equal_the_cpu():
    """Both policies compiled for the CUDA target (Numba's CUDA simulator) route as on the CPU
    (llmd with its weighted random picker, whose draws are the CPU's): one launch of their cells,
    each against the cell simulated alone on the CPU."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import numpy as np
        from tests.test_cell_batch import MIXED, _grid, _packed, _settings
        from poa_mc.engine import cell_batch
        from poa_mc.engine.engine import simulate
        text = MIXED.replace("rate = [2.0, 400.0]", "rate = [6.0]").replace("requests = 60", "requests = 16")
        text = text.replace("warmup = 10", "warmup = 4")
        text = text.replace('kind = "kv"', 'kind = "llmd"\\npicker = "weighted_random"')
        text = text.replace('kind = "round_robin"', 'kind = "sglang"\\nbalance_abs_threshold = 1')
        grid = _grid(text)
        poa, slo = _settings(grid)
        cells = [c for c in grid.cells() if c.spec.policy.kind in ("llmd", "sglang")]
        packed = [_packed(grid, c, poa, slo) for c in cells]
        got = cell_batch.simulate_cells(packed, replicas=2, backend="cuda")
        r = grid.run
        for cell, g in zip(cells, got):
            want = simulate(cell.spec, replicas=2, requests=r.requests, warmup=r.warmup_for(cell.concurrency),
                            seed=r.seed, stream=cell.stream)
            for k in want.samples:
                assert np.array_equal(g.samples[k], want.samples[k]), (cell.label(), k)
        print("EQUAL", len(cells), g.device)
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "EQUAL 4 cuda simulator" in out.stdout, out.stdout
