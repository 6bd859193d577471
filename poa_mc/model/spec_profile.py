"""The timing model of a cell's workers (`ProfileSpec`), as the kernels evaluate it.

Part of the cell's spec (poa_mc/model/spec.py assembles the parts into a `CellSpec`). The profile
kinds come from the one table in poa_mc/kernels/layout.py; poa_mc/model/profiles.py resolves
built-in and user-described profiles to this spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from poa_mc.kernels.layout import PROF_POLY, PROFILE_ID
from poa_mc.model.spec_error import SpecError


@dataclass(frozen=True)
class ProfileSpec:
    """A timing model reduced to what the kernels evaluate.

    kind "polynomial" (dynamo-mocker and roofline resolve to this):
      prefill pass of T uncached tokens: p2*T^2 + p1*T + p0 ms (no time when T == 0);
      decode step: d2*u^2 + d1*u + d0 ms, u = min(1, context tokens / (kv_blocks * block_size)).
    kind "exponential" / "deterministic": one request per prefill pass, taking an exponential
      (or fixed) time of mean prefill_ms; each decode step takes decode_ms (0 allowed).
    kind "aic": pass and step times interpolated in a timing table (poa_mc.model.timing_tables), named
      by `table` (a shipped table or a file) and pinned by its digest `table_sha`.
    """

    name: str = "dynamo-mocker"
    kind: str = "polynomial"
    p2: float = 4.209989e-7
    p1: float = 1.518344e-2
    p0: float = 16.50142
    d2: float = -25.74
    d1: float = 54.01
    d0: float = 5.74
    d_min: float = 1.0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    prefill_host_pass_ms: float = 0.0
    prefill_host_request_ms: float = 0.0
    source: str = "Dynamo 1.6.1 mocker default polynomial timing (docs/sources.md)"
    table: str = ""
    table_sha: str = ""

    def pass_timed(self) -> bool:
        """Priced per pass and step (the polynomial, a table), not a theory kind's service times."""
        return PROFILE_ID[self.kind] == PROF_POLY

    def validate(self, path: str = "profile") -> None:
        if self.kind not in PROFILE_ID:
            raise SpecError(f"{path}.kind", f"unknown profile kind {self.kind!r}")
        if self.kind == "polynomial":
            # The closed-form decode jump needs the quadratic itself (not the d_min clamp) on [0, 1].
            lo = min(self.d0, self.d2 + self.d1 + self.d0)
            if self.d2 > 0:
                u = -self.d1 / (2 * self.d2)
                if 0 < u < 1:
                    lo = min(lo, self.d2 * u * u + self.d1 * u + self.d0)
            if lo < self.d_min:
                raise SpecError(
                    f"{path}.d0", f"decode step polynomial falls below d_min={self.d_min} ms on u in [0, 1]"
                )
            # PoA-hat >= 1 under slot pricing (poa_mc.stats.poa_hat) needs every cost non-decreasing in
            # the load. The decode step's variable is u = min(1, context / capacity) in [0, 1] (context
            # >= 0): the quadratic is non-decreasing there iff its slope d1 + 2 d2 u is >= 0 at both ends.
            if not self.d1 >= 0:
                raise SpecError(
                    f"{path}.d1", f"must be >= 0 (the decode step may not fall as u grows from 0), got {self.d1}"
                )
            if not self.d1 + 2 * self.d2 >= 0:
                raise SpecError(
                    f"{path}.d2",
                    f"d1 + 2*d2 must be >= 0 (the decode step may not fall as u nears 1), got {self.d1 + 2 * self.d2}",
                )
            # The prefill pass over T >= 0 tokens (0 ms at T = 0): non-decreasing when every
            # coefficient is >= 0, which the ttft cost relies on as well.
            for name in ("p0", "p1", "p2"):
                if not getattr(self, name) >= 0:
                    raise SpecError(f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")
        for name in ("prefill_host_pass_ms", "prefill_host_request_ms"):
            if not getattr(self, name) >= 0:
                raise SpecError(f"{path}.{name}", f"must be >= 0 ms, got {getattr(self, name)}")
        if self.kind == "aic":
            if not self.table or not self.table_sha:
                raise SpecError(f"{path}.table", "an aic profile needs its table")
        elif self.kind != "polynomial":
            if not self.prefill_ms > 0:
                raise SpecError(f"{path}.prefill_ms", f"must be > 0 ms, got {self.prefill_ms}")
            if not self.decode_ms >= 0:
                raise SpecError(f"{path}.decode_ms", f"must be >= 0 ms, got {self.decode_ms}")
