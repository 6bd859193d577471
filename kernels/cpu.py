"""CPU target: the kernel source compiled with numba.njit; replicas run on parallel threads (no GIL)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import wait
from contextlib import contextmanager

import llvmlite.binding as llvm
import numba
import numpy as np
from numba.core import config, types
from numba.core.compiler_lock import global_compiler_lock
from numba.np import arrayobj

from poa_mc import threads

from ._cache import keyed_cache_dir
from .layout import P_G2CAP, P_N, P_TALLY, P_TRACE, P_WARM, TRACE_NONE
from .source import build

# error_model="numpy", the CUDA target's own: a division by zero gives inf, nan or 0 rather than
# raising, so no test of the divisor precedes each division and modulo (the spec's checks keep the
# divisors positive); bit-identical, and 3% faster on the reference cell (bench/NOTES.md)
_JIT = numba.njit(cache=True, nogil=True, _nrt=False, error_model="numpy")
_JIT_INLINE = numba.njit(cache=True, nogil=True, _nrt=False, inline="always", error_model="numpy")


# Two builds of the one source (source.build): the full one, and a lean one for cells with neither
# lower KV tiers nor a replayed trace, whose branches it compiles out. Each caches under its own
# directory (their functions share names) and compiles on its first use. Each has its own replica
# loop calling its build through a module global: a closure over the build's dispatcher would put
# that dispatcher's per-process uuid into Numba's cache key and miss the cache in every process.
# The loops are serial and GIL-free: run_batch spreads replicas over threads itself (a prange loop
# compiled 9 s slower and ran slower than plain threads over contiguous chunks, bench/NOTES.md);
# explicit arguments rather than *arrays (a tuple argument made the replica loop about 7% slower).
with keyed_cache_dir("cpu"):
    _K = build(_JIT, _JIT_INLINE)
    _simulate_full = _K.simulate_replica
    _tally_full = _K.tally_rows

    @numba.njit(cache=True, nogil=True)
    def _run_full(
        r0, r1, ip, fp, tabs, edges, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i, rep_f,
        out_f, out_i, cand, tally_f, tally_h,
    ):  # fmt: skip
        for r in range(r0, r1):
            _simulate_full(
                r, ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i, rep_f, out_f,
                out_i, cand,
            )  # fmt: skip
            if ip[P_TALLY] == 1:  # while the replica's rows are in cache
                _tally_full(ip, fp, edges, out_f, out_i, tally_f, tally_h, r)


def _named_apart(jit, tag: str):
    """`jit` for a second build of the source: what it compiles is named `<qualname>_<tag>`. Two
    builds must not share symbol names: loaded from the cache into one process (each compiled in
    another), same-named symbols link one build's calls into the other's code."""

    def decorate(func):
        func.__qualname__ = f"{func.__qualname__}_{tag}"
        return jit(func)

    return decorate


with keyed_cache_dir("cpu-lean"):
    _L = build(_named_apart(_JIT, "lean"), _named_apart(_JIT_INLINE, "lean"), lean=True)
    _simulate_lean = _L.simulate_replica
    _tally_lean = _L.tally_rows

    @numba.njit(cache=True, nogil=True)
    def _run_lean(
        r0, r1, ip, fp, tabs, edges, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i, rep_f,
        out_f, out_i, cand, tally_f, tally_h,
    ):  # fmt: skip
        for r in range(r0, r1):
            _simulate_lean(
                r, ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i, rep_f, out_f,
                out_i, cand,
            )  # fmt: skip
            if ip[P_TALLY] == 1:
                _tally_lean(ip, fp, edges, out_f, out_i, tally_f, tally_h, r)


# the host's tally of requests' columns (samples read back, a stand-in engine's results):
# poa_mc.accumulate, through the kernels' own tally_one
tally_columns = _K.tally.tally_columns

with keyed_cache_dir("cpu"):
    _pass_prefill_ms = _K.timing.pass_prefill_ms
    _step_ms = _K.timing.step_ms

    # element by element, independent: over threads (poa_mc.threads; PoA-hat prices millions of
    # steps through them)
    @numba.njit(cache=True, nogil=True)
    def _timing_passes_in(lo, hi, fp, batch, uncached, cached, out):
        for i in range(lo, hi):
            n = batch[i]
            out[i] = _pass_prefill_ms(fp, n * cached[i], n * (cached[i] + uncached[i]), n)

    @numba.njit(cache=True, nogil=True)
    def _timing_steps_in(lo, hi, fp, batch, context, cap, out):
        for i in range(lo, hi):
            out[i] = _step_ms(fp, np.float64(batch[i]) * context[i], batch[i], cap)


def timing_passes(fp: np.ndarray, batch: np.ndarray, uncached: np.ndarray, cached: np.ndarray, out: np.ndarray) -> None:
    """out[i]: the kernels' pass of batch[i] requests computing uncached[i] tokens on cached[i]
    cached ones each (poa_mc.profiles.Timing)."""
    threads.over_ranges(_timing_passes_in, out.shape[0], fp, batch, uncached, cached, out)


def timing_steps(fp: np.ndarray, batch: np.ndarray, context: np.ndarray, cap: float, out: np.ndarray) -> None:
    """out[i]: the kernels' decode step of batch[i] sequences of context[i] tokens each."""
    threads.over_ranges(_timing_steps_in, out.shape[0], fp, batch, context, cap, out)


_compiled: set[str] = set()

# LLVM's inliner budget while the replica drivers compile (its -O3 default is 250), per build. At
# 250 the lean loop's module keeps 41 functions with 155 call sites (the clamped time span alone
# 19, the cache's acquire 5, the controller's tick 4), and every call marshals a dozen array
# arguments; at 3000 it keeps 18, at 6000 8 (NRT's reference counts, the loop itself and a
# clamped span among them; bench/inline_report.py lists them). The lean build, which runs every
# cell without lower tiers or a trace, takes 6000: 2-6% faster than at 3000 for 5% more compile
# time; the full build's compile grew 10% for it, and it keeps 3000. Measured in bench/NOTES.md.
# It is part of the cached code's key: this file is hashed into the cache directory's name
# (_cache.py), so a change of it never loads code built under another budget.
INLINE_THRESHOLD = {"lean": 6000, "full": 3000}


@contextmanager
def _inliner_budget(threshold: int) -> Iterator[None]:
    """Compile under LLVM's -inline-threshold=threshold, then restore the pipeline's default.

    The option is process-wide and, once given, overrides the level's own budget for good: it is
    set back to what the optimisation level would pick (250 at -O3, 225 below). Held under Numba's
    compiler lock so that no other thread compiles under the raised budget meanwhile."""
    default = 250 if int(config.OPT) >= 3 else 225
    with global_compiler_lock:
        llvm.set_option("", f"-inline-threshold={threshold}")
        try:
            yield
        finally:
            llvm.set_option("", f"-inline-threshold={default}")


@contextmanager
def _plain_indices() -> Iterator[None]:
    """Compile with array indices taken as they are. Numba lowers every signed index i of a
    dimension of n as `i + n if i < 0 else i` (Python's a[-1]): a sign test and a select on each
    index of each access, 405 sign tests in the lean replica loop's machine code. The kernels
    never index with a negative number (tests/test_kernels_cpu.py runs cells of every path under
    NUMBA_BOUNDSCHECK, where one would raise IndexError instead of reading past its array), and
    without the selects the loop runs 8% faster with the same results to the bit (bench/NOTES.md,
    2026-12-05). Numba has no option for it: its lowering's `fix_integer_index` is replaced while
    the kernels compile, under the compiler lock as the inliner budget is, then restored. A Numba
    without that function compiles them as before (same results, slower)."""
    original = getattr(arrayobj, "fix_integer_index", None)
    if original is None:
        yield
        return

    def fix_integer_index(context, builder, idxty, idx, size):
        return context.cast(builder, idx, idxty, types.intp if idxty.signed else types.uintp)

    with global_compiler_lock:
        arrayobj.fix_integer_index = fix_integer_index
        try:
            yield
        finally:
            arrayobj.fix_integer_index = original


def lean(ip: np.ndarray) -> bool:
    """True if the lean build can run this cell: no lower KV tiers, no replayed trace."""
    return int(ip[P_G2CAP]) == 0 and int(ip[P_TRACE]) == TRACE_NONE


def _zeros(shape: tuple, dtype) -> np.ndarray:
    """np.zeros starting on a cache line (numpy's own start 16 bytes past one): rows of 64 or 128
    bytes, such as the slots' (layout.py), then each take whole lines."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.zeros(nbytes + 64, dtype=np.uint8)
    off = -buf.ctypes.data % 64
    return buf[off : off + nbytes].view(dtype).reshape(shape)


def _alloc(shapes: dict, n: int) -> dict:
    return {name: _zeros((n, *shape), dtype) for name, (shape, dtype) in shapes.items()}


def _call(ip, fp, tabs, edges, a, n, r0=0) -> None:
    (_run_lean if lean(ip) else _run_full)(
        r0, n, ip, fp, tabs, edges, a["slot_i"], a["slot_f"], a["wk_i"], a["wk_f"], a["pc"], a["ev"], a["queue"],
        a["run"], a["heap_t"], a["heap_c"], a["rep_i"], a["rep_f"], a["out_f"], a["out_i"], a["cand"], a["tally_f"],
        a["tally_h"],
    )  # fmt: skip


def run_batch(
    ip: np.ndarray,
    fp: np.ndarray,
    tabs: np.ndarray,
    edges: np.ndarray,
    shapes: dict,
    n: int,
    parallel: bool = True,
    wanted: dict | None = None,
) -> tuple[dict, float]:
    """Allocate state for n replicas, simulate them (and tally them, with ip[P_TALLY]), return
    (arrays, seconds spent compiling). parallel=False runs on one thread (results are the same
    either way). `wanted` is the CUDA target's (what to copy back); here every array is the host's."""
    compile_s = 0.0
    variant = "lean" if lean(ip) else "full"
    if variant not in _compiled:
        t0 = time.perf_counter()
        ip1 = ip.copy()
        ip1[P_N] = 1
        ip1[P_WARM] = 0
        a1 = _alloc({k: ((1, *v[0][1:]) if k in ("out_f", "out_i") else v[0], v[1]) for k, v in shapes.items()}, 1)
        with _inliner_budget(INLINE_THRESHOLD[variant]), _plain_indices():
            _call(ip1, fp, tabs, edges, a1, 0)  # zero replicas: compiles (or loads from cache) without simulating
        compile_s = time.perf_counter() - t0
        _compiled.add(variant)
    a = _alloc(shapes, n)
    n_threads = threads.count(n) if parallel else 1
    bounds = threads.bounds(n, n_threads)
    if n_threads == 1:
        # on the calling thread: the same kernel ran 20% slower on a pool thread of its own
        # (bench/NOTES.md); the price is that Ctrl-C waits for this batch to end
        _call(ip, fp, tabs, edges, a, n)
        return a, compile_s
    # the main thread polls rather than blocks: a SIGINT delivered to a kernel thread does not
    # wake a blocked lock, and Python only raises KeyboardInterrupt when the main thread runs. On
    # an interrupt the pool is not joined (a kernel cannot be stopped) and the caller exits
    pool = threads.pool("kernels", n_threads)
    jobs = [pool.submit(_call, ip, fp, tabs, edges, a, bounds[i + 1], bounds[i]) for i in range(n_threads)]
    try:
        pending = set(jobs)
        while pending:
            _, pending = wait(pending, timeout=0.05)
        for job in jobs:
            job.result()
    except BaseException:
        for job in jobs:
            job.cancel()  # the parts not started yet; the others run to their end
        raise
    return a, compile_s


def device_name() -> str:
    return f"cpu ({numba.get_num_threads()} threads)"
