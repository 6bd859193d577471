"""What a user waits for before anything runs: `poa-mc --help`, and `poa-mc run` up to its first
finished cell (the quickstart, kernels already compiled), median of a few tries.

    python bench/bench_startup.py [--tries 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "poa_mc.cli.main"]


def help_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([*CLI, "--help"], capture_output=True, check=True)
    return time.perf_counter() - t0


def first_cell_s() -> tuple[float, float]:
    out = Path(tempfile.mkdtemp()) / "run"
    t0 = time.perf_counter()
    proc = subprocess.Popen([*CLI, "run", "--out", str(out), "--backend", "cpu"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    first = float("nan")
    for line in proc.stderr:
        if line.startswith("[1/"):
            first = time.perf_counter() - t0
    proc.communicate()
    total = time.perf_counter() - t0
    shutil.rmtree(out.parent, ignore_errors=True)
    return first, total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tries", type=int, default=5)
    a = ap.parse_args()
    first_cell_s()  # warm the kernel cache and the OS file cache
    helps = [help_s() for _ in range(a.tries)]
    runs = [first_cell_s() for _ in range(a.tries)]
    print(
        f"poa-mc --help {statistics.median(helps):.2f} s; poa-mc run (quickstart): first cell done after "
        f"{statistics.median(r[0] for r in runs):.2f} s, whole run {statistics.median(r[1] for r in runs):.2f} s "
        f"(medians of {a.tries})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
