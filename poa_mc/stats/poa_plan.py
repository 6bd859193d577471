"""Which routing decision PoA-hat assesses in a cell, priced how, with which times: one reading of
a cell's spec and its [poa] settings for the two places that work PoA-hat out, the host's
reduction (poa_mc.stats.accumulate, from recorded columns) and the kernels (poa_mc/kernels/poa_hat.py, from
each replica's request rows as it ends; poa_mc.engine.engine packs `kernel_params`).

The decision: `cluster.poa_stage` (prefill_first's prefill choice, or a decode choice). When it is
made and when the load it booked leaves its worker:

| decision                      | made at          | its tokens leave  | its blocks leave |
|-------------------------------|------------------|-------------------|------------------|
| prefill (prefill_first)       | arrival          | prefill end       | prefill end      |
| decode, prefill_first         | prefill end      | request end       | request end      |
| decode, other flows           | arrival          | first token       | request end      |

prefill_first's decode decisions come as prefills end, not in arrival order: windows follow the
order they were made in. There the [poa] cost `ttft` prices the decision by its first decode step
(`decode_step`), `observed` by the latency observed after it (`observed_step`), and the router
cost weighs tokens by the policy's decode_overlap_weight (Dynamo's decode choice ignores them by
default); elsewhere [poa]'s cost and overlap_weight apply as they are.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from poa_mc.kernels import layout as L
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.stats.predicted_costs import predicted_step_ms

POA_KEYS = ("stage", "window", "slots", "cost", "overlap_weight", "freeze", "pricing")
# a step table longer than this is not made (the host's compiled path draws the same line)
STEP_TABLE_MAX = 1 << 22


@dataclass(frozen=True)
class PoaPlan:
    stage: str  # prefill | decode
    lo: int  # the decision's first candidate worker (global index, its column in the candidates)
    k: int  # candidate workers
    times: str  # prefill | after_prefill | arrival (the module table's rows)
    cost: str  # poa_mc.stats.poa_hat's flavour: router | ttft | observed | decode_step | observed_step
    omega: float  # the router cost's weight on tokens
    window: int
    slots: int  # as [poa] gives it (0: the pricing's default)
    freeze: bool
    pricing: str  # slot | frozen
    game: bool  # False: one candidate, or a planner moving workers (PoA-hat undefined)
    # observed_step: the latency observed from the decision on ("decision"), or the whole TTFT
    # its client saw ("client")
    seen_from: str = "decision"

    @property
    def chosen(self) -> str:
        """The sample column of the worker the decision chose (0..k-1)."""
        return "prefill_worker" if self.stage == "prefill" else "decode_worker"

    @property
    def added(self) -> tuple[str, str]:
        """The sample columns of the tokens and blocks the decision booked on its worker."""
        return f"{self.stage}_added_tokens", f"{self.stage}_added_blocks"

    def slots_for_window(self) -> int:
        return self.slots or (self.window if self.pricing == "slot" else -(-self.window // self.k))


def settings(poa: dict[str, Any]) -> str:
    """The [poa] settings PoA-hat's sums depend on (a canonical JSON string)."""
    keys = {k: poa.get(k) for k in POA_KEYS}
    if poa.get("observed_from", "decision") != "decision":  # at its default, sums made before it match
        keys["observed_from"] = poa["observed_from"]
    return json.dumps(keys, sort_keys=True)


def plan(spec: CellSpec, poa: dict[str, Any]) -> PoaPlan:
    """The cell's PoA-hat plan from its spec and [poa]."""
    cluster = spec.cluster
    stage, lo, k = cluster.poa_stage(poa.get("stage", "auto"))
    if stage == "prefill":
        times = "prefill"
    elif cluster.flow == "prefill_first":
        times = "after_prefill"
    else:
        times = "arrival"
    cost = poa.get("cost", "router")
    omega = float(poa.get("overlap_weight", 1.0))
    if times == "after_prefill":
        cost = {"ttft": "decode_step", "observed": "observed_step"}.get(cost, "router")
        omega = float(spec.policy.decode_overlap_weight)
    return PoaPlan(
        stage=stage, lo=lo, k=k, times=times, cost=cost, omega=omega, window=int(poa["window"]),
        slots=int(poa.get("slots", 0)), freeze=bool(poa.get("freeze", True)), pricing=poa.get("pricing", "slot"),
        game=k >= 2 and spec.planner is None, seen_from=poa.get("observed_from", "decision"),
    )  # fmt: skip


_KINDS = {"router": L.POA_ROUTER, "decode_step": L.POA_STEP, "observed_step": L.POA_OBSERVED_STEP}
_TIMES = {"prefill": L.POA_T_PREFILL, "after_prefill": L.POA_T_AFTER_PREFILL, "arrival": L.POA_T_ARRIVAL}
KERNEL_MATRIX_MAX = 1 << 16  # a window's assignment matrix the kernels solve (n x slots k prices)


@functools.lru_cache(maxsize=16)
def _step_table(profile: ProfileSpec, kv_blocks: int, block_size: int, size: int) -> np.ndarray:
    """The predicted decode step (ms) at 0, 1, ..., size - 1 active blocks. The cells of a grid
    share a few (profile, KV capacity) pairs: worked out once for each, where every cell had paid
    it (10 ms a cell on the paper presets, bench/RESULTS.md)."""
    return predicted_step_ms(np.arange(size, dtype=np.float64), profile, kv_blocks, block_size)


def kernel_params(p: PoaPlan, spec: CellSpec, requests: int) -> tuple[dict[int, int], float, np.ndarray] | None:
    """What the kernels need to work this plan out (ip entries, the token weight, the step table,
    empty for the router cost), or None where the host does: no game, frozen pricing, no load
    accounting, the predicted-TTFT flavours of a prefill or arrival decision (they price a prompt
    the kernels do not record), fewer slots than the router could have used, or a window whose
    matrix is too big for a replica's scratch."""
    slots = p.slots_for_window()
    if not p.game or p.pricing != "slot" or not p.freeze or p.cost not in _KINDS or requests < p.window:
        return None
    if slots * p.k < p.window or p.window * slots * p.k > KERNEL_MATRIX_MAX:
        return None
    step = np.empty(0)
    if p.cost != "router":
        cluster = spec.cluster
        kv = int(cluster.decode_kv_blocks)
        size = min(STEP_TABLE_MAX, max(1 << 16, 4 * kv))  # as far as the kernels look up
        # a copy: each cell's kernels get an array of their own
        step = _step_table(spec.profile, kv, int(cluster.block_size), size).copy()
    ip = {
        L.P_POA: L.POA_OBSERVED_CLIENT if p.cost == "observed_step" and p.seen_from == "client" else _KINDS[p.cost],
        L.P_POA_WIN: p.window, L.P_POA_SLOTS: slots, L.P_POA_LO: p.lo,
        L.P_POA_K: p.k, L.P_POA_TIMES: _TIMES[p.times],
    }  # fmt: skip
    return ip, p.omega, np.ascontiguousarray(step, dtype=np.float64)
