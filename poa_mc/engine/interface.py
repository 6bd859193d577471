"""What the runner asks of an engine: `simulate`'s call, declared once. The engine
(poa_mc.engine.engine.simulate) implements it, and so does the test double (tests/fake_engine.py);
tests/test_runner.py checks that the two signatures agree, so the runner never asks a simulate
which arguments it takes.

An engine may leave the streaming arguments unused: a result without `reduced` is reduced by the
runner from its whole samples, a result without `pending` has nothing left running."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol

from poa_mc.model.spec import CellSpec


class Simulate(Protocol):
    def __call__(
        self,
        spec: CellSpec,
        *,
        replicas: int,
        requests: int,
        warmup: int,
        seed: int,
        stream: int,
        backend: str = "cpu",
        record_candidates: bool = True,
        drain: bool = False,
        keep: int | None = None,
        reduce: Any = None,
        overlap: bool = False,
        after: Future | None = None,
        tally: bool = False,
        slo: dict[str, float] | None = None,
        poa: dict[str, Any] | None = None,
    ) -> Any: ...
