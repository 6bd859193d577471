"""CUDA target: the same kernel source compiled with numba.cuda.jit(device=True), one thread per replica.

State arrays are allocated with the replica index last (the transposed shape) and handed to the
kernel as transposed views, so `arr[r, ...]` of neighbouring threads touches neighbouring
addresses: loads and stores coalesce. Under NUMBA_ENABLE_CUDASIM=1 this runs on the CPU
(slowly, in Python): the test suite uses that to check both targets agree.
"""

from __future__ import annotations

import time

import numpy as np
from numba import cuda

from .source import build

_K = build(cuda.jit(device=True))
_simulate_replica = _K.simulate_replica
THREADS_PER_BLOCK = 64


@cuda.jit
def _run_kernel(n, ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, queue, run, heap_t, heap_c, rep_i, rep_f, out_f,
                out_i, cand):
    r = cuda.grid(1)
    if r < n:
        _simulate_replica(r, ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, queue, run, heap_t, heap_c, rep_i, rep_f,
                          out_f, out_i, cand)


_NAMES = ("slot_i", "slot_f", "wk_i", "wk_f", "pc", "queue", "run", "heap_t", "heap_c", "rep_i", "rep_f", "out_f",
          "out_i", "cand")
_compiled = False


def _device_array(shape: tuple, dtype, n: int):
    """An array of logical shape (n, *shape) stored replica-last; returns (storage, logical view)."""
    full = (*shape[::-1], n)
    store = cuda.device_array(full, dtype=dtype) if not _sim() else np.zeros(full, dtype=dtype)
    if _sim():
        store[...] = 0
    else:
        _zero(store)
    return store, store.T


def _sim() -> bool:
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def _zero(arr) -> None:
    flat = arr.reshape(arr.size) if arr.is_c_contiguous() else arr
    cuda.to_device(np.zeros(flat.shape, dtype=flat.dtype), to=flat)


def run_batch(ip: np.ndarray, fp: np.ndarray, tabs: np.ndarray, shapes: dict, n: int,
              parallel: bool = True) -> tuple[dict, float]:
    """Simulate n replicas on the GPU; returns (host arrays in logical layout, seconds compiling)."""
    global _compiled
    views = {}
    for name in _NAMES:
        shape, dtype = shapes[name]
        _, views[name] = _device_array(shape, dtype, n)
    d_ip, d_fp, d_tabs = (cuda.to_device(x) for x in (ip, fp, tabs))
    compile_s = 0.0
    blocks = max(1, -(-n // THREADS_PER_BLOCK))
    args = [views[k] for k in _NAMES]
    if not _compiled:
        t0 = time.perf_counter()
        _run_kernel[1, 1](0, d_ip, d_fp, d_tabs, *args)
        cuda.synchronize()
        compile_s = time.perf_counter() - t0
        _compiled = True
    _run_kernel[blocks, THREADS_PER_BLOCK](n, d_ip, d_fp, d_tabs, *args)
    cuda.synchronize()
    out = {}
    for k in _NAMES:
        v = views[k]
        host = v.copy_to_host() if hasattr(v, "copy_to_host") else np.asarray(v)
        out[k] = np.ascontiguousarray(host)
    return out, compile_s


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
