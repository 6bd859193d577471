"""The engine's measured speed on this machine, kept so that `validate` can say how long a grid
will take before it runs.

After each run the runner records its cells' work (`grid.estimate_cost` units: simulated requests
weighted by cluster size) per second of engine time, per backend, counting only cells of at least
MIN_TIMED_COST units (smaller ones time the per-call overhead), in
~/.cache/poa-mc/speed.json (XDG_CACHE_HOME is honoured; POA_MC_SPEED_FILE overrides the path).
The estimate is the last few runs' median rate; compile time is not in it (it is said apart).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

KEEP = 5  # rates kept per backend: recent enough to follow an upgrade, enough to damp one odd run
MIN_TIMED_COST = 2e4  # cells smaller than this time the engine's per-call overhead, not its speed
CELL_OVERHEAD_S = 0.02  # per cell on top of its work (set-up, copies, writing its samples)


def speed_file() -> Path:
    if os.environ.get("POA_MC_SPEED_FILE"):
        return Path(os.environ["POA_MC_SPEED_FILE"])
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "poa-mc" / "speed.json"


def _read() -> dict[str, list[float]]:
    try:
        data = json.loads(speed_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(backend: str, cost: float, seconds: float) -> None:
    """Add one run's rate (cost units per engine second); never fails a run over a cache file."""
    if cost <= 0 or seconds <= 0.05:  # a run this short times the clock, not the engine
        return
    data = _read()
    rates = [float(r) for r in data.get(backend, []) if isinstance(r, (int, float))]
    data[backend] = (rates + [cost / seconds])[-KEEP:]
    path = speed_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass


def expected_seconds(cost: float, backend: str, cells: int = 0) -> float | None:
    """Seconds to simulate `cost` units in `cells` cells at this machine's measured rate; None
    before any run here timed a cell big enough."""
    rates = _read().get(backend)
    if not rates:
        return None
    return cost / statistics.median(rates) + CELL_OVERHEAD_S * cells
