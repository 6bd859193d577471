"""Accumulators on disk -> summary.parquet (one row per cell) and poa.parquet (one row per point).

Works from the run directory alone (manifest, cells.parquet, acc/: per-replica accumulators,
poa_mc.stats.accumulate), one cell at a time; a reduction with other [poa] settings than the run's
recomputes a cell's accumulators from its samples (which it must then have kept in full).
Deterministic: the bootstrap generators are seeded from the run seed and the cell id / point
stream, so reducing the same run twice gives the same bytes (the resume guarantee relies on it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from poa_mc.io.files import atomic_write_parquet
from poa_mc.io.store import RunDir, RunDirError
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_json import spec_from_json
from poa_mc.model.spec_planner import budget_splits
from poa_mc.model.spec_policy import REGIMES
from poa_mc.stats import columns, sketch
from poa_mc.stats.accumulate import MOVE_LOG_COLUMNS, POA_KEYS, SWITCH_LOG_COLUMNS, accumulate, from_frame, settings
from poa_mc.stats.counterfactual import (
    SOCIAL_COSTS,
    Counterfactual,
    counterfactual_poa,
    ratio_to_best,
    social_cost_per_replica,
)
from poa_mc.stats.games import cache_game_frame, pd_game_frame, planner_frame, planner_moves_frame, planner_runs
from poa_mc.stats.intervals import Estimate, ratio_interval, t_interval
from poa_mc.stats.knee import knee_analysis
from poa_mc.stats.poa_hat import PoaHat
from poa_mc.stats.proportions import clip_share, proportion_interval, rate_interval
from poa_mc.stats.quantiles import pooled_quantiles
from poa_mc.stats.warmup import check as warmup_check


class IncompleteRunError(RunDirError):
    """Some cells of the grid are not complete yet (a shard still running, or a killed run)."""


@dataclass
class CellStats:
    row: dict[str, Any]
    social: dict[str, np.ndarray] = field(default_factory=dict)  # per-replica social costs by kind
    planner: Any = None  # poa_mc.stats.games.PlannerRuns of a planner cell


def _put(row: dict[str, Any], name: str, est: Estimate) -> None:
    row[name], row[f"{name}_lo"], row[f"{name}_hi"] = est.value, est.lo, est.hi


def cell_stats(acc: dict[str, np.ndarray], cell: dict[str, Any], poa: dict[str, Any], warmup: int = 0) -> CellStats:
    """Statistics of one cell from its per-replica accumulators (poa_mc.stats.accumulate); `warmup`:
    the run's warm-up requests per replica (the warm-up check's suggestion adds to it)."""
    n_req = acc["n"]
    r = len(n_req)
    if r == 0 or not (n_req == n_req[0]).all():
        raise ValueError(f"cell {cell['cell_id']}: replicas have unequal request counts")
    n = int(n_req[0])
    spec = spec_from_json(cell["spec_json"])
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
    num, den = _request_rate(acc, n, open_loop=open_loop)
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
    _slo_stats(row, acc["slo_met"], n, num, den)
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
    row["warmup_drift"] = warm.drift
    row["warmup_suggested"] = warm.suggested if warm.transient else None

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

    social = {kind: social_cost_per_replica(kind, acc) for kind in SOCIAL_COSTS}
    row["social_cost"] = float(social[poa["social_cost"]].mean())
    return CellStats(row, social, _planner_runs(acc, spec))


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


def _request_rate(acc: dict[str, np.ndarray], n: int, open_loop: bool = False) -> tuple[np.ndarray, np.ndarray]:
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

    Without these counters (a stand-in engine, an older run): n - 1 arrivals over their span."""
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


def _slo_stats(row: dict[str, Any], met: np.ndarray, n: int, num: np.ndarray, den: np.ndarray) -> None:
    """slo_attainment (share of measured requests within every bound of [slo]) and goodput_rps
    (that share of the request rate, num / den as _request_rate); null without an [slo] table."""
    if (met < 0).any():
        for name in ("slo_attainment", "goodput_rps"):
            _put(row, name, _NAN)
        return
    share = met.astype(np.float64) / n
    _put(row, "slo_attainment", proportion_interval(met.astype(np.float64), np.full(len(met), float(n))))
    _put(row, "goodput_rps", ratio_interval(num * share, den))


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


def samples_to_columns(df: pl.DataFrame) -> dict[str, np.ndarray]:
    """A samples file back as accumulate()'s per-request input: (R, N[, W]) columns."""
    df = df.sort(["replica", "seq"])
    r = df["replica"].n_unique()
    n = df.height // r
    if r * n != df.height:
        raise ValueError("replicas have unequal request counts")
    cols = {}
    for name in df.columns:
        s = df[name]
        if name == "replica":
            continue
        if isinstance(s.dtype, pl.Array):
            cols[name] = s.to_numpy().reshape(r, n, s.dtype.size)
        else:
            cols[name] = s.to_numpy().reshape(r, n)
    return cols


def reduce_run(
    root: str | Path,
    *,
    allow_partial: bool = False,
    overrides: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    stats: dict[str, CellStats] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rebuild summary.parquet and poa.parquet from the accumulators of a run directory.

    `overrides` replaces [poa] keys (window, slots, cost, social_cost, overlap_weight, freeze)
    for this reduction. Raises IncompleteRunError when cells are missing (unless allow_partial:
    then only complete cells, and only points whose policies are all complete, are reported).
    `progress(done, total)`, when given, is called as each cell has been summarised. `stats`:
    cell_stats of cells whose accumulators the caller has just written with the run's settings
    (poa_mc.run.runner), taken instead of reading them back (ignored with overrides).
    """
    run_dir = RunDir(root)
    manifest = run_dir.read_manifest()
    fp = manifest["fingerprint"]
    poa = {**manifest["grid"]["poa"], **(overrides or {})}
    slo = manifest["grid"].get("slo", {})
    seed = int(manifest["seed"])
    cells = run_dir.read_cells()
    known = set(cells["cell_id"])

    on_disk = run_dir.complete_cells()
    foreign = sorted(on_disk - known)
    if foreign:
        raise RunDirError(
            f"{run_dir.acc_dir} holds cells of another grid ({', '.join(foreign[:3])}...); refusing to mix"
        )
    key = manifest.get("sim_key")

    def same_run(meta: dict) -> bool:  # this run, or a cell kept when --resume grew the grid
        return meta.get("fingerprint") == fp or (key is not None and meta.get("sim_key") == key)

    stale = sorted(c for c in on_disk if not same_run(run_dir.read_meta(c) or {}))
    if stale:
        raise RunDirError(
            f"cells {', '.join(stale[:3])} were written by a different run "
            f"({_how_different(run_dir.read_meta(stale[0]) or {}, manifest)}); refusing to mix"
        )
    engines = {}
    for c in sorted(on_disk):
        engines.setdefault((run_dir.read_meta(c) or {}).get("engine_source"), c)
    engines.pop(None, None)  # cells written before poa-mc recorded it
    if len(engines) > 1:
        (a, ca), (b, cb) = sorted(engines.items())[:2]
        raise RunDirError(
            f"cells {ca} and {cb} were simulated by engines of different sources (engine_source {a}, {b}): "
            "one summary must not mix two engines; `poa-mc run --grid GRID --out DIR --resume --recompute` "
            "simulates the older ones again"
        )
    missing = known - on_disk
    if not on_disk:
        if run_dir.samples_dir.exists() and any(run_dir.samples_dir.iterdir()):
            raise RunDirError(
                f"{run_dir.root}: samples without accumulators (acc/): written by a poa-mc before 0.2.0, "
                "which this one cannot summarise; run the grid again into a new directory"
            )
        raise IncompleteRunError(f"{run_dir.acc_dir}: no cell is complete yet; nothing to summarise")
    if missing and not allow_partial:
        raise IncompleteRunError(
            f"{len(missing)} of {len(known)} cells are not complete yet; run the remaining shards "
            f"(or `poa-mc run --resume`), or reduce with --allow-partial"
        )

    given = {} if overrides or stats is None else stats
    stats = {}
    todo = [c for c in cells.sort("index").iter_rows(named=True) if c["cell_id"] in on_disk]
    wanted = settings(poa, slo)
    for i, cell in enumerate(todo):
        cid = cell["cell_id"]
        stats[cid] = given.get(cid) or cell_stats(
            _cell_acc(run_dir, cell, poa, slo, wanted, overrides), cell, poa, int(manifest["grid"]["run"]["warmup"])
        )
        if progress is not None:
            progress(i + 1, len(todo))

    knees = _knees(cells, stats, seed, int(poa.get("bootstrap", 1000)))
    summary = _summary_frame(cells, stats, knees)
    poa_df = _poa_frame(cells, stats, poa, seed, knees)
    atomic_write_parquet(summary, run_dir.summary_path)
    atomic_write_parquet(poa_df, run_dir.poa_path)
    game = manifest["grid"].get("pd_game")
    if game and summary.height:
        static = pd_game_frame(summary, game)
        atomic_write_parquet(static, run_dir.pd_game_path)
        runs = {i: st.planner for i, st in stats.items() if st.planner is not None}
        if runs:
            atomic_write_parquet(planner_frame(cells, runs, static, summary, game), run_dir.planner_path)
            atomic_write_parquet(planner_moves_frame(cells, runs), run_dir.planner_moves_path)
    cache = manifest["grid"].get("cache_game")
    if cache and summary.height:
        kind = cache["social_cost"]
        frame = cache_game_frame(
            cells,
            {i: st.social[kind] for i, st in stats.items()},
            {i: st.row["hit_rate"] for i, st in stats.items()},
            cache,
        )
        atomic_write_parquet(frame, run_dir.cache_game_path)
    run_dir.finalize_manifest()
    return summary, poa_df


def _cell_acc(
    run_dir: RunDir, cell: dict[str, Any], poa: dict, slo: dict, wanted: str, overrides: dict | None
) -> dict[str, np.ndarray]:
    """A cell's accumulators: as the run wrote them, or recomputed from its samples when this
    reduction's [poa] / [slo] settings differ from the run's (which needs every sample)."""
    cid = cell["cell_id"]
    meta = run_dir.read_meta(cid) or {}
    if meta.get("acc_settings") == wanted:
        return from_frame(run_dir.read_acc(cid), spans=True)
    if meta.get("samples", "all") != "all" or not run_dir.sample_path(cid).exists():
        changed = sorted(set(overrides or {}) & set(POA_KEYS))
        key = f"poa.{changed[0]}" if changed else _changed_key(meta.get("acc_settings"), wanted)
        raise RunDirError(
            f"{key}: cell {cid} kept {meta.get('samples', 'no')} samples per replica (run.samples), so its "
            'summary cannot be recomputed with other [poa] / [slo] settings; run again with run.samples = "all"'
        )
    # the per-replica values and logs are the run's; the per-request reduction is redone
    old = from_frame(run_dir.read_acc(cid), spans=True)
    rep = {k.removeprefix("replica_"): v for k, v in old.items() if k.startswith("replica_")}
    logs = {}
    for key, names in (("switch_log", SWITCH_LOG_COLUMNS), ("move_log", MOVE_LOG_COLUMNS)):
        if names[0] in old:
            logs[key] = np.stack([old[c] for c in names], axis=2)
    cols = samples_to_columns(run_dir.read_samples(cid))
    return accumulate(cols, rep, spec_from_json(cell["spec_json"]), poa, slo, logs)


def _changed_key(had: str | None, wanted: str) -> str:
    """The first [poa] / [slo] key whose value differs between two settings strings."""
    if not had:
        return "poa"
    a, b = json.loads(had), json.loads(wanted)
    for section in ("poa", "slo"):
        for k in sorted(set(a.get(section, {})) | set(b.get(section, {}))):
            if a.get(section, {}).get(k) != b.get(section, {}).get(k):
                return f"{section}.{k}"
    return "poa"


def _knees(cells: pl.DataFrame, stats: dict[str, CellStats], seed: int, n_boot: int) -> dict[str, dict[str, Any]]:
    """Per cell id: the regime of its load point and the knee of its (topology, policy) curve of
    mean TTFT over load (poa_mc.stats.knee), with a bootstrap interval over replicas."""
    out: dict[str, dict[str, Any]] = {}
    for _, group in cells.group_by(["topology", "policy"], maintain_order=True):
        group = group.filter(pl.col("cell_id").is_in(list(stats))).sort("index")
        ids = group["cell_id"].to_list()
        if not ids:
            continue
        axis = group["load_axis"][0]
        load = group[axis].cast(pl.Float64).to_numpy()
        order = np.argsort(load)
        curves = [stats[ids[i]].social["mean_ttft"] for i in order]
        width = max(len(c) for c in curves)
        lat = np.full((len(curves), width), np.nan)
        for i, c in enumerate(curves):
            lat[i, : len(c)] = c
        rng = np.random.default_rng([seed, 2, len(out)])
        x = load[order]
        k = knee_analysis(x, lat, rng=rng, n_boot=n_boot)
        # the load points either side of the knee: the grid's resolution, which the interval (of the
        # hinge fitted on these points) does not include
        grid_lo = float(x[x <= k.knee].max()) if k.detected else None
        grid_hi = float(x[x >= k.knee].min()) if k.detected else None
        for j, i in enumerate(order):
            out[ids[i]] = {
                "regime": k.regimes[j], "knee": k.knee, "knee_lo": k.knee_lo, "knee_hi": k.knee_hi,
                "knee_grid_lo": grid_lo, "knee_grid_hi": grid_hi, "knee_reason": k.reason,
            }  # fmt: skip
    return out


def _summary_frame(cells: pl.DataFrame, stats: dict[str, CellStats], knees: dict[str, dict[str, Any]]) -> pl.DataFrame:
    rows = [{**s.row, **knees.get(i, {})} for i, s in stats.items()]
    body = columns.frame(rows, columns.IDENTITY[:1] + columns.SUMMARY_FIGURES, "summary.parquet")
    ids = [c.name for c in columns.IDENTITY]
    return cells.select(ids).join(body, on="cell_id", how="inner").sort("index")


def _poa_frame(
    cells: pl.DataFrame, stats: dict[str, CellStats], poa: dict[str, Any], seed: int, knees: dict[str, dict[str, Any]]
) -> pl.DataFrame:
    rows = []
    selfish = poa["selfish"]
    for (point,), group in cells.sort("index").group_by(["point"], maintain_order=True):
        ids = group["cell_id"].to_list()
        if not all(i in stats for i in ids):
            continue
        first = group.row(0, named=True)
        policies = group["policy"].to_list()
        costs = {p: stats[i].social[poa["social_cost"]] for p, i in zip(policies, ids)}
        selfish_id = ids[policies.index(selfish)]
        rng = np.random.default_rng([seed, int(first["stream"]), 1])
        cf = counterfactual_poa(costs, selfish, rng, int(poa.get("bootstrap", 1000)))
        # the same comparison on TTFT and on end-to-end latency, side by side, whatever [poa] scores
        on = {
            kind: counterfactual_poa({p: stats[i].social[f"mean_{kind}"] for p, i in zip(policies, ids)}, selfish)
            for kind in ("ttft", "e2e")
        }
        by_policy = dict(zip(policies, ids))
        s = stats[selfish_id].row
        kn = knees.get(selfish_id, {"regime": "unknown", "knee": math.nan, "knee_lo": math.nan, "knee_hi": math.nan})
        rows.append(
            {
                "point": point,
                "topology": first["topology"],
                "n_prefill": first["n_prefill"],
                "n_decode": first["n_decode"],
                "load_axis": first["load_axis"],
                "concurrency": first["concurrency"],
                "rate": first["rate"],
                "selfish_policy": selfish,
                "social_cost_kind": poa["social_cost"],
                "poa_stage": s["poa_stage"],
                # the observed cost from the client's creation of each request is said so
                "poa_cost": poa.get("cost", "router")
                + (" (client)" if poa.get("observed_from") == "client" and poa.get("cost") == "observed" else ""),
                "poa_pricing": poa.get("pricing", "slot"),
                "poa_hat": s["poa_hat"],
                "poa_hat_lo": s["poa_hat_lo"],
                "poa_hat_hi": s["poa_hat_hi"],
                "poa_cf": cf.poa,
                "poa_cf_lo": cf.lo,
                "poa_cf_hi": cf.hi,
                "best_policy": cf.best_policy,
                "social_cost_selfish": cf.cost_selfish,
                "social_cost_best": cf.cost_best,
                "policies": len(policies),
                **{f"poa_cf_{k}": c.poa for k, c in on.items()},
                **{f"poa_cf_{k}_lo": c.lo for k, c in on.items()},
                **{f"poa_cf_{k}_hi": c.hi for k, c in on.items()},
                **{f"best_policy_{k}": c.best_policy for k, c in on.items()},
                "ttft_win_slows_decode": _wins_by_slowing_decode(stats, by_policy, selfish, on["ttft"]),
                **kn,
            }
        )
    return columns.frame(rows, columns.POA, "poa.parquet")


def _wins_by_slowing_decode(
    stats: dict[str, CellStats], by_policy: dict[str, str], selfish: str, ttft: Counterfactual
) -> bool:
    """Does the policy with the best mean TTFT beat the selfish one (its counterfactual interval
    above 1) only by decoding slower: a higher mean ITL and no lower end-to-end latency (the paired
    interval of selfish over it reaches 1)? In a closed loop a slower decode keeps clients out of
    the prefill queue, which lowers TTFT without serving anyone sooner (docs/outputs.md)."""
    best = ttft.best_policy
    if best in ("", selfish) or not ttft.lo > 1.0:
        return False
    s, b = stats[by_policy[selfish]], stats[by_policy[best]]
    _, lo, _, _ = ratio_to_best(s.social["mean_e2e"], {best: b.social["mean_e2e"]})
    slower = b.row.get("itl_mean_ms", math.nan) > s.row.get("itl_mean_ms", math.nan)
    return bool(slower and not lo > 1.0)


def _how_different(meta: dict, manifest: dict) -> str:
    """Name what differs between a cell's run and this directory's: seed, version, else the grid."""
    why = []
    for key, label in (("seed", "seed"), ("poa_mc_version", "poa-mc version")):
        if meta.get(key) is not None and meta.get(key) != manifest.get(key):
            why.append(f"{label} {meta.get(key)} there, {manifest.get(key)} here")
    return "; ".join(why) or "a different grid (fingerprint)"
