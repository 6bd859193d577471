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
