"""CPU target: the kernel source compiled with numba.njit; replicas run on parallel threads (no GIL).

About 500 lines: the CPU drivers of the simulation, the tally and PoA-hat's solver, and the host's
compiled helpers over recorded arrays, which share this target's build settings (inliner budget,
index codegen) and its on-disk cache."""

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

from . import poa_hat, threads
from ._cache import keyed_cache_dir
from .cells import lean, stacked
from .fixed_rows import fixed_last
from .layout import (
    FIXED_WIDTH,
    NPC,
    P_N,
    P_POA,
    P_POA_K,
    P_POA_SLOTS,
    P_POA_WIN,
    P_TALLY,
    P_WARM,
    POA_OBSERVED_STEP,
    POA_ROUTER,
)
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
# A batch may hold replicas of several cells (a grid's small cells, poa_mc/engine/cell_batch.py):
# replica r reads its cell's row of the stacked parameters, ips[cell[r]] (a one-cell batch has one
# row), a view of the same type as a cell's own arrays, so the builds compile once for both.
with keyed_cache_dir("cpu"):
    _K = build(_JIT, _JIT_INLINE, fixed=fixed_last)
    _simulate_full = _K.simulate_replica
    _tally_full = _K.tally_rows

    @numba.njit(cache=True, nogil=True)
    def _run_full(
        r0, r1, stride, cell, ips, fps, tabss, edges, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c,
        rep_i, rep_f, out_f, out_i, cand, tally_f, tally_h,
    ):  # fmt: skip
        for r in range(r0, r1, stride):
            c = cell[r]
            ip, fp = ips[c], fps[c]
            _simulate_full(
                r, ip, fp, tabss[c], slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i, rep_f,
                out_f, out_i, cand,
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
    _L = build(_named_apart(_JIT, "lean"), _named_apart(_JIT_INLINE, "lean"), lean=True, fixed=fixed_last)
    _simulate_lean = _L.simulate_replica
    _tally_lean = _L.tally_rows

    @numba.njit(cache=True, nogil=True)
    def _run_lean(
        r0, r1, stride, cell, ips, fps, tabss, edges, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c,
        rep_i, rep_f, out_f, out_i, cand, tally_f, tally_h,
    ):  # fmt: skip
        for r in range(r0, r1, stride):
            c = cell[r]
            ip, fp = ips[c], fps[c]
            _simulate_lean(
                r, ip, fp, tabss[c], slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i, rep_f,
                out_f, out_i, cand,
            )  # fmt: skip
            if ip[P_TALLY] == 1:
                _tally_lean(ip, fp, edges, out_f, out_i, tally_f, tally_h, r)


# the host's tally of requests' columns (samples read back, a stand-in engine's results):
# poa_mc.stats.accumulate, through the kernels' own tally_one
tally_columns = _K.tally.tally_columns

with keyed_cache_dir("cpu"):
    _pass_prefill_ms = _K.timing.pass_prefill_ms
    _step_ms = _K.timing.step_ms

    # element by element, independent: over threads (poa_mc.kernels.threads; PoA-hat prices millions of
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
    cached ones each (poa_mc.model.profiles.Timing)."""
    threads.over_ranges(_timing_passes_in, out.shape[0], fp, batch, uncached, cached, out)


def timing_steps(fp: np.ndarray, batch: np.ndarray, context: np.ndarray, cap: float, out: np.ndarray) -> None:
    """out[i]: the kernels' decode step of batch[i] sequences of context[i] tokens each."""
    threads.over_ranges(_timing_steps_in, out.shape[0], fp, batch, context, cap, out)


# PoA-hat's window solver (poa_mc/kernels/poa_hat.py) for the engine's pass over each replica's rows, and
# for the host's compiled path (poa_mc.stats.poa_hat) over recorded arrays: one solver either way
with keyed_cache_dir("cpu"):
    _P = _K.poa_hat
    _replica_sums = _P.replica_sums
    _layout = _P.layout
    _assign_min = _P.assign_min
    _slots_ascend = _P.slots_ascend
    _whole_block_prices = _P.whole_block_prices
    _window_opt = _P.window_opt
    _solve_window = _P.solve_window
    _realized = _P.realized
    _pairwise_sum = _P.pairwise_sum

    @numba.njit(cache=True, nogil=True)
    def _run_poa(r0, r1, stride, cell, ips, fps, step, out_f, out_i, cand, poa, f, g):
        for r in range(r0, r1, stride):
            c = cell[r]
            _replica_sums(r, ips[c], fps[c], step, out_f, out_i, cand, poa, f, g)

    @numba.njit(cache=True, nogil=True)
    def _slot_sums_in(
        lo, hi, tok, blk, chosen, add_t, add_b, dec, rel_t, rel_b, order, window, slots, omega, block_size, step,
        seen, opt, real,
    ):  # fmt: skip
        k = tok.shape[2]
        n = window
        o = _layout(n, k, slots * k)
        f, g = np.empty(o[16]), np.empty(o[22], np.int64)
        observed = seen.size > 0
        kind = POA_OBSERVED_STEP if observed else POA_ROUTER
        for r in range(lo, hi):
            for wi in range(opt.shape[1]):
                bad = False  # a block count off the step table
                for i in range(n):
                    e = order[r, wi * n + i]
                    c = chosen[r, e]
                    for w in range(k):
                        f[o[0] + i * k + w] = tok[r, e, w]
                        f[o[1] + i * k + w] = blk[r, e, w]
                    cost = _realized(kind, tok[r, e, c], blk[r, e, c], seen[r, e] if observed else 0.0, omega,
                                     block_size, step)  # fmt: skip
                    real[r, wi * n + i] = cost
                    bad = bad or (not observed and step.size > 0 and cost != cost)
                    g[o[17] + i] = c
                    f[o[8] + i], f[o[9] + i] = add_t[r, e], add_b[r, e]
                    f[o[10] + i], f[o[11] + i], f[o[12] + i] = dec[r, e], rel_t[r, e], rel_b[r, e]
                opt[r, wi] = np.nan if bad else _solve_window(f, g, n, k, slots, omega, block_size, step)

    @numba.njit(cache=True, nogil=True)
    def _slot_router_opt_in(lo, hi, f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, block_size, out):
        _, n, k = f_tok.shape
        o = _layout(n, k, slots * k)
        f, g = np.empty(o[16]), np.empty(o[22], np.int64)
        no_table = np.empty(0)
        for wi in range(lo, hi):
            for i in range(n):
                for w in range(k):
                    f[o[2] + i * k + w] = f_tok[wi, i, w]
                    f[o[3] + i * k + w] = f_blk[wi, i, w]
            for w in range(k):
                f[o[4] + w], f[o[5] + w] = a_tok[wi, w], a_blk[wi, w]
                f[o[6] + w], f[o[7] + w] = t_tok[wi, w], t_blk[wi, w]
            out[wi] = _window_opt(f, g, n, k, slots, omega, block_size, no_table)

    @numba.njit(cache=True, nogil=True)
    def _batch_assign_in(lo, hi, costs, slots, out):
        """Frozen pricing: each worker's column repeated `slots` times, side by side (by worker)."""
        _, n, k = costs.shape
        m = k * slots
        a = np.empty(n * m)
        f, g = np.empty(n + 1 + 2 * (m + 1)), np.empty(6 * (m + 1), np.int64)
        for wi in range(lo, hi):
            for i in range(n):
                for j in range(k):
                    v = costs[wi, i, j]
                    for s in range(slots):
                        a[i * m + j * slots + s] = v
            out[wi] = _assign_min(a, 0, n, m, k, True, f, 0, g, 0)

    @numba.njit(cache=True, nogil=True)
    def _batch_assign_priced_in(lo, hi, prices, k, out):
        _, n, m = prices.shape
        flat = prices.reshape(prices.size)
        f, g = np.empty(n + 1 + 2 * (m + 1)), np.empty(6 * (m + 1), np.int64)
        for wi in range(lo, hi):
            a0 = wi * n * m
            ascend = _slots_ascend(flat, a0, n, m, k)
            out[wi] = _assign_min(flat, a0, n, m, k if ascend else m, False, f, 0, g, 0)

    @numba.njit(cache=True)
    def _assign_one(a, k, by_worker):
        n, m = a.shape
        f, g = np.empty(n + 1 + 2 * (m + 1)), np.empty(6 * (m + 1), np.int64)
        return _assign_min(a.reshape(a.size), 0, n, m, k, by_worker, f, 0, g, 0)

    @numba.njit(cache=True)
    def _ascend_one(a, k):
        n, m = a.shape
        return _slots_ascend(a.reshape(a.size), 0, n, m, k)

    @numba.njit(cache=True)
    def _window_buffers(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots):
        n, k = f_tok.shape
        o = _layout(n, k, slots * k)
        f, g = np.empty(o[16]), np.empty(o[22], np.int64)
        for i in range(n):
            for w in range(k):
                f[o[2] + i * k + w] = f_tok[i, w]
                f[o[3] + i * k + w] = f_blk[i, w]
        for w in range(k):
            f[o[4] + w], f[o[5] + w], f[o[6] + w], f[o[7] + w] = a_tok[w], a_blk[w], t_tok[w], t_blk[w]
        return f, g, o

    @numba.njit(cache=True)
    def _whole_one(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, step):
        f, _, o = _window_buffers(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots)
        return _whole_block_prices(f, f_tok.shape[0], f_tok.shape[1], slots, omega, step.size > 0, o)

    @numba.njit(cache=True)
    def _window_one(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, block_size, step):
        f, g, _ = _window_buffers(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots)
        return _window_opt(f, g, f_tok.shape[0], f_tok.shape[1], slots, omega, block_size, step)

    @numba.njit(cache=True)
    def _pairwise_rows(x):
        out = np.empty(x.shape[0])
        f, g = np.empty(poa_hat.PW_DEPTH), np.empty(3 * poa_hat.PW_DEPTH, np.int64)
        flat = x.reshape(x.size)
        for r in range(x.shape[0]):
            out[r] = _pairwise_sum(flat, r * x.shape[1], x.shape[1], f, 0, g, 0)
        return out


def slot_sums(tok, blk, chosen, add_t, add_b, dec, rel_t, rel_b, order, window, slots, omega, block_size, step, seen):
    """PoA-hat's windows under slot pricing from recorded arrays: (OPT of each window (R, nw), the
    realized cost of each windowed decision (R, nw * window)); see poa_mc.stats.poa_hat._slot_sums."""
    r, n = chosen.shape
    nw = n // window
    opt, real = np.empty((r, nw)), np.empty((r, nw * window))
    args = (tok, blk, chosen, add_t, add_b, dec, rel_t, rel_b, order, window, slots, omega, block_size, step, seen)
    threads.over_ranges(_slot_sums_in, r, *args, opt, real)
    return opt, real


def slot_router_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots: int, omega: float, block_size: float):
    """OPT of each window (W,) under slot pricing at Dynamo's router cost, from the windows'
    unclipped views f (W, n, K), smallest loads a and gone requests t (W, K); NaN where a price is
    not finite."""
    out = np.empty(f_tok.shape[0])
    args = (f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, block_size, out)
    threads.over_ranges(_slot_router_opt_in, f_tok.shape[0], *args)
    return out


def _unsolved(out: np.ndarray, costs: np.ndarray) -> None:
    """Raise ValueError for the first window the solver could not solve (NaN: a non-finite cost,
    or more rows than columns), naming it and its first non-finite row."""
    if not np.isnan(out).any():
        return
    w = int(np.flatnonzero(np.isnan(out))[0])
    c = np.asarray(costs[w])
    rows = np.flatnonzero(~np.isfinite(c.reshape(c.shape[0], -1)).all(axis=1)) if c.ndim >= 2 else []
    what = f"non-finite costs in row {int(rows[0])}" if len(rows) else "no assignment (more rows than columns?)"
    raise ValueError(f"PoA-hat window {w}: {what}; the assignment needs finite costs")


def batch_assign(costs: np.ndarray, slots: int) -> np.ndarray:
    """OPT of each window: costs (W, n, K) -> (W,), every worker offered `slots` times, in parallel.
    ValueError for a window with a non-finite cost (the solver flags it: poa_mc/kernels/poa_hat.py)."""
    out = np.empty(costs.shape[0])
    threads.over_ranges(_batch_assign_in, costs.shape[0], costs, slots, out)
    _unsolved(out, costs)
    return out


def batch_assign_priced(prices: np.ndarray, k: int) -> np.ndarray:
    """OPT of each window from full price matrices: prices (W, n, slots * k) C-contiguous -> (W,),
    columns slot-major over k workers, in parallel. ValueError for a window with a non-finite price."""
    out = np.empty(prices.shape[0])
    threads.over_ranges(_batch_assign_priced_in, prices.shape[0], prices, k, out)
    _unsolved(out, prices)
    return out


def assign_min(a: np.ndarray, k: int, by_worker: bool = False) -> float:
    """The least-cost assignment of a's rows to distinct columns (poa_mc/kernels/poa_hat.py: assign_min);
    ValueError for a non-finite entry."""
    total = float(_assign_one(np.ascontiguousarray(a, dtype=np.float64), k, by_worker))
    if np.isnan(total):
        raise ValueError("assign_min: the assignment needs finite costs (and no more rows than columns)")
    return total


def slots_ascend(a: np.ndarray, k: int) -> bool:
    return bool(_ascend_one(np.ascontiguousarray(a, dtype=np.float64), k))


def whole_block_prices(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots: int, omega: float, step) -> bool:
    """Whether one window's slot prices are whole block counts (poa_mc/kernels/poa_hat.py)."""
    return bool(_whole_one(*_windows64(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk), slots, omega, _f64(step)))


def window_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots: int, omega: float, block_size: float, step) -> float:
    """OPT of one window under slot pricing (poa_mc/kernels/poa_hat.py: window_opt)."""
    args = (*_windows64(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk), slots, omega, block_size, _f64(step))
    return float(_window_one(*args))


def pairwise_rows(x: np.ndarray) -> np.ndarray:
    """Each row's sum by the kernels' pairwise_sum (numpy's x.sum(axis=1), to the bit)."""
    return _pairwise_rows(np.ascontiguousarray(x, dtype=np.float64))


def _f64(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64)


def _windows64(*arrays) -> tuple:
    return tuple(_f64(x) for x in arrays)


def poa_scratch(ip: np.ndarray) -> tuple[int, int]:
    """(floats, ints) of one replica's PoA-hat scratch (poa_mc/kernels/poa_hat.py)."""
    return poa_hat.sizes(int(ip[P_N]), int(ip[P_POA_WIN]), int(ip[P_POA_K]), int(ip[P_POA_SLOTS]))


_compiled: set[str] = set()

# LLVM's inliner budget while the replica drivers compile (its -O3 default is 250), per build. At
# 250 the lean loop's module keeps 41 functions with 155 call sites (the clamped time span alone
# 19, the cache's acquire 5, the controller's tick 4), and every call marshals a dozen array
# arguments; at 3000 it keeps 18, at 6000 8 (NRT's reference counts, the loop itself and a
# clamped span among them; bench/inline_report.py lists them). The lean build, which runs every
# cell without lower tiers or a trace, takes 6000: 2-6% faster than at 3000 for 5% more compile
# time; the full build's compile grew 10% for it, and it keeps 3000. Measured in bench/NOTES.md.
# llm-d's pickers grew the router's choose past 6000 (out of line again, twice, and the reference
# cell 2.7% slower); at 7000 it is inlined as before, the lean build's compile unchanged (88 s).
# It is part of the cached code's key: this file is hashed into the cache directory's name
# (_cache.py), so a change of it never loads code built under another budget.
INLINE_THRESHOLD = {"lean": 7000, "full": 3000}


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


def _zeros(shape: tuple, dtype) -> np.ndarray:
    """np.zeros starting on a cache line (numpy's own start 16 bytes past one): rows of 64 or 128
    bytes, such as the slots' (layout.py), then each take whole lines."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.zeros(nbytes + 64, dtype=np.uint8)
    off = -buf.ctypes.data % 64
    return buf[off : off + nbytes].view(dtype).reshape(shape)


def _alloc(shapes: dict, n: int) -> dict:
    return {name: _zeros((n, *shape), dtype) for name, (shape, dtype) in shapes.items()}


def _check_widths(a: dict, lean_build: bool) -> None:
    """The widths the builds compile as constants (poa_mc/kernels/fixed_rows.py) are the arrays' own: a
    wrong one would read other rows' fields, so it fails here, loudly, before any kernel runs."""
    for name, width in FIXED_WIDTH.items():
        if a[name].shape[-1] != width or not a[name].flags.c_contiguous:
            raise ValueError(f"kernels: {name} has rows of {a[name].shape[-1]}, the build compiles {width}")
    if lean_build and a["pc"].shape[-1] != NPC:
        raise ValueError(f"kernels: pc has rows of {a['pc'].shape[-1]}, the lean build compiles {NPC}")


def _call(cell, ips, fps, tabss, edges, a, n, r0=0, step=None, stride=1) -> None:
    """Replicas r0, r0 + stride, ... below n."""
    ip = ips[0]  # the build, the tallies and PoA-hat are alike for every cell of a batch
    _check_widths(a, lean(ip))
    (_run_lean if lean(ip) else _run_full)(
        r0, n, stride, cell, ips, fps, tabss, edges, a["slot_i"], a["slot_f"], a["wk_i"], a["wk_f"], a["pc"], a["ev"],
        a["queue"], a["run"], a["heap_t"], a["heap_c"], a["rep_i"], a["rep_f"], a["out_f"], a["out_i"], a["cand"],
        a["tally_f"], a["tally_h"],
    )  # fmt: skip
    if ip[P_POA]:  # each thread's replicas' PoA-hat windows, in one scratch of its own
        nf, ni = max(poa_scratch(row) for row in ips)
        f, g = np.empty(nf), np.empty(ni, dtype=np.int64)
        _run_poa(r0, n, stride, cell, ips, fps, step, a["out_f"], a["out_i"], a["cand"], a["poa"], f, g)


def run_batch(
    ip: np.ndarray,
    fp: np.ndarray,
    tabs: np.ndarray,
    edges: np.ndarray,
    shapes: dict,
    n: int,
    parallel: bool = True,
    wanted: dict | None = None,
    step: np.ndarray | None = None,
    cell: np.ndarray | None = None,
) -> tuple[dict, float]:
    """Allocate state for n replicas, simulate them (and tally them, with ip[P_TALLY]; work out their
    PoA-hat sums, with ip[P_POA], `step` the step table or empty), return (arrays, seconds spent
    compiling). parallel=False runs on one thread (results are the same either way). `wanted` is
    the CUDA target's (what to copy back); here every array is the host's.

    With `cell` (n,), a batch of several cells: ip, fp and tabs are their stacked parameters (one
    row per cell, poa_mc.engine.cell_batch) and replica r is one of cell[r]'s."""
    compile_s = 0.0
    step = np.empty(0) if step is None else step
    cell, ips, fps, tabss = stacked(ip, fp, tabs, n, cell)
    ip = ips[0]
    variant = ("lean" if lean(ip) else "full") + ("+poa" if ip[P_POA] else "")
    if variant not in _compiled:
        t0 = time.perf_counter()
        ip1 = ips[:1].copy()
        ip1[0, P_N] = 1
        ip1[0, P_WARM] = 0
        a1 = _alloc({k: ((1, *v[0][1:]) if k in ("out_f", "out_i") else v[0], v[1]) for k, v in shapes.items()}, 1)
        with _inliner_budget(INLINE_THRESHOLD[variant.split("+")[0]]), _plain_indices():
            # zero replicas: compiles (or loads from cache) without simulating
            _call(np.zeros(1, dtype=np.int64), ip1, fps[:1], tabss[:1], edges, a1, 0, 0, step)
        compile_s = time.perf_counter() - t0
        _compiled.add(variant)
    a = _alloc(shapes, n)
    n_threads = threads.count(n) if parallel else 1
    bounds = threads.bounds(n, n_threads)
    if n_threads == 1:
        # on the calling thread: the same kernel ran 20% slower on a pool thread of its own
        # (bench/NOTES.md); the price is that Ctrl-C waits for this batch to end
        _call(cell, ips, fps, tabss, edges, a, n, 0, step)
        return a, compile_s
    # the main thread polls rather than blocks: a SIGINT delivered to a kernel thread does not
    # wake a blocked lock, and Python only raises KeyboardInterrupt when the main thread runs. On
    # an interrupt the pool is not joined (a kernel cannot be stopped) and the caller exits
    pool = threads.pool("kernels", n_threads)
    if len(ips) == 1:  # one cell: contiguous parts
        parts = [(bounds[i], bounds[i + 1], 1) for i in range(n_threads)]
    else:  # several: cells differ in cost, so each thread takes every n_threads-th replica of all of them
        parts = [(i, n, n_threads) for i in range(n_threads)]
    jobs = [pool.submit(_call, cell, ips, fps, tabss, edges, a, hi, lo, step, by) for lo, hi, by in parts]
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
