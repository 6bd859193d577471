"""Per-replica accumulators: what the summary needs from a cell's measured requests, one row per
replica, computed as each batch of replicas leaves the kernels (the requests themselves are kept
only as far as `[run] samples` asks).

Every interval poa-mc reports is taken across replicas, so a replica's requests enter the summary
only through these numbers. The table below is the one definition of the accumulator row
(`accumulate` fills it, `poa_mc.reduce` reads it):

| column                         | dtype        | per replica, over its measured requests       |
|--------------------------------|--------------|-----------------------------------------------|
| n                              | int64        | measured requests                             |
| sum_<x>                        | float64      | sum of x for x in SUMMED (ms, tokens, blocks) |
| sum_itl_gaps                   | float64      | sum of itl_ms * (osl - 1): token-weighted ITL |
| sum_gaps                       | float64      | sum of (osl - 1)                              |
| n_itl                          | int64        | requests with osl > 1 (ITL quantiles' base)   |
| slo_met                        | int64        | requests within every [slo] bound (-1: none)  |
| min_<m>, max_<m>               | float64      | exact extremes of m in SKETCHED               |
| first_arrival_ms, last_arrival_ms | float64   | the first and the last measured arrival       |
| hist_<m>                       | int32[NBINS] | log-binned histogram of m (poa_mc.sketch); on |
|                                |              | disk the cell's non-empty span of bins:       |
|                                |              | hist_<m>_lo (int32, its first bin, every row) |
|                                |              | and hist_<m> (int32[width])                   |
| poa_actual, poa_opt            | float64      | PoA-hat window sums (NaN: no game)            |
| poa_windows                    | int64        | PoA-hat windows of the replica                |
| replica_<name>                 | as engine    | SimResult.replica's (replicas,) arrays        |
| ctl_switch_*, plan_*           | float64[S]   | the controller's / planner's event logs       |

`settings(poa, slo)` names what the row depends on beyond the simulation ([poa]'s PoA-hat keys and
[slo]); a reduction with other settings needs the samples (`[run] samples = "all"`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from poa_mc import sketch
from poa_mc.estimators import PoaHat, poa_hat_from_candidates
from poa_mc.spec import ClusterSpec, ProfileSpec

SUMMED = (
    "ttft_ms", "e2e_ms", "prefill_wait_ms", "decode_wait_ms", "onboard_ms", "osl", "prompt_blocks", "cached_blocks",
    "cached_g2", "cached_g3", "cached_g4",
)  # fmt: skip
SKETCHED = ("ttft_ms", "e2e_ms", "itl_ms")
ACC_ROW_BYTES = len(SKETCHED) * sketch.NBINS * 4 + 64 * 8  # a replica's row: histograms and ~64 numbers
POA_KEYS = ("stage", "window", "slots", "cost", "overlap_weight", "freeze", "pricing")
SWITCH_LOG_COLUMNS = ("ctl_switch_ms", "ctl_switch_from", "ctl_switch_to")  # 0 below, 1 transition, 2 saturated
MOVE_LOG_COLUMNS = ("plan_move_ms", "plan_n_prefill", "plan_n_decode")  # the split a planner move made


def settings(poa: dict[str, Any], slo: dict[str, Any] | None) -> str:
    """The reduction settings an accumulator row was computed with (a canonical JSON string)."""
    slo = slo or {}
    return json.dumps(
        {
            "poa": {k: poa.get(k) for k in POA_KEYS},
            "slo": {k: float(slo.get(k, 0.0)) for k in ("ttft_ms", "itl_ms")},
        },
        sort_keys=True,
    )


def accumulate(
    cols: dict[str, np.ndarray],
    replica: dict[str, np.ndarray],
    spec: dict[str, Any],
    poa: dict[str, Any],
    slo: dict[str, Any] | None = None,
    logs: dict[str, np.ndarray | None] | None = None,
) -> dict[str, np.ndarray]:
    """The accumulator rows (module table) of R replicas.

    cols: the measured requests' arrays, (R, N) each, candidates (R, N, W) included when recorded
    (SimResult.samples and .candidates in one dict); replica: SimResult.replica; spec: the cell's
    spec as a dict (cells.parquet's spec_json); logs: SimResult.extra's switch_log / move_log.
    """
    ttft = _dense(cols["ttft_ms"])
    r, n = ttft.shape
    acc: dict[str, np.ndarray] = {"n": np.full(r, n, dtype=np.int64)}
    osl = _dense(cols["osl"])
    gaps = np.maximum(osl - 1, 0)
    for name in SUMMED:
        if name in cols:
            acc[f"sum_{name}"] = _dense(cols[name]).sum(axis=1)
    itl = _dense(cols["itl_ms"])
    acc["sum_itl_gaps"] = (itl * gaps).sum(axis=1)
    acc["sum_gaps"] = gaps.sum(axis=1)
    has_gap = gaps > 0
    acc["n_itl"] = has_gap.sum(axis=1).astype(np.int64)
    acc["slo_met"] = _slo_met(slo or {}, ttft, itl, gaps)
    if "arrival_ms" in cols:
        arrival = _dense(cols["arrival_ms"])
        acc["first_arrival_ms"], acc["last_arrival_ms"] = arrival.min(axis=1), arrival.max(axis=1)
    for name in SKETCHED:
        x = ttft if name == "ttft_ms" else itl if name == "itl_ms" else _dense(cols[name])
        keep = has_gap if name == "itl_ms" else None  # ITL quantiles: requests with a gap to time
        m = name.removesuffix("_ms")
        masked_lo = np.where(keep, x, np.inf) if keep is not None else x
        masked_hi = np.where(keep, x, -np.inf) if keep is not None else x
        acc[f"min_{m}"] = masked_lo.min(axis=1)
        acc[f"max_{m}"] = masked_hi.max(axis=1)
        acc[f"hist_{m}"] = sketch.histograms(x, keep)
    actual, opt, windows = poa_hat_sums(cols, spec, poa)
    acc["poa_actual"], acc["poa_opt"] = actual, opt
    acc["poa_windows"] = np.full(r, windows, dtype=np.int64)
    for name, arr in replica.items():
        arr = np.asarray(arr)
        if arr.ndim == 1:
            acc[f"replica_{name}"] = arr
    for key, names in (("switch_log", SWITCH_LOG_COLUMNS), ("move_log", MOVE_LOG_COLUMNS)):
        log = (logs or {}).get(key)
        if log is not None:
            for i, name in enumerate(names):
                acc[name] = np.asarray(log[:, :, i], dtype=np.float64)
    return acc


def _dense(x: np.ndarray) -> np.ndarray:
    """A per-request column as a C-ordered float64 array: numpy's pairwise sums then add in one
    order whatever layout the kernels' outputs came in (a strided view, a device copy), so a
    replica's sums are the same bits on either target and in any batch."""
    return np.ascontiguousarray(x, dtype=np.float64)


def _slo_met(slo: dict[str, Any], ttft: np.ndarray, itl: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    """Requests within every bound of [slo] (-1 throughout without one)."""
    bound_ttft, bound_itl = float(slo.get("ttft_ms", 0.0)), float(slo.get("itl_ms", 0.0))
    if bound_ttft <= 0 and bound_itl <= 0:
        return np.full(ttft.shape[0], -1, dtype=np.int64)
    ok = np.ones(ttft.shape, dtype=bool)
    if bound_ttft > 0:
        ok &= ttft <= bound_ttft
    if bound_itl > 0:
        ok &= (gaps == 0) | (itl <= bound_itl)  # a one-token answer has no inter-token gap to miss
    return ok.sum(axis=1).astype(np.int64)


def poa_hat_sums(
    cols: dict[str, np.ndarray], spec: dict[str, Any], poa: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, int]:
    """PoA-hat's per-replica window sums (ACTUAL, OPT) and windows per replica over the routing
    decision [poa] stage names (poa_mc.estimators): its candidate columns, the worker it chose,
    what it booked there, and its windows in decision order. NaN sums and 0 windows where there is
    no game (one candidate, a planner moving workers, or no candidates recorded)."""
    r, n = np.shape(cols["ttft_ms"])
    nan = (np.full(r, np.nan), np.full(r, np.nan), 0)
    cluster = ClusterSpec(**spec["cluster"])
    stage, lo, k = cluster.poa_stage(poa.get("stage", "auto"))
    if spec.get("planner"):
        return nan  # the candidates change as the planner moves workers: not a fixed game
    if k < 2 or not {"cand_tokens", "cand_blocks", f"{stage}_added_tokens"} <= set(cols):
        return nan  # one candidate is no game: PoA-hat is undefined (null), not a number
    tokens = np.asarray(cols["cand_tokens"])[:, :, lo : lo + k]
    blocks = np.asarray(cols["cand_blocks"])[:, :, lo : lo + k]
    chosen = np.asarray(cols["prefill_worker" if stage == "prefill" else "decode_worker"])
    add_t, add_b = np.asarray(cols[f"{stage}_added_tokens"]), np.asarray(cols[f"{stage}_added_blocks"])
    ttft, isl = np.asarray(cols["ttft_ms"]), np.asarray(cols["isl"])
    obs = ttft
    # when each decision was made and when the load it booked left its worker (see estimators)
    arrival = np.asarray(cols["arrival_ms"])
    decided = np.asarray(cols["decode_decided_ms"])
    done = arrival + np.asarray(cols["e2e_ms"])
    if stage == "prefill":  # the prefill worker's booking ends with the prefill
        t_dec, rel_t, rel_b = arrival, decided, decided
    elif cluster.flow == "prefill_first":
        t_dec, rel_t, rel_b = decided, done, done
    else:  # queued prefill tokens leave by the first token at the latest, blocks at the end
        t_dec, rel_t, rel_b = arrival, arrival + ttft, done
    order = None
    if stage == "decode" and cluster.flow == "prefill_first":
        # decode decisions come as prefills end, not in arrival order: windows follow them
        order = np.argsort(decided, axis=1, kind="stable")
        omega = float(spec["policy"].get("decode_overlap_weight", 0.0))
        cost = {"ttft": "decode_step", "observed": "observed_step"}.get(poa.get("cost", "router"), "router")
        if cost == "observed_step":  # the decision's observed latency starts when it is made
            obs = ttft - (decided - arrival)
    else:
        omega = float(poa.get("overlap_weight", 1.0))
        cost = poa.get("cost", "router")
    ph: PoaHat = poa_hat_from_candidates(
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
        isl=isl,
        freeze=bool(poa.get("freeze", True)),
        pricing=poa.get("pricing", "slot"),
        decode_kv_blocks=int(cluster.decode_kv_blocks),
        ttft_ms=obs,
        decided_ms=t_dec,
        released_tokens_ms=rel_t,
        released_blocks_ms=rel_b,
        recompute_last_block=bool(cluster.recompute_last_block),
        order=order,
    )
    if not ph.defined or not ph.windows:
        return (*nan[:2], ph.windows)
    return ph.actual.astype(np.float64), ph.opt.astype(np.float64), ph.windows


def concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The accumulator rows of consecutive batches of replicas, in replica order."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def frame(acc: dict[str, np.ndarray]):
    """One row per replica (`replica` first), 2-D arrays as fixed-size list columns, histograms
    as the cell's span of non-empty bins (`_span`)."""
    import polars as pl

    r = len(acc["n"])
    cols = [pl.Series("replica", np.arange(r, dtype=np.int32))]
    for name, arr in acc.items():
        if name.startswith("hist_"):
            lo, counts = _span(arr)
            cols += [pl.Series(f"{name}_lo", lo), pl.Series(name, counts)]
        else:
            cols.append(pl.Series(name, np.ascontiguousarray(arr)))
    return pl.DataFrame(cols)


def _span(hist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bins from the first non-empty one of any row to the last: (each row's first bin, the
    same for all; (R, width) counts). A cell's requests fill a few dozen of the 2,548 bins: stored
    whole, the histograms took 0.4 s to read back at 2,560 replicas (polars decoding 20 M
    mostly-zero numbers), trimmed 5 ms."""
    used = np.flatnonzero(hist.any(axis=0))
    a, b = (int(used[0]), int(used[-1]) + 1) if used.size else (0, 1)
    return np.full(hist.shape[0], a, dtype=np.int32), np.ascontiguousarray(hist[:, a:b], dtype=np.int32)


def _unspan(df, name: str) -> np.ndarray:
    """A histogram column written by `frame` as (R, NBINS) counts again (rows of several cells,
    as `poa_mc.load(...).acc` concatenates them, may start at different bins)."""
    import polars as pl

    col, lo = df[name], df[f"{name}_lo"].to_numpy().astype(np.int64)
    out = np.zeros((len(lo), sketch.NBINS), dtype=np.int32)
    if not len(lo):
        return out
    if isinstance(col.dtype, pl.Array) and (lo == lo[0]).all():  # one cell's file
        span = col.to_numpy()
        out[:, lo[0] : lo[0] + span.shape[1]] = span
        return out
    lists = col.cast(pl.List(pl.Int32))
    lens = lists.list.len().to_numpy().astype(np.int64)
    vals = lists.explode().drop_nulls().to_numpy()  # an empty row explodes to one null
    rows = np.repeat(np.arange(len(lo)), lens)
    within = np.arange(len(vals)) - np.repeat(np.cumsum(lens) - lens, lens)
    out[rows, lo[rows] + within] = vals
    return out


def from_frame(df) -> dict[str, np.ndarray]:
    """The accumulator dict of a frame written by `frame` (in replica order), histograms (R, NBINS)."""
    if not df["replica"].is_sorted():
        df = df.sort("replica")
    out = {}
    for name in df.columns:
        if name == "replica" or (name.startswith("hist_") and name.endswith("_lo")):
            continue
        if f"{name}_lo" in df.columns:
            out[name] = _unspan(df, name)
            continue
        x = df[name].to_numpy()  # an Array column comes out 2-D (histograms before _span too)
        out[name] = x if x.dtype != object else np.stack(x)
    return out
