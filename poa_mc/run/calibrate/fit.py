"""The fit: the free parameters that bring the simulated figures closest to the measured ones.

Loss: the sum over load points i and figures j of r_ij^2, r_ij = ln(simulated_ij / measured_ij):
every figure counts by its relative error, so a TTFT of seconds and an ITL of milliseconds weigh
alike, and over- and under-shooting by the same factor cost the same.

Optimiser: scipy.optimize.least_squares (trust-region reflective, bounded), a well-kept solver of
exactly this problem (a sum of squared residuals under box bounds); each parameter is mapped to
[0, 1] over its bounds, a bandwidth through its reciprocal (a transfer's time per byte, which the
figures follow linearly; on the bandwidth itself, a step of a tenth of [5, 80] GB/s moves a 20 GB/s
transfer's time by over a quarter, and the fit of tests/test_calibrate.py's transfer stopped at
24.4 GB/s, its interval [21.9, 29.9] missing the truth). The Jacobian is taken by forward
differences of STEP (10%) of each parameter's range, not of the float epsilon: the simulated
figures, under common random numbers, are smooth at that scale but step where an event's order
flips; at 3% the search stopped on those steps (four starts, four answers, bench/NOTES.md).

Intervals: a parametric bootstrap (95%, percentile). The fitted deployment is simulated afresh
BOOTSTRAP times as a benchmark runs (one run of each point's measured request count, a new seed):
synthetic benchmarks with the benchmark's own noise. The whole fit is done again on each, from the
same start and with yet another seed for the simulation, so the simulation's noise and the
search's enter too; the interval is the 2.5% and 97.5% quantiles of those refits. Tried and
dropped for covering too rarely (bench/NOTES.md, bench/calibrate_coverage.py): the asymptotic
interval of nonlinear least squares (s^2 (J'J)^-1), which misses the simulation's noise that common
random numbers hold fixed across the fit; the basic and the bias-corrected bootstrap, whose
corrections pointed the wrong way along the ridge where a prefill scale and a per-request host
time trade off; and refits that polished the fit's answer rather than repeating the fit.

Held out: with `held_out`, each load point in turn is left out, the parameters fitted to the
others (from the full fit's values), and the point predicted: its relative error per figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize

from poa_mc.run.calibrate.deployment import RECIPROCAL, Deployment
from poa_mc.run.calibrate.figures import simulate_figures

STEP = 0.1  # the Jacobian's difference step, in units of each parameter's range
MAX_EVALUATIONS = 60
BOOTSTRAP = 40  # refits behind each interval


@dataclass(frozen=True)
class Fit:
    names: tuple[str, ...]
    values: np.ndarray
    lo: np.ndarray  # 95% interval (NaN: not identified)
    hi: np.ndarray
    loss: float  # sum of squared log ratios
    points: tuple[int, ...]  # the load points fitted
    simulated: np.ndarray  # (points fitted, figures) at `values`
    evaluations: int
    message: str
    start: dict[str, float] | None = None  # where the search started (None: the deployment's starts)
    # with the bootstrap, (points fitted, figures): the relative standard deviation of the
    # figures of a benchmark like the measured one (its request counts), simulated at `values`
    noise: np.ndarray | None = None

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, (float(v) for v in self.values)))


def _residuals(sim: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(sim, 1e-12) / measured).ravel()


def fit(
    dep: Deployment,
    simulate: Callable,
    points: tuple[int, ...] | None = None,
    start: dict[str, float] | None = None,
    *,
    measured: np.ndarray | None = None,
    seed: int | None = None,
    bootstrap: int = 0,
) -> Fit:
    """The parameters minimising the loss over load points `points` (all by default), against the
    deployment's measured figures (or `measured`, (points, figures)), the simulations at the grid's
    seed (or `seed`); with `bootstrap` > 0 refits, their 95% intervals (else NaN)."""
    points = tuple(range(len(dep.points))) if points is None else points
    target = np.array(dep.measured(), dtype=float) if measured is None else np.asarray(measured, dtype=float)
    target = target[list(points)]
    to_x, to_u = _mapping(dep)
    names = tuple(p.name for p in dep.params)
    x0 = np.array([(start or {}).get(p.name, p.start) for p in dep.params])
    seen: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def values(u: np.ndarray) -> dict[str, float]:
        return dict(zip(names, (float(v) for v in to_x(u))))

    def evaluate(u: np.ndarray) -> np.ndarray:
        key = tuple(np.round(u, 12))
        if key not in seen:
            sim = simulate_figures(dep, values(u), simulate, points, seed=seed)
            seen[key] = (sim, _residuals(sim, target))
        return seen[key][1]

    def jacobian(u: np.ndarray) -> np.ndarray:
        f0 = evaluate(u)
        cols = []
        for j in range(len(u)):
            step = STEP if u[j] + STEP <= 1.0 else -STEP  # toward the inside of the bounds
            v = u.copy()
            v[j] += step
            cols.append((evaluate(v) - f0) / step)
        return np.stack(cols, axis=1)

    u0 = np.clip(to_u(x0), 0.0, 1.0)
    res = optimize.least_squares(
        evaluate, u0, jac=jacobian, bounds=(0.0, 1.0), method="trf", xtol=1e-6, ftol=1e-8, gtol=1e-8,
        max_nfev=MAX_EVALUATIONS,
    )  # fmt: skip
    u = np.clip(res.x, 0.0, 1.0)
    x = to_x(u)
    r = evaluate(u)
    found = Fit(
        names=names,
        values=x,
        lo=np.full(len(names), np.nan),
        hi=np.full(len(names), np.nan),
        loss=float(r @ r),
        points=points,
        simulated=seen[tuple(np.round(u, 12))][0],
        evaluations=len(seen),
        message=str(res.message),
        start=start,
    )
    if bootstrap <= 0:
        return found
    draws, synthetic = refits(dep, found, simulate, bootstrap)
    lo_b, hi_b = np.quantile(draws, [0.025, 0.975], axis=0)
    return replace(found, lo=lo_b, hi=hi_b, noise=np.std(synthetic, axis=0) / np.mean(synthetic, axis=0))


def _mapping(dep: Deployment) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """The search's [0, 1] coordinates -> the parameters' values, and back: linear over the bounds,
    or linear in the reciprocal (RECIPROCAL; u = 0 at the high bound)."""
    rec = np.array([p.name in RECIPROCAL for p in dep.params])
    lo = np.array([1.0 / p.hi if r else p.lo for p, r in zip(dep.params, rec)])
    hi = np.array([1.0 / p.lo if r else p.hi for p, r in zip(dep.params, rec)])

    def flip(v: np.ndarray) -> np.ndarray:  # only the reciprocal ones, whose values are > 0
        return np.where(rec, np.divide(1.0, v, out=np.ones_like(v, dtype=float), where=rec), v)

    def to_x(u: np.ndarray) -> np.ndarray:
        return flip(lo + np.clip(u, 0.0, 1.0) * (hi - lo))

    def to_u(x: np.ndarray) -> np.ndarray:
        return (flip(np.asarray(x, dtype=float)) - lo) / (hi - lo)

    return to_x, to_u


def refits(dep: Deployment, found: Fit, simulate: Callable, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, parameters): the fit again on n synthetic benchmarks simulated at its values as a
    benchmark runs (one run of each point's measured request count, a new seed), each fitted with
    another new seed from where `found`'s search started (the whole procedure again, not a
    polish of its answer); and (n, points fitted, figures): those synthetic benchmarks' figures."""
    r = dep.grid.run
    points = found.points
    out = np.empty((n, len(found.names)))
    synthetic = np.empty((n, len(points), len(dep.figures)))
    full = np.empty((len(dep.points), len(dep.figures)))
    for b in range(n):
        seed = r.seed + 100_003 * (b + 1)
        synthetic[b] = simulate_figures(dep, found.as_dict(), simulate, points, seed=seed, benchmark=True)
        full[list(points)] = synthetic[b]
        again = fit(dep, simulate, points, start=found.start, measured=full, seed=r.seed + 7_919 * (b + 1))
        out[b] = again.values
    return out, synthetic


def held_out(dep: Deployment, full: Fit, simulate: Callable) -> np.ndarray:
    """(points, figures): each load point's relative error (simulated / measured - 1) when the
    parameters are fitted to the other points only."""
    n = len(dep.points)
    measured = np.array(dep.measured(), dtype=float)
    out = np.empty((n, len(dep.figures)))
    for i in range(n):
        others = tuple(j for j in range(n) if j != i)
        f = fit(dep, simulate, others, start=full.as_dict())
        out[i] = simulate_figures(dep, f.as_dict(), simulate, [i])[0] / measured[i] - 1.0
    return out
