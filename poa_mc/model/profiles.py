"""Timing profiles: built-in and user-described, resolved to `poa_mc.model.spec_profile.ProfileSpec`.

A profile is what a worker's scheduler pass costs. Every form reduces to the three shapes the
kernels evaluate (poa_mc/kernels/timing.py, see `ProfileSpec`): a polynomial (prefill quadratic in the
uncached tokens T of a pass, decode step quadratic in the KV occupancy u), an aic table
(poa_mc.model.timing_tables: pass and step by batch and tokens), or a per-request exponential /
deterministic time. `load(name)` gives a notebook the kernels' numbers for any of them.

Forms accepted by `resolve_profile` (TOML tables, shown inline):

    {name = "dynamo-mocker"}                        a built-in, optionally with overrides
    {name = "roofline-h200-llama70b-tp4", decode_efficiency = 0.6}
    {kind = "polynomial", p2 = .., p1 = .., p0 = .., d2 = .., d1 = .., d0 = .., d_min = ..}
    {kind = "roofline", gpu = "h200", model = "llama-3.1-70b", tp = 4, dtype = "fp8", ...}
    {kind = "exponential" | "deterministic", prefill_ms = .., decode_ms = ..}
    {name = "aic-b200-llama70b-fp8-tp4-vllm"}       a shipped aiconfigurator table (poa_mc.model.aic)
    {kind = "aic", table = "my-table.json"}         a table built by `poa-mc profiles build-aic`

With `kind` present, `name` is a free label; without it, `name` must be a built-in.

The hardware and model tables below are datasheet *leads* (docs/sources.md, "Hardware", "Models"), and the roofline
efficiencies and overheads are documented defaults, not fitted to any measured result. See
docs/profiles.md for the derivation and every parameter.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from poa_mc.kernels import layout as L
from poa_mc.model.roofline import (
    DTYPE_BYTES,
    GPUS,
    MODEL_ALIASES,
    MODELS,
    ROOFLINE_DEFAULTS,
    GpuFacts,
    ModelFacts,
    kv_bytes_per_token,
    roofline_coefficients,
)
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.timing_tables import builtin_tables, for_profile
from poa_mc.model.timing_tables import load as load_table

# poa_mc.kernels.cpu is imported where it is called: importing it builds the CPU kernels' dispatchers.

# --- Dynamo 1.6.1 mocker default polynomial (docs/sources.md) -------------------------------------------------------
MOCKER_COEFFICIENTS: dict[str, float] = {
    "p2": 4.209989e-7,
    "p1": 1.518344e-2,
    "p0": 16.50142,
    "d2": -25.74,
    "d1": 54.01,
    "d0": 5.74,
    "d_min": 1.0,
}
MOCKER_SOURCE = "Dynamo 1.6.1 mocker default polynomial timing (docs/sources.md)"


def pack_profile(p: ProfileSpec) -> np.ndarray:
    """The float parameters of a timing profile (the rest of fp zero): polynomial coefficients,
    theory means, host times, and an aic profile's table region after the fixed fields."""
    fp = np.zeros(L.NF_P, dtype=np.float64)
    if p.kind == "polynomial":
        fp[L.F_P2], fp[L.F_P1], fp[L.F_P0] = p.p2, p.p1, p.p0
        fp[L.F_D2], fp[L.F_D1], fp[L.F_D0] = p.d2, p.d1, p.d0
    elif p.kind == "aic":
        region, offsets = for_profile(p.table, p.table_sha).region()
        fp[L.F_TAB] = 1.0
        fields = (
            L.F_TB_PB, L.F_TB_PU, L.F_TB_PC, L.F_TB_PV, L.F_TB_GT, L.F_TB_GV, L.F_TB_DB, L.F_TB_DC, L.F_TB_DV,
            L.F_TB_DN, L.F_TB_PN,
        )  # fmt: skip
        for f, off in zip(fields, offsets, strict=True):
            fp[f] = L.NF_P + off
        fp = np.concatenate([fp, region])
    else:
        fp[L.F_SVC] = p.prefill_ms
        fp[L.F_D0] = p.decode_ms
    fp[L.F_OVH_PASS] = p.prefill_host_pass_ms
    fp[L.F_OVH_REQ] = p.prefill_host_request_ms
    return fp


_ROOFLINE_BUILTINS: tuple[tuple[str, str, int], ...] = (
    ("llama70b", "llama-3.1-70b", 4),
    ("nemotron340b", "nemotron-4-340b", 8),
)


def _builtin_table() -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    desc = {
        "dynamo-mocker": "Dynamo 1.6.1 mocker default: prefill 4.209989e-7 T^2 + 1.518344e-2 T + 16.50142 ms, "
        "decode max(1, -25.74 u^2 + 54.01 u + 5.74) ms",
    }
    tables: dict[str, dict[str, Any]] = {"dynamo-mocker": {"kind": "polynomial", **MOCKER_COEFFICIENTS}}
    for gpu, g in GPUS.items():
        for short, model, tp in _ROOFLINE_BUILTINS:
            name = f"roofline-{gpu}-{short}-tp{tp}"
            desc[name] = (
                f"roofline lead: {MODELS[model].label} TP{tp} FP8 on {g.label} ({g.hbm_tbps} TB/s, "
                f"{g.fp8_pflops} PFLOP/s FP8), prefill eff {ROOFLINE_DEFAULTS['prefill_efficiency']}, "
                f"decode eff {ROOFLINE_DEFAULTS['decode_efficiency']}"
            )
            tables[name] = {"kind": "roofline", "gpu": gpu, "model": model, "tp": tp, "dtype": "fp8"}
    return desc, tables


def _aic_builtins() -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    import json

    desc, tables = {}, {}
    for name, path in builtin_tables().items():
        prov = json.loads(path.read_text()).get("provenance", {})
        desc[name] = (
            f"aiconfigurator {prov.get('packages', {}).get('aiconfigurator-core', '?')} measured-kernel table: "
            f"{prov.get('model', '?')} TP{prov.get('tp', '?')} on {prov.get('system', '?')}, "
            f"{prov.get('backend', '?')} {prov.get('backend_version') or ''}".rstrip()
        )
        tables[name] = {"kind": "aic", "table": name}
    return desc, tables


def _all_builtins() -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    desc, tables = _builtin_table()
    d2, t2 = _aic_builtins()
    return {**desc, **d2}, {**tables, **t2}


BUILTIN_PROFILES, _BUILTIN_TABLES = _all_builtins()

_POLY_KEYS = ("p2", "p1", "p0", "d2", "d1", "d0")
_ROOFLINE_OPTIONAL_NUM = (
    "prefill_efficiency",
    "decode_efficiency",
    "prefill_overhead_ms",
    "decode_overhead_ms",
    "d_min",
    "peak_pflops",
    "hbm_tbps",
    "params",
)
_MODEL_INT_KEYS = ("layers", "hidden", "kv_heads", "head_dim")
# Host time on a prefill worker (any kind): per scheduler pass and per request in a pass, charged
# even when a pass computes no token (docs/profiles.md gives the public measurements behind them).
HOST_KEYS = ("prefill_host_pass_ms", "prefill_host_request_ms")
_KEYS: dict[str, frozenset[str]] = {
    "polynomial": frozenset({"kind", "name", "d_min", *_POLY_KEYS, *HOST_KEYS}),
    "roofline": frozenset(
        {"kind", "name", "gpu", "model", "tp", "dtype", "kv_dtype", *_ROOFLINE_OPTIONAL_NUM, *_MODEL_INT_KEYS}
        | set(HOST_KEYS)
    ),
    "aic": frozenset({"kind", "name", "table", *HOST_KEYS}),
    "exponential": frozenset({"kind", "name", "prefill_ms", "decode_ms", *HOST_KEYS}),
    "deterministic": frozenset({"kind", "name", "prefill_ms", "decode_ms", *HOST_KEYS}),
}


# --- Table parsing helpers ------------------------------------------------------------------------------------------
def _number(table: dict, key: str, path: str, default: float | None = None) -> float:
    if key not in table:
        if default is None:
            raise SpecError(f"{path}.{key}", "missing required parameter")
        return float(default)
    v = table[key]
    # bool is an int subclass; `true` is never a meaningful timing coefficient.
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{path}.{key}", f"must be a number, got {type(v).__name__} {v!r}")
    if not np.isfinite(v):
        raise SpecError(f"{path}.{key}", f"must be finite, got {v!r}")
    return float(v)


def _positive(table: dict, key: str, path: str, default: float | None = None) -> float:
    v = _number(table, key, path, default)
    if not v > 0:
        raise SpecError(f"{path}.{key}", f"must be > 0, got {v}")
    return v


def _integer(table: dict, key: str, path: str, default: int | None = None) -> int:
    if key not in table:
        if default is None:
            raise SpecError(f"{path}.{key}", "missing required parameter")
        return default
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{path}.{key}", f"must be an integer, got {type(v).__name__} {v!r}")
    if v < 1:
        raise SpecError(f"{path}.{key}", f"must be >= 1, got {v}")
    return v


def _string(table: dict, key: str, path: str, default: str | None = None) -> str:
    if key not in table:
        if default is None:
            raise SpecError(f"{path}.{key}", "missing required parameter")
        return default
    v = table[key]
    if not isinstance(v, str):
        raise SpecError(f"{path}.{key}", f"must be a string, got {type(v).__name__} {v!r}")
    return v


def _check_keys(table: dict, kind: str, path: str) -> None:
    allowed = _KEYS[kind]
    for key in table:
        if key not in allowed:
            raise SpecError(
                f"{path}.{key}",
                f"unknown key for {'an' if kind[0] in 'aeiou' else 'a'} {kind} profile; expected one of "
                f"{', '.join(sorted(allowed))}",
            )


def _resolve_roofline(table: dict, path: str, name: str, kv_blocks: int, block_size: int) -> ProfileSpec:
    custom_gpu = "peak_pflops" in table and "hbm_tbps" in table
    custom_model = all(k in table for k in (*_MODEL_INT_KEYS, "params"))
    gpu_key = _string(table, "gpu", path, "custom" if custom_gpu else None).lower()
    if gpu_key == "custom":
        if not custom_gpu:
            raise SpecError(f"{path}.gpu", "a custom gpu needs both peak_pflops and hbm_tbps")
        gpu = GpuFacts("custom", 0.0, 0.0, 0.0, 0.0, 0.0)
    elif gpu_key in GPUS:
        gpu = GPUS[gpu_key]
    else:
        raise SpecError(f"{path}.gpu", f"unknown gpu {gpu_key!r}; expected one of {', '.join(GPUS)} (or custom)")
    model_key = _string(table, "model", path, "custom" if custom_model else None).lower()
    model_key = MODEL_ALIASES.get(model_key, model_key)
    if model_key == "custom":
        if not custom_model:
            raise SpecError(f"{path}.model", "a custom model needs layers, hidden, kv_heads, head_dim and params")
        model = ModelFacts("custom", 1, 1, 1, 1, 1, 1.0)
    elif model_key in MODELS:
        model = MODELS[model_key]
    else:
        names = ", ".join([*MODELS, *MODEL_ALIASES])
        raise SpecError(f"{path}.model", f"unknown model {model_key!r}; expected one of {names} (or custom)")
    # Individual architecture fields override the table entry (e.g. a variant with more KV heads).
    model = ModelFacts(
        model.label,
        _integer(table, "layers", path, model.layers),
        _integer(table, "hidden", path, model.hidden),
        model.heads,
        _integer(table, "kv_heads", path, model.kv_heads),
        _integer(table, "head_dim", path, model.head_dim),
        _positive(table, "params", path, model.params),
    )
    tp = _integer(table, "tp", path)
    dtype = _string(table, "dtype", path, ROOFLINE_DEFAULTS["dtype"]).lower()
    if dtype not in DTYPE_BYTES:
        raise SpecError(f"{path}.dtype", f"must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    kv_dtype = _string(table, "kv_dtype", path, dtype).lower()
    if kv_dtype not in DTYPE_BYTES:
        raise SpecError(f"{path}.kv_dtype", f"must be one of {', '.join(DTYPE_BYTES)}, got {kv_dtype!r}")
    default_peak = gpu.fp8_pflops if dtype == "fp8" else gpu.bf16_pflops
    peak_pflops = _positive(table, "peak_pflops", path, default_peak)
    hbm_tbps = _positive(table, "hbm_tbps", path, gpu.hbm_tbps)
    gpu = GpuFacts(gpu.label, gpu.hbm_gb, hbm_tbps, gpu.fp8_pflops, gpu.bf16_pflops, gpu.nvlink_tbps)
    eff = {}
    for key in ("prefill_efficiency", "decode_efficiency"):
        eff[key] = _positive(table, key, path, ROOFLINE_DEFAULTS[key])
        if eff[key] > 1:
            raise SpecError(f"{path}.{key}", f"is a fraction of peak and must be <= 1, got {eff[key]}")
    over = {}
    for key in ("prefill_overhead_ms", "decode_overhead_ms"):
        over[key] = _number(table, key, path, ROOFLINE_DEFAULTS[key])
        if over[key] < 0:
            raise SpecError(f"{path}.{key}", f"must be >= 0 ms, got {over[key]}")
    coeffs = roofline_coefficients(
        gpu,
        model,
        tp,
        weight_bytes=DTYPE_BYTES[dtype],
        kv_bytes=kv_bytes_per_token(model, DTYPE_BYTES[kv_dtype]),
        kv_blocks=kv_blocks,
        block_size=block_size,
        peak_flops=peak_pflops * 1e15,
        **eff,
        **over,
    )
    # With d2 = 0 and d1 >= 0 the step time never drops below d0, so d0 is the natural clamp.
    d_min = _number(table, "d_min", path, coeffs["d0"])
    if d_min > coeffs["d0"]:
        raise SpecError(
            f"{path}.d_min", f"must be <= the weights-read step time d0 = {coeffs['d0']:.6g} ms, got {d_min}"
        )
    source = (
        f"roofline lead (docs/profiles.md): {model.label} TP{tp} {dtype} on {gpu.label} "
        f"(peak {peak_pflops} PFLOP/s, HBM {hbm_tbps} TB/s), prefill eff {eff['prefill_efficiency']}, "
        f"decode eff {eff['decode_efficiency']}, kv_blocks {kv_blocks} x {block_size}; not fitted"
    )
    return ProfileSpec(name=name, kind="polynomial", d_min=d_min, source=source, **coeffs)


# --- Public API ------------------------------------------------------------------------------------------------------
def _resolve_aic(table: dict, path: str, name: str, base_dir: Any) -> ProfileSpec:

    ref = _string(table, "table", path)
    t = load_table(ref, base_dir, f"{path}.table")
    prov = t.provenance
    pkgs = prov.get("packages", {})
    source = (
        f"aiconfigurator {pkgs.get('aiconfigurator-core', '?')} table {ref!r}: {prov.get('model', '?')} TP"
        f"{prov.get('tp', '?')} on {prov.get('system', '?')}, {prov.get('backend', '?')} "
        f"{prov.get('backend_version') or ''}".rstrip()
    )
    return ProfileSpec(name=name, kind="aic", table=ref, table_sha=t.sha, source=source)


def resolve_profile(
    table: dict, path: str = "profile", *, kv_blocks: int = 16384, block_size: int = 64, base_dir: Any = None
) -> ProfileSpec:
    """Resolve a profile table (built-in name with overrides, or an explicit kind) to a validated ProfileSpec.

    kv_blocks and block_size are those of the worker whose decode steps the profile times (the decode
    worker); the roofline decode slope d1 is per unit of u = context / (kv_blocks * block_size).
    An aic profile's table file is read relative to base_dir (the grid file's directory).
    Raises SpecError naming `path.key` for unknown keys, wrong types and missing parameters.
    """
    if not isinstance(table, dict):
        raise SpecError(path, f"must be a table, got {type(table).__name__}")
    for key, v in (("kv_blocks", kv_blocks), ("block_size", block_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"{path}.{key}", f"must be a positive integer, got {v!r}")
    table = dict(table)
    from_mocker = False
    if "kind" not in table:
        name = _string(table, "name", path)
        if name not in _BUILTIN_TABLES:
            raise SpecError(
                f"{path}.name",
                f"unknown built-in profile {name!r}; expected one of {', '.join(BUILTIN_PROFILES)} "
                "(or give a kind to describe one)",
            )
        overrides = {k: v for k, v in table.items() if k != "name"}
        base = _BUILTIN_TABLES[name]
        kind = base["kind"]
        _check_keys(overrides, kind, path)
        # Label overridden variants distinctly so grids sweeping an override keep cells apart.
        label = name if not overrides else name + "[" + ",".join(f"{k}={overrides[k]}" for k in sorted(overrides)) + "]"
        table = {**base, **overrides, "name": label}
        from_mocker = name == "dynamo-mocker"
    kind = _string(table, "kind", path)
    if kind not in _KEYS:
        raise SpecError(f"{path}.kind", f"unknown profile kind {kind!r}; expected one of {', '.join(_KEYS)}")
    _check_keys(table, kind, path)
    name = _string(table, "name", path, kind)
    if kind == "polynomial":
        coeffs = {k: _number(table, k, path) for k in _POLY_KEYS}
        d_min = _number(table, "d_min", path, MOCKER_COEFFICIENTS["d_min"])
        source = MOCKER_SOURCE if from_mocker else "user polynomial"
        if from_mocker and name != "dynamo-mocker":
            source += " with overrides"
        spec = ProfileSpec(name=name, kind=kind, d_min=d_min, source=source, **coeffs)
    elif kind == "roofline":
        spec = _resolve_roofline(table, path, name, kv_blocks, block_size)
    elif kind == "aic":
        spec = _resolve_aic(table, path, name, base_dir)
    else:
        prefill = _positive(table, "prefill_ms", path)
        decode = _number(table, "decode_ms", path)
        spec = ProfileSpec(name=name, kind=kind, prefill_ms=prefill, decode_ms=decode, source=f"user {kind} profile")
    host = {k: _number(table, k, path, 0.0) for k in HOST_KEYS}
    if any(host.values()):
        spec = dataclasses.replace(spec, **host)
    spec.validate(path)
    return spec


def prefill_ms(profile: ProfileSpec, tokens: Any) -> Any:
    """Time (ms) of a prefill pass of `tokens` uncached tokens; 0 for 0 tokens.

    For exponential / deterministic profiles this is the mean time of one request's pass; for an
    aic profile, the pass of one request with nothing cached (its table's batch 1). Scalars in,
    float out; arrays in, array out.
    """
    t = np.asarray(tokens, dtype=np.float64)
    if profile.kind == "polynomial":
        out = np.where(t > 0, (profile.p2 * t + profile.p1) * t + profile.p0, 0.0)
    elif profile.kind == "aic":
        out = np.where(t > 0, _timing(profile, 16384, 64).prefill_ms(1, np.maximum(t, 1.0), 0), 0.0)
    else:
        out = np.where(t > 0, profile.prefill_ms, 0.0)
    return float(out) if out.ndim == 0 else out


def decode_ms(profile: ProfileSpec, context_tokens: Any, kv_blocks: int, block_size: int) -> Any:
    """Time (ms) of one decode step whose running sequences hold `context_tokens` in total.

    u = min(1, context / (kv_blocks * block_size)); the polynomial is clamped below at d_min as the
    mocker does. An aic profile's step depends on the batch too, which this view does not know: it
    prices one sequence holding the whole context (its table's batch 1, a lower bound on the step
    of more sequences holding as much). Scalars in, float out; arrays in, array out.
    """
    c = np.asarray(context_tokens, dtype=np.float64)
    if profile.kind == "polynomial":
        u = np.minimum(1.0, c / float(kv_blocks * block_size))
        out = np.maximum(profile.d_min, (profile.d2 * u + profile.d1) * u + profile.d0)
    elif profile.kind == "aic":
        out = np.asarray(_timing(profile, kv_blocks, block_size).decode_ms(1, c), dtype=np.float64)
    else:
        out = np.full_like(c, profile.decode_ms)
    return float(out) if out.ndim == 0 else out


class Timing:
    """A profile's pass and step times as the kernels compute them: the timing functions of
    poa_mc/kernels/timing.py compiled for the CPU, on the parameters the engine packs for a cell.

    `kv_blocks` and `block_size` are the decode worker's (the polynomial's u = 1 is their product).
    For exponential / deterministic profiles the kernels draw each request's pass; `prefill_ms` is
    its mean and ignores the batch (they serve one request per pass).
    """

    def __init__(self, profile: ProfileSpec, kv_blocks: int = 16384, block_size: int = 64) -> None:
        self.profile = profile
        self.kv_blocks = kv_blocks
        self.block_size = block_size
        self._fp = pack_profile(profile)

    def prefill_ms(self, batch: Any, uncached_tokens: Any, cached_tokens: Any = 0) -> Any:
        """A prefill pass of `batch` requests, each computing `uncached_tokens` new tokens on top of
        `cached_tokens` cached (or already computed) ones. Arrays broadcast; 0 ms for no new token."""
        b, u, c = np.broadcast_arrays(
            *(np.rint(np.asarray(x, dtype=np.float64)) for x in (batch, uncached_tokens, cached_tokens))
        )
        if np.any(b < 1) or np.any(u < 0) or np.any(c < 0):
            raise ValueError("batch must be >= 1 and token counts >= 0")
        if not self.profile.pass_timed():
            out = np.where(u > 0, self.profile.prefill_ms, 0.0)
        else:
            from poa_mc.kernels.cpu import timing_passes

            out = np.empty(b.size)
            timing_passes(self._fp, *(x.ravel().astype(np.int64) for x in (b, u, c)), out)
            out = out.reshape(b.shape)
        return float(out) if out.ndim == 0 else out

    def decode_ms(self, batch: Any, context_tokens: Any) -> Any:
        """A decode step of `batch` sequences whose context is `context_tokens` tokens each."""
        b, x = np.broadcast_arrays(
            np.rint(np.asarray(batch, dtype=np.float64)), np.asarray(context_tokens, dtype=np.float64)
        )
        if np.any(b < 1) or np.any(x < 0):
            raise ValueError("batch must be >= 1 and context >= 0")
        if not self.profile.pass_timed():
            out = np.full(b.shape, self.profile.decode_ms)
        else:
            from poa_mc.kernels.cpu import timing_steps

            out = np.empty(b.size)
            cap = float(self.kv_blocks * self.block_size)
            timing_steps(self._fp, b.ravel().astype(np.int64), x.ravel().copy(), cap, out)
            out = out.reshape(b.shape)
        return float(out) if out.ndim == 0 else out


@functools.lru_cache(maxsize=16)
def _timing(profile: ProfileSpec, kv_blocks: int, block_size: int) -> Timing:
    """A Timing per resolved profile (packing an aic table's region costs a copy of it)."""
    return Timing(profile, kv_blocks, block_size)


def load(name: str, *, kv_blocks: int = 16384, block_size: int = 64, **overrides: Any) -> Timing:
    """A built-in profile (or `kind=...` with its parameters, as in a grid's [profile] table) for a
    notebook: `load("aic-b200-llama70b-fp8-tp4-vllm").decode_ms(64, 2048)`."""
    table = {"name": name, **overrides}
    return Timing(resolve_profile(table, kv_blocks=kv_blocks, block_size=block_size), kv_blocks, block_size)
