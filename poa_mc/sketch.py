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
# kernels' tally (kernels/tally.py) counts a value in the bin of the number of edges at or below
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
    inverted_cdf takes) and the bin holding it (the number of running totals below k; NBINS for
    an empty row). One pass over each row and no (R, NBINS) temporaries: numpy's cumsum and
    compare took 90 ms a quantile at 2,560 replicas."""
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


def quantile(hist: np.ndarray, q: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(R,) nearest-rank q-quantile of each row's histogram, clipped to [lo, hi] (the exact
    minimum and maximum of the row); NaN for an empty row."""
    n, k, i = _rank_bins(np.ascontiguousarray(hist), float(q))
    v = np.clip(bin_value(np.minimum(i, NBINS - 1)), lo, hi)
    v = np.where(k <= 1, lo, np.where(k >= n, hi, v))  # the first and last ranks are known exactly
    return np.where(n > 0, v, np.nan)
