"""Summarise bench/ab_paired.sh output (read from a file or stdin): for the best and the median
rates, the mean of each side over rounds 2 and later (round 1 warms both sides' page caches), this
checkout's change against the commit in percent, and in how many of those rounds it was ahead.

    bash bench/ab_paired.sh HEAD 8 | tee /tmp/ab.txt; python bench/ab_summary.py /tmp/ab.txt
"""

from __future__ import annotations

import re
import statistics
import sys

LINE = re.compile(r"^(\S+) cpu(\d) best ([\d.]+) M\s+median ([\d.]+) M")


def summarise(lines: list[str]) -> str:
    rounds: list[dict[str, tuple[float, float]]] = []
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        side = "this" if m[1] == "this" else "old"
        if not rounds or side in rounds[-1]:
            rounds.append({})
        rounds[-1][side] = (float(m[3]), float(m[4]))
    paired = [r for r in rounds[1:] if len(r) == 2]
    if not paired:
        return "no paired rounds after the first"
    out = []
    for k, name in enumerate(("best", "median")):
        old = [r["old"][k] for r in paired]
        new = [r["this"][k] for r in paired]
        ahead = sum(n > o for n, o in zip(new, old, strict=True))
        a, b = statistics.fmean(old), statistics.fmean(new)
        out.append(f"{name}: old {a:.3f} M  this {b:.3f} M  {100 * (b / a - 1):+.1f}%  ahead {ahead}/{len(paired)}")
    return "\n".join(out)


if __name__ == "__main__":
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    print(summarise(src.read().splitlines()))
