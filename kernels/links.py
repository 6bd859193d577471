"""Nodes and the links between them (`cluster.gpus_per_node` > 0): where a KV transfer runs.

Workers sit on nodes (ip[NP_I + w]: worker w's node, poa_mc.spec.ClusterSpec.nodes). A transfer
between two workers of one node runs over NVLink at the cluster's `transfer_gbps` (as without
nodes). A transfer that leaves its prefill worker's node runs over that node's network link of
`node_nic_gbps`, which the transfers in flight on it share fairly (processor sharing, as BLIS
models a shared link): with n of them each moves at 1/n of the link.

The link is simulated lazily and exactly. Between two starts on a link nothing joins it, so from a
start on the completion times follow from the bytes left (smallest first: with bytes r1 <= r2 <=
... each finishes (r_k - r_{k-1}) (n - k + 1) / bandwidth after the one before). Each start
advances the link to now (the transfers that finished meanwhile leave it), joins, and rewrites
every transfer's SF_READY on the link; a start only delays the others, so a decode worker that
already cut its pass at an earlier ready time just finds it not ready then (a cut is a step
boundary either way). A transfer leaves the link when its decode worker takes it over
(`done`), after advancing it to that moment.

State: slot_i[SI_LINK] = link + 1 while on a link (0: none), slot_f[SF_REM] its bytes left as of the
link's clock, rep_f[ip[P_LINK_F] + link] the link's clock (ms). rep_f[RF_LINK] adds up the time
each link carried a transfer over the measurement window (summary.parquet's link_util).
"""

import numpy as np

from ._ns import Namespace
from .layout import (
    F_NIC_GBPS,
    F_XFER_LAT,
    NP_I,
    P_LINK_F,
    P_S,
    RF_LINK,
    SF_READY,
    SF_REM,
    SI_LINK,
)

_DONE_BYTES = 1.0  # a transfer with at most this much left has finished (float rounding)


def build(jit, meters):
    integrate = meters.integrate

    @jit
    def node_of(ip, w):
        return ip[NP_I + w]

    @jit
    def advance(ip, fp, slot_i, slot_f, rep_i, rep_f, r, link, t):
        """Move link's clock to t: its transfers share the bandwidth, the ones that finish leave."""
        bw = fp[F_NIC_GBPS] * 1e6  # bytes per ms
        clock = rep_f[r, ip[P_LINK_F] + link]
        while clock < t:
            n = 0
            least = np.inf
            for s in range(ip[P_S]):
                if np.int64(slot_i[r, s, SI_LINK]) == link + 1 and slot_f[r, s, SF_REM] > 0.0:
                    n += 1
                    if slot_f[r, s, SF_REM] < least:
                        least = slot_f[r, s, SF_REM]
            if n == 0:
                break
            dt = least * n / bw
            step = least if clock + dt <= t else (t - clock) * bw / n
            for s in range(ip[P_S]):
                if np.int64(slot_i[r, s, SI_LINK]) == link + 1 and slot_f[r, s, SF_REM] > 0.0:
                    left = slot_f[r, s, SF_REM] - step
                    slot_f[r, s, SF_REM] = left if left > _DONE_BYTES else 0.0
            end = clock + dt if clock + dt <= t else t
            integrate(ip, rep_i, rep_f, r, RF_LINK, clock, end, 1.0)  # the link carried a transfer
            clock = end
        rep_f[r, ip[P_LINK_F] + link] = t

    @jit
    def start(ip, fp, slot_i, slot_f, rep_i, rep_f, r, s, link, t, nbytes):
        """Transfer s of nbytes joins link at t; every transfer's on it SF_READY is rewritten (the
        link's latency after its last byte). Returns s's."""
        advance(ip, fp, slot_i, slot_f, rep_i, rep_f, r, link, t)
        slot_i[r, s, SI_LINK] = link + 1
        slot_f[r, s, SF_REM] = nbytes if nbytes > _DONE_BYTES else _DONE_BYTES + 1.0
        bw = fp[F_NIC_GBPS] * 1e6
        n = 0
        for q in range(ip[P_S]):
            if np.int64(slot_i[r, q, SI_LINK]) == link + 1 and slot_f[r, q, SF_REM] > 0.0:
                n += 1
        # completion times smallest first (ties by slot), without moving the bytes left
        prev_rem = 0.0
        prev_q = np.int64(-1)
        at = t
        for k in range(n):
            best = np.int64(-1)
            best_rem = np.inf
            for q in range(ip[P_S]):
                if np.int64(slot_i[r, q, SI_LINK]) != link + 1 or slot_f[r, q, SF_REM] <= 0.0:
                    continue
                rem = slot_f[r, q, SF_REM]
                after = rem > prev_rem or (rem == prev_rem and q > prev_q)
                if after and (rem < best_rem or (rem == best_rem and q < best)):
                    best = q
                    best_rem = rem
            at += (best_rem - prev_rem) * (n - k) / bw
            slot_f[r, best, SF_READY] = at + fp[F_XFER_LAT]
            prev_rem = best_rem
            prev_q = best
        return slot_f[r, s, SF_READY]

    @jit
    def done(ip, fp, slot_i, slot_f, rep_i, rep_f, r, s, t):
        """Transfer s's decode worker takes it over at t (its KV arrived): it leaves its link."""
        link = np.int64(slot_i[r, s, SI_LINK]) - 1
        if link < 0:
            return
        advance(ip, fp, slot_i, slot_f, rep_i, rep_f, r, link, t)
        slot_i[r, s, SI_LINK] = 0
        slot_f[r, s, SF_REM] = 0.0

    return Namespace(node_of=node_of, advance=advance, start=start, done=done)
