"""The CUDA kernels' resources on sm_90 (H100/H200) and sm_100 (B200), compiled without a GPU:
registers a thread, stack frame, spill bytes and occupancy at 64 threads a block, per kernel and
architecture, as a markdown table for bench/RESULTS.md (needs `pip install -e '.[dev,gpu]'`).

    python3 bench/ptx_report.py [--max-registers 128,168] [--json FILE]

The cell is tests/every_path.py's first (every cell launches the same kernels:
tests/test_ptx.py). `--max-registers` adds rows with ptxas's register cap, to see what a lower
cap would cost in spills for the occupancy it buys.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poa_mc.engine import ptx  # noqa: E402
from tests.every_path import cells  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-registers", default="", help="comma-separated register caps to add (ptxas -maxrregcount)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    caps = (None, *(int(x) for x in args.max_registers.split(",") if x))
    t0 = time.perf_counter()
    rows = ptx.compile_kernels(cells()[0][3], max_registers=caps)
    took = time.perf_counter() - t0
    cols = ("kernel", "arch", "registers", "stack frame (B)", "spill stores (B)", "spill loads (B)", "occupancy at 64")
    print("| " + " | ".join((*cols, "PTX (KB)")) + " |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r.kernel} | {r.arch} | {r.registers} | {r.stack_bytes:,} | {r.spill_stores:,} | {r.spill_loads:,} "
            f"| {r.occupancy():.1%} | {r.ptx_bytes / 1e3:,.0f} |"
        )
    print(f"\ncompiled and assembled in {took:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([r.row() for r in rows], indent=1))


if __name__ == "__main__":
    main()
