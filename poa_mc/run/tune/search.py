"""The search: successive halving under common random numbers, then a validation on fresh seeds.

Candidates are the policy's own settings and a scrambled Sobol sequence over the space
(scipy.stats.qmc, seeded, so a search is repeatable). Each round simulates every remaining
candidate on the same replicas (the same seed and stream: common random numbers, so candidates are
compared on the same requests), keeps the better half by its score, and doubles the replicas; the
first replicas of a round are the previous round's (a replica's requests depend only on its key),
so each round refines the last. The search ends with one candidate. With `refine` = R, R more
races follow, each among the last winner and candidates - 1 new Sobol points in a box around it
of half, a quarter, ... of each setting's range; the rungs go on, so the last one's candidate is
the winner.

A kv policy's settings are raced at each load point on its own, scored by the point's objective.
An adaptive policy's controller is one table for every load, so its candidates are raced over all
the grid's load points at once, scored by the mean over the points of each point's objective
divided by the mean of every candidate's at that point in the first round: each load counts
equally, whatever its scale (a point where that mean is 0 carries no information and weighs 0).

The objective of a run is the mean over its replicas of each replica's figure (its mean or P99
TTFT, its mean end-to-end latency, or its goodput: requests within every [slo] bound per second of
its measured window). A winner chosen from many noisy candidates looks better than it is (the
winner's curse), so its gain is measured again on fresh seeds: the winner, the policy's own
settings and each `compare` policy on `validate_replicas` new replicas with the same streams, the
gain over a baseline the mean of the paired per-replica differences relative to the baseline's
mean, with a 95% interval (Student's t over the replicas; the ratio's denominator's noise by the
delta method). A controller's gain over the whole load axis is the mean of its per-point gains
(independent replicas: the variances add; Welch-Satterthwaite degrees of freedom).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.stats import qmc

from poa_mc.model.grid import Cell
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.run.tune.space import TuneSpec, apply, ordered, own_settings

VALIDATION_SEED = 1_000_003  # added to the grid's seed: replicas none of the search saw


@dataclass(frozen=True)
class Round:
    point: int  # the load point's index among the grid's cells
    candidate: int
    settings: dict[str, float]
    rung: int
    replicas: int
    objective: float  # at this point
    score: float  # what the race ranks by: the objective, or (joint) the relative mean over the points


@dataclass(frozen=True)
class Gain:
    """The winner's validated gain over one baseline (positive: better), with its 95% interval."""

    baseline: str
    baseline_objective: float
    best_objective: float
    gain: float
    lo: float
    hi: float
    se: float
    dof: float


@dataclass(frozen=True)
class PointResult:
    cell: Cell
    rounds: tuple[Round, ...]
    best: dict[str, float]
    own: dict[str, float]
    gains: tuple[Gain, ...]  # over the own settings, then each compare policy

    @property
    def own_objective(self) -> float:
        return self.gains[0].baseline_objective

    @property
    def best_objective(self) -> float:
        return self.gains[0].best_objective

    @property
    def gain(self) -> float:
        return self.gains[0].gain

    @property
    def gain_lo(self) -> float:
        return self.gains[0].lo

    @property
    def gain_hi(self) -> float:
        return self.gains[0].hi


@dataclass(frozen=True)
class TuneResult:
    points: list[PointResult]
    overall: tuple[Gain, ...]  # joint: the mean gain over the load points per baseline; else ()


def candidates(spec: TuneSpec) -> list[dict[str, float]]:
    """The policy's own settings first, then a scrambled Sobol sequence over the space."""
    own = own_settings(spec.policy, list(spec.space))
    lo = np.array([b[0] for b in spec.space.values()])
    hi = np.array([b[1] for b in spec.space.values()])
    sobol = qmc.Sobol(d=len(spec.space), scramble=True, seed=spec.grid.run.seed)
    # the first candidates - 1 of the smallest power-of-two set (Sobol's balance is over those)
    m = max(0, math.ceil(math.log2(spec.candidates - 1))) if spec.candidates > 1 else 0
    pts = qmc.scale(sobol.random_base2(m)[: spec.candidates - 1], lo, hi)
    return [own] + [ordered(dict(zip(spec.space, (float(v) for v in p))), spec.policy) for p in pts]


def replica_objective(res, objective: str, slo) -> np.ndarray:
    """(replicas,): each replica's figure."""
    s = res.samples
    if objective == "ttft_mean":
        return s["ttft_ms"].mean(axis=1)
    if objective == "ttft_p99":
        return np.quantile(s["ttft_ms"], 0.99, axis=1)
    if objective == "e2e_mean":
        return s["e2e_ms"].mean(axis=1)
    ok = np.ones(s["ttft_ms"].shape, dtype=bool)
    if slo.ttft_ms > 0:
        ok &= s["ttft_ms"] <= slo.ttft_ms
    if slo.itl_ms > 0:
        ok &= s["itl_ms"] <= slo.itl_ms
    return ok.sum(axis=1) / (res.replica["window_ms"] / 1000.0)


def _run(spec: TuneSpec, cell: Cell, policy: PolicySpec, simulate: Callable, replicas: int, seed: int) -> np.ndarray:
    r = spec.grid.run
    res = simulate(
        dataclasses.replace(cell.spec, policy=policy),
        replicas=replicas,
        requests=r.requests,
        warmup=r.warmup_for(cell.concurrency),
        seed=seed,
        stream=cell.stream,
        record_candidates=False,
        drain=r.drain,
    )
    return replica_objective(res, spec.objective, spec.grid.slo)


def race(spec: TuneSpec, cells: list[Cell], simulate: Callable) -> tuple[list[dict[str, float]], int, list[Round]]:
    """Successive halving over `cells` together, then `spec.refine` races around the winner:
    (every candidate, the winner's index, every round)."""
    cands = candidates(spec)
    w, rounds, rung, scale = _halve(spec, cells, simulate, cands, list(range(len(cands))), 0, None)
    for k in range(1, spec.refine + 1):
        # the winner again (its replicas' figures are the same: common random numbers), and new
        # candidates around it; the rungs go on, so the last rung's candidate is the winner
        fresh = refined(spec, cands[w], k)
        field = [w, *range(len(cands), len(cands) + len(fresh))]
        cands += fresh
        w, more, rung, _ = _halve(spec, cells, simulate, cands, field, rung + 1, scale)
        rounds += more
    return cands, w, rounds


def refined(spec: TuneSpec, center: dict[str, float], k: int) -> list[dict[str, float]]:
    """Refinement k's candidates - 1 new candidates: a scrambled Sobol sequence over a box around
    `center` of 1 / 2^k of each setting's range (clipped to the space)."""
    names = list(spec.space)
    lo = np.array([b[0] for b in spec.space.values()])
    hi = np.array([b[1] for b in spec.space.values()])
    half = (hi - lo) / 2 ** (k + 1)
    c = np.array([center[n] for n in names])
    box_lo, box_hi = np.maximum(lo, c - half), np.minimum(hi, c + half)
    sobol = qmc.Sobol(d=len(names), scramble=True, seed=spec.grid.run.seed + k)
    m = max(0, math.ceil(math.log2(spec.candidates - 1))) if spec.candidates > 1 else 0
    pts = box_lo + sobol.random_base2(m)[: spec.candidates - 1] * (box_hi - box_lo)
    return [ordered(dict(zip(names, (float(v) for v in p))), spec.policy) for p in pts]


def _halve(
    spec: TuneSpec,
    cells: list[Cell],
    simulate: Callable,
    cands: list[dict[str, float]],
    alive: list[int],
    rung: int,
    scale: np.ndarray | None,
) -> tuple[int, list[Round], int, np.ndarray | None]:
    """One successive-halving race of the candidates `alive`: (its winner, its rounds, its last
    rung, the joint score's scale: the first race's, kept for the refinements so that every score of
    a search is on one scale)."""
    reps, seed = spec.replicas, spec.grid.run.seed
    rounds: list[Round] = []
    while True:
        obj = {
            i: np.array([np.mean(_run(spec, c, apply(spec.policy, cands[i]), simulate, reps, seed)) for c in cells])
            for i in alive
        }
        if spec.joint:
            if scale is None:  # fixed after the first round of the first race: one scale for every score
                scale = np.mean([obj[i] for i in alive], axis=0)
            score = {i: relative_mean(obj[i], scale) for i in alive}
        else:
            score = {i: float(obj[i][0]) for i in alive}
        rounds += [
            Round(p, i, cands[i], rung, reps, float(obj[i][p]), score[i]) for i in alive for p in range(len(cells))
        ]
        if len(alive) == 1:
            return alive[0], rounds, rung, scale
        order = sorted(alive, key=lambda i: -score[i] if spec.maximise else score[i])
        alive = order[: math.ceil(len(alive) / 2)]
        reps *= 2
        rung += 1


def relative_mean(obj: np.ndarray, scale: np.ndarray) -> float:
    """The mean over the points of obj / scale, the points where scale is 0 left out."""
    keep = scale > 0
    return float(np.mean(obj[keep] / scale[keep])) if keep.any() else 0.0


def paired_gain(base: np.ndarray, best: np.ndarray, maximise: bool) -> tuple[float, float, float]:
    """The relative gain of `best` over `base` (paired per-replica figures), positive when better:
    (gain, its standard error, degrees of freedom). The ratio of means; its variance by the delta
    method over the pairs."""
    n = len(base)
    sign = 1.0 if maximise else -1.0
    d = sign * (best - base)
    m = float(np.mean(base))
    gain = float(np.mean(d)) / m
    # delta method for mean(d) / mean(base): the influence of each pair
    infl = (d - np.mean(d)) / m - gain * (base - m) / m
    se = float(np.std(infl, ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    return gain, se, float(n - 1)


def interval(gain: float, se: float, dof: float) -> tuple[float, float]:
    """The 95% Student's t interval."""
    t = float(stats.t.ppf(0.975, dof)) if dof > 0 else math.inf
    return gain - t * se, gain + t * se


def mean_gain(gains: list[Gain], baseline: str) -> Gain:
    """The mean of independent per-point gains over one baseline: the variances add, the degrees of
    freedom by Welch-Satterthwaite."""
    p = len(gains)
    g = float(np.mean([x.gain for x in gains]))
    v = np.array([x.se**2 for x in gains])
    se = math.sqrt(v.sum()) / p
    dof = float(v.sum() ** 2 / np.sum(v**2 / np.array([x.dof for x in gains]))) if v.sum() > 0 else math.inf
    lo, hi = interval(g, se, dof)
    base = float(np.mean([x.baseline_objective for x in gains]))
    best = float(np.mean([x.best_objective for x in gains]))
    return Gain(baseline, base, best, g, lo, hi, se, dof)


def validate(spec: TuneSpec, cell: Cell, best: dict[str, float], simulate: Callable) -> tuple[Gain, ...]:
    """The winner against the own settings and each compare policy, on fresh seeds (paired)."""
    seed = spec.grid.run.seed + VALIDATION_SEED
    n = spec.validate_replicas
    b = _run(spec, cell, apply(spec.policy, best), simulate, n, seed)
    out = []
    for policy in (spec.policy, *spec.compare):
        a = _run(spec, cell, policy, simulate, n, seed)
        gain, se, dof = paired_gain(a, b, spec.maximise)
        out.append(Gain(policy.name, float(np.mean(a)), float(np.mean(b)), gain, *interval(gain, se, dof), se, dof))
    return tuple(out)


def tune_point(spec: TuneSpec, cell: Cell, simulate: Callable) -> PointResult:
    cands, w, rounds = race(spec, [cell], simulate)
    return PointResult(cell, tuple(rounds), cands[w], cands[0], validate(spec, cell, cands[w], simulate))


def tune(
    spec: TuneSpec,
    simulate: Callable,
    progress: Callable[[Cell], None] | None = None,
    *,
    cells: list[Cell] | None = None,
    done: dict[str, PointResult] | None = None,
    on_point: Callable[[PointResult], None] | None = None,
    race_done: tuple[list[dict[str, float]], int, list[Round]] | None = None,
    on_race: Callable[[list[dict[str, float]], int, list[Round]], None] | None = None,
) -> TuneResult:
    """Tune `cells` (default: the grid's points). Points in `done` (cell id -> result) are taken as
    they are; each new one is handed to `on_point` as soon as it is finished, and a controller's
    race to `on_race` (`race_done`: a finished race, not run again)."""
    cells = spec.grid.cells() if cells is None else cells
    done = done or {}

    def finished(cell: Cell, make: Callable[[], PointResult]) -> PointResult:
        if cell.cell_id in done:
            return done[cell.cell_id]
        if progress:
            progress(cell)
        p = make()
        if on_point:
            on_point(p)
        return p

    if not spec.joint:
        return TuneResult([finished(c, lambda c=c: tune_point(spec, c, simulate)) for c in cells], ())
    if race_done is None:
        race_done = race(spec, cells, simulate)
        if on_race:
            on_race(*race_done)
    cands, w, rounds = race_done
    points = []
    for p, cell in enumerate(cells):
        mine = tuple(r for r in rounds if r.point == p)
        make = lambda cell=cell, mine=mine: PointResult(  # noqa: E731 - one point's validation, deferred
            cell, mine, cands[w], cands[0], validate(spec, cell, cands[w], simulate)
        )
        points.append(finished(cell, make))
    names = [g.baseline for g in points[0].gains]
    overall = tuple(mean_gain([pt.gains[k] for pt in points], name) for k, name in enumerate(names))
    return TuneResult(points, overall)
