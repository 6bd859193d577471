"""What LLVM left out of line in the lean CPU build: compiles it in an empty cache (minutes) and
reads the final IR of its replica loop.

    python bench/inline_report.py [--threshold N]

--threshold overrides poa_mc/kernels/cpu.INLINE_THRESHOLD["lean"] for this compile (250 is LLVM's -O3 default).
Prints the compile time, how many functions the loop's module still defines (each one a call
that marshals its array arguments) and the callees with the most call sites.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _readable(symbol: str) -> str:
    """numba's mangled name (_ZN, then length-prefixed parts) as module.function."""
    if not symbol.startswith("_ZN"):
        return symbol
    parts, i = [], 3
    while i < len(symbol) and symbol[i].isdigit():
        j = i
        while symbol[j].isdigit():
            j += 1
        n = int(symbol[i:j])
        parts.append(symbol[j : j + n])
        i = j + n
    parts = [x for x in parts if x not in ("poa_mc", "kernels", "build", "_3clocals_3e")]
    return ".".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threshold", type=int, default=None)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="poa-mc-inline-")  # before numba is imported

    from bench_engine import reference_cell

    from poa_mc.engine.engine import simulate
    from poa_mc.kernels import cpu

    if args.threshold is not None:
        cpu.INLINE_THRESHOLD["lean"] = args.threshold
    t0 = time.perf_counter()
    simulate(reference_cell(), replicas=1, requests=50, warmup=0, seed=1, stream=0, parallel=False)
    compile_s = time.perf_counter() - t0
    (ir,) = cpu._run_lean.inspect_llvm().values()
    defined = set(re.findall(r'^define [^@]*@"?([^"(]+)"?\(', ir, re.M))
    calls = Counter(c for c in re.findall(r'call [^@]*@"?([^"(]+)"?\(', ir) if c in defined)
    short = {name: _readable(name) for name in defined}
    print(f"inline threshold {cpu.INLINE_THRESHOLD['lean']}: compile {compile_s:.1f} s (lean build, empty cache)")
    print(f"functions defined in _run_lean's module: {len(defined)}; call sites to them: {sum(calls.values())}")
    for name, n in calls.most_common(args.top):
        print(f"  {n:4d}  {short[name][:100]}")


if __name__ == "__main__":
    main()
