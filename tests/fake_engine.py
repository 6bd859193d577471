"""A stand-in for poa_mc.engine.engine.simulate: the engine's interface (poa_mc.engine.interface),
the same result shapes.

Deterministic in (seed, stream, replica), so common random numbers and resume tests behave as
with the real engine; latencies grow with load per worker and the kv policy herds a little.
"""

from __future__ import annotations

import time
import zlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poa_mc.model.spec import CellSpec


@dataclass
class SimResult:
    samples: dict
    candidates: dict
    replica: dict
    wall_s: float = 0.0
    compile_s: float = 0.0
    backend: str = "cpu"
    device: str = "fake"
    extra: dict = field(default_factory=dict)


def simulate(
    spec: CellSpec,
    *,
    replicas: int,
    requests: int,
    warmup: int,
    seed: int,
    stream: int,
    backend: str = "cpu",
    record_candidates: bool = True,
    drain: bool = False,
    keep: int | None = None,
    reduce: Any = None,
    overlap: bool = False,
    after: Future | None = None,
    tally: bool = False,
    slo: dict[str, float] | None = None,
    poa: dict[str, Any] | None = None,
) -> SimResult:
    """poa_mc.engine.interface.Simulate. The streaming arguments are left unused (the result has
    no `reduced`, so the runner reduces it whole) and `drain` changes nothing: the stand-in's
    requests do not interact."""
    t0 = time.perf_counter()
    c, w, p = spec.cluster, spec.workload, spec.policy
    k = spec._n_candidates()
    bs = c.block_size
    load = w.concurrency if w.arrival == "closed" else w.rate_rps
    shape = (replicas, requests)
    cols = {
        n: np.empty(shape) for n in ("arrival_ms", "ttft_ms", "e2e_ms", "itl_ms", "prefill_wait_ms", "decode_wait_ms")
    }
    isl = np.empty(shape, np.int32)
    osl = np.empty(shape, np.int32)
    group = np.empty(shape, np.int32)
    cached = np.empty(shape, np.int32)
    pw = np.empty(shape, np.int32)
    dw = np.empty(shape, np.int32)
    ctok = np.empty((replicas, requests, k))
    cblk = np.empty((replicas, requests, k))
    chosen = np.empty(shape, np.int32)
    policy_salt = zlib.crc32(p.name.encode())
    for r in range(replicas):
        g = np.random.default_rng([seed, stream, r])  # common to every policy of the point
        isl[r] = w.isl.value if w.isl.kind == "fixed" else g.integers(w.isl.min_value(), 2048, requests)
        osl[r] = w.osl.value if w.osl.kind == "fixed" else g.integers(1, 256, requests)
        group[r] = g.integers(0, w.prefix_groups, requests)
        base_tok = g.integers(0, 4 * bs, (requests, k)).astype(float)
        noise = g.exponential(1.0, requests)
        gp = np.random.default_rng([seed, stream, r, policy_salt])
        overlap = (gp.random((requests, k)) < 0.3) * (isl[r][:, None] // bs // 2)
        ctok[r] = base_tok * (load / 8) + isl[r][:, None] - overlap * bs
        cblk[r] = base_tok / bs + -(-isl[r][:, None] // bs) - overlap
        cost = p.overlap_weight * ctok[r] / bs + cblk[r]
        if p.kind == "kv":
            chosen[r] = np.argmin(cost, axis=1)
        elif p.kind == "round_robin":
            chosen[r] = np.arange(requests) % k
        else:
            chosen[r] = gp.integers(0, k, requests)
        herd = 1.3 if p.kind == "kv" else 1.0
        per_worker = load / max(c.n_prefill, 1)
        cols["ttft_ms"][r] = (20 + 2 * per_worker**1.5 * herd) * (0.5 + noise)
        cols["itl_ms"][r] = 5 + 0.1 * load / c.n_decode
        cols["e2e_ms"][r] = cols["ttft_ms"][r] + cols["itl_ms"][r] * (osl[r] - 1)
        cols["arrival_ms"][r] = np.cumsum(g.exponential(10.0, requests))
        cols["prefill_wait_ms"][r] = cols["ttft_ms"][r] * 0.5
        cols["decode_wait_ms"][r] = 1.0
        idx = np.arange(requests)
        cached[r] = overlap[idx, chosen[r]]
        pw[r] = chosen[r]
        dw[r] = idx % c.n_decode
    samples = {
        "seq": np.broadcast_to(np.arange(warmup, warmup + requests, dtype=np.int64), shape).copy(),
        **cols,
        "isl": isl,
        "osl": osl,
        "group": group,
        "prompt_blocks": (-(-isl // bs)).astype(np.int32),
        "cached_blocks": cached,
        "prefill_worker": pw,
        "decode_worker": dw,
    }
    candidates = {"cand_tokens": ctok, "cand_blocks": cblk, "chosen": chosen} if record_candidates else {}
    window = cols["arrival_ms"][:, -1] - cols["arrival_ms"][:, 0] + cols["e2e_ms"][:, -1]
    rep = {"window_ms": window, "simulated": np.full(replicas, requests + warmup + 10, np.int64)}
    return SimResult(samples, candidates, rep, wall_s=time.perf_counter() - t0, compile_s=0.0, backend=backend)
