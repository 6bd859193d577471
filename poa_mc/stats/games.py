"""Game 1 of the paper: the prefill pool and the decode pool over a GPU budget.

Every split (nP, nD) of a budget of G GPUs, with gP GPUs per prefill worker and gD per decode
worker, is a topology of the grid (`[games.pd]` generates them: for nP = 1, 2, ..., the most decode
workers the rest of the budget holds). Each pool has its own cost at a split, measured by the
simulation: the prefill pool's is its users' TTFT, the decode pool's their ITL (summary columns,
configurable). The pools bargain over GPUs one worker at a time: a pool takes one more worker's
GPUs from the other when its relative gain per GPU exceeds the other's relative loss per GPU,

    take(A from B):  ln(c_A(s) / c_A(s')) / GPUs A gains  >  ln(c_B(s') / c_B(s)) / GPUs B gives up,

the paper's "marginal gain per GPU" compared across pools in units both share (log-relative
change: TTFT and ITL are different quantities). An **equilibrium** is a split from which neither
pool takes; best-response dynamics (the pools alternate, each taking while it gains) from every
start find them, and say whether any start cycles. On the path of splits a move and its reverse
are decided by the same comparison, so dynamics cannot cycle there and the equilibria are the
splits both neighbours point to (several, when the pool costs are not convex); the finder is
written for any move graph and reports cycles all the same. The **social optimum** minimises the
social cost (default mean end-to-end latency), and PoA_PD = social cost at the equilibrium / at
the optimum, with the worst and the best equilibrium when there are several.

Intervals (`poa_pd_interval`): the target for an equilibrium e is theta = c(e) / min_s c(s) =
max(1, max_{s != e} c(e) / c(s)), so the optimum need not be picked from the data, as in
counterfactual.counterfactual_poa. Different splits are different topologies and so independent
streams; each split's standard error of log c(s) comes from its 95% interval in the summary,
(ln hi - ln lo) / (2 t_{r-1}) (a benefit's cost 1 / value has the same). For every other split a
delta-method t-interval for log(c(e) / c(s)) (the two standard errors in quadrature, Welch-
Satterthwaite degrees of freedom), Bonferroni over the other splits, and [max(1, max_s L_s),
max(1, max_s U_s)]: it covers theta however close the ties (measured in docs/games.md) and is
[1, 1] only when every other split is confidently worse than e, not whenever e is the estimated
optimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from poa_mc.model.sections import BENEFITS
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_json import spec_from_json
from poa_mc.model.spec_planner import budget_splits as splits  # noqa: F401 - Game 1's splits, re-exported
from poa_mc.stats.counterfactual import ratio_to_best
from poa_mc.stats.intervals import _exp_or_inf, _t_ppf, _t_quantile, t_interval


@dataclass(frozen=True)
class Dynamics:
    """What best-response dynamics found on a move graph."""

    equilibria: list[int]  # nodes no player leaves
    cycles: list[list[int]] = field(default_factory=list)  # each a closed walk of the dynamics
    ends: dict[int, int] = field(default_factory=dict)  # start -> equilibrium reached (starts that cycle: none)


def best_response(n: int, moves: Callable[[int], Sequence[int]], max_steps: int = 10_000) -> Dynamics:
    """Best-response dynamics over nodes 0..n-1: `moves(i)` lists the nodes the players would move
    to from i, in the order they move (the first is taken). From every start, follow moves until a
    node without one (an equilibrium) or a revisit (a cycle)."""
    equilibria = [i for i in range(n) if not moves(i)]
    cycles: list[list[int]] = []
    ends: dict[int, int] = {}
    for start in range(n):
        seen: dict[int, int] = {}
        path: list[int] = []
        i = start
        while i not in seen and len(path) < max_steps:
            seen[i] = len(path)
            path.append(i)
            nxt = moves(i)
            if not nxt:
                ends[start] = i
                break
            i = nxt[0]
        else:
            cycle = path[seen[i] :] if i in seen else path
            canon = _canonical(cycle)
            if canon not in cycles:
                cycles.append(canon)
    return Dynamics(equilibria, cycles, ends)


def _canonical(cycle: list[int]) -> list[int]:
    k = cycle.index(min(cycle))
    return cycle[k:] + cycle[:k]


def pd_moves(
    cost_p: np.ndarray, cost_d: np.ndarray, n_p: Sequence[int], n_d: Sequence[int], gpus_p: int, gpus_d: int
) -> Callable[[int], list[int]]:
    """The move rule on splits sorted by nP: from split i the prefill pool takes (to i + 1) or the
    decode pool takes (to i - 1) when its log-relative gain per GPU exceeds the other's loss."""

    def gain(c: np.ndarray, a: int, b: int) -> float:  # ln c(a) / c(b): > 0 when b is better
        return math.log(c[a] / c[b]) if c[a] > 0 and c[b] > 0 else math.nan

    def moves(i: int) -> list[int]:
        out = []
        if i + 1 < len(n_p):  # prefill takes one more worker's GPUs
            g_p = (n_p[i + 1] - n_p[i]) * gpus_p
            g_d = (n_d[i] - n_d[i + 1]) * gpus_d
            if gain(cost_p, i, i + 1) / g_p > gain(cost_d, i + 1, i) / g_d:
                out.append(i + 1)
        if i > 0:  # decode takes one more worker's GPUs back
            g_p = (n_p[i] - n_p[i - 1]) * gpus_p
            g_d = (n_d[i - 1] - n_d[i]) * gpus_d
            if gain(cost_d, i, i - 1) / g_d > gain(cost_p, i - 1, i) / g_p:
                out.append(i - 1)
        return out

    return moves


@dataclass(frozen=True)
class Ratio:
    value: float
    lo: float
    hi: float


def ratio_of_independent(a: float, se_a: float, b: float, se_b: float, z: float = 1.959964) -> Ratio:
    """a / b with a delta-method interval on the log scale, a and b independent estimates."""
    if not (a > 0 and b > 0):
        return Ratio(math.nan, math.nan, math.nan)
    r = a / b
    s = math.sqrt((se_a / a) ** 2 + (se_b / b) ** 2)
    return Ratio(r, r * math.exp(-z * s), r * math.exp(z * s))


def _se(summary_row: dict, col: str) -> float:
    """Standard error of a summary estimate from its 95% interval across replicas (of its cost,
    1 / value, for a benefit column: the delta method's se / value^2)."""

    lo, hi, r = summary_row.get(f"{col}_lo"), summary_row.get(f"{col}_hi"), int(summary_row["replicas"])
    if lo is None or hi is None or r < 2 or not (math.isfinite(lo) and math.isfinite(hi)):
        return math.nan
    se = (hi - lo) / (2.0 * _t_quantile(r, 0.95))
    if col in BENEFITS:
        v = summary_row.get(col)
        return se / v**2 if v else math.nan
    return se


def _cost(cells: list[dict], col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A cost column over the splits, with its interval: the summary's own, or 1 / value for a
    benefit (goodput, SLO attainment, throughput), its bounds swapped."""
    v, lo, hi = (np.array([c.get(k) for c in cells], dtype=np.float64) for k in (col, f"{col}_lo", f"{col}_hi"))
    if col in BENEFITS:
        with np.errstate(divide="ignore"):
            return 1.0 / v, 1.0 / hi, 1.0 / lo
    return v, lo, hi


def _log_se(summary_row: dict, col: str) -> float:
    """Standard error of the log of a summary estimate (its relative standard error) from its 95%
    interval across replicas: (ln hi - ln lo) / (2 t_{r-1, 0.975}). Exact for the log-delta
    intervals of ratios (throughput, goodput), a close one for the asymmetric ones (quantiles,
    proportions) and for the t-intervals of means (a little wider: ln((m + h) / (m - h)) >= 2h / m);
    a benefit's cost 1 / value has the same one (its interval is [1 / hi, 1 / lo]). An interval
    reaching 0 falls back to the linear (hi - lo) / (2 t) / value. NaN without an interval."""

    lo, hi, v, r = (summary_row.get(k) for k in (f"{col}_lo", f"{col}_hi", col, "replicas"))
    if None in (lo, hi, v, r) or int(r) < 2 or not all(math.isfinite(x) for x in (lo, hi, v)) or v <= 0:
        return math.nan
    t = _t_quantile(int(r), 0.95)
    if lo > 0 and hi >= lo:
        return math.log(hi / lo) / (2.0 * t)
    return (hi - lo) / (2.0 * t * v) if hi >= lo else math.nan


def _welch_df(v_a: float, r_a: int, v_b: float, r_b: int) -> float:
    """Welch-Satterthwaite degrees of freedom of v_a + v_b, each a squared standard error on r - 1."""
    if v_a + v_b <= 0:
        return float(min(r_a, r_b) - 1)
    return (v_a + v_b) ** 2 / (v_a**2 / (r_a - 1) + v_b**2 / (r_b - 1))


def poa_pd_interval(
    cost: Sequence[float], log_se: Sequence[float], replicas: Sequence[int], eq: int, level: float = 0.95
) -> Ratio:
    """PoA_PD of the equilibrium split `eq` among one load's splits: theta = c(eq) / min_s c(s) =
    max(1, max_{s != eq} rho_s), rho_s = c(eq) / c(s), with its simultaneous interval.

    `cost[s]`: split s's estimated social cost; `log_se[s]`: the standard error of its log (see
    `_log_se`); `replicas[s]`: its replicas. Splits are different topologies, so independent
    streams. Point estimate: c(eq) / min_s c(s), 1 when eq is the estimated optimum. Interval: as
    `counterfactual.ratio_to_best`, with independent estimates: for each other split s a delta-method
    t-interval for log rho_s, se = sqrt(se_eq^2 + se_s^2), at level 1 - (1 - level) / m over the m
    rivals (Bonferroni), degrees of freedom by Welch-Satterthwaite; theta is increasing in every
    rho_s, so [max(1, max_s L_s), max(1, max_s U_s)] covers it with probability >= `level` (up to
    the delta and Welch approximations), however close the ties and whichever split is best. It
    is [1, 1] only when every rival is confidently worse than eq (every U_s < 1), not whenever eq
    is the estimated optimum. Splits without a cost or an se are left out (the upper bound is NaN
    should one of them have a point rho_s above it); NaN bounds when eq's own se is missing, and
    NaN throughout when its cost is not positive. A lone split: theta = 1 exactly."""

    c, se = np.asarray(cost, dtype=np.float64), np.asarray(log_se, dtype=np.float64)
    r = np.asarray(replicas, dtype=np.int64)
    ok = np.isfinite(c) & (c > 0)
    if eq < 0 or not ok[eq]:
        return Ratio(math.nan, math.nan, math.nan)
    value = float(c[eq] / c[ok].min())
    rivals = [s for s in range(c.size) if s != eq and ok[s]]
    if not rivals:
        return Ratio(value, 1.0, 1.0)
    if not (math.isfinite(se[eq]) and r[eq] >= 2):
        return Ratio(value, math.nan, math.nan)
    used = [s for s in rivals if math.isfinite(se[s]) and r[s] >= 2]
    if not used:
        return Ratio(value, math.nan, math.nan)
    q = 1.0 - (1.0 - level) / len(used) / 2.0
    lo = hi = 0.0  # log bounds, clamped at log 1
    for s in used:
        log_rho = math.log(c[eq] / c[s])
        half = _t_ppf(q, _welch_df(se[eq] ** 2, int(r[eq]), se[s] ** 2, int(r[s]))) * math.hypot(se[eq], se[s])
        lo, hi = max(lo, log_rho - half), max(hi, log_rho + half)
    out = Ratio(value, _exp_or_inf(lo), _exp_or_inf(hi))
    if any(c[eq] / c[s] > out.hi for s in rivals if s not in used):
        return Ratio(value, out.lo, math.nan)  # a split left out may be the optimum: no upper bound
    return out


def _poa_pd(cells: list[dict], social: np.ndarray, col: str, eq: int) -> Ratio:
    """PoA_PD of equilibrium `eq` (-1: none found) among the load's splits (`poa_pd_interval`)."""
    if eq < 0:
        return Ratio(math.nan, math.nan, math.nan)
    se = [_log_se(c, col) for c in cells]
    return poa_pd_interval(social, se, [int(c.get("replicas") or 0) for c in cells], eq)


def pd_game_frame(summary, game: dict):  # noqa: ANN001, ANN201 - polars frames, imported lazily
    """pd_game.parquet from summary.parquet: per load, one row per split with both pools' costs,
    the social cost, whether the split is an equilibrium or the optimum, and the load's PoA_PD
    (worst and best equilibrium) with intervals; `cycles` counts best-response cycles found."""
    import polars as pl

    policy = game["policy"]
    gp, gd = int(game["prefill_gpus"]), int(game["decode_gpus"])
    c_p, c_d, c_s = game["prefill_cost"], game["decode_cost"], game["social_cost"]
    rows = []
    load_col = "concurrency" if summary["load_axis"][0] == "concurrency" else "rate"
    # the splits held fixed (a planner cell's label is its start split's plus " planner")
    mine = summary.filter((pl.col("policy") == policy) & ~pl.col("topology").str.ends_with(" planner"))
    for (load,), group in mine.sort([load_col, "n_prefill"]).group_by([load_col], maintain_order=True):
        cells = group.to_dicts()
        n_p = [c["n_prefill"] for c in cells]
        n_d = [c["n_decode"] for c in cells]
        (cost_p, p_lo, p_hi), (cost_d, d_lo, d_hi), (social, s_lo, s_hi) = (_cost(cells, c) for c in (c_p, c_d, c_s))
        dyn = best_response(len(cells), pd_moves(cost_p, cost_d, n_p, n_d, gp, gd))
        opt = int(np.nanargmin(social)) if np.isfinite(social).any() else -1
        eqs = sorted(dyn.equilibria, key=lambda i: social[i])
        best_eq, worst_eq = (eqs[0], eqs[-1]) if eqs else (-1, -1)

        worst, best = (_poa_pd(cells, social, c_s, i) for i in (worst_eq, best_eq))
        for i, c in enumerate(cells):
            rows.append(
                {
                    load_col: load,
                    "topology": c["topology"],
                    "n_prefill": n_p[i],
                    "n_decode": n_d[i],
                    "gpus": n_p[i] * gp + n_d[i] * gd,
                    "policy": policy,
                    "prefill_cost": cost_p[i],
                    "prefill_cost_lo": p_lo[i],
                    "prefill_cost_hi": p_hi[i],
                    "decode_cost": cost_d[i],
                    "decode_cost_lo": d_lo[i],
                    "decode_cost_hi": d_hi[i],
                    "social_cost": social[i],
                    "social_cost_lo": s_lo[i],
                    "social_cost_hi": s_hi[i],
                    "is_equilibrium": i in dyn.equilibria,
                    "is_optimum": i == opt,
                    "equilibria": len(dyn.equilibria),
                    "cycles": len(dyn.cycles),
                    "poa_pd": worst.value,
                    "poa_pd_lo": worst.lo,
                    "poa_pd_hi": worst.hi,
                    "poa_pd_best": best.value,
                    "poa_pd_best_lo": best.lo,
                    "poa_pd_best_hi": best.hi,
                    "prefill_cost_kind": c_p,
                    "decode_cost_kind": c_d,
                    "social_cost_kind": c_s,
                }
            )
    return pl.DataFrame(rows, infer_schema_length=None)


# ---------------------------------------------------------------------------------------------
# Game 2: selfish against coordinated caching


def working_set_blocks(spec: CellSpec) -> int:
    """Blocks of every prefix group's shared prefix at the longest prompt: what a cache must hold
    to hit every shared prefix (the unique rest of each prompt can never be hit by another);
    -1 when the longest prompt is not stored (a long empirical length list)."""
    w, c = spec.workload, spec.cluster
    if w.isl.kind == "empirical" and not w.isl.values:
        return -1  # a long trace's lengths are stored as their count and digest (poa_mc.model.spec_json)
    return int(w.prefix_groups) * (math.floor(w.prefix_of(w.isl.max_value())) // int(c.block_size))


def cache_game_frame(cells, costs: dict[str, np.ndarray], hits: dict[str, float], game: dict):  # noqa: ANN001, ANN201
    """cache_game.parquet: per (topology, capacity, skew, load) point, one row per policy of the game
    (the selfish one first) with its social cost and hit rate, PoA_KV against it (selfish cost over
    its cost, paired over replicas: every policy of a point saw the same requests) and the point's
    PoA_KV against the best coordinated placement, each with a 95% interval (ratio_to_best).

    `cells`: cells.parquet rows; `costs[cell_id]`: one social cost per replica (`game["social_cost"]`
    kind); `hits[cell_id]`: the cell's prefix hit rate. Points with a policy missing are skipped."""

    import polars as pl

    selfish, coordinated = game["selfish"], list(game["coordinated"])
    load_col = "concurrency" if cells["load_axis"][0] == "concurrency" else "rate"
    rows = []
    for _, group in cells.sort("index").group_by(["point"], maintain_order=True):
        by_policy = {c["policy"]: c for c in group.to_dicts()}
        names = [selfish, *coordinated]
        if not all(p in by_policy and by_policy[p]["cell_id"] in costs for p in names):
            continue
        s_cost = costs[by_policy[selfish]["cell_id"]]
        best = ratio_to_best(s_cost, {p: costs[by_policy[p]["cell_id"]] for p in coordinated})
        first = by_policy[selfish]
        spec = spec_from_json(first["spec_json"])
        kv = int(spec.cluster.prefill_kv_blocks)
        wl = spec.workload
        alpha = float(wl.zipf_alpha) if wl.popularity == "zipf" else 0.0
        for p in names:
            cell = by_policy[p]
            x = costs[cell["cell_id"]]
            est = t_interval(x)
            vs = (1.0, 1.0, 1.0) if p == selfish else ratio_to_best(s_cost, {p: x})[:3]
            rows.append(
                {
                    "topology": cell["topology"],
                    "n_prefill": cell["n_prefill"],
                    "n_decode": cell["n_decode"],
                    load_col: cell[load_col],
                    "prefill_kv_blocks": kv,
                    "pool_kv_blocks": kv * int(cell["n_prefill"]),
                    "zipf_alpha": alpha,
                    "working_set_blocks": working_set_blocks(spec),
                    "policy": p,
                    "role": "selfish" if p == selfish else "coordinated",
                    "social_cost": est.value,
                    "social_cost_lo": est.lo,
                    "social_cost_hi": est.hi,
                    "hit_rate": hits.get(cell["cell_id"], math.nan),
                    "poa_kv_vs": vs[0],
                    "poa_kv_vs_lo": vs[1],
                    "poa_kv_vs_hi": vs[2],
                    "poa_kv": best[0],
                    "poa_kv_lo": best[1],
                    "poa_kv_hi": best[2],
                    "best_coordinated": best[3],
                    "social_cost_kind": game["social_cost"],
                }
            )
    return pl.DataFrame(rows, infer_schema_length=None)


# ---------------------------------------------------------------------------------------------
# The Planner: Game 1's split moved during one run (poa_mc/kernels/planner.py)


@dataclass(frozen=True)
class PlannerRuns:
    """Per replica of one planner cell, over its measured window (first measured arrival to the end)."""

    splits: list[tuple[int, int]]  # the path, split i = (nP, nD)
    share: np.ndarray  # (replicas, splits): share of the window spent at each split
    final: np.ndarray  # (replicas,): the split in force at the end
    moves: np.ndarray  # (replicas,): moves completed in the whole run (warm-up included)
    reversals: np.ndarray  # (replicas,): moves in the window that undo the direction of the one before
    start: int = 0  # the split each replica starts at
    move_ms: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # (replicas, L): when each move completed
    move_to: np.ndarray = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.int64)
    )  # ... the split it made (-1 past the last)
    end_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (replicas,): the end of the run


def planner_runs(
    path: list[tuple[int, int]], start: tuple[int, int], move_ms: np.ndarray, move_np: np.ndarray,
    t0: np.ndarray, t1: np.ndarray,
) -> PlannerRuns:  # fmt: skip
    """From each replica's move log (times, and the prefill workers after each move; NaN past the
    last) and its window [t0, t1]."""
    index = {n_p: i for i, (n_p, _) in enumerate(path)}
    r = move_ms.shape[0]
    share = np.zeros((r, len(path)))
    final = np.zeros(r, dtype=np.int64)
    moves = np.zeros(r, dtype=np.int64)
    reversals = np.zeros(r, dtype=np.int64)
    move_to = np.full(move_ms.shape, -1, dtype=np.int64)
    for k in range(r):
        ok = np.isfinite(move_ms[k])
        times = np.concatenate([[-np.inf], move_ms[k][ok], [np.inf]])
        at = [path.index(start)] + [index[int(n)] for n in move_np[k][ok]]
        move_to[k, : len(at) - 1] = at[1:]
        span = max(t1[k] - t0[k], 0.0)
        for j, i in enumerate(at):
            lo, hi = max(times[j], t0[k]), min(times[j + 1], t1[k])
            if hi > lo and span > 0:
                share[k, i] += (hi - lo) / span
        final[k] = at[-1]
        moves[k] = len(at) - 1
        steps = [(at[j + 1] - at[j], times[j + 1]) for j in range(len(at) - 1)]
        reversals[k] = sum(
            1 for a, b in zip(steps, steps[1:]) if t0[k] <= b[1] <= t1[k] and np.sign(a[0]) != np.sign(b[0])
        )
    return PlannerRuns(path, share, final, moves, reversals, path.index(start), move_ms, move_to, np.asarray(t1))


def _planner_cells(cells, runs: dict[str, PlannerRuns]):  # noqa: ANN001, ANN202 - a polars frame in
    """(cell row, its PlannerRuns, the load column) for each planner cell, in grid order."""
    load_col = "concurrency" if cells["load_axis"][0] == "concurrency" else "rate"
    for cell in cells.sort("index").iter_rows(named=True):
        if cell["cell_id"] in runs:
            yield cell, runs[cell["cell_id"]], load_col


def planner_moves_frame(cells, runs: dict[str, PlannerRuns]):  # noqa: ANN001, ANN201 - polars frames
    """planner_moves.parquet: every replica's path, one row per split it was at: from and until
    (ms; 0 for the start, the run's end for the last), the split, and its workers."""
    import polars as pl

    rows = []
    for cell, run, load_col in _planner_cells(cells, runs):
        for k in range(run.share.shape[0]):
            steps = [(0.0, run.start)] + [
                (float(t), int(i)) for t, i in zip(run.move_ms[k], run.move_to[k]) if i >= 0
            ]  # fmt: skip
            ends = [t for t, _ in steps[1:]] + [float(run.end_ms[k])]
            for (t, i), until in zip(steps, ends):
                n_p, n_d = run.splits[i]
                rows.append({load_col: cell[load_col], "start": cell["topology"].removesuffix(" planner"),
                             "policy": cell["policy"], "replica": k, "from_ms": t, "until_ms": until,
                             "split": f"{n_p}P/{n_d}D", "n_prefill": n_p, "n_decode": n_d})  # fmt: skip
    return pl.DataFrame(rows, infer_schema_length=None)


def planner_frame(cells, runs: dict[str, PlannerRuns], pd_game, summary=None, game: dict | None = None):  # noqa: ANN001, ANN201
    """planner.parquet: per planner cell (start split, load) one row per split of the path: the
    share of the measured window spent there (mean over replicas, 95% t-interval), the share of
    replicas that end there, whether the static game (pd_game.parquet, same load) has it as an
    equilibrium or the optimum, and per cell the mean moves and reversals per replica, the
    share of replicas that reversed at least twice in the window (oscillating), and the cell's
    social cost (the game's) over the static optimum's, with its interval (independent streams)."""
    import polars as pl

    rows = []
    for cell, run, load_col in _planner_cells(cells, runs):
        static = pd_game.filter(pl.col(load_col) == cell[load_col]) if pd_game is not None else None
        eq = set(static.filter(pl.col("is_equilibrium"))["n_prefill"].to_list()) if static is not None else set()
        opt = set(static.filter(pl.col("is_optimum"))["n_prefill"].to_list()) if static is not None else set()
        vs_opt = Ratio(math.nan, math.nan, math.nan)
        mine = summary.filter(pl.col("cell_id") == cell["cell_id"]).to_dicts() if summary is not None else []
        best = static.filter(pl.col("is_optimum")).to_dicts() if static is not None else []
        if mine and best and game:
            col = game["social_cost"]
            here = _cost(mine, col)[0][0]
            opt_cells = summary.filter(
                (pl.col("topology") == best[0]["topology"]) & (pl.col("policy") == best[0]["policy"])
                & (pl.col(load_col) == cell[load_col])
            ).to_dicts()  # fmt: skip
            if opt_cells:
                there = _cost(opt_cells, col)[0][0]
                vs_opt = ratio_of_independent(here, _se(mine[0], col), there, _se(opt_cells[0], col))
        for i, (n_p, n_d) in enumerate(run.splits):
            est = t_interval(run.share[:, i])
            lo, hi = (min(max(v, 0.0), 1.0) for v in (est.lo, est.hi))  # a share's interval stays in [0, 1]
            rows.append(
                {
                    load_col: cell[load_col],
                    "start": cell["topology"].removesuffix(" planner"),
                    "policy": cell["policy"],
                    "split": f"{n_p}P/{n_d}D",
                    "n_prefill": n_p,
                    "n_decode": n_d,
                    "time_share": est.value,
                    "time_share_lo": lo,
                    "time_share_hi": hi,
                    "final_share": float(np.mean(run.final == i)),
                    "is_equilibrium": n_p in eq,
                    "is_optimum": n_p in opt,
                    "moves_mean": float(run.moves.mean()),
                    "reversals_mean": float(run.reversals.mean()),
                    "oscillating_share": float(np.mean(run.reversals >= 2)),
                    "replicas": int(run.share.shape[0]),
                    "social_cost_vs_optimum": vs_opt.value,
                    "social_cost_vs_optimum_lo": vs_opt.lo,
                    "social_cost_vs_optimum_hi": vs_opt.hi,
                }
            )
    return pl.DataFrame(rows, infer_schema_length=None)
