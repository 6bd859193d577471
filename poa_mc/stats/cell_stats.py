"""The statistics of one cell, from its per-replica accumulators (poa_mc.stats.accumulate): one
summary.parquet row with an interval beside each figure (columns.SUMMARY_FIGURES declares them),
and the per-replica social costs and planner moves the run's reduction (poa_mc.stats.reduce) pools
across cells. Kept apart from that reduction because a cell's figures depend on nothing but its own
accumulators and spec: the runner works them out as each cell finishes, and a new summary figure is
one `_put` in `cell_stats` here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_json import spec_from_json
from poa_mc.model.spec_planner import budget_splits
from poa_mc.model.spec_policy import REGIMES
from poa_mc.stats import sketch
from poa_mc.stats.counterfactual import SOCIAL_COSTS, social_cost_per_replica
from poa_mc.stats.games import planner_runs
from poa_mc.stats.intervals import Estimate, ratio_interval, t_interval
from poa_mc.stats.poa_hat import PoaHat
from poa_mc.stats.proportions import clip_share, proportion_interval, rate_interval
from poa_mc.stats.quantiles import pooled_quantiles
from poa_mc.stats.warmup import check as warmup_check


@dataclass
class CellStats:
    row: dict[str, Any]
    social: dict[str, np.ndarray] = field(default_factory=dict)  # per-replica social costs by kind
    planner: Any = None  # poa_mc.stats.games.PlannerRuns of a planner cell
    # per-replica (numerator, denominator) of the rates compared across policies: with [slo], goodput
    rates: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _put(row: dict[str, Any], name: str, est: Estimate) -> None:
    row[name], row[f"{name}_lo"], row[f"{name}_hi"] = est.value, est.lo, est.hi


def cell_stats(
    acc: dict[str, np.ndarray], cell: dict[str, Any], poa: dict[str, Any], warmup: int = 0, *, steady: bool = True
) -> CellStats:
    """Statistics of one cell from its per-replica accumulators (poa_mc.stats.accumulate); `warmup`:
    the run's warm-up requests per replica (the warm-up check's suggestion adds to it). `steady=False`
    (a schedule's stage, poa_mc.stats.stages) reports an open loop's offered rate without the
    stability verdict, which nulls the figures of a cell that falls behind; a schedule's whole run
    is not one steady state either."""
    n_req = acc["n"]
    r = len(n_req)
    if r == 0 or not (n_req == n_req[0]).all():
        raise ValueError(f"cell {cell['cell_id']}: replicas have unequal request counts")
    n = int(n_req[0])
    spec = spec_from_json(cell["spec_json"])
    staged = bool(spec.workload.schedule)  # a schedule's whole run: no one steady state either
    steady = steady and not staged
    row: dict[str, Any] = {"cell_id": cell["cell_id"], "replicas": r, "requests": n}

    def mean(name: str) -> np.ndarray:
        return acc[f"sum_{name}"] / n

    def q(metric: str, p: float) -> np.ndarray:  # each replica's own quantile (a "run" figure)
        h = f"hist_{metric}"
        return sketch.quantile(acc[h], p, acc[f"min_{metric}"], acc[f"max_{metric}"], acc.get(f"{h}_lo", 0))

    def pooled(metric: str, ps: tuple[int, ...]) -> None:  # the cell's quantiles, replicas as clusters
        h = f"hist_{metric}"
        lo, hi, first = acc[f"min_{metric}"], acc[f"max_{metric}"], acc.get(f"{h}_lo", 0)
        for p, est in zip(ps, pooled_quantiles(acc[h], tuple(p / 100 for p in ps), lo, hi, first)):
            _put(row, f"{metric}_p{p}_ms", Estimate(est.value, est.lo, est.hi))

    _put(row, "ttft_mean_ms", t_interval(mean("ttft_ms")))
    pooled("ttft", (50, 90, 99))
    # the mean over replicas of each replica's P99: what a benchmark of `requests` requests reports
    _put(row, "ttft_p99_run_ms", t_interval(q("ttft", 0.99)))
    # Token-weighted mean ITL (sum of gaps / number of gaps), as Dynamo reports it.
    _put(
        row,
        "itl_mean_ms",
        ratio_interval(acc["sum_itl_gaps"], acc["sum_gaps"]) if acc["sum_gaps"].sum() else _NAN,
    )
    # per-request ITL (TPOT) quantiles, over requests with at least one gap (osl > 1)
    pooled("itl", (50, 90, 99))
    _put(row, "e2e_mean_ms", t_interval(mean("e2e_ms")))
    pooled("e2e", (99,))
    for name in ("prefill_wait_ms", "decode_wait_ms"):
        if f"sum_{name}" in acc:
            _put(row, name.replace("_ms", "_mean_ms"), t_interval(mean(name)))
    if spec.workload.client is not None and "sum_client_wait_ms" in acc:
        # a modelled load generator (poa_mc/kernels/client.py): TTFT and E2E above are what the client
        # sees; the server's part starts at the frontend, client_wait_mean_ms later on average
        wait = t_interval(mean("client_wait_ms"))
        _put(row, "client_wait_mean_ms", replace(wait, lo=max(wait.lo, 0.0)))
        _put(row, "server_ttft_mean_ms", t_interval(mean("ttft_ms") - mean("client_wait_ms")))
    if spec.cluster.flow == "prefill_first" and "sum_transfer_ms" in acc:
        # from the reads' start to the KV's arrival: per decode worker, samples.parquet's transfer_ms
        xfer = t_interval(mean("transfer_ms"))
        _put(row, "transfer_mean_ms", replace(xfer, lo=max(xfer.lo, 0.0)))

    open_loop = spec.workload.arrival != "closed"
    num, den = request_rate(acc, n, open_loop=open_loop)
    _put(row, "throughput_rps", ratio_interval(num, den))
    _put(row, "output_tps", ratio_interval(num * acc["sum_osl"] / n, den))
    cached, prompt = acc["sum_cached_blocks"], acc["sum_prompt_blocks"]
    _put(row, "hit_rate", proportion_interval(cached, prompt))
    if "sum_cached_g2" in acc:  # per KV tier (docs/tiers.md): G1 is what the lower tiers did not serve
        # runs written before G4 have no sum_cached_g4 (and no G4)
        lower = {k: acc[f"sum_cached_{k}"] for k in ("g2", "g3", "g4") if f"sum_cached_{k}" in acc}
        for k, hits in {"g1": cached - sum(lower.values()), **lower}.items():
            _put(row, f"hit_rate_{k}", proportion_interval(hits, prompt))
        onb = t_interval(mean("onboard_ms"))
        _put(row, "onboard_ms_mean", replace(onb, lo=max(onb.lo, 0.0)))  # a time: never below 0
    goodput = _slo_stats(row, acc["slo_met"], n, num, den)
    _worker_stats(row, acc, spec)
    if {"replica_preemptions", "replica_simulated"} <= set(acc):
        # decode preemptions under KV pressure, per simulated request (warm-up and tail included)
        pre = acc["replica_preemptions"].astype(np.float64)
        _put(row, "preemptions_per_request", rate_interval(pre, acc["replica_simulated"].astype(np.float64)))
    row["replicas_identical"] = _identical(acc)
    # an open loop's first queue sets its relaxation time (poa_mc.stats.warmup)
    rho = row.get("prefill_util", math.nan) if open_loop else math.nan
    n_p = int(spec.cluster.n_prefill or 1)
    warm = warmup_check(acc.get("batch_ttft"), n, warmup, rho, n_p)
    # a schedule's run moves from load to load, and a stage may be a transient on purpose: its drift
    # says how far from a steady state a stage was, and no warm-up is suggested for either
    row["warmup_drift"] = None if staged else warm.drift
    row["warmup_suggested"] = warm.suggested if warm.transient and steady else None

    stage, _, k = spec.cluster.poa_stage(poa.get("stage", "auto"))
    row["poa_stage"], row["poa_candidates"] = stage, k
    windows = int(acc["poa_windows"][0])
    ph = PoaHat(
        acc["poa_actual"], acc["poa_opt"], windows, defined=bool(windows) and not np.isnan(acc["poa_opt"]).any()
    )
    _put(row, "poa_hat", ph.estimate() if ph.defined else _NAN)
    row["poa_hat_windows"] = windows * r if ph.defined else 0
    if "replica_sim_ms" in acc:
        # the adaptive controller: share of simulated time in each regime, and its switches
        sim_ms = acc["replica_sim_ms"]
        for name in REGIMES:
            share = acc[f"replica_regime_ms_{name}"] / np.where(sim_ms > 0, sim_ms, np.nan)
            _put(row, f"regime_share_{name}", clip_share(t_interval(share)))
        _put(row, "regime_switches", t_interval(acc["replica_switches"].astype(np.float64)))

    if open_loop and steady:
        _stability(row, float(spec.workload.rate_rps))
    elif open_loop and not staged:
        row["offered_rps"] = float(spec.workload.rate_rps)

    social = {kind: social_cost_per_replica(kind, acc) for kind in SOCIAL_COSTS}
    row["social_cost"] = float(social[poa["social_cost"]].mean())
    rates = {"goodput": goodput} if goodput is not None and not row.get("unstable") else {}
    return CellStats(row, social, _planner_runs(acc, spec), rates)


# an open loop completes less than it is offered by more than this, beyond its interval: unstable.
# A stable queue completes what arrives (the window estimator reads +0.1% at load 0.9,
# bench/throughput_coverage.py); 2% leaves room for a transient the warm-up check reports apart.
UNSTABLE_SHORTFALL = 0.02
# figures an unstable cell has no steady-state value for: its queues grow through the run, so they
# measure the run's length, not the cluster
_NO_STEADY_STATE = (
    "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "ttft_p99_run_ms", "e2e_mean_ms", "e2e_p99_ms",
    "prefill_wait_mean_ms", "decode_wait_mean_ms", "server_ttft_mean_ms", "throughput_rps", "output_tps",
    "goodput_rps", "slo_attainment",
)  # fmt: skip


def _stability(row: dict[str, Any], offered_rps: float) -> None:
    """An open loop is unstable when the cluster completes clearly less than arrives: the upper
    bound of the completion rate's 95% interval (across replicas) below the offered rate by more
    than UNSTABLE_SHORTFALL. Its completion rate is then the cluster's capacity (`capacity_rps`),
    and the figures that assume a steady state are null."""
    row["offered_rps"] = offered_rps
    hi = row.get("throughput_rps_hi", math.nan)
    unstable = bool(math.isfinite(hi) and hi < offered_rps * (1.0 - UNSTABLE_SHORTFALL))
    row["unstable"] = unstable
    if not unstable:
        return
    for p in ("", "_lo", "_hi"):
        row[f"capacity_rps{p}"] = row[f"throughput_rps{p}"]
    for name in _NO_STEADY_STATE:
        for p in ("", "_lo", "_hi"):
            if f"{name}{p}" in row:
                row[f"{name}{p}"] = None
    row["warmup_suggested"] = None  # no warm-up reaches a steady state that does not exist


_NAN = Estimate(math.nan, math.nan, math.nan)


def _identical(acc: dict[str, np.ndarray]) -> bool:
    """Every replica the same to the bit (a deterministic cell: its streams drive nothing random)?
    Its intervals then have zero width because the replicas agree, not because the figure is
    known to that precision about anything but this one deterministic run."""
    keys = [k for k in ("sum_ttft_ms", "sum_e2e_ms", "sum_itl_gaps", "max_ttft", "max_e2e") if k in acc]
    return len(acc["n"]) > 1 and all(bool((acc[k] == acc[k][0]).all()) for k in keys)


def _planner_runs(acc: dict[str, np.ndarray], spec: CellSpec) -> Any:
    """A planner cell's moves, from its per-replica move log (poa_mc.stats.games.planner_runs)."""
    pl_spec = spec.planner
    if pl_spec is None or "replica_measured_ms" not in acc:
        return None

    path = budget_splits(int(pl_spec.gpu_budget), int(pl_spec.prefill_gpus), int(pl_spec.decode_gpus))
    end = acc["replica_sim_ms"]
    begin = end - acc["replica_measured_ms"]
    r = len(end)
    if "plan_move_ms" in acc:
        ms, n_p = acc["plan_move_ms"].astype(np.float64), acc["plan_n_prefill"].astype(np.float64)
    else:  # no move logged (log_moves = 0)
        ms = n_p = np.full((r, 1), np.nan)
    start = (int(spec.cluster.n_prefill), int(spec.cluster.n_decode))
    return planner_runs(path, start, ms, n_p, begin, end)


def request_rate(acc: dict[str, np.ndarray], n: int, open_loop: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The steady-state request rate as a ratio of per-replica sums (num, den), across replicas as
    hit_rate (a per-replica ratio would carry the Jensen bias of a noisy denominator: +3% at 40
    requests per replica).

    Open loop: completions (warm-up requests included) between the first and the last measured
    arrival, over that window (replica_done_in_window over last - first arrival, s). The window
    ends at an arrival, not at a completion: the last measured completion is by construction a
    straggler, and a window ending there read the rate high (M/M/1 at load 0.9, 16 replicas x 400
    requests: +3.1%, the interval holding the rate in 30 of 60 cells; now +0.1% and 55 of 60:
    bench/throughput_coverage.py). A stable queue completes what arrives; an overloaded one completes less,
    and this counts what it completed.

    Closed loop: Little's law, the mean number of requests in flight over the measurement window
    (the kernels' integral, replica_inflight_ms over replica_measured_ms) over the mean time one
    spends in flight (mean e2e, s). Dividing n by first arrival -> last completion instead adds one
    response time to the span, a bias of about C / n (-29% at the quickstart's C = 160, n = 400;
    that finite-run figure, what Dynamo's replay reports, stays as replica_window_ms); counting
    arrivals over their span misreads clients that move in lockstep.

    A schedule's stage (poa_mc.stats.stages) carries `bench_span_s`, its first arrival to its last
    completion: the stage's n requests over that span, what a benchmark reports for the stage.

    Without these counters (a stand-in engine, an older run): n - 1 arrivals over their span."""
    if "bench_span_s" in acc:
        return np.full(len(acc["n"]), float(n)), acc["bench_span_s"]
    arrivals = {"first_arrival_ms", "last_arrival_ms"} <= set(acc)
    if open_loop and arrivals and "replica_done_in_window" in acc and n >= 2:
        span = (acc["last_arrival_ms"] - acc["first_arrival_ms"]) / 1000.0
        return acc["replica_done_in_window"].astype(np.float64), span
    if not open_loop and {"replica_inflight_ms", "replica_measured_ms"} <= set(acc):
        span = acc["replica_measured_ms"]
        in_flight = np.where(span > 0, acc["replica_inflight_ms"] / np.where(span > 0, span, 1.0), np.nan)
        return in_flight, acc["sum_e2e_ms"] / n / 1000.0
    if not arrivals or n < 2:
        nan = np.full(len(acc["n"]), np.nan)
        return nan, nan
    return np.full(len(acc["n"]), n - 1.0), (acc["last_arrival_ms"] - acc["first_arrival_ms"]) / 1000.0


def _slo_stats(
    row: dict[str, Any], met: np.ndarray, n: int, num: np.ndarray, den: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """slo_attainment (share of measured requests within every bound of [slo]) and goodput_rps
    (that share of the request rate, num / den as request_rate); null without an [slo] table.
    Returns goodput's per-replica numerator and denominator (None without [slo])."""
    if (met < 0).any():
        for name in ("slo_attainment", "goodput_rps"):
            _put(row, name, _NAN)
        return None
    share = met.astype(np.float64) / n
    _put(row, "slo_attainment", proportion_interval(met.astype(np.float64), np.full(len(met), float(n))))
    _put(row, "goodput_rps", ratio_interval(num * share, den))
    return num * share, den


def _worker_stats(row: dict[str, Any], acc: dict[str, np.ndarray], spec: CellSpec) -> None:
    """Utilisation of each pool (share of worker time in a pass), mean running decode batch and
    KV occupancy (blocks held by requests over capacity), from the engine's time integrals over
    the measured part of the run (first measured arrival to the end)."""
    names = ("prefill_busy_ms", "decode_busy_ms", "decode_batch_ms", "decode_kv_block_ms", "measured_ms")
    # a planner moves workers between pools: shares of a fixed worker count would mean nothing
    if spec.planner is not None or not all(f"replica_{c}" in acc for c in names):
        for c in ("prefill_util", "decode_util", "decode_batch_mean", "kv_occupancy_mean"):
            _put(row, c, _NAN)
        return
    col = {c: acc[f"replica_{c}"] for c in names}
    span = np.where(col["measured_ms"] > 0, col["measured_ms"], np.nan)
    cluster = spec.cluster
    n_p = 0 if cluster.flow == "aggregated" else int(cluster.n_prefill)
    n_d = int(cluster.n_decode)
    _put(row, "prefill_util", t_interval(col["prefill_busy_ms"] / (span * n_p)) if n_p else _NAN)
    _put(row, "decode_util", t_interval(col["decode_busy_ms"] / (span * n_d)))
    _put(row, "decode_batch_mean", t_interval(col["decode_batch_ms"] / (span * n_d)))
    cap = float(cluster.decode_kv_blocks)
    _put(row, "kv_occupancy_mean", t_interval(col["decode_kv_block_ms"] / (span * n_d * cap)))
    if int(cluster.gpus_per_node) > 0 and "replica_link_busy_ms" in acc:
        # nodes and links (poa_mc/kernels/links.py): the share of time the prefill nodes' links carry a
        # transfer (a shared link runs at full rate whenever one is on it)
        nodes = cluster.nodes()
        senders = {nodes[w] for w in range(n_p) if any(nodes[d] != nodes[w] for d in range(n_p, n_p + n_d))}
        if senders:
            _put(row, "link_util", t_interval(acc["replica_link_busy_ms"] / (span * len(senders))))
