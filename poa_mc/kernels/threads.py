"""Independent work over an index range, on the host's threads, for compiled GIL-free loops.

The host's compiled loops over replicas and PoA-hat windows are serial `nogil` functions of a
range (lo, hi); `over_ranges` splits the range into one contiguous part per thread. Numba's own
`parallel=True` (prange) did the same but cost seconds of compilation per function and argument
type on a cold cache (its parfor lowering: about 22 s of the first `poa-mc run` for the host's
five loops, bench/NOTES.md); a plain function of a range compiles in a fraction of that and
runs as fast. Each index is computed on its own, so results never depend on the thread count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba

_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()  # the engine reduces a batch on a thread of its own


def pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool called `name`, with at least `workers` threads, started once: a pool
    per call started its threads for every batch, about 1 ms each on a busy machine, which was 3%
    of a grid of 323 small cells (bench/NOTES.md). The kernels, the host's loops and the
    engine's reducer each have their own, so that none waits behind another's jobs."""
    with _pools_lock:
        p = _pools.get(name)
        if p is None or p._max_workers < workers:  # noqa: SLF001 - grow it
            if p is not None:
                p.shutdown(wait=False)  # its threads end after the jobs they hold
            p = _pools[name] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"poa-mc-{name}")
        return p


def count(n: int) -> int:
    """Threads for n independent items: numba's thread count (NUMBA_NUM_THREADS), at most n."""
    return max(1, min(n, numba.get_num_threads()))


def bounds(n: int, parts: int) -> list[int]:
    """Where `parts` contiguous, near-equal parts of range(n) begin, then n."""
    return [n * i // parts for i in range(parts + 1)]


def over_ranges(fn: Callable[..., Any], n: int, *args: Any) -> None:
    """fn(lo, hi, *args) over contiguous parts of range(n), one per thread (the first on the
    calling thread); returns when all are done, raising the first error."""
    threads = count(n)
    edges = bounds(n, threads)
    if threads == 1:
        fn(0, n, *args)
        return
    host = pool("host", threads - 1)
    jobs = [host.submit(fn, edges[i], edges[i + 1], *args) for i in range(1, threads)]
    try:
        fn(edges[0], edges[1], *args)
    finally:
        for job in jobs:
            job.result()
