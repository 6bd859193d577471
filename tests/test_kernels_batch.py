"""The batch router's joint assignment (poa_mc/kernels/batch.py) against brute force."""

import itertools

import numpy as np
import pytest

from poa_mc.engine.engine import simulate
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NP_I, NRF, NSI, NWI, P_B, P_BATCH_N, P_ND, P_NP, P_Q, SI_ISL, WI_AB, WI_QN
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

B = cpu._K.batch
BS = 64


def _sequential_cost(ab: np.ndarray, pblk: list[int], worker: list[int]) -> float:
    """What a sequential router pays for this placement, each worker's requests in the best order
    (fewest blocks first): sum over requests of the worker's blocks when it is placed, its own
    included."""
    total = 0.0
    for w in range(len(ab)):
        load = float(ab[w])
        for b in sorted(p for p, x in zip(pblk, worker) if x == w):
            load += b
            total += load
    return total


def _assign(ab: list[int], pblk: list[int], n: int):
    k = len(ab)
    ip = np.zeros(NP_I, dtype=np.int64)
    ip[P_NP], ip[P_ND], ip[P_B], ip[P_BATCH_N], ip[P_Q] = 1, k, BS, n, 16
    slot_i = np.zeros((1, len(pblk), NSI), dtype=np.int32)
    slot_i[0, :, SI_ISL] = np.asarray(pblk) * BS
    wk_i = np.zeros((1, 1 + k + 1, NWI), dtype=np.int32)
    wk_i[0, 1 : 1 + k, WI_AB] = ab
    held = 1 + k
    wk_i[0, held, WI_QN] = len(pblk)
    queue = np.zeros((1, held + 2, 16), dtype=np.int32)
    queue[0, held, : len(pblk)] = np.arange(len(pblk))
    m = k * n
    rep_f = np.zeros((1, NRF + (n + 1) + 5 * (m + 1)))
    B.assign(ip, slot_i, wk_i, queue, rep_f, 0, held, len(pblk))
    pr = NRF + n + 1 + 2 * (m + 1)
    return [int(rep_f[0, pr + i]) - 1 for i in range(1, len(pblk) + 1)]


def test_assignment_is_the_brute_force_optimum():
    rng = np.random.default_rng(4)
    for _ in range(60):
        k = int(rng.integers(2, 4))
        rows = int(rng.integers(1, 6))
        ab = [int(x) for x in rng.integers(0, 20, size=k)]
        pblk = [int(x) for x in rng.integers(1, 9, size=rows)]
        got = _assign(ab, pblk, n=6)
        assert all(0 <= w < k for w in got)
        best = min(_sequential_cost(np.array(ab), pblk, list(c)) for c in itertools.product(range(k), repeat=rows))
        assert _sequential_cost(np.array(ab), pblk, got) == pytest.approx(best)


def test_a_hand_case():
    # workers holding 0 and 10 blocks; requests of 4, 1 and 2 blocks. All on worker 0 (in the
    # order 1, 2, 4) pays 1 + 3 + 7 = 11; the best split, {1, 2} there and {4} on worker 1, pays
    # 1 + 3 + 14 = 18: the optimum keeps all three on worker 0
    assert _assign([0, 10], [4, 1, 2], n=3) == [0, 0, 0]
    # with 2 blocks on worker 1 a split pays 10 < 11 (e.g. 1 + 3 + 6): one request moves there
    # (which one is a tie: a worker with one request pays its own blocks whichever it is)
    got = _assign([0, 2], [4, 1, 2], n=3)
    assert got.count(1) == 1 and _sequential_cost(np.array([0, 2]), [4, 1, 2], got) == 10


def _cell(policy: PolicySpec, flow: str = "prefill_first") -> CellSpec:
    return CellSpec(
        cluster=ClusterSpec(n_prefill=1, n_decode=3, flow=flow),
        workload=WorkloadSpec(isl=Dist("uniform", low=64, high=900), osl=Dist("fixed", 64), prefix_groups=4,
                              concurrency=24),
        policy=policy,
    )  # fmt: skip


def test_batch_router_holds_decisions_and_completes_every_request():
    kw = dict(replicas=3, requests=300, warmup=48, seed=3, stream=1)
    held = simulate(_cell(PolicySpec(kind="batch", batch_size=6, batch_ms=4.0)), **kw)
    assert np.all(held.replica["written"] == 300)
    # each decision waits at most batch_ms after the prefill ends, and batches share a time
    wait = held.candidates["decode_decided_ms"]
    assert np.unique(wait[0]).size < wait.shape[1]
    ttft = held.samples["ttft_ms"].mean()
    greedy = simulate(_cell(PolicySpec(kind="kv")), **kw).samples["ttft_ms"].mean()
    assert ttft > greedy  # the hold costs time on this workload (no congestion to save)


def test_batch_router_needs_prefill_first():
    with pytest.raises(SpecError) as err:
        simulate(_cell(PolicySpec(kind="batch"), flow="decode_first"), replicas=1, requests=10, warmup=0, seed=1,
                 stream=1)  # fmt: skip
    assert err.value.path == "policy.kind"
