"""OPT of PoA-hat's windows: the min-cost assignment of a window's decisions to worker slots.

Each window is solved on its own (windows are independent) by the kernels' solver
(poa_mc/kernels/poa_hat.py, through poa_mc.kernels.cpu): `window_opt` over given cost matrices
(frozen pricing: one price per worker, repeated in every slot), `slot_priced_opt` over slot
prices built from the frozen loads and the per-slot charge (slot pricing; the router cost is built
in place, compiled). How the prices are defined, and why slot pricing keeps OPT <= ACTUAL, is in
poa_mc.stats.poa_hat's docstring. Costs are checked finite before the solver sees them
(poa_mc.stats.input_checks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from poa_mc.stats.input_checks import _bad_entry, _require_finite, _window_name

# poa_mc.kernels.cpu is imported where it is called: importing it builds the CPU kernels' dispatchers.


def _batch_assign(costs: np.ndarray, slots: int) -> np.ndarray:
    """OPT of each window: costs (W, n, K) -> (W,), every worker offered `slots` times. Windows
    are independent: solved in parallel by the kernels' solver (poa_mc/kernels/poa_hat.py)."""
    from poa_mc.kernels.cpu import batch_assign

    return batch_assign(costs, slots)


def _batch_assign_priced(prices: np.ndarray, k: int) -> np.ndarray:
    """OPT of each window from full price matrices: prices (W, n, slots * k) -> (W,), columns
    slot-major over k workers, in parallel."""
    from poa_mc.kernels.cpu import batch_assign_priced

    return batch_assign_priced(prices, k)


def window_opt(costs: np.ndarray, slots: int, *, windows_per_replica: int = 0) -> np.ndarray:
    """Min-cost assignment value of each window. costs (W, n, K); needs slots * K >= n.

    Raises ValueError for a NaN or infinite cost (naming the window and row; with
    windows_per_replica also the replica).
    """
    costs = np.ascontiguousarray(costs, dtype=np.float64)
    _, n, k = costs.shape
    if slots * k < n:
        raise ValueError(f"{slots} slots x {k} workers cannot take {n} requests")
    _require_finite(costs, 0, windows_per_replica)
    return _batch_assign(costs, int(slots))


Pricer = Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]


def _slot_router_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, block_size):
    """slot_priced_opt for Dynamo's router cost, priced and solved window by window by the kernels'
    solver (poa_mc/kernels/poa_hat.py): the same matrices as the generic path, built in place. NaN for a
    non-finite price."""
    from poa_mc.kernels.cpu import slot_router_opt

    return slot_router_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, block_size)


def slot_priced_opt(
    f_tok: np.ndarray,
    f_blk: np.ndarray,
    a_tok: np.ndarray,
    a_blk: np.ndarray,
    price: Pricer,
    slots: int,
    isl: np.ndarray | None = None,
    *,
    windows_per_replica: int = 0,
    transient_tok: np.ndarray | None = None,
    transient_blk: np.ndarray | None = None,
    router: tuple[float, float] | None = None,
) -> np.ndarray:
    """OPT of each window under slot pricing (see poa_mc.stats.poa_hat's module docstring).

    f_tok, f_blk (W, n, K): recorded tokens / blocks minus the window's earlier load, unclipped;
    a_tok, a_blk (W, K): the load charged per earlier request on each worker; price(tok, blk, isl)
    the cost function, applied to (c, n, slots, K) arrays with isl (c, n, 1) (or None);
    isl (W, n); transient_tok, transient_blk (W, K): requests per worker whose load was gone by the
    window's end (slot j then charges max(j - 1 - T_w, 0) earlier loads). router = (overlap
    weight, block size), when given, says `price` is router_cost with these (solved compiled).
    Returns (W,). ValueError naming the array, window, row and worker of an input that is not
    finite (f, a, T, isl), or below 0 (a, T, isl): the clip at 0 would price -inf as no load.
    """
    nwin, n, k = f_tok.shape
    if slots * k < n:
        raise ValueError(f"{slots} slots x {k} workers cannot take {n} requests")
    zero = np.zeros((nwin, k))
    t_tok = zero if transient_tok is None else transient_tok
    t_blk = zero if transient_blk is None else transient_blk
    inputs = (
        ("f_tok", f_tok, False), ("f_blk", f_blk, False), ("a_tok", a_tok, True), ("a_blk", a_blk, True),
        ("transient_tok", t_tok, True), ("transient_blk", t_blk, True), ("isl", isl, True),
    )  # fmt: skip
    for name, x, nonneg in inputs:
        at = None if x is None else _bad_entry(x, nonneg)
        if at is not None:
            rows = ("row", "worker") if np.ndim(x) == 3 or name == "isl" else ("worker",)
            where = ", ".join(f"{label} {v}" for label, v in zip(rows, at[1:]))
            need = "finite and >= 0" if nonneg else "finite"
            raise ValueError(
                f"slot pricing input {name} is {np.asarray(x)[at]} in {_window_name(at[0], windows_per_replica)}, "
                f"{where}; it must be {need}"
            )
    if router is not None:  # the router cost: the compiled path (same numbers, far faster)
        args = (f_tok, f_blk, a_tok, a_blk, t_tok, t_blk)
        arrays = (np.ascontiguousarray(x, dtype=np.float64) for x in args)
        out = _slot_router_opt(*arrays, int(slots), float(router[0]), float(router[1]))
        if not np.isnan(out).any():
            return out
    # (j - 1) for slot j, on the axis between requests and workers: a window's matrix is then
    # (n, slots * K) in one reshape, columns grouped by slot (their order is irrelevant to OPT).
    steps = np.arange(slots, dtype=np.float64)[None, None, :, None]
    # Chunks of windows keep the (c, n, slots, K) temporaries near 2 MB each: bounded memory, and
    # near-cache-sized arrays price faster than one big pass; enough windows to share out among threads.
    chunk = max(1, (1 << 18) // (n * slots * k))
    out = np.empty(nwin)
    for s in range(0, nwin, chunk):
        e = min(s + chunk, nwin)
        st_tok = np.maximum(steps - t_tok[s:e, None, None, :], 0.0)
        st_blk = np.maximum(steps - t_blk[s:e, None, None, :], 0.0)
        tok = np.maximum(f_tok[s:e, :, None, :] + st_tok * a_tok[s:e, None, None, :], 0.0)
        blk = np.maximum(f_blk[s:e, :, None, :] + st_blk * a_blk[s:e, None, None, :], 0.0)
        p = price(tok, blk, None if isl is None else isl[s:e, :, None])
        p = np.ascontiguousarray(np.broadcast_to(p, tok.shape), dtype=np.float64).reshape(e - s, n, slots * k)
        _require_finite(p, s, windows_per_replica)
        out[s:e] = _batch_assign_priced(p, k)
    return out
