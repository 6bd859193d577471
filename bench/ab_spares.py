"""Fresh arrays against a finished batch's arrays reused (kernels/cpu.py), alternating in one
process on the reference cell of bench_engine.py, 256 replicas x 2000 measured requests: the
same compiled code either way, so the pair differs only in the page faults of fresh memory.

    python bench/ab_spares.py [--serial] [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import reference_cell  # noqa: E402
from poa_mc.kernels import cpu  # noqa: E402

from poa_mc.engine import simulate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serial", action="store_true", help="one thread (default: all of numba's)")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    kw = dict(replicas=256, requests=2000, warmup=200, seed=1, stream=0, parallel=not args.serial)
    n = simulate(reference_cell(), **kw).simulated_requests  # loads the kernels
    rates: dict[str, list[float]] = {"fresh": [], "reused": []}
    for i in range(args.rounds):
        for mode in ("fresh", "reused") if i % 2 == 0 else ("reused", "fresh"):
            if mode == "fresh":
                cpu.drop_spares()
            rates[mode].append(n / simulate(reference_cell(), **kw).wall_s)
    for mode, r in rates.items():
        print(f"{mode}: best {max(r) / 1e6:.3f} M req/s, median {statistics.median(r) / 1e6:.3f} M ({len(r)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
