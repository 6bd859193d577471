"""The load a window's earlier decisions put on each worker: PoA-hat's load bookkeeping.

A decision's recorded view of a worker includes what the same window's earlier decisions booked
there. PoA-hat (poa_mc.stats.poa_hat) re-assigns a window's decisions as if from its starting
state, so that load is taken off (`freeze_load`, `_load_before`: all of it, or with decision and
release times only what was still there); slot pricing charges each earlier request on a worker
the smallest load the window added there (`_min_added`) and counts the requests whose load was gone
by the window's end (`_transient`). Plain numpy over (replica, window, decision, worker) arrays;
the compiled path (poa_mc/kernels/poa_hat.py) works out the same numbers window by window.
"""

from __future__ import annotations

import numpy as np


def _load_before(
    chosen: np.ndarray,
    added: np.ndarray,
    window: int,
    k: int,
    decided: np.ndarray | None = None,
    released: np.ndarray | None = None,
) -> np.ndarray:
    """(R, nw, window, K): the load the window's earlier decisions added to each worker and that
    is still there at each decision: all of it, or with decision and release times (R, N) only
    that of the earlier decisions whose load is released after the decision at hand."""
    r = chosen.shape[0]
    m = (chosen.shape[1] // window) * window
    onehot = np.zeros((r, m, k))
    np.put_along_axis(onehot, chosen[:, :m, None].astype(np.int64), added[:, :m, None].astype(np.float64), axis=2)
    onehot = onehot.reshape(r, m // window, window, k)
    if decided is None or released is None:
        return np.cumsum(onehot, axis=2) - onehot  # exclusive prefix sum within the window
    shape = (r, m // window, window)
    t = np.asarray(decided, dtype=np.float64)[:, :m].reshape(shape)
    out = np.asarray(released, dtype=np.float64)[:, :m].reshape(shape)
    earlier = np.tril(np.ones((window, window), dtype=bool), -1)  # [i, e]: e before i
    present = earlier & (out[:, :, None, :] > t[:, :, :, None])  # e's load still there at i
    # a batched (window x window) @ (window x K) product: matmul runs it ~10x faster than einsum's
    # loops, with the same sums (whole numbers of tokens or blocks: exact in float64)
    return np.matmul(present.astype(np.float64), onehot)


def _transient(
    chosen: np.ndarray, window: int, k: int, decided: np.ndarray | None, released: np.ndarray | None
) -> np.ndarray:
    """(R, nw, K): per window and worker, the router's requests there whose load was released by
    the window's last decision (0 without times). The j-th request on a worker has at least
    j - 1 - T_w earlier ones whose load it still saw, which keeps slot pricing a relaxation when
    requests complete inside a window (at low load all of them do)."""
    r = chosen.shape[0]
    nw = chosen.shape[1] // window
    if decided is None or released is None or nw == 0:
        return np.zeros((r, nw, k))
    shape = (r, nw, window)
    t_last = np.asarray(decided, dtype=np.float64)[:, : nw * window].reshape(shape).max(axis=2, keepdims=True)
    gone = np.asarray(released, dtype=np.float64)[:, : nw * window].reshape(shape) <= t_last
    ch = chosen[:, : nw * window].reshape(shape)[..., None].astype(np.int64) == np.arange(k)
    return (ch & gone[..., None]).sum(axis=2).astype(np.float64)


def freeze_load(
    values: np.ndarray,
    chosen: np.ndarray,
    added: np.ndarray,
    window: int,
    decided: np.ndarray | None = None,
    released: np.ndarray | None = None,
) -> np.ndarray:
    """Undo, inside each window, the load that the window's earlier decisions added.

    values (R, N, K): a load-bearing quantity recorded at each decision (tokens or blocks);
    chosen (R, N): worker index chosen; added (R, N): what each decision added to its worker.
    Returns values minus, for each decision, the sum of `added` over the earlier decisions of its
    window that went to the same worker (clipped at 0); with decision and release times, only the
    load still there at each decision. Trailing partial windows are left as they are (unused).
    """
    r, n, k = values.shape
    nw = n // window
    out = np.array(values, dtype=np.float64, copy=True)
    if nw == 0:
        return out
    m = nw * window
    before = _load_before(chosen, added, window, k, decided, released)
    out[:, :m] = np.maximum(out[:, :m] - before.reshape(r, m, k), 0.0)
    return out


def _min_added(chosen: np.ndarray, added: np.ndarray, window: int, k: int) -> np.ndarray:
    """(R, nw, K): per window and worker, the smallest load added by a request the router sent
    there, or the smallest over all the window's requests where it sent none (slot pricing's a_w).
    """
    r = chosen.shape[0]
    nw = chosen.shape[1] // window
    ch = chosen[:, : nw * window].reshape(r, nw, window, 1).astype(np.int64)
    ad = np.asarray(added, dtype=np.float64)[:, : nw * window].reshape(r, nw, window, 1)
    sent = ch == np.arange(k)
    least = np.where(sent, ad, np.inf).min(axis=2)
    return np.where(sent.any(axis=2), least, ad.min(axis=2))
