"""Accumulators on disk -> summary.parquet (one row per cell) and poa.parquet (one row per point).

Works from the run directory alone (manifest, cells.parquet, acc/: per-replica accumulators,
poa_mc.stats.accumulate), one cell at a time; a reduction with other [poa] settings than the run's
recomputes a cell's accumulators from its samples (which it must then have kept in full).
Deterministic: the bootstrap generators are seeded from the run seed and the cell id / point
stream, so reducing the same run twice gives the same bytes (the resume guarantee relies on it).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from poa_mc.io.files import atomic_write_parquet
from poa_mc.io.store import RunDir, RunDirError
from poa_mc.model.sections import RunSection
from poa_mc.model.spec_json import spec_from_json
from poa_mc.stats import columns
from poa_mc.stats.accumulate import MOVE_LOG_COLUMNS, POA_KEYS, SWITCH_LOG_COLUMNS, accumulate, from_frame, settings
from poa_mc.stats.cell_stats import CellStats, cell_stats
from poa_mc.stats.counterfactual import Counterfactual, counterfactual_poa, rate_gain_to_best, ratio_to_best
from poa_mc.stats.games import cache_game_frame, pd_game_frame, planner_frame, planner_moves_frame
from poa_mc.stats.knee import knee_analysis
from poa_mc.stats.stages import stage_rows

# a stage row's cell columns, before the stage's own (poa_mc.stats.stages.STAGE_COLUMNS on)
_STAGE_CELL_COLUMNS = ("index", "topology", "n_prefill", "n_decode", "load_axis", "policy", "policy_kind")


class IncompleteRunError(RunDirError):
    """Some cells of the grid are not complete yet (a shard still running, or a killed run)."""


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
    fields = {f.name for f in dataclasses.fields(RunSection)}
    run = RunSection(**{k: v for k, v in manifest["grid"]["run"].items() if k in fields})
    for i, cell in enumerate(todo):
        cid = cell["cell_id"]
        warm = run.warmup_for(cell.get("concurrency"))  # the cell's own warm-up
        stats[cid] = given.get(cid) or cell_stats(
            _cell_acc(run_dir, cell, poa, slo, wanted, overrides), cell, poa, warm
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
    staged = [c for c in todo if spec_from_json(c["spec_json"]).workload.schedule]
    if staged:  # a [schedule]'s stages, from each cell's samples (poa_mc.stats.stages)
        rows = []
        for cell in staged:
            cols = samples_to_columns(run_dir.read_samples(cell["cell_id"]))
            for row in stage_rows(cols, cell, poa, slo):
                rows.append({k: cell[k] for k in _STAGE_CELL_COLUMNS} | row)
        atomic_write_parquet(pl.DataFrame(rows, infer_schema_length=None), run_dir.stages_path)
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
        if all("goodput" in stats[i].rates for i in ids):  # with [slo]: the best goodput over the selfish one's
            others = {p: stats[i].rates["goodput"] for p, i in zip(policies, ids) if p != selfish}
            gain = rate_gain_to_best(stats[by_policy[selfish]].rates["goodput"], others)
            goodput = {"poa_cf_goodput": gain.poa, "poa_cf_goodput_lo": gain.lo, "poa_cf_goodput_hi": gain.hi,
                       "best_policy_goodput": gain.best_policy or selfish}  # fmt: skip
        else:
            goodput = {}
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
                **goodput,
                **kn,
            }
        )
        if any(stats[i].row.get("unstable") for i in ids):
            # a policy's queue grows through the run: its costs measure the run's length, and a
            # ratio of them no steady state (cell_stats: unstable)
            rows[-1]["unstable"] = True
            for name in ("poa_cf", "poa_cf_ttft", "poa_cf_e2e", "poa_cf_goodput"):
                for p in ("", "_lo", "_hi"):
                    rows[-1][name + p] = None
            rows[-1].update(best_policy=None, best_policy_ttft=None, best_policy_e2e=None, best_policy_goodput=None,
                            ttft_win_slows_decode=None)  # fmt: skip
    return columns.frame(rows, columns.POA, "poa.parquet")


# a TTFT win worth a warning: the lower bound of the selfish policy's TTFT over the winner's above
# this (a 1% gain beyond doubt; smaller ones, however significant, change no decision)
MATERIAL_TTFT_GAIN = 1.01


def _wins_by_slowing_decode(
    stats: dict[str, CellStats], by_policy: dict[str, str], selfish: str, ttft: Counterfactual
) -> bool:
    """Does the policy with the best mean TTFT beat the selfish one (its counterfactual interval
    above MATERIAL_TTFT_GAIN) only by decoding slower: a higher mean ITL and no lower end-to-end latency (the paired
    interval of selfish over it reaches 1)? In a closed loop a slower decode keeps clients out of
    the prefill queue, which lowers TTFT without serving anyone sooner (docs/outputs.md)."""
    best = ttft.best_policy
    if best in ("", selfish) or not ttft.lo > MATERIAL_TTFT_GAIN:
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
