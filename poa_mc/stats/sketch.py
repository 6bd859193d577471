"""Log-binned histograms: per-replica latency quantiles without keeping the requests.

Bin 0 holds values below LO_MS (zero included); bin i >= 1 holds [LO_MS * GAMMA**(i-1),
LO_MS * GAMMA**i); the last bin also takes everything at or above HI_MS. A quantile is the
nearest-rank one (numpy's `inverted_cdf`: the ceil(q n)-th smallest value): the bin holding that
rank, reported at its geometric middle LO_MS * GAMMA**(i - 1/2) and clipped to the replica's
exact minimum and maximum (which are what the first and the last rank report). Between LO_MS
and HI_MS the reported value is within RESOLUTION = sqrt(GAMMA) - 1 = 0.499% of the exact
nearest-rank quantile (relative); outside that range it is the exact extreme on that side.
"""

from __future__ import annotations

import math

import numba
import numpy as np

GAMMA = 1.01
LO_MS = 1e-3  # 1 microsecond
HI_MS = 1e8  # about 28 hours
NBINS = 2 + math.ceil(math.log(HI_MS / LO_MS) / math.log(GAMMA))
RESOLUTION = math.sqrt(GAMMA) - 1.0
_LOG_G = math.log(GAMMA)
# the bins' lower edges LO_MS * GAMMA**i, i = 0 .. NBINS - 2, the one definition of the bins: the
# kernels' tally (poa_mc/kernels/tally.py) counts a value in the bin of the number of edges at or below
# it, as bin_of does, so either target and the host bin every value alike
EDGES = LO_MS * np.power(GAMMA, np.arange(NBINS - 1, dtype=np.float64))


def bin_of(x: np.ndarray) -> np.ndarray:
    """Bin index of each value (int64, same shape): the number of EDGES at or below it."""
    x = np.asarray(x, dtype=np.float64)
    return np.searchsorted(EDGES, x, side="right").astype(np.int64)


def histograms(x: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """(R, NBINS) int32 counts of the rows of x (R, N); `keep` (R, N) bool selects entries."""
    r = x.shape[0]
    b = bin_of(x) + (np.arange(r, dtype=np.int64) * NBINS)[:, None]
    flat = b.reshape(-1) if keep is None else b[keep]
    return np.bincount(flat, minlength=r * NBINS).reshape(r, NBINS).astype(np.int32)


def bin_value(i: np.ndarray) -> np.ndarray:
    """The value a bin stands for: its geometric middle (bin 0: 0)."""
    i = np.asarray(i, dtype=np.float64)
    return np.where(i > 0, LO_MS * np.exp((i - 0.5) * _LOG_G), 0.0)


@numba.njit(cache=True, nogil=True)
def _rank_bins(hist: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Per row: its count n, the nearest rank k = max(ceil(q n - 1e-9 n), 1) (the rank numpy's
    inverted_cdf takes) and the column holding it (the number of running totals below k; the
    row's width for an empty row). One pass over each row and no (R, NBINS) temporaries: numpy's
    cumsum and compare took 90 ms a quantile at 2,560 replicas."""
    r, m = hist.shape
    n = np.zeros(r, np.int64)
    k = np.empty(r, np.int64)
    i = np.empty(r, np.int64)
    for row in range(r):
        total = np.int64(0)
        for j in range(m):
            total += hist[row, j]
        n[row] = total
        rank = np.int64(math.ceil(q * total - 1e-9 * total))
        k[row] = rank if rank > 1 else 1
        run = np.int64(0)
        j = 0
        while j < m:
            run += hist[row, j]
            if run >= k[row]:
                break
            j += 1
        i[row] = j
    return n, k, i


def quantile(hist: np.ndarray, q: float, lo: np.ndarray, hi: np.ndarray, first: np.ndarray | int = 0) -> np.ndarray:
    """(R,) nearest-rank q-quantile of each row's histogram, clipped to [lo, hi] (the exact
    minimum and maximum of the row); NaN for an empty row. `first`: the bin of hist's column 0
    (per row or one for all), for histograms kept as a span of bins (poa_mc.stats.accumulate); 0 for
    whole (R, NBINS) ones."""
    n, k, i = _rank_bins(np.ascontiguousarray(hist), float(q))
    v = np.clip(bin_value(np.minimum(np.asarray(first, dtype=np.int64) + i, NBINS - 1)), lo, hi)
    v = np.where(k <= 1, lo, np.where(k >= n, hi, v))  # the first and last ranks are known exactly
    return np.where(n > 0, v, np.nan)


# A cell's requests fill a few dozen to a few hundred of the NBINS bins, so histograms are kept
# (in memory and on disk, poa_mc.stats.accumulate) as a span: (R,) first bins, the same in every row of
# a batch or a cell, and (R, width) counts from that bin on. Whole, a replica's three histograms
# are 30 KB, and a cell holds every replica's until it ends (25,600 replicas: 0.8 GB, twice that
# joined); read back whole from Parquet they took 0.4 s at 2,560 replicas, as spans 5 ms.


def span(hist: np.ndarray, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """hist's rows (column 0 is bin `first`) trimmed to the bins from the first non-empty one of
    any row to the last: (each row's first bin, all equal; (R, width) int32 counts)."""
    used = np.flatnonzero(hist.any(axis=0))
    a, b = (int(used[0]), int(used[-1]) + 1) if used.size else (0, 1)
    return np.full(hist.shape[0], first + a, dtype=np.int32), np.ascontiguousarray(hist[:, a:b], dtype=np.int32)


def respan(firsts: list[np.ndarray], hists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Parts of rows kept as spans (each row's first bin, the counts) stacked over the union of
    their spans: (first bins, all equal; (R, width) counts). A part with no counts adds rows of
    zeros and no bins."""
    rows = sum(len(f) for f in firsts)
    lo = [np.asarray(f, dtype=np.int64) for f in firsts]
    filled = [(f, h) for f, h in zip(lo, hists) if h.any()]
    a = min(int(f.min()) for f, _ in filled) if filled else 0
    b = max(int((f + h.shape[1]).max()) for f, h in filled) if filled else 1
    out = np.zeros((rows, b - a), dtype=np.int32)
    r0 = 0
    for f, h in zip(lo, hists):
        if h.any() and (f == f[0]).all():  # a batch's or a cell's rows: one block
            out[r0 : r0 + len(f), f[0] - a : f[0] - a + h.shape[1]] = h
        elif h.any():
            for j in range(len(f)):
                out[r0 + j, f[j] - a : f[j] - a + h.shape[1]] = h[j]
        r0 += len(f)
    return np.full(rows, a, dtype=np.int32), out


def whole(hist: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Rows kept as spans as whole (R, NBINS) histograms."""
    out = np.zeros((hist.shape[0], NBINS), dtype=np.int32)
    for a in np.unique(first):
        rows = np.flatnonzero(first == a)
        out[rows, a : a + hist.shape[1]] = hist[rows]
    return out


def join_rows(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Dicts of per-row arrays (batches of replicas, in order) as one: each array concatenated,
    and each histogram kept as a span (a key `hist_*` beside `hist_*_lo`, poa_mc.stats.accumulate's
    names) stacked over the union of the parts' spans."""
    if not parts:
        return {}
    out = {}
    for k in parts[0]:
        if k.startswith("hist_") and f"{k}_lo" in parts[0]:
            out[f"{k}_lo"], out[k] = respan([p[f"{k}_lo"] for p in parts], [p[k] for p in parts])
        elif not (k.startswith("hist_") and k.endswith("_lo") and k[:-3] in parts[0]):
            out[k] = np.concatenate([p[k] for p in parts])
    return {k: out[k] for k in parts[0]}
