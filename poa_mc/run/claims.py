"""Which process simulates which cell when several run into one directory at once (a second
`poa-mc run`, overlapping shards): each cell is claimed (poa_mc.io.store.RunDir.claim, an flock
held until its files are written or the process ends), so no two processes ever simulate or
write one cell at once, and a cell another process completed meanwhile is taken as done."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from poa_mc.io.store import CellClaim, RunDir

POLL_S = 0.1  # how often a run looks again at the cells other processes hold


class Claims:
    """The cells this process holds, for a run of fingerprint `fp` (sim key `key`) that started at
    `started_ns` (time.time_ns())."""

    def __init__(self, run_dir: RunDir, fp: str, key: str, started_ns: int) -> None:
        self.run_dir, self.fp, self.key, self.started_ns = run_dir, fp, key, started_ns
        self._held: dict[str, CellClaim] = {}

    def finished_elsewhere(self, cid: str) -> bool:
        """Another process completed the cell since this run started: this run takes it as done (a
        cell complete before, and still to do, is one this run redoes: damaged, stale, or any
        cell of a run without --resume)."""
        meta = self.run_dir.read_meta(cid) or {}
        if meta.get("fingerprint") != self.fp and meta.get("sim_key") != self.key:
            return False
        try:
            written = self.run_dir.acc_path(cid).stat().st_mtime_ns
        except FileNotFoundError:
            return False
        return written >= self.started_ns and self.run_dir.cell_damage(cid) is None

    def cells(self, todo: list[Any], skipped: list[str], on_wait: Callable[[], None]) -> Iterator[Any]:
        """The cells of `todo` to simulate, each claimed until `release`: first those no other
        process holds, then, polling, the others (`on_wait()` once, before the first wait); the
        ids of cells another process completed go to `skipped`."""
        deferred = []
        for cell in todo:
            if not self._take(cell, skipped):
                deferred.append(cell)
            elif cell.cell_id in self._held:
                yield cell
        if deferred:
            on_wait()
        while deferred:
            for cell in list(deferred):
                if self._take(cell, skipped):
                    deferred.remove(cell)
                    if cell.cell_id in self._held:  # the other process ended without it: this one runs it
                        yield cell
            if deferred:
                time.sleep(POLL_S)

    def _take(self, cell: Any, skipped: list[str]) -> bool:
        """Try to claim `cell`: False while another process holds it; True once settled (held by
        this process now, or completed elsewhere and put in `skipped`)."""
        claim = self.run_dir.claim(cell.cell_id)
        if claim is None:
            return False
        if self.finished_elsewhere(cell.cell_id):
            claim.release()
            skipped.append(cell.cell_id)
        else:
            self._held[cell.cell_id] = claim
        return True

    def release(self, cid: str) -> None:
        claim = self._held.pop(cid, None)
        if claim is not None:
            claim.release()

    def release_all(self) -> None:
        for cid in list(self._held):
            self.release(cid)
