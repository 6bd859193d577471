"""A replayed trace (poa_mc/model/replay.py builds its table in tabs rows TB_*): which row a new request
is, and when the open loop's next request arrives.

- Timestamps replay: replica r starts at a uniform random offset tau into the trace's period T and
  wraps around, so its k-th arrival is row j = (j0 + k) mod N at (time_j + T floor((j0 + k) / N) - tau)
  trace ms, times F_TSCALE (j0: the first row at or after tau).
- Closed replay: a client with no session left takes the next one, in order from a random first
  session (P_TSAMPLE = 0) or drawn uniformly with replacement (1); it sends the turns in order.
- A replay that wraps around starts a new pass over the trace: pass k's requests use prefix groups
  shifted by k P_TG (modulo P_G), so a session replayed again does not hit the cache its first pass
  left (its content is another user's). With drawn sessions the pass is the draw's index over the
  session count, so a session drawn twice within one pass keeps one set of groups.
The draws use the replica key with b = RNG_F_TRACE * 8 (+1), so every policy of a point (same
stream) replays the same stretch of the trace.
"""

import numpy as np

from ._ns import Namespace
from .layout import (
    F_TPERIOD,
    F_TSCALE,
    P_TN,
    P_TRACE,
    P_TS,
    P_TSAMPLE,
    RF_TTAU,
    RI_TJ0,
    RI_TSESS,
    RNG_F_TRACE,
    SF_TWAIT,
    SI_TCYC,
    SI_TROW,
    TB_DELAY,
    TB_NEXT,
    TB_START,
    TB_TIME,
    TRACE_CLOSED,
    TRACE_TIMES,
)


def build(jit, rng, enabled=True):
    """enabled=False: a build for cells that replay no trace (source.build, lean)."""
    uniform = rng.uniform
    below = rng.below

    @jit
    def start(ip, fp, tabs, rep_i, rep_f, r, key):
        """The replica's offset into the trace."""
        if ip[P_TRACE] == TRACE_TIMES:
            n = ip[P_TN]
            tau = tabs[TB_TIME, 0] + uniform(key, np.int64(0), np.int64(RNG_F_TRACE * 8)) * fp[F_TPERIOD]
            lo = np.int64(0)
            hi = n  # the first row at or after tau (n: none, the replay starts with the next cycle)
            while lo < hi:
                mid = (lo + hi) // 2
                if tabs[TB_TIME, mid] < tau:
                    lo = mid + 1
                else:
                    hi = mid
            rep_i[r, RI_TJ0] = lo
            rep_f[r, RF_TTAU] = tau
        elif ip[P_TRACE] == TRACE_CLOSED and ip[P_TSAMPLE] == 0:
            rep_i[r, RI_TJ0] = below(key, np.int64(0), np.int64(RNG_F_TRACE * 8), ip[P_TS])

    @jit
    def arrival_ms(ip, fp, tabs, rep_i, rep_f, r, k):
        """Simulated time of the open loop's k-th arrival (timestamps replay)."""
        j = rep_i[r, RI_TJ0] + k
        n = ip[P_TN]
        return (tabs[TB_TIME, j % n] + fp[F_TPERIOD] * (j // n) - rep_f[r, RF_TTAU]) * fp[F_TSCALE]

    @jit
    def take_row(ip, tabs, slot_i, slot_f, rep_i, r, key, s, rid):
        """(row, pass) of a new request (rid: the open loop's arrival index; s: the closed loop's
        client). A closed-loop client also learns its next turn and the delay before it."""
        if ip[P_TRACE] == TRACE_TIMES:
            j = rep_i[r, RI_TJ0] + rid
            return j % ip[P_TN], j // ip[P_TN]
        row = np.int64(slot_i[r, s, SI_TROW])
        if row < 0:
            i = rep_i[r, RI_TSESS]
            rep_i[r, RI_TSESS] = i + 1
            if ip[P_TSAMPLE] == 0:
                j = rep_i[r, RI_TJ0] + i
                sess = j % ip[P_TS]
            else:
                j = i
                sess = below(key, i, np.int64(RNG_F_TRACE * 8 + 1), ip[P_TS])
            row = np.int64(tabs[TB_START, sess])
            slot_i[r, s, SI_TCYC] = j // ip[P_TS]
        nxt = np.int64(tabs[TB_NEXT, row])
        slot_i[r, s, SI_TROW] = nxt
        slot_f[r, s, SF_TWAIT] = tabs[TB_DELAY, nxt] if nxt >= 0 else 0.0
        return row, np.int64(slot_i[r, s, SI_TCYC])

    return Namespace(enabled=enabled, start=start, arrival_ms=arrival_ms, take_row=take_row)
