"""PoA-hat's windows, solved where the requests are: the one home of the window solver (a
min-cost assignment of a window's decisions to worker slots, poa_mc.stats.poa_hat explains the
estimator) and, with ip[P_POA], each replica's window sums worked out from its request rows once
it has finished, on the target that simulated it, so that a GPU run need not copy its requests'
candidate costs back. The host's compiled path (poa_mc.stats.poa_hat) runs the same functions over
recorded arrays (poa_mc/kernels/cpu.py: slot_sums, window_opt, assign_min), so either way a window's OPT
and a replica's sums are the same bits.

A window of n decisions over k workers with `slots` slots each (m = slots * k columns) works in
two scratch buffers, float64 `f` and int64 `g`, at these offsets (`offsets`, one definition):

| buffer | offset | length    | what                                                              |
|--------|--------|-----------|-------------------------------------------------------------------|
| f      | WT, WB | n k each  | the window's recorded tokens and blocks, decision-major           |
| f      | FT, FB | n k each  | ... minus the load earlier decisions of the window still had there |
| f      | AT, AB | k each    | the load charged per earlier request on each worker (a_w)         |
| f      | TT, TB | k each    | the router's requests on each worker whose load was gone (T_w)     |
| f      | XT, XB | n each    | the tokens and blocks each decision booked                        |
| f      | DC     | n         | when each decision was made                                       |
| f      | RT, RB | n each    | when the tokens and the blocks it booked left                     |
| f      | MAT    | n m       | the assignment's prices, column s k + w: worker w's slot s         |
| f      | HF     | n+1+2(m+1)| the Hungarian method's row and column potentials and minima       |
| f      | FD     | k         | the flow solver's route costs                                     |
| g      | CH     | n         | the worker each decision chose (0..k-1)                           |
| g      | HI     | 6 (m+1)   | the Hungarian method's owners, links, marks, tree, taken, scan    |
| g      | FA, FL, FV | n, k, k | the flow solver's assignment, loads, and route moves            |

A replica's pass (`replica_sums`) adds, after the window's region: floats REAL (its nw n
decisions' realized costs, in window order) and OPTW (each window's OPT), then the pairwise sum's
stack; ints ORD (its decisions in window order) then the stack. Its result, poa[r] = (ACTUAL,
OPT, windows), sums them as numpy's row sums do (pairwise, `pairwise_sum`), the host's order.

Over 500 lines because the window solver is one piece: the Hungarian method, the flow solver
for whole-block prices and the replica pass share one scratch layout (the table above) and are
built together by `build`; the table is only true if they stay in one file.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_POA_OMEGA,
    OF_ARR,
    OF_DDEC,
    OF_E2E,
    OF_TTFT,
    OI_DADD_B,
    OI_DADD_T,
    OI_DW,
    OI_PADD_B,
    OI_PADD_T,
    OI_PW,
    P_B,
    P_N,
    P_POA,
    P_POA_K,
    P_POA_LO,
    P_POA_SLOTS,
    P_POA_TIMES,
    P_POA_WIN,
    POA_OBSERVED_CLIENT,
    POA_OBSERVED_STEP,
    POA_T_AFTER_PREFILL,
    POA_T_PREFILL,
)

WHOLE_MAX = 2.0**40  # whole numbers below this sum exactly in float64, whatever the order
PW_BLOCK = 128  # numpy's pairwise sum adds runs of up to this many values with 8 accumulators
PW_DEPTH = 64  # frames of the pairwise sum's stack (its depth is log2(values / 128) + 1)


def offsets(n: int, k: int, m: int) -> tuple:
    """The window buffers' offsets (module table): (WT, WB, FT, FB, AT, AB, TT, TB, XT, XB, DC,
    RT, RB, MAT, HF, FD, floats, CH, HI, FA, FL, FV, ints) for n decisions, k workers, m columns."""
    wt = 0
    wb = wt + n * k
    ft = wb + n * k
    fb = ft + n * k
    at = fb + n * k
    ab = at + k
    tt = ab + k
    tb = tt + k
    xt = tb + k
    xb = xt + n
    dc = xb + n
    rt = dc + n
    rb = rt + n
    mat = rb + n
    hf = mat + n * m
    fd = hf + n + 1 + 2 * (m + 1)
    nf = fd + k
    ch = 0
    hi = ch + n
    fa = hi + 6 * (m + 1)
    fl = fa + n
    fv = fl + k
    ni = fv + k
    return (wt, wb, ft, fb, at, ab, tt, tb, xt, xb, dc, rt, rb, mat, hf, fd, nf, ch, hi, fa, fl, fv, ni)


def sizes(n_requests: int, window: int, k: int, slots: int) -> tuple[int, int]:
    """(floats, ints) of one replica's scratch for `replica_sums`."""
    o = offsets(window, k, slots * k)
    decisions = (n_requests // window) * window
    return o[16] + decisions + n_requests // window + 2 * PW_DEPTH, o[22] + n_requests + 3 * PW_DEPTH


def build(jit, jit_inline=None):
    jit_inline = jit_inline or jit
    layout = jit_inline(offsets)

    @jit
    def assign_min(a, a0, n, m, k, by_worker, f, f0, g, g0):
        """Minimum total cost of assigning each row of the n x m matrix a[a0 + i m + j] (n <= m)
        to a distinct column; work buffers f[f0:] (n + 1 + 2 (m + 1) floats) and g[g0:] (6 (m +
        1) ints).

        Shortest augmenting paths with row/column potentials (the O(n^2 m) Hungarian method):
        rows are added one at a time; each addition grows a Dijkstra-like tree over reduced costs
        until it reaches a free column, then flips the path. Needs finite entries (a NaN or inf
        row never reaches a column): it returns NaN for a matrix with a NaN or infinite entry (or
        rows that find no free column, n > m), without starting, and the host raises (poa_mc/kernels/cpu.py).

        k < m says the columns are slots of k workers, slot-major (column s k + w is worker w's
        slot s; by_worker: w slots + s), and that every row's cost on a worker is non-decreasing
        in the slot (slots_ascend). Then only the columns already taken and each worker's first
        free slot are scanned: a free column's potential stays 0, so a worker's later free slots
        never undercut its first one, and the scan keeps the first of equal minima; the tree, the
        potentials and the assignment are those of the full scan, bit for bit, over (taken + k)
        columns instead of m. k = m scans every column of any matrix."""
        for e in range(n * m):  # a non-finite entry would loop forever (or undercut every column)
            if not math.isfinite(a[a0 + e]):
                return math.nan
        slots = m // k
        inf = math.inf
        u = f0  # row potentials (n + 1)
        v = u + n + 1  # column potentials (m + 1)
        mv = v + m + 1  # each column's least reduced cost from the tree (m + 1)
        ow = g0  # owner[j]: the row (1-based) assigned to column j, 0 = free
        pr = ow + m + 1  # the tree's link into each column
        us = pr + m + 1  # 1: the column is in the tree
        tr = us + m + 1  # the columns in the tree, in the order they joined
        tk = tr + m + 1  # slots of each worker taken so far: always its first ones (k)
        sc = tk + m + 1  # the columns a row scans, ascending as a full scan meets them
        for i in range(n + 1):
            f[u + i] = 0.0
        for j in range(m + 1):
            f[v + j] = 0.0
            g[ow + j] = 0
            g[pr + j] = 0
        for w in range(k):
            g[tk + w] = 0
            # every worker's first slot to begin with, then one more as each row takes a
            # worker's first free slot
            g[sc + w] = w * slots + 1 if by_worker else w + 1
        ns = k
        for i in range(1, n + 1):
            g[ow] = i
            j0 = 0
            for c in range(ns):
                f[mv + g[sc + c]] = inf
                g[us + g[sc + c]] = 0
            nt = 0
            while True:
                g[us + j0] = 1
                g[tr + nt] = j0
                nt += 1
                i0 = g[ow + j0]
                ui0 = f[u + i0]
                delta = inf
                j1 = 0
                for c in range(ns):
                    j = g[sc + c]
                    if g[us + j] == 0:
                        cur = a[a0 + (i0 - 1) * m + j - 1] - ui0 - f[v + j]
                        mj = f[mv + j]
                        if cur < mj:
                            mj = cur
                            f[mv + j] = cur
                            g[pr + j] = j0
                        if mj < delta:
                            delta = mj
                            j1 = j
                # the tree's rows and columns move by delta; so does every scanned column's minimum
                # (those of the tree are not read again before the next row resets them)
                if j1 == 0:  # no free column left to reach (n > m): never ends
                    return math.nan
                for t in range(nt):
                    j = g[tr + t]
                    f[u + g[ow + j]] += delta
                    f[v + j] -= delta
                for c in range(ns):
                    f[mv + g[sc + c]] -= delta
                j0 = j1
                if g[ow + j0] == 0:
                    break
            w = (j0 - 1) // slots if by_worker else (j0 - 1) % k
            g[tk + w] += 1
            if g[tk + w] < slots:  # its next slot joins the scan, in column order
                j = w * slots + g[tk + w] + 1 if by_worker else g[tk + w] * k + w + 1
                c = ns
                while g[sc + c - 1] > j:
                    g[sc + c] = g[sc + c - 1]
                    c -= 1
                g[sc + c] = j
                ns += 1
            while j0 != 0:
                j1 = g[pr + j0]
                g[ow + j0] = g[ow + j1]
                j0 = j1
        total = 0.0
        for j in range(1, m + 1):
            if g[ow + j] != 0:
                total += a[a0 + (g[ow + j] - 1) * m + j - 1]
        return total

    @jit
    def slots_ascend(a, a0, n, m, k):
        """Whether every row's cost on each of k workers is non-decreasing in the slot (columns
        slot-major): assign_min may then scan a worker's first free slot only."""
        for i in range(n):
            for j in range(k, m):
                if a[a0 + i * m + j] < a[a0 + i * m + j - k]:
                    return False
        return True

    @jit
    def whole_block_prices(f, n, k, slots, omega, tabulated, o):
        """Whether every slot price of the window is the whole number FB[i, w] + max(s - TB[w], 0)
        AB[w]: Dynamo's router cost with no weight on tokens (omega 0, the decode choice's default
        in prefill_first), finite token terms, and whole block loads, added blocks and counts, all
        >= 0 and small enough to sum exactly (WHOLE_MAX)."""
        if tabulated or omega != 0.0:
            return False
        for w in range(k):
            x = f[o[5] + w]
            if not (x >= 0.0 and x == math.floor(x) and x * slots < WHOLE_MAX):
                return False
            x = f[o[7] + w]
            if not (x >= 0.0 and x == math.floor(x) and x * slots < WHOLE_MAX):
                return False
            if not (math.isfinite(f[o[4] + w]) and math.isfinite(f[o[6] + w])):
                return False
        for i in range(n):
            for w in range(k):
                x = f[o[3] + i * k + w]
                if not (x >= 0.0 and x == math.floor(x) and x < WHOLE_MAX and math.isfinite(f[o[2] + i * k + w])):
                    return False
        return True

    @jit
    def flow_opt(f, g, n, k, slots, o):
        """OPT of a window whose price for decision i in worker w's slot s is FB[i, w] + max(s -
        TB[w], 0) AB[w] (whole_block_prices), by successive shortest paths over the k workers:
        decisions are placed one by one, each along the cheapest route (straight onto a worker,
        or onto one whose decisions move on, Bellman-Ford over the workers: an optimal placement
        leaves no cheaper cycle of moves) ending in some worker's next slot; the slots' prices
        grow, so each worker fills its first ones. Any optimal assignment of whole prices sums to
        the same whole number, so this is assign_min's OPT to the bit, at a fraction of its time
        on windows of near-equal rows (the tree search explores every tie; bench/NOTES.md)."""
        fb, ab, tb, dist = o[3], o[5], o[7], o[15]
        asg, load, via = o[19], o[20], o[21]
        for w in range(k):
            g[load + w] = 0
        for i in range(n):
            for w in range(k):
                f[dist + w] = f[fb + i * k + w]
                g[via + w] = -1
            for _ in range(k - 1):
                changed = False
                for r in range(i):
                    w1 = g[asg + r]
                    base = f[dist + w1] - f[fb + r * k + w1]
                    for w2 in range(k):
                        nd = base + f[fb + r * k + w2]
                        if nd < f[dist + w2] and w2 != w1:
                            f[dist + w2] = nd
                            g[via + w2] = r
                            changed = True
                if not changed:
                    break
            best = -1
            best_cost = math.inf
            for w in range(k):
                c = f[dist + w] + max(g[load + w] - f[tb + w], 0.0) * f[ab + w] if g[load + w] < slots else math.inf
                if c < best_cost:
                    best = w
                    best_cost = c
            g[load + best] += 1
            w = best
            for _ in range(k):  # the route's moves, last first: decision r moves into w (k at most)
                if g[via + w] < 0:
                    break
                r = g[via + w]
                w_next = g[asg + r]
                g[asg + r] = w
                w = w_next
            g[asg + i] = w
        total = 0.0
        for i in range(n):
            total += f[fb + i * k + g[asg + i]]
        for w in range(k):
            for s in range(g[load + w]):
                total += max(s - f[tb + w], 0.0) * f[ab + w]
        return total

    @jit
    def window_opt(f, g, n, k, slots, omega, block_size, step):
        """OPT of one window under slot pricing from its FT, FB, AT, AB, TT, TB (module table).
        The price is Dynamo's router cost, omega tokens / block_size + blocks, when `step` is
        empty, else step[b], the predicted step of a worker holding b blocks (the decode_step and
        observed_step flavours, tabulated over whole block counts). NaN when a price is not finite
        or a block count not a whole number inside the table (the host then solves it from the
        recorded arrays and names the window). Whole block prices (whole_block_prices) are solved
        over the workers (flow_opt)."""
        m = slots * k
        o = layout(n, k, m)
        tabulated = step.shape[0] > 0
        if whole_block_prices(f, n, k, slots, omega, tabulated, o):
            return flow_opt(f, g, n, k, slots, o)
        ft, fb, at, ab, tt, tb, mat = o[2], o[3], o[4], o[5], o[6], o[7], o[13]
        ascend = True  # whether a worker's slots cost no less than the one before (assign_min)
        for i in range(n):
            for j in range(slots):
                for w in range(k):
                    blk = max(f[fb + i * k + w] + max(j - f[tb + w], 0.0) * f[ab + w], 0.0)
                    if tabulated:
                        if not (blk < step.shape[0] and blk == math.floor(blk)):
                            return math.nan
                        c = step[np.int64(blk)]
                    else:
                        tok = max(f[ft + i * k + w] + max(j - f[tt + w], 0.0) * f[at + w], 0.0)
                        c = omega * tok / block_size + blk
                    if not math.isfinite(c):
                        return math.nan
                    if j > 0 and c < f[mat + i * m + (j - 1) * k + w]:
                        ascend = False
                    f[mat + i * m + j * k + w] = c
        return assign_min(f, mat, n, m, k if ascend else m, False, f, o[14], g, o[18])

    @jit
    def realized(kind, tok, blk, seen, omega, block_size, step):
        """A decision's realized cost: its price on the view the router recorded for the worker it
        chose (the router cost, or the tabulated step), or with `kind` POA_OBSERVED_STEP the
        latency observed after it (`seen`). NaN for a block count off the table."""
        if kind == POA_OBSERVED_STEP or kind == POA_OBSERVED_CLIENT:
            return seen
        if step.shape[0] > 0:
            b = max(blk, 0.0)
            if not (b < step.shape[0] and b == math.floor(b)):
                return math.nan
            return step[np.int64(b)]
        return omega * tok / block_size + blk  # poa_mc.stats.predicted_costs.router_cost

    @jit
    def solve_window(f, g, n, k, slots, omega, block_size, step):
        """OPT of the window whose recorded rows (WT, WB), choices (CH), booked loads (XT, XB) and
        times (DC, RT, RB) the caller gathered: each decision's view less the load the window's
        earlier decisions still had on each worker, summed in decision order per worker, the
        smallest loads and the requests gone by the window's last decision (the host's numpy
        bookkeeping: poa_mc.stats.window_load's _load_before, _min_added and _transient; sums of whole
        numbers, exact in any order), then window_opt. NaN for a negative booked load."""
        o = layout(n, k, slots * k)
        wt, wb, ft, fb, at, ab, tt, tb = o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]
        xt, xb, dc, rt, rb, ch = o[8], o[9], o[10], o[11], o[12], o[17]
        for i in range(n):
            if f[xt + i] < 0.0 or f[xb + i] < 0.0:
                return math.nan
        for i in range(n):
            # earlier decisions' load still on each worker at decision i
            for w in range(k):
                f[tt + w] = 0.0
                f[tb + w] = 0.0
            for e in range(i):
                if f[rt + e] > f[dc + i]:
                    f[tt + g[ch + e]] += f[xt + e]
                if f[rb + e] > f[dc + i]:
                    f[tb + g[ch + e]] += f[xb + e]
            for w in range(k):
                f[ft + i * k + w] = f[wt + i * k + w] - f[tt + w]
                f[fb + i * k + w] = f[wb + i * k + w] - f[tb + w]
        t_last = f[dc]
        least_t = f[xt]
        least_b = f[xb]
        for e in range(1, n):
            t_last = max(t_last, f[dc + e])
            least_t = min(least_t, f[xt + e])
            least_b = min(least_b, f[xb + e])
        for w in range(k):
            f[at + w] = math.inf
            f[ab + w] = math.inf
            f[tt + w] = 0.0
            f[tb + w] = 0.0
        for e in range(n):
            c = g[ch + e]
            f[at + c] = min(f[at + c], f[xt + e])
            f[ab + c] = min(f[ab + c], f[xb + e])
            if f[rt + e] <= t_last:
                f[tt + c] += 1.0
            if f[rb + e] <= t_last:
                f[tb + c] += 1.0
        for w in range(k):
            if f[at + w] == math.inf:  # the router sent it none: the window's smallest load
                f[at + w] = least_t
                f[ab + w] = least_b
        return window_opt(f, g, n, k, slots, omega, block_size, step)

    @jit_inline
    def block_sum(x, lo, n):
        """numpy's sum of x[lo : lo + n] for n <= PW_BLOCK: in order below 8 values, else in 8
        interleaved accumulators combined pairwise, then the rest in order."""
        if n < 8:
            s = 0.0
            for i in range(n):
                s += x[lo + i]
            return s
        r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
        r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
        i = 8
        while i < n - n % 8:
            r0 += x[lo + i]
            r1 += x[lo + i + 1]
            r2 += x[lo + i + 2]
            r3 += x[lo + i + 3]
            r4 += x[lo + i + 4]
            r5 += x[lo + i + 5]
            r6 += x[lo + i + 6]
            r7 += x[lo + i + 7]
            i += 8
        s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            s += x[lo + i]
            i += 1
        return s

    @jit
    def pairwise_sum(x, lo, n, f, f0, g, g0):
        """numpy's sum of a row x[lo : lo + n] (its pairwise summation: halves, each cut at a
        multiple of 8, down to runs of PW_BLOCK), so that the kernels' sums are the host's to the
        bit; the recursion as a stack of frames (start, length, left done) in g[g0:] with each
        frame's left half's sum in f[f0:]."""
        if n <= PW_BLOCK:
            return 0.0 + block_sum(x, lo, n)
        top = 0
        g[g0] = lo
        g[g0 + 1] = n
        g[g0 + 2] = 0
        while True:
            s0 = g[g0 + 3 * top]
            sn = g[g0 + 3 * top + 1]
            if sn > PW_BLOCK:  # split: its left half first
                h = sn // 2
                h -= h % 8
                top += 1
                g[g0 + 3 * top] = s0
                g[g0 + 3 * top + 1] = h
                g[g0 + 3 * top + 2] = 0
                continue
            v = block_sum(x, s0, sn)
            while True:  # hand the sum up: a left half waits for its right one, a right one completes
                top -= 1
                if top < 0:
                    return 0.0 + v
                if g[g0 + 3 * top + 2] == 0:
                    f[f0 + top] = v
                    g[g0 + 3 * top + 2] = 1
                    p0 = g[g0 + 3 * top]
                    pn = g[g0 + 3 * top + 1]
                    h = pn // 2
                    h -= h % 8
                    top += 1
                    g[g0 + 3 * top] = p0 + h
                    g[g0 + 3 * top + 1] = pn - h
                    g[g0 + 3 * top + 2] = 0
                    break
                v = f[f0 + top] + v

    @jit_inline
    def after(a, b):
        """Whether decision time a sorts after b (NaN after every number, as numpy sorts)."""
        return a > b or (a != a and b == b)

    @jit
    def replica_sums(r, ip, fp, step, out_f, out_i, cand, poa, f, g):
        """Replica r's PoA-hat sums from its request rows (out_f, out_i, cand: layout.py) into
        poa[r] = (ACTUAL, OPT, windows); f and g its scratch (module table). The decision and its
        times come from ip (P_POA_*); prefill_first's decode decisions are taken in the order they
        were made (a stable sort of their times, numpy's argsort order). NaN sums where a window
        cannot be solved here (the host then works the replica's batch out from the rows)."""
        n_req = ip[P_N]
        n = ip[P_POA_WIN]
        k = ip[P_POA_K]
        slots = ip[P_POA_SLOTS]
        lo = ip[P_POA_LO]
        kind = ip[P_POA]
        times = ip[P_POA_TIMES]
        omega = fp[F_POA_OMEGA]
        block_size = np.float64(ip[P_B])
        nw = n_req // n
        o = layout(n, k, slots * k)
        real = o[16]
        optw = real + nw * n
        fst = optw + nw
        order = o[22]
        gst = order + n_req
        pre = times == POA_T_PREFILL
        f_ch, f_xt, f_xb = (OI_PW, OI_PADD_T, OI_PADD_B) if pre else (OI_DW, OI_DADD_T, OI_DADD_B)
        for e in range(n_req):
            g[order + e] = e
        if times == POA_T_AFTER_PREFILL:  # insertion sort: decisions come nearly in arrival order
            for e in range(1, n_req):
                x = g[order + e]
                t = out_f[r, x, OF_DDEC]
                j = e
                while j > 0 and after(out_f[r, g[order + j - 1], OF_DDEC], t):
                    g[order + j] = g[order + j - 1]
                    j -= 1
                g[order + j] = x
        wt, wb, xt, xb, dc, rt, rb, ch = o[0], o[1], o[8], o[9], o[10], o[11], o[12], o[17]
        bad = False
        for wi in range(nw):
            for i in range(n):
                e = g[order + wi * n + i]
                c = np.int64(out_i[r, e, f_ch])
                for w in range(k):
                    f[wt + i * k + w] = cand[r, e, lo + w, 0]
                    f[wb + i * k + w] = cand[r, e, lo + w, 1]
                arr = out_f[r, e, OF_ARR]
                dec = out_f[r, e, OF_DDEC]
                seen = out_f[r, e, OF_TTFT]  # the request's TTFT, as its client saw it (POA_OBSERVED_CLIENT)
                if kind == POA_OBSERVED_STEP:
                    seen -= dec - arr  # the latency from the decision on
                cost = realized(kind, f[wt + i * k + c], f[wb + i * k + c], seen, omega, block_size, step)
                f[real + wi * n + i] = cost
                # a block count off the step table (an observed latency is taken as it is)
                observed = kind == POA_OBSERVED_STEP or kind == POA_OBSERVED_CLIENT
                bad = bad or (not observed and step.shape[0] > 0 and cost != cost)
                g[ch + i] = c
                f[xt + i] = np.float64(out_i[r, e, f_xt])
                f[xb + i] = np.float64(out_i[r, e, f_xb])
                if pre:
                    f[dc + i] = arr
                    f[rt + i] = dec
                    f[rb + i] = dec
                elif times == POA_T_AFTER_PREFILL:
                    f[dc + i] = dec
                    f[rt + i] = arr + out_f[r, e, OF_E2E]
                    f[rb + i] = f[rt + i]
                else:
                    f[dc + i] = arr
                    f[rt + i] = arr + out_f[r, e, OF_TTFT]
                    f[rb + i] = arr + out_f[r, e, OF_E2E]
            opt = solve_window(f, g, n, k, slots, omega, block_size, step)
            f[optw + wi] = opt
            bad = bad or opt != opt
        if bad:
            poa[r, 0] = math.nan
            poa[r, 1] = math.nan
        else:
            poa[r, 0] = pairwise_sum(f, real, nw * n, f, fst, g, gst)
            poa[r, 1] = pairwise_sum(f, optw, nw, f, fst, g, gst)
        poa[r, 2] = np.float64(nw)

    return Namespace(
        assign_min=assign_min, slots_ascend=slots_ascend, whole_block_prices=whole_block_prices, flow_opt=flow_opt,
        window_opt=window_opt, realized=realized, solve_window=solve_window, block_sum=block_sum,
        pairwise_sum=pairwise_sum, replica_sums=replica_sums, layout=layout,
    )  # fmt: skip
