"""What comes back from the kernels, by name: SimResult, and the unpacking of one batch's kernel
arrays into its per-request samples and router candidates (one array per field), its per-replica
arrays and its controller's and planner's logs. The meaning of each array is documented with
simulate (poa_mc/engine/engine.py's module docstring).

The kernels write a request as one row of fields side by side (poa_mc/kernels/layout.py's
REQUEST_FIELDS and DECISION_FIELDS); the library reads one array per field. The field lists here
name those columns once, for the unpacking, for the bytes a kept request costs
(poa_mc.engine.memory) and for what a tallied batch's reduction needs back from a device
(POA_HAT_FIELDS, _wanted_rows).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import numba
import numpy as np

from poa_mc.kernels import layout as L
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_policy import REGIMES
from poa_mc.stats import sketch

# the sample columns and the request rows' columns they come from (poa_mc/kernels/layout.py's tables)
SAMPLE_FLOAT_FIELDS = tuple(n for n, kind, _ in L.REQUEST_FIELDS if kind == "f")
SAMPLE_INT_FIELDS = tuple(n for n, kind, _ in L.REQUEST_FIELDS if kind == "i")
_OF = tuple(j for _, kind, j in L.REQUEST_FIELDS if kind == "f")
_OI = tuple(j for _, kind, j in L.REQUEST_FIELDS if kind == "i")
_ADDED = {n: j for n, _, j in L.DECISION_FIELDS if "_added_" in n}
# the per-request fields poa_mc.stats.accumulate.poa_hat_sums reads (besides the candidates): with the
# kernels' tallies, the only ones a batch's reduction gathers
POA_HAT_FIELDS = frozenset(
    {"ttft_ms", "e2e_ms", "arrival_ms", "decode_decided_ms", "isl", "prefill_worker", "decode_worker", *_ADDED}
)


@dataclass
class SimResult:
    samples: dict[str, np.ndarray]
    candidates: dict[str, np.ndarray]
    replica: dict[str, np.ndarray]
    wall_s: float  # in the kernels, compiling excluded; with `reduce`, beside the previous batch's reduction
    compile_s: float
    backend: str
    device: str
    batches: int = 1
    state_bytes_per_replica: int = 0
    extra: dict = field(default_factory=dict)
    acc: dict = field(default_factory=dict)  # what `reduce` returned for each replica
    # simulate(overlap=True): the last batch's reduction, still running, and the parts before it
    pending: Future | None = None
    reduced_at: float | None = None  # time.perf_counter() when the last reduction ended
    _parts: list = field(default_factory=list, repr=False)

    @property
    def simulated_requests(self) -> int:
        return int(self.replica["simulated"].sum())

    def reduced(self) -> dict:
        """`acc`, once the reduction simulate(overlap=True) left running has ended (its error,
        if it failed, is raised here). Kept samples are complete from then on too."""
        if self.pending is not None:
            self._parts.append(self.pending.result())
            self.acc = _joined(self._parts)
            self.pending = None
            self._parts = []
        return self.acc


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The batches' reductions as one dict of arrays, in replica order (histograms kept as spans
    over the union of the batches', poa_mc.stats.sketch.join_rows)."""
    return sketch.join_rows(parts)


# worker time integrals from the first measured arrival to the end (poa_mc/kernels/layout.py RF_PBUSY..)
_INTEGRALS = {
    "prefill_busy_ms": L.RF_PBUSY,
    "decode_busy_ms": L.RF_DBUSY,
    "decode_batch_ms": L.RF_DBATCH,
    "decode_kv_block_ms": L.RF_DKV,
    "link_busy_ms": L.RF_LINK,
}


def _batch_columns(out: dict[str, np.ndarray], ip: np.ndarray, spec: CellSpec, record: bool) -> dict[str, np.ndarray]:
    """A batch's per-request outputs by name (views of the kernels' arrays): the samples, then,
    when recorded, the router's candidates (see poa_mc/engine/engine.py's module docstring)."""
    of, oi = out["out_f"], out["out_i"]
    cols = {name: of[:, :, j] for name, j in zip(SAMPLE_FLOAT_FIELDS, _OF)}
    cols.update({name: oi[:, :, j] for name, j in zip(SAMPLE_INT_FIELDS, _OI)})
    cols["seq"] = cols["seq"].astype(np.int64)
    if record:
        tok, blk = out["cand"][:, :, :, 0], out["cand"][:, :, :, 1]
        if spec.cluster.flow != "prefill_first":  # no prefill decision: its columns are unused
            tok, blk = tok.copy(), blk.copy()
            tok[:, :, : int(ip[L.P_NP])] = np.nan
            blk[:, :, : int(ip[L.P_NP])] = np.nan
        cols.update(cand_tokens=tok, cand_blocks=blk, chosen=oi[:, :, L.OI_CHOSEN])
        cols.update({name: oi[:, :, j] for name, j in _ADDED.items()})
        cols["decode_decided_ms"] = of[:, :, L.OF_DDEC]
    return cols


@numba.njit(cache=True, nogil=True)
def _scatter_fields(
    src: np.ndarray, fields: np.ndarray, dst: np.ndarray, r0: int, kept: int
) -> None:  # pragma: no cover
    """dst[j, r0 + r, i] = src[r, i, fields[j]] for a batch's replicas r and their first `kept`
    requests i: the kernels' request rows (a request's fields side by side) to one array per
    field, each row read once. A numpy copy per field read the whole batch once per field, and
    was most of the host's time with every sample kept (bench/NOTES.md)."""
    for r in range(src.shape[0]):
        for i in range(kept):
            for j in range(fields.shape[0]):
                dst[j, r0 + r, i] = src[r, i, fields[j]]


def _wanted_rows(kept: int, poa_in_kernels: bool = False) -> dict:
    """What a tallied batch's reduction and kept samples read of its request rows and candidates
    (the kernels' run_batch `wanted`): every field of the first `kept` requests, the written flag
    _batch_replica counts of all of them, and PoA-hat's fields and candidates of all of them,
    unless the kernels work PoA-hat out (then only where they leave a replica to the host: its
    "fallback"). A PoA-hat field of neither kind raises KeyError here rather than reading as NaN
    from a GPU run."""
    floats = {**dict(zip(SAMPLE_FLOAT_FIELDS, _OF)), "decode_decided_ms": L.OF_DDEC}
    ints = {**dict(zip(SAMPLE_INT_FIELDS, _OI)), **_ADDED}
    out_f, out_i = set(), set()
    for name in POA_HAT_FIELDS:
        if name in floats:
            out_f.add(floats[name])
        else:
            out_i.add(ints[name])
    poa = {"out_f": out_f, "out_i": out_i, "cand": True}
    if poa_in_kernels:
        return {"rows": kept, "out_f": set(), "out_i": {L.OI_DONE}, "cand": False, "fallback": poa}
    return {"rows": kept, "out_f": out_f, "out_i": out_i | {L.OI_DONE}, "cand": True}


def _batch_replica(out: dict[str, np.ndarray], ip: np.ndarray) -> dict[str, np.ndarray]:
    """SimResult.replica's arrays of one batch (see poa_mc/engine/engine.py's module docstring)."""
    ri, rf, oi = out["rep_i"], out["rep_f"], out["out_i"]
    nr = ri.shape[0]
    rep = {
        "window_ms": rf[:, L.RF_LAST_DONE] - rf[:, L.RF_FIRST_ARR],
        "simulated": ri[:, L.RI_SEQ].copy(),
        "events": ri[:, L.RI_EVENTS].copy(),
        "status": ri[:, L.RI_STATUS].copy(),
        "preemptions": ri[:, L.RI_PREEMPT].copy(),
        "ring_merges": ri[:, L.RI_MERGES].copy(),
        "written": oi[:, :, L.OI_DONE].sum(axis=1).astype(np.int64),
        "sim_ms": rf[:, L.RF_T].copy(),
        "switches": ri[:, L.RI_SWITCHES].copy(),
        "planner_moves": ri[:, L.RI_PL_MOVES].copy(),
    }
    # time in each regime: the closed ones, plus the current one up to the end
    regt = rf[:, L.RF_REGT : L.RF_REGT + 3].copy()
    if ip[L.P_CTL]:
        regt[np.arange(nr), ri[:, L.RI_REGIME]] += rf[:, L.RF_T] - rf[:, L.RF_LASTSW]
    else:
        regt[:, 0] = rf[:, L.RF_T]  # a fixed policy stays in its one setting
    rep.update({f"regime_ms_{name}": regt[:, i] for i, name in enumerate(REGIMES)})
    rep.update({name: rf[:, j].copy() for name, j in _INTEGRALS.items()})
    rep["measured_ms"] = rf[:, L.RF_T] - rf[:, L.RF_FIRST_ARR]
    # requests in flight x time over measured_ms: the kernels' integral, closed at the end
    rep["inflight_ms"] = rf[:, L.RF_INFL] + ri[:, L.RI_INFLIGHT] * (rf[:, L.RF_T] - rf[:, L.RF_INFL_T])
    # completions between the first and the last measured arrival (the open loop's throughput)
    rep["done_in_window"] = ri[:, L.RI_DONE_WIN].copy()
    return rep


def _batch_logs(out: dict[str, np.ndarray], ip: np.ndarray, n_log: int, n_moves: int) -> dict[str, np.ndarray]:
    """The controller's switch log and the planner's move log of one batch, NaN past the last."""
    ri, rf = out["rep_i"], out["rep_f"]
    nr = ri.shape[0]
    logs = {}
    for key, count, at, n in (
        ("switch_log", L.RI_SWITCHES, L.NRF + 2 * int(ip[L.P_CTL_WIN]), n_log),
        ("move_log", L.RI_PL_MOVES, L.NRF + 2 * int(ip[L.P_CTL_WIN]) + 3 * n_log, n_moves),
    ):
        if n:
            logged = rf[:, at : at + 3 * n].reshape(nr, n, 3)
            kept = np.arange(n)[None, :] < ri[:, count][:, None]
            logs[key] = np.where(kept[:, :, None], logged, np.nan)
    return logs
