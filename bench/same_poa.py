"""Are PoA-hat's numbers unchanged? Runs the cells of bench/same_results.py through the engine's
streamed reduction (as `poa-mc run` does: tallies and, where the engine takes them, PoA-hat's
[poa] settings) under several [poa] settings, and writes each cell's per-replica PoA-hat sums to
an npz, so that two commits can be compared, as same_results.py compares the simulation:

    python bench/at_commit.py COMMIT bench/same_poa.py /tmp/poa-before.npz
    python bench/same_poa.py /tmp/poa-after.npz --compare /tmp/poa-before.npz
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from regimes import REGIMES  # noqa: E402
from same_results import main, policy_cells, table_cells, tier_cells  # noqa: E402

from poa_mc.engine.engine import simulate
from poa_mc.stats.accumulate import accumulate  # noqa: E402

SETTINGS = {  # the flavours the kernels solve, and two they leave to the host
    "router": {"window": 8},
    "ttft": {"window": 8, "cost": "ttft"},
    "observed": {"window": 8, "cost": "observed"},
    "prefill": {"window": 8, "stage": "prefill"},
    "w16s8": {"window": 16, "slots": 8},
    "frozen": {"window": 8, "pricing": "frozen"},
}


def sums(replicas: int, requests: int) -> dict[str, np.ndarray]:
    takes_poa = "poa" in inspect.signature(simulate).parameters
    out = {}
    solved = []  # per run: whether the kernels worked PoA-hat out (a commit that has them)
    for name, spec in sorted({**REGIMES, **tier_cells(), **policy_cells(), **table_cells()}.items()):
        spec_d = spec
        for label, poa in SETTINGS.items():
            if poa.get("stage") == "prefill" and not (
                spec.cluster.flow == "prefill_first" and spec.cluster.n_prefill > 1
            ):
                continue

            def reduce(cols, rep, logs, poa=poa, spec_d=spec_d):
                made = cols.get("poa_kernel")
                solved.append(made is not None and not np.isnan(made[:, 1]).any())
                return accumulate(cols, rep, spec_d, poa, {}, logs)

            extra = {"poa": poa} if takes_poa else {}
            res = simulate(spec, replicas=replicas, requests=requests, warmup=50, seed=5, stream=3, keep=0,
                           reduce=reduce, tally=True, slo={}, **extra)  # fmt: skip
            acc = res.reduced()
            for k in ("poa_actual", "poa_opt", "poa_windows"):
                out[f"{name}/{label}/{k}"] = np.asarray(acc[k])
    print(f"the kernels worked PoA-hat out in {sum(solved)} of {len(solved)} batches")
    return out


if __name__ == "__main__":
    sys.exit(main(sums))
