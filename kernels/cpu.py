"""CPU target: the kernel source compiled with numba.njit, replicas run in parallel (prange)."""

from __future__ import annotations

import time

import numba
import numpy as np

from .layout import P_N, P_WARM
from .source import build

_K = build(
    numba.njit(cache=True, nogil=True, _nrt=False),
    numba.njit(cache=True, nogil=True, _nrt=False, inline="always"),
)
_simulate_replica = _K.simulate_replica


# the argument order of simulate_replica after the replica index (layout.py documents each array)
ARRAY_ORDER = (
    "ip",
    "fp",
    "tabs",
    "slot_i",
    "slot_f",
    "wk_i",
    "wk_f",
    "pc",
    "ev",
    "queue",
    "run",
    "heap_t",
    "heap_c",
    "rep_i",
    "rep_f",
    "out_f",
    "out_i",
    "cand",
)


@numba.njit(parallel=True, cache=True, nogil=True)
def _run_parallel(r0, r1, *arrays):
    for r in numba.prange(r0, r1):
        _simulate_replica(r, *arrays)


@numba.njit(cache=True, nogil=True)
def _run_serial(r0, r1, *arrays):
    for r in range(r0, r1):
        _simulate_replica(r, *arrays)


_compiled = False


def _alloc(shapes: dict, n: int) -> dict:
    return {name: np.zeros((n, *shape), dtype=dtype) for name, (shape, dtype) in shapes.items()}


def _call(fn, ip, fp, tabs, a, n) -> None:
    arrays = {"ip": ip, "fp": fp, "tabs": tabs, **a}
    fn(0, n, *(arrays[k] for k in ARRAY_ORDER))


def run_batch(
    ip: np.ndarray, fp: np.ndarray, tabs: np.ndarray, shapes: dict, n: int, parallel: bool = True
) -> tuple[dict, float]:
    """Allocate state for n replicas, simulate them, return (arrays, seconds spent compiling)."""
    global _compiled
    fn = _run_parallel if parallel else _run_serial
    compile_s = 0.0
    if not _compiled or not fn.signatures:
        t0 = time.perf_counter()
        a = _alloc(shapes, 1)
        ip1 = ip.copy()
        ip1[P_N] = 1
        ip1[P_WARM] = 0
        a1 = _alloc({k: ((1, *v[0][1:]) if k in ("out_f", "out_i") else v[0], v[1]) for k, v in shapes.items()}, 1)
        del a
        _call(fn, ip1, fp, tabs, a1, 0)  # zero replicas: compiles (or loads from cache) without simulating
        compile_s = time.perf_counter() - t0
        _compiled = True
    a = _alloc(shapes, n)
    _call(fn, ip, fp, tabs, a, n)
    return a, compile_s


def device_name() -> str:
    return f"cpu ({numba.get_num_threads()} threads)"
