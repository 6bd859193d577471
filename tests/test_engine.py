"""Engine invariants: conservation, determinism, common random numbers, closed-form decode, bad input."""

import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest
import scipy.stats

from poa_mc.engine.engine import EngineError, simulate
from poa_mc.engine.packing import pack_params
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec


def cell(flow="prefill_first", n_p=1, n_d=2, policy="kv", **wl) -> CellSpec:
    base = dict(isl=Dist("fixed", 1024), osl=Dist("fixed", 32), prefix_groups=4, prefix_ratio=0.5, concurrency=16)
    base.update(wl)
    return CellSpec(
        cluster=ClusterSpec(n_prefill=n_p, n_decode=n_d, flow=flow),
        workload=WorkloadSpec(**base),
        policy=PolicySpec(kind=policy),
    )


RUN = dict(replicas=6, requests=300, warmup=30, seed=7, stream=3)
FLOWS = [
    ("prefill_first", "kv"),
    ("prefill_first", "pull"),
    ("prefill_first", "round_robin"),
    ("decode_first", "kv"),
    ("aggregated", "kv"),
    ("decode_first", "power_of_d"),
]


@pytest.mark.parametrize("flow,policy", FLOWS)
def test_conservation(flow, policy):
    spec = cell(
        flow,
        n_p=2,
        n_d=3,
        policy=policy,
        isl=Dist("uniform", low=100, high=3000),
        osl=Dist("lognormal", mean=40, sigma=0.5, cap=400),
    )
    res = simulate(spec, **RUN)
    s = res.samples
    assert (res.replica["written"] == RUN["requests"]).all()  # each measured request completed exactly once
    np.testing.assert_array_equal(
        s["seq"], np.arange(RUN["warmup"], RUN["warmup"] + RUN["requests"])[None, :].repeat(RUN["replicas"], 0)
    )
    for name in ("arrival_ms", "ttft_ms", "e2e_ms", "itl_ms", "prefill_wait_ms", "decode_wait_ms"):
        assert np.isfinite(s[name]).all(), name
        assert (s[name] >= 0).all(), name
    assert (s["e2e_ms"] >= s["ttft_ms"]).all()
    # tokens add up: e2e = ttft + (osl - 1) * itl
    np.testing.assert_allclose(s["ttft_ms"] + (s["osl"] - 1) * s["itl_ms"], s["e2e_ms"], rtol=1e-9)
    assert (s["cached_blocks"] <= s["prompt_blocks"]).all()
    assert ((s["decode_worker"] >= 0) & (s["decode_worker"] < 3)).all()
    assert res.replica["simulated"].min() >= RUN["requests"] + RUN["warmup"]


def test_fully_cached_prompts_wait_for_no_prefill():
    # prefix_ratio 1 and a block-sized prompt: after the first request of a group, nothing to
    # prefill once the whole prompt may hit (recompute_last_block = false; by default the last
    # block is recomputed: tests/test_engine_fidelity.py)
    spec = cell("decode_first", n_p=1, n_d=2, isl=Dist("fixed", 128), prefix_ratio=1.0, prefix_groups=2)
    spec = replace(spec, cluster=replace(spec.cluster, recompute_last_block=False))
    res = simulate(spec, **RUN)
    s = res.samples
    assert (s["cached_blocks"] == s["prompt_blocks"]).mean() > 0.9
    assert (s["prefill_wait_ms"] >= 0).all() and np.isfinite(s["prefill_wait_ms"]).all()
    assert (s["prefill_wait_ms"][s["cached_blocks"] == s["prompt_blocks"]] == 0).all()


def test_same_seed_is_bit_identical_and_independent_of_batching(caplog):
    spec = cell("decode_first", n_p=1, n_d=3, concurrency=24)
    a = simulate(spec, **RUN)
    b = simulate(spec, **RUN, parallel=False)
    c = simulate(spec, **RUN, max_batch_bytes=200_000)
    assert c.batches > 1
    assert "batches" in caplog.text  # a run split for memory says so
    for k in a.samples:
        np.testing.assert_array_equal(a.samples[k], b.samples[k])
        np.testing.assert_array_equal(a.samples[k], c.samples[k])
    for k in a.candidates:
        np.testing.assert_array_equal(a.candidates[k], c.candidates[k])
    other = simulate(spec, **{**RUN, "seed": 8})
    assert not np.array_equal(a.samples["ttft_ms"], other.samples["ttft_ms"])


def test_batches_reduce_one_at_a_time_in_order_beside_the_next_and_errors_surface(monkeypatch):
    """A batch is reduced on a thread of its own while the next simulates: one reduction at a
    time, batches in replica order, each reduction's result kept, and its error raised."""
    import threading

    from poa_mc.engine import memory

    spec = cell("prefill_first", n_p=1, n_d=2)
    whole = simulate(spec, **RUN)
    monkeypatch.setattr(memory, "STREAM_BATCH_BYTES", 1)  # one replica per batch
    running, seen, lock = [0], [], threading.Lock()

    def reduce(cols, rep, logs):
        with lock:
            running[0] += 1
            assert running[0] == 1
        try:
            seen.append(threading.current_thread() is not threading.main_thread())
            return {"ttft": cols["ttft_ms"].copy()}
        finally:
            with lock:
                running[0] -= 1

    res = simulate(spec, **RUN, keep=0, reduce=reduce)
    assert res.batches == RUN["replicas"] and len(seen) == RUN["replicas"] and all(seen)
    np.testing.assert_array_equal(res.acc["ttft"], whole.samples["ttft_ms"])

    def failing(cols, rep, logs, calls=[]):  # noqa: B006 - counts the calls
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("reduction 3 failed")
        return {"n": np.zeros(len(rep["status"]))}

    with pytest.raises(ValueError, match="reduction 3 failed"):
        simulate(spec, **RUN, keep=0, reduce=failing)


def test_overlap_leaves_the_last_reduction_running(monkeypatch):
    """overlap=True returns with the last batch's reduction still running (reduced() waits for it
    and raises its error), and a later call's first reduction starts only after `after` ended."""
    import threading

    from poa_mc.engine import memory

    spec = cell("prefill_first", n_p=1, n_d=2)
    whole = simulate(spec, **RUN)
    monkeypatch.setattr(memory, "STREAM_BATCH_BYTES", 1)  # one replica per batch
    gate, order = threading.Event(), []

    def held(cols, rep, logs):  # the first call's reductions: the last one waits for the gate
        if len(order) == RUN["replicas"] - 1:
            assert gate.wait(10)
        order.append("first")
        return {"ttft": cols["ttft_ms"].copy()}

    first = simulate(spec, **RUN, keep=RUN["requests"], reduce=held, overlap=True)
    assert first.pending is not None and not first.pending.done() and first.acc == {}
    assert first.reduced_at is None

    def second_reduce(cols, rep, logs):
        order.append("second")
        return {"ttft": cols["ttft_ms"].copy()}

    # the second call simulates its replicas while the first's last reduction waits, and
    # submits its own first reduction only once that one has ended
    threading.Timer(0.3, gate.set).start()
    second = simulate(spec, **RUN, keep=0, reduce=second_reduce, overlap=True, after=first.pending)
    np.testing.assert_array_equal(first.reduced()["ttft"], whole.samples["ttft_ms"])
    np.testing.assert_array_equal(second.reduced()["ttft"], whole.samples["ttft_ms"])
    assert order == ["first"] * RUN["replicas"] + ["second"] * RUN["replicas"]
    assert first.reduced_at is not None and first.reduced_at <= second.reduced_at
    # the kept samples are filled by the reductions: complete once reduced() returned
    for name, arr in whole.samples.items():
        np.testing.assert_array_equal(first.samples[name], arr)

    def failing(cols, rep, logs, calls=[]):  # noqa: B006 - counts the calls
        calls.append(1)
        if len(calls) == RUN["replicas"]:
            raise ValueError("the last reduction failed")
        return {"n": np.zeros(len(rep["status"]))}

    res = simulate(spec, **RUN, keep=0, reduce=failing, overlap=True)  # its caller learns of it late
    with pytest.raises(ValueError, match="the last reduction failed"):
        res.reduced()


def test_common_random_numbers_across_policies():
    # open loop: request n of a replica is the same request whatever the policy
    kw = dict(arrival="poisson", rate_rps=20.0, concurrency=1)
    a = simulate(cell(policy="kv", n_p=2, **kw), **RUN)
    b = simulate(cell(policy="round_robin", n_p=2, **kw), **RUN)
    for k in ("arrival_ms", "isl", "osl", "group"):
        np.testing.assert_array_equal(a.samples[k], b.samples[k])
    assert not np.array_equal(a.samples["prefill_worker"], b.samples["prefill_worker"])


@pytest.mark.parametrize("flow", ["prefill_first", "decode_first", "aggregated"])
def test_closed_form_decode_equals_step_by_step(flow):
    spec = cell(
        flow, n_p=1, n_d=2, concurrency=12, osl=Dist("uniform", low=1, high=80), isl=Dist("uniform", low=64, high=2000)
    )
    run = dict(RUN, requests=150)
    fast = simulate(spec, **run)
    naive = simulate(spec, **run, naive_decode=True)
    assert naive.replica["events"].sum() > 3 * fast.replica["events"].sum()  # the reference really steps
    for k in ("ttft_ms", "e2e_ms", "itl_ms", "arrival_ms", "decode_wait_ms"):
        np.testing.assert_allclose(fast.samples[k], naive.samples[k], rtol=1e-9, atol=1e-9)
    for k in ("decode_worker", "prefill_worker", "cached_blocks", "seq"):
        np.testing.assert_array_equal(fast.samples[k], naive.samples[k])


def test_mocker_lockstep_ttft_at_c8():
    # docs/engine.md, "Order within one instant": 1P/2D at C = 8 on the mocker profile lands on one of two
    # lockstep patterns
    spec = CellSpec(cluster=ClusterSpec(n_prefill=1, n_decode=2), workload=WorkloadSpec(concurrency=8))
    res = simulate(spec, replicas=4, requests=400, warmup=100, seed=1, stream=0)
    p50 = float(np.median(res.samples["ttft_ms"]))
    assert min(abs(p50 - 58), abs(p50 - 96)) < 10, p50


def test_hash_policy_sends_each_group_to_one_worker_and_is_consistent():
    spec = replace(cell(n_p=4, n_d=2, policy="hash", prefix_groups=12), cluster=ClusterSpec(n_prefill=4, n_decode=2))
    res = simulate(spec, **RUN)
    groups, workers = res.samples["group"], res.samples["prefill_worker"]
    owners = []
    for r in range(groups.shape[0]):
        owner = {}
        for g, w in zip(groups[r], workers[r]):
            assert owner.setdefault(int(g), int(w)) == int(w)  # no prefix is cached on two workers
        owners.append(owner)
    assert owners[0] != owners[1]  # each replica draws its own assignment
    # rendezvous hashing: dropping the last worker moves only the groups it owned
    from poa_mc.kernels import cpu

    owner_of = cpu._K.router.hash_owner
    key = np.uint64(cpu._K.rng.replica_key(1, 2, 3))  # uint64, the kernels' key type (an int64 would add a signature)
    for g in range(40):
        a, b = owner_of(key, g, 4), owner_of(key, g, 3)
        assert a == b or a == 3


def test_global_cache_of_one_prefill_worker_is_its_own_cache():
    spec = cell(n_p=1, n_d=2, prefix_groups=6)
    spec = replace(spec, cluster=replace(spec.cluster, prefill_kv_blocks=40))  # evicting
    own = simulate(spec, **RUN)
    pooled = simulate(replace(spec, policy=PolicySpec(kind="kv", cache="global")), **RUN)
    for k in own.samples:
        assert np.array_equal(own.samples[k], pooled.samples[k]), k


def test_global_cache_pools_the_prefill_workers_blocks():
    # 4 workers of 40 blocks: 6 groups of 8 shared blocks do not fit in one worker beside the
    # prompts in flight, but fit in the pool of 160, so the pooled cache hits more
    spec = cell(n_p=4, n_d=2, prefix_groups=6, concurrency=24)
    spec = replace(spec, cluster=replace(spec.cluster, prefill_kv_blocks=40))
    own = simulate(spec, **RUN).samples
    pooled = simulate(replace(spec, policy=PolicySpec(kind="kv", cache="global")), **RUN).samples
    assert pooled["cached_blocks"].sum() > 1.2 * own["cached_blocks"].sum()
    assert pooled["cached_blocks"].max() <= 8


def _planner_cell(n_p, n_d, *, ttft_ms=1e9, itl_ms=1e9, interval_ms=2000.0, startup_ms=0.0):
    from poa_mc.model.spec_planner import PlannerSpec

    spec = cell(
        n_p=n_p, n_d=n_d, concurrency=24, isl=Dist("uniform", low=256, high=3000), osl=Dist("uniform", low=8, high=96)
    )
    planner = PlannerSpec(gpu_budget=6, interval_ms=interval_ms, startup_ms=startup_ms, ttft_ms=ttft_ms, itl_ms=itl_ms)
    return replace(spec, cluster=replace(spec.cluster, n_prefill=n_p, n_decode=n_d), planner=planner)


def test_a_planner_that_never_moves_is_the_fixed_split():
    # targets nothing misses: the planner keeps 2P/4D; the idle workers of the other splits it
    # holds change no event, no decision and no random draw
    moving = simulate(_planner_cell(2, 4), **RUN)
    fixed = simulate(replace(_planner_cell(2, 4), planner=None), **RUN)
    assert (moving.replica["planner_moves"] == 0).all()
    for k in fixed.samples:
        assert np.array_equal(moving.samples[k], fixed.samples[k]), k


def test_a_planner_over_its_ttft_target_takes_decode_gpus_one_interval_at_a_time():
    # TTFT can never meet 1 ms and ITL always meets its target: every interval moves one decode
    # worker's GPUs to the prefill pool, until the last split (5P/1D of 6 GPUs)
    run = dict(RUN, requests=1500)
    res = simulate(_planner_cell(1, 5, ttft_ms=1.0, interval_ms=1500.0, startup_ms=300.0), **run)
    log = res.extra["move_log"]
    assert (res.replica["planner_moves"] == 4).all()
    np.testing.assert_array_equal(log[:, :4, 1], np.tile([2, 3, 4, 5], (log.shape[0], 1)))  # prefill workers
    np.testing.assert_array_equal(log[:, :4, 2], np.tile([4, 3, 2, 1], (log.shape[0], 1)))  # decode workers
    gaps = np.diff(np.concatenate([np.zeros((log.shape[0], 1)), log[:, :4, 0]], axis=1), axis=1)
    assert (gaps >= 1500.0 + 300.0).all()  # an interval, then a drain, then the start-up
    assert np.isnan(log[:, 4:, 0]).all()
    # no request goes to a decode worker the planner has taken away (it stops taking requests
    # when the move is decided, before the move completes)
    decided, worker = res.candidates["decode_decided_ms"], res.samples["decode_worker"]
    for r in range(log.shape[0]):
        for t, n_d in zip(log[r, :4, 0], log[r, :4, 2]):
            assert (worker[r][decided[r] >= t] < n_d).all()
    assert (worker[:, :50] == 4).any()  # the fifth decode worker served before it was taken


def test_cuda_target_matches_cpu_under_simulator(tmp_path):
    script = textwrap.dedent("""
        import warnings, numpy as np
        warnings.filterwarnings("ignore")
        from poa_mc.engine.engine import simulate
        from tests.every_path import cells, trace_cells
        for flow, pol, dkv, spec in cells():
            kw = dict(replicas=3, requests=25, warmup=5, seed=5, stream=1)
            a = simulate(spec, backend="cpu", **kw)
            b = simulate(spec, backend="cuda", **kw)
            assert b.device == "cuda simulator", b.device
            for k in a.samples:
                assert np.array_equal(a.samples[k], b.samples[k]), (flow, k)
            for k in a.candidates:
                assert np.array_equal(a.candidates[k], b.candidates[k], equal_nan=True), (flow, k)
            for k in a.replica:
                assert np.array_equal(a.replica[k], b.replica[k]), (flow, pol, k)
            if pol in ("kv", "adaptive", "planner") and flow == "prefill_first":
                # the streaming reduction: the same accumulators from either target, nothing kept
                import dataclasses
                from poa_mc.stats.accumulate import accumulate
                poa = {"window": 4, "cost": "router", "pricing": "slot"}
                red = lambda c, rep, lg, d=spec: accumulate(c, rep, d, poa, {"ttft_ms": 50.0}, lg)
                sa = simulate(spec, backend="cpu", keep=0, reduce=red, **kw)
                sb = simulate(spec, backend="cuda", keep=0, reduce=red, **kw)
                # and each replica tallied on the device (poa_mc/kernels/tally.py) equals the host's tally, its
                # PoA-hat windows solved there (poa_mc/kernels/poa_hat.py) the host's sums
                tl = dict(tally=True, slo={"ttft_ms": 50.0}, poa=poa)
                sc = simulate(spec, backend="cuda", keep=0, reduce=red, **tl, **kw)
                assert sa.acc and set(sa.acc) == set(sb.acc) == set(sc.acc), pol
                for k in sa.acc:
                    assert np.array_equal(sa.acc[k], sb.acc[k], equal_nan=True), (pol, k)
                    assert np.array_equal(sa.acc[k], sc.acc[k], equal_nan=True), (pol, k)
                # tallied with PoA-hat solved, the device copies back only the kept requests' rows and
                # candidates: the kept samples, candidates and accumulators still equal the CPU's
                tk = dict(keep=4, reduce=red, tally=True, slo={"ttft_ms": 50.0}, poa=poa, **kw)
                sd, se = simulate(spec, backend="cpu", **tk), simulate(spec, backend="cuda", **tk)
                for got, want in ((se.samples, sd.samples), (se.candidates, sd.candidates), (se.acc, sd.acc)):
                    assert want and set(got) == set(want), pol
                    for k in want:
                        assert np.array_equal(got[k], want[k], equal_nan=True), (pol, k)
                assert np.array_equal(se.acc["poa_opt"], sa.acc["poa_opt"], equal_nan=True), pol
                if pol == "kv":  # the other prices and decisions: the step, the observed latency, prefill
                    for more in ({"window": 4, "cost": "ttft"}, {"window": 4, "cost": "observed"},
                                 {"window": 4, "stage": "prefill"}):  # fmt: skip
                        made = []  # what the kernels handed the host: each replica's sums, none NaN
                        def rm(c, rep, lg, d=spec, p=more):
                            made.append(c.get("poa_kernel"))
                            return accumulate(c, rep, d, p, {}, lg)
                        tm = dict(keep=0, reduce=rm, tally=True, slo={}, poa=more, **kw)
                        sf, sg = simulate(spec, backend="cpu", **tm), simulate(spec, backend="cuda", **tm)
                        assert len(made) == 2 and all(np.isfinite(m).all() for m in made), (more, made)
                        sh = simulate(spec, backend="cpu", keep=0, reduce=rm, **kw)  # the host's sums
                        for k in ("poa_actual", "poa_opt", "poa_windows"):
                            assert np.array_equal(sf.acc[k], sg.acc[k], equal_nan=True), (more, k)
                            assert np.array_equal(sf.acc[k], sh.acc[k], equal_nan=True), (more, k)
                        assert np.isfinite(sf.acc["poa_opt"]).all(), more
            if pol == "tiers":  # hits in both lower tiers, and their copies timed
                assert a.samples["cached_g2"].sum() > 0 and a.samples["cached_g3"].sum() > 0
                assert a.samples["onboard_ms"].max() > 0
            if pol == "tiers+g4":
                assert a.samples["cached_g4"].sum() > 0
            if pol == "planner":
                assert a.replica["planner_moves"].sum() > 0
                assert np.array_equal(a.extra["move_log"], b.extra["move_log"], equal_nan=True)
            if pol == "adaptive":
                assert a.replica["switches"].sum() > 0
                assert np.array_equal(a.extra["switch_log"], b.extra["switch_log"], equal_nan=True)
            if dkv == 30:
                assert a.replica["preemptions"].sum() > 0, flow
        # what the narrowed copy leaves out reads as NaN, never as a stale number
        from poa_mc.kernels.cuda import _rows_back
        store = np.arange(24.0).reshape(2, 3, 4)  # (fields, requests, replicas) on the device
        host = _rows_back(store, {1}, 1)
        assert host.shape == (4, 3, 2) and np.array_equal(host[:, :, 1], store[1].T)
        assert np.array_equal(host[:, 0, 0], store[0, 0]) and np.isnan(host[:, 1:, 0]).all()
        assert (_rows_back(store.astype(np.int32), set(), 0) == np.iinfo(np.int32).min).all()
        # traces replayed: the agentic sample's sessions (closed), the Mooncake sample's timestamps
        for path, spec in trace_cells():
            kw = dict(replicas=3, requests=25, warmup=5, seed=5, stream=1)
            a, b = simulate(spec, backend="cpu", **kw), simulate(spec, backend="cuda", **kw)
            for k in a.samples:
                assert np.array_equal(a.samples[k], b.samples[k]), (path, k)
        # load schedules: rate stages, and concurrency stages that park and wake clients
        from tests.every_path import schedule_cells
        for name, spec in schedule_cells(36):
            kw = dict(replicas=3, requests=36, warmup=5, seed=5, stream=1)
            a, b = simulate(spec, backend="cpu", **kw), simulate(spec, backend="cuda", **kw)
            for k in a.samples:
                assert np.array_equal(a.samples[k], b.samples[k]), (name, k)
        print("EQUAL")
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    # a fresh clone's first run compiles both CPU builds here, then the simulator runs every kernel
    # path in Python: it took over 600 s on 2 cores once the `gpu` extra was installed (numba-cuda's
    # simulator then runs it in place of the one numba itself ships)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "EQUAL" in out.stdout


@pytest.mark.parametrize(
    "mutate,path",
    [
        (lambda s: replace(s, cluster=replace(s.cluster, n_decode=0)), "cluster.n_decode"),
        (lambda s: replace(s, cluster=replace(s.cluster, n_prefill=0)), "cluster.n_prefill"),
        (lambda s: replace(s, workload=replace(s.workload, concurrency=0)), "workload.concurrency"),
        (lambda s: replace(s, workload=replace(s.workload, isl=Dist("fixed", 2_000_000))), "workload.isl"),
        (lambda s: replace(s, workload=replace(s.workload, arrival="poisson", rate_rps=-1.0)), "workload.rate"),
        (lambda s: replace(s, workload=replace(s.workload, osl=Dist("fixed", -3))), "workload.osl"),
        (lambda s: replace(s, profile=ProfileSpec(name="x", kind="exponential")), "profile.prefill_ms"),
        (lambda s: replace(s, policy=PolicySpec(kind="power_of_d", d=9)), "policy.d"),
    ],
)
def test_bad_input_names_the_field(mutate, path):
    with pytest.raises(SpecError) as err:
        simulate(mutate(cell()), **RUN)
    assert err.value.path == path


def test_overloaded_open_loop_is_reported():
    spec = cell(arrival="poisson", rate_rps=5000.0)
    spec = replace(spec, cluster=replace(spec.cluster, max_inflight=64))
    with pytest.raises(EngineError, match="max_inflight"):
        simulate(spec, **RUN)


def test_router_sees_cache_events_late_when_delayed():
    # a decode cache small enough (220 blocks) that where a prefix lives decides whether it hits
    base = cell("decode_first", n_p=1, n_d=4, concurrency=32, prefix_groups=32)
    base = replace(base, cluster=replace(base.cluster, decode_kv_blocks=220))
    blind = replace(base, cluster=replace(base.cluster, kv_event_delay_ms=1e12))
    late = replace(base, cluster=replace(base.cluster, kv_event_delay_ms=200.0))
    now = simulate(base, **RUN)
    never = simulate(blind, **RUN)
    later = simulate(late, **RUN)
    isl = now.samples["isl"][:, :, None]
    # an informed router credits overlap (a candidate below isl tokens must hold part of the prompt);
    # one whose events never come due only learns of stores when its event ring overflows, far too
    # late to steer requests to their prefixes, so fewer prompt blocks hit
    assert (now.candidates["cand_tokens"] < isl).any()

    # per replica, paired (common random numbers): the informed router's gain must exceed its 99%
    # t-interval's half width (about 0.048 +- 0.007 at these sizes with router_blocks = "dynamo")
    def hit(r):
        return r.samples["cached_blocks"].sum(axis=1) / r.samples["prompt_blocks"].sum(axis=1)

    gain = hit(now) - hit(never)
    half = scipy.stats.t.ppf(0.995, gain.size - 1) * gain.std(ddof=1) / np.sqrt(gain.size)
    assert gain.mean() > half, (gain, half)
    assert not np.array_equal(later.samples["decode_worker"], now.samples["decode_worker"])
    assert (later.replica["written"] == RUN["requests"]).all()


def test_a_restarted_worker_starts_empty_even_with_delayed_cache_events():
    # cache events take 5 s to reach the router, longer than a move takes: the news of a removed
    # worker's old cache must not reach the router after it restarted empty
    run = dict(RUN, requests=1500)
    spec = _planner_cell(1, 5, ttft_ms=1.0, interval_ms=1500.0, startup_ms=300.0)
    spec = replace(spec, cluster=replace(spec.cluster, kv_event_delay_ms=5000.0))
    res = simulate(spec, **run)
    assert (res.replica["planner_moves"] == 4).all() and (res.replica["status"] == 0).all()
    # the router never saw a decode worker the planner had taken away: its columns are NaN then
    decided, tokens = res.candidates["decode_decided_ms"], res.candidates["cand_tokens"]
    log = res.extra["move_log"]
    n_p = 5  # the most prefill workers of any split of 6 GPUs (the decode columns start after them)
    for r in range(log.shape[0]):
        late = decided[r] >= log[r, 3, 0]  # after the last move: one decode worker
        assert np.isnan(tokens[r][late][:, n_p + 1 :]).all()
        assert np.isfinite(tokens[r][late][:, n_p]).all()


def test_a_prefill_worker_short_of_blocks_starts_when_its_kv_copy_is_released():
    # prefill_first: a prefill worker keeps a prompt's KV until the decode worker has it. With an
    # instant transfer that happens while decode workers plan their passes; a prefill worker
    # waiting for those blocks must start in the same instant, not at the next event (which can be
    # a whole decode segment later: docs/engine.md, "Order within one instant")
    def ttft(latency_ms: float) -> float:
        spec = cell(concurrency=32)
        spec = replace(
            spec,
            cluster=replace(
                spec.cluster, n_prefill=1, n_decode=2, prefill_kv_blocks=80, transfer_latency_ms=latency_ms
            ),
            workload=replace(spec.workload, isl=Dist("fixed", 1024), osl=Dist("fixed", 512), concurrency=32),
        )
        return float(simulate(spec, replicas=4, requests=300, warmup=64, seed=1, stream=1).samples["ttft_ms"].mean())

    instant, tiny = ttft(0.0), ttft(0.001)
    assert instant < 200.0 and instant < 1.2 * tiny


def test_the_lean_build_gives_the_full_builds_results(monkeypatch):
    # cells without lower tiers or a trace run the lean build (poa_mc/kernels/source.py, the tier and
    # trace branches compiled out); the full build must give them the same results, bit for bit
    from poa_mc.kernels import cpu

    pressure = replace(cell("prefill_first", 2, 2, "kv"), cluster=ClusterSpec(
        n_prefill=2, n_decode=2, decode_kv_blocks=60, kv_event_delay_ms=5.0, tier_eviction="lineage"))  # fmt: skip
    specs = [pressure, *(cell(f, 2, 2, p, isl=Dist("uniform", low=64, high=1500)) for f, p in FLOWS)]
    for spec in specs:
        assert cpu.lean(pack_params(spec, requests=10, warmup=0, seed=1, stream=0, record_candidates=True)[0])
        a = simulate(spec, **RUN)
        with monkeypatch.context() as m:
            m.setattr(cpu, "lean", lambda ip: False)
            b = simulate(spec, **RUN)
        for group in ("samples", "candidates", "replica"):
            for k, v in getattr(a, group).items():
                assert np.array_equal(v, getattr(b, group)[k], equal_nan=True), (spec.cluster.flow, group, k)


def test_auto_backend_asks_numba_cuda_only_where_a_gpu_device_file_exists(monkeypatch):
    """Without an NVIDIA device file (Linux) `auto` is the CPU without importing numba.cuda (75-155
    ms of a run's start); where one exists, or under CUDA's simulator, numba.cuda is asked."""
    code = (
        "import sys; from poa_mc.engine.backend import resolve_backend as r; "
        "print(r('auto'), 'numba.cuda' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if sys.platform.startswith("linux") and not any(
        map(os.path.exists, ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"))
    ):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["cpu", "False"]
    import poa_mc.kernels as kernels
    from poa_mc.engine import backend

    asked = []
    monkeypatch.setattr(kernels, "cuda_available", lambda: asked.append(1) or True)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/dev/nvidiactl")
    assert backend.resolve_backend("auto") == "cuda" and asked == [1]
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    assert backend.cuda_available() is (not sys.platform.startswith("linux")) and len(asked) == 1 + (
        not sys.platform.startswith("linux")
    )
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert backend.cuda_available() is True


def test_a_prefix_of_fixed_tokens_is_the_ratio_it_equals_and_stays_fixed_as_prompts_vary():
    """workload.prefix_tokens: with fixed 4,096-token prompts a 2,048-token prefix is prefix_ratio 0.5,
    to the bit; with prompts of 1,000 to 6,000 tokens every hit stays within 2,048 // 64 = 32 blocks
    (and within the prompt), where half of a long prompt would share up to 46."""
    fixed = cell(isl=Dist("fixed", 4096), prefix_ratio=0.5)
    a = simulate(fixed, **RUN)
    b = simulate(replace(fixed, workload=replace(fixed.workload, prefix_ratio=0.0, prefix_tokens=2048)), **RUN)
    for k in a.samples:
        np.testing.assert_array_equal(a.samples[k], b.samples[k], err_msg=k)
    wide = cell(isl=Dist("uniform", low=1000, high=6000), prefix_tokens=2048)
    s = simulate(wide, **RUN).samples
    cached = s["cached_blocks"]
    assert cached.max() == 32 and (cached <= np.minimum(32, s["isl"] // 64)).all()
    ratio = simulate(cell(isl=Dist("uniform", low=1000, high=6000), prefix_ratio=0.5), **RUN).samples
    assert ratio["cached_blocks"].max() > 32  # half of a long prompt: more than the fixed prefix
    with pytest.raises(SpecError, match="prefix_tokens"):
        replace(wide, workload=replace(wide.workload, prefix_tokens=-1)).validate()
