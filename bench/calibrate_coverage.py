"""Coverage of `poa-mc calibrate`'s 95% intervals on benchmarks of known truth.

Each seed simulates the test deployment (tests/calibrate_truth.py: 1P/2D, concurrency 2, 8, 24,
known prefill scale, decode scale and per-request host time) as a benchmark runs it (one run of
1,200 requests a load), calibrates it back (the deployment's [run] sizes, `--bootstrap` refits),
and counts the intervals that hold the truth, per parameter and all at once, for three bootstrap
intervals from the same refits: the percentile one, the basic one (2 x - quantiles) and the
bias-corrected percentile one (Efron's BC; what `poa-mc calibrate` reports is named in
poa_mc/run/calibrate/fit.py):

    python bench/calibrate_coverage.py [--seeds 20] [--bootstrap 40] [--replicas 4] [--requests 1200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from poa_mc.engine.engine import simulate  # noqa: E402
from poa_mc.run.calibrate.deployment import load_deployment  # noqa: E402
from poa_mc.run.calibrate.fit import fit, refits  # noqa: E402
from tests.calibrate_truth import TRUTH, deployment, measured  # noqa: E402


def intervals(x: np.ndarray, draws: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    q_lo, q_hi = np.quantile(draws, [0.025, 0.975], axis=0)
    below = np.clip((draws < x).mean(axis=0), 0.5 / len(draws), 1 - 0.5 / len(draws))
    z0 = stats.norm.ppf(below)
    z = stats.norm.ppf(0.975)
    bc = [np.quantile(draws[:, j], stats.norm.cdf([2 * z0[j] - z, 2 * z0[j] + z])) for j in range(draws.shape[1])]
    return {
        "percentile": (q_lo, q_hi),
        "basic": (2 * x - q_hi, 2 * x - q_lo),
        "bc": (np.array([b[0] for b in bc]), np.array([b[1] for b in bc])),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--bootstrap", type=int, default=40)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--requests", type=int, default=1200)
    a = ap.parse_args()
    truth = np.array(list(TRUTH.values()))
    hits: dict[str, np.ndarray] = {}
    joint: dict[str, int] = {}
    n = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.seeds):
            seed = 1000 + k
            folder = Path(tmp) / str(seed)
            folder.mkdir()
            path = deployment(folder, "vllm", measured(seed=seed), replicas=a.replicas, requests=a.requests,
                              held_out=False)  # fmt: skip
            dep = load_deployment(path)
            f = fit(dep, simulate)
            draws, _ = refits(dep, f, simulate, a.bootstrap)
            n += 1
            line = []
            for kind, (lo, hi) in intervals(f.values, draws).items():
                inside = (lo <= truth) & (truth <= hi)
                hits[kind] = hits.get(kind, np.zeros(len(truth))) + inside
                joint[kind] = joint.get(kind, 0) + bool(inside.all())
                line.append(f"{kind} {''.join('y' if i else 'n' for i in inside)}")
            print(f"seed {seed}: {np.round(f.values, 3).tolist()} " + ", ".join(line), flush=True)
    for kind in hits:
        for name, h in zip(TRUTH, hits[kind]):
            p = stats.binomtest(int(h), n, 0.95).pvalue
            print(
                f"{kind}: {name} (truth {TRUTH[name]}) inside {int(h)} of {n} ({h / n:.0%}); binomial p vs 95%: {p:.3f}"
            )
        print(f"{kind}: all three inside {joint[kind]} of {n}")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
