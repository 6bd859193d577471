"""Are the engine's results unchanged? Simulates the fidelity regimes of bench/regimes.py and the
quickstart's cells and writes every per-request array (samples and router candidates) to an npz,
so that two commits can be compared array by array:

    python bench/at_commit.py COMMIT bench/same_results.py /tmp/before.npz
    python bench/same_results.py /tmp/after.npz --compare /tmp/before.npz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from regimes import REGIMES  # noqa: E402

from poa_mc.engine import simulate  # noqa: E402


def arrays(replicas: int, requests: int) -> dict[str, np.ndarray]:
    out = {}
    for name, spec in sorted(REGIMES.items()):
        res = simulate(spec, replicas=replicas, requests=requests, warmup=50, seed=5, stream=3)
        for group in (res.samples, res.candidates or {}):
            for k, v in group.items():
                out[f"{name}/{k}"] = np.asarray(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--compare", default=None, help="an npz written by an earlier run of this script")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--requests", type=int, default=300)
    a = ap.parse_args()
    got = arrays(a.replicas, a.requests)
    np.savez_compressed(a.out, **got)
    if a.compare is None:
        print(f"{len(got)} arrays -> {a.out}")
        return 0
    ref = dict(np.load(a.compare))
    # an array only one side has is a new (or removed) output column, reported apart from changes
    differ = [k for k in sorted(set(ref) & set(got)) if not np.array_equal(ref[k], got[k], equal_nan=True)]
    new, gone = sorted(set(got) - set(ref)), sorted(set(ref) - set(got))
    print(
        f"{len(got)} arrays, {len(ref)} before; {len(differ)} of the {len(set(ref) & set(got))} in both differ"
        + (": " + ", ".join(differ[:10]) if differ else " (bit-identical)")
        + (f"; new: {', '.join(sorted({k.split('/')[-1] for k in new}))}" if new else "")
        + (f"; gone: {', '.join(sorted({k.split('/')[-1] for k in gone}))}" if gone else "")
    )
    return 1 if differ or gone else 0


if __name__ == "__main__":
    sys.exit(main())
