"""Is a cell's warm-up long enough? A check on the measured requests themselves.

A run starts empty (open loops) or with every client arriving at once (closed loops); the first
requests after the start see a cluster that has not reached its steady state, and `[run] warmup`
requests are simulated and dropped for that reason. Whether that was enough shows in the measured
requests: if mean TTFT still drifts through them, the summary's steady-state figures are biased.

Two rules, either of which warns:

* relaxation (open loops): a queue started empty approaches its steady state with the relaxation
  time of M/M/1 at the same utilisation rho, about 1 / (mu (1 - sqrt(rho))^2) (Morse 1955;
  Cohen 1982), which is rho / (1 - sqrt(rho))^2 arrivals: 12 at rho = 0.6, 342 at 0.9, 1,482 at
  0.95. A warm-up below RELAXATIONS of them leaves a bias the summary's mean carries (M/M/1 at
  0.9 from empty, 64 replicas x 1,000 requests: with 100 warm-up requests mean TTFT reads 4.6%
  low and its interval covers in 51 of 60 cells; with the rule's 1,100, +1.3% and 55 of 60;
  `PYTHONPATH=. python bench/warmup_coverage.py`). rho is the measured utilisation of the prefill pool (the pool a
  request queues at first; a decode pool's "busy" share means "in a pass", not saturated), so
  the rule needs no guess before the run; with n_p prefill workers each sees about 1 / n_p of the
  arrivals, so the rule asks for n_p times as many. It stays silent above rho = 0.98, where no
  warm-up helps (three relaxation times are over 30,000 arrivals) and the pool may not be stable,
  and for cells without a prefill pool (aggregated flow, a planner moving workers): there only the
  drift test speaks;
* drift (any loop): the kernels tally each replica's TTFT over B = 16 consecutive batches of its
  measured requests in arrival order (poa_mc/kernels/tally.py, `batch_ttft`). Per replica, the mean TTFT
  of the second half minus that of the first; across replicas (independent) a paired t-test. A
  transient is reported when the drift is significant at 1% and larger than 2% of mean TTFT.
  Where the drift test fires, MSER (White 1997) on the replica-averaged batch means z_1..z_B (the
  truncation d <= B / 2 minimising sum_{b > d} (z_b - mean)^2 / (B - d)^2) says where it ends: the
  suggestion adds the d batches MSER would drop, or, when MSER drops none or half the run (no end
  of the trend inside it), the run's warm-up again plus the measured requests (a lower bound to
  try). With few replicas and a
  slow queue the drift test has little power (at rho = 0.9 a replica's mean over 200 requests is
  dominated by the few busy periods it happened to draw), which is why the relaxation rule is
  there.

Only a hint with a named figure, as the closed-loop warm-up rule before a run
(poa_mc.model.config.grid_warnings): nothing is refused, the summary keeps its numbers, and
`warmup_suggested` in summary.parquet says what to use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DRIFT_LEVEL = 0.01  # the paired t-test's two-sided level
DRIFT_MIN = 0.02  # the smallest relative drift worth a warning
RELAXATIONS = 3  # warm-up wanted, in relaxation times (e^-3: 5% of the start's deviation left)
RHO_MAX = 0.98  # above, no warm-up is a remedy: 3 relaxation times are 30,000 arrivals and more, and
#                 a pool that busy may not be stable at all (the rule stays silent there)


@dataclass(frozen=True)
class WarmupCheck:
    transient: bool
    drift: float  # (second-half mean TTFT - first-half) / overall mean; NaN when not checkable
    suggested: int  # a warm-up (requests) to use; 0 when no transient was found


def batch_sizes(n: int, batches: int) -> np.ndarray:
    """How many of n rows batch b holds when row i goes to batch i * batches // n."""
    return np.bincount((np.arange(n) * batches) // n, minlength=batches).astype(np.float64) if n else np.zeros(batches)


def _mser(z: np.ndarray) -> int:
    """MSER's truncation point of a series: the d <= len / 2 minimising the spread of z[d:]."""
    b = len(z)
    best, at = math.inf, 0
    for d in range(b // 2 + 1):
        rest = z[d:]
        stat = float(np.sum((rest - rest.mean()) ** 2)) / (b - d) ** 2
        if stat < best:
            best, at = stat, d
    return at


def relaxation_requests(rho: float) -> float:
    """M/M/1's relaxation time at utilisation rho, in arrivals: rho / (1 - sqrt(rho))^2."""
    if not 0.0 < rho < 1.0:
        return math.inf if rho >= 1.0 else 0.0
    return rho / (1.0 - math.sqrt(rho)) ** 2


def check(
    batch_ttft: np.ndarray | None, n: int, warmup: int, utilisation: float = math.nan, workers: int = 1
) -> WarmupCheck:
    """The warm-up check of one cell (module doc) from its replicas' (R, B) TTFT batch sums (None:
    not tallied, an older run) and, for an open loop, the measured utilisation of its first queue
    and that queue's workers (NaN: no relaxation rule)."""
    from scipy import special

    want = 0
    if math.isfinite(utilisation) and 0.0 < utilisation <= RHO_MAX:
        # each of the pool's workers sees about 1 / workers of the arrivals
        need = RELAXATIONS * relaxation_requests(utilisation) * max(workers, 1)
        if warmup < need:
            want = _round_up(math.ceil(need))
    if batch_ttft is None:
        return WarmupCheck(want > 0, math.nan, want)
    sums = np.asarray(batch_ttft, dtype=np.float64)
    r, b = sums.shape
    size = batch_sizes(n, b)
    if r < 2 or n < 2 * b or not np.isfinite(sums).all():
        return WarmupCheck(want > 0, math.nan, want)
    half = b // 2
    first = sums[:, :half].sum(axis=1) / size[:half].sum()
    second = sums[:, half:].sum(axis=1) / size[half:].sum()
    overall = float(sums.sum()) / (r * n)
    if not overall > 0:
        return WarmupCheck(want > 0, math.nan, want)
    d = second - first
    drift = float(d.mean()) / overall
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        significant = float(d.mean()) != 0.0
    else:
        t = float(d.mean()) / (sd / math.sqrt(r))
        significant = abs(t) > float(special.stdtrit(r - 1, 1.0 - DRIFT_LEVEL / 2.0))
    if significant and abs(drift) > DRIFT_MIN:
        cut = _mser(sums.mean(axis=0) / size)
        more = 2 * warmup + n if cut == 0 or cut >= half else warmup + int(size[:cut].sum())
        want = max(want, _round_up(more))
    return WarmupCheck(want > 0, drift, want)


def _round_up(x: int) -> int:
    """A warm-up a user would type: x rounded up to two significant digits."""
    if x <= 100:
        return int(x)
    step = 10 ** (len(str(int(x))) - 2)
    return int(math.ceil(x / step) * step)
