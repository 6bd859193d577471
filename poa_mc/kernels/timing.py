"""Timing: how long a prefill pass and a decode step take. The one home of the timing formulas,
for the kernels on both targets and, compiled for the CPU, for the host (poa_mc.model.profiles.load).

Two shapes, chosen per cell by fp[F_TAB]:

- the polynomial (dynamo-mocker, roofline, user polynomials): a pass of T uncached tokens costs
  p2 T^2 + p1 T + p0 ms; a step over X context tokens costs d2 u^2 + d1 u + d0 ms with
  u = min(1, X / capacity). Batch size does not enter.
- the table (aic profiles, poa_mc/model/timing_tables.py): a pass of b requests computing T tokens in
  all, on c cached ones each, is G(T) + A(b, T / b, c): the part outside attention linear in T
  between the nodes of its fine token axis, attention trilinear; a step of b sequences whose
  context averages c tokens bilinearly in V_d[b][c]. Outside an axis the nearest interval's line
  goes on (linear extrapolation), so a table needs no clamp and its spans stay exact.

A decode segment (poa_mc/kernels/decode.py) is k steps of a fixed set of n sequences whose summed
context is X0 at the first step, X0 + n j at step j. Its time has a closed form in both shapes:
a quadratic's sum for the polynomial; for the table, per-sequence context c0 + j with c0 = X0 / n
runs along one batch-blended row, a piecewise-linear function of c whose pieces (the context
axis's intervals, at least one token wide) each contribute an arithmetic series.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_D0,
    F_D1,
    F_D2,
    F_P0,
    F_P1,
    F_P2,
    F_TAB,
    F_TB_DB,
    F_TB_DC,
    F_TB_DN,
    F_TB_DV,
    F_TB_GT,
    F_TB_GV,
    F_TB_PB,
    F_TB_PC,
    F_TB_PN,
    F_TB_PU,
    F_TB_PV,
)


def build(jit, jit_inline=None) -> Namespace:
    jit_inline = jit_inline or jit

    # ---------------------------------------------------------------- table interpolation
    @jit
    def bracket(fp, off, n, x):
        """The interval [a_i, a_i+1] of the axis fp[off:off+n] used for x (the first or last one
        outside the axis) and x's weight in it, (x - a_i) / (a_i+1 - a_i), outside [0, 1] there."""
        lo = np.int64(0)
        hi = n - 2
        while lo < hi:  # the last i <= n - 2 with a_i <= x (0 if none)
            mid = (lo + hi + 1) // 2
            if fp[off + mid] <= x:
                lo = mid
            else:
                hi = mid - 1
        a = fp[off + lo]
        return lo, (x - a) / (fp[off + lo + 1] - a)

    @jit_inline
    def batch_bracket(fp, off, n, lut, end, b):
        """bracket(fp, off, n, b) for a whole batch size b >= 1 (int), read from the host's lookup
        at fp[lut:end] where it covers b (poa_mc/kernels/layout.py, F_TB_DN)."""
        if 2 * b + 1 < end - lut:
            return np.int64(fp[lut + 2 * b]), fp[lut + 2 * b + 1]
        return bracket(fp, off, n, np.float64(b))

    @jit
    def table_pass(fp, b, t, c):
        """Prefill pass of b requests computing t tokens in all on c cached ones each: the part
        outside attention at t tokens, and attention at t / b new tokens per request (trilinear)."""
        ob = np.int64(fp[F_TB_PB])
        ou = np.int64(fp[F_TB_PU])
        oc = np.int64(fp[F_TB_PC])
        ov = np.int64(fp[F_TB_PV])
        og = np.int64(fp[F_TB_GT])
        ogv = np.int64(fp[F_TB_GV])
        nu = oc - ou
        nc = ov - oc
        ig, wg = bracket(fp, og, ogv - og, t)
        v = (1.0 - wg) * fp[ogv + ig] + wg * fp[ogv + ig + 1]
        bi = np.int64(b)
        if np.float64(bi) == b and bi >= 1:  # always, in the engine
            ib, wb = batch_bracket(fp, ob, ou - ob, np.int64(fp[F_TB_PN]), np.int64(fp.size), bi)
        else:
            ib, wb = bracket(fp, ob, ou - ob, b)
        iu, wu = bracket(fp, ou, nu, t / b)
        ic, wc = bracket(fp, oc, nc, c)
        for db in range(2):
            fb = wb if db == 1 else 1.0 - wb
            for du in range(2):
                fu = wu if du == 1 else 1.0 - wu
                row = ov + ((ib + db) * nu + iu + du) * nc + ic
                v += fb * fu * ((1.0 - wc) * fp[row] + wc * fp[row + 1])
        return v

    @jit
    def decode_row(fp, n):
        """The decode table's row blended at batch n: the context axis's offset and length, the two
        batch rows' offsets and the weight of the second."""
        ob = np.int64(fp[F_TB_DB])
        oc = np.int64(fp[F_TB_DC])
        ov = np.int64(fp[F_TB_DV])
        nc = ov - oc
        ib, wb = batch_bracket(
            fp, ob, oc - ob, np.int64(fp[F_TB_DN]), np.int64(fp[F_TB_PN]), n if n > 0 else np.int64(1)
        )
        r0 = ov + ib * nc
        return oc, nc, r0, r0 + nc, wb

    @jit_inline
    def table_piece(fp, oc, r0, r1, wb, m):
        """The blended row's piece on context interval m: its left node a, its value there v0 and
        its slope s (per token of per-sequence context)."""
        a = fp[oc + m]
        v0 = (1.0 - wb) * fp[r0 + m] + wb * fp[r1 + m]
        v1 = (1.0 - wb) * fp[r0 + m + 1] + wb * fp[r1 + m + 1]
        return a, v0, (v1 - v0) / (fp[oc + m + 1] - a)

    @jit
    def table_segment(fp, x0, n):
        """What a segment of n sequences whose summed context starts at x0 reads of the table, once
        for all its spans: the row blended at batch n (decode_row), the per-sequence context c0 at
        its first step, c0's interval m on the context axis, that interval's piece (table_piece)
        and the first step whose context reaches the interval's right node (its end, jb; 0 on the
        last interval, which goes on)."""
        oc, nc, r0, r1, wb = decode_row(fp, n)
        c0 = np.float64(x0) / (np.float64(n) if n > 0 else 1.0)
        m, _ = bracket(fp, oc, nc, c0)
        a, v0, s = table_piece(fp, oc, r0, r1, wb, m)
        # first step whose context reaches the next node (axis gaps are >= 1 token, so it lies
        # past the step before)
        jb = np.int64(math.ceil(fp[oc + m + 1] - c0)) if m < nc - 2 else np.int64(0)
        return oc, nc, r0, r1, wb, c0, m, a, v0, s, jb

    @jit
    def segment_span(fp, seg, k):
        """Time of the first k steps of a table segment (table_segment): the row blended at batch n
        is linear on each context interval, so each interval the per-sequence context c0 + j
        crosses adds an arithmetic series (most spans stay in their first interval, whose piece
        the segment holds)."""
        if k <= 0:
            return 0.0
        oc, nc, r0, r1, wb, c0, m, a, v0, s, jb = seg
        total = 0.0
        j = np.int64(0)
        while True:
            if m >= nc - 2 or jb > k:
                jb = k
            if jb < j:
                jb = j
            cnt = np.float64(jb - j)
            total += cnt * (v0 + s * (c0 - a)) + s * cnt * np.float64(j + jb - 1) * 0.5
            j = jb
            if j >= k:
                return total
            m += 1
            a, v0, s = table_piece(fp, oc, r0, r1, wb, m)
            jb = np.int64(math.ceil(fp[oc + m + 1] - c0)) if m < nc - 2 else np.int64(0)

    @jit
    def table_span(fp, x0, n, k):
        """Time of k steps of n sequences whose summed contexts are x0, x0 + n, ... (segment_span)."""
        if k <= 0:
            return 0.0
        return segment_span(fp, table_segment(fp, x0, n), k)

    # ---------------------------------------------------------------- the profile's shape
    @jit
    def prefill_span(fp, tokens):
        """One request's pass over `tokens` uncached tokens, nothing cached."""
        if fp[F_TAB] != 0.0:
            return table_pass(fp, 1.0, np.float64(tokens), 0.0)
        t = np.float64(tokens)
        return fp[F_P2] * t * t + fp[F_P1] * t + fp[F_P0]

    @jit_inline
    def pass_prefill_ms(fp, sum_p, sum_pc, n):
        """Prefill part of a pass whose n requests with prompt tokens had sum_p tokens computed or
        cached before it and sum_pc after: T = n (floor(sum_pc / n) - floor(sum_p / n)), the
        replay's integer means (Dynamo 1.6.1, checked against a pass of three requests with
        uneven prefixes: bench/NOTES.md), and no time when T = 0. A table reads the pass as n
        requests of those mean uncached and cached tokens."""
        if n <= 0:
            return 0.0
        per = sum_pc // n - sum_p // n
        if per <= 0:
            return 0.0
        if fp[F_TAB] != 0.0:
            return table_pass(fp, np.float64(n), np.float64(n * per), np.float64(sum_p // n))
        t = np.float64(n * per)
        return fp[F_P2] * t * t + fp[F_P1] * t + fp[F_P0]

    @jit
    def step_ms(fp, x, n, cap):
        """One decode step of n sequences holding x context tokens in all (cap: the worker's
        capacity in tokens, the polynomial's u = 1)."""
        if fp[F_TAB] != 0.0:
            # a table's step is its span of one step, on the out-of-line call decode_span takes
            # (a call site of its own here cost the polynomial path ~5%)
            return clamped_span(fp, np.int64(x), np.int64(n), np.int64(1), cap)
        u = x / cap
        if u > 1.0:
            u = 1.0
        return fp[F_D2] * u * u + fp[F_D1] * u + fp[F_D0]

    @jit_inline
    def quadratic_span(fp, x0, n, k, cap):
        """Sum of the step polynomial over the contexts x0, x0 + n, ..., x0 + n(k-1), unclamped."""
        kf = np.float64(k)
        xf = np.float64(x0)
        nf = np.float64(n)
        s1 = kf * (kf - 1.0) * 0.5
        s2 = (kf - 1.0) * kf * (2.0 * kf - 1.0) / 6.0
        m1 = kf * xf + nf * s1
        m2 = kf * xf * xf + 2.0 * xf * nf * s1 + nf * nf * s2
        return fp[F_D2] * m2 / (cap * cap) + fp[F_D1] * m1 / cap + fp[F_D0] * kf

    @jit
    def clamped_span(fp, x0, n, k, cap):
        """decode_span off its hot path: a table's span, or the polynomial's past the capacity
        (the steps whose context exceeds it run at u = 1)."""
        if fp[F_TAB] != 0.0:
            return table_span(fp, x0, n, k)
        below = np.int64(0)
        if np.float64(x0) <= cap:
            below = k if n <= 0 else np.int64(math.floor((cap - np.float64(x0)) / np.float64(n))) + 1
        if below > k:
            below = k
        full = fp[F_D2] + fp[F_D1] + fp[F_D0]
        return quadratic_span(fp, x0, n, below, cap) + full * np.float64(k - below)

    @jit_inline
    def decode_span(fp, x0, n, k, cap):
        """Time of k decode steps whose summed contexts are x0, x0 + n, ..., x0 + n(k-1). With the
        polynomial, steps whose context exceeds the capacity run at u = 1 (the mocker's min(1, u)):
        sequences that share prefix blocks can hold more context than the worker has blocks for
        (a rare, cold path). A table's span is taken on the same out-of-line call: a second call
        site here, inlined into every caller, cost 8% of the engine's speed and 15 s of compilation."""
        if np.float64(x0 + n * (k - 1)) > cap or fp[F_TAB] != 0.0:
            return clamped_span(fp, x0, n, k, cap)
        return quadratic_span(fp, x0, n, k, cap)

    # ---------------------------------------------------------------- a segment's searches
    # A search over one segment's spans (steps_until, decode.settle, decode.plan_decode's first step
    # and whole segment) reads a table's row and brackets its context once: `segment` does that
    # part, `span` and `first_step` then cost a table what they cost the polynomial, each giving
    # the same number as decode_span and step_ms to the bit.
    NO_SEGMENT = (np.int64(0), np.int64(0), np.int64(0), np.int64(0), 0.0, 0.0, np.int64(0), 0.0, 0.0, 0.0, np.int64(0))

    @jit_inline
    def segment(fp, x0, n):
        """The table's part of a segment of n sequences from summed context x0 (nothing for the
        polynomial)."""
        if fp[F_TAB] != 0.0:
            return table_segment(fp, x0, n)
        return NO_SEGMENT

    @jit_inline
    def span(fp, seg, x0, n, k, cap):
        """decode_span(fp, x0, n, k, cap), with seg = segment(fp, x0, n)."""
        if fp[F_TAB] != 0.0:
            return segment_span(fp, seg, k)
        return decode_span(fp, x0, n, k, cap)

    @jit_inline
    def first_step(fp, seg, x0, n, cap):
        """step_ms(fp, x0, n, cap), with seg = segment(fp, x0, n)."""
        if fp[F_TAB] != 0.0:
            return segment_span(fp, seg, np.int64(1))
        return step_ms(fp, np.float64(x0), n, cap)

    @jit
    def steps_until(fp, seg, t0, x0, n, m, cap, t):
        """The first k in [1, m] whose k steps from t0 end at or after t (m if none), seg =
        segment(fp, x0, n): where a segment is cut for something that happens at t. The first
        step's time guesses k (steps lengthen as context grows, so the answer is the guess or a
        little below it), a gallop from the guess brackets it and a binary search settles it: the
        same k as a binary search over [1, m] (spans grow with k), in about two spans instead of
        log2(m)."""
        if m <= 1:
            return np.int64(1)
        g = m
        first = first_step(fp, seg, x0, n, cap)
        if first > 0.0 and t - t0 < first * np.float64(m - 1):
            g = np.int64(math.ceil((t - t0) / first))
            if g < 1:
                g = np.int64(1)
        lo = np.int64(1)
        hi = m
        if g >= m or t0 + span(fp, seg, x0, n, g, cap) >= t:
            hi = g if g < m else m
            step = np.int64(1)
            while True:
                c = hi - step
                if c < 1:
                    break
                if t0 + span(fp, seg, x0, n, c, cap) >= t:
                    hi = c
                    step *= 2
                else:
                    lo = c + 1
                    break
        else:
            lo = g + 1
            step = np.int64(1)
            while True:
                c = lo + step - 1
                if c >= m:
                    break
                if t0 + span(fp, seg, x0, n, c, cap) >= t:
                    hi = c
                    break
                lo = c + 1
                step *= 2
        while lo < hi:
            mid = (lo + hi) // 2
            if t0 + span(fp, seg, x0, n, mid, cap) >= t:
                hi = mid
            else:
                lo = mid + 1
        return lo

    return Namespace(
        steps_until=steps_until,
        segment=segment,
        span=span,
        first_step=first_step,
        table_segment=table_segment,
        table_piece=table_piece,
        segment_span=segment_span,
        bracket=bracket,
        batch_bracket=batch_bracket,
        decode_row=decode_row,
        table_pass=table_pass,
        table_span=table_span,
        prefill_span=prefill_span,
        pass_prefill_ms=pass_prefill_ms,
        step_ms=step_ms,
        quadratic_span=quadratic_span,
        clamped_span=clamped_span,
        decode_span=decode_span,
    )
