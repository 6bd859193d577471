"""A run's figures drawn in two worker processes that start, and load matplotlib, with the run.

Drawing the figures is the last thing `poa-mc run` does, and on a small grid it was most of the
run: the quickstart's six figures took about 4 s of its 8 s on 2 cores (bench/NOTES.md,
2026-12-03), one after the other under one GIL, after importing matplotlib. Workers started as
the run starts import matplotlib and draw a small figure while the run works, then draw the
figures two at a time at the end. What they draw is `figures.draw_figure`, the function that draws
a figure in-process, from the run's files, so the PNGs are the same to the byte.

Their start-up must not slow the run: a worker runs at the lowest priority (nice 19), so that
it takes only the CPU the run leaves idle (single-threaded start-up, gaps between batches), and in
a process group of its own (a Ctrl-C at the terminal reaches the run alone), not a session of
its own: Linux schedules each session as one group (autogroup), in which nice levels no longer
yield to the run.

The protocol is one JSON line per figure on a worker's stdin ({"root": DIR, "name": FILE}) and one
JSON line back on its stdout ({"path": PATH}, {"path": null} for nothing to draw, or {"error":
MESSAGE}). A worker leaves at the end of its input, so it leaves with the process that started it
however that one ends: the pipe closes with it. A figure whose worker went away is drawn
in-process. POA_MC_FIGURE_WORKERS sets how many workers a run starts (0: none, every figure drawn
in-process; default 2 where at least 2 CPUs are free to the run, else 0).

    python -m poa_mc.plots.figure_workers     # a worker (started by FigureWorkers, not by hand)
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

WORKERS = 2  # drawing two at a time; more were not measured (bench/NOTES.md)
_ENV = "POA_MC_FIGURE_WORKERS"
# A process group of its own keeps a Ctrl-C at the terminal from the workers; process_group is
# Python 3.11's (3.10 gets a session of its own, where nice 19 yields less: module docstring).
if os.name != "posix":
    _OWN_GROUP: dict = {}
elif sys.version_info >= (3, 11):
    _OWN_GROUP = {"process_group": 0}
else:
    _OWN_GROUP = {"start_new_session": True}


def start(plotting: bool = True) -> AbstractContextManager:
    """FigureWorkers for a run that will draw its figures (a context manager that ends them), or
    a context of None where it starts none (figures drawn in-process): see the module docstring.
    Raises ValueError for a POA_MC_FIGURE_WORKERS that is not a whole number >= 0."""
    count = worker_count()
    if not plotting or count == 0:
        return nullcontext(None)
    return FigureWorkers(count)


def worker_count() -> int:
    """Workers a run starts: POA_MC_FIGURE_WORKERS, else WORKERS where 2 CPUs or more are free to
    the process (a worker on a machine with one would only take the run's CPU)."""
    raw = os.environ.get(_ENV, "").strip()
    if raw:
        if not raw.isdigit():
            raise ValueError(f"{_ENV}={raw!r}: must be a whole number of worker processes (0: none)")
        return int(raw)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return WORKERS if cpus >= 2 else 0


class FigureWorkers:
    """Up to `count` worker processes, started now; `draw` hands them figures, `close` ends them."""

    def __init__(self, count: int = WORKERS) -> None:
        self._procs: list[subprocess.Popen] = []
        for _ in range(count):
            try:
                self._procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "poa_mc.plots.figure_workers"],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                        bufsize=1,
                        **_OWN_GROUP,
                    )
                )
            except OSError:  # no process to spare: the figures are drawn in-process instead
                break
            try:  # its start-up takes only the CPU the run leaves idle
                os.setpriority(os.PRIO_PROCESS, self._procs[-1].pid, 19)
            except (AttributeError, OSError):
                pass

    def __enter__(self) -> FigureWorkers:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        self.close(kill=kind is not None)

    @property
    def count(self) -> int:
        return len(self._procs)

    def draw(self, root: str | Path, names: list[str]) -> list[Path | None]:
        """Draw each named figure of the run in DIR (figures.draw_figure) on the workers; the paths
        in the order of `names`. A figure whose worker went away is drawn in-process. Raises
        RuntimeError with the first failure in that order, after every figure was tried."""
        jobs: queue.SimpleQueue = queue.SimpleQueue()
        for job in enumerate(names):
            jobs.put(job)
        results: list[Path | None] = [None] * len(names)
        errors: dict[int, str] = {}
        left: list[tuple[int, str]] = []  # figures whose worker went away

        def feed(proc: subprocess.Popen) -> None:
            while True:
                try:
                    i, name = jobs.get_nowait()
                except queue.Empty:
                    return
                reply = _ask(proc, {"root": str(root), "name": name})
                if reply is None:
                    left.append((i, name))
                    return
                if "error" in reply:
                    errors[i] = f"{name}: {reply['error']}"
                else:
                    results[i] = Path(reply["path"]) if reply.get("path") else None

        threads = [threading.Thread(target=feed, args=(p,), daemon=True) for p in self._procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        while True:
            try:
                left.append(jobs.get_nowait())
            except queue.Empty:
                break
        if left:
            from poa_mc.plots.figures import draw_figure

            for i, name in sorted(left):
                try:
                    results[i] = draw_figure(root, name)
                except Exception as e:  # noqa: BLE001 - reported as a worker's would be
                    errors[i] = f"{name}: {type(e).__name__}: {e}"
        if errors:
            raise RuntimeError(errors[min(errors)])
        return results

    def close(self, kill: bool = False) -> None:
        """End the workers: their input closes and they leave (kill: at once, on the way out of
        an interrupted run; one still busy after a few seconds is killed anyway)."""
        for p in self._procs:
            if kill:
                p.kill()
            try:
                if p.stdin:
                    p.stdin.close()
            except OSError:
                pass
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        self._procs = []


def _ask(proc: subprocess.Popen, job: dict) -> dict | None:
    """One job to one worker and its reply; None if the worker went away (or answered nonsense)."""
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
    except (OSError, ValueError):  # a closed pipe, or no JSON (json's errors are ValueErrors)
        return None
    return reply if isinstance(reply, dict) else None


def _warm() -> None:
    """Import what drawing needs and draw a small figure once, the way the run's are drawn: matplotlib
    loads its fonts and the modules of axes, ticks, legends and layout on first use."""
    import io

    from matplotlib.figure import Figure

    import poa_mc.plots.figures  # noqa: F401 - the drawing functions and polars

    fig = Figure(figsize=(2, 2), layout="constrained")
    ax = fig.subplots()
    ax.plot([1, 2], [1, 2], marker="o", label="a")
    ax.set_xscale("log")
    ax.set_xlabel("x")
    fig.legend(loc="outside lower center")
    fig.savefig(io.BytesIO(), format="png", dpi=50)


def serve() -> int:
    """A worker: draw the figures asked on stdin until it closes (module docstring). Exits 1,
    silently, where drawing cannot even start (the run then draws in-process, and says why)."""
    if hasattr(signal, "SIGTTOU"):  # a background group writing a warning to a `stty tostop` terminal would stop
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    # the replies get the pipe; whatever else writes to stdout, Python or C, goes to stderr
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        _warm()
        from poa_mc.plots.figures import draw_figure
    except Exception:  # noqa: BLE001 - the run's in-process attempt reports the same failure
        return 1

    for line in sys.stdin:
        job = json.loads(line)
        try:
            path = draw_figure(job["root"], job["name"])
            reply = {"path": None if path is None else str(path)}
        except Exception as e:  # noqa: BLE001 - told to the run, which decides
            reply = {"error": f"{type(e).__name__}: {e}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    os._exit(serve())
