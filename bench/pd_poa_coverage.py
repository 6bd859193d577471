"""Coverage of PoA_PD's 95% interval (poa_mc.stats.games.poa_pd_interval) on synthetic splits with a known
answer, against the interval reduce gave before (z = 1.96 on the equilibrium over the estimated
optimum, [1, 1] whenever the two are the same split):

    python bench/pd_poa_coverage.py [--trials 4000] [--replicas 4 8 16 64] [--df welch|min] [--two] [--seed 1]

Five splits at one load, true social costs 1.30, 1.00, c_e, 1.15, 1.40; the equilibrium is split 2
(in pd_game_frame the pool costs would put it there; here it is given), so the true PoA_PD is c_e:
1.008 (a near tie with the optimum) or 1.066 (clear). Each replica's cost is the split's times
lognormal noise (sigma 0.05), independent across splits (different topologies); each split's
summary row is the mean over its replicas with its 95% t-interval, as reduce writes e2e_mean_ms.
Prints, per case and replica count, the coverage of the true PoA_PD, the mean width and the share
of [1, 1] intervals, for the new interval and the old one. `--df min` uses min(r_e, r_s) - 1
degrees of freedom instead of Welch-Satterthwaite's; `--two` plays two splits only (1.00 and c_e,
the equilibrium the second), where Bonferroni has nothing to adjust and the level is nominal.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from poa_mc.stats import games
from poa_mc.stats.intervals import _t_quantile

COSTS = (1.30, 1.00, None, 1.15, 1.40)
EQ = 2


def summary_rows(rng: np.random.Generator, costs: np.ndarray, r: int, trials: int, sigma: float = 0.05):
    """(trials, splits) means and 95% t-interval bounds of r replicas each."""
    x = costs[None, :, None] * np.exp(sigma * rng.standard_normal((trials, costs.size, r)))
    m = x.mean(axis=2)
    half = _t_quantile(r, 0.95) * x.std(axis=2, ddof=1) / math.sqrt(r)
    return m, m - half, m + half


def old_interval(m: np.ndarray, lo: np.ndarray, hi: np.ndarray, r: int) -> tuple[float, float]:
    """The interval before: delta method with z = 1.96 against the estimated optimum, t-based se."""
    opt = int(np.argmin(m))
    if opt == EQ:
        return 1.0, 1.0
    se = (hi - lo) / (2.0 * _t_quantile(r, 0.95))
    ratio = games.ratio_of_independent(m[EQ], se[EQ], m[opt], se[opt])
    return ratio.lo, ratio.hi


def run(theta: float, r: int, trials: int, rng: np.random.Generator) -> dict[str, tuple[float, float, float]]:
    costs = np.array([theta if c is None else c for c in COSTS])
    m, lo, hi = summary_rows(rng, costs, r, trials)
    out: dict[str, list[tuple[float, float]]] = {"new": [], "old": []}
    for k in range(trials):
        rows = [{"e2e_mean_ms": m[k, s], "e2e_mean_ms_lo": lo[k, s], "e2e_mean_ms_hi": hi[k, s], "replicas": r}
                for s in range(costs.size)]  # fmt: skip
        se = [games._log_se(row, "e2e_mean_ms") for row in rows]
        got = games.poa_pd_interval(m[k], se, [r] * costs.size, EQ)
        out["new"].append((got.lo, got.hi))
        out["old"].append(old_interval(m[k], lo[k], hi[k], r))
    stats = {}
    for name, iv in out.items():
        a = np.array(iv)
        stats[name] = (
            float(np.mean((a[:, 0] <= theta) & (theta <= a[:, 1]))),
            float(np.mean(a[:, 1] - a[:, 0])),
            float(np.mean((a[:, 0] == 1.0) & (a[:, 1] == 1.0))),
        )
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--replicas", type=int, nargs="+", default=[4, 8, 16, 64])
    ap.add_argument("--df", choices=("welch", "min"), default="welch")
    ap.add_argument("--two", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    global COSTS, EQ
    if args.two:
        COSTS, EQ = (1.00, None), 1
    if args.df == "min":
        games._welch_df = lambda v_a, r_a, v_b, r_b: float(min(r_a, r_b) - 1)
    rng = np.random.default_rng(args.seed)
    print(f"{args.trials} trials, df = {args.df}, true costs {COSTS} (None: the equilibrium's)")
    print("| case | replicas | coverage | mean width | [1, 1] | before: coverage | width | [1, 1] |")
    print("|---|---|---|---|---|---|---|---|")
    for theta, case in ((1.008, "near tie 1.008"), (1.066, "clear 1.066")):
        for r in args.replicas:
            s = run(theta, r, args.trials, rng)
            (c, w, one), (c0, w0, one0) = s["new"], s["old"]
            print(f"| {case} | {r} | {c:.3f} | {w:.4f} | {one:.3f} | {c0:.3f} | {w0:.4f} | {one0:.3f} |")


if __name__ == "__main__":
    main()
