"""The adaptive controller's state machine (poa_mc/kernels/controller.py), on the compiled CPU functions."""

import math

import numpy as np
import pytest

from poa_mc.engine.engine import simulate
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import (
    F_CTL_ALPHA,
    F_CTL_DWELL,
    F_CTL_HYST,
    F_CTL_OMEGA,
    F_CTL_PERIOD,
    F_CTL_TAU,
    F_CTL_TH1,
    F_CTL_TH2,
    NF_P,
    NP_I,
    NRF,
    NRI,
    P_CTL,
    P_CTL_LOG,
    P_CTL_WIN,
    RF_EWMA,
    RF_OMEGA,
    RF_REGT,
    RF_TAU,
    RI_REGIME,
    RI_SWITCHES,
)
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_policy import ControllerSpec, PolicySpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

C = cpu._K.controller
WIN, LOG = 8, 4


def _state(period=100.0, alpha=1.0, th1=10.0, th2=100.0, hyst=0.0, dwell=0.0):
    ip = np.zeros(NP_I, dtype=np.int64)
    ip[P_CTL], ip[P_CTL_WIN], ip[P_CTL_LOG] = 1, WIN, LOG
    fp = np.zeros(NF_P)
    fp[F_CTL_PERIOD], fp[F_CTL_ALPHA], fp[F_CTL_TH1], fp[F_CTL_TH2] = period, alpha, th1, th2
    fp[F_CTL_HYST], fp[F_CTL_DWELL] = hyst, dwell
    fp[F_CTL_TAU : F_CTL_TAU + 3] = [0.0, 0.7, 0.8]
    fp[F_CTL_OMEGA : F_CTL_OMEGA + 3] = [1.0, 1.0, 0.1]
    rep_i = np.zeros((1, NRI), dtype=np.int64)
    rep_f = np.zeros((1, NRF + 2 * WIN + 3 * LOG))
    C.start(ip, fp, rep_i, rep_f, 0)
    return ip, fp, rep_i, rep_f


def _log(rep_f, k):
    at = NRF + 2 * WIN + 3 * k
    return tuple(rep_f[0, at : at + 3])


def test_window_p99_is_nearest_rank_over_what_was_observed():
    ip, fp, rep_i, rep_f = _state()
    assert C.window_p99(ip, rep_i, rep_f, 0, 1e9) == -1.0  # nothing yet
    for i, v in enumerate([5.0, 1.0, 9.0, 9.0, 3.0]):
        C.observe(ip, rep_i, rep_f, 0, v, float(i))
    # n = 5: rank ceil(0.99 * 5) = 5, the largest (ties counted once each)
    assert C.window_p99(ip, rep_i, rep_f, 0, 10.0) == 9.0
    # at t = 1.5 only the first two are observed
    assert C.window_p99(ip, rep_i, rep_f, 0, 1.5) == 5.0
    # the ring keeps the WIN most recent: after 8 more small values the 9s are gone
    for i in range(WIN):
        C.observe(ip, rep_i, rep_f, 0, 2.0, 20.0 + i)
    assert C.window_p99(ip, rep_i, rep_f, 0, 100.0) == 2.0


def test_window_p99_rank_matches_numpy_for_a_larger_window():
    global WIN
    old, WIN = WIN, 300
    try:
        ip, fp, rep_i, rep_f = _state()
        x = np.random.default_rng(3).exponential(10.0, 300).round(1)  # ties included
        for v in x:
            C.observe(ip, rep_i, rep_f, 0, float(v), 0.0)
        want = np.quantile(x, 0.99, method="inverted_cdf")
        assert C.window_p99(ip, rep_i, rep_f, 0, 1.0) == want
    finally:
        WIN = old


def test_thresholds_switch_regimes_and_apply_the_table():
    ip, fp, rep_i, rep_f = _state()
    assert (rep_f[0, RF_TAU], rep_f[0, RF_OMEGA]) == (0.0, 1.0)
    C.observe(ip, rep_i, rep_f, 0, 50.0, 10.0)  # between th1 = 10 and th2 = 100
    C.tick(ip, fp, rep_i, rep_f, 0, 99.0)  # no boundary yet (period 100)
    assert rep_i[0, RI_REGIME] == 0
    C.tick(ip, fp, rep_i, rep_f, 0, 100.0)
    assert rep_i[0, RI_REGIME] == 1 and (rep_f[0, RF_TAU], rep_f[0, RF_OMEGA]) == (0.7, 1.0)
    C.observe(ip, rep_i, rep_f, 0, 500.0, 150.0)
    C.tick(ip, fp, rep_i, rep_f, 0, 200.0)
    assert rep_i[0, RI_REGIME] == 2 and rep_f[0, RF_TAU] == pytest.approx(0.8)
    assert rep_f[0, RF_OMEGA] == pytest.approx(0.1)
    assert rep_i[0, RI_SWITCHES] == 2
    assert _log(rep_f, 0) == (100.0, 0.0, 1.0) and _log(rep_f, 1) == (200.0, 1.0, 2.0)
    # time in regime 0 was [0, 100), in regime 1 [100, 200)
    assert rep_f[0, RF_REGT] == 100.0 and rep_f[0, RF_REGT + 1] == 100.0


def test_ewma_weights_the_newest_p99():
    ip, fp, rep_i, rep_f = _state(alpha=0.25, th1=1e6, th2=2e6)
    C.observe(ip, rep_i, rep_f, 0, 40.0, 1.0)
    C.tick(ip, fp, rep_i, rep_f, 0, 100.0)
    assert rep_f[0, RF_EWMA] == 40.0  # the first value starts the average
    C.observe(ip, rep_i, rep_f, 0, 80.0, 101.0)  # window P99 is now 80
    C.tick(ip, fp, rep_i, rep_f, 0, 300.0)  # two boundaries: 200 and 300
    e = 40.0
    for _ in range(2):
        e = 0.25 * 80.0 + 0.75 * e
    assert rep_f[0, RF_EWMA] == pytest.approx(e)


def test_hysteresis_needs_the_margin_both_ways():
    ip, fp, rep_i, rep_f = _state(th1=100.0, th2=1000.0, hyst=0.2)
    C.observe(ip, rep_i, rep_f, 0, 110.0, 0.0)  # above th1 but not by 20%
    C.tick(ip, fp, rep_i, rep_f, 0, 100.0)
    assert rep_i[0, RI_REGIME] == 0
    C.observe(ip, rep_i, rep_f, 0, 125.0, 150.0)  # window P99 125 >= 120
    C.tick(ip, fp, rep_i, rep_f, 0, 200.0)
    assert rep_i[0, RI_REGIME] == 1
    # falling to 90 (below th1 but above 80) keeps it in transition; 70 brings it back
    for _ in range(WIN):
        C.observe(ip, rep_i, rep_f, 0, 90.0, 250.0)
    C.tick(ip, fp, rep_i, rep_f, 0, 300.0)
    assert rep_i[0, RI_REGIME] == 1
    for _ in range(WIN):
        C.observe(ip, rep_i, rep_f, 0, 70.0, 350.0)
    C.tick(ip, fp, rep_i, rep_f, 0, 400.0)
    assert rep_i[0, RI_REGIME] == 0


def test_min_dwell_holds_a_regime():
    ip, fp, rep_i, rep_f = _state(dwell=250.0)
    C.observe(ip, rep_i, rep_f, 0, 50.0, 0.0)
    C.tick(ip, fp, rep_i, rep_f, 0, 200.0)  # boundaries 100, 200: both within 250 ms of t = 0
    assert rep_i[0, RI_REGIME] == 0
    C.tick(ip, fp, rep_i, rep_f, 0, 300.0)
    assert rep_i[0, RI_REGIME] == 1
    for _ in range(WIN):
        C.observe(ip, rep_i, rep_f, 0, 1.0, 310.0)
    C.tick(ip, fp, rep_i, rep_f, 0, 500.0)  # 400 and 500 are within 250 ms of the switch at 300
    assert rep_i[0, RI_REGIME] == 1
    C.tick(ip, fp, rep_i, rep_f, 0, 600.0)
    assert rep_i[0, RI_REGIME] == 0


def test_switch_log_keeps_the_first_switches_and_counts_all():
    ip, fp, rep_i, rep_f = _state()
    t = 0.0
    for k in range(LOG + 3):
        for _ in range(WIN):
            C.observe(ip, rep_i, rep_f, 0, 50.0 if k % 2 == 0 else 1.0, t)
        t += 100.0
        C.tick(ip, fp, rep_i, rep_f, 0, t)
    assert rep_i[0, RI_SWITCHES] == LOG + 3
    assert [_log(rep_f, k)[2] for k in range(LOG)] == [1.0, 0.0, 1.0, 0.0]


def _templates(policy: PolicySpec, c: int) -> CellSpec:
    return CellSpec(
        cluster=ClusterSpec(n_prefill=1, n_decode=2),
        workload=WorkloadSpec(isl=Dist("fixed", 128), osl=Dist("fixed", 64), prefix_groups=5, prefix_ratio=1.0,
                              concurrency=c),
        policy=policy,
    )  # fmt: skip


def test_adaptive_policy_fires_only_when_the_load_crosses_its_thresholds():
    ctl = ControllerSpec(threshold_unit="baseline", theta1=3.0, theta2=30.0, period_ms=100.0, min_dwell_ms=0.0)
    pol = PolicySpec(name="adaptive", kind="adaptive", controller=ctl)
    kw = dict(replicas=3, requests=400, warmup=128, seed=2, stream=4)
    low = simulate(_templates(pol, 1), **kw)
    high = simulate(_templates(pol, 256), **kw)
    assert low.replica["switches"].sum() == 0
    assert np.all(low.replica["regime_ms_below"] == low.replica["sim_ms"])
    assert high.replica["switches"].min() >= 1
    shares = sum(high.replica[f"regime_ms_{n}"] for n in ("below", "transition", "saturated"))
    np.testing.assert_allclose(shares, high.replica["sim_ms"])
    assert np.all(high.replica["regime_ms_below"] < high.replica["sim_ms"])
    log = high.extra["switch_log"]
    first = log[:, 0]
    assert np.all(first[:, 1] == 0) and np.all(first[:, 2] >= 1)
    assert not math.isnan(first[0, 0])


def test_adaptive_with_its_table_fixed_equals_the_fixed_policy():
    # thresholds never reached: the controller keeps its row 0, which is the static default
    ctl = ControllerSpec(theta1=1e9, theta2=2e9)
    kw = dict(replicas=2, requests=300, warmup=64, seed=1, stream=2)
    a = simulate(_templates(PolicySpec(kind="adaptive", controller=ctl), 32), **kw)
    b = simulate(_templates(PolicySpec(kind="kv"), 32), **kw)
    for k in a.samples:
        assert np.array_equal(a.samples[k], b.samples[k]), k
