"""A replica's tally of its measured requests: the per-replica numbers poa_mc.stats.accumulate's row
needs of them (counts, sums, extremes, the SLO count, log-binned histograms), summed over the
replica's request rows in row (arrival) order once it has finished, on the target that simulated
it. With ip[P_TALLY] = 1 the replica drivers (poa_mc/kernels/cpu.py, poa_mc/kernels/cuda.py) call
`tally_rows` after `simulate_replica`, so that only these numbers need leave the kernels for the
summary; the host's `tally_columns` sums the same numbers over the requests' columns (samples
read back, a stand-in engine) through the same `tally_one`, in the same order, so either way a
replica's tally is the same bits.

| array   | dtype, shape          | what                                                          |
|---------|-----------------------|---------------------------------------------------------------|
| edges   | float64 (NBINS - 1,)  | the sketch's bin edges (poa_mc.stats.sketch.EDGES): a value's bin is |
|         |                       | the number of edges at or below it, found exactly on both     |
|         |                       | targets (a logarithm only guesses it)                         |
| tally_f | float64 (R, NTF)      | per replica, the TF_* fields below (counts as whole floats)   |
| tally_h | int32 (R, 3, NBINS)   | per replica, histograms of TTFT, E2E and ITL (H_*); ITL of    |
|         |                       | the requests with osl > 1 only                                |

The SLO bounds are fp[F_SLO_TTFT] and fp[F_SLO_ITL] (<= 0: none; with neither, TF_SLO_MET is -1).
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_SLO_ITL,
    F_SLO_TTFT,
    OF_ARR,
    OF_CWAIT,
    OF_DWAIT,
    OF_E2E,
    OF_ITL,
    OF_ONB,
    OF_PWAIT,
    OF_TTFT,
    OF_XFER,
    OI_CACHED,
    OI_H2,
    OI_H3,
    OI_H4,
    OI_OSL,
    OI_PBLK,
    P_N,
)

TF_N = 0  # measured requests
TF_N_ITL = 1  # requests with osl > 1 (the ITL histogram's count)
TF_SLO_MET = 2  # requests within every SLO bound (-1: no bound)
TF_SUM_GAPS = 3  # sum of osl - 1
TF_SUM_ITL_GAPS = 4  # sum of itl x (osl - 1): the token-weighted ITL
TF_MIN = 5  # exact minimum of TTFT, E2E, ITL (5, 6, 7; ITL over osl > 1, +inf if none)
TF_MAX = 8  # exact maximum of TTFT, E2E, ITL (8, 9, 10; -inf if none)
TF_FIRST_ARR = 11  # the first measured arrival, ms
TF_LAST_ARR = 12  # the last measured arrival, ms
TF_SUM = 13  # sums of SUMMED's fields, in its order (13 .. 25)
SUMMED = (
    "ttft_ms", "e2e_ms", "prefill_wait_ms", "decode_wait_ms", "onboard_ms", "osl", "prompt_blocks", "cached_blocks",
    "cached_g2", "cached_g3", "cached_g4", "client_wait_ms", "transfer_ms",
)  # fmt: skip
TF_BATCH = TF_SUM + len(SUMMED)  # TTFT summed over each of NB_BATCH batches of the measured requests
NB_BATCH = 16  # batch b holds rows i with i * NB_BATCH // n == b (arrival order): the warm-up check's series
NTF = TF_BATCH + NB_BATCH
SKETCHED = ("ttft", "e2e", "itl")  # tally_h's rows
H_TTFT = 0
H_E2E = 1
H_ITL = 2

LO_MS = 1e-3  # poa_mc.stats.sketch's first edge: the guess below starts from it
LOG_GAMMA = math.log(1.01)  # ... and its ratio between edges


def build(jit, jit_inline=None):
    jit_inline = jit_inline or jit

    @jit_inline
    def bin_of(edges, x):
        """The number of edges at or below x: x's bin (0 below the first edge and for NaN)."""
        ne = edges.shape[0]
        if not (x >= edges[0]):
            return np.int64(0)
        if x >= edges[ne - 1]:
            return np.int64(ne)
        # edges[g - 1] <= x < edges[g] for the guess g up to rounding: then step to where it holds
        g = np.int64(math.log(x / LO_MS) / LOG_GAMMA) + 1
        if g < 1:
            g = np.int64(1)
        if g > ne - 1:
            g = np.int64(ne - 1)
        while x < edges[g - 1]:
            g -= 1
        while x >= edges[g]:
            g += 1
        return g

    @jit_inline
    def tally_one(
        fp, edges, tally_f, tally_h, r, b, arr, ttft, e2e, itl, pwait, dwait, onb, osl, pblk, cached, g2, g3, g4, cwait,
        xfer,
    ):  # fmt: skip
        """One measured request, of batch b (TF_BATCH), into replica r's tally (its fields as the
        kernels write them)."""
        gaps = osl - 1.0 if osl > 1.0 else 0.0
        tally_f[r, TF_N] += 1.0
        tally_f[r, TF_BATCH + b] += ttft
        tally_f[r, TF_SUM] += ttft
        tally_f[r, TF_SUM + 1] += e2e
        tally_f[r, TF_SUM + 2] += pwait
        tally_f[r, TF_SUM + 3] += dwait
        tally_f[r, TF_SUM + 4] += onb
        tally_f[r, TF_SUM + 5] += osl
        tally_f[r, TF_SUM + 6] += pblk
        tally_f[r, TF_SUM + 7] += cached
        tally_f[r, TF_SUM + 8] += g2
        tally_f[r, TF_SUM + 9] += g3
        tally_f[r, TF_SUM + 10] += g4
        tally_f[r, TF_SUM + 11] += cwait
        tally_f[r, TF_SUM + 12] += xfer
        tally_f[r, TF_SUM_ITL_GAPS] += itl * gaps
        tally_f[r, TF_SUM_GAPS] += gaps
        if arr < tally_f[r, TF_FIRST_ARR]:
            tally_f[r, TF_FIRST_ARR] = arr
        if arr > tally_f[r, TF_LAST_ARR]:
            tally_f[r, TF_LAST_ARR] = arr
        if ttft < tally_f[r, TF_MIN + H_TTFT]:
            tally_f[r, TF_MIN + H_TTFT] = ttft
        if ttft > tally_f[r, TF_MAX + H_TTFT]:
            tally_f[r, TF_MAX + H_TTFT] = ttft
        if e2e < tally_f[r, TF_MIN + H_E2E]:
            tally_f[r, TF_MIN + H_E2E] = e2e
        if e2e > tally_f[r, TF_MAX + H_E2E]:
            tally_f[r, TF_MAX + H_E2E] = e2e
        tally_h[r, H_TTFT, bin_of(edges, ttft)] += 1
        tally_h[r, H_E2E, bin_of(edges, e2e)] += 1
        if gaps > 0.0:  # ITL quantiles: requests with a gap to time
            tally_f[r, TF_N_ITL] += 1.0
            if itl < tally_f[r, TF_MIN + H_ITL]:
                tally_f[r, TF_MIN + H_ITL] = itl
            if itl > tally_f[r, TF_MAX + H_ITL]:
                tally_f[r, TF_MAX + H_ITL] = itl
            tally_h[r, H_ITL, bin_of(edges, itl)] += 1
        bound_ttft = fp[F_SLO_TTFT]
        bound_itl = fp[F_SLO_ITL]
        if bound_ttft > 0.0 or bound_itl > 0.0:
            # a one-token answer has no inter-token gap to miss
            if (bound_ttft <= 0.0 or ttft <= bound_ttft) and (bound_itl <= 0.0 or gaps == 0.0 or itl <= bound_itl):
                tally_f[r, TF_SLO_MET] += 1.0

    @jit_inline
    def start(fp, tally_f, r):
        """Replica r's tally before its first request."""
        for j in range(NTF):
            tally_f[r, j] = 0.0
        for m in range(3):
            tally_f[r, TF_MIN + m] = math.inf
            tally_f[r, TF_MAX + m] = -math.inf
        tally_f[r, TF_FIRST_ARR] = math.inf
        tally_f[r, TF_LAST_ARR] = -math.inf
        if fp[F_SLO_TTFT] <= 0.0 and fp[F_SLO_ITL] <= 0.0:
            tally_f[r, TF_SLO_MET] = -1.0

    @jit_inline
    def tally_rows(ip, fp, edges, out_f, out_i, tally_f, tally_h, r):
        """Replica r's tally from its request rows (out_f, out_i: layout.py), in row order."""
        start(fp, tally_f, r)
        n = ip[P_N]
        for i in range(n):
            tally_one(
                fp, edges, tally_f, tally_h, r, (i * NB_BATCH) // n, out_f[r, i, OF_ARR], out_f[r, i, OF_TTFT],
                out_f[r, i, OF_E2E],
                out_f[r, i, OF_ITL], out_f[r, i, OF_PWAIT], out_f[r, i, OF_DWAIT], out_f[r, i, OF_ONB],
                np.float64(out_i[r, i, OI_OSL]), np.float64(out_i[r, i, OI_PBLK]), np.float64(out_i[r, i, OI_CACHED]),
                np.float64(out_i[r, i, OI_H2]), np.float64(out_i[r, i, OI_H3]), np.float64(out_i[r, i, OI_H4]),
                out_f[r, i, OF_CWAIT], out_f[r, i, OF_XFER],
            )  # fmt: skip

    @jit
    def tally_columns(fp, edges, cols, tally_f, tally_h):
        """The tallies of R replicas from their requests' columns, cols (15, R, N) float64 in the
        order of tally_one's fields (arrival .. transfer); tally_f and tally_h as in the module table."""
        n = cols.shape[2]
        for r in range(cols.shape[1]):
            start(fp, tally_f, r)
            for i in range(n):
                tally_one(
                    fp, edges, tally_f, tally_h, r, (i * NB_BATCH) // n, cols[0, r, i], cols[1, r, i], cols[2, r, i],
                    cols[3, r, i],
                    cols[4, r, i], cols[5, r, i], cols[6, r, i], cols[7, r, i], cols[8, r, i], cols[9, r, i],
                    cols[10, r, i], cols[11, r, i], cols[12, r, i], cols[13, r, i], cols[14, r, i],
                )  # fmt: skip

    return Namespace(
        bin_of=bin_of, tally_one=tally_one, start=start, tally_rows=tally_rows, tally_columns=tally_columns
    )  # fmt: skip
