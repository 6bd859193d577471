"""The adaptive controller (the paper's section 6): it retunes the router as the load changes.

Every control period it takes the TTFT P99 (nearest rank) over a sliding window of the most
recent first tokens, folds it into an exponentially weighted moving average, classifies the
regime with thresholds th1 < th2 and applies that regime's router settings (temperature tau,
overlap weight omega) from its table. Against flapping, a threshold must be crossed by a
relative margin (hysteresis) and a regime is held for a minimum dwell time.

State (poa_mc/kernels/layout.py): the router's settings RF_OMEGA, RF_TAU (also used without the
controller: they hold the policy's own values); RF_EWMA, RF_CTL_NEXT, RF_LASTSW, RF_REGT + k and
RI_REGIME, RI_SWITCHES; a ring of (TTFT, time observed) pairs and a switch log after the NRF
clocks of rep_f. A first token enters the ring when its decode pass is planned, stamped with the
time the pass emits it; a control step at time b counts only entries observed by b, so the
controller never sees a token early. Control steps are taken lazily, before each first token
enters the ring and before each routing decision (the only moments its state is read or its
input changes), which gives the same result as a step at every period boundary.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_CTL_ALPHA,
    F_CTL_DWELL,
    F_CTL_HYST,
    F_CTL_OMEGA,
    F_CTL_PERIOD,
    F_CTL_TAU,
    F_CTL_TH1,
    F_CTL_TH2,
    NRF,
    P_CTL,
    P_CTL_LOG,
    P_CTL_WIN,
    RF_CTL_NEXT,
    RF_EWMA,
    RF_LASTSW,
    RF_OMEGA,
    RF_REGT,
    RF_TAU,
    RI_REGIME,
    RI_SWITCHES,
    RI_TTH,
    RI_TTN,
)


def build(jit):
    @jit
    def start(ip, fp, rep_i, rep_f, r):
        """Regime 0 with its table row; the first control step one period in."""
        rep_i[r, RI_REGIME] = 0
        rep_f[r, RF_TAU] = fp[F_CTL_TAU]
        rep_f[r, RF_OMEGA] = fp[F_CTL_OMEGA]
        rep_f[r, RF_EWMA] = -1.0
        rep_f[r, RF_CTL_NEXT] = fp[F_CTL_PERIOD]

    @jit
    def observe(ip, rep_i, rep_f, r, ttft, t_obs):
        """A first token of latency `ttft` ms, emitted at t_obs, enters the window."""
        cw = ip[P_CTL_WIN]
        h = rep_i[r, RI_TTH]
        rep_f[r, NRF + 2 * h] = ttft
        rep_f[r, NRF + 2 * h + 1] = t_obs
        rep_i[r, RI_TTH] = (h + 1) % cw
        if rep_i[r, RI_TTN] < cw:
            rep_i[r, RI_TTN] += 1

    @jit
    def window_p99(ip, rep_i, rep_f, r, t):
        """Nearest-rank P99 of the window's first tokens observed by t (-1 when none): the
        (n - ceil(0.99 n) + 1)-th largest, found by peeling off the largest values."""
        n_all = rep_i[r, RI_TTN]
        n = np.int64(0)
        for i in range(n_all):
            if rep_f[r, NRF + 2 * i + 1] <= t:
                n += 1
        if n == 0:
            return -1.0
        rank = (99 * n + 99) // 100  # ceil(0.99 n)
        left = n - rank + 1
        below = math.inf
        while True:
            top = -math.inf
            ties = np.int64(0)
            for i in range(n_all):
                if rep_f[r, NRF + 2 * i + 1] > t:
                    continue
                v = rep_f[r, NRF + 2 * i]
                if v < below:
                    if v > top:
                        top = v
                        ties = 1
                    elif v == top:
                        ties += 1
            if ties >= left:
                return top
            left -= ties
            below = top

    @jit
    def classify(fp, regime, e):
        """The regime an EWMA of e ms calls for, from the current one: moving up needs a threshold
        exceeded by the margin, moving down needs it undercut by the margin."""
        h = fp[F_CTL_HYST]
        up = np.int64(0)
        if e >= fp[F_CTL_TH2] * (1.0 + h):
            up = 2
        elif e >= fp[F_CTL_TH1] * (1.0 + h):
            up = 1
        if up > regime:
            return up
        down = np.int64(2)
        if e < fp[F_CTL_TH1] * (1.0 - h):
            down = 0
        elif e < fp[F_CTL_TH2] * (1.0 - h):
            down = 1
        if down < regime:
            return down
        return regime

    @jit
    def tick(ip, fp, rep_i, rep_f, r, t):
        """Take every control step due by t."""
        if ip[P_CTL] == 0:
            return
        period = fp[F_CTL_PERIOD]
        while rep_f[r, RF_CTL_NEXT] <= t:
            b = rep_f[r, RF_CTL_NEXT]
            rep_f[r, RF_CTL_NEXT] = b + period
            p = window_p99(ip, rep_i, rep_f, r, b)
            if p < 0.0:
                continue
            e = rep_f[r, RF_EWMA]
            e = p if e < 0.0 else fp[F_CTL_ALPHA] * p + (1.0 - fp[F_CTL_ALPHA]) * e
            rep_f[r, RF_EWMA] = e
            c = rep_i[r, RI_REGIME]
            new = classify(fp, c, e)
            if new == c or b - rep_f[r, RF_LASTSW] < fp[F_CTL_DWELL]:
                continue
            rep_f[r, RF_REGT + c] += b - rep_f[r, RF_LASTSW]
            rep_f[r, RF_LASTSW] = b
            rep_i[r, RI_REGIME] = new
            rep_f[r, RF_TAU] = fp[F_CTL_TAU + new]
            rep_f[r, RF_OMEGA] = fp[F_CTL_OMEGA + new]
            k = rep_i[r, RI_SWITCHES]
            if k < ip[P_CTL_LOG]:
                at = NRF + 2 * ip[P_CTL_WIN] + 3 * k
                rep_f[r, at] = b
                rep_f[r, at + 1] = c
                rep_f[r, at + 2] = new
            rep_i[r, RI_SWITCHES] = k + 1

    return Namespace(start=start, observe=observe, window_p99=window_p99, classify=classify, tick=tick)
