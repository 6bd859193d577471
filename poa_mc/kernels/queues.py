"""Per-worker FIFO rings of request slots: queue[r, row, :] with its head at wk_i[r, row, WI_QH]
and its length at WI_QN (layout.py). Row n_workers is the shared queue (pull's prefill queue,
decode_first's remote prefills); row n_workers + 1 is an open loop's stack of free slots, not a
ring (requests.finish)."""

import numpy as np

from ._ns import Namespace
from .layout import (
    WI_QH,
    WI_QN,
)


def build(jit, jit_inline=None):
    jit_inline = jit_inline or jit

    @jit_inline
    def wrap(i, cap):
        """i % cap for 0 <= i < 2 cap (a ring's head plus an offset within it): a compare, where %
        is an integer division on every queue access."""
        return i - cap if i >= cap else i

    @jit
    def q_push(queue, wk_i, r, row, s, qcap):
        n = np.int64(wk_i[r, row, WI_QN])
        queue[r, row, wrap(np.int64(wk_i[r, row, WI_QH]) + n, qcap)] = s
        wk_i[r, row, WI_QN] = n + 1

    @jit
    def q_at(queue, wk_i, r, row, i, qcap):
        return np.int64(queue[r, row, wrap(np.int64(wk_i[r, row, WI_QH]) + i, qcap)])

    @jit_inline
    def q_remove(queue, wk_i, r, row, i, qcap):
        """Remove entry i of the ring (0: the head), keeping the order of the others."""
        h = np.int64(wk_i[r, row, WI_QH])
        n = np.int64(wk_i[r, row, WI_QN])
        if i == 0:
            wk_i[r, row, WI_QH] = wrap(h + 1, qcap)
        else:
            for j in range(i, n - 1):
                queue[r, row, wrap(h + j, qcap)] = queue[r, row, wrap(h + j + 1, qcap)]
        wk_i[r, row, WI_QN] = n - 1

    @jit
    def q_pop(queue, wk_i, r, row, qcap):
        s = np.int64(queue[r, row, wk_i[r, row, WI_QH]])
        wk_i[r, row, WI_QH] = wrap(np.int64(wk_i[r, row, WI_QH]) + 1, qcap)
        wk_i[r, row, WI_QN] -= 1
        return s

    return Namespace(wrap=wrap, q_push=q_push, q_at=q_at, q_remove=q_remove, q_pop=q_pop)
