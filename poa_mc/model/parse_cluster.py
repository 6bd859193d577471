"""The grid file's [cluster] and [profile] tables: the hardware every cell shares.

[cluster] is the worker template (KV capacity, block size, request flow; the worker counts come
from the grid's topologies). [profile] is the timing profile, resolved by poa_mc.model.profiles;
it is parsed after the cluster because a roofline profile's decode slopes are per unit of the
decode worker's KV capacity.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from poa_mc.model import roofline
from poa_mc.model.profiles import resolve_profile
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.toml_fields import read_fields, read_table

_CLUSTER_FIELDS = {
    f.name: (float if isinstance(f.default, float) else type(f.default), f.default)
    for f in dataclasses.fields(ClusterSpec)
    if f.name not in ("n_prefill", "n_decode")
}


_KV_FROM_FIELDS = {"gpu": (str, None), "model": (str, None), "tp": (int, None), "dtype": (str, "fp8"),
                   "kv_dtype": (str, None), "memory_fraction": (float, 0.9)}  # fmt: skip


def _kv_blocks_from(table: dict, block_size: int) -> int:
    """A worker's KV blocks from its GPU, model, tensor-parallel size and the share of GPU memory
    vLLM may use (`[cluster.kv_from]`, poa_mc.model.roofline): the memory left after the weights,
    in blocks of `block_size` tokens (activations ignored: a lead, docs/grid.md)."""
    path = "cluster.kv_from"
    if not isinstance(table, dict):
        raise ConfigError(path, f"must be a table {{gpu, model, tp[, dtype, memory_fraction]}}, got {table!r}")
    f = read_fields(table, _KV_FROM_FIELDS, path)
    for key in ("gpu", "model", "tp"):
        if f[key] is None:
            raise ConfigError(f"{path}.{key}", "required")
    gpu, model = f["gpu"].lower(), roofline.MODEL_ALIASES.get(f["model"].lower(), f["model"].lower())
    if gpu not in roofline.GPUS:
        raise ConfigError(f"{path}.gpu", f"must be one of {', '.join(roofline.GPUS)}, got {f['gpu']!r}")
    if model not in roofline.MODELS:
        names = ", ".join([*roofline.MODELS, *roofline.MODEL_ALIASES])
        raise ConfigError(f"{path}.model", f"must be one of {names}, got {f['model']!r}")
    if f["tp"] < 1:
        raise ConfigError(f"{path}.tp", f"must be >= 1, got {f['tp']}")
    for key in ("dtype", "kv_dtype"):
        if f[key] is not None and f[key] not in roofline.DTYPE_BYTES:
            raise ConfigError(f"{path}.{key}", f"must be one of {', '.join(roofline.DTYPE_BYTES)}, got {f[key]!r}")
    if not 0.0 < f["memory_fraction"] <= 1.0:
        raise ConfigError(f"{path}.memory_fraction", f"must be within (0, 1], got {f['memory_fraction']}")
    blocks = roofline.roofline_kv_capacity_blocks(
        gpu, model, f["tp"], dtype=f["dtype"], block_size=block_size, memory_fraction=f["memory_fraction"],
        kv_dtype=f["kv_dtype"],
    )  # fmt: skip
    if blocks < 1:
        raise ConfigError(path, f"the weights of {model} leave no KV memory on {f['tp']} x {gpu}")
    return blocks


def parse_cluster(doc: dict) -> ClusterSpec:
    table = dict(read_table(doc, "cluster", "cluster"))
    for key in ("n_prefill", "n_decode"):
        if key in table:
            raise ConfigError(f"cluster.{key}", 'worker counts come from grid.topology ("xP/yD")')
    for key in ("transfer_gbps", "node_nic_gbps"):  # an interconnect by name (poa_mc.model.roofline)
        if isinstance(table.get(key), str):
            name = table[key].lower()
            if name not in roofline.INTERCONNECTS:
                names = ", ".join(roofline.INTERCONNECTS)
                raise ConfigError(f"cluster.{key}", f"a bandwidth in GB/s or one of {names}, got {table[key]!r}")
            table[key] = roofline.INTERCONNECTS[name]
    kv_from = table.pop("kv_from", None)
    if kv_from is not None:
        for key in ("prefill_kv_blocks", "decode_kv_blocks"):
            if key in table:
                raise ConfigError(f"cluster.{key}", "given twice: cluster.kv_from derives it; drop one of them")
    fields = read_fields(table, _CLUSTER_FIELDS, "cluster")
    if kv_from is not None:
        fields["prefill_kv_blocks"] = fields["decode_kv_blocks"] = _kv_blocks_from(kv_from, fields["block_size"])
    spec = ClusterSpec(**fields)
    try:
        spec.validate("cluster")  # before the profile reads block_size, so its errors name cluster.*
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return spec


def parse_profile(doc: dict, cluster: ClusterSpec | None = None, base_dir: Path | None = None) -> ProfileSpec:
    """The [profile] table through poa_mc.model.profiles; roofline decode slopes are per unit of the
    decode worker's KV capacity, hence the cluster's decode_kv_blocks and block_size; an aic
    profile's table file is read relative to the grid file's directory."""
    table = read_table(doc, "profile", "profile")
    if not table:
        table = {"name": "dynamo-mocker"}

    try:
        if cluster is not None:
            profile = resolve_profile(
                table,
                "profile",
                kv_blocks=cluster.decode_kv_blocks,
                block_size=cluster.block_size,
                base_dir=base_dir,
            )
        else:
            profile = resolve_profile(table, "profile", base_dir=base_dir)
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError("profile", str(e)) from None
    return profile
