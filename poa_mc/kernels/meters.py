"""Replica-level time integrals: the requests in flight (Little's law: poa_mc.stats.cell_stats's closed-loop
throughput), the completions inside the measured arrivals' window (its open-loop throughput)
and the workers' busy time, running sequences and held blocks (summary.parquet's utilisation
columns). Each counts only from the first measured arrival on."""

from ._ns import Namespace
from .layout import (
    P_N,
    P_WARM,
    RF_FIRST_ARR,
    RF_INFL,
    RF_INFL_T,
    RI_DONE_WIN,
    RI_INFLIGHT,
    RI_SEQ,
)


def build(jit, jit_inline=None):
    jit_inline = jit_inline or jit

    @jit_inline
    def count_in_flight(ip, rep_i, rep_f, r, t, delta):
        """Requests in flight change by delta at t: RF_INFL gains the old count x the time since the
        last change, once the first measured request has arrived (Little's law: throughput is the
        mean in flight over the mean time in flight, poa_mc.stats.cell_stats)."""
        if rep_i[r, RI_SEQ] > ip[P_WARM]:
            rep_f[r, RF_INFL] += rep_i[r, RI_INFLIGHT] * (t - rep_f[r, RF_INFL_T])
            # a completion between the first and the last measured arrival: the window an open
            # loop's throughput is counted over ends at an arrival, not at a straggler's completion
            if delta < 0 and rep_i[r, RI_SEQ] < ip[P_WARM] + ip[P_N]:
                rep_i[r, RI_DONE_WIN] += 1
        rep_f[r, RF_INFL_T] = t
        rep_i[r, RI_INFLIGHT] += delta

    @jit_inline
    def integrate(ip, rep_i, rep_f, r, at, t0, t, weight):
        """rep_f[at] += weight x the part of [t0, t] after the first measured arrival (once it came)."""
        if rep_i[r, RI_SEQ] > ip[P_WARM]:
            a = rep_f[r, RF_FIRST_ARR]
            if t0 > a:
                a = t0
            if t > a:
                rep_f[r, at] += weight * (t - a)

    return Namespace(count_in_flight=count_in_flight, integrate=integrate)
