"""A trace replayed as it happened (`[workload] kind = "trace"`): the per-request table the kernels read.

Two replays (docs/traces.md):
- `timestamps`, an open loop: every row arrives at its own timestamp, the times scaled so that
  the mean rate is the grid's rate (speedup = rate / the trace's own mean rate). Replica r starts
  at a random time offset and wraps around (a cyclic replay), so replicas see different stretches
  of the same trace; every policy of a point sees the same offsets (common random numbers).
- `closed`, a closed loop of C clients: a client takes a session and sends its turns in order,
  each turn `delay` ms after the previous one completed, then takes the next session. Sessions are
  taken in file order from a random start per replica (`sample = "offset"`), or drawn with
  replacement (`sample = "sessions"`, a block bootstrap of whole sessions). A row without a
  session_id is a session of one turn.

Prefix sharing comes from Mooncake's hash_ids (one id per `trace_block_size` tokens): two requests
share exactly as many leading tokens as their lists share leading ids. The engine's cache holds
prefix chains (poa_mc/kernels/cache.py): a request belongs to one chain and shares min(its prefix, the
other's) blocks with the requests of its chain. The trie of all hash-id lists is cut into chains by
heavy paths (each node continues the chain of its parent's child with the most requests); a request
joins the chain of the deepest node it shares with another request, and its prefix is that node's
depth. Sharing inside a chain is exact; sharing across chains (a system prompt above the point where
two sessions' chains part) is lost: `ReplayTable.kept_share` is the share of the trace's reusable
blocks the chains keep. Traces without hash_ids (Azure, BurstGPT) take their prefixes from the
workload's synthetic prefix model (prefix_groups, prefix_ratio, popularity).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from poa_mc.model.spec_error import SpecError
from poa_mc.model.traces import Trace, load_trace

REPLAYS = ("timestamps", "closed")
SAMPLES = ("offset", "sessions")


@dataclass(frozen=True, eq=False)
class ReplayTable:
    """Rows in replay order (by timestamp for `timestamps`; session by session for `closed`).

    group, pfx: the row's prefix chain and its shared prefix in cluster blocks (group -1: drawn from
    the synthetic prefix model). time_ms: arrival offset (timestamps). delay_ms: wait after the
    previous turn of its session completed (closed; 0 for a first turn). next_row: the session's
    next turn (-1: last). starts: each session's first row. period_ms: the cyclic replay's period.
    """

    isl: np.ndarray
    osl: np.ndarray
    group: np.ndarray
    pfx: np.ndarray
    time_ms: np.ndarray
    delay_ms: np.ndarray
    next_row: np.ndarray
    starts: np.ndarray
    period_ms: float
    groups: int
    kept_share: float

    def __len__(self) -> int:
        return len(self.isl)

    @property
    def rate_rps(self) -> float:
        """The trace's own mean arrival rate (rows per second of its period; 0 for a closed replay)."""
        return len(self.isl) / (self.period_ms / 1000.0) if self.period_ms > 0 else 0.0


def check_hash_ids(trace: Trace, trace_block_size: int) -> None:
    """Every row's hash_ids cover its prompt: ceil(input_length / trace_block_size) ids."""
    if trace.hash_ids is None:
        return
    for i, ids in enumerate(trace.hash_ids):
        want = -(-int(trace.isl[i]) // trace_block_size)
        if len(ids) != want:
            line = int(trace.lines[i]) if trace.lines is not None else i + 1
            raise SpecError(
                trace.source,
                f"{trace.source}, line {line}: {len(ids)} hash_ids for input_length {int(trace.isl[i])}, "
                f"expected {want} (one per {trace_block_size} tokens: workload.trace_block_size)",
            )


def chains(hash_ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray, float]:
    """(chain, shared ids, kept share) of each hash-id list, the lists in arrival order: the
    heavy-path chain of the deepest trie node it shares with another list (chains numbered 0.. in
    order of first use), that node's depth (0: nothing shared), and the share of the trace's
    reusable ids (a list's longest common prefix with any earlier list, as an unbounded cache would
    reuse them) that sharing within chains keeps (with the earlier lists of its own chain)."""
    parent: list[int] = [-1]
    count: list[int] = [0]
    child: dict[tuple[int, int], int] = {}
    paths: list[list[int]] = []
    reusable = 0
    for ids in hash_ids:
        node, path, seen = 0, [], True
        for h in ids:
            nxt = child.get((node, h))
            if nxt is None:
                nxt = len(parent)
                child[(node, h)] = nxt
                parent.append(node)
                count.append(0)
                seen = False
            reusable += seen
            count[nxt] += 1
            node = nxt
            path.append(node)
        paths.append(path)
    heavy: dict[int, int] = {}
    for (p, _), c in child.items():  # nodes in creation order: ties go to the first child seen
        if p not in heavy or count[c] > count[heavy[p]]:
            heavy[p] = c
    chain = [-1] * len(parent)
    n_chains = 0
    for node in range(1, len(parent)):  # a parent is created before its children
        p = parent[node]
        if p > 0 and heavy[p] == node:
            chain[node] = chain[p]
        else:
            chain[node] = n_chains
            n_chains += 1
    group = np.zeros(len(paths), dtype=np.int64)
    depth = np.zeros(len(paths), dtype=np.int64)
    number: dict[int, int] = {}
    deepest: dict[int, int] = {}
    kept = 0
    alone: list[int] = []
    for i, path in enumerate(paths):
        d = 0
        while d < len(path) and count[path[d]] >= 2:
            d += 1
        depth[i] = d
        if not d:
            alone.append(i)
            continue
        c = chain[path[d - 1]]
        group[i] = number.setdefault(c, len(number))
        kept += min(d, deepest.get(c, 0))
        deepest[c] = max(d, deepest.get(c, 0))
    # a list that shares nothing has no prefix (depth 0, so its group holds no chain for it); the
    # groups are dealt round to such lists only so that a policy hashing groups to workers (hash)
    # spreads them rather than sending them all to one owner
    spread = max(len(number), 1)
    for k, i in enumerate(alone):
        group[i] = k % spread
    return group, depth, (kept / reusable if reusable else 1.0)


def build_table(trace: Trace, *, replay: str, block_size: int, trace_block_size: int) -> ReplayTable:
    """The replay table of `trace` for a cluster of `block_size`-token blocks."""
    check_hash_ids(trace, trace_block_size)
    n = len(trace)
    if trace.hash_ids is not None:
        by_time = np.argsort(trace.arrival_ms, kind="stable")
        g, d, kept = chains([trace.hash_ids[i] for i in by_time])
        group, depth = np.empty_like(g), np.empty_like(d)
        group[by_time], depth[by_time] = g, d
        shared_tokens = np.minimum(depth * trace_block_size, trace.isl)
        pfx = shared_tokens // block_size
        groups = int(group.max()) + 1 if len(group) else 0
    else:
        group, pfx, kept, groups = np.full(n, -1), np.zeros(n, dtype=np.int64), 1.0, 0
    sessions = trace.session if trace.session is not None else [""] * n
    delay = trace.delay_ms if trace.delay_ms is not None else np.zeros(n)
    if replay == "timestamps":
        order = np.argsort(trace.arrival_ms, kind="stable")
        t = trace.arrival_ms[order] - trace.arrival_ms[order[0]]
        if t[-1] <= 0:
            raise SpecError(
                trace.source,
                f"{trace.source}: every timestamp is the same ({len(t)} rows): a timestamps replay needs them to span "
                f"some time (use replay = 'closed')",
            )
        gap = float(t[-1] / (n - 1))
        nxt = np.full(n, -1)
        starts = np.arange(n)
        period = float(t[-1]) + gap  # the wrap leaves one mean gap between the last row and the first
    else:
        first: dict[str, list[int]] = {}
        singles: list[list[int]] = []
        order_lists: list[list[int]] = []
        for i, sid in enumerate(sessions):
            if sid == "":
                singles.append([i])
                order_lists.append(singles[-1])
            elif sid in first:
                first[sid].append(i)
            else:
                first[sid] = [i]
                order_lists.append(first[sid])
        order = np.asarray([i for rows in order_lists for i in rows])
        starts_l, nxt_l, pos = [], [], 0
        for rows in order_lists:
            starts_l.append(pos)
            nxt_l.extend(list(range(pos + 1, pos + len(rows))) + [-1])
            pos += len(rows)
        starts, nxt = np.asarray(starts_l), np.asarray(nxt_l)
        t = np.zeros(n)
        period = 0.0
    dl = delay[order].copy()
    dl[starts] = 0.0  # a session's first turn waits for nothing
    return ReplayTable(
        isl=np.maximum(trace.isl[order], 1),
        osl=np.maximum(trace.osl[order], 1),
        group=group[order],
        pfx=pfx[order],
        time_ms=t,
        delay_ms=dl,
        next_row=nxt,
        starts=starts,
        period_ms=period,
        groups=groups,
        kept_share=float(kept),
    )


@lru_cache(maxsize=8)
def _load(path: str, fmt: str, sha256: str) -> Trace:
    trace = load_trace(Path(path), fmt)
    if sha256 and trace.sha256 != sha256:
        raise SpecError(
            path, f"{path}: changed since the grid was read (sha256 {trace.sha256[:12]}, expected {sha256[:12]})"
        )
    return trace


@lru_cache(maxsize=16)
def table_for(path: str, fmt: str, sha256: str, *, replay: str, block_size: int, trace_block_size: int) -> ReplayTable:
    return build_table(
        _load(path, fmt, sha256), replay=replay, block_size=block_size, trace_block_size=trace_block_size
    )
