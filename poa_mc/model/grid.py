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
from dataclasses import dataclass, field
from typing import Any

from poa_mc.model.sections import (
    CacheGame,
    ConfigError,
    PdGame,
    PoaSection,
    RunSection,
    SloSection,
    Topology,
    TraceRef,
    jsonable,
)
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec, drop_tier_keys
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import PolicySpec, drop_policy_defaults
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import WorkloadSpec, drop_workload_defaults


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


@dataclass(frozen=True)
class GridConfig:
    """A parsed, validated grid. `workload` and `cluster` are templates: the load and the topology
    of each cell are filled in by `poa_mc.model.grid.expand`."""

    run: RunSection
    profile: ProfileSpec
    workload: WorkloadSpec
    cluster: ClusterSpec
    topologies: tuple[Topology, ...]
    load_axis: str  # "concurrency" (closed loop, clients) or "rate" (Poisson, req/s)
    loads: tuple[float, ...]
    policies: tuple[PolicySpec, ...]
    poa: PoaSection
    source: str = "<string>"
    traces: tuple[TraceRef, ...] = field(default=())
    slo: SloSection = field(default_factory=SloSection)
    pd_game: PdGame | None = None
    cache_game: CacheGame | None = None

    def to_dict(self) -> dict[str, Any]:
        """The resolved grid as plain JSON-able data (what the manifest stores and fingerprints).

        A `dist = "trace"` length keeps its values in the GridConfig (the engine samples them) but
        not here: its `values` list is replaced by a `trace` description (file, format, column, max,
        sha256, count), which determines the values, so manifests stay small for big traces."""
        d = dataclasses.asdict(self)
        d.pop("source")
        d.pop("traces")
        if not self.slo.is_set():
            d.pop("slo")  # a grid without [slo] keeps the fingerprint it had before [slo] existed
        if self.poa.observed_from == "decision":
            d["poa"].pop("observed_from")  # likewise the observed cost's default
        if not self.profile.table:  # likewise a profile without a timing table
            d["profile"].pop("table")
            d["profile"].pop("table_sha")
        drop_tier_keys(d["cluster"], d["policies"])  # and a cluster without lower tiers
        for p in d["policies"]:
            drop_policy_defaults(p)  # and policies without the keys added later
        drop_workload_defaults(d["workload"])  # and a workload without the keys added later
        if self.workload.client is None:
            d["workload"].pop("client")  # and a grid without [client]
        if not self.run.drain:
            d["run"].pop("drain")  # and a run that keeps the load on
        if not self.run.warmup_per_client:
            d["run"].pop("warmup_per_client")  # and one warm-up for every cell
        if self.workload.trace is None:
            d["workload"].pop("trace")  # and a synthetic workload
        else:  # a replayed trace: its lengths and location follow from the file's digest
            d["workload"]["trace"].pop("path")
            d["workload"].pop("isl")
            d["workload"].pop("osl")
        if self.pd_game is None:
            d.pop("pd_game")
        if self.cache_game is None:
            d.pop("cache_game")
            for topo in d["topologies"]:  # plain topologies keep the fingerprint they had
                topo.pop("prefill_kv_blocks")
                topo.pop("zipf_alpha")
        for topo in d["topologies"]:
            if not topo["planner"]:
                topo.pop("planner")
            if not topo["tiers"]:
                topo.pop("tiers")
        if self.pd_game is not None and self.pd_game.planner is None:
            d["pd_game"].pop("planner")
            d["pd_game"].pop("planner_starts")
        for ref in self.traces:
            section, key = ref.key.split(".")
            dist = d[section][key]
            dist.pop("values")
            dist["trace"] = dataclasses.asdict(ref)
            dist["trace"].pop("key")
        return jsonable(d)

    def cells(self) -> list[Cell]:
        return expand(self)


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
    drop_policy_defaults(d["policy"])  # and policies without the keys added later
    drop_workload_defaults(d["workload"])
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
        staged = base.schedule  # [schedule]: one point runs every load as a stage, named by its first
        for li, load in enumerate(grid.loads[:1] if staged else grid.loads):
            if grid.load_axis == "concurrency":
                most = int(max(st.load for st in staged)) if staged else int(load)
                workload = dataclasses.replace(base, concurrency=most, rate_rps=0.0)
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
    return float(run.replicas * (run.requests + run.warmup_for(cell.concurrency))) * (1.0 + 0.25 * workers)


def assign_shards(cells: list[Cell], n: int, run: RunSection | None = None) -> list[int]:
    """Shard index (0..n-1) of each cell, balanced by estimated cost; deterministic.

    Longest-processing-time first: cells by decreasing cost (ties broken by cell id, so the order
    never depends on the grid's listing order), each to the currently lightest shard (ties to the
    lowest index). Always within 4/3 of the best possible makespan.
    """
    if n < 1:
        raise ValueError(f"number of shards must be >= 1, got {n}")
    if run is None:
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
