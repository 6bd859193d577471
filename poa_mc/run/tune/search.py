"""The search: successive halving under common random numbers, then a validation on fresh seeds.

Per load point (each topology and load of the grid), `candidates` settings are raced: the
policy's own settings and a scrambled Sobol sequence over the space (scipy.stats.qmc, seeded, so a
search is repeatable). Each round simulates every remaining candidate on the same replicas (the
same seed and stream: common random numbers, so candidates are compared on the same requests),
keeps the better half by the objective, and doubles the replicas; the first replicas of a round
are the previous round's (a replica's requests depend only on its key), so each round refines the
last. The search ends with one candidate.

The objective of a run is the mean over its replicas of each replica's figure (its mean or P99
TTFT, its mean end-to-end latency, or its goodput: requests within every [slo] bound per second of
its measured window). A winner chosen from many noisy candidates looks better than it is (the
winner's curse), so its gain is measured again on fresh seeds: the winner and the policy's own
settings on `validate_replicas` new replicas with the same streams, the gain the mean of the paired
per-replica differences relative to the own settings' mean, with a 95% interval (Student's t over
the replicas; the ratio's denominator's noise by the delta method).
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
from poa_mc.run.tune.space import TuneSpec

VALIDATION_SEED = 1_000_003  # added to the grid's seed: replicas none of the search saw


@dataclass(frozen=True)
class Round:
    candidate: int
    settings: dict[str, float]
    rung: int
    replicas: int
    objective: float


@dataclass(frozen=True)
class PointResult:
    cell: Cell
    rounds: tuple[Round, ...]
    best: dict[str, float]
    own: dict[str, float]
    own_objective: float  # on the validation replicas
    best_objective: float
    gain: float  # relative improvement of the objective (positive: better), validated
    gain_lo: float
    gain_hi: float


def candidates(spec: TuneSpec) -> list[dict[str, float]]:
    """The policy's own settings first, then a scrambled Sobol sequence over the space."""
    own = {k: float(getattr(spec.policy, k)) for k in spec.space}
    lo = np.array([b[0] for b in spec.space.values()])
    hi = np.array([b[1] for b in spec.space.values()])
    sobol = qmc.Sobol(d=len(spec.space), scramble=True, seed=spec.grid.run.seed)
    # the first candidates - 1 of the smallest power-of-two set (Sobol's balance is over those)
    m = max(0, math.ceil(math.log2(spec.candidates - 1))) if spec.candidates > 1 else 0
    pts = qmc.scale(sobol.random_base2(m)[: spec.candidates - 1], lo, hi)
    return [own] + [dict(zip(spec.space, (float(v) for v in p))) for p in pts]


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


def _run(spec: TuneSpec, cell: Cell, settings: dict[str, float], simulate: Callable, replicas: int, seed: int):
    r = spec.grid.run
    policy = dataclasses.replace(cell.spec.policy, **settings)
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


def tune_point(spec: TuneSpec, cell: Cell, simulate: Callable) -> PointResult:
    cands = candidates(spec)
    alive = list(range(len(cands)))
    reps = spec.replicas
    seed = spec.grid.run.seed
    rounds: list[Round] = []
    rung = 0
    while True:
        scores = {i: float(np.mean(_run(spec, cell, cands[i], simulate, reps, seed))) for i in alive}
        rounds += [Round(i, cands[i], rung, reps, scores[i]) for i in alive]
        if len(alive) == 1:
            break
        order = sorted(alive, key=lambda i: -scores[i] if spec.maximise else scores[i])
        alive = order[: math.ceil(len(alive) / 2)]
        reps *= 2
        rung += 1
    best = cands[alive[0]]
    gain, lo, hi, own_obj, best_obj = validate(spec, cell, cands[0], best, simulate)
    return PointResult(cell, tuple(rounds), best, cands[0], own_obj, best_obj, gain, lo, hi)


def paired_gain(own: np.ndarray, best: np.ndarray, maximise: bool) -> tuple[float, float, float]:
    """The relative gain of `best` over `own` (paired per-replica figures), positive when better,
    with its 95% interval: the ratio of means, its variance by the delta method over the pairs."""
    n = len(own)
    sign = 1.0 if maximise else -1.0
    d = sign * (best - own)
    m_own = float(np.mean(own))
    gain = float(np.mean(d)) / m_own
    # delta method for mean(d) / mean(own): the influence of each pair
    infl = (d - np.mean(d)) / m_own - gain * (own - m_own) / m_own
    se = float(np.std(infl, ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    t = float(stats.t.ppf(0.975, n - 1)) if n > 1 else math.inf
    return gain, gain - t * se, gain + t * se


def validate(spec: TuneSpec, cell: Cell, own: dict, best: dict, simulate: Callable) -> tuple[float, ...]:
    seed = spec.grid.run.seed + VALIDATION_SEED
    a = _run(spec, cell, own, simulate, spec.validate_replicas, seed)
    b = _run(spec, cell, best, simulate, spec.validate_replicas, seed)
    gain, lo, hi = paired_gain(a, b, spec.maximise)
    return gain, lo, hi, float(np.mean(a)), float(np.mean(b))


def tune(spec: TuneSpec, simulate: Callable, progress: Callable[[Cell], None] | None = None) -> list[PointResult]:
    out = []
    for cell in spec.grid.cells():
        if progress:
            progress(cell)
        out.append(tune_point(spec, cell, simulate))
    return out
