"""Dynamo-replay semantics the engine follows beyond the ample-memory regime (docs/engine.md):
decode preemption under KV pressure, the KV-transfer handshake, the decode choice at temperature,
and the aggregated worker's prefix lookup at admission. Each is pinned on a small case whose
timeline is worked out by hand in the comments, on the deterministic profile (fixed prefill and
decode-step times) so that every time is exact."""

import math

import numpy as np
import pytest

from poa_mc.engine.engine import EngineError, simulate
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NRI, NWI, RI_DECIDE, WI_AB
from poa_mc.model.profiles import resolve_profile
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

DET = ProfileSpec(name="det", kind="deterministic", prefill_ms=10.0, decode_ms=1.0)


def _cell(*, n_d=1, c=2, isl=64, osl=200, ratio=0.0, groups=1, flow="prefill_first", profile=DET, **cluster):
    return CellSpec(
        cluster=ClusterSpec(n_prefill=1, n_decode=n_d, flow=flow, **cluster),
        workload=WorkloadSpec(
            isl=Dist("fixed", isl), osl=Dist("fixed", osl), prefix_groups=groups, prefix_ratio=ratio, concurrency=c
        ),
        profile=profile,
        policy=PolicySpec(kind="kv"),
    )


def _run(spec, requests=2, replicas=1, **kw):
    return simulate(spec, replicas=replicas, requests=requests, warmup=0, seed=3, stream=0, **kw)


def test_decode_preemption_timeline_under_kv_pressure():
    # 1P/1D, 6 decode blocks of 64 tokens, two 64-token prompts with 200 output tokens each.
    # A: prefill 0-10, its blocks are reserved at 10, first token at 11; step k ends at 10 + k and
    #    computes context 63 + k, so it needs ceil((63 + k) / 64) blocks: 3 from k = 66, 4 from 130.
    # B: prefill 10-20, joins at 20 (a step boundary of A), step k' ends at 20 + k'.
    # At t = 139 A's step 130 needs a 4th block while B holds 3: no block is free, so the newest
    # (B, after 119 tokens) is preempted; its 2 full computed blocks stay cached. A runs alone and
    # at its step 194 (t = 203) takes a 5th block by evicting one of B's. A ends at 210; then B is
    # readmitted, hits what is left of its own blocks, recomputes the rest in one pass (1 ms: a
    # disaggregated decode worker charges no prefill time) that emits its token 120, and its last
    # 80 tokens end at 291.
    res = _run(_cell(decode_kv_blocks=6))
    s = res.samples
    np.testing.assert_allclose(s["ttft_ms"][0], [11.0, 21.0], atol=1e-9)
    np.testing.assert_allclose(s["e2e_ms"][0], [210.0, 291.0], atol=1e-9)
    assert res.replica["preemptions"][0] >= 1
    # with ample memory nothing is preempted and B ends 200 steps after its first token
    roomy = _run(_cell(decode_kv_blocks=64))
    np.testing.assert_allclose(roomy.samples["e2e_ms"][0], [210.0, 220.0], atol=1e-9)
    assert roomy.replica["preemptions"][0] == 0


def test_decode_admission_takes_the_prompt_blocks_only():
    # 5 blocks hold two 64-token prompts at once (1 block each) although isl + osl needs 4 blocks:
    # B starts at 20, not after A ends (the old rule reserved isl + osl blocks at admission)
    res = _run(_cell(osl=160, decode_kv_blocks=5))
    assert res.samples["ttft_ms"][0][1] == pytest.approx(21.0)


def test_preempted_requests_complete_exactly_once_and_blocks_never_overflow():
    spec = _cell(n_d=2, c=24, isl=300, osl=150, ratio=0.4, groups=3, decode_kv_blocks=30, profile=ProfileSpec())
    res = _run(spec, requests=200, replicas=4)
    assert res.replica["preemptions"].sum() > 20  # the regime is really under pressure
    assert (res.replica["written"] == 200).all()  # every measured request completed once
    s = res.samples
    np.testing.assert_allclose(s["ttft_ms"] + (s["osl"] - 1) * s["itl_ms"], s["e2e_ms"], rtol=1e-9)
    assert (s["ttft_ms"] > 0).all()


def _fast_and_naive(flow, profile, c, requests, **cluster):
    """A cell of mixed prompt and output lengths (two prefix groups, 1P/2D) run with the closed-form
    decode and step by step (naive_decode); asserts that they agree and returns the first run."""
    base = _cell(n_d=2, c=c, flow=flow, **cluster)
    spec = CellSpec(
        cluster=base.cluster,
        workload=WorkloadSpec(
            isl=Dist("uniform", low=40, high=400),
            osl=Dist("uniform", low=1, high=150),
            prefix_groups=2,
            prefix_ratio=0.5,
            concurrency=c,
        ),  # fmt: skip
        profile=profile,
        policy=base.policy,
    )
    fast = _run(spec, requests=requests, replicas=3)
    naive = _run(spec, requests=requests, replicas=3, naive_decode=True)
    np.testing.assert_array_equal(fast.replica["preemptions"], naive.replica["preemptions"])
    for k in ("ttft_ms", "e2e_ms", "itl_ms", "arrival_ms"):
        np.testing.assert_allclose(fast.samples[k], naive.samples[k], rtol=1e-9, atol=1e-9)
    return fast


@pytest.mark.parametrize("flow", ["prefill_first", "decode_first", "aggregated"])
def test_closed_form_decode_equals_step_by_step_under_preemption(flow):
    fast = _fast_and_naive(flow, ProfileSpec(), 16, 120, decode_kv_blocks=24)
    assert fast.replica["preemptions"].sum() > 0


@pytest.mark.parametrize("flow", ["prefill_first", "decode_first", "aggregated"])
@pytest.mark.parametrize("profile", ["dynamo-mocker", "aic-b200-llama70b-fp8-tp4-vllm"])
@pytest.mark.parametrize("decode_kv_blocks", [24, 0])
def test_passes_planned_from_decode_ends_sums_equal_step_by_step(flow, profile, decode_kv_blocks):
    """decode_end leaves the running set's sums for the next plan_decode, which then scans only
    what it admitted (poa_mc/kernels/decode.py, WI_AGG_*); step by step (naive_decode) every pass scans
    the whole set. A sum off by one token moves a step's time by far more than the tolerance.
    Under KV pressure (preemptions) and with ample memory, in every flow, on the polynomial and on
    a table."""
    cluster = {"decode_kv_blocks": decode_kv_blocks} if decode_kv_blocks else {}
    fast = _fast_and_naive(flow, resolve_profile({"name": profile}), 24, 150, **cluster)
    if decode_kv_blocks:
        assert fast.replica["preemptions"].sum() > 0  # a preempting pass does not take the sums


def test_kv_transfer_starts_at_the_decode_workers_next_pass_boundary():
    # 1P/1D, prefill 10.5 ms, decode step 1 ms, transfer 5.2 ms (a fixed latency).
    # A: prefill ends at 10.5 on an idle decode worker: reserved at once, KV there at 15.7,
    #    admitted then, first token 16.7; its steps end at 15.7 + k.
    # B: prefill ends at 21.0 while A steps: the reservation (and the transfer) waits for A's next
    #    step boundary, 21.7; the KV arrives at 26.9 and B joins at the next boundary, 27.7; first
    #    token 28.7. Starting the transfer at 21.0 would give 27.7.
    prof = ProfileSpec(name="det", kind="deterministic", prefill_ms=10.5, decode_ms=1.0)
    res = _run(_cell(osl=30, profile=prof, transfer_latency_ms=5.2))
    np.testing.assert_allclose(res.samples["ttft_ms"][0], [16.7, 28.7], atol=1e-9)
    assert res.samples["decode_wait_ms"][0][1] == pytest.approx(0.8)


def test_aggregated_worker_looks_prefixes_up_at_admission():
    # four requests of one group arrive together at an aggregated worker: the first admitted
    # stores the prefix (1024 of 2048 tokens, 16 blocks) and the three admitted with it hit it
    spec = _cell(flow="aggregated", c=4, isl=2048, ratio=0.5, groups=1, profile=ProfileSpec(), osl=8)
    res = _run(spec, requests=4)
    assert sorted(res.samples["cached_blocks"][0]) == [0, 16, 16, 16]


def test_decode_choice_at_temperature_follows_dynamos_softmax():
    K = cpu._K
    wk_i = np.zeros((1, 4, NWI), dtype=np.int32)
    wk_i[0, 1:4, WI_AB] = [0, 10, 20]  # decode workers 1..3 (worker 0 prefills)
    rep_i = np.zeros((1, NRI), dtype=np.int64)
    pc = np.zeros((1, 4, 1, 4), dtype=np.int32)  # no prefix is read at overlap weight 0
    key = K.rng.replica_key(1, 2, 3)  # the type the kernels pass
    n = 20_000
    picks = np.array([K.router.sample_blocks(wk_i, pc, rep_i, 0, key, 1, 3, 0, 0, 1.0) for _ in range(n)])
    assert rep_i[0, RI_DECIDE] == n  # each decision draws from its own sub-stream
    w = np.exp(-np.array([0.0, 10.0, 20.0]) / (20.0 * 1.0))
    p = w / w.sum()  # docs/sources.md, "Router cost and temperature": exp(-(c - cmin) / ((cmax - cmin) tau))
    freq = np.bincount(picks - 1, minlength=3) / n
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n)), (freq, p)
    # equal costs: uniform; the engine keeps the argmin (fewest_blocks) at tau = 0
    wk_i[0, 1:4, WI_AB] = 7
    eq = np.array([K.router.sample_blocks(wk_i, pc, rep_i, 0, key, 1, 3, 0, 0, 0.5) for _ in range(3000)])
    assert set(np.unique(eq)) == {1, 2, 3}


def test_decode_temperature_spreads_requests_over_decode_workers():
    base = _cell(n_d=3, c=12, isl=512, osl=40, profile=ProfileSpec())
    hot = CellSpec(cluster=base.cluster, workload=base.workload, profile=base.profile,
                   policy=PolicySpec(kind="kv", temperature=1.0))  # fmt: skip
    cold = _run(base, requests=300, replicas=2)
    warm = _run(hot, requests=300, replicas=2)
    assert not np.array_equal(cold.samples["decode_worker"], warm.samples["decode_worker"])
    # identical requests (common random numbers): only the decode placement differs
    np.testing.assert_array_equal(cold.samples["isl"], warm.samples["isl"])
    assert math.isfinite(warm.samples["ttft_ms"].mean())


def test_a_fully_cached_prompt_still_prefills_its_last_block():
    # vLLM's rule (and Dynamo's simulator's): a prefix hit stops at isl - 1 tokens in whole blocks.
    # One client, 128-token prompts of one fully shared template (2 blocks): from the second
    # request on, 1 block hits and the pass computes the last 64 tokens:
    # prefill(64) = 4.209989e-7 * 64^2 + 1.518344e-2 * 64 + 16.50142 = 17.4749 ms, then the first
    # decode step at u = 128 / (16384 * 64).
    spec = _cell(n_d=1, c=1, isl=128, osl=4, ratio=1.0, groups=1, profile=ProfileSpec())
    res = _run(spec, requests=5)
    prefill64 = 4.209989e-7 * 64**2 + 1.518344e-2 * 64 + 16.50142
    u = 128 / (16384 * 64)
    step = -25.74 * u * u + 54.01 * u + 5.74
    assert list(res.samples["cached_blocks"][0]) == [0, 1, 1, 1, 1]
    np.testing.assert_allclose(res.samples["ttft_ms"][0][1:], prefill64 + step, rtol=1e-12)
    # recompute_last_block = false counts the whole prompt as cached: no prefill time at all
    whole = CellSpec(
        cluster=ClusterSpec(n_prefill=1, n_decode=1, recompute_last_block=False),
        workload=spec.workload,
        profile=spec.profile,
        policy=spec.policy,
    )
    res = _run(whole, requests=5)
    assert list(res.samples["cached_blocks"][0]) == [0, 2, 2, 2, 2]
    np.testing.assert_allclose(res.samples["ttft_ms"][0][1:], step, rtol=1e-12)


def test_drain_ends_the_run_with_the_measured_requests():
    spec = _cell(n_d=2, c=8, isl=256, osl=20, ratio=0.5, groups=2, profile=ProfileSpec())
    steady = _run(spec, requests=50, replicas=2)
    finite = _run(spec, requests=50, replicas=2, drain=True)
    assert (finite.replica["simulated"] == 50).all()  # no arrival after the measured ones
    assert (steady.replica["simulated"] > 50).all()  # the load stays on until the last one ends
    assert (finite.replica["written"] == 50).all()


def test_the_replays_admission_rule_starves_preempted_requests_without_a_drain():
    # Dynamo's replay admits arrived transfers first and holds preempted requests back while any
    # transfer waits for blocks: under sustained pressure there always is one (docs/engine.md)
    spec = _cell(n_d=2, c=24, isl=300, osl=150, ratio=0.4, groups=3, decode_kv_blocks=30, profile=ProfileSpec())
    replay = CellSpec(
        cluster=ClusterSpec(n_prefill=1, n_decode=2, decode_kv_blocks=30, decode_admission="replay"),
        workload=spec.workload,
        profile=spec.profile,
        policy=spec.policy,
    )
    with pytest.raises(EngineError, match='decode_admission = "replay" starves'):
        _run(replay, requests=200, replicas=2)
    finite = _run(replay, requests=200, replicas=2, drain=True)
    fcfs = _run(spec, requests=200, replicas=2, drain=True)
    assert (finite.replica["written"] == 200).all() and finite.replica["preemptions"].sum() > 0
    # transfers first: new requests start sooner, preempted ones resume later, than under fcfs
    assert finite.samples["ttft_ms"].mean() < fcfs.samples["ttft_ms"].mean()
    assert finite.samples["itl_ms"].mean() > fcfs.samples["itl_ms"].mean()


def test_worker_time_integrals_on_the_hand_timeline():
    # The roomy timeline of the preemption test: prefill passes 0-10 (A), 10-20 (B) and 210-220
    # (a third, unmeasured request sent when A ends): 30 ms. The decode worker is in a pass from
    # 10 to 220 (210 ms), A runs 10-210 and B 20-220: 400 sequence-ms. Blocks held (1 at
    # admission, one more every 64 tokens): the passes are 10-20 (A, 1 -> 2 blocks), 20-210 (A 2
    # -> 5, B 1 -> 4) and 210-220 (B 4 -> 5); each counts the mean of its start and end:
    # 1.5 x 10 + 6 x 190 + 4.5 x 10 = 1200 block-ms (step by step it is 1216: 1.3% apart).
    res = _run(_cell(decode_kv_blocks=64))
    rep = res.replica
    assert rep["measured_ms"][0] == 220.0
    assert rep["prefill_busy_ms"][0] == pytest.approx(30.0)
    assert rep["decode_busy_ms"][0] == pytest.approx(210.0)
    assert rep["decode_batch_ms"][0] == pytest.approx(400.0)
    assert rep["decode_kv_block_ms"][0] == pytest.approx(1200.0)
    # warm-up time is left out: one client, A as warm-up (0-210), the measured B arrives at 210,
    # is prefilled 210-220 and decodes 220-420; A's passes before 210 count for nothing
    rep = simulate(_cell(c=1, decode_kv_blocks=64), replicas=1, requests=1, warmup=1, seed=3, stream=0).replica
    assert rep["measured_ms"][0] == pytest.approx(210.0)
    assert rep["prefill_busy_ms"][0] == pytest.approx(10.0)
    assert (rep["decode_busy_ms"][0], rep["decode_batch_ms"][0]) == pytest.approx((200.0, 200.0))
