"""Grid files: reading one, and assembling its sections into the resolved grid.

A grid file names one workload, one cluster template, one timing profile, a list of topologies,
a list of loads and a list of routing policies. `load_grid` parses it with tomllib, checks every
key (unknown keys, wrong types, empty lists, duplicates) and returns a frozen `GridConfig`. Every
error is a `ConfigError` whose `path` names the offending key, e.g. `grid.topology[1]`. The tables
are parsed by the parse_* modules beside this one (parse_run, parse_workload, parse_cluster,
parse_policy, parse_games, parse_axes; the typed readers they share are in toml_fields, `--set`
overrides in grid_overrides); this module runs them in the order their checks need and checks what
spans sections. The per-cell checks of
`CellSpec.validate()` also run here (through `grid.expand`), so a grid that loads is a grid that
can run. docs/grid.md documents every key, unit and default.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import tomllib

from poa_mc.model.grid import GridConfig
from poa_mc.model.grid_overrides import apply_overrides
from poa_mc.model.parse_axes import parse_grid_axes
from poa_mc.model.parse_cluster import parse_cluster, parse_profile
from poa_mc.model.parse_games import parse_cache_game, parse_pd_game, parse_poa, parse_slo
from poa_mc.model.parse_policy import parse_controller, parse_policies
from poa_mc.model.parse_run import parse_run
from poa_mc.model.parse_schedule import parse_schedule
from poa_mc.model.parse_workload import parse_client, parse_workload
from poa_mc.model.sections import SECTIONS, ConfigError
from poa_mc.model.toml_fields import check_keys


def parse_grid(doc: dict, source: str = "<string>", base_dir: str | Path | None = None) -> GridConfig:
    """Validate a parsed TOML document and resolve it into a GridConfig (cells checked too).

    Trace files (`dist = "trace"`) are read relative to `base_dir`: by default the directory of
    `source` when it names a file, else the working directory."""
    if base_dir is None:
        base_dir = Path(source).parent if source != "<string>" else Path.cwd()
    check_keys(doc, SECTIONS, "")
    run = parse_run(doc)
    workload, arrival, traces = parse_workload(doc, Path(base_dir))
    client = parse_client(doc)
    if client is not None:
        workload = dataclasses.replace(workload, client=client)
    cluster = parse_cluster(doc)
    profile = parse_profile(doc, cluster, Path(base_dir))
    slo = parse_slo(doc)
    pd_game = parse_pd_game(doc, cluster.flow, slo)
    policies = parse_policies(doc, parse_controller(doc))
    poa = parse_poa(doc, policies)
    cache_game = parse_cache_game(doc, cluster, workload, policies, poa.selfish)
    topologies, axis, loads = parse_grid_axes(doc, arrival, cluster.flow, pd_game, cache_game, "schedule" in doc)
    stages = parse_schedule(doc, axis, loads)
    if stages:  # one simulation runs the whole list: its slots are the largest concurrency's
        if workload.trace is not None:
            raise ConfigError("schedule", "a replayed trace sets its own load: remove [schedule] or kind = 'trace'")
        run = dataclasses.replace(run, requests=sum(st.requests for st in stages))
        workload = dataclasses.replace(workload, schedule=stages)
    if poa.window > run.requests:
        raise ConfigError(
            "poa.window", f"{poa.window:,} decisions exceed the {run.requests:,} measured requests of a replica"
        )
    if pd_game is not None:
        names = [p.name for p in policies]
        if not pd_game.policy:
            pd_game = dataclasses.replace(pd_game, policy=poa.selfish)
        elif pd_game.policy not in names:
            raise ConfigError("games.pd.policy", f"{pd_game.policy!r} names no policy; policies: {', '.join(names)}")
    grid = GridConfig(
        run, profile, workload, cluster, topologies, axis, loads, policies, poa, source, traces, slo, pd_game,
        cache_game,
    )  # fmt: skip
    grid.cells()  # runs CellSpec.validate() on every cell; raises ConfigError with a grid key path
    return grid


def _grid_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")  # a byte-order mark some editors write is no error
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"line {line}", f"not UTF-8 text (byte 0x{data[e.start]:02x}); a TOML grid file is UTF-8"
        ) from None


def load_grid(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> GridConfig:
    """Read and validate a grid file, with `overrides` (`KEY=VALUE`, see apply_overrides) applied
    first. Raises ConfigError (bad grid) or OSError (unreadable file)."""
    path = Path(path)
    return loads_grid(_grid_text(path), str(path), overrides=overrides)


def read_with_table(path: str | Path, name: str, known: tuple[str, ...], needs: str) -> tuple[dict, dict]:
    """A grid file's TOML document without the table `name` of a command's own ([calibrate],
    [tune]), and that table, its keys checked against `known` (`needs`: what the error says it
    must hold). The document is then parse_grid's. Raises ConfigError or OSError."""
    try:
        doc = tomllib.loads(_grid_text(Path(path)))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("not valid TOML", str(e)) from None
    table = doc.pop(name, None)
    if not isinstance(table, dict):
        raise ConfigError(name, f"the file needs a [{name}] table ({needs})")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"{name}.{unknown[0]}", f"unknown key ({', '.join(known)})")
    return doc, table


def loads_grid(
    text: str,
    source: str = "<string>",
    base_dir: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> GridConfig:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("not valid TOML", str(e)) from None
    if overrides:
        doc = apply_overrides(doc, overrides)
    return parse_grid(doc, source, base_dir)


def grid_warnings(grid: GridConfig) -> list[str]:
    """Legal but suspicious settings, said before a run starts (not errors: nothing is refused)."""
    out = []
    if grid.load_axis == "concurrency" and grid.loads:
        c = int(max(grid.loads))
        if grid.run.warmup_for(c) < 2 * c:
            out.append(
                f"run.warmup = {grid.run.warmup_for(c)} is below twice the largest concurrency ({c}): all clients "
                f"send their first requests together at t = 0, and that start-up burst will be measured; "
                f"use warmup >= {2 * c}, or run.warmup_per_client = 2 (a warm-up that grows with the load)"
            )
        tr = grid.workload.trace
        if tr is not None and tr.replay == "closed" and tr.sessions:
            # every client starts a session at t = 0: the cluster only settles once the first
            # sessions have run through their turns
            want = c * math.ceil(tr.rows / tr.sessions)
            if grid.run.warmup < want and grid.run.warmup_for(c) >= 2 * c:
                out.append(
                    f"run.warmup = {grid.run.warmup}: the {c} clients of this closed replay all start a session at "
                    f"t = 0 and its sessions average {tr.rows / tr.sessions:.1f} turns; the start-up transient lasts "
                    f"about one session per client: use warmup >= {want}"
                )
    return out
