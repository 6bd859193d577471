"""CUDA target: the same kernel source compiled with numba.cuda.jit(device=True), one thread per replica.

State arrays are allocated with the replica index last (the transposed shape) and handed to the
kernel as transposed views, so `arr[r, ...]` of neighbouring threads touches neighbouring
addresses: loads and stores coalesce. Under NUMBA_ENABLE_CUDASIM=1 this runs on the CPU
(slowly, in Python): the test suite uses that to check both targets agree.
"""

from __future__ import annotations

import inspect
import os
import time

import numba
import numpy as np

if not hasattr(np, "row_stack"):
    # numba-cuda 0.30 registers an overload for np.row_stack, which numpy 2.5 removed (an alias of vstack)
    np.row_stack = np.vstack

from numba import cuda  # noqa: E402

from . import poa_hat  # noqa: E402
from ._cache import keyed_cache_dir  # noqa: E402
from .cells import stacked  # noqa: E402
from .layout import OUTPUT_NAMES, P_N, P_POA, P_POA_K, P_POA_SLOTS, P_POA_WIN, P_TALLY, STATE_NAMES  # noqa: E402
from .source import build  # noqa: E402

THREADS_PER_BLOCK = 64  # one replica per thread; override with POA_MC_CUDA_TPB for tuning runs

# Every device function is inlined into the kernel that calls it (NVVM's alwaysinline). Left to
# itself, NVVM kept the router's choose, the decode choice and the tiers' demotion chain out of
# line, and each call saved the event loop's live values to the stack: on sm_90 the event loop's
# kernel spilled 2,088 bytes (stores) with a 1,064-byte stack frame, inlined 1,396 and 760
# (bench/RESULTS.md, "The CUDA kernels' resources"; tests/test_ptx.py keeps a budget on them).
# POA_MC_CUDA_INLINE=0 builds NVVM's own choice, for a device run to time both.
# (Numba's CUDA simulator, and the numba.cuda that numba itself ships, take no such option.)
FORCE_INLINE = os.environ.get("POA_MC_CUDA_INLINE", "1") != "0"
_NUMBA_CUDA = "forceinline" in inspect.signature(cuda.jit).parameters  # numba-cuda, not the simulator
_DEVICE = {"forceinline": True} if FORCE_INLINE and _NUMBA_CUDA else {}

# POA_MC_CUDA_MAXREG=N caps the kernels' registers a thread (ptxas -maxrregcount): occupancy
# bought with spills (bench/RESULTS.md has ptxas's counts at 128 and 168), for a device to time
MAX_REGISTERS = int(os.environ.get("POA_MC_CUDA_MAXREG", "0"))
_KERNEL = {"max_registers": MAX_REGISTERS} if MAX_REGISTERS and _NUMBA_CUDA else {}
_VARIANT = ("" if FORCE_INLINE else "-noinline") + (f"-maxreg{MAX_REGISTERS}" if _KERNEL else "")

with keyed_cache_dir("cuda" + _VARIANT):
    _K = build(cuda.jit(device=True, **_DEVICE))
    _simulate_replica = _K.simulate_replica
    _tally_rows = _K.tally_rows

    @cuda.jit(cache=True, **_KERNEL)
    def _run_kernel(
        n, cell, ips, fps, tabss, edges, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i,
        rep_f, out_f, out_i, cand, tally_f, tally_h,
    ):  # fmt: skip
        r = cuda.grid(1)
        if r < n:
            c = cell[r]  # a launch may hold several cells' replicas (poa_mc/kernels/cells.py)
            ip, fp = ips[c], fps[c]
            _simulate_replica(
                r, ip, fp, tabss[c], slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, heap_t, heap_c, rep_i, rep_f,
                out_f, out_i, cand,
            )  # fmt: skip
            if ip[P_TALLY] == 1:  # on the device: only the tallies need come back for the summary
                _tally_rows(ip, fp, edges, out_f, out_i, tally_f, tally_h, r)

    _replica_sums = _K.replica_sums

    # PoA-hat's windows, a launch of their own after the simulation's: the solver's registers and
    # scratch stay out of the event loop's kernel
    @cuda.jit(cache=True, **_KERNEL)
    def _poa_kernel(n, cell, ips, fps, step, out_f, out_i, cand, poa, f, g):
        r = cuda.grid(1)
        if r < n:
            c = cell[r]
            _replica_sums(r, ips[c], fps[c], step, out_f, out_i, cand, poa, f[r], g[r])


_NAMES = STATE_NAMES + OUTPUT_NAMES  # the kernel's argument order
# the rest of the state stays on the device
_RETURNED = ("rep_i", "rep_f", "out_f", "out_i", "cand", "tally_f", "tally_h")
_compiled: set[str] = set()
last_kernel_s = 0.0  # device time of the last launch (CUDA events), for the benchmarks


def _device_array(shape: tuple, dtype, n: int):
    """An array of logical shape (n, *shape) stored replica-last; returns (storage, logical view).

    CuPy owns the device buffers when it is installed (a device-side memset, no host staging);
    numba's own allocator is the fallback. Both hand the kernel the same strided view."""
    full = _stored_shape(shape, n)
    if _sim():
        store = np.zeros(full, dtype=dtype)
        return store, store.T
    try:
        import cupy

        store = cupy.zeros(full, dtype=dtype)
    except ImportError:
        store = cuda.device_array(full, dtype=dtype)
        _zero(store)
    return store, store.T


def _stored_shape(shape: tuple, n: int) -> tuple:
    """The storage of a logical (n, *shape) array: replica index last. A replica's part of one
    element (a heap of one slot, the tallies of a run without them) is given two: an (n, 1) view
    is both C- and F-contiguous to numpy, numba would type it C, and each such cell would compile
    the kernel a second time. The kernels take these arrays' lengths from ip, not from the shape."""
    if all(d == 1 for d in shape):
        shape = (*shape[:-1], 2)
    return (*shape[::-1], n)


def argument_types(ip: np.ndarray, fp: np.ndarray, tabs: np.ndarray, edges: np.ndarray, shapes: dict) -> dict:
    """The numba types run_batch's launches give each kernel ("run" and "poa"), from the arrays and
    layouts it makes: the parameters as copied (C order), the state as replica-last storage seen
    through its transposed view. Two replicas: with one, numpy would call the view C-ordered."""

    def view(shape: tuple, dtype) -> object:
        return numba.typeof(np.empty(_stored_shape(shape, 2), dtype=dtype).T)

    cell, *stacks = stacked(ip, fp, tabs, 2, None)  # as a one-cell launch stacks them
    params = [numba.types.int64, *(numba.typeof(x) for x in (cell, *stacks, np.ascontiguousarray(edges)))]
    state = {name: view(*shapes[name]) for name in _NAMES}
    step = numba.typeof(np.empty(0, dtype=np.float64))
    poa = view((3,), np.float64)
    scratch = (view((1,), np.float64), view((1,), np.int64))
    return {
        "run": (*params, *(state[k] for k in _NAMES)),
        "poa": (*params[:4], step, state["out_f"], state["out_i"], state["cand"], poa, *scratch),
    }


def kernel_ptx(kernel: str, types: tuple, cc: tuple[int, int]) -> str:
    """PTX of this module's kernel `kernel` ("run" or "poa") for the argument `types` and compute
    capability `cc`, compiled by NVVM with no GPU present (numba-cuda's own compile_ptx)."""
    from unittest import mock

    func = {"run": _run_kernel, "poa": _poa_kernel}[kernel].py_func

    class _Device:  # what numba-cuda's device functions ask of the current device: its cc
        compute_capability = cc

    # each device function asks the current device for its compute capability while the kernel
    # that calls it is typed; with no GPU there is none, and NVVM's target is the kernel's cc
    with mock.patch("numba.cuda.dispatcher.get_current_device", lambda: _Device()):
        ptx, _ = cuda.compile_ptx(func, types, cc=cc)
    return ptx


def _sim() -> bool:
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def _zero(arr) -> None:
    flat = arr.reshape(arr.size) if arr.is_c_contiguous() else arr
    cuda.to_device(np.zeros(flat.shape, dtype=flat.dtype), to=flat)


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
    """Simulate n replicas on the GPU (and, with ip[P_POA], work out their PoA-hat sums, `step`
    the step table or empty); returns (host arrays in logical layout, seconds compiling).

    `wanted` (None: every request row whole) narrows what comes back of "out_f", "out_i" and
    "cand": their fields `wanted[name]` (for cand: all of it when wanted["cand"]) for every
    request, and all fields of the first `wanted["rows"]` requests; and, where a replica's PoA-hat
    sums are NaN (a window the kernels leave to the host), the fields of wanted["fallback"] too.
    The rest of the host arrays hold NaN (floats) or INT32_MIN (integers), never read.

    With `cell` (n,), a batch of several cells, one launch: ip, fp and tabs are their stacked
    parameters (poa_mc/kernels/cells.py) and replica r is one of cell[r]'s."""
    cell, ips, fps, tabss = stacked(ip, fp, tabs, n, cell)
    ip = ips[0]  # the tallies and PoA-hat are alike for every cell of a batch
    views = {}
    stores = {}
    for name in _NAMES:
        shape, dtype = shapes[name]
        stores[name], views[name] = _device_array(shape, dtype, n)
    d_cell, d_ip, d_fp, d_tabs, d_edges = (cuda.to_device(x) for x in (cell, ips, fps, tabss, edges))
    compile_s = 0.0
    tpb = int(os.environ.get("POA_MC_CUDA_TPB", THREADS_PER_BLOCK))
    blocks = max(1, -(-n // tpb))
    args = [views[k] for k in _NAMES]
    with_poa = bool(ip[P_POA])
    if with_poa:
        nf, ni = max(poa_hat.sizes(int(x[P_N]), int(x[P_POA_WIN]), int(x[P_POA_K]), int(x[P_POA_SLOTS])) for x in ips)
        stores["poa"], views["poa"] = _device_array((3,), np.float64, n)
        _, poa_f = _device_array((nf,), np.float64, n)
        _, poa_i = _device_array((ni,), np.int64, n)
        d_step = cuda.to_device(np.empty(0) if step is None else np.ascontiguousarray(step, dtype=np.float64))
        poa_args = (views["out_f"], views["out_i"], views["cand"], views["poa"], poa_f, poa_i)
    if "main" not in _compiled:
        t0 = time.perf_counter()
        _run_kernel[1, 1](0, d_cell, d_ip, d_fp, d_tabs, d_edges, *args)
        cuda.synchronize()
        compile_s += time.perf_counter() - t0
        _compiled.add("main")
    if with_poa and "poa" not in _compiled:
        t0 = time.perf_counter()
        _poa_kernel[1, 1](0, d_cell, d_ip, d_fp, d_step, *poa_args)
        cuda.synchronize()
        compile_s += time.perf_counter() - t0
        _compiled.add("poa")
    global last_kernel_s
    start, stop = (cuda.event(), cuda.event()) if not _sim() else (None, None)
    if start is not None:
        start.record()
    t0 = time.perf_counter()
    _run_kernel[blocks, tpb](n, d_cell, d_ip, d_fp, d_tabs, d_edges, *args)
    if with_poa:
        _poa_kernel[blocks, tpb](n, d_cell, d_ip, d_fp, d_step, *poa_args)
    if stop is not None:
        stop.record()
        stop.synchronize()
        last_kernel_s = cuda.event_elapsed_time(start, stop) / 1e3
    else:
        last_kernel_s = time.perf_counter() - t0
    cuda.synchronize()
    out = {}
    if with_poa:
        out["poa"] = _host(views["poa"])
    if wanted is not None and with_poa and np.isnan(out["poa"][:, 1]).any():
        back = wanted.get("fallback", {})
        wanted = {**wanted, **{k: set(wanted.get(k, ())) | set(v) for k, v in back.items() if k != "cand"}}
        wanted["cand"] = wanted.get("cand", True) or back.get("cand", False)
    for k in _RETURNED:
        if wanted is not None and k in ("out_f", "out_i"):
            out[k] = _rows_back(stores[k], wanted[k], int(wanted["rows"]))
        elif wanted is not None and k == "cand" and not wanted.get("cand", True):
            store = stores[k]  # (2, W, N, R): each (value, worker) plane's first rows
            shape = store.shape
            flat = store.reshape(shape[0] * shape[1], shape[2], shape[3])
            back = _rows_back(flat, (), int(wanted["rows"]))  # (R, N, 2 W)
            out[k] = back.T.reshape(shape).T
        else:  # replica-last storage seen through a transposed view; the engine slices it as is
            out[k] = _host(views[k])
    return out, compile_s


def _host(v) -> np.ndarray:
    if hasattr(v, "copy_to_host"):
        return v.copy_to_host()
    if hasattr(v, "get"):
        return v.get()
    return np.asarray(v)


def _rows_back(store, fields, rows: int) -> np.ndarray:
    """A (fields, requests, replicas) store's planes `fields` whole and its other planes' first
    `rows` requests, each a contiguous stretch of device memory, as the logical (replicas,
    requests, fields) view of a host array whose rest is NaN or INT32_MIN."""
    fill = np.nan if np.dtype(store.dtype).kind == "f" else np.iinfo(store.dtype).min
    host = np.full(store.shape, fill, dtype=store.dtype)
    for f in range(store.shape[0]):
        if f in fields:
            host[f] = _host(store[f])
        elif rows > 0:
            host[f, :rows] = _host(store[f, :rows])
    return host.T


def free_memory() -> int:
    if _sim():
        return 8 << 30
    free, _total = cuda.current_context().get_memory_info()
    return int(free)


def device_name() -> str:
    if _sim():
        return "cuda simulator"
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return f"{name} (cc {dev.compute_capability[0]}.{dev.compute_capability[1]})"
