"""The columns of summary.parquet and poa.parquet, declared once: name, dtype, unit, and whether
an interval (`_lo`, `_hi`) stands beside it. The reducer builds both frames through these
declarations (`frame`), so every run has the same columns in the same order, null where a figure
does not apply to a cell (a `[client]` figure without a client, a tier's hit rate without tiers);
a figure the reducer works out but nobody declared is an error, not a silent extra column.
docs/outputs.md describes each one (tests/test_docs.py checks that they agree).

A new summary figure is one `Col` here and its arithmetic in poa_mc.stats.cell_stats.cell_stats."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

F, INT, S, B = pl.Float64, pl.Int64, pl.String, pl.Boolean


@dataclass(frozen=True)
class Col:
    name: str
    dtype: Any = F
    unit: str = ""  # "ms", "1/s", "share", "" (a count, a label or a ratio)
    interval: bool = False  # `name_lo`, `name_hi` beside it (95%, across replicas)

    def names(self) -> tuple[str, ...]:
        return (self.name, f"{self.name}_lo", f"{self.name}_hi") if self.interval else (self.name,)


def _ms(*names: str) -> tuple[Col, ...]:
    return tuple(Col(n, F, "ms", True) for n in names)


# a cell's identity, as cells.parquet has it
IDENTITY = (
    Col("cell_id", S), Col("index", INT), Col("point", INT), Col("topology", S), Col("n_prefill", INT),
    Col("n_decode", INT), Col("load_axis", S), Col("concurrency", INT), Col("rate", F, "1/s"), Col("policy", S),
    Col("policy_kind", S),
)  # fmt: skip

# what poa_mc.stats.cell_stats.cell_stats works out for a cell, and the knee analysis adds
SUMMARY_FIGURES = (
    Col("replicas", INT), Col("requests", INT),
    *_ms("ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "ttft_p99_run_ms"),
    *_ms("itl_mean_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "e2e_mean_ms", "e2e_p99_ms"),
    *_ms("prefill_wait_mean_ms", "decode_wait_mean_ms", "client_wait_mean_ms", "server_ttft_mean_ms"),
    *_ms("transfer_mean_ms"),
    Col("throughput_rps", F, "1/s", True), Col("output_tps", F, "tokens/s", True),
    Col("offered_rps", F, "1/s"), Col("unstable", B), Col("capacity_rps", F, "1/s", True),
    Col("hit_rate", F, "share", True),
    *(Col(f"hit_rate_g{k}", F, "share", True) for k in (1, 2, 3, 4)),
    Col("onboard_ms_mean", F, "ms", True),
    Col("slo_attainment", F, "share", True), Col("goodput_rps", F, "1/s", True),
    Col("prefill_util", F, "share", True), Col("decode_util", F, "share", True),
    Col("decode_batch_mean", F, "", True), Col("kv_occupancy_mean", F, "share", True),
    Col("link_util", F, "share", True),
    Col("preemptions_per_request", F, "", True),
    Col("replicas_identical", B), Col("warmup_drift", F, "share"), Col("warmup_suggested", INT),
    Col("poa_stage", S), Col("poa_candidates", INT), Col("poa_hat", F, "", True), Col("poa_hat_windows", INT),
    *(Col(f"regime_share_{r}", F, "share", True) for r in ("below", "transition", "saturated")),
    Col("regime_switches", F, "", True),
    Col("social_cost", F),
    Col("regime", S), Col("knee", F), Col("knee_lo", F), Col("knee_hi", F),
    Col("knee_grid_lo", F), Col("knee_grid_hi", F), Col("knee_reason", S),
)  # fmt: skip

SUMMARY = IDENTITY + SUMMARY_FIGURES

POA = (
    Col("point", INT), Col("topology", S), Col("n_prefill", INT), Col("n_decode", INT), Col("load_axis", S),
    Col("concurrency", INT), Col("rate", F, "1/s"), Col("selfish_policy", S), Col("social_cost_kind", S),
    Col("poa_stage", S), Col("poa_cost", S), Col("poa_pricing", S), Col("poa_hat", F, "", True),
    Col("poa_cf", F, "", True), Col("best_policy", S), Col("social_cost_selfish", F), Col("social_cost_best", F),
    Col("policies", INT),
    Col("poa_cf_ttft", F, "", True), Col("poa_cf_e2e", F, "", True), Col("best_policy_ttft", S),
    Col("best_policy_e2e", S), Col("ttft_win_slows_decode", B), Col("poa_cf_goodput", F, "", True),
    Col("best_policy_goodput", S), Col("unstable", B),
    Col("regime", S), Col("knee", F), Col("knee_lo", F), Col("knee_hi", F),
    Col("knee_grid_lo", F), Col("knee_grid_hi", F), Col("knee_reason", S),
)  # fmt: skip


def schema(cols: Iterable[Col]) -> dict[str, Any]:
    """The polars schema of these columns, intervals expanded, in order."""
    return {n: c.dtype for c in cols for n in c.names()}


def frame(rows: Sequence[Mapping[str, Any]], cols: Sequence[Col], what: str) -> pl.DataFrame:
    """`rows` as a frame of exactly the declared columns (missing keys: null); a key nobody
    declared raises, naming it."""
    sch = schema(cols)
    for r in rows:
        extra = [k for k in r if k not in sch]
        if extra:
            raise ValueError(f"{what}: undeclared {', '.join(extra)}: declare them in poa_mc/stats/columns.py")
    return pl.DataFrame([{k: r.get(k) for k in sch} for r in rows], schema=sch)
