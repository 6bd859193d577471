"""A load schedule's stages (`[schedule]`, poa_mc/kernels/schedule.py): one stages.parquet row per
cell and stage, with the columns of a cell's summary row worked out over that stage's requests
alone, as inference-perf, AIPerf and genai-perf report a sweep's stages.

A stage's requests are the measured ones it created (its rows in the cell's samples, in creation
order); its figures are cell_stats' over them, replicas as the units of every interval, with two
differences a transient needs:

- its request rate is the benchmark's: the stage's requests over the time from its first arrival
  to its last completion (cell_stats.request_rate, `bench_span_s`), per replica, pooled as a ratio.
  A stage that starts on a backlog, or ends with one, is not a steady state, and this is what a
  benchmark of the same stage would read;
- no stability verdict nulls its figures: an overloaded stage reports what it did (offered_rps
  beside throughput_rps says by how much it fell behind).

`stage_start_ms` and `stage_end_ms` are the replicas' mean first arrival and last completion of the
stage (its window, which overlaps the next stage's while its stragglers finish).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from poa_mc.model.spec_json import spec_from_json, spec_to_json
from poa_mc.stats.accumulate import accumulate
from poa_mc.stats.cell_stats import cell_stats


def bench_span_s(arrival_ms: np.ndarray, e2e_ms: np.ndarray) -> np.ndarray:
    """Per replica (rows), seconds from the first arrival to the last completion of the requests
    (columns): the span a benchmark divides a stage's requests by (cell_stats.request_rate)."""
    return ((arrival_ms + e2e_ms).max(axis=1) - arrival_ms.min(axis=1)) / 1000.0


STAGE_COLUMNS = ("cell_id", "stage", "stage_load", "stage_requests", "stage_start_ms", "stage_end_ms")


def stage_rows(
    cols: dict[str, np.ndarray], cell: dict[str, Any], poa: dict[str, Any], slo: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """One row per stage of a schedule cell from its samples' columns ((R, N[, W]) arrays in
    creation order, poa_mc.stats.reduce.samples_to_columns); [] for a cell without a schedule."""
    spec = spec_from_json(cell["spec_json"])
    w = spec.workload
    if not w.schedule:
        return []
    n = np.shape(cols["ttft_ms"])[1]
    ends = w.stage_ends()
    if ends[-1] != n:
        raise ValueError(f"cell {cell['cell_id']}: its samples hold {n} requests per replica, its stages {ends[-1]}")
    rows, lo = [], 0
    for k, (stage, hi) in enumerate(zip(w.schedule, ends)):
        part = {name: v[:, lo:hi] for name, v in cols.items() if np.ndim(v) >= 2}
        if w.arrival == "closed":
            one = dataclasses.replace(w, schedule=(), concurrency=int(stage.load))
        else:
            one = dataclasses.replace(w, schedule=(), rate_rps=float(stage.load))
        stage_spec = dataclasses.replace(spec, workload=one)
        acc = accumulate(part, {}, stage_spec, poa, slo)
        arrival = part["arrival_ms"]
        last_done = (arrival + part["e2e_ms"]).max(axis=1)
        acc["bench_span_s"] = bench_span_s(arrival, part["e2e_ms"])
        stats = cell_stats(acc, {**cell, "spec_json": spec_to_json(stage_spec)}, poa, steady=False)
        row = {
            "cell_id": cell["cell_id"],
            "stage": k,
            "stage_load": float(stage.load),
            "stage_requests": int(stage.requests),
            "stage_start_ms": float(arrival.min(axis=1).mean()),
            "stage_end_ms": float(last_done.mean()),
        }
        row.update({c: v for c, v in stats.row.items() if c not in row})
        rows.append(row)
        lo = hi
    return rows
