"""Coverage and false detection of the knee's interval (poa_mc.stats.knee.knee_analysis), by simulation.

For each curve, replica count R and noise level, `--trials` synthetic experiments: the noise-free
latency curve on the paper's concurrency grid, times independent lognormal noise per (load point,
replica) of sd `noise` (independent across load points, as the reduction's replicas are: each load
point has its own random streams). Each experiment goes through knee_analysis (n_boot 1000, level
0.95). Reported per row:

* knee curves (a true knee): the detection rate, and the coverage given detection: the share of
  detected knees whose interval holds the target, the hinge fitted to the noise-free curve (its
  population value), with the median interval width;
* no-knee curves (smooth and convex, still steepening at the top of the grid, so that the
  noise-free curve is not detected): the false-detection rate.

With --ref REV the same experiments (same data, same bootstrap seeds) also go through
poa_mc/stats/knee.py as of git revision REV, for a before/after table.

    python3 bench/knee_coverage.py --trials 400 --ref b67204f   # before: the commit before issue 46
    python3 bench/knee_coverage.py --trials 100 --replicas 4,8          # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from poa_mc.stats import knee as knee_now  # noqa: E402
from poa_mc.stats.theory import mva_single_queue  # noqa: E402

GRID = np.array([1, 2, 4, 8, 16, 32, 64, 80, 96, 112, 128, 144, 160, 192, 256, 384, 512], dtype=np.float64)


def softmax_curve(c: np.ndarray, k: float, p: float) -> np.ndarray:
    """(1 + (C/k)^p)^(1/p): floor 1 at low load, asymptote C / k, which meet at C = k (tests/test_knee.py)."""
    return (1.0 + (c / k) ** p) ** (1.0 / p)


# name -> (curve, has a knee, description)
CURVES: dict[str, tuple[np.ndarray, bool, str]] = {
    "hinge": (np.maximum(1.0, GRID / 110.0), True, "max(1, C/110)"),
    "softmax": (softmax_curve(GRID, 110.0, 4.0), True, "soft maximum, k 110, p 4 (the tests')"),
    "mva": (
        np.array([mva_single_queue(int(n), 1.0, 99.0)[0] for n in GRID]),
        True,
        "exact MVA, one exponential station S 1, think time 99: N* = 100",
    ),
    "exp400": (np.exp(GRID / 400.0), False, "exp(C/400): top slope ratio 0.73"),
    "openloop": (1.0 / (1.0 - GRID / 1000.0), False, "1/(1 - rho), rho = C/1000: top slope ratio 0.66"),
    "softmax450": (softmax_curve(GRID, 450.0, 4.0), False, "soft maximum, k 450, p 4: grid stops before saturation"),
}

_MODULES: dict[str, types.ModuleType] = {}


def _init(ref_source: str | None) -> None:
    _MODULES["now"] = knee_now
    if ref_source is not None:
        mod = types.ModuleType("knee_ref")
        sys.modules["knee_ref"] = mod  # dataclasses look their module up
        exec(compile(ref_source, "knee_ref.py", "exec"), mod.__dict__)
        _MODULES["ref"] = mod


def population_knee(curve: np.ndarray) -> float:
    return float(knee_now.fit_hinge(GRID, curve[:, None], 1.0 / curve**2)[0][0])


def _cell(args: tuple[str, int, float, int, int, int]) -> dict[str, dict[str, float]]:
    name, n_rep, noise, trials, n_boot, seed = args
    curve, _, _ = CURVES[name]
    target = population_knee(curve)
    out = {}
    for version, mod in _MODULES.items():
        det, cov, widths, secs = 0, 0, [], 0.0
        for t in range(trials):
            data = np.random.default_rng([seed, n_rep, int(noise * 1000), t])
            lat = curve[:, None] * np.exp(noise * data.standard_normal((GRID.size, n_rep)))
            t0 = time.perf_counter()
            res = mod.knee_analysis(GRID, lat, rng=np.random.default_rng([seed, t]), n_boot=n_boot)
            secs += time.perf_counter() - t0
            if res.detected:
                det += 1
                cov += res.knee_lo <= target <= res.knee_hi
                widths.append(res.knee_hi - res.knee_lo)
        out[version] = {
            "detected": det / trials,
            "coverage": cov / det if det else math.nan,
            "width": float(np.median(widths)) if widths else math.nan,
            "ms": 1000.0 * secs / trials,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--replicas", default="4,8,16,64")
    ap.add_argument("--noise", default="0.05,0.2")
    ap.add_argument("--curves", default=",".join(CURVES))
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--ref", help="git revision whose poa_mc/stats/knee.py is the 'before'")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--json", help="also write the raw results here")
    a = ap.parse_args()

    ref_source = None
    if a.ref:
        ref_source = subprocess.run(
            ["git", "show", f"{a.ref}:poa_mc/stats/knee.py"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    names = a.curves.split(",")
    cells = [
        (name, int(r), float(s), a.trials, a.n_boot, a.seed)
        for name in names
        for s in a.noise.split(",")
        for r in a.replicas.split(",")
    ]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs, initializer=_init, initargs=(ref_source,)) as pool:
        results = list(pool.map(_cell, cells))

    for name in names:
        curve, has_knee, what = CURVES[name]
        extra = f", population knee {population_knee(curve):.2f}" if has_knee else ""
        print(f"* {name}: {what}{extra}")
    versions = ["ref", "now"] if a.ref else ["now"]
    by = {(c[0], c[1], c[2]): res for c, res in zip(cells, results)}
    reps = [int(r) for r in a.replicas.split(",")]

    def fmt(res: dict[str, dict[str, float]], field: str) -> str:
        vals = [res[v][field] for v in versions]
        return " → ".join("-" if math.isnan(v) else f"{v:.2f}" for v in vals)

    print()
    print("| curve, noise | " + " | ".join(f"R = {r}" for r in reps) + " |")
    print("|---|" + "---|" * len(reps))
    for name in names:
        has_knee = CURVES[name][1]
        for s in a.noise.split(","):
            row = []
            for r in reps:
                res = by[(name, r, float(s))]
                if has_knee:
                    row.append(f"detected {fmt(res, 'detected')}; coverage {fmt(res, 'coverage')}")
                else:
                    row.append(f"false {fmt(res, 'detected')}")
            print(f"| {name}, {float(s):.0%} | " + " | ".join(row) + " |")
    ms = {v: np.mean([res[v]["ms"] for res in results]) for v in versions}
    print()
    print(
        f"{a.trials} trials per cell, n_boot {a.n_boot}, seed {a.seed}; "
        + ", ".join(f"{v} {ms[v]:.1f} ms per call" for v in versions)
        + f"; {time.perf_counter() - t0:.0f} s"
        + (f"; before → after: {a.ref} → working tree" if a.ref else "")
    )
    if a.json:
        Path(a.json).write_text(json.dumps([{"cell": list(c[:3]), **res} for c, res in zip(cells, results)], indent=1))


if __name__ == "__main__":
    main()
