"""Expands a grid into cells with stable ids, and splits cells into shards.

A cell is one (topology, load, policy) triple. Cells of the same (topology, load) "point" share a
`stream`, so the engine gives every policy of a point the same request streams (common random
numbers). Both the stream and the cell id are hashes of what the cell *is*, not of where it sits
in the grid: adding a topology or a load to a grid leaves the ids and the random streams of the
existing cells unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poa_mc.spec import CellSpec, SpecError, drop_tier_keys

if TYPE_CHECKING:
    from poa_mc.config import GridConfig, RunSection


@dataclass(frozen=True)
class Cell:
    cell_id: str  # "c" + 11 hex digits; the leading letter keeps Hive partition values strings
    index: int  # position in grid order (topology, then load, then policy)
    point: int  # index of the (topology, load) point in grid order
    stream: int  # common-random-numbers key shared by the policies of one point
    topology: str
    n_prefill: int
    n_decode: int
    load_axis: str  # "concurrency" or "rate"
    concurrency: int | None
    rate: float | None
    policy: str
    spec: CellSpec

    @property
    def load(self) -> float:
        return float(self.concurrency if self.load_axis == "concurrency" else self.rate)

    def candidates(self) -> int:
        """K, the number of workers each routing decision chooses among."""
        return self.spec._n_candidates()

    def label(self) -> str:
        load = f"C={self.concurrency}" if self.load_axis == "concurrency" else f"rate={self.rate:g}/s"
        return f"{self.topology} {load} {self.policy}"


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def point_stream(n_prefill: int, n_decode: int, load_axis: str, load: float) -> int:
    """A 31-bit stream key for a (topology, load) point (31 bits: safe as an int32 anywhere)."""
    return int(_digest(["stream", n_prefill, n_decode, load_axis, float(load)])[:8], 16) & 0x7FFFFFFF


def cell_id(spec: CellSpec, stream: int) -> str:
    d = dataclasses.asdict(spec)
    if not spec.profile.table:  # profiles without a timing table keep the ids they had before tables
        d["profile"].pop("table")
        d["profile"].pop("table_sha")
    drop_tier_keys(d["cluster"], [d["policy"]])  # clusters without lower tiers likewise
    if d["workload"]["client"] is None:
        d["workload"].pop("client")  # and workloads without a modelled client
    if d["workload"]["trace"] is None:
        d["workload"].pop("trace")  # and synthetic workloads
    else:
        d["workload"]["trace"].pop("path")  # a replayed trace is known by its content (sha256)
    return "c" + _digest(["cell", d, stream])[:11]


# Maps a CellSpec.validate() path to the grid key the user wrote, so errors point into the file.
def _grid_path(err_path: str, topo_i: int, load_i: int, policy_i: int, axis: str) -> str:
    if err_path in ("cluster.n_prefill", "cluster.n_decode"):
        return f"grid.topology[{topo_i}]"
    if err_path.startswith("planner"):
        return "games.pd" + err_path
    if err_path in ("workload.concurrency", "workload.rate"):
        return f"grid.{axis}[{load_i}]"
    if err_path.startswith("policy."):
        return f"policy[{policy_i}]" + err_path[len("policy") :]
    return err_path


def expand(grid: GridConfig) -> list[Cell]:
    """All cells of a grid in grid order, each validated. Raises ConfigError naming the key."""
    from poa_mc.config import ConfigError

    cells: list[Cell] = []
    point = 0
    for ti, topo in enumerate(grid.topologies):
        cluster = dataclasses.replace(grid.cluster, n_prefill=topo.n_prefill, n_decode=topo.n_decode)
        base = grid.workload
        if topo.prefill_kv_blocks > 0:
            cluster = dataclasses.replace(cluster, prefill_kv_blocks=topo.prefill_kv_blocks)
        if topo.zipf_alpha >= 0:
            base = dataclasses.replace(base, popularity="zipf", zipf_alpha=topo.zipf_alpha)
        if topo.tiers:
            kept = topo.tiers.split("+")
            missing = [t for t in kept[1:] if getattr(cluster, f"{t}_blocks") == 0]
            if missing:
                raise ConfigError("grid.tiers", f"{topo.tiers!r} needs cluster.{missing[0]}_blocks > 0")
            cluster = dataclasses.replace(
                cluster,
                g2_blocks=cluster.g2_blocks if "g2" in kept else 0,
                g3_blocks=cluster.g3_blocks if "g3" in kept else 0,
                g4_blocks=cluster.g4_blocks if "g4" in kept else 0,
            )
        planner = grid.pd_game.planner if topo.planner else None
        for li, load in enumerate(grid.loads):
            if grid.load_axis == "concurrency":
                workload = dataclasses.replace(base, concurrency=int(load), rate_rps=0.0)
                conc, rate = int(load), None
            else:
                workload = dataclasses.replace(base, rate_rps=float(load))
                conc, rate = None, float(load)
            stream = point_stream(topo.n_prefill, topo.n_decode, grid.load_axis, load)
            for pi, policy in enumerate(grid.policies):
                spec = CellSpec(
                    cluster=cluster, workload=workload, profile=grid.profile, policy=policy, planner=planner
                )
                try:
                    spec.validate()
                except SpecError as e:
                    where = f"{topo.label}, {grid.load_axis}={load:g}, policy {policy.name!r}"
                    raise ConfigError(
                        _grid_path(e.path, ti, li, pi, grid.load_axis), f"{e.message} (cell {where}; {e.path})"
                    ) from None
                try:
                    _, _, k = cluster.poa_stage(grid.poa.stage)
                except SpecError as e:
                    raise ConfigError(e.path, f"{e.message} ({topo.label})") from None
                slots = grid.poa.slots_for(k)
                if k > 1 and slots * k < grid.poa.window:
                    raise ConfigError(
                        "poa.slots",
                        f"{slots} slots x {k} workers cannot take a window of {grid.poa.window} decisions "
                        f"({topo.label}); use slots >= {-(-grid.poa.window // k)} or 0 for the default",
                    )
                cells.append(
                    Cell(
                        cell_id=cell_id(spec, stream),
                        index=len(cells),
                        point=point,
                        stream=stream,
                        topology=topo.label,
                        n_prefill=topo.n_prefill,
                        n_decode=topo.n_decode,
                        load_axis=grid.load_axis,
                        concurrency=conc,
                        rate=rate,
                        policy=policy.name,
                        spec=spec,
                    )
                )
            point += 1
    return cells


def estimate_cost(cell: Cell, run: RunSection) -> float:
    """Relative cost of simulating a cell: simulated requests times a per-request factor.

    The engine jumps over decode steps in closed form, so the work per request is roughly
    insensitive to output length and concurrency; what grows is the per-decision scan over the
    workers (router costs, the next event among workers), hence the mild worker term.
    """
    workers = cell.spec.cluster.n_workers()
    return float(run.replicas * (run.requests + run.warmup)) * (1.0 + 0.25 * workers)


def assign_shards(cells: list[Cell], n: int, run: RunSection | None = None) -> list[int]:
    """Shard index (0..n-1) of each cell, balanced by estimated cost; deterministic.

    Longest-processing-time first: cells by decreasing cost (ties broken by cell id, so the order
    never depends on the grid's listing order), each to the currently lightest shard (ties to the
    lowest index). Always within 4/3 of the best possible makespan.
    """
    if n < 1:
        raise ValueError(f"number of shards must be >= 1, got {n}")
    if run is None:
        from poa_mc.config import RunSection

        run = RunSection()
    costs = [estimate_cost(c, run) for c in cells]
    order = sorted(range(len(cells)), key=lambda i: (-costs[i], cells[i].cell_id))
    load = [0.0] * n
    out = [0] * len(cells)
    for i in order:
        s = min(range(n), key=lambda j: (load[j], j))
        out[i] = s
        load[s] += costs[i]
    return out


def parse_shard(text: str) -> tuple[int, int]:
    """`"I/N"` -> (I, N) with 0 <= I < N. Raises ValueError with a readable message."""
    try:
        i_s, n_s = text.split("/")
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ValueError(f"{text!r} is not of the form I/N (e.g. 0/4)") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"{text!r}: need N >= 1 and 0 <= I < N")
    return i, n


# the grid key that sizes each kernel state array (poa_mc.engine._shapes), for memory errors
_STATE_KEYS = {
    "out_f": "run.requests",
    "out_i": "run.requests",
    "cand": "run.requests",
    "slot_i": "cluster.max_inflight",
    "slot_f": "cluster.max_inflight",
    "queue": "cluster.max_inflight",
    "run": "cluster.max_inflight",
    "ev": "cluster.max_inflight",
    "heap_t": "grid.concurrency",
    "heap_c": "grid.concurrency",
    "wk_i": "grid.topology",
    "wk_f": "grid.topology",
    "pc": "grid.topology",
    "rep_f": "controller.window (or controller.log_switches)",
}


def check_memory(cells: list[Cell], run: RunSection, available: int | None = None) -> None:
    """Refuse, before anything is written, a grid whose cells cannot fit this machine's memory:
    one replica's kernel state must fit the engine's batch budget (half the available memory),
    and a cell's kept per-request samples ([run] samples) are held twice (arrays and the samples
    frame) beside one streaming batch of state. Raises ConfigError naming run.requests or run.replicas."""
    from poa_mc.accumulate import ACC_ROW_BYTES
    from poa_mc.config import ConfigError
    from poa_mc.engine import STREAM_BATCH_BYTES, available_memory, memory_plan

    avail = available_memory() if available is None else available
    gib = 2**30
    for cell in cells:
        plan = memory_plan(cell.spec, replicas=run.replicas, requests=run.requests, warmup=run.warmup)
        if plan["state"] > avail // 2:
            key = _STATE_KEYS.get(plan["largest"], "run.requests")
            raise ConfigError(
                key,
                f"one replica of {cell.label()} needs {plan['state'] / gib:.2f} GiB of state, more than half of "
                f"the {avail / gib:.1f} GiB available here (most of it in its {plan['largest']} arrays); "
                f"lower {key}",
            )
        keep = run.keep()
        kept = run.requests if keep is None else keep
        batch_state = min(run.replicas * plan["state"], avail // 2, max(plan["state"], STREAM_BATCH_BYTES))
        # only the kept requests stay; every replica's accumulator row (its histograms' spans, taken
        # at their widest) is held a few times over (the batches' rows, joined, then as a frame)
        need = 2 * plan["results"] * kept // run.requests + batch_state + 3 * run.replicas * ACC_ROW_BYTES
        if need > avail:
            raise ConfigError(
                "run.replicas",
                f"{run.replicas} replicas x {kept} kept requests of {cell.label()} need about {need / gib:.1f} GiB "
                f"for their samples and accumulators, more than the {avail / gib:.1f} GiB available here; keep fewer "
                '(run.samples = "none" or a number), lower run.replicas or run.requests, '
                "or split the grid with --shard",
            )
