"""The grid file's [cluster] and [profile] tables: the hardware every cell shares.

[cluster] is the worker template (KV capacity, block size, request flow; the worker counts come
from the grid's topologies). [profile] is the timing profile, resolved by poa_mc.model.profiles;
it is parsed after the cluster because a roofline profile's decode slopes are per unit of the
decode worker's KV capacity.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

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


def parse_cluster(doc: dict) -> ClusterSpec:
    table = read_table(doc, "cluster", "cluster")
    for key in ("n_prefill", "n_decode"):
        if key in table:
            raise ConfigError(f"cluster.{key}", 'worker counts come from grid.topology ("xP/yD")')
    spec = ClusterSpec(**read_fields(table, _CLUSTER_FIELDS, "cluster"))
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
