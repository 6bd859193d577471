"""Nodes and the links between them (`cluster.gpus_per_node` > 0): where a KV transfer runs.

Workers sit on nodes (ip[NP_I + w]: worker w's node, poa_mc.model.spec_cluster.ClusterSpec.nodes). A transfer
between two workers of one node runs over NVLink at the cluster's `transfer_gbps` (as without
nodes). A transfer that leaves its prefill worker's node runs over that node's network link of
`node_nic_gbps`, which the transfers in flight on it share fairly (processor sharing, as BLIS
models a shared link): with n of them each moves at 1/n of the link.

The link is simulated lazily and exactly. A transfer joins its link when its reads are posted
(slot_f[SF_XFER]: the reservation's instant plus its decode worker's posting, so several decode
workers reserving in one instant join in the order of their posting, not of the workers). Between
two reservations nothing new joins, so from one on the arrival times follow from the bytes left
and the joins already known: each reservation advances the link to the current instant (the
transfers that finished leave it), joins, and simulates a copy of the link forward to rewrite
every transfer's SF_READY on it. A join only delays the others, so a decode worker that already
cut its pass at an earlier ready time just finds it not ready then (a cut is a step boundary
either way). A transfer leaves the link when its decode worker takes it over (`done`), after
advancing it to that instant.

State: slot_i[SI_LINK] = link + 1 while on a link (0: none), slot_f[SF_REM] its bytes left as of
the link's clock, slot_f[SF_XFER] when it joins, rep_f[ip[P_LINK_F] + link] the link's clock (ms).
rep_f[RF_LINK] adds up the time each link carried a transfer over the measurement window
(summary.parquet's link_util).
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
    SF_XFER,
    SI_LINK,
)

_DONE_BYTES = 1.0  # a transfer with at most this much left has finished (float rounding)


def build(jit, meters):
    integrate = meters.integrate

    @jit
    def node_of(ip, w):
        return ip[NP_I + w]

    @jit
    def sharing(ip, slot_i, slot_f, r, link, at, col):
        """Link at time `at`: the transfers on it that have joined (n), the least of their
        slot_f[col] (bytes left), and the earliest join still to come (+inf: none)."""
        n = 0
        least = np.inf
        join_at = np.inf
        for q in range(ip[P_S]):
            if np.int64(slot_i[r, q, SI_LINK]) == link + 1 and slot_f[r, q, SF_REM] > 0.0:
                if slot_f[r, q, SF_XFER] <= at:
                    n += 1
                    least = min(least, slot_f[r, q, col])
                elif slot_f[r, q, SF_XFER] < join_at:
                    join_at = slot_f[r, q, SF_XFER]
        return n, least, join_at

    @jit
    def advance(ip, fp, slot_i, slot_f, rep_i, rep_f, r, link, t):
        """Move link's clock to t: the transfers that joined share the bandwidth, the ones that
        finish leave, the ones whose reads are posted by then join."""
        bw = fp[F_NIC_GBPS] * 1e6  # bytes per ms
        clock = rep_f[r, ip[P_LINK_F] + link]
        while clock < t:
            n, least, join = sharing(ip, slot_i, slot_f, r, link, clock, SF_REM)
            if n == 0:  # idle until the next join, or until t
                clock = join if join < t else t
                continue
            end = min(clock + least * n / bw, join, t)
            step = (end - clock) * bw / n
            for q in range(ip[P_S]):
                if np.int64(slot_i[r, q, SI_LINK]) == link + 1 and slot_f[r, q, SF_REM] > 0.0:
                    if slot_f[r, q, SF_XFER] <= clock:
                        left = slot_f[r, q, SF_REM] - step
                        slot_f[r, q, SF_REM] = left if left > _DONE_BYTES else 0.0
            integrate(ip, rep_i, rep_f, r, RF_LINK, clock, end, 1.0)  # the link carried a transfer
            clock = end
        rep_f[r, ip[P_LINK_F] + link] = clock

    @jit
    def join(ip, fp, slot_i, slot_f, rep_i, rep_f, r, s, link, t, nbytes):
        """Transfer s of nbytes joins link when its reads are posted (slot_f[s, SF_XFER] >= t, the
        current instant). Its SF_READY, and the others', are known after `project`."""
        advance(ip, fp, slot_i, slot_f, rep_i, rep_f, r, link, t)
        slot_i[r, s, SI_LINK] = link + 1
        slot_f[r, s, SF_REM] = nbytes if nbytes > _DONE_BYTES else _DONE_BYTES + 1.0

    @jit
    def project(ip, fp, slot_i, slot_f, rep_f, r, link):
        """Rewrite the SF_READY of every transfer on link (the link's latency after its last byte):
        a copy of the link simulated from its clock through the joins already known. The copy keeps
        each transfer's bytes left in SF_READY until it is done there, then its arrival time (its
        SI_LINK negated meanwhile)."""
        bw = fp[F_NIC_GBPS] * 1e6
        for q in range(ip[P_S]):
            if np.int64(slot_i[r, q, SI_LINK]) == link + 1 and slot_f[r, q, SF_REM] > 0.0:
                slot_f[r, q, SF_READY] = slot_f[r, q, SF_REM]
        at = rep_f[r, ip[P_LINK_F] + link]
        while True:
            n, least, join_at = sharing(ip, slot_i, slot_f, r, link, at, SF_READY)
            if n == 0:
                if join_at == np.inf:
                    break
                at = join_at
                continue
            end = min(at + least * n / bw, join_at)
            step = (end - at) * bw / n
            for q in range(ip[P_S]):
                if np.int64(slot_i[r, q, SI_LINK]) == link + 1 and slot_f[r, q, SF_REM] > 0.0:
                    if slot_f[r, q, SF_XFER] <= at:
                        left = slot_f[r, q, SF_READY] - step
                        if left > _DONE_BYTES:
                            slot_f[r, q, SF_READY] = left
                        else:
                            slot_f[r, q, SF_READY] = end + fp[F_XFER_LAT]
                            slot_i[r, q, SI_LINK] = -(link + 1)
            at = end
        for q in range(ip[P_S]):
            if np.int64(slot_i[r, q, SI_LINK]) == -(link + 1):
                slot_i[r, q, SI_LINK] = link + 1

    @jit
    def start(ip, fp, slot_i, slot_f, rep_i, rep_f, r, s, link, t, nbytes):
        """join, then project: returns s's SF_READY."""
        join(ip, fp, slot_i, slot_f, rep_i, rep_f, r, s, link, t, nbytes)
        project(ip, fp, slot_i, slot_f, rep_f, r, link)
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

    return Namespace(node_of=node_of, advance=advance, join=join, project=project, start=start, done=done)
