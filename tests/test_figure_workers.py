import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from poa_mc.model.config import loads_grid
from poa_mc.plots import figure_workers
from poa_mc.plots.figure_workers import FigureWorkers
from poa_mc.plots.figures import figure_names, plot_run
from poa_mc.run.runner import run_grid
from tests import fake_engine
from tests.grids_for_tests import SMALL


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("figworkers") / "run"
    assert run_grid(loads_grid(SMALL), out=out, simulate=fake_engine.simulate, quiet=True).reduced
    return out


def _copy(reduced, tmp_path, name):
    run = tmp_path / name
    shutil.copytree(reduced, run)
    shutil.rmtree(run / "plots")
    return run


def test_workers_draw_the_same_files_as_the_process_in_the_same_order(reduced, tmp_path):
    inline, parallel = _copy(reduced, tmp_path, "inline"), _copy(reduced, tmp_path, "parallel")
    here = plot_run(inline)
    with FigureWorkers(2) as workers:
        assert workers.count == 2
        there = plot_run(parallel, workers)
        again = plot_run(parallel, workers)  # a worker draws as many figures as it is given
    assert [p.name for p in there] == [p.name for p in here] == figure_names(inline)
    assert [p.parent for p in there] == [parallel / "plots"] * len(there)
    assert again == there
    for a, b in zip(here, there):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert not list((parallel / "plots").glob(".*.tmp"))


def test_a_failing_figure_is_named_and_the_others_are_drawn(reduced, tmp_path):
    run = _copy(reduced, tmp_path, "run")
    names = figure_names(run)
    with FigureWorkers(2) as workers, pytest.raises(RuntimeError, match=r"^nope\.png: ValueError: no figure"):
        workers.draw(run, [names[0], "nope.png", *names[1:], "nope.png"])
    assert sorted(p.name for p in (run / "plots").glob("*.png")) == sorted(names)


def test_a_figure_whose_worker_went_away_is_drawn_in_process(reduced, tmp_path):
    run = _copy(reduced, tmp_path, "run")
    with FigureWorkers(1) as workers:
        workers._procs[0].kill()  # noqa: SLF001 - a worker that died (killed, out of memory, ...)
        workers._procs[0].wait()  # noqa: SLF001
        paths = plot_run(run, workers)
    assert [p.name for p in paths] == figure_names(run)


def test_workers_leave_when_their_input_closes_and_when_the_run_dies(tmp_path):
    with FigureWorkers(1) as workers:
        proc = workers._procs[0]  # noqa: SLF001
    assert proc.returncode == 0  # closed, then waited for: it left on its own
    # a run killed outright never closes their input, but its end closes the pipe
    script = textwrap.dedent(
        """
        import os, sys
        from poa_mc.plots.figure_workers import FigureWorkers
        w = FigureWorkers(2)
        print(" ".join(str(p.pid) for p in w._procs), flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has left, unreaped
    except FileNotFoundError:
        return False


def test_workers_run_at_the_lowest_priority_in_a_group_of_their_own():
    with FigureWorkers(1) as workers:
        pid = workers._procs[0].pid  # noqa: SLF001
        assert os.getpriority(os.PRIO_PROCESS, pid) == 19
        assert os.getpgid(pid) == pid != os.getpgid(0)  # a Ctrl-C at the terminal is not theirs
        if sys.version_info >= (3, 11):
            assert os.getsid(pid) == os.getsid(0)  # the run's session: nice 19 yields to it


@pytest.mark.parametrize(("value", "count"), [("0", 0), ("3", 3), (" 1 ", 1)])
def test_the_environment_sets_the_number_of_workers(monkeypatch, value, count):
    monkeypatch.setenv("POA_MC_FIGURE_WORKERS", value)
    assert figure_workers.worker_count() == count
    with figure_workers.start() as workers:
        assert (workers.count if workers else 0) == count
    with figure_workers.start(plotting=False) as workers:
        assert workers is None


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_bad_worker_count_is_refused(monkeypatch, value):
    monkeypatch.setenv("POA_MC_FIGURE_WORKERS", value)
    with pytest.raises(ValueError, match="POA_MC_FIGURE_WORKERS"):
        figure_workers.worker_count()


def test_the_default_is_two_workers_where_two_cpus_are_free(monkeypatch):
    monkeypatch.delenv("POA_MC_FIGURE_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    assert figure_workers.worker_count() == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert figure_workers.worker_count() == 2
