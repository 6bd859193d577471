"""A load schedule in the kernels (poa_mc/kernels/schedule.py): each stage's arrivals at its own
rate or concurrency, and the state one stage leaves carried into the next. Known answers from
queueing theory (M/M/1 per stage), a fluid backlog, and the exact count of a closed loop's
requests in flight; Monte Carlo checks at 4 standard errors across replicas."""

import dataclasses

import numpy as np

from poa_mc.engine.engine import simulate
from poa_mc.model.spec_workload import Stage
from tests.test_engine_theory import queue_cell

Z = 4.0


def staged(cell, stages):
    w = cell.workload
    loads = [s.load for s in stages]
    if w.arrival == "closed":
        w = dataclasses.replace(w, concurrency=int(max(loads)), schedule=tuple(stages))
    else:
        w = dataclasses.replace(w, rate_rps=loads[0], schedule=tuple(stages))
    return dataclasses.replace(cell, workload=w)


def test_each_stage_is_an_mm1_queue_at_its_own_rate(se_check):
    # mu = 1 per ms; the busy stage first (warm-up at its rate), so the light one's transient from
    # the busy one's queue is a few requests of its 4,000
    n = 4000
    spec = staged(queue_cell(1, rate_rps=700.0), [Stage(700.0, n), Stage(300.0, n)])
    res = simulate(spec, replicas=48, requests=2 * n, warmup=400, seed=21, stream=0)
    wait, arr = res.samples["prefill_wait_ms"], res.samples["arrival_ms"]
    for k, lam in enumerate((0.7, 0.3)):
        part = slice(k * n, (k + 1) * n)
        se_check(wait[:, part].mean(axis=1), lam / (1.0 - lam), Z)
        gaps = np.diff(arr[:, part], axis=1)
        se_check(gaps.mean(axis=1), 1.0 / lam, Z)


def test_an_overloaded_stage_leaves_its_backlog_to_the_next():
    # 1.5 per ms into a server of 1 per ms for 2,000 requests leaves about 2,000 x (1 - 1/1.5) = 667
    # waiting; at 0.3 per ms it drains at 0.7 per ms, in 952 ms, while 286 new requests queue behind
    # it with waits falling from 667 ms to 0: the light stage's mean wait is about 286 x 333 / 2,000
    # ms on top of its own M/M/1 wait (fluid limit; its error is the backlog's ~1/sqrt(667) noise)
    n1, n2 = 2000, 2000
    spec = staged(queue_cell(1, rate_rps=1500.0), [Stage(1500.0, n1), Stage(300.0, n2)])
    res = simulate(spec, replicas=32, requests=n1 + n2, warmup=0, seed=22, stream=0)
    wait = res.samples["prefill_wait_ms"][:, n1:].mean()
    backlog = n1 * (1 - 1 / 1.5)
    drain_ms = backlog / 0.7
    fluid = 0.3 * drain_ms * (backlog / 2) / n2 + 0.3 / 0.7
    assert abs(wait - fluid) < 0.15 * fluid, f"light stage waits {wait:.1f} ms, fluid backlog {fluid:.1f} ms"
    # the same light load on its own waits 0.43 ms: the stage above carried the backlog over
    assert wait > 50 * (0.3 / 0.7)


def in_flight(arr: np.ndarray, done: np.ndarray, t: float) -> int:
    return int(((arr <= t) & (done > t)).sum())


def test_a_closed_loop_keeps_each_stages_concurrency_in_flight():
    # no think time: a client's next request arrives when its last one ends, so exactly C_k of
    # them are in flight at every instant of stage k once the previous stage's extra clients
    # finished; raised, the concurrency is there at the stage's first arrival
    stages = [Stage(4, 300), Stage(16, 600), Stage(4, 300), Stage(9, 300)]
    spec = staged(queue_cell(1, clients=16), stages)
    res = simulate(spec, replicas=4, requests=1500, warmup=20, seed=23, stream=0)
    arr, done = res.samples["arrival_ms"], res.samples["arrival_ms"] + res.samples["e2e_ms"]
    ends = np.cumsum([s.requests for s in stages])
    for r in range(4):
        lo = 0
        for stage, hi in zip(stages, ends):
            a = arr[r, lo:hi]
            # from the middle of the stage to its last arrival (the previous stage's extra clients
            # finished long before: each of its requests takes ~C ms): every instant has C_k
            for t in np.linspace(a[len(a) // 2], a[-1], 25)[:-1]:
                assert in_flight(arr[r], done[r], t) == stage.load, (r, stage, t)
            lo = hi
        # raised at 300: the stage's first arrivals are its new clients, at one instant
        assert np.ptp(arr[r, 300:312]) == 0.0


def test_without_a_schedule_the_draws_are_unchanged():
    # one stage at the cell's own load: the same arrivals, to the bit, as no schedule
    plain = queue_cell(1, rate_rps=600.0)
    one = staged(plain, [Stage(600.0, 500)])
    a = simulate(plain, replicas=3, requests=500, warmup=50, seed=24, stream=0)
    b = simulate(one, replicas=3, requests=500, warmup=50, seed=24, stream=0)
    for name in ("arrival_ms", "ttft_ms", "e2e_ms"):
        assert np.array_equal(a.samples[name], b.samples[name])
    closed = queue_cell(1, clients=5)
    c = simulate(closed, replicas=3, requests=500, warmup=50, seed=25, stream=0)
    d = simulate(staged(closed, [Stage(5, 500)]), replicas=3, requests=500, warmup=50, seed=25, stream=0)
    assert np.array_equal(c.samples["arrival_ms"], d.samples["arrival_ms"])


def test_a_lowered_concurrency_stops_the_thinking_clients_above_it():
    # with think time most clients wait in the heap when a stage lowers the concurrency: from the
    # stage's first arrival on, the requests created never number more than its concurrency in
    # flight (clients above it that were waiting park instead of sending one more), and they reach
    # it (the active ones keep sending)
    stages = [Stage(12, 400), Stage(3, 200), Stage(7, 300)]
    spec = staged(queue_cell(1, clients=12, think_ms=5.0), stages)
    res = simulate(spec, replicas=4, requests=900, warmup=50, seed=26, stream=0)
    arr, done = res.samples["arrival_ms"], res.samples["arrival_ms"] + res.samples["e2e_ms"]
    for r in range(4):
        for lo, hi, c in ((400, 600, 3), (600, 900, 7)):
            new = slice(lo, hi)
            times = arr[r, new]
            counts = [int(((arr[r, new] <= t) & (done[r, new] > t)).sum()) for t in times]
            assert max(counts) == c, (r, c, max(counts))


def test_constant_arrivals_are_evenly_spaced_and_wait_as_a_d_m_1_queue(se_check):
    # arrival = "constant": every gap 1 / rate, at each stage's own rate; into an exponential
    # server (mu = 1 per ms) a D/M/1 queue, whose mean wait is sigma / (mu (1 - sigma)) with sigma
    # the root in (0, 1) of sigma = exp(-mu (1 - sigma) / lam)
    from scipy.optimize import brentq

    n = 4000
    cell = queue_cell(1, rate_rps=700.0)
    cell = dataclasses.replace(cell, workload=dataclasses.replace(cell.workload, arrival="constant"))
    spec = staged(cell, [Stage(700.0, n), Stage(400.0, n)])
    res = simulate(spec, replicas=32, requests=2 * n, warmup=400, seed=27, stream=0)
    arr, wait = res.samples["arrival_ms"], res.samples["prefill_wait_ms"]
    for k, lam in enumerate((0.7, 0.4)):
        part = slice(k * n, (k + 1) * n)
        assert np.allclose(np.diff(arr[:, part], axis=1), 1.0 / lam, rtol=1e-9)
        sigma = brentq(lambda s, lam=lam: s - np.exp(-(1.0 - s) / lam), 1e-12, 1 - 1e-12)
        se_check(wait[:, part].mean(axis=1), sigma / (1.0 - sigma), Z)
