"""Per-replica accumulators: what the summary needs from a cell's measured requests, one row per
replica, computed as each batch of replicas leaves the kernels (the requests themselves are kept
only as far as `[run] samples` asks). The per-request numbers (counts, sums, extremes, the SLO
count, histograms) come from the kernels' tally of each replica (poa_mc/kernels/tally.py), made on the
simulating target, or from the same tally code run here over requests' columns; PoA-hat's window
sums likewise come from the kernels (poa_mc/kernels/poa_hat.py) or are worked out here from the recorded
candidates by the same solver.

Every interval poa-mc reports is taken across replicas, so a replica's requests enter the summary
only through these numbers. The table below is the one definition of the accumulator row
(`accumulate` fills it, `poa_mc.stats.cell_stats` reads it):

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
| batch_ttft                     | float64[16]  | TTFT summed over each sixteenth of the        |
|                                |              | measured requests in arrival order (warm-up   |
|                                |              | check, poa_mc.stats.warmup)                         |
| hist_<m>_lo                    | int32        | the first bin of hist_<m> (poa_mc.stats.sketch), the |
|                                |              | same in every row of a batch and of a cell    |
| hist_<m>                       | int32[width] | log-binned histogram of m from bin hist_<m>_lo |
|                                |              | on: the span of bins the rows' values fill    |
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

from poa_mc.kernels import layout as L
from poa_mc.kernels import tally as T
from poa_mc.model.spec import CellSpec
from poa_mc.stats import poa_plan, sketch
from poa_mc.stats.poa_hat import PoaHat, poa_hat_from_candidates

# poa_mc.kernels.cpu is imported where it is called: importing it builds the CPU kernels' dispatchers.

SUMMED = T.SUMMED
SKETCHED = tuple(f"{m}_ms" for m in T.SKETCHED)
# a replica's row at most, for memory checks (poa_mc.engine.memory.check_memory): ~64 numbers and its three histograms'
# spans, each at most NBINS wide (the built-in grids' widest is 615 bins: a bound, not an estimate)
ACC_ROW_BYTES = len(SKETCHED) * sketch.NBINS * 4 + 64 * 8
POA_KEYS = poa_plan.POA_KEYS
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
    spec: CellSpec,
    poa: dict[str, Any],
    slo: dict[str, Any] | None = None,
    logs: dict[str, np.ndarray | None] | None = None,
) -> dict[str, np.ndarray]:
    """The accumulator rows (module table) of R replicas.

    cols: the measured requests' arrays, (R, N) each, candidates (R, N, W) included when recorded
    (SimResult.samples and .candidates in one dict), and the kernels' tallies of them when the
    engine made them ("tally_f", "tally_h", "tally_slo": poa_mc.engine.engine.simulate's tally=True);
    replica: SimResult.replica; spec: the cell's spec;
    logs: SimResult.extra's switch_log / move_log.
    """
    tally_f, tally_h, present = _tally(cols, slo)
    acc: dict[str, np.ndarray] = {"n": tally_f[:, T.TF_N].astype(np.int64)}
    for j, name in enumerate(T.SUMMED):
        if name in present:
            acc[f"sum_{name}"] = tally_f[:, T.TF_SUM + j].copy()
    acc["sum_itl_gaps"] = tally_f[:, T.TF_SUM_ITL_GAPS].copy()
    acc["sum_gaps"] = tally_f[:, T.TF_SUM_GAPS].copy()
    acc["n_itl"] = tally_f[:, T.TF_N_ITL].astype(np.int64)
    acc["slo_met"] = tally_f[:, T.TF_SLO_MET].astype(np.int64)
    if "arrival_ms" in present:
        acc["first_arrival_ms"] = tally_f[:, T.TF_FIRST_ARR].copy()
        acc["last_arrival_ms"] = tally_f[:, T.TF_LAST_ARR].copy()
    acc["batch_ttft"] = tally_f[:, T.TF_BATCH : T.TF_BATCH + T.NB_BATCH].copy()
    for h, m in enumerate(T.SKETCHED):
        acc[f"min_{m}"] = tally_f[:, T.TF_MIN + h].copy()
        acc[f"max_{m}"] = tally_f[:, T.TF_MAX + h].copy()
        # as a span: a replica's whole histograms are 30 KB, mostly zeros, and a cell holds every
        # replica's row until it ends (25,600 replicas: 0.8 GB, and twice that joined)
        acc[f"hist_{m}_lo"], acc[f"hist_{m}"] = sketch.span(tally_h[:, h])
    actual, opt, windows = poa_hat_sums(cols, spec, poa)
    acc["poa_actual"], acc["poa_opt"] = actual, opt
    acc["poa_windows"] = np.full(tally_f.shape[0], windows, dtype=np.int64)
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


# the request fields a tally reads, in the order of poa_mc/kernels/tally.py's tally_one
TALLIED = ("arrival_ms", "ttft_ms", "e2e_ms", "itl_ms", "prefill_wait_ms", "decode_wait_ms", "onboard_ms", "osl",
           "prompt_blocks", "cached_blocks", "cached_g2", "cached_g3", "cached_g4", "client_wait_ms",
           "transfer_ms")  # fmt: skip
_TALLY_CHUNK = 64  # replicas whose columns are stacked at a time for the host's tally


def _slo_bounds(slo: dict[str, Any] | None) -> tuple[float, float]:
    slo = slo or {}
    return float(slo.get("ttft_ms", 0.0)), float(slo.get("itl_ms", 0.0))


def tally_params(slo: dict[str, Any] | None) -> np.ndarray:
    """The kernels' float parameters as far as a tally reads them (the [slo] bounds)."""
    fp = np.zeros(L.NF_P)
    fp[L.F_SLO_TTFT], fp[L.F_SLO_ITL] = _slo_bounds(slo)
    return fp


def _tally(cols: dict[str, np.ndarray], slo: dict[str, Any] | None) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """(tally_f, tally_h, the tallied fields present): the kernels' tallies when the engine made
    them, else the same numbers from the columns by the kernels' own code (poa_mc/kernels/tally.py)."""
    if "tally_f" in cols:
        made = tuple(float(b) for b in cols["tally_slo"])
        if made != _slo_bounds(slo):
            raise ValueError(f"the kernels tallied against SLO bounds {made}, this reduction has {_slo_bounds(slo)}")
        return np.asarray(cols["tally_f"]), np.asarray(cols["tally_h"]), set(TALLIED)
    from poa_mc.kernels.cpu import tally_columns

    r, n = np.shape(cols["ttft_ms"])
    present = {name for name in TALLIED if name in cols}
    fp = tally_params(slo)
    tally_f = np.empty((r, T.NTF))
    tally_h = np.zeros((r, len(T.SKETCHED), sketch.NBINS), dtype=np.int32)
    for lo in range(0, r, _TALLY_CHUNK):
        hi = min(r, lo + _TALLY_CHUNK)
        stack = np.zeros((len(TALLIED), hi - lo, n))
        for k, name in enumerate(TALLIED):
            if name in present:
                stack[k] = cols[name][lo:hi]
        tally_columns(fp, sketch.EDGES, stack, tally_f[lo:hi], tally_h[lo:hi])
    return tally_f, tally_h, present


def poa_hat_sums(
    cols: dict[str, np.ndarray], spec: CellSpec, poa: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, int]:
    """PoA-hat's per-replica window sums (ACTUAL, OPT) and windows per replica over the routing
    decision [poa] names (poa_mc.stats.poa_plan): the kernels' sums when they made them ("poa_kernel",
    with the settings they were made for, "poa_settings"), else worked out here from its
    candidate columns, the worker it chose, what it booked there, and its windows in decision
    order (poa_mc.stats.poa_hat; the same numbers). NaN sums and 0 windows where there is no game
    (one candidate, a planner moving workers, or no candidates recorded)."""
    r, n = np.shape(cols["ttft_ms"])
    nan = (np.full(r, np.nan), np.full(r, np.nan), 0)
    p = poa_plan.plan(spec, poa)
    if not p.game:
        return nan  # one candidate is no game, nor a planner's moving one: undefined (null), not a number
    made = cols.get("poa_kernel")
    if made is not None and not np.isnan(made[:, 1]).any():
        if cols.get("poa_settings") != poa_plan.settings(poa):
            raise ValueError(f"the kernels worked PoA-hat out for {cols.get('poa_settings')}, this reduction has {poa}")
        return np.array(made[:, 0]), np.array(made[:, 1]), int(made[0, 2]) if r else 0
    if not {"cand_tokens", "cand_blocks", p.added[0]} <= set(cols):
        return nan
    tokens = np.asarray(cols["cand_tokens"])[:, :, p.lo : p.lo + p.k]
    blocks = np.asarray(cols["cand_blocks"])[:, :, p.lo : p.lo + p.k]
    chosen = np.asarray(cols[p.chosen])
    add_t, add_b = (np.asarray(cols[name]) for name in p.added)
    ttft, isl = np.asarray(cols["ttft_ms"]), np.asarray(cols["isl"])
    obs = ttft
    # when each decision was made and when the load it booked left its worker (poa_mc.stats.poa_plan)
    arrival = np.asarray(cols["arrival_ms"])
    decided = np.asarray(cols["decode_decided_ms"])
    done = arrival + np.asarray(cols["e2e_ms"])
    order = None
    if p.times == "prefill":  # the prefill worker's booking ends with the prefill
        t_dec, rel_t, rel_b = arrival, decided, decided
    elif p.times == "after_prefill":
        t_dec, rel_t, rel_b = decided, done, done
        # decode decisions come as prefills end, not in arrival order: windows follow them
        order = np.argsort(decided, axis=1, kind="stable")
        if p.cost == "observed_step" and p.seen_from == "decision":  # from the decision on
            obs = ttft - (decided - arrival)
    else:  # queued prefill tokens leave by the first token at the latest, blocks at the end
        t_dec, rel_t, rel_b = arrival, arrival + ttft, done
    cluster = spec.cluster
    ph: PoaHat = poa_hat_from_candidates(
        tokens,
        blocks,
        chosen,
        added_tokens=add_t,
        added_blocks=add_b,
        window=p.window,
        slots=p.slots,
        cost=p.cost,
        block_size=int(cluster.block_size),
        overlap_weight=p.omega,
        profile=spec.profile,
        isl=isl,
        freeze=p.freeze,
        pricing=p.pricing,
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


def frame(acc: dict[str, np.ndarray]):
    """One row per replica (`replica` first), 2-D arrays as fixed-size list columns, histograms
    as the span of bins their rows fill (poa_mc.stats.sketch.span; whole (R, NBINS) ones are trimmed)."""
    import polars as pl

    r = len(acc["n"])
    cols = [pl.Series("replica", np.arange(r, dtype=np.int32))]
    for name, arr in acc.items():
        if name.startswith("hist_") and name.endswith("_lo"):
            continue
        if name.startswith("hist_"):
            first = acc.get(f"{name}_lo")
            if first is not None and len(first) and not (first == first[0]).all():
                first, arr = sketch.respan([first], [arr])  # one first bin for every row
            lo, counts = sketch.span(arr, int(first[0]) if first is not None and len(first) else 0)
            cols += [pl.Series(f"{name}_lo", lo), pl.Series(name, counts)]
        else:
            cols.append(pl.Series(name, np.ascontiguousarray(arr)))
    return pl.DataFrame(cols)


def _spans_of(df, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A histogram column written by `frame` as (first bins, counts) over the union of its rows'
    spans (rows of several cells, as `poa_mc.load(...).acc` concatenates them, start at
    different bins and come as lists)."""
    import polars as pl

    col, lo = df[name], df[f"{name}_lo"].to_numpy().astype(np.int64)
    if len(lo) and isinstance(col.dtype, pl.Array) and (lo == lo[0]).all():  # one cell's file
        return lo.astype(np.int32), np.ascontiguousarray(col.to_numpy(), dtype=np.int32)
    lists = col.cast(pl.List(pl.Int32))
    lens = lists.list.len().to_numpy().astype(np.int64)
    vals = lists.explode().drop_nulls().to_numpy()  # an empty row explodes to one null
    rows = np.repeat(np.arange(len(lo)), lens)
    at = lo[rows] + np.arange(len(vals)) - np.repeat(np.cumsum(lens) - lens, lens)  # each count's bin
    filled = vals != 0
    a, b = (int(at[filled].min()), int(at[filled].max()) + 1) if filled.any() else (0, 1)
    out = np.zeros((len(lo), b - a), dtype=np.int32)
    out[rows[filled], at[filled] - a] = vals[filled]
    return np.full(len(lo), a, dtype=np.int32), out


def from_frame(df, spans: bool = False) -> dict[str, np.ndarray]:
    """The accumulator dict of a frame written by `frame` (in replica order), histograms as whole
    (R, NBINS) rows, or with spans=True as `accumulate` makes them (hist_<m>_lo and the union of
    the rows' spans: what the reducer reads, a fraction of the memory)."""
    if not df["replica"].is_sorted():
        df = df.sort("replica")
    out = {}
    for name in df.columns:
        if name == "replica" or (name.startswith("hist_") and name.endswith("_lo")):
            continue
        if f"{name}_lo" in df.columns:
            lo, counts = _spans_of(df, name)
            if spans:
                out[f"{name}_lo"], out[name] = lo, counts
            else:
                out[name] = sketch.whole(counts, lo)
            continue
        x = df[name].to_numpy()  # an Array column comes out 2-D
        out[name] = x if x.dtype != object else np.stack(x)
    return out
