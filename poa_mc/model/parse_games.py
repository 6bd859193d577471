"""The grid file's [poa], [slo] and [games] tables: what the policies are measured against.

[poa] names the selfish policy and the social cost of the price of anarchy, and sets PoA-hat's
estimator; [slo] the latency targets; [games.pd] the prefill/decode split game over a GPU budget
(with Dynamo's Planner moving the split, [games.pd.planner], which needs the [slo] targets) and
[games.cache] the prefill-cache game over KV capacities and Zipf exponents.
"""

from __future__ import annotations

import dataclasses

from poa_mc.model.sections import (
    MAX_BOOTSTRAP,
    POA_COSTS,
    POA_OBSERVED_FROM,
    POA_PRICINGS,
    POA_STAGES,
    POOL_COSTS,
    SOCIAL_COSTS,
    CacheGame,
    ConfigError,
    PdGame,
    PoaSection,
    SloSection,
)
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_planner import PlannerSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_workload import WorkloadSpec
from poa_mc.model.toml_fields import check_choice, check_keys, check_positive, coerce, read_fields, read_table


def parse_poa(doc: dict, policies: tuple[PolicySpec, ...]) -> PoaSection:
    f = read_fields(
        read_table(doc, "poa", "poa"),
        {
            "selfish": (str, ""),
            "social_cost": (str, "mean_ttft"),
            "window": (int, 8),
            "cost": (str, "router"),
            "slots": (int, 0),
            "overlap_weight": (float, 1.0),
            "freeze": (bool, True),
            "bootstrap": (int, 1000),
            "stage": (str, "auto"),
            "pricing": (str, "slot"),
            "observed_from": (str, "decision"),
        },
        "poa",
    )
    names = [p.name for p in policies]
    if not f["selfish"]:
        # The greedy KV router is what the paper calls selfish; fall back to the first policy.
        f["selfish"] = next((p.name for p in policies if p.kind == "kv"), names[0])
    elif f["selfish"] not in names:
        raise ConfigError("poa.selfish", f"{f['selfish']!r} names no policy; policies: {', '.join(names)}")
    check_choice(f["social_cost"], SOCIAL_COSTS, "poa.social_cost")
    check_choice(f["cost"], POA_COSTS, "poa.cost")
    check_choice(f["stage"], POA_STAGES, "poa.stage")
    check_choice(f["pricing"], POA_PRICINGS, "poa.pricing")
    check_choice(f["observed_from"], POA_OBSERVED_FROM, "poa.observed_from")
    check_positive(f["window"], "poa.window")
    check_positive(f["slots"], "poa.slots", allow_zero=True)
    check_positive(f["overlap_weight"], "poa.overlap_weight", allow_zero=True)
    if not 100 <= f["bootstrap"] <= MAX_BOOTSTRAP:
        raise ConfigError("poa.bootstrap", f"must be 100..{MAX_BOOTSTRAP:,} resamples, got {f['bootstrap']:,}")
    if f["slots"] > f["window"]:  # a worker takes at most every decision of a window
        raise ConfigError("poa.slots", f"must be at most poa.window ({f['window']}), got {f['slots']:,}")
    return PoaSection(**f)


def parse_pd_game(doc: dict, flow: str, slo: SloSection | None = None) -> PdGame | None:
    games = read_table(doc, "games", "games")
    check_keys(games, ("pd", "cache"), "games")
    if "pd" not in games:
        return None

    table = read_table(games, "pd", "games.pd")
    if "gpu_budget" not in table:
        raise ConfigError("games.pd.gpu_budget", "required: the GPUs the two pools share")
    f = read_fields(
        table,
        {
            "gpu_budget": (int, None),
            "prefill_gpus": (int, 1),
            "decode_gpus": (int, 1),
            "prefill_cost": (str, "ttft_mean_ms"),
            "decode_cost": (str, "itl_mean_ms"),
            "social_cost": (str, "e2e_mean_ms"),
            "policy": (str, ""),
            "planner": (dict, None),
        },
        "games.pd",
    )
    planner_table = f.pop("planner")
    for key in ("gpu_budget", "prefill_gpus", "decode_gpus"):
        check_positive(f[key], f"games.pd.{key}")
    for key in ("prefill_cost", "decode_cost", "social_cost"):
        check_choice(f[key], POOL_COSTS, f"games.pd.{key}")
    if flow == "aggregated":
        raise ConfigError("games.pd", 'needs a prefill pool: cluster.flow = "aggregated" has none')
    game = PdGame(**f)
    if len(game.splits()) < 2:
        raise ConfigError(
            "games.pd.gpu_budget",
            f"{game.gpu_budget} GPUs make {len(game.splits())} split(s) of {game.prefill_gpus}-GPU prefill and "
            f"{game.decode_gpus}-GPU decode workers; a game needs at least 2",
        )
    if planner_table is not None:
        game = _parse_planner(planner_table, game, slo or SloSection())
    return game


def _parse_planner(table: dict, game: PdGame, slo: SloSection) -> PdGame:
    """[games.pd.planner]: Dynamo's Planner moving the split in one run, from each start split."""
    path = "games.pd.planner"
    f = read_fields(
        table,
        {"interval_ms": (float, 30_000.0), "startup_ms": (float, 0.0), "starts": (list, None), "log_moves": (int, 256)},
        path,
    )
    labels = [f"{n_p}P/{n_d}D" for n_p, n_d in game.splits()]
    starts = f.pop("starts")
    if starts is None:
        starts = labels
    if not starts:
        raise ConfigError(f"{path}.starts", "must not be empty")
    for i, label in enumerate(starts):
        label = coerce(label, str, f"{path}.starts[{i}]")
        if label not in labels:
            raise ConfigError(f"{path}.starts[{i}]", f"{label!r} is not a split of the budget: {', '.join(labels)}")
        if label in starts[:i]:
            raise ConfigError(f"{path}.starts[{i}]", f"{label!r} repeats")
    if not (slo.ttft_ms > 0 and slo.itl_ms > 0):
        raise ConfigError(path, "needs its targets: an [slo] table with ttft_ms and itl_ms")
    spec = PlannerSpec(
        game.gpu_budget, game.prefill_gpus, game.decode_gpus, ttft_ms=slo.ttft_ms, itl_ms=slo.itl_ms, **f
    )
    try:
        spec.validate(path)
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return dataclasses.replace(game, planner=spec, planner_starts=tuple(starts))


def parse_cache_game(
    doc: dict, cluster: ClusterSpec, workload: WorkloadSpec, policies: tuple[PolicySpec, ...], selfish: str
) -> CacheGame | None:
    games = read_table(doc, "games", "games")
    if "cache" not in games:
        return None
    path = "games.cache"
    table = dict(read_table(games, "cache", path))
    check_keys(table, ("prefill_kv_blocks", "zipf_alpha", "selfish", "coordinated", "social_cost"), path)
    if cluster.flow != "prefill_first":
        raise ConfigError(path, "is played by the prefill workers' caches: it needs cluster.flow = prefill_first")
    if "pd" in games:
        raise ConfigError(path, "[games.pd] and [games.cache] each set the topologies: give them separate grids")

    def read_list(key: str, typ: type, default: tuple) -> tuple:
        if key not in table:
            if not default:
                raise ConfigError(f"{path}.{key}", "required: a list of values to sweep")
            return default
        value = table[key]
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{path}.{key}", "must be a non-empty list")
        out = []
        for i, v in enumerate(value):
            v = coerce(v, typ, f"{path}.{key}[{i}]")
            if v in out:
                raise ConfigError(f"{path}.{key}[{i}]", f"{v} repeats {path}.{key}[{out.index(v)}]")
            out.append(v)
        return tuple(out)

    capacities = read_list("prefill_kv_blocks", int, ())
    prompt = -(-workload.isl.max_value() // cluster.block_size)
    for i, c in enumerate(capacities):
        if c < prompt:
            raise ConfigError(
                f"{path}.prefill_kv_blocks[{i}]",
                f"{c} blocks cannot hold a prompt of up to {workload.isl.max_value()} tokens ({prompt} blocks)",
            )
    alphas = read_list("zipf_alpha", float, (0.0,))
    for i, a in enumerate(alphas):
        check_positive(a, f"{path}.zipf_alpha[{i}]", allow_zero=True)
    names = [p.name for p in policies]
    f = read_fields(
        {k: table[k] for k in ("selfish", "social_cost") if k in table},
        {"selfish": (str, selfish), "social_cost": (str, "mean_ttft")},
        path,
    )
    check_choice(f["social_cost"], SOCIAL_COSTS, f"{path}.social_cost")
    if f["selfish"] not in names:
        raise ConfigError(f"{path}.selfish", f"{f['selfish']!r} names no policy; policies: {', '.join(names)}")
    coordinated = read_list("coordinated", str, tuple(n for n in names if n != f["selfish"]) or ("",))
    for i, name in enumerate(coordinated):
        if name not in names or name == f["selfish"]:
            raise ConfigError(
                f"{path}.coordinated[{i}]" if "coordinated" in table else f"{path}.coordinated",
                f"{name!r} is not a policy other than the selfish one; policies: {', '.join(names)}",
            )
    return CacheGame(capacities, alphas, f["selfish"], coordinated, f["social_cost"])


def parse_slo(doc: dict) -> SloSection:
    f = read_fields(read_table(doc, "slo", "slo"), {"ttft_ms": (float, 0.0), "itl_ms": (float, 0.0)}, "slo")
    for key, value in f.items():
        check_positive(value, f"slo.{key}", allow_zero=True)
    return SloSection(**f)
