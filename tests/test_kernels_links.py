"""poa_mc/kernels/links.py and ClusterSpec.nodes: workers on nodes, transfers sharing a node's link."""

from __future__ import annotations

import numpy as np
import pytest

from poa_mc.engine.engine import simulate
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import (
    F_NIC_GBPS,
    F_XFER_LAT,
    NF_P,
    NP_I,
    NRF,
    NRI,
    NSF,
    NSI,
    P_LINK_F,
    P_S,
    RF_LINK,
    RI_SEQ,
    SF_READY,
    SF_REM,
    SF_XFER,
    SI_LINK,
)  # fmt: skip
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

K = cpu._K.links


def test_the_paper_placements_on_hgx_b200_nodes():
    """Three nodes of 8 GPUs, TP4 workers two to a node, prefill first: in 1P/5D the prefill worker
    shares node 0 with one decode worker and the four others sit on nodes 1 and 2; in 1P/2D one
    decode worker is beside it, one across. TP8 workers take a node each."""
    tp4 = dict(gpus_per_node=8, gpus_per_worker=4, kv_bytes_per_token=327680.0)
    assert ClusterSpec(n_prefill=1, n_decode=5, **tp4).nodes() == (0, 0, 1, 1, 2, 2)
    assert ClusterSpec(n_prefill=1, n_decode=2, **tp4).nodes() == (0, 0, 1)
    assert ClusterSpec(n_prefill=1, n_decode=2, **{**tp4, "gpus_per_worker": 8}).nodes() == (0, 1, 2)
    assert ClusterSpec(n_prefill=1, n_decode=2, gpus_per_node=8, gpus_per_worker=3, kv_bytes_per_token=1.0).nodes() == (
        0,
        0,
        1,
    )  # fmt: skip  (a worker does not straddle two nodes)
    assert ClusterSpec().nodes() == ()


def _link_state(slots: int):
    ip = np.zeros(NP_I, dtype=np.int64)
    ip[P_S] = slots
    fp = np.zeros(NF_P)
    fp[F_NIC_GBPS] = 1.0  # 1e6 bytes per ms
    fp[F_XFER_LAT] = 0.5
    slot_i = np.zeros((1, slots, NSI), dtype=np.int32)
    slot_f = np.zeros((1, slots, NSF))
    rep_f = np.zeros((1, NRF + 2))
    ip[P_LINK_F] = NRF  # the links' clocks after the replica's fields
    rep_i = np.zeros((1, NRI), dtype=np.int64)
    rep_i[0, RI_SEQ] = 1  # measuring from t = 0 (the first measured arrival, rep_f's RF_FIRST_ARR = 0)
    return ip, fp, slot_i, slot_f, rep_i, rep_f


def test_two_transfers_share_a_link_fairly():
    """A (1e7 bytes) joins link 0 at 0: alone, done at 10 ms (+0.5 latency). B (2e6 bytes) joins
    at 5: A has 5e6 left, each now moves at half the link: B finishes 4 ms later (9), A then has
    3e6 left alone (12)."""
    ip, fp, slot_i, slot_f, rep_i, rep_f = _link_state(3)
    slot_f[0, :, SF_XFER] = [0.0, 5.0, 9.5]  # when each one's reads are posted: it joins then
    assert K.start(ip, fp, slot_i, slot_f, rep_i, rep_f, 0, 0, 0, 0.0, 1e7) == pytest.approx(10.5)
    assert K.start(ip, fp, slot_i, slot_f, rep_i, rep_f, 0, 1, 0, 5.0, 2e6) == pytest.approx(9.5)
    assert slot_f[0, 0, SF_READY] == pytest.approx(12.5)  # A's ready time moved on
    assert slot_f[0, 0, SF_REM] == pytest.approx(5e6) and rep_f[0, NRF] == 5.0
    # B's decode worker takes it over at 9.5: the link advances, B leaves, A has 2e6 left at 9.5
    # minus what it moved alone since 9 (0.5e6)
    K.done(ip, fp, slot_i, slot_f, rep_i, rep_f, 0, 1, 9.5)
    assert slot_i[0, 1, SI_LINK] == 0 and slot_f[0, 0, SF_REM] == pytest.approx(2.5e6)
    # a third transfer on another link does not slow A
    assert K.start(ip, fp, slot_i, slot_f, rep_i, rep_f, 0, 2, 1, 9.5, 1e6) == pytest.approx(11.0)
    assert slot_f[0, 0, SF_READY] == pytest.approx(12.5)
    assert rep_f[0, RF_LINK] == pytest.approx(9.5)  # link 0 carried a transfer from 0 to 9.5 so far


def test_transfers_reserved_in_one_instant_join_in_the_order_of_their_posting():
    """At 20 ms two decode workers reserve: C (1e6 bytes) first, its reads posted by 20.8, then D
    (1e6 bytes) posted by 20.2. D moves alone from 20.2 (0.6e6 by 20.8), then both at half the
    link: D done at 21.6, C alone after it: 22.2 (+0.5 latency each)."""
    ip, fp, slot_i, slot_f, rep_i, rep_f = _link_state(2)
    slot_f[0, :, SF_XFER] = [20.8, 20.2]
    rep_f[0, NRF] = 20.0  # the link's clock: now
    K.start(ip, fp, slot_i, slot_f, rep_i, rep_f, 0, 0, 0, 20.0, 1e6)
    assert K.start(ip, fp, slot_i, slot_f, rep_i, rep_f, 0, 1, 0, 20.0, 1e6) == pytest.approx(22.1)
    assert slot_f[0, 0, SF_READY] == pytest.approx(22.7)
    K.done(ip, fp, slot_i, slot_f, rep_i, rep_f, 0, 1, 22.1)  # the link at 22.1: C has 0.1e6 left
    assert slot_f[0, 0, SF_REM] == pytest.approx(0.1e6) and slot_f[0, 1, SF_REM] == 0.0


def _cell(nodes: bool, nic_gbps: float = 1.0) -> CellSpec:
    """2P/2D, 2 GPUs a worker, 4 a node: both prefill workers on node 0, both decode workers on
    node 1. Two clients, round robin: their prefills run side by side (0-10 ms) and both
    transfers (100 tokens x 1e5 bytes) leave node 0 at 10 ms."""
    return CellSpec(
        cluster=ClusterSpec(
            n_prefill=2, n_decode=2, flow="prefill_first", block_size=16, kv_bytes_per_token=1e5, transfer_gbps=100.0,
            gpus_per_node=4 if nodes else 0, gpus_per_worker=2, node_nic_gbps=nic_gbps,
        ),
        workload=WorkloadSpec(
            isl=Dist("fixed", 100), osl=Dist("fixed", 2), concurrency=2, prefix_ratio=0.0, prefix_groups=1
        ),
        profile=ProfileSpec(kind="deterministic", prefill_ms=10.0, decode_ms=4.0),
        policy=PolicySpec(kind="round_robin"),
    )  # fmt: skip


def test_transfers_across_nodes_share_the_prefill_nodes_link_in_a_run():
    """Without nodes each transfer takes 0.1 ms (NVLink, 100 GB/s): first tokens at 14.1. Across
    nodes on a 1 GB/s link each alone would take 10 ms; together, 20: first tokens at 34."""
    run = dict(replicas=1, requests=2, warmup=0, seed=1, stream=0, drain=True)
    np.testing.assert_allclose(simulate(_cell(False), **run).samples["ttft_ms"][0], [14.1, 14.1])
    shared = simulate(_cell(True), **run).samples
    np.testing.assert_allclose(shared["ttft_ms"][0], [34.0, 34.0])
    np.testing.assert_allclose(shared["transfer_ms"][0], [20.0, 20.0])  # each moved at half the link
    # a fast link: the same two transfers take 0.2 ms together
    np.testing.assert_allclose(simulate(_cell(True, 100.0), **run).samples["ttft_ms"][0], [14.2, 14.2])


@pytest.mark.parametrize(
    "kw,key",
    [
        (dict(gpus_per_node=-1), "cluster.gpus_per_node"),
        (dict(gpus_per_node=8, gpus_per_worker=9, kv_bytes_per_token=1.0), "cluster.gpus_per_worker"),
        (dict(gpus_per_node=8, node_nic_gbps=0.0, kv_bytes_per_token=1.0), "cluster.node_nic_gbps"),
        (dict(gpus_per_node=8), "cluster.kv_bytes_per_token"),
        (dict(gpus_per_node=8, flow="decode_first", kv_bytes_per_token=1.0), "cluster.gpus_per_node"),
    ],
)
def test_bad_node_keys_are_named(kw, key):
    with pytest.raises(SpecError, match=key):
        ClusterSpec(**kw).validate()
