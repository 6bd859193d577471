"""The load generator between a request's creation and its arrival at the frontend (`[client]`).

A benchmark client sends each request over a connection from a pool of `max_connections`
(aiohttp's TCPConnector and httpx hold 100 by default, AIPerf 2,500; `vllm bench serve` opens one
per concurrent request; docs/sources.md, "Load generators"). A request created while every
connection is busy waits, first come first served, for the next connection a completed request
gives back; once connected it reaches the frontend `overhead_ms` later (client-side work:
serialisation, HTTP, the frontend's parsing). The client measures TTFT and E2E from the creation,
so a pool wait counts as a client sees it: SF_ARR holds the creation and SF_SRV the arrival at the
frontend (OF_CWAIT records the difference).

Both waits are FIFO and every connected request has the same overhead, so requests reach the
frontend in the order they were created: the ring of requests in transit (queue row W + 3) is in
due order, and the n-th arrival at the frontend is the n-th creation (the request's random draws
keep their index). Requests waiting for a connection sit in queue row W + 2.
"""

import numpy as np

from ._ns import Namespace
from .layout import F_CL_OVH, P_CONN, P_ND, P_NP, P_Q, RI_CONN, RI_CPH, RI_CPN, RI_CTH, RI_CTN, SF_ARR, SF_SRV

INF = np.inf


def build(jit, meters, jit_inline=None):
    jit_inline = jit_inline or jit
    count_in_flight = meters.count_in_flight

    @jit
    def ring_push(queue, rep_i, r, row, head, length, s, cap):
        queue[r, row, (rep_i[r, head] + rep_i[r, length]) % cap] = s
        rep_i[r, length] += 1

    @jit
    def ring_pop(queue, rep_i, r, row, head, length, cap):
        s = np.int64(queue[r, row, rep_i[r, head]])
        rep_i[r, head] = (rep_i[r, head] + 1) % cap
        rep_i[r, length] -= 1
        return s

    @jit
    def connect(ip, fp, slot_f, queue, rep_i, r, s, t):
        """Request s takes a connection at t and is due at the frontend after the overhead."""
        rep_i[r, RI_CONN] += 1
        slot_f[r, s, SF_SRV] = t + fp[F_CL_OVH]
        ring_push(queue, rep_i, r, ip[P_NP] + ip[P_ND] + 3, RI_CTH, RI_CTN, s, ip[P_Q])

    @jit_inline
    def create(ip, fp, slot_f, queue, rep_i, rep_f, r, s, t):
        """A client creates request s at t: it is in flight from now on, as the client counts it."""
        slot_f[r, s, SF_ARR] = t
        count_in_flight(ip, rep_i, rep_f, r, t, 1)
        if ip[P_CONN] == 0 or rep_i[r, RI_CONN] < ip[P_CONN]:
            connect(ip, fp, slot_f, queue, rep_i, r, s, t)
        else:
            ring_push(queue, rep_i, r, ip[P_NP] + ip[P_ND] + 2, RI_CPH, RI_CPN, s, ip[P_Q])

    @jit_inline
    def release(ip, fp, slot_f, queue, rep_i, r, t):
        """A request completed at t: its connection goes to the longest waiting request, if any."""
        rep_i[r, RI_CONN] -= 1
        if rep_i[r, RI_CPN] > 0:
            s = ring_pop(queue, rep_i, r, ip[P_NP] + ip[P_ND] + 2, RI_CPH, RI_CPN, ip[P_Q])
            connect(ip, fp, slot_f, queue, rep_i, r, s, t)

    @jit_inline
    def next_due(ip, slot_f, queue, rep_i, r):
        """When the next request in transit reaches the frontend (+inf: none)."""
        if rep_i[r, RI_CTN] == 0:
            return INF
        return slot_f[r, np.int64(queue[r, ip[P_NP] + ip[P_ND] + 3, rep_i[r, RI_CTH]]), SF_SRV]

    @jit_inline
    def pop_due(ip, queue, rep_i, r):
        return ring_pop(queue, rep_i, r, ip[P_NP] + ip[P_ND] + 3, RI_CTH, RI_CTN, ip[P_Q])

    return Namespace(create=create, release=release, next_due=next_due, pop_due=pop_due, connect=connect)
