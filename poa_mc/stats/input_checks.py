"""Checks of PoA-hat's inputs, raised as ValueErrors that name where the bad entry is.

A NaN or infinite input does not fail on its own: pricing takes it silently (the ttft cost prices
NaN tokens as a 0 ms prefill; the slot clip at 0 turns -inf into no load) and the compiled
Hungarian loop never terminates on a row without a finite cost. So every recorded input and every
cost matrix is checked before it is priced or solved, and the error names the array, the replica,
its window and row, and the candidate worker of the first bad entry. Used by PoA-hat
(poa_mc.stats.poa_hat), its assignments (poa_mc.stats.assignment) and the predicted costs
(poa_mc.stats.predicted_costs).
"""

from __future__ import annotations

import numpy as np


def _bad_entry(x: np.ndarray, nonneg: bool) -> tuple[int, ...] | None:
    """Index of x's first entry that is not finite (or, with nonneg, below 0); None when all are.
    Two reductions in the common case (min and max carry a NaN through); the search on failure only."""
    a = np.asarray(x)
    if a.size == 0:
        return None
    if a.dtype.kind in "biu":
        if not nonneg or a.min() >= 0:
            return None
        bad = a < 0
    else:
        lo, hi = a.min(), a.max()
        if (lo >= 0 if nonneg else lo > -np.inf) and hi < np.inf:
            return None
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(a) | (a < 0) if nonneg else ~np.isfinite(a)
    return tuple(int(v) for v in np.argwhere(bad)[0])


def _window_name(w: int, windows_per_replica: int = 0) -> str:
    """`window w`, with the replica and its window there when windows_per_replica is known."""
    where = f"window {w}"
    if windows_per_replica:
        where += f" (replica {w // windows_per_replica}, window {w % windows_per_replica} of the replica)"
    return where


def _require_recorded(
    arrays: tuple[tuple[str, np.ndarray | None, bool], ...], window: int, order: np.ndarray | None = None
) -> None:
    """Raise ValueError naming the array, the replica and decision (its window and row, in decision
    order, and the candidate worker) of the first recorded cost input that is not finite, or below 0
    where `nonneg`: arrays of (name, (R, N) or (R, N, K) array or None, nonneg). Pricing would take
    it silently (the ttft cost prices NaN tokens as a 0 ms prefill; the slot clip turns -inf into 0)."""
    for name, x, nonneg in arrays:
        at = None if x is None else _bad_entry(x, nonneg)
        if at is None:
            continue
        r, e = at[0], at[1]
        n = np.shape(x)[1]
        nw = n // window if window > 0 else 0
        pos = e if order is None else int(np.flatnonzero(np.asarray(order)[r] == e)[0])
        where = f"replica {r}, decision {e}" + (f", candidate worker {at[2]}" if len(at) > 2 else "")
        if pos < nw * window:
            wi, i = divmod(pos, window)
            where += f": {_window_name(r * nw + wi, nw)}, row {i}"
        else:
            where += " (after the replica's last full window)"
        need = "finite and >= 0" if nonneg else "finite"
        raise ValueError(f"PoA-hat input {name} is {np.asarray(x)[at]} at {where}; it must be {need}")


def _require_finite(costs: np.ndarray, first_window: int = 0, windows_per_replica: int = 0) -> None:
    """Raise ValueError naming the first window and row with a NaN or infinite cost.

    The Hungarian loop never terminates on a row without a finite entry and silently returns a
    number for a partly NaN row, so bad input must be stopped before numba sees it.
    """
    if np.isfinite(costs).all():  # one pass in the common case; locate the culprit only on failure
        return
    bad = ~np.isfinite(costs.reshape(costs.shape[0], costs.shape[1], -1)).all(axis=2)
    w, i = (int(v) for v in np.argwhere(bad)[0])
    w += first_window
    where = _window_name(w, windows_per_replica)
    row = costs[w - first_window, i].ravel()
    raise ValueError(
        f"PoA-hat cost matrix of {where} has non-finite costs in row {i} (request {i} of the window): "
        f"{row[:8].tolist()}{' ...' if row.size > 8 else ''}; the assignment needs finite costs"
    )
