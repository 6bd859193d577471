"""The parameters of a batch of replicas as both targets' drivers read them: one row per cell.

A launch may hold the replicas of several cells (poa_mc/engine/cell_batch.py). Their packed
parameters are stacked, each padded with zeros to the longest: ips (cells, NP_I + nodes) int64,
fps (cells, NF_P + T) float64, tabss (cells, rows, width) float64. Replica r reads row cell[r].
The padding is never read: the kernels take every length and offset from the cell's own ip and
fp, never from an array's shape, and a row of a stack is a contiguous array of the same type as a
cell's own, so the kernels compile once for both. A cell alone is a stack of one row.
"""

from __future__ import annotations

import numpy as np

from .layout import P_G2CAP, P_NSTAGE, P_TRACE, TRACE_NONE


def lean(ip: np.ndarray) -> bool:
    """True if the lean build can run this cell: no lower KV tiers, no replayed trace, no load
    schedule (the CPU target's two builds, poa_mc/kernels/cpu.py; a batch's cells all run the same
    one)."""
    return int(ip[P_G2CAP]) == 0 and int(ip[P_TRACE]) == TRACE_NONE and int(ip[P_NSTAGE]) == 0


def stack(ips: list[np.ndarray], fps: list[np.ndarray], tabss: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The cells' (ip, fp, tabs) stacked into (ips, fps, tabss), each zero-padded to the longest."""
    out = []
    for arrays, dtype in ((ips, np.int64), (fps, np.float64), (tabss, np.float64)):
        shape = tuple(max(s) for s in zip(*(a.shape for a in arrays)))
        stacked = np.zeros((len(arrays), *shape), dtype=dtype)
        for i, a in enumerate(arrays):
            stacked[(i, *(slice(0, d) for d in a.shape))] = a
        out.append(stacked)
    return tuple(out)


def stacked(
    ip: np.ndarray, fp: np.ndarray, tabs: np.ndarray, n: int, cell: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(cell, ips, fps, tabss) for a driver: with `cell` (n,), ip, fp and tabs are a batch's stacks
    already; without, they are one cell's arrays, a stack of one row every replica reads."""
    if cell is not None:
        return np.ascontiguousarray(cell, dtype=np.int64), ip, fp, tabs
    one = (np.ascontiguousarray(x)[None] for x in (ip, fp, tabs))
    return (np.zeros(n, dtype=np.int64), *one)
