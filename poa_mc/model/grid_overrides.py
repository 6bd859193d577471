"""`KEY=VALUE` overrides of a grid document (the command line's `--set`).

They are applied to the parsed TOML document before it is validated, so an overridden value is
checked exactly as if it had been written in the file.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import tomllib

from poa_mc.model.sections import ConfigError

_SET_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)(?:\[(\d+)\])?$")


def _set_value(text: str) -> Any:
    """A --set value as TOML reads it (8, 0.5, true, [1, 2], "x"); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(doc: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """`KEY=VALUE` assignments (dotted key paths, `policy[1].temperature=0.5`) applied to a parsed
    grid document, before it is validated, so an override is checked exactly like the file.
    Raises ConfigError naming the override on a malformed one."""
    doc = copy.deepcopy(doc)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("--set", f"{item!r} is not KEY=VALUE (e.g. run.replicas=8)")
        node: Any = doc
        parts = key.split(".")
        for depth, part in enumerate(parts):
            m = _SET_SEGMENT.match(part)
            if not m:
                raise ConfigError(f"--set {key}", f"{part!r} is not a key name or name[index]")
            name, index = m.group(1), m.group(2)
            last = depth == len(parts) - 1
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}", f"{'.'.join(parts[:depth])} is not a table")
            if index is None:
                if last:
                    node[name] = _set_value(text.strip())
                else:
                    node = node.setdefault(name, {})
                continue
            seq = node.get(name)
            if not isinstance(seq, list) or int(index) >= len(seq):
                have = len(seq) if isinstance(seq, list) else 0
                raise ConfigError(f"--set {key}", f"no {name}[{index}]: the grid has {have}")
            if last:
                seq[int(index)] = _set_value(text.strip())
            else:
                node = seq[int(index)]
    return doc
