"""Lower KV tiers (poa_mc/kernels/tiers.py): unit tests through the CPU build, then the engine's checks
(an exclusive G1 + G2 is one LRU of the summed capacity, request by request; blocks are conserved
after every event)."""

from dataclasses import replace

import numpy as np
import pytest

from poa_mc.engine.engine import simulate
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import (
    NPC_T,
    NRI,
    NWI,
    PC_B2,
    PC_B3,
    PC_B4,
    PC_FREQ,
    PC_N2,
    PC_N3,
    PC_N4,
    PC_S3,
    PC_S4,
    RI_STAMP,
    WI_A2N,
    WI_DECAY,
    WI_FREE,
    WI_G2CAP,
    WI_G2U,
    WI_G3CAP,
    WI_G3U,
    WI_G4CAP,
    WI_G4U,
    WI_LH2,
    WI_LH3,
    WI_LH4,
    WI_LINEAGE,
    WI_USED,
)
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

K = cpu._K
G = 4


def _arrays(g2=8, g3=8, ring=8, g4=0, workers=1):
    pc = np.zeros((1, workers, G + ring, NPC_T), dtype=np.int32)
    wk_i = np.zeros((1, workers + 1, NWI), dtype=np.int32)
    wk_i[0, :workers, WI_G2CAP] = g2
    wk_i[0, :workers, WI_G3CAP] = g3
    wk_i[0, :workers, WI_G4CAP] = g4
    rep_i = np.zeros((1, NRI), dtype=np.int64)
    ev = np.zeros((1, 8, 4))
    return pc, wk_i, rep_i, ev


def _acq(a, g, pfx, held, cap, now=0.0, w=0):
    pc, wk_i, rep_i, ev = a
    return K.cache.acquire(pc, wk_i, rep_i, ev, 0.0, now, 0, w, g, pfx, held, G, cap)


def _rel(a, g, pfx, held, keep=0, w=0):
    pc, wk_i, rep_i, _ = a
    return K.cache.release(pc, wk_i, rep_i, 0, w, g, pfx, held, keep, -1, G)


def _ok(a, cap, w=0):
    pc, wk_i, _, _ = a
    return K.tiers.conserved(pc, wk_i, 0, w, G, cap)


def test_g1_evictions_demote_to_g2_and_hits_come_back_up():
    a = _arrays(g2=8, g3=0)
    pc, wk_i = a[0], a[1]
    for g in (0, 1):  # two 4-block chains fill G1 (capacity 8)
        assert _acq(a, g, 4, 0, 8) == 0
        _rel(a, g, 4, 0)
    assert _acq(a, 2, 4, 0, 8) == 0  # group 0 (the oldest) goes down to G2
    assert list(pc[0, 0, :3, 0]) == [0, 4, 4] and pc[0, 0, 0, PC_N2] == 4 and wk_i[0, 0, WI_G2U] == 4
    assert _ok(a, 8)
    _rel(a, 2, 4, 0)
    # group 0 again: all 4 blocks hit, from G2; they move up (group 1, now the oldest, moves down)
    assert _acq(a, 0, 4, 0, 8) == 4
    assert wk_i[0, 0, WI_LH2] == 4 and wk_i[0, 0, WI_LH3] == 0
    assert pc[0, 0, 0, 0] == 4 and pc[0, 0, 0, PC_N2] == 0 and pc[0, 0, 1, PC_N2] == 4
    assert _ok(a, 8)


def test_a_prompt_hits_g1_then_g2_then_g3_in_order():
    a = _arrays(g2=2, g3=8)
    pc, wk_i = a[0], a[1]
    pc[0, 0, 0, 0], pc[0, 0, 0, PC_N2], pc[0, 0, 0, PC_N3] = 3, 2, 4
    pc[0, 0, 0, PC_B2], pc[0, 0, 0, PC_B3] = 3, 5  # where each segment starts in the chain
    pc[0, 0, 0, PC_FREQ] = 1
    wk_i[0, 0, WI_USED], wk_i[0, 0, WI_FREE], wk_i[0, 0, WI_G2U], wk_i[0, 0, WI_G3U] = 3, 3, 2, 4
    assert _ok(a, 16)
    # a 7-block prefix: 3 in G1, 2 in G2, 2 of the 4 in G3; the other 2 stay in G3 after it
    assert _acq(a, 0, 7, 0, 16) == 7
    assert (wk_i[0, 0, WI_LH2], wk_i[0, 0, WI_LH3]) == (2, 2)
    assert (pc[0, 0, 0, 0], pc[0, 0, 0, PC_N2], pc[0, 0, 0, PC_N3]) == (7, 0, 2)
    assert pc[0, 0, 0, PC_B3] == 7  # what is left of G3 starts after the new G1 blocks
    assert pc[0, 0, 0, PC_FREQ] == 2  # doubled by the hit
    assert _ok(a, 16)
    pc[0, 0, 0, PC_B3] = 6
    assert not _ok(a, 16), "a segment out of place is a broken state"


def test_only_chains_hit_twice_go_from_g2_to_g3():
    a = _arrays(g2=4, g3=8)
    pc = a[0]
    # group 0 is hit once more (frequency 2), group 1 is not (frequency 1)
    for g, uses in ((0, 2), (1, 1)):
        for _ in range(uses):
            _acq(a, g, 4, 0, 8)
            _rel(a, g, 4, 0)
    assert list(pc[0, 0, :2, PC_FREQ]) == [2, 1]
    # two more chains push groups 0 and 1 out of G1, then out of G2
    for g in (2, 3):
        _acq(a, g, 4, 0, 8)
        _rel(a, g, 4, 0)
    _acq(a, 0, 0, 8, 8)  # a request holding all 8 G1 blocks
    assert pc[0, 0, 0, PC_N3] == 4, "frequency 2: demoted to G3"
    assert pc[0, 0, 1, PC_N3] == 0 and pc[0, 0, 1, PC_N2] == 0, "frequency 1: dropped"
    assert _ok(a, 8)


def test_frequency_decays_one_per_step_never_below_one():
    a = _arrays(g2=4, g3=4)
    pc, wk_i = a[0], a[1]
    wk_i[0, 0, WI_DECAY] = 100  # 100 ms a step
    for _ in range(3):
        _acq(a, 0, 2, 0, 8, now=0.0)
        _rel(a, 0, 2, 0)
    assert pc[0, 0, 0, PC_FREQ] == 4  # 1, 2, 4
    assert K.tiers.frequency(pc, 0, 0, 0, np.int64(2)) == 2  # 200 ms later
    assert K.tiers.frequency(pc, 0, 0, 0, np.int64(9)) == 1


def test_unique_blocks_take_room_in_g2_but_never_reach_g3():
    a = _arrays(g2=4, g3=8)
    pc, wk_i = a[0], a[1]
    assert _acq(a, 0, 2, 2, 8) == 0
    _rel(a, 0, 2, 2, keep=2)  # its 2 unique blocks stay cached (a released run)
    _acq(a, 1, 0, 8, 8)  # evicts everything from G1: the run and the chain go to G2
    assert wk_i[0, 0, WI_G2U] == 4 and wk_i[0, 0, WI_A2N] == 1 and pc[0, 0, 0, PC_N2] == 2
    _rel(a, 1, 0, 8)  # frees all 8 blocks (nothing kept)
    _acq(a, 2, 4, 4, 8)
    _rel(a, 2, 4, 4, keep=4)
    _acq(a, 3, 0, 8, 8)  # G2 overflows: the oldest (request 0's run, then group 0's chain) leave
    assert wk_i[0, 0, WI_G3U] == 0, "frequency 1 everywhere: nothing reaches G3"
    assert _ok(a, 8)


def test_a_cut_off_segment_is_dropped_with_what_follows_it():
    a = _arrays(g2=2, g3=8)
    pc, wk_i = a[0], a[1]
    pc[0, 0, 0, 0], pc[0, 0, 0, PC_N2], pc[0, 0, 0, PC_N3] = 0, 2, 3
    pc[0, 0, 0, PC_FREQ] = pc[0, 0, 1, PC_FREQ] = 1
    wk_i[0, 0, WI_G2U], wk_i[0, 0, WI_G3U] = 2, 3
    # G2 needs both its blocks for another chain's demotion: group 0's G2 segment (frequency 1)
    # is dropped, and its G3 blocks after it can no longer be reached: they go too
    K.tiers.demote_chain(pc, wk_i, 0, 0, np.int64(1), np.int64(2), np.int64(5), G, np.int64(0))
    assert (pc[0, 0, 0, PC_N2], pc[0, 0, 0, PC_N3]) == (0, 0)
    assert pc[0, 0, 1, PC_N2] == 2 and wk_i[0, 0, WI_G3U] == 0
    assert _ok(a, 8)


def test_the_lineage_rule_evicts_released_runs_before_any_chain():
    for lineage, kept in ((0, [0, 2]), (1, [2, 2])):
        a = _arrays(g2=0, g3=0)
        pc, wk_i = a[0], a[1]
        wk_i[0, 0, WI_G2CAP] = 0  # G1 alone: the rule is the same inside every tier
        wk_i[0, 0, WI_LINEAGE] = lineage
        assert _acq(a, 0, 2, 0, 8) == 0
        _rel(a, 0, 2, 0)  # group 0's chain, the oldest
        assert _acq(a, 1, 2, 2, 8) == 0
        _rel(a, 1, 2, 2, keep=2)  # group 1's chain and a released run of 2 unique blocks
        _acq(a, 2, 0, 4, 8)  # 2 blocks short: LRU takes group 0's chain, lineage the released run
        assert list(pc[0, 0, :2, 0]) == kept, lineage


# ---- the engine ----------------------------------------------------------------------------

WL = WorkloadSpec(
    isl=Dist("fixed", 1024),
    osl=Dist("fixed", 16),
    prefix_ratio=0.5,
    prefix_groups=60,
    popularity="zipf",
    zipf_alpha=0.9,
    concurrency=2,
)
RUN = dict(replicas=3, requests=400, warmup=20, seed=3, stream=2, record_candidates=False)


def _cell(**cluster):
    c = ClusterSpec(n_prefill=1, n_decode=1, **cluster)
    return CellSpec(cluster=c, workload=WL, policy=PolicySpec())


def test_exclusive_two_tiers_are_one_lru_of_the_summed_capacity():
    # REFERENCE (docs/tiers.md): demote on evict + promote on hit = one LRU over G1 + G2. Copies
    # take no time (kv_bytes_per_token = 0), so every request must see the same hits and times.
    one = simulate(_cell(prefill_kv_blocks=240), **RUN)
    two = simulate(_cell(prefill_kv_blocks=80, g2_blocks=160), check_blocks=True, **RUN)
    hits = one.samples["cached_blocks"]
    assert 0.2 < hits.sum() / one.samples["prompt_blocks"].sum() < 0.5  # the capacity binds
    assert two.samples["cached_g2"].sum() > 0.2 * hits.sum()  # G2 serves a good part of them
    for k in ("cached_blocks", "ttft_ms", "e2e_ms", "group"):
        assert np.array_equal(one.samples[k], two.samples[k]), k
    # and a G1 of 80 alone hits less
    small = simulate(_cell(prefill_kv_blocks=80), **RUN)
    assert small.samples["cached_blocks"].sum() < 0.8 * hits.sum()


def test_tier_keys_written_as_zero_change_nothing():
    a = simulate(_cell(prefill_kv_blocks=80), **RUN)
    b = simulate(_cell(prefill_kv_blocks=80, g2_blocks=0, g3_blocks=0, g2_gbps=3.0, tier_decay_ms=0.0), **RUN)
    for k in a.samples:
        assert np.array_equal(a.samples[k], b.samples[k]), k
    assert (a.samples["cached_g2"] == 0).all() and (a.samples["onboard_ms"] == 0).all()


def test_three_tiers_conserve_blocks_and_time_their_copies():
    spec = _cell(prefill_kv_blocks=80, g2_blocks=60, g3_blocks=200, kv_bytes_per_token=163_840, tier_decay_ms=500.0)
    spec = replace(spec, workload=replace(WL, concurrency=6))
    res = simulate(spec, check_blocks=True, **RUN)
    s = res.samples
    assert s["cached_g2"].sum() > 0 and s["cached_g3"].sum() > 0
    assert ((s["cached_g2"] + s["cached_g3"]) <= s["cached_blocks"]).all()
    # a request with lower-tier hits waited for their copy: at least its own blocks over G2's
    # link (14 GB/s: 64 tokens x 163,840 bytes = 0.749 ms a block), G3's also over G3's (7 GB/s)
    copied = s["cached_g2"] + s["cached_g3"]
    block2 = 64 * 163_840 / 14e6
    block3 = 64 * 163_840 / 7e6
    low = np.maximum(copied * block2, s["cached_g3"] * block3)
    assert (s["onboard_ms"][copied > 0] >= low[copied > 0] - 1e-9).all()
    # a request without lower-tier hits of its own waits when it shares a pass with copies
    assert (s["onboard_ms"][copied == 0] > 0).any() and (s["onboard_ms"] >= 0).all()


def test_the_kv_router_credits_lower_tier_hits():
    # 2 prefill workers: with full credit the router sees G2 blocks as cached and sends more
    # requests where their prefix is; with zero credit for G2/G3 it sees only G1
    base = dict(prefill_kv_blocks=60, g2_blocks=200, g3_blocks=0)
    spec = replace(_cell(**base), cluster=ClusterSpec(n_prefill=2, n_decode=1, **base))
    spec = replace(spec, workload=replace(WL, concurrency=4))
    full = simulate(replace(spec, policy=PolicySpec(tier_credit=(1.0, 1.0, 1.0, 1.0))), **RUN)
    none = simulate(replace(spec, policy=PolicySpec(tier_credit=(1.0, 0.0, 0.0, 0.0))), **RUN)
    assert full.samples["cached_blocks"].sum() > none.samples["cached_blocks"].sum()


@pytest.mark.parametrize(
    "cluster,path",
    [
        (dict(g2_blocks=-1), "cluster.g2_blocks"),
        (dict(g2_blocks=10, g2_gbps=0.0), "cluster.g2_gbps"),
        (dict(g3_blocks=10), "cluster.g3_blocks"),
        (dict(g2_blocks=10, g4_blocks=10), "cluster.g4_blocks"),
        (dict(g2_blocks=10, g3_blocks=10, g4_blocks=10, g4_gbps=0.0), "cluster.g4_gbps"),
        (dict(g2_blocks=10, flow="aggregated"), "cluster.g2_blocks"),
        (dict(g2_blocks=10, tier_decay_ms=0.5), "cluster.tier_decay_ms"),
        (dict(tier_eviction="lfu"), "cluster.tier_eviction"),
        (dict(tier_eviction="lineage", flow="decode_first"), "cluster.tier_eviction"),
    ],
)
def test_bad_tier_keys_name_the_key(cluster, path):
    with pytest.raises(SpecError) as err:
        _cell(**cluster).validate()
    assert err.value.path == path


def test_tier_credit_without_tiers_changes_nothing():
    # so that one grid can set a policy's credits and still compare against G1 alone
    spec = _cell(prefill_kv_blocks=80)
    a = simulate(spec, **RUN)
    b = simulate(replace(spec, policy=PolicySpec(tier_credit=(1.0, 0.5, 0.25, 0.1))), **RUN)
    for k in a.samples:
        assert np.array_equal(a.samples[k], b.samples[k]), k


def test_the_router_credits_lower_tiers_only_past_the_g1_blocks_it_believes_in():
    pc, wk_i, _, _ = _arrays()
    pc[0, 0, 0, 0], pc[0, 0, 0, PC_N2], pc[0, 0, 0, PC_N3] = 4, 6, 3  # G1 4, then G2 6, then G3 3
    lb = K.tiers.lower_beyond
    assert lb(pc, wk_i, 0, 0, 0, np.int64(12), np.int64(4)) == (6, 2, 0)  # told of G1 as it is
    # not yet told that 6 blocks left G1 (it still believes in 10): those are not counted twice
    assert lb(pc, wk_i, 0, 0, 0, np.int64(12), np.int64(10)) == (0, 2, 0)
    assert lb(pc, wk_i, 0, 0, 0, np.int64(12), np.int64(2)) == (6, 2, 0)  # not yet told of G1's growth
    # with G4 holding blocks 10..15 of the chain: the part past G3's end (13) and within the prompt
    wk_i[0, 0, WI_G4CAP] = 100
    pc[0, 0, 0, PC_B4], pc[0, 0, 0, PC_N4] = 10, 6
    assert lb(pc, wk_i, 0, 0, 0, np.int64(15), np.int64(4)) == (6, 3, 2)
    assert lb(pc, wk_i, 0, 0, 0, np.int64(15), np.int64(14)) == (0, 0, 1)


def test_blocks_are_conserved_over_random_configurations():
    # capacities, decay, skew, policies and copy times drawn at random; check_blocks fails a replica
    # at the first event after which a tier's blocks and counters disagree (a fixed seed: the same
    # 40 configurations every run)
    rng = np.random.default_rng(7)
    for k in range(40):
        c = ClusterSpec(
            n_prefill=int(rng.integers(1, 4)), n_decode=2, prefill_kv_blocks=int(rng.integers(30, 120)),
            g2_blocks=int(rng.integers(1, 80)), g3_blocks=int(rng.choice([0, int(rng.integers(1, 200))])),
            tier_decay_ms=float(rng.choice([0.0, 5.0, 50.0])), kv_bytes_per_token=float(rng.choice([0.0, 2e5])),
            kv_event_delay_ms=float(rng.choice([0.0, 5.0])),
        )  # fmt: skip
        if c.g3_blocks and k % 2:  # every other configuration with G3 also has a G4
            c = replace(c, g4_blocks=int(rng.integers(1, 300)))
        w = replace(
            WL, isl=Dist("uniform", low=64, high=1800), osl=Dist("fixed", 20), prefix_groups=int(rng.integers(1, 30)),
            prefix_ratio=float(rng.uniform(0, 1)), concurrency=int(rng.integers(1, 12)),
        )  # fmt: skip
        pol = PolicySpec(kind=str(rng.choice(["kv", "round_robin", "hash"])), temperature=float(rng.choice([0.0, 0.5])))
        simulate(CellSpec(cluster=c, workload=w, policy=pol), replicas=4, requests=200, warmup=10, seed=k, stream=3,
                 check_blocks=True)  # fmt: skip


def test_the_lineage_rule_keeps_more_prefixes_than_lru_when_unique_blocks_crowd_them():
    lru = simulate(_cell(prefill_kv_blocks=240), **RUN)
    lineage = simulate(_cell(prefill_kv_blocks=240, tier_eviction="lineage"), check_blocks=True, **RUN)
    tiered = simulate(_cell(prefill_kv_blocks=80, g2_blocks=160, tier_eviction="lineage"), check_blocks=True, **RUN)
    rate = {k: r.samples["cached_blocks"].sum() / r.samples["prompt_blocks"].sum() for k, r in
            (("lru", lru), ("lineage", lineage), ("tiered", tiered))}  # fmt: skip
    # nothing ever hits a released run of unique blocks: evicting them first leaves more chains
    assert rate["lineage"] > 1.2 * rate["lru"] and rate["tiered"] > 1.2 * rate["lru"]


# ---- G4: the replica's remote store, shared by its prefill workers --------------------------


def test_what_g3_lets_go_of_goes_to_g4_where_any_worker_finds_it():
    a = _arrays(g2=4, g3=4, g4=20, workers=2)
    pc, wk_i = a[0], a[1]
    # worker 1 holds chain 0's blocks 0..3 in G3 (none in G1 or G2)
    pc[0, 1, 0, PC_N3], pc[0, 1, 0, PC_B3], pc[0, 1, 0, PC_S3], pc[0, 1, 0, PC_FREQ] = 4, 0, 5, 2
    wk_i[0, 1, WI_G3U] = 4
    a[2][0, RI_STAMP] = 5  # the replica's LRU clock, which stamped that segment
    assert _ok(a, 16, w=0) and _ok(a, 16, w=1)
    K.tiers.g3_room(pc, wk_i, 0, 1, G, 2)  # G3 needs room for 2: chain 0's tail (blocks 2, 3) goes to G4
    assert (pc[0, 1, 0, PC_N3], pc[0, 0, 0, PC_B4], pc[0, 0, 0, PC_N4], pc[0, 0, 0, PC_S4]) == (2, 2, 2, 5)
    K.tiers.drop_g3(pc, wk_i, 0, 1, 0, G)  # the rest (blocks 0, 1) joins them: G4 holds 0..3
    assert (pc[0, 0, 0, PC_B4], pc[0, 0, 0, PC_N4], wk_i[0, 0, WI_G4U]) == (0, 4, 4)
    assert _ok(a, 16, w=0) and _ok(a, 16, w=1)
    # worker 0 never held chain 0: a 6-block prefix finds its first 4 blocks in G4, which keeps them
    assert _acq(a, 0, 6, 0, 16, w=0) == 4
    assert (wk_i[0, 0, WI_LH2], wk_i[0, 0, WI_LH3], wk_i[0, 0, WI_LH4]) == (0, 0, 4)
    assert pc[0, 0, 0, 0] == 6 and pc[0, 0, 0, PC_N4] == 4 and wk_i[0, 0, WI_G4U] == 4
    assert pc[0, 0, 0, PC_S4] > 5, "the hit makes them G4's newest"
    assert _ok(a, 16, w=0)
    # a prompt its own tiers serve up to block 2 continues into G4 from there
    _rel(a, 0, 6, 0, w=0)
    pc[0, 1, 0, 0], pc[0, 1, 0, PC_FREQ] = 2, 1
    wk_i[0, 1, WI_USED] = wk_i[0, 1, WI_FREE] = 2
    assert _acq(a, 0, 5, 0, 16, w=1) == 4 and wk_i[0, 1, WI_LH4] == 2


def test_g4_keeps_one_segment_a_chain_nearest_its_head_and_evicts_the_oldest():
    a = _arrays(g4=6)
    pc, wk_i = a[0], a[1]

    def put(g, first, n, stamp):
        K.tiers.g4_put(pc, wk_i, 0, 0, G, g, first, n, stamp)
        return pc[0, 0, g, PC_B4], pc[0, 0, g, PC_N4], pc[0, 0, g, PC_S4]

    assert put(0, 4, 2, 1) == (4, 2, 1)  # blocks 4, 5 of chain 0
    assert put(0, 8, 2, 2) == (4, 2, 1), "beyond a gap: not kept"
    assert put(0, 0, 2, 3) == (0, 2, 3), "nearer the head: instead"
    assert put(0, 2, 2, 1) == (0, 4, 3), "touching: merged, the newer stamp kept"
    assert put(0, 1, 2, 9) == (0, 4, 9), "already held: nothing added"
    assert wk_i[0, 0, WI_G4U] == 4
    put(1, 0, 4, 4)  # 8 blocks in a G4 of 6: the oldest segment (chain 1, stamp 4) loses its tail
    assert (pc[0, 0, 0, PC_N4], pc[0, 0, 1, PC_N4], wk_i[0, 0, WI_G4U]) == (4, 2, 6)
    assert _ok(a, 16)
    wk_i[0, 0, WI_G4U] = 5
    assert not _ok(a, 16), "a counter that disagrees is a broken state"


def test_g4_serves_the_chains_every_worker_let_go_of_and_its_copies_are_timed():
    base = dict(prefill_kv_blocks=40, g2_blocks=20, g3_blocks=30, kv_bytes_per_token=163_840)
    # two prefill workers taking turns: a chain one of them let go of is found in G4 by either
    spec = CellSpec(
        cluster=ClusterSpec(n_prefill=2, n_decode=1, **base), workload=replace(WL, concurrency=4),
        policy=PolicySpec(kind="round_robin"),
    )  # fmt: skip
    without = simulate(spec, **RUN)
    res = simulate(replace(spec, cluster=replace(spec.cluster, g4_blocks=400, g4_gbps=2.0)), check_blocks=True, **RUN)
    s = res.samples
    assert (without.samples["cached_g4"] == 0).all()
    assert s["cached_g4"].sum() > 0.1 * s["cached_blocks"].sum()
    assert s["cached_blocks"].sum() > 1.2 * without.samples["cached_blocks"].sum()
    # G4's copies cross its own link (2 GB/s: 64 tokens x 163,840 bytes = 5.24 ms a block), then G2's
    copied = s["cached_g2"] + s["cached_g3"] + s["cached_g4"]
    per_block = {k: 64 * 163_840 / (gbps * 1e6) for k, gbps in (("g2", 14.0), ("g3", 7.0), ("g4", 2.0))}
    low = np.maximum.reduce(
        [copied * per_block["g2"], s["cached_g3"] * per_block["g3"], s["cached_g4"] * per_block["g4"]]
    )
    assert (s["onboard_ms"][copied > 0] >= low[copied > 0] - 1e-9).all()


def test_g4_keys_written_as_zero_change_nothing():
    spec = _cell(prefill_kv_blocks=80, g2_blocks=60, g3_blocks=200, kv_bytes_per_token=163_840)
    a = simulate(spec, **RUN)
    b = simulate(replace(spec, cluster=replace(spec.cluster, g4_blocks=0, g4_gbps=3.0)), **RUN)
    for k in a.samples:
        assert np.array_equal(a.samples[k], b.samples[k]), k


def test_a_pooled_cache_with_tiers_is_one_lru_of_the_pools_summed_capacity():
    """The caching game's pooled cache (`cache = "global"`) with lower tiers: the pool's G1 and G2
    are every prefill worker's together, and an exclusive G1 + G2 pool behaves request by request
    as one pooled G1 of the summed capacity (copies instant), blocks conserved after every event."""

    def pooled(**cluster):
        c = ClusterSpec(n_prefill=2, n_decode=1, **cluster)
        return CellSpec(cluster=c, workload=WL, policy=PolicySpec(cache="global"))

    one = simulate(pooled(prefill_kv_blocks=120), **RUN)  # a pool of 240 blocks
    two = simulate(pooled(prefill_kv_blocks=40, g2_blocks=80), check_blocks=True, **RUN)  # 80 + 160
    hits = one.samples["cached_blocks"]
    assert 0.2 < hits.sum() / one.samples["prompt_blocks"].sum() < 0.6  # the capacity binds
    assert two.samples["cached_g2"].sum() > 0.2 * hits.sum()
    for k in ("cached_blocks", "ttft_ms", "e2e_ms", "group", "prefill_worker"):
        assert np.array_equal(one.samples[k], two.samples[k]), k
    assert (two.replica["status"] == 0).all()
