"""Dynamo's Planner, moving a GPU budget's prefill/decode split during the run (`PlannerSpec`), and
the splits a budget allows (`budget_splits`, which Game 1 and the reducer share).

Part of the cell's spec (poa_mc/model/spec.py assembles the parts into a `CellSpec`); the grid's
sections (poa_mc/model/sections.py) read it without the rest of the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from poa_mc.model.spec_error import SpecError


def budget_splits(budget: int, prefill_gpus: int, decode_gpus: int) -> list[tuple[int, int]]:
    """Every (nP, nD) with nP, nD >= 1 that uses a GPU budget as fully as whole workers allow:
    for nP = 1, 2, ... the most decode workers the rest holds (poa_mc/kernels/planner.py walks the same
    path)."""
    out = []
    n_p = 1
    while n_p * prefill_gpus + decode_gpus <= budget:
        out.append((n_p, (budget - n_p * prefill_gpus) // decode_gpus))
        n_p += 1
    return out


@dataclass(frozen=True)
class PlannerSpec:
    """Dynamo's Planner moving the prefill/decode split of a GPU budget during the run
    (poa_mc/kernels/planner.py): every `interval_ms` it compares the interval's mean TTFT and ITL with
    their targets and moves one worker's GPUs to the pool further over its target. The cluster's
    n_prefill / n_decode are the split it starts at; the splits are Game 1's
    (poa_mc.stats.games.splits). A new worker starts `startup_ms` after the GPUs it needs are free."""

    gpu_budget: int
    prefill_gpus: int = 1
    decode_gpus: int = 1
    interval_ms: float = 30_000.0
    startup_ms: float = 0.0
    ttft_ms: float = 0.0  # TTFT target
    itl_ms: float = 0.0  # ITL target
    log_moves: int = 256

    def splits(self) -> list[tuple[int, int]]:
        return budget_splits(self.gpu_budget, self.prefill_gpus, self.decode_gpus)

    def validate(self, path: str = "planner") -> None:
        for name in ("gpu_budget", "prefill_gpus", "decode_gpus"):
            if getattr(self, name) < 1:
                raise SpecError(f"{path}.{name}", f"must be >= 1, got {getattr(self, name)}")
        if len(self.splits()) < 2:
            raise SpecError(f"{path}.gpu_budget", "makes fewer than 2 splits: the planner has nowhere to move")
        if not self.interval_ms >= 1.0:
            raise SpecError(f"{path}.interval_ms", f"must be >= 1 ms, got {self.interval_ms}")
        if not self.startup_ms >= 0:
            raise SpecError(f"{path}.startup_ms", f"must be >= 0 ms, got {self.startup_ms}")
        for name in ("ttft_ms", "itl_ms"):
            if not getattr(self, name) > 0:
                raise SpecError(f"{path}.{name}", f"must be > 0 ms (the planner's target), got {getattr(self, name)}")
        if self.log_moves < 0:
            raise SpecError(f"{path}.log_moves", f"must be >= 0, got {self.log_moves}")
