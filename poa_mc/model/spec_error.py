"""The error every spec raises: `SpecError`, naming the offending field path.

It sits in a module of its own, below the spec modules (spec_workload, spec_profile, spec_policy,
spec_cluster, spec_planner, spec), so that each of them, and the parsers, traces and timing tables
that check their input, can raise it without importing one another.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A configuration that cannot run. `path` names the offending field (e.g. `workload.isl`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
