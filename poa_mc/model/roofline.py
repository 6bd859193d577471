"""GPUs, models and the roofline: datasheet figures (leads, docs/sources.md "Hardware", "Models") and
the formulas that turn them into timing coefficients and KV sizes. The profile parser
(poa_mc.model.profiles) resolves `roofline-*` profiles with them; nothing here reads a grid file.
Efficiencies and overheads are documented defaults, not fitted to any measured result
(docs/profiles.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


# --- Hardware and model tables: datasheet LEADS (docs/sources.md), not measurements ----------------------------------
@dataclass(frozen=True)
class GpuFacts:
    """One GPU's datasheet figures (leads). Bandwidth in TB/s, peaks in dense PFLOP/s."""

    label: str
    hbm_gb: float
    hbm_tbps: float
    fp8_pflops: float
    bf16_pflops: float
    nvlink_tbps: float


@dataclass(frozen=True)
class ModelFacts:
    """One model's architecture figures. `params` is the total parameter count."""

    label: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    params: float


GPUS: dict[str, GpuFacts] = {
    "b200": GpuFacts("B200 (HGX)", 192.0, 8.0, 4.5, 2.25, 1.8),
    "h200": GpuFacts("H200 SXM", 141.0, 4.8, 1.98, 0.99, 0.9),
    "h100": GpuFacts("H100 SXM", 80.0, 3.35, 1.98, 0.99, 0.9),
}

MODELS: dict[str, ModelFacts] = {
    "llama-3.1-70b": ModelFacts("Llama-3.1-70B", 80, 8192, 64, 8, 128, 70.6e9),
    "nemotron-4-340b": ModelFacts("Nemotron-4-340B", 96, 18432, 96, 8, 192, 341e9),
}
# Short spellings used in built-in names and accepted in tables.
MODEL_ALIASES: dict[str, str] = {"llama70b": "llama-3.1-70b", "nemotron340b": "nemotron-4-340b"}

DTYPE_BYTES: dict[str, int] = {"fp8": 1, "bf16": 2}

# Roofline defaults. Lead figures chosen as typical achieved fractions of peak; NOT fitted to any result.
ROOFLINE_DEFAULTS: dict[str, Any] = {
    "dtype": "fp8",
    "prefill_efficiency": 0.5,  # fraction of dense peak FLOP/s a prefill pass achieves (incl. TP comms)
    "decode_efficiency": 0.7,  # fraction of HBM bandwidth a decode step achieves
    "prefill_overhead_ms": 5.0,  # fixed cost per prefill pass: scheduling, launches, sampling (p0)
    "decode_overhead_ms": 2.0,  # fixed cost per decode step: launches, ~2 TP all-reduces per layer
}


# --- Roofline --------------------------------------------------------------------------------------------------------
def kv_bytes_per_token(model: ModelFacts, kv_bytes_per_elem: float) -> float:
    """Bytes of K and V cache per token over the whole model: 2 * layers * kv_heads * head_dim * bytes."""
    return 2.0 * model.layers * model.kv_heads * model.head_dim * kv_bytes_per_elem


def roofline_coefficients(
    gpu: GpuFacts,
    model: ModelFacts,
    tp: int,
    *,
    weight_bytes: float,
    kv_bytes: float,
    kv_blocks: int,
    block_size: int,
    peak_flops: float,
    prefill_efficiency: float,
    decode_efficiency: float,
    prefill_overhead_ms: float,
    decode_overhead_ms: float,
) -> dict[str, float]:
    """Polynomial coefficients (ms) of a roofline profile; see docs/profiles.md for the derivation.

    Prefill: FLOPs(T) = 2*params*T + 4*layers*hidden*T*ctx with ctx = T/2 (causal average over a fresh
    chunk), i.e. 2*params*T + 2*layers*hidden*T^2, spread over tp GPUs at peak*eff each.
    Decode: each GPU reads its weight shard and its share of every running sequence's KV once per step.
    """
    flops_rate = tp * peak_flops * prefill_efficiency  # FLOP/s of the whole TP group
    p1 = 2.0 * model.params / flops_rate * 1e3
    p2 = 2.0 * model.layers * model.hidden / flops_rate * 1e3
    # Whole-group bandwidth is tp * bw; KV heads are split over min(tp, kv_heads) GPUs and replicated
    # beyond that, so with tp > kv_heads the KV bytes read per step grow accordingly.
    bytes_rate = tp * gpu.hbm_tbps * 1e12 * decode_efficiency
    kv_read_factor = tp / min(tp, model.kv_heads)
    capacity_tokens = kv_blocks * block_size
    d1 = capacity_tokens * kv_bytes * kv_read_factor / bytes_rate * 1e3
    d0 = model.params * weight_bytes / bytes_rate * 1e3 + decode_overhead_ms
    return {"p2": p2, "p1": p1, "p0": prefill_overhead_ms, "d2": 0.0, "d1": d1, "d0": d0}


def roofline_kv_capacity_blocks(
    gpu: str,
    model: str,
    tp: int,
    *,
    dtype: str = "fp8",
    block_size: int = 64,
    memory_fraction: float = 0.9,
    kv_dtype: str | None = None,
) -> int:
    """Blocks of KV cache a TP group of `gpu` can hold after the weights (a lead, for choosing kv_blocks).

    memory_fraction of HBM is usable (vLLM's gpu_memory_utilization default); activations are
    ignored. Weights in `dtype`, the KV cache in `kv_dtype` (default: `dtype`).
    """
    g, m = GPUS[gpu.lower()], MODELS[MODEL_ALIASES.get(model.lower(), model.lower())]
    free = tp * g.hbm_gb * 1e9 * memory_fraction - m.params * DTYPE_BYTES[dtype]
    # Beyond tp = kv_heads the KV heads are replicated, so each token costs more memory in total.
    kv_bytes = DTYPE_BYTES[kv_dtype or dtype]
    per_block = kv_bytes_per_token(m, kv_bytes) * block_size * tp / min(tp, m.kv_heads)
    return max(0, int(free // per_block))


# Interconnect leads for transfer_gbps and node_nic_gbps, GB/s one way (docs/sources.md,
# "Interconnects"): NVLink per GPU, network links per port
INTERCONNECTS: dict[str, float] = {
    "nvlink3": 300.0,  # A100: 600 GB/s bidirectional
    "nvlink4": 450.0,  # H100, H200: 900 GB/s bidirectional
    "nvlink5": 900.0,  # B200: 1.8 TB/s bidirectional
    "ib-ndr": 50.0,  # InfiniBand NDR, 400 Gb/s a port (ConnectX-7)
    "ib-xdr": 100.0,  # InfiniBand XDR, 800 Gb/s a port (ConnectX-8)
    "roce-400": 50.0,  # 400 GbE RoCE (Spectrum-X, ConnectX-7)
}
