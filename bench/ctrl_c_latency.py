"""How long `poa-mc run` takes to stop after Ctrl-C (SIGINT) while the engine simulates a cell.

    python bench/ctrl_c_latency.py [--tries 3]

Runs the quickstart with cells big enough (1500 replicas x 2000 requests) that the signal lands
inside a kernel call, sends SIGINT half a second after the first cell finished, and prints the
exit code and the time to exit.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def once(out: Path) -> tuple[int, float]:
    args = ["run", "--out", str(out), "--replicas", "1500", "--requests", "2000", "--backend", "cpu"]
    cmd = [sys.executable, "-m", "poa_mc.cli.main", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("[1/"):
            break
    time.sleep(0.5)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    proc.stderr.read()
    rc = proc.wait()
    return rc, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tries", type=int, default=3)
    a = ap.parse_args()
    for i in range(a.tries):
        out = Path(tempfile.mkdtemp()) / "run"
        rc, dt = once(out)
        shutil.rmtree(out.parent, ignore_errors=True)
        print(f"try {i + 1}: exit {rc}, stopped {dt:.3f} s after SIGINT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
