"""`poa-mc submit` on a real (one-node, localhost) Slurm cluster: kill a task, resubmit, reduce, compare.

Needs root and the Slurm/munge binaries (bash .ci/install_slurm.sh installs them). It installs
nothing itself, and it never skips: without Slurm it fails, naming what is missing, because a
silently skipped test would let the Slurm path rot. The cluster lives in a temporary directory
(tests/slurm/start_slurm.sh) on unusual ports, and its daemons are stopped by pid at the end.
Deselect with `-m "not slurm"` where Slurm cannot run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from poa_mc.run.slurm.status import _array_tasks

pytestmark = pytest.mark.slurm

HERE = Path(__file__).parent
START = HERE / "slurm" / "start_slurm.sh"
STOP = HERE / "slurm" / "stop_slurm.sh"
GRID = HERE / "slurm" / "grid_small.toml"
PARTITION = "gpu"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")
TASKS = 4
DEADLINE_S = 150.0  # the whole scenario; a hang must fail the test, not CI's time limit


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]

    def run(self, cmd: Sequence[str], *, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            pytest.fail(
                f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n"
                f"{proc.stderr}\n{self.logs()}",
                pytrace=False,
            )
        return proc

    def poa(self, *args: str | Path, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run([sys.executable, "-m", "poa_mc.cli.main", *map(str, args)], check=check, timeout=timeout)

    def logs(self) -> str:
        parts = []
        for f in sorted((self.dir / "log").glob("*")):
            text = f.read_text(errors="replace").splitlines()
            parts.append(f"===== {f} (last 40 lines) =====\n" + "\n".join(text[-40:]))
        return "\n".join(parts)

    def queued(self, job_ids: Sequence[str]) -> list[str]:
        """squeue lines (id|state) of the jobs still queued or running."""
        proc = self.run(["squeue", "-h", "-o", "%i|%T", "-j", ",".join(job_ids)], check=False)
        if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
            # a busy controller's failed answer is no answer: the jobs count as still queued
            return [f"squeue failed: {proc.stderr.strip()}"]
        return [line for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        pytest.fail(
            f"Slurm is not installed (missing: {', '.join(missing)}); run `bash .ci/install_slurm.sh` "
            "(Debian packages slurm-wlm and munge), or deselect with -m 'not slurm'",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail("the localhost Slurm cluster needs root (slurmd starts jobs as their owner)", pytrace=False)
    # Short base path: munge's unix socket path must fit in 108 bytes.
    d = Path(tmp_path_factory.mktemp("slurm"))
    env = {**os.environ, "SLURM_CONF": str(d / "etc" / "slurm.conf")}
    # A real cluster configuration of the caller must not leak in and redirect our commands.
    for var in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SALLOC_", "SRUN_"))]:
        if var != "SLURM_CONF":
            env.pop(var)
    c = Cluster(d, env)
    try:
        proc = subprocess.run(
            ["bash", str(START), str(d), PARTITION], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if proc.returncode != 0:
            pytest.fail(
                f"could not start the test Slurm cluster:\n{proc.stdout}\n{proc.stderr}\n{c.logs()}", pytrace=False
            )
        yield c
    finally:
        subprocess.run(["bash", str(STOP), str(d)], capture_output=True, timeout=60, check=False)


def wait_for(what: str, cond, timeout: float, c: Cluster, interval: float = 0.2):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{c.logs()}", pytrace=False)


def test_trivial_job(cluster: Cluster, tmp_path: Path) -> None:
    """The plumbing: a batch job runs and writes its output."""
    out = tmp_path / "hostname.out"
    job = cluster.run(["sbatch", "--parsable", "-p", PARTITION, "-o", str(out), "--wrap", "hostname"]).stdout.strip()
    wait_for(f"job {job}", lambda: not cluster.queued([job]) and out.exists() and out.read_text().strip(), 60, cluster)
    assert (
        out.read_text().strip()
        == subprocess.run(["hostname"], capture_output=True, text=True, check=False).stdout.strip()
    )


def phase(what: str, since: float) -> None:
    # Shown with -s, or in the report of a failure: where the time of this slow test goes.
    print(f"[slurm test] {what}: {time.monotonic() - since:.1f} s", flush=True)


def read_frame(path: Path) -> pl.DataFrame:
    assert path.is_file(), f"{path} missing"
    return pl.read_parquet(path)


def test_array_kill_resubmit_reduce_equals_local_run(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "on-slurm"
    local = tmp_path / "local"

    # 0. One local run of the same grid and seed: the reference. Run first, so that it also fills
    # numba's on-disk cache and the array tasks do not each compile the kernels.
    t0 = time.monotonic()
    cluster.poa("run", "--grid", GRID, "--out", local, "--quiet", timeout=400)
    t_start = time.monotonic()
    phase("local run", t0)

    # 1. Submit 4 shards (the grid has 8 cells). The node has nproc CPUs, so tasks queue up.
    sub = cluster.poa("submit", "--grid", GRID, "--partition", PARTITION, "--tasks", TASKS, "--out", out)
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())["submissions"]
    assert len(jobs) == 1, sub.stdout
    array1, reduce1 = jobs[0]["array_job_id"], jobs[0]["reduce_job_id"]
    assert array1 and reduce1 and jobs[0]["array"] == f"0-{TASKS - 1}"
    shards = json.loads((out / "slurm" / "shards.json").read_text())
    shard_of: dict[str, int] = shards["cells"]
    assert shards["tasks"] == TASKS and len(shard_of) >= 8

    # 2. Kill one task mid-run: once its first cell is written and while the other one is still to do.
    victim = next(k for k in range(TASKS) if sum(v == k for v in shard_of.values()) >= 2)
    cells_v = sorted(c for c, k in shard_of.items() if k == victim)

    def done(cells: Sequence[str]) -> list[str]:
        return [c for c in cells if (out / "acc" / f"cell_id={c}" / "part.parquet").exists()]

    wait_for(f"a first cell of shard {victim}", lambda: done(cells_v), DEADLINE_S / 2, cluster, interval=0.05)
    phase(f"first cell of shard {victim} done", t_start)
    cluster.run(["scancel", f"{array1}_{victim}"])
    wait_for(f"task {array1}_{victim} to end", lambda: not cluster.queued([f"{array1}_{victim}"]), 60, cluster)
    finished_before = done(cells_v)
    assert 0 < len(finished_before) < len(cells_v), f"shard {victim} was not cut mid-run: {finished_before}"
    stamps = {c: (out / "acc" / f"cell_id={c}" / "part.parquet").stat().st_mtime_ns for c in finished_before}

    st = cluster.poa("status", out, "--json")
    status = json.loads(st.stdout)
    assert any(f["job_id"] == array1 and f["task"] == victim and f["state"] == "CANCELLED" for f in status["failed"]), (
        st.stdout
    )
    assert status["shards"][victim]["pending"] == len(cells_v) - len(finished_before)

    # 3. Resubmit: only unfinished shards run, after every job of the run still queued.
    cluster.poa("submit", "--grid", GRID, "--partition", PARTITION, "--out", out)
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())["submissions"]
    assert len(jobs) == 2 and jobs[1]["tasks"] == TASKS
    array2, reduce2 = jobs[1]["array_job_id"], jobs[1]["reduce_job_id"]
    assert array2 and victim in _array_tasks(jobs[1]["array"]), jobs[1]

    # 3b. Requeue another task mid-run, as preemption does (#SBATCH --requeue): it must come back and
    # redo only its unfinished cells. A requeued job waits ~2 minutes by default: start it now.
    rq = next(k for k in reversed(range(TASKS)) if k != victim)
    cells_rq = sorted(c for c, k in shard_of.items() if k == rq)
    wait_for(f"a first cell of shard {rq}", lambda: done(cells_rq), DEADLINE_S / 2, cluster, interval=0.05)
    phase(f"first cell of shard {rq} done", t_start)
    cluster.run(["scontrol", "requeue", f"{array1}_{rq}"])
    log_rq = out / "logs" / f"{array1}_{rq}.out"
    wait_for(f"task {array1}_{rq} to be requeued", lambda: "DUE TO JOB REQUEUE" in log_rq.read_text(), 30, cluster)

    def pending_again() -> bool:
        # the step is cancelled first and the job requeued after: a StartTime set before that is
        # overwritten by the requeue's own begin time (about two minutes on)
        show = cluster.run(["scontrol", "show", "job", f"{array1}_{rq}"], check=False).stdout
        return "Restarts=1" in show and "JobState=PENDING" in show

    wait_for(f"task {array1}_{rq} to be pending again", pending_again, 60, cluster)
    # slurmd revoked the first attempt's credential when it killed it, and refuses any credential
    # of that job created within the same second ("Killing non-startable batch job: Job
    # credential revoked"); Slurm's own requeue delay exists for this. Two seconds clear it.
    time.sleep(2.0)
    cluster.run(["scontrol", "update", f"JobId={array1}_{rq}", "StartTime=now"])
    first_attempt = log_rq.read_text()
    # the shell handed the requeue's SIGTERM to poa-mc, which stopped between cells (status 143)
    assert "exited with status 0" not in first_attempt, f"shard {rq} was not cut mid-run:\n{first_attempt}"
    stamps.update({c: (out / "acc" / f"cell_id={c}" / "part.parquet").stat().st_mtime_ns for c in done(cells_rq)})

    # 4. Wait for everything (both arrays, both reduce jobs).
    all_jobs = [array1, reduce1, array2, reduce2]
    left = DEADLINE_S - (time.monotonic() - t_start)
    wait_for("all jobs to leave the queue", lambda: not cluster.queued(all_jobs), max(left, 10), cluster, 1.0)

    phase("all jobs done", t_start)
    # The first reduce ran with the killed shard's cells missing: it must refuse, not write partial surfaces.
    log1 = (out / "logs" / f"reduce_{reduce1}.out").read_text()
    assert "reduce exited with status 0" not in log1, log1
    assert "exited with status" in log1, log1
    # The last one merged everything.
    log2 = (out / "logs" / f"reduce_{reduce2}.out").read_text()
    assert "reduce exited with status 0" in log2, log2
    # The requeued task came back (restart 1) and finished in its second attempt.
    log = log_rq.read_text()
    if not ("restart 1" in log and log.rstrip().endswith("exited with status 0")):
        acct = cluster.run(["sacct", "-j", f"{array1}_{rq}", "-D", "-P", "-o", "JobID,State,Restarts,ExitCode,Reason"],
                           check=False)  # fmt: skip
        pytest.fail(f"requeued task {array1}_{rq} did not finish a second attempt:\n{log}\n--- sacct\n"
                    f"{acct.stdout}{acct.stderr}\n{cluster.logs()}", pytrace=False)  # fmt: skip
    # Finished cells stood: neither the requeued attempt nor the resubmission rewrote them.
    for c, ns in stamps.items():
        assert (out / "acc" / f"cell_id={c}" / "part.parquet").stat().st_mtime_ns == ns, f"cell {c} rewritten"

    st = cluster.poa("status", out, "--json")
    status = json.loads(st.stdout)
    assert status["cells"]["pending"] == 0 and status["failed"] == [], st.stdout
    assert "0 pending" in cluster.poa("status", out).stdout

    # 5. The Slurm run equals the local one, bit for bit.
    for name in ("summary.parquet", "poa.parquet"):
        a, b = read_frame(out / name), read_frame(local / name)
        assert a.equals(b, null_equal=True), f"{name} differs:\n{a}\n{b}"
    cells_slurm = sorted(p.name for p in (out / "samples").iterdir())
    cells_local = sorted(p.name for p in (local / "samples").iterdir())
    assert cells_slurm == cells_local and len(cells_slurm) == len(shard_of)
    for cell in cells_slurm:
        for kind in ("samples", "acc"):
            a = read_frame(out / kind / cell / "part.parquet")
            b = read_frame(local / kind / cell / "part.parquet")
            assert a.equals(b, null_equal=True), f"{kind} of {cell} differ"

    # 6. Shards of another run are refused, naming the difference: by submit (another seed into
    # this DIR) and by reduce (a cell written under another fingerprint).
    other = tmp_path / "other-seed.toml"
    other.write_text(GRID.read_text().replace("seed = 7", "seed = 8"))
    bad = cluster.poa("submit", "--grid", other, "--partition", PARTITION, "--out", out, check=False)
    assert bad.returncode == 2 and "seed" in bad.stderr, bad.stderr
    tampered = tmp_path / "tampered"
    shutil.copytree(out, tampered)
    meta = next((tampered / "meta").glob("*.json"))
    m = json.loads(meta.read_text())
    m["fingerprint"] = m["sim_key"] = "0" * 16  # a cell of another run (not of this grid grown)
    meta.write_text(json.dumps(m))
    bad = cluster.poa("reduce", tampered, check=False)
    assert bad.returncode != 0 and "different run" in (bad.stdout + bad.stderr), bad.stdout + bad.stderr


def test_time_limit_warning_stops_a_task_between_cells_and_resubmission_finishes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A task warned of its time limit (SIGTERM to the batch shell, which `#SBATCH --signal=B:TERM@...`
    has Slurm send ahead of the limit) stops with its resume line and status 143, keeping its
    finished cells; a resubmission runs only the rest, and the run equals a local one."""
    out, local = tmp_path / "on-slurm", tmp_path / "local"
    cluster.poa("run", "--grid", GRID, "--out", local, "--quiet", timeout=400)
    cluster.poa("submit", "--grid", GRID, "--partition", PARTITION, "--tasks", 1, "--out", out)
    script = (out / "slurm" / "array.sbatch").read_text()
    assert "#SBATCH --signal=B:TERM@" in script
    array1 = json.loads((out / "slurm" / "jobs.json").read_text())["submissions"][0]["array_job_id"]

    def done() -> list[Path]:
        return list((out / "acc").glob("cell_id=*/part.parquet"))

    wait_for("two cells of the one task", lambda: len(done()) >= 2, DEADLINE_S / 2, cluster, interval=0.05)
    # Slurm 22.05's scancel exits 229 (ESLURM_ALREADY_DONE) after signalling a batch shell that
    # then ends; what the task did is read from its log
    r = cluster.run(["scancel", "--batch", "--signal=TERM", f"{array1}_0"], check=False)
    assert r.returncode in (0, 229), r.stderr
    wait_for(f"task {array1}_0 to end", lambda: not cluster.queued([f"{array1}_0"]), 60, cluster)
    log = (out / "logs" / f"{array1}_0.out").read_text()
    assert "stopped by SIGTERM: " in log and "--resume" in log, log
    assert log.rstrip().endswith("exited with status 143"), log
    kept = {p: p.stat().st_mtime_ns for p in done()}
    assert 2 <= len(kept) < 8 and not (out / "summary.parquet").exists(), sorted(kept)
    assert not list(out.rglob("*.tmp"))

    cluster.poa("submit", "--grid", GRID, "--partition", PARTITION, "--out", out)
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())["submissions"]
    ids = [j[k] for j in jobs for k in ("array_job_id", "reduce_job_id")]
    wait_for("the resubmission", lambda: not cluster.queued(ids), DEADLINE_S, cluster, 1.0)
    assert all(p.stat().st_mtime_ns == ns for p, ns in kept.items()), "a finished cell was rewritten"
    for name in ("summary.parquet", "poa.parquet"):
        a, b = read_frame(out / name), read_frame(local / name)
        assert a.equals(b, null_equal=True), f"{name} differs:\n{a}\n{b}"


def test_a_tune_sharded_over_an_array_equals_a_local_tune(cluster: Cluster, tmp_path: Path) -> None:
    """`poa-mc submit --tune`: each task tunes its shard of the load points, the last job writes
    the results, which equal one local `poa-mc tune`; `poa-mc status` counts the points."""
    grid = HERE / "slurm" / "tune_small.toml"
    out, local = tmp_path / "on-slurm", tmp_path / "local"
    cluster.poa("tune", grid, "--out", local, timeout=400)
    sub = cluster.poa("submit", "--grid", grid, "--partition", PARTITION, "--tasks", 2, "--tune", "--out", out)
    assert "3 load points to tune" in sub.stdout, sub.stdout
    script = (out / "slurm" / "array.sbatch").read_text()
    assert " tune " in script and '--shard "$SHARD/$NSHARDS"' in script
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())["submissions"]
    ids = [j[k] for j in jobs for k in ("array_job_id", "reduce_job_id")]
    wait_for("the tune's array and results job", lambda: not cluster.queued(ids), DEADLINE_S, cluster, 0.5)
    for name in ("tune.parquet", "tuned.parquet"):
        a, b = read_frame(out / name), read_frame(local / name)
        assert a.equals(b, null_equal=True), f"{name} differs:\n{a}\n{b}"
    assert (out / "tuned.toml").read_text() == (local / "tuned.toml").read_text()
    status = cluster.poa("status", out, "--json")
    counts = json.loads(status.stdout)["cells"]
    assert (counts["total"], counts["done"], counts["pending"]) == (3, 3, 0), status.stdout
