"""The planner: Dynamo's Planner as the mechanism that moves the prefill/decode split of a GPU
budget during one run (docs/games.md, "The Planner").

The splits are Game 1's path: split i has i + 1 prefill workers and the most decode workers the
rest of the budget holds, (G - (i + 1) gP) // gD. The kernel holds the workers of every split
(the most prefill and the most decode workers any split has); the router chooses only among the
first RI_NPA prefill and the first RI_NDA decode workers.

Every adjustment interval the planner reads the mean TTFT of the first tokens emitted in the
interval and the mean inter-token latency of the requests completed in it (token-weighted), each
over its target. When neither exceeds 1 it keeps the split; otherwise the pool further over its
target takes: one step along the path towards more prefill workers (TTFT) or more decode workers
(ITL), when there is one. A move takes effect at once for the giving pool (the router stops
sending its removed workers requests), and for the taking pool once the removed workers have
drained (no queued, running or transferring request, no KV held) and `startup_ms` has passed:
the GPUs are reused. While it moves the planner reads no metrics and decides nothing (as
Dynamo's does); its next interval starts when the move completes. A worker that starts gets an
empty cache.

State (poa_mc/kernels/layout.py): RI_NPA, RI_NDA, RI_PL_*, RF_PL_*; its log of moves after the
controller's region of rep_f. Steps are taken lazily at the start of each event of the loop,
before anything happens at that instant, which equals a step at every interval boundary: the
router is only read at events, and a first token planned ahead of its emission counts in the
interval it is emitted in (RI_PL_NT2, RF_PL_ST2: one decode step never spans an interval).
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_PL_INT,
    F_PL_SLO_I,
    F_PL_SLO_T,
    F_PL_START,
    NRF,
    NWI,
    P_CTL_LOG,
    P_CTL_WIN,
    P_G,
    P_NP,
    P_PL_G,
    P_PL_GD,
    P_PL_GP,
    P_PL_I0,
    P_PL_LOG,
    P_PLAN,
    RF_PL_NEXT,
    RF_PL_READY,
    RF_PL_SG,
    RF_PL_ST,
    RF_PL_ST2,
    RF_PL_T0,
    RI_EVH,
    RI_EVN,
    RI_NDA,
    RI_NPA,
    RI_PL_I,
    RI_PL_MOVES,
    RI_PL_NG,
    RI_PL_NT,
    RI_PL_NT2,
    RI_PL_TO,
    WF_BUSY,
    WI_A2H,
    WI_A2N,
    WI_AB,
    WI_AH,
    WI_AN,
    WI_APT,
    WI_FREE,
    WI_G2U,
    WI_G3U,
    WI_NRUN,
    WI_OLDG,
    WI_QN,
    WI_USED,
)

INF = math.inf


def build(jit):
    @jit
    def split_nd(ip, i):
        """Decode workers of split i (i + 1 prefill workers)."""
        return (ip[P_PL_G] - (i + 1) * ip[P_PL_GP]) // ip[P_PL_GD]

    @jit
    def last_split(ip):
        return (ip[P_PL_G] - ip[P_PL_GD]) // ip[P_PL_GP] - 1

    @jit
    def start(ip, fp, rep_i, rep_f, r):
        i = ip[P_PL_I0]
        rep_i[r, RI_PL_I] = i
        rep_i[r, RI_NPA] = i + 1
        rep_i[r, RI_NDA] = split_nd(ip, i)
        rep_i[r, RI_PL_TO] = -1
        rep_f[r, RF_PL_NEXT] = fp[F_PL_INT]
        rep_f[r, RF_PL_READY] = INF

    @jit
    def observe_ttft(ip, rep_i, rep_f, r, ttft, t_emit):
        if ip[P_PLAN] == 0 or rep_i[r, RI_PL_TO] >= 0:
            return
        if t_emit <= rep_f[r, RF_PL_NEXT]:
            rep_f[r, RF_PL_ST] += ttft
            rep_i[r, RI_PL_NT] += 1
        else:
            rep_f[r, RF_PL_ST2] += ttft
            rep_i[r, RI_PL_NT2] += 1

    @jit
    def observe_itl(ip, rep_i, rep_f, r, span_ms, gaps):
        """A request completed: `gaps` inter-token gaps over `span_ms` (first to last token)."""
        if ip[P_PLAN] == 0 or rep_i[r, RI_PL_TO] >= 0 or gaps <= 0:
            return
        rep_f[r, RF_PL_SG] += span_ms
        rep_i[r, RI_PL_NG] += gaps

    @jit
    def next_interval(rep_i, rep_f, r):
        """The interval ends: what was emitted after it belongs to the next."""
        rep_f[r, RF_PL_ST] = rep_f[r, RF_PL_ST2]
        rep_i[r, RI_PL_NT] = rep_i[r, RI_PL_NT2]
        rep_f[r, RF_PL_ST2] = 0.0
        rep_i[r, RI_PL_NT2] = 0
        rep_f[r, RF_PL_SG] = 0.0
        rep_i[r, RI_PL_NG] = 0

    @jit
    def decide(ip, fp, rep_i, rep_f, r):
        """The split the planner wants after this interval's metrics (the current one: no move)."""
        i = rep_i[r, RI_PL_I]
        nt = rep_i[r, RI_PL_NT]
        ng = rep_i[r, RI_PL_NG]
        if nt == 0 or ng == 0:
            return i
        over_p = rep_f[r, RF_PL_ST] / nt / fp[F_PL_SLO_T]
        over_d = rep_f[r, RF_PL_SG] / ng / fp[F_PL_SLO_I]
        if over_p <= 1.0 and over_d <= 1.0:
            return i
        if over_p > over_d:
            return i + 1 if i < last_split(ip) else i
        return i - 1 if i > 0 else i

    @jit
    def drained(wk_i, wk_f, r, lo, hi):
        for w in range(lo, hi):
            if wk_f[r, w, WF_BUSY] < INF or np.int64(wk_i[r, w, WI_QN]) > 0 or np.int64(wk_i[r, w, WI_NRUN]) > 0:
                return False
            if np.int64(wk_i[r, w, WI_USED]) - np.int64(wk_i[r, w, WI_FREE]) > 0:
                return False  # a prefill worker keeps a prompt's KV until its decode worker has it
        return True

    @jit
    def fresh(ip, wk_i, pc, ev, rep_i, r, w):
        """Worker w starts: an empty cache (the router hears of it at once, and cache events of
        its earlier life still on their way are voided)."""
        cap = ev.shape[1]
        for j in range(rep_i[r, RI_EVN]):
            i = (rep_i[r, RI_EVH] + j) % cap
            if np.int64(ev[r, i, 1]) == w:
                ev[r, i, 1] = -1.0
        for g in range(ip[P_G]):
            for j in range(pc.shape[3]):
                pc[r, w, g, j] = 0
        wk_i[r, w, WI_G2U] = 0
        wk_i[r, w, WI_G3U] = 0
        wk_i[r, w, WI_A2H] = 0
        wk_i[r, w, WI_A2N] = 0
        wk_i[r, w, WI_USED] = 0
        wk_i[r, w, WI_FREE] = 0
        wk_i[r, w, WI_AH] = 0
        wk_i[r, w, WI_AN] = 0
        wk_i[r, w, WI_OLDG] = 0
        wk_i[r, w, WI_APT] = 0
        wk_i[r, w, WI_AB] = 0
        for j in range(NWI, wk_i.shape[2]):  # the router's groups in flight there (P_DEDUP)
            wk_i[r, w, j] = 0

    @jit
    def tick(ip, fp, wk_i, wk_f, pc, ev, rep_i, rep_f, r, t, t_last):
        """Every step due by t; `t_last` is the time of the last event processed (the state now)."""
        if ip[P_PLAN] == 0:
            return
        n_p = ip[P_NP]
        while True:
            to = rep_i[r, RI_PL_TO]
            i = rep_i[r, RI_PL_I]
            if to >= 0:
                if rep_f[r, RF_PL_READY] == INF:
                    if to > i:  # decode workers gave their GPUs
                        gone = drained(wk_i, wk_f, r, n_p + split_nd(ip, to), n_p + split_nd(ip, i))
                    else:
                        gone = drained(wk_i, wk_f, r, to + 1, i + 1)
                    if not gone:
                        return
                    rep_f[r, RF_PL_READY] = max(t_last, rep_f[r, RF_PL_T0]) + fp[F_PL_START]
                ready = rep_f[r, RF_PL_READY]
                if ready > t:
                    return
                if to > i:
                    for w in range(i + 1, to + 1):
                        fresh(ip, wk_i, pc, ev, rep_i, r, w)
                    rep_i[r, RI_NPA] = to + 1
                else:
                    for w in range(n_p + split_nd(ip, i), n_p + split_nd(ip, to)):
                        fresh(ip, wk_i, pc, ev, rep_i, r, w)
                    rep_i[r, RI_NDA] = split_nd(ip, to)
                rep_i[r, RI_PL_I] = to
                rep_i[r, RI_PL_TO] = -1
                k = rep_i[r, RI_PL_MOVES]
                if k < ip[P_PL_LOG]:
                    at = NRF + 2 * ip[P_CTL_WIN] + 3 * ip[P_CTL_LOG] + 3 * k
                    rep_f[r, at] = ready
                    rep_f[r, at + 1] = to + 1
                    rep_f[r, at + 2] = split_nd(ip, to)
                rep_i[r, RI_PL_MOVES] = k + 1
                rep_f[r, RF_PL_NEXT] = ready + fp[F_PL_INT]
                rep_f[r, RF_PL_READY] = INF
                next_interval(rep_i, rep_f, r)  # empty: nothing is counted while it moves
                continue
            b = rep_f[r, RF_PL_NEXT]
            if b > t:
                return
            want = decide(ip, fp, rep_i, rep_f, r)
            next_interval(rep_i, rep_f, r)
            if want == i:
                rep_f[r, RF_PL_NEXT] = b + fp[F_PL_INT]
                continue
            # the giving pool stops taking requests now; its GPUs are free once it drained
            if want > i:
                rep_i[r, RI_NDA] = split_nd(ip, want)
            else:
                rep_i[r, RI_NPA] = want + 1
            rep_i[r, RI_PL_TO] = want
            rep_f[r, RF_PL_T0] = b
            rep_f[r, RF_PL_NEXT] = INF

    return Namespace(
        split_nd=split_nd,
        last_split=last_split,
        start=start,
        observe_ttft=observe_ttft,
        observe_itl=observe_itl,
        next_interval=next_interval,
        decide=decide,
        drained=drained,
        fresh=fresh,
        tick=tick,
    )
