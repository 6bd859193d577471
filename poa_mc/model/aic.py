"""Timing tables from NVIDIA's aiconfigurator (PyPI `aiconfigurator-core`, Apache-2.0), the
measured-kernel latency model Dynamo's own simulator uses for `--aic-perf-model`.

`build_table` asks aiconfigurator's SDK for a prefill pass on a grid of batch x uncached tokens x
cached tokens and a decode step on batch x context, and returns them in the file format of
poa_mc.model.timing_tables with their provenance. It needs the optional extra
(`pip install -e '.[aic]'`); nothing else in poa-mc imports this module, so the default install
never needs aiconfigurator. The shipped tables (poa_mc/data/profiles/) come from poa_mc/data/profiles/make_aic.py.
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any

import numpy as np

from poa_mc.model.timing_tables import FORMAT, MONOTONE_AXES, lower_envelope

# The grid. aiconfigurator's latencies are staircases: a GEMM's time jumps where its rows (the
# tokens of a pass, the sequences of a step) cross a tile or wave boundary, by up to 73% on H200,
# and slopes between. A fixed sparse grid misses those jumps, so each axis's nodes are chosen from
# a scan at every integer (select_nodes): a node on each side of every jump, and as few as keep
# linear interpolation within NODE_TOL of the scanned values. A prefill pass is aiconfigurator's
# sum of per-operator times, and it splits in two: everything but attention depends on the
# pass's tokens alone (its GEMMs' rows: one axis, where the jumps are), attention on the requests,
# their new tokens each and their cached tokens (smooth). The table keeps the two apart.
PREFILL_MAX_TOKENS = 16384  # twice the default token budget; beyond it the last interval's line goes on
PREFILL_BATCH = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
PREFILL_UNCACHED_SCAN = tuple(range(1, PREFILL_MAX_TOKENS + 1, 16))
PREFILL_UNCACHED_SCAN_ROWS = ((1, 0), (4, 0), (1, 8192), (16, 2048))  # (batch, cached) rows to follow
PREFILL_CACHED = (0, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
DECODE_MAX_BATCH = 512
DECODE_CONTEXT_SCAN = tuple(range(1, 131073, 64))
DECODE_BATCH_SCAN_CONTEXTS = (1, 256, 1024, 2048, 4096, 8192, 32768, 65536)  # rows the batch nodes must follow
DECODE_CONTEXT_SCAN_BATCHES = (1, 16, 64, 128, 192, 256, 384, 512)
NODE_TOL = 0.01


def select_nodes(x: np.ndarray, y: np.ndarray, tol: float = NODE_TOL) -> list[int]:
    """Indices of x (ascending) such that, between consecutive chosen points, linear interpolation
    is within `tol` (relative) of every row of y (shape (rows, len(x))) at every x in between;
    greedy from the left, so each interval is as long as it can be."""
    x = np.asarray(x, dtype=np.float64)
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    nodes = [0]
    a = 0
    n = len(x)
    while a < n - 1:
        b = a + 1
        while b + 1 < n:
            c = b + 1
            w = (x[a + 1 : c] - x[a]) / (x[c] - x[a])
            lin = y[:, a : a + 1] * (1 - w) + y[:, c : c + 1] * w
            if np.any(np.abs(lin - y[:, a + 1 : c]) > tol * y[:, a + 1 : c]):
                break
            b = c
        nodes.append(b)
        a = b
    return nodes


NOTICE = (
    "Timing values computed with NVIDIA aiconfigurator (aiconfigurator-core), Copyright (c) NVIDIA CORPORATION & "
    "AFFILIATES, licensed under the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0). "
    "The values are model outputs of its per-operator performance database; poa-mc made them non-decreasing "
    "in tokens, cached tokens, sequences and context (lower envelope) and did not otherwise change them."
)


class AicUnavailable(RuntimeError):
    """aiconfigurator-core is not installed."""


def engine(model: str, system: str, backend: str, tp: int, **kwargs: Any) -> Any:
    """aiconfigurator's compiled engine handle for one model on one system (its own names, e.g.
    model "nvidia/Llama-3.1-70B-Instruct-FP8", system "b200_sxm", backend "vllm")."""
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError as e:
        raise AicUnavailable(
            "aiconfigurator-core is not installed: pip install -e '.[aic]' (about 600 MB with pandas and pyarrow)"
        ) from e
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    # a model it does not bundle would be fetched from the Hugging Face hub: refuse it here instead
    models, systems = bundled()
    if model not in models:
        raise ValueError(
            f"model {model!r} is not among aiconfigurator's {len(models)} bundled models (e.g. {models[0]})"
        )
    if system not in systems:
        raise ValueError(f"system {system!r} is not one of aiconfigurator's: {', '.join(systems)}")
    try:
        return EngineHandle.compile(model, system, backend, tp_size=tp, **kwargs)
    except Exception as e:  # noqa: BLE001 - the SDK raises its own types; the CLI reports them in one line
        raise ValueError(f"{type(e).__name__}: {e}") from e


def bundled() -> tuple[list[str], list[str]]:
    """The models (Hugging Face names) and systems aiconfigurator-core ships data for."""
    from importlib.resources import files

    root = files("aiconfigurator_core")
    models = sorted(
        p.name[: -len("_config.json")].replace("--", "/", 1)
        for p in (root / "model_configs").iterdir()
        if p.name.endswith("_config.json") and not p.name.endswith("_hf_quant_config.json")
    )
    systems = sorted(p.name[: -len(".yaml")] for p in (root / "systems").iterdir() if p.name.endswith(".yaml"))
    data = root / "systems" / "data"
    systems = [x for x in systems if (data / x).is_dir() and any(p.is_dir() for p in (data / x).iterdir())]
    return models, systems


def sdk_prefill_ms(handle: Any, batch: int, uncached: int, cached: int) -> float:
    """aiconfigurator's pass of `batch` requests of `uncached` new tokens on `cached` cached ones
    (its isl counts the prefix)."""
    return float(handle.predict_prefill_latency(int(batch), int(uncached + cached), int(cached)))


def sdk_gemm_ms(handle: Any, tokens: int) -> float:
    """aiconfigurator's pass time outside attention for a pass of `tokens` new tokens (GEMMs,
    norms, all-reduces: its mixed step's shared non-attention part, which depends on the tokens
    alone)."""
    return float(handle.mixed_step_breakdown(int(tokens), 0, int(tokens), 2, 0)[1])


def sdk_decode_ms(handle: Any, batch: int, context: int) -> float:
    """aiconfigurator's step of `batch` sequences of `context` tokens each (one step: osl = 2)."""
    return float(handle.predict_decode_latency(int(batch), int(context), 2))


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("aiconfigurator-core", "numpy", "pandas", "pyarrow"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _envelope_report(raw: np.ndarray, ms: np.ndarray) -> dict[str, Any]:
    changed = ms < raw
    rel = np.where(changed, (raw - ms) / raw, 0.0)
    worst = np.unravel_index(int(np.argmax(rel)), rel.shape)
    return {"points_lowered": int(changed.sum()), "points": int(raw.size), "max_lowered_rel": float(rel.max()),
            "worst_index": [int(i) for i in worst]}  # fmt: skip


def _attention_ms(h: Any, gemm: dict[int, float], b: int, u: int, c: int) -> float:
    """Attention's share of the pass of b requests of u new tokens on c cached each: the pass less
    its part outside attention (memoised by token count in `gemm`)."""
    t = b * u
    if t not in gemm:
        gemm[t] = sdk_gemm_ms(h, t)
    return sdk_prefill_ms(h, b, u, c) - gemm[t]


def build_table(
    name: str,
    model: str,
    system: str,
    backend: str,
    tp: int,
    *,
    backend_version: str | None = None,
    envelope: bool = True,
) -> dict[str, Any]:
    """The table of one aiconfigurator configuration, as the JSON document poa_mc.model.timing_tables reads.
    envelope=False keeps aiconfigurator's values as they are, falls and all (`"envelope": false`)."""

    def env(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return lower_envelope(a, axes) if envelope else a

    kwargs = {"backend_version": backend_version} if backend_version else {}
    h = engine(model, system, backend, tp, **kwargs)
    # Nodes are chosen on the envelope of each scan (what the table holds), so that a row's
    # flattened teeth are followed as well as its rises. Prefill tokens: every batch of the table,
    # nothing and a long prefix cached; decode batch over short to long contexts; context over batches.
    t_scan = np.arange(1, PREFILL_MAX_TOKENS + 1)
    gemm_raw = np.array([sdk_gemm_ms(h, int(t)) for t in t_scan])
    g_env = env(gemm_raw[None, :], (1,))[0]
    t_nodes = select_nodes(t_scan, g_env[None, :])
    tokens, gemm_ms = t_scan[t_nodes], g_env[t_nodes]
    memo = {int(t): float(v) for t, v in zip(t_scan, gemm_raw)}
    u_scan = np.array(PREFILL_UNCACHED_SCAN)
    u_rows = np.array([[_attention_ms(h, memo, b, int(u), c) for u in u_scan] for b, c in PREFILL_UNCACHED_SCAN_ROWS])
    uncached = u_scan[select_nodes(u_scan, env(u_rows, (1,)))]
    att = np.array(
        [[[_attention_ms(h, memo, b, int(u), c) for c in PREFILL_CACHED] for u in uncached] for b in PREFILL_BATCH]
    )
    b_scan = np.arange(1, DECODE_MAX_BATCH + 1)
    b_rows = np.array([[sdk_decode_ms(h, int(b), c) for b in b_scan] for c in DECODE_BATCH_SCAN_CONTEXTS])
    d_batch = b_scan[select_nodes(b_scan, env(b_rows, (1,)))]
    c_scan = np.array(DECODE_CONTEXT_SCAN)
    c_rows = np.array([[sdk_decode_ms(h, b, int(c)) for c in c_scan] for b in DECODE_CONTEXT_SCAN_BATCHES])
    d_context = c_scan[select_nodes(c_scan, env(c_rows, (1,)))]
    dec = np.array([[sdk_decode_ms(h, int(b), int(c)) for c in d_context] for b in d_batch])
    att_ms = env(att, MONOTONE_AXES["attention"])
    dec_ms = env(dec, MONOTONE_AXES["decode"])
    resolved_version = backend_version
    try:
        from aiconfigurator_core.sdk import engine as sdk_engine

        resolved_version = sdk_engine._literal_backend_version(system, backend, backend_version, None, None)
    except Exception:  # noqa: BLE001 - provenance only; the SDK's private helper may move
        pass
    return {
        "format": FORMAT,
        "name": name,
        "envelope": envelope,
        "provenance": {
            "generator": "aiconfigurator-core (poa_mc.model.aic.build_table)",
            "packages": _versions(),
            "model": model,
            "system": system,
            "backend": backend,
            "backend_version": resolved_version,
            "tp": tp,
            "built": _dt.date.today().isoformat(),
            "calls": "prefill outside attention: mixed_step_breakdown(tokens, 0, tokens, 2, 0)[1]; attention: "
            "predict_prefill_latency(batch, uncached + cached, cached) less that at batch x uncached tokens; "
            "decode: predict_decode_latency(batch, context, 2)",
            "grid": {
                "node_tol": NODE_TOL,
                "prefill_tokens": f"nodes from every count 1..{PREFILL_MAX_TOKENS}",
                "prefill_uncached": f"nodes from {PREFILL_UNCACHED_SCAN[0]}..{PREFILL_UNCACHED_SCAN[-1]} "
                f"step {PREFILL_UNCACHED_SCAN[1] - PREFILL_UNCACHED_SCAN[0]} at (batch, cached) "
                f"{list(PREFILL_UNCACHED_SCAN_ROWS)}",
                "decode_batch": f"nodes from every batch 1..{DECODE_MAX_BATCH} at contexts "
                f"{list(DECODE_BATCH_SCAN_CONTEXTS)}",
                "decode_context": f"nodes from {DECODE_CONTEXT_SCAN[0]}..{DECODE_CONTEXT_SCAN[-1]} step "
                f"{DECODE_CONTEXT_SCAN[1] - DECODE_CONTEXT_SCAN[0]} at batches {list(DECODE_CONTEXT_SCAN_BATCHES)}",
            },
            "monotone": {
                "prefill_gemm": _envelope_report(gemm_raw[t_nodes], gemm_ms),
                "prefill_attention": _envelope_report(att, att_ms),
                "decode": _envelope_report(dec, dec_ms),
            },
            "notice": NOTICE,
        },
        "prefill": {
            "tokens": [int(t) for t in tokens],
            "gemm_ms": np.round(gemm_ms, 4).tolist(),
            "batch": list(PREFILL_BATCH),
            "uncached": [int(u) for u in uncached],
            "cached": list(PREFILL_CACHED),
            "attention_ms": np.round(att_ms, 4).tolist(),
        },
        "decode": {
            "batch": [int(b) for b in d_batch],
            "context": [int(c) for c in d_context],
            "ms": np.round(dec_ms, 4).tolist(),
        },
    }
