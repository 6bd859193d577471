"""Samples on disk -> summary.parquet (one row per cell) and poa.parquet (one row per point).

Works from the run directory alone (manifest, cells.parquet, samples/), one cell at a time so
memory stays bounded by the largest cell. Deterministic: the bootstrap generators are seeded from
the run seed and the cell id / point stream, so reducing the same samples twice gives the same
bytes (the resume guarantee relies on it).
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

from poa_mc.estimators import (
    Estimate,
    counterfactual_poa,
    per_replica_quantile,
    poa_hat_from_candidates,
    quantile_interval,
    ratio_interval,
    social_cost_per_replica,
    t_interval,
)
from poa_mc.knee import knee_analysis
from poa_mc.spec import REGIMES, ClusterSpec, ProfileSpec
from poa_mc.store import RunDir, RunDirError, atomic_write_parquet


class IncompleteRunError(RunDirError):
    """Some cells of the grid have no samples yet (a shard still running, or a killed run)."""


@dataclass
class CellStats:
    row: dict[str, Any]
    social: dict[str, np.ndarray] = field(default_factory=dict)  # per-replica social costs by kind
    planner: Any = None  # poa_mc.games.PlannerRuns of a planner cell


def _put(row: dict[str, Any], name: str, est: Estimate) -> None:
    row[name], row[f"{name}_lo"], row[f"{name}_hi"] = est.value, est.lo, est.hi


def _matrix(df: pl.DataFrame, name: str, r: int, n: int) -> np.ndarray:
    return df[name].to_numpy().reshape(r, n)


def cell_stats(
    df: pl.DataFrame, cell: dict[str, Any], poa: dict[str, Any], seed: int, slo: dict[str, Any] | None = None
) -> CellStats:
    """Statistics of one cell from its samples frame (rows of all replicas)."""
    df = df.sort(["replica", "seq"])
    r = df["replica"].n_unique()
    n = df.height // r
    if r * n != df.height:
        raise ValueError(f"cell {cell['cell_id']}: replicas have unequal request counts")
    spec = json.loads(cell["spec_json"])

    ttft, e2e = _matrix(df, "ttft_ms", r, n), _matrix(df, "e2e_ms", r, n)
    osl, isl = _matrix(df, "osl", r, n).astype(np.float64), _matrix(df, "isl", r, n)
    row: dict[str, Any] = {"cell_id": cell["cell_id"], "replicas": r, "requests": n}
    _put(row, "ttft_mean_ms", t_interval(ttft.mean(axis=1)))
    for q in (50, 90, 99):
        _put(row, f"ttft_p{q}_ms", quantile_interval(per_replica_quantile(ttft, q / 100)))
    gaps = np.maximum(osl - 1, 0)
    itl = _matrix(df, "itl_ms", r, n)
    # Token-weighted mean ITL (sum of gaps / number of gaps), as Dynamo reports it.
    _put(
        row,
        "itl_mean_ms",
        ratio_interval((itl * gaps).sum(axis=1), gaps.sum(axis=1))
        if gaps.sum()
        else Estimate(math.nan, math.nan, math.nan),
    )
    # per-request ITL (TPOT) quantiles, over requests with at least one gap (osl > 1)
    itl_req = np.where(gaps > 0, itl, np.nan)
    for q in (50, 90, 99):
        _put(row, f"itl_p{q}_ms", quantile_interval(_nan_quantile(itl_req, q / 100)))
    _put(row, "e2e_mean_ms", t_interval(e2e.mean(axis=1)))
    _put(row, "e2e_p99_ms", quantile_interval(per_replica_quantile(e2e, 0.99)))
    for name in ("prefill_wait_ms", "decode_wait_ms"):
        if name in df.columns:
            _put(row, name.replace("_ms", "_mean_ms"), t_interval(_matrix(df, name, r, n).mean(axis=1)))

    if "replica_window_ms" in df.columns:
        window_ms = _matrix(df, "replica_window_ms", r, n)[:, 0]
    else:
        arr = _matrix(df, "arrival_ms", r, n)
        window_ms = (arr + e2e).max(axis=1) - arr.min(axis=1)
    window_s = np.where(window_ms > 0, window_ms / 1000.0, np.nan)
    _put(row, "throughput_rps", t_interval(n / window_s))
    _put(row, "output_tps", t_interval(osl.sum(axis=1) / window_s))
    cached = _matrix(df, "cached_blocks", r, n).astype(np.float64)
    prompt = _matrix(df, "prompt_blocks", r, n).astype(np.float64)
    _put(row, "hit_rate", ratio_interval(cached.sum(axis=1), prompt.sum(axis=1)))
    if "cached_g2" in df.columns:  # per KV tier (docs/tiers.md): G1 is what the lower tiers did not serve
        lower = {k: _matrix(df, f"cached_{k}", r, n).astype(np.float64) for k in ("g2", "g3")}
        tiers = {"g1": cached - lower["g2"] - lower["g3"], **lower}
        for k, hits in tiers.items():
            _put(row, f"hit_rate_{k}", ratio_interval(hits.sum(axis=1), prompt.sum(axis=1)))
        onb = t_interval(_matrix(df, "onboard_ms", r, n).mean(axis=1))
        _put(row, "onboard_ms_mean", replace(onb, lo=max(onb.lo, 0.0)))  # a time: never below 0
    _slo_stats(row, slo or {}, ttft, itl, gaps, n, window_s)
    _worker_stats(row, df, spec, r, n)
    if {"replica_preemptions", "replica_simulated"} <= set(df.columns):
        # decode preemptions under KV pressure, per simulated request (warm-up and tail included)
        pre = _matrix(df, "replica_preemptions", r, n)[:, 0].astype(np.float64)
        sim = _matrix(df, "replica_simulated", r, n)[:, 0].astype(np.float64)
        _put(row, "preemptions_per_request", ratio_interval(pre, sim))

    _poa_hat_stage(row, df, spec, poa, r, n, isl, ttft)
    if "replica_sim_ms" in df.columns:
        # the adaptive controller: share of simulated time in each regime, and its switches
        sim_ms = _matrix(df, "replica_sim_ms", r, n)[:, 0]
        for name in REGIMES:
            share = _matrix(df, f"replica_regime_ms_{name}", r, n)[:, 0] / np.where(sim_ms > 0, sim_ms, np.nan)
            _put(row, f"regime_share_{name}", t_interval(share))
        _put(row, "regime_switches", t_interval(_matrix(df, "replica_switches", r, n)[:, 0].astype(np.float64)))

    social = {kind: social_cost_per_replica(kind, ttft, e2e) for kind in ("mean_ttft", "mean_e2e", "p99_ttft")}
    row["social_cost"] = float(social[poa["social_cost"]].mean())
    return CellStats(row, social, _planner_runs(df, spec, r, n))


def _planner_runs(df: pl.DataFrame, spec: dict, r: int, n: int) -> Any:
    """A planner cell's moves, from the log on each replica's first rows (poa_mc.games.planner_runs)."""
    pl_spec = spec.get("planner")
    if not pl_spec or "replica_measured_ms" not in df.columns:
        return None
    from poa_mc.games import planner_runs
    from poa_mc.spec import budget_splits

    path = budget_splits(int(pl_spec["gpu_budget"]), int(pl_spec["prefill_gpus"]), int(pl_spec["decode_gpus"]))
    end = _matrix(df, "replica_sim_ms", r, n)[:, 0]
    begin = end - _matrix(df, "replica_measured_ms", r, n)[:, 0]
    if "plan_move_ms" in df.columns:
        ms = _matrix(df, "plan_move_ms", r, n).astype(np.float64)
        n_p = _matrix(df, "plan_n_prefill", r, n).astype(np.float64)
    else:  # no move logged (log_moves = 0)
        ms = n_p = np.full((r, 1), np.nan)
    start = (int(spec["cluster"]["n_prefill"]), int(spec["cluster"]["n_decode"]))
    return planner_runs(path, start, ms, n_p, begin, end)


def _nan_quantile(x: np.ndarray, q: float) -> np.ndarray:
    """per_replica_quantile ignoring NaN entries (a row of NaN gives NaN)."""
    out = np.full(x.shape[0], np.nan)
    ok = ~np.all(np.isnan(x), axis=1)
    if ok.any():
        out[ok] = np.nanquantile(x[ok], q, axis=1, method="inverted_cdf")
    return out


def _slo_stats(row: dict[str, Any], slo: dict[str, Any], ttft, itl, gaps, n: int, window_s) -> None:
    """slo_attainment (share of measured requests within every bound of [slo]) and goodput_rps
    (those requests per second of the measurement window); null without an [slo] table."""
    bound_ttft, bound_itl = float(slo.get("ttft_ms", 0.0)), float(slo.get("itl_ms", 0.0))
    if bound_ttft <= 0 and bound_itl <= 0:
        for name in ("slo_attainment", "goodput_rps"):
            _put(row, name, Estimate(math.nan, math.nan, math.nan))
        return
    ok = np.ones(ttft.shape, dtype=bool)
    if bound_ttft > 0:
        ok &= ttft <= bound_ttft
    if bound_itl > 0:
        ok &= (gaps == 0) | (itl <= bound_itl)  # a one-token answer has no inter-token gap to miss
    met = ok.sum(axis=1).astype(np.float64)
    _put(row, "slo_attainment", t_interval(met / n))
    _put(row, "goodput_rps", t_interval(met / window_s))


def _worker_stats(row: dict[str, Any], df: pl.DataFrame, spec: dict, r: int, n: int) -> None:
    """Utilisation of each pool (share of worker time in a pass), mean running decode batch and
    KV occupancy (blocks held by requests over capacity), from the engine's time integrals over
    the measured part of the run (first measured arrival to the end)."""
    names = ("prefill_busy_ms", "decode_busy_ms", "decode_batch_ms", "decode_kv_block_ms", "measured_ms")
    nan = Estimate(math.nan, math.nan, math.nan)
    # a planner moves workers between pools: shares of a fixed worker count would mean nothing
    if spec.get("planner") or not all(f"replica_{c}" in df.columns for c in names):
        for c in ("prefill_util", "decode_util", "decode_batch_mean", "kv_occupancy_mean"):
            _put(row, c, nan)
        return
    col = {c: _matrix(df, f"replica_{c}", r, n)[:, 0] for c in names}
    span = np.where(col["measured_ms"] > 0, col["measured_ms"], np.nan)
    cluster = spec["cluster"]
    n_p = 0 if cluster["flow"] == "aggregated" else int(cluster["n_prefill"])
    n_d = int(cluster["n_decode"])
    _put(row, "prefill_util", t_interval(col["prefill_busy_ms"] / (span * n_p)) if n_p else nan)
    _put(row, "decode_util", t_interval(col["decode_busy_ms"] / (span * n_d)))
    _put(row, "decode_batch_mean", t_interval(col["decode_batch_ms"] / (span * n_d)))
    cap = float(cluster["decode_kv_blocks"])
    _put(row, "kv_occupancy_mean", t_interval(col["decode_kv_block_ms"] / (span * n_d * cap)))


def _poa_hat_stage(
    row: dict[str, Any], df: pl.DataFrame, spec: dict, poa: dict[str, Any], r: int, n: int, isl: np.ndarray, ttft
) -> None:
    """PoA-hat over the routing decision [poa] stage names (see poa_mc.estimators): its candidate
    columns, the worker it chose, what it booked there, and its windows in decision order."""
    cluster = ClusterSpec(**spec["cluster"])
    stage, lo, k = cluster.poa_stage(poa.get("stage", "auto"))
    row["poa_stage"] = stage
    row["poa_candidates"] = k
    row["poa_hat_windows"] = 0
    _put(row, "poa_hat", Estimate(math.nan, math.nan, math.nan))
    if spec.get("planner"):
        return  # the candidates change as the planner moves workers: not a fixed game
    if k < 2 or not {"cand_tokens", "cand_blocks", f"{stage}_added_tokens"} <= set(df.columns):
        return  # one candidate is no game: PoA-hat is undefined (null), not a number
    width = df.schema["cand_tokens"].size
    tokens = df["cand_tokens"].to_numpy().reshape(r, n, width)[:, :, lo : lo + k]
    blocks = df["cand_blocks"].to_numpy().reshape(r, n, width)[:, :, lo : lo + k]
    chosen = _matrix(df, "prefill_worker" if stage == "prefill" else "decode_worker", r, n)
    add_t = _matrix(df, f"{stage}_added_tokens", r, n)
    add_b = _matrix(df, f"{stage}_added_blocks", r, n)
    obs, isl_s = ttft, isl
    # when each decision was made and when the load it booked left its worker (see estimators)
    arrival = _matrix(df, "arrival_ms", r, n)
    decided = _matrix(df, "decode_decided_ms", r, n)
    done = arrival + _matrix(df, "e2e_ms", r, n)
    if stage == "prefill":  # the prefill worker's booking ends with the prefill
        t_dec, rel_t, rel_b = arrival, decided, decided
    elif cluster.flow == "prefill_first":
        t_dec, rel_t, rel_b = decided, done, done
    else:  # queued prefill tokens leave by the first token at the latest, blocks at the end
        t_dec, rel_t, rel_b = arrival, arrival + ttft, done
    if stage == "decode" and cluster.flow == "prefill_first":
        # decode decisions come as prefills end, not in arrival order: windows follow them
        order = np.argsort(decided, axis=1, kind="stable")

        def take(x: np.ndarray) -> np.ndarray:
            return np.take_along_axis(x, order[:, :, None] if x.ndim == 3 else order, axis=1)

        # the decode decision's observed latency starts when it is made (the prefill is behind it)
        since = ttft - (decided - arrival)
        tokens, blocks, chosen, add_t, add_b, obs, isl_s, t_dec, rel_t, rel_b = map(
            take, (tokens, blocks, chosen, add_t, add_b, since, isl, t_dec, rel_t, rel_b)
        )
        omega = float(spec["policy"].get("decode_overlap_weight", 0.0))
        cost = {"ttft": "decode_step", "observed": "observed_step"}.get(poa.get("cost", "router"), "router")
    else:
        omega = float(poa.get("overlap_weight", 1.0))
        cost = poa.get("cost", "router")
    ph = poa_hat_from_candidates(
        tokens,
        blocks,
        chosen,
        added_tokens=add_t,
        added_blocks=add_b,
        window=int(poa["window"]),
        slots=int(poa.get("slots", 0)),
        cost=cost,
        block_size=int(cluster.block_size),
        overlap_weight=omega,
        profile=ProfileSpec(**spec["profile"]),
        isl=isl_s,
        freeze=bool(poa.get("freeze", True)),
        pricing=poa.get("pricing", "slot"),
        decode_kv_blocks=int(cluster.decode_kv_blocks),
        ttft_ms=obs,
        decided_ms=t_dec,
        released_tokens_ms=rel_t,
        released_blocks_ms=rel_b,
        recompute_last_block=bool(cluster.recompute_last_block),
    )
    if ph.defined and ph.windows:
        _put(row, "poa_hat", ph.estimate())
    row["poa_hat_windows"] = ph.windows * r


_ID_COLUMNS = [
    "cell_id",
    "index",
    "point",
    "topology",
    "n_prefill",
    "n_decode",
    "load_axis",
    "concurrency",
    "rate",
    "policy",
    "policy_kind",
]


def reduce_run(
    root: str | Path,
    *,
    allow_partial: bool = False,
    overrides: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rebuild summary.parquet and poa.parquet from the samples of a run directory.

    `overrides` replaces [poa] keys (window, slots, cost, social_cost, overlap_weight, freeze)
    for this reduction. Raises IncompleteRunError when cells are missing (unless allow_partial:
    then only complete cells, and only points whose policies are all complete, are reported).
    `progress(done, total)`, when given, is called as each cell has been summarised.
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
            f"{run_dir.samples_dir} holds cells of another grid ({', '.join(foreign[:3])}...); refusing to mix"
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
    missing = known - on_disk
    if not on_disk:
        raise IncompleteRunError(f"{run_dir.samples_dir}: no cell has samples yet; nothing to summarise")
    if missing and not allow_partial:
        raise IncompleteRunError(
            f"{len(missing)} of {len(known)} cells have no samples yet; run the remaining shards "
            f"(or `poa-mc run --resume`), or reduce with --allow-partial"
        )

    stats: dict[str, CellStats] = {}
    todo = [c for c in cells.sort("index").iter_rows(named=True) if c["cell_id"] in on_disk]
    for i, cell in enumerate(todo):
        stats[cell["cell_id"]] = cell_stats(run_dir.read_samples(cell["cell_id"]), cell, poa, seed, slo)
        if progress is not None:
            progress(i + 1, len(todo))

    knees = _knees(cells, stats, seed, int(poa.get("bootstrap", 1000)))
    summary = _summary_frame(cells, stats, knees)
    poa_df = _poa_frame(cells, stats, poa, seed, knees)
    atomic_write_parquet(summary, run_dir.summary_path)
    atomic_write_parquet(poa_df, run_dir.poa_path)
    game = manifest["grid"].get("pd_game")
    if game and summary.height:
        from poa_mc.games import pd_game_frame, planner_frame, planner_moves_frame

        static = pd_game_frame(summary, game)
        atomic_write_parquet(static, run_dir.pd_game_path)
        runs = {i: st.planner for i, st in stats.items() if st.planner is not None}
        if runs:
            atomic_write_parquet(planner_frame(cells, runs, static, summary, game), run_dir.planner_path)
            atomic_write_parquet(planner_moves_frame(cells, runs), run_dir.planner_moves_path)
    cache = manifest["grid"].get("cache_game")
    if cache and summary.height:
        from poa_mc.games import cache_game_frame

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


def _knees(cells: pl.DataFrame, stats: dict[str, CellStats], seed: int, n_boot: int) -> dict[str, dict[str, Any]]:
    """Per cell id: the regime of its load point and the knee of its (topology, policy) curve of
    mean TTFT over load (poa_mc.knee), with a bootstrap interval over replicas."""
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
        k = knee_analysis(load[order], lat, rng=rng, n_boot=n_boot)
        for j, i in enumerate(order):
            out[ids[i]] = {"regime": k.regimes[j], "knee": k.knee, "knee_lo": k.knee_lo, "knee_hi": k.knee_hi}
    return out


def _summary_frame(cells: pl.DataFrame, stats: dict[str, CellStats], knees: dict[str, dict[str, Any]]) -> pl.DataFrame:
    if not stats:
        return cells.select(_ID_COLUMNS).clear()
    body = pl.DataFrame([{**s.row, **knees.get(i, {})} for i, s in stats.items()], infer_schema_length=None)
    body = body.with_columns(
        pl.col(c).cast(pl.Float64)
        for c in body.columns
        if c not in ("cell_id", "replicas", "requests", "poa_hat_windows", "poa_stage", "poa_candidates", "regime")
    )
    return cells.select(_ID_COLUMNS).join(body, on="cell_id", how="inner").sort("index")


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
                "poa_cost": poa.get("cost", "router"),
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
                **kn,
            }
        )
    schema = {
        "point": pl.Int64,
        "topology": pl.String,
        "n_prefill": pl.Int64,
        "n_decode": pl.Int64,
        "load_axis": pl.String,
        "concurrency": pl.Int64,
        "rate": pl.Float64,
        "selfish_policy": pl.String,
        "social_cost_kind": pl.String,
        "poa_stage": pl.String,
        "poa_cost": pl.String,
        "poa_pricing": pl.String,
        "poa_hat": pl.Float64,
        "poa_hat_lo": pl.Float64,
        "poa_hat_hi": pl.Float64,
        "poa_cf": pl.Float64,
        "poa_cf_lo": pl.Float64,
        "poa_cf_hi": pl.Float64,
        "best_policy": pl.String,
        "social_cost_selfish": pl.Float64,
        "social_cost_best": pl.Float64,
        "policies": pl.Int64,
        "regime": pl.String,
        "knee": pl.Float64,
        "knee_lo": pl.Float64,
        "knee_hi": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def _how_different(meta: dict, manifest: dict) -> str:
    """Name what differs between a cell's run and this directory's: seed, version, else the grid."""
    why = []
    for key, label in (("seed", "seed"), ("poa_mc_version", "poa-mc version")):
        if meta.get(key) is not None and meta.get(key) != manifest.get(key):
            why.append(f"{label} {meta.get(key)} there, {manifest.get(key)} here")
    return "; ".join(why) or "a different grid (fingerprint)"
