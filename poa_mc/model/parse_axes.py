"""The grid file's [grid] table: the axes a grid sweeps, each of its cells one point on them.

The topologies (`xP/yD`, or every split of a [games.pd] budget), each optionally once per KV-tier
variant (`tiers`) and per [games.cache] capacity and Zipf exponent, and the loads: a list of
concurrencies for a closed workload, of request rates for an open one.
"""

from __future__ import annotations

import dataclasses

from poa_mc.model.sections import PLANNER_SUFFIX, TOPOLOGY_RE, CacheGame, ConfigError, PdGame, Topology
from poa_mc.model.toml_fields import check_choice, check_keys, check_positive, coerce, read_table

TIER_VARIANTS = ("g1", "g1+g2", "g1+g2+g3", "g1+g2+g3+g4")


def _tier_variants(table: dict) -> list[str]:
    """`[grid] tiers`: each topology once per variant, with the [cluster]'s lower tiers it names (the
    others set to 0), so G1 alone and G1 + G2 + G3 are compared on the same requests."""
    values = table["tiers"]
    if not isinstance(values, list) or not values:
        raise ConfigError("grid.tiers", f'must be a non-empty list such as ["g1", "g1+g2+g3"], got {values!r}')
    out: list[str] = []
    for i, v in enumerate(values):
        v = check_choice(coerce(v, str, f"grid.tiers[{i}]"), TIER_VARIANTS, f"grid.tiers[{i}]")
        if v in out:
            raise ConfigError(f"grid.tiers[{i}]", f"{v!r} repeats grid.tiers[{out.index(v)}]")
        out.append(v)
    return out


def _arrival_key(doc: dict, arrival: str) -> str:
    """The setting that chose the load axis, as the user wrote it (a replay's, or the arrival's)."""
    workload = doc.get("workload", {})
    if isinstance(workload, dict) and workload.get("kind") == "trace":
        return f"workload.replay = {workload.get('replay', 'closed')!r}"
    return f"workload.arrival = {arrival!r}"


def parse_grid_axes(
    doc: dict,
    arrival: str,
    flow: str = "prefill_first",
    pd_game: PdGame | None = None,
    cache_game: CacheGame | None = None,
    staged: bool = False,
) -> tuple[tuple[Topology, ...], str, tuple[float, ...]]:
    """The topologies, the load axis and its loads; `staged` ([schedule]): the loads are stages in
    order, so one may repeat (a sweep up and back down)."""
    if "grid" not in doc:
        raise ConfigError("grid", "missing section: a grid needs at least `topology` and a load list")
    table = dict(read_table(doc, "grid", "grid"))
    check_keys(table, ("topology", "concurrency", "rate", "tiers"), "grid")
    if pd_game is not None:
        if "topology" in table:
            raise ConfigError(
                "grid.topology", "[games.pd] sets the topologies (every split of its gpu_budget): remove one of them"
            )
        table["topology"] = [f"{n_p}P/{n_d}D" for n_p, n_d in pd_game.splits()]
        if pd_game.planner is not None:
            table["topology"] += [f"{label}{PLANNER_SUFFIX}" for label in pd_game.planner_starts]

    def read_list(key: str) -> list:
        value = table[key]
        if not isinstance(value, list):
            raise ConfigError(f"grid.{key}", f"must be a list, got {type(value).__name__}")
        if not value:
            raise ConfigError(f"grid.{key}", "must not be empty")
        return value

    if "topology" not in table:
        raise ConfigError("grid.topology", 'required: a list such as ["1P/2D", "1P/5D"]')
    topologies: list[Topology] = []
    seen: dict[tuple[int, int], int] = {}
    for i, label in enumerate(read_list("topology")):
        path = f"grid.topology[{i}]"
        label = coerce(label, str, path)
        if pd_game is not None and label.endswith(PLANNER_SUFFIX):
            m = TOPOLOGY_RE.match(label[: -len(PLANNER_SUFFIX)])
            topologies.append(Topology(label, int(m.group(1)), int(m.group(2)), planner=True))
            continue
        m = TOPOLOGY_RE.match(label)
        if not m:
            raise ConfigError(path, f'"{label}" is not of the form xP/yD (e.g. "1P/2D")')
        key = (int(m.group(1)), int(m.group(2)))
        if flow == "aggregated" and key[0] != 0:
            raise ConfigError(
                path,
                f'"{label}": cluster.flow = "aggregated" has no prefill pool (every worker prefills and decodes); '
                f'write "0P/{key[1]}D"',
            )
        if key in seen:
            raise ConfigError(path, f'"{label}" repeats grid.topology[{seen[key]}]')
        seen[key] = i
        topologies.append(Topology(f"{key[0]}P/{key[1]}D", *key))
    if cache_game is not None:
        topologies = [
            dataclasses.replace(t, label=f"{t.label} kv={c} a={a:g}", prefill_kv_blocks=c, zipf_alpha=a)
            for t in topologies
            for c in cache_game.prefill_kv_blocks
            for a in cache_game.zipf_alpha
        ]

    if "tiers" in table:
        topologies = [
            dataclasses.replace(t, label=f"{t.label} {v}", tiers=v) for t in topologies for v in _tier_variants(table)
        ]

    axis = "concurrency" if arrival == "closed" else "rate"
    other = "rate" if axis == "concurrency" else "concurrency"
    if other in table:
        raise ConfigError(f"grid.{other}", f"{_arrival_key(doc, arrival)} sweeps grid.{axis}, not grid.{other}")
    if axis not in table:
        raise ConfigError(f"grid.{axis}", f"required for {_arrival_key(doc, arrival)}")
    loads: list[float] = []
    for i, value in enumerate(read_list(axis)):
        path = f"grid.{axis}[{i}]"
        value = coerce(value, int if axis == "concurrency" else float, path)
        check_positive(value, path)
        if value in loads and not staged:
            raise ConfigError(path, f"{value} repeats grid.{axis}[{loads.index(value)}]")
        loads.append(value)
    return tuple(topologies), axis, tuple(loads)
