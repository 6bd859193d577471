"""Unit tests of poa_mc.run.slurm and `poa-mc submit/status`: script generation, submission bookkeeping and
status parsing, with Slurm's commands faked (no Slurm needed; tests/test_slurm_real.py uses a real one)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from poa_mc.cli.slurm_cmds import register
from poa_mc.run.slurm.cells import all_cells, load_grid, norm_cell_id, plan_shards
from poa_mc.run.slurm.options import SlurmError, SlurmOptions
from poa_mc.run.slurm.records import read_jobs, read_shards, write_shards
from poa_mc.run.slurm.scheduler import _expand_job_field, state_from_log_text
from poa_mc.run.slurm.script import PythonEnv, render_array_script, render_reduce_script
from poa_mc.run.slurm.status import collect_status, format_status
from poa_mc.run.slurm.submit import _array_spec, submit

GRID = Path(__file__).parent / "slurm" / "grid_small.toml"


class FakeSlurm:
    """Stands in for sbatch/squeue/sacct/scontrol: records each command, answers from a script."""

    def __init__(self, *, active: Sequence[str] = (), sacct: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.next_id = 100
        self.active = set(active)
        self.sacct = sacct

    def __call__(self, cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        cmd = list(cmd)
        self.calls.append(cmd)
        if cmd[0] == "sbatch":
            self.next_id += 1
            return subprocess.CompletedProcess(cmd, 0, f"{self.next_id}\n", "")
        if cmd[0] == "squeue":
            ids = cmd[cmd.index("-j") + 1].split(",")
            lines = [f"{j}_0|RUNNING" for j in ids if j in self.active]
            return subprocess.CompletedProcess(cmd, 0, "\n".join(lines), "")
        if cmd[0] == "sacct":
            if self.sacct is None:
                return subprocess.CompletedProcess(cmd, 1, "", "Slurm accounting storage is disabled\n")
            return subprocess.CompletedProcess(cmd, 0, self.sacct, "")
        if cmd[0] == "scontrol":
            return subprocess.CompletedProcess(cmd, 1, "", "Invalid job id specified\n")
        raise AssertionError(f"unexpected command {cmd}")

    def sbatch_calls(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] == "sbatch"]


def opts(**kw: object) -> SlurmOptions:
    base: dict[str, object] = {"partition": "gpu", "tasks": 4}
    base.update(kw)
    return SlurmOptions(**base)  # type: ignore[arg-type]


def sbatch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


PY = PythonEnv(executable="/opt/my env/bin/python", virtual_env="/opt/my env")


# ------------------------------------------------------------------------------------------------
# scripts


def test_array_script_directives(tmp_path: Path) -> None:
    o = opts(
        gpus_per_task=2,
        cpus_per_task=8,
        mem="32G",
        time="02:00:00",
        account="proj",
        qos="high",
        extra=("#SBATCH --constraint=h100",),
    )
    text = render_array_script(GRID, tmp_path / "run", o, 4, PY)
    lines = sbatch_lines(text)
    out = (tmp_path / "run").resolve()
    for want in [
        "#SBATCH --partition=gpu",
        "#SBATCH --array=0-3",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --mem=32G",
        "#SBATCH --time=02:00:00",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={out}/logs/%A_%a.out",
        "#SBATCH --constraint=h100",
    ]:
        assert want in lines, want
    # All directives come before the first command, or sbatch ignores them.
    first_cmd = next(i for i, line in enumerate(text.splitlines()) if line and not line.startswith("#"))
    assert all(i < first_cmd for i, line in enumerate(text.splitlines()) if line.startswith("#SBATCH"))


def test_no_gres_without_gpus(tmp_path: Path) -> None:
    text = render_array_script(GRID, tmp_path, opts(), 4, PY)
    assert not any(line.startswith("#SBATCH --gres") for line in sbatch_lines(text))
    assert not any(
        line.startswith(("#SBATCH --mem", "#SBATCH --time", "#SBATCH --account")) for line in sbatch_lines(text)
    )


def test_array_script_uses_submitting_python(tmp_path: Path) -> None:
    text = render_array_script(GRID, tmp_path, opts(), 4, PY)
    assert "PY='/opt/my env/bin/python'" in text
    assert "export PATH='/opt/my env/bin':\"$PATH\"" in text
    assert "export VIRTUAL_ENV='/opt/my env'" in text
    assert '"$PY" -m poa_mc.cli.main run' in text


@pytest.mark.parametrize("task", [0, 3])
def test_array_script_runs_its_shard(tmp_path: Path, task: int) -> None:
    """Run the script under bash with a stand-in python that records its argv."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    record = tmp_path / "argv.json"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n")
    fake.chmod(0o755)
    out = tmp_path / "run dir"
    script = tmp_path / "array.sbatch"
    script.write_text(render_array_script(GRID, out, opts(backend="cpu"), 4, PythonEnv(str(fake))))
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_TASK_COUNT": "2",
        "SLURM_ARRAY_JOB_ID": "55",
    }
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(record.read_text())
    # The shard count is the script's own N, never the (possibly partial) array's task count.
    assert argv == [
        "-m",
        "poa_mc.cli.main",
        "run",
        "--grid",
        str(GRID.resolve()),
        "--out",
        str(out.resolve()),
        "--shard",
        f"{task}/4",
        "--resume",
        "--quiet",
        "--backend",
        "cpu",
    ]
    assert f"shard {task}/4 starts" in proc.stdout
    assert f"shard {task}/4 exited with status 0" in proc.stdout


def test_array_script_passes_failure_on(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    script = tmp_path / "a.sbatch"
    script.write_text(render_array_script(GRID, tmp_path, opts(), 2, PythonEnv(str(fake))))
    proc = subprocess.run(
        ["bash", str(script)],
        env={"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3
    assert "exited with status 3" in proc.stdout
    assert state_from_log_text(proc.stdout) == "FAILED"


def test_array_script_refuses_outside_array(tmp_path: Path) -> None:
    script = tmp_path / "a.sbatch"
    script.write_text(render_array_script(GRID, tmp_path, opts(), 2, PythonEnv("/bin/true")))
    proc = subprocess.run(
        ["bash", str(script)], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    assert "Slurm array task" in proc.stderr


def test_reduce_script(tmp_path: Path) -> None:
    text = render_reduce_script(tmp_path, opts(gpus_per_task=1, reduce_partition="cpu"), PY)
    lines = sbatch_lines(text)
    assert "#SBATCH --partition=cpu" in lines
    assert not any(line.startswith(("#SBATCH --gres", "#SBATCH --array")) for line in lines)
    assert f"reduce {shlex.quote(str(tmp_path.resolve()))}" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


@pytest.mark.parametrize(
    ("kw", "option"),
    [
        ({"time": "1:2"}, "--time"),
        ({"time": "01:99:00"}, "--time"),
        ({"mem": "lots"}, "--mem"),
        ({"partition": "gpu\n#SBATCH --x"}, "--partition"),
        ({"account": "a b"}, "--account"),
        ({"extra": ("--constraint=h100",)}, "--extra"),
        ({"extra": ("#SBATCH --a\n#SBATCH --b",)}, "--extra"),
        ({"tasks": 0}, "--tasks"),
        ({"gpus_per_task": -1}, "--gpus-per-task"),
    ],
)
def test_bad_options(kw: dict[str, object], option: str) -> None:
    with pytest.raises(SlurmError, match=option) as e:
        opts(**kw).validate()
    assert e.value.bad_input


@pytest.mark.parametrize("good", ["01:00:00", "2-00:00:00", "90", "100:00:00"])
def test_good_times(good: str) -> None:
    opts(time=good).validate()


# ------------------------------------------------------------------------------------------------
# submit


def mark_done(out: Path, cell: str) -> None:
    """A cell as run writes it: its meta (with the written file's record), then its accumulators
    (the commit point)."""
    from poa_mc.io.files import atomic_write_json, file_record

    d = out / "acc" / f"cell_id={cell}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "part.parquet").write_bytes(b"PAR1")
    record = {"acc": file_record(d / "part.parquet")}
    atomic_write_json(out / "meta" / f"{cell}.json", {"cell_id": cell, "files": record})


def test_submit_array_then_reduce(tmp_path: Path) -> None:
    fake = FakeSlurm()
    out = tmp_path / "run"
    sub = submit(GRID, out, opts(), python=PY, runner=fake, echo=lambda s: None)
    calls = fake.sbatch_calls()
    assert calls[0] == ["sbatch", "--parsable", "--array=0-3", str(out / "slurm" / "array.sbatch")]
    assert calls[1] == ["sbatch", "--parsable", "--dependency=afterany:101", str(out / "slurm" / "reduce.sbatch")]
    assert (sub.array_job_id, sub.reduce_job_id, sub.tasks) == ("101", "102", 4)
    assert (out / "logs").is_dir()
    jobs = read_jobs(out)
    assert [(j["array_job_id"], j["reduce_job_id"], j["tasks"], j["array"]) for j in jobs] == [("101", "102", 4, "0-3")]
    n, shard_of = read_shards(out) or (0, {})
    assert n == 4 and len(shard_of) == 8 and set(shard_of.values()) == {0, 1, 2, 3}


def test_shards_match_grid_assign_shards(tmp_path: Path) -> None:
    from poa_mc.model.grid import assign_shards, expand

    g = load_grid(GRID)
    cells = expand(g)
    plan = plan_shards(g, 3)
    assert [plan[c.cell_id] for c in cells] == assign_shards(cells, 3, g.run)


def test_resubmit_runs_only_unfinished_shards_and_appends(tmp_path: Path) -> None:
    out = tmp_path / "run"
    submit(GRID, out, opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    _, shard_of = read_shards(out) or (0, {})
    for cell, k in shard_of.items():
        if k != 2:
            mark_done(out, cell)
    fake = FakeSlurm(active=["102"])  # the first reduce job is still waiting
    fake.next_id = 200
    # No --tasks: keeps the previous shard count, so cell -> shard stays the same.
    sub = submit(GRID, out, opts(tasks=None), python=PY, runner=fake, echo=lambda s: None)
    calls = fake.sbatch_calls()
    assert calls[0][2:] == ["--array=2", "--dependency=afterany:102", str(out / "slurm" / "array.sbatch")]
    assert calls[1][2:] == ["--dependency=afterany:201", str(out / "slurm" / "reduce.sbatch")]
    assert sub.waits_for == ["102"] and sub.tasks == 4
    jobs = read_jobs(out)
    assert [j["array_job_id"] for j in jobs] == ["101", "201"]
    assert jobs[1]["pending_cells"] == sum(1 for k in shard_of.values() if k == 2)


def test_resubmit_when_all_done_only_reduces(tmp_path: Path) -> None:
    out = tmp_path / "run"
    submit(GRID, out, opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    for cell in (read_shards(out) or (0, {}))[1]:
        mark_done(out, cell)
    fake = FakeSlurm()
    sub = submit(GRID, out, opts(), python=PY, runner=fake, echo=lambda s: None)
    assert sub.array_job_id is None
    assert [c[2:] for c in fake.sbatch_calls()] == [[str(out / "slurm" / "reduce.sbatch")]]


def test_more_tasks_than_cells(tmp_path: Path) -> None:
    sub = submit(GRID, tmp_path, opts(tasks=50), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    assert sub.tasks == 8 and sub.array_spec == "0-7"


def test_dry_run_submits_nothing(tmp_path: Path) -> None:
    fake = FakeSlurm()
    printed: list[str] = []
    sub = submit(GRID, tmp_path, opts(), dry_run=True, python=PY, runner=fake, echo=printed.append)
    assert fake.calls == []
    assert sub.array_script.read_text() in printed
    assert not (tmp_path / "slurm" / "jobs.json").exists()


def test_sbatch_failure_is_reported(tmp_path: Path) -> None:
    def runner(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(cmd), 1, "", "sbatch: error: invalid partition specified: gpu")

    with pytest.raises(SlurmError, match="invalid partition") as e:
        submit(GRID, tmp_path, opts(), python=PY, runner=runner, echo=lambda s: None)
    assert not e.value.bad_input
    assert read_jobs(tmp_path) == []


def test_reduce_submission_failure_keeps_array_id(tmp_path: Path) -> None:
    fake = FakeSlurm()

    def runner(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if cmd[0] == "sbatch" and "--array=0-3" not in cmd:
            return subprocess.CompletedProcess(list(cmd), 1, "", "sbatch: error: QOSMaxSubmitJobPerUserLimit")
        return fake(cmd)

    with pytest.raises(SlurmError, match="array job 101 was submitted"):
        submit(GRID, tmp_path, opts(), python=PY, runner=runner, echo=lambda s: None)
    assert [(j["array_job_id"], j["reduce_job_id"]) for j in read_jobs(tmp_path)] == [("101", None)]


def test_bad_grid_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[run]\nseed = -1\n")
    with pytest.raises(SlurmError, match="run.seed") as e:
        submit(bad, tmp_path / "run", opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    assert e.value.bad_input


def test_submit_refuses_dir_of_another_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    submit(GRID, out, opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    other = tmp_path / "other.toml"
    other.write_text(GRID.read_text().replace("seed = 7", "seed = 8"))
    fake = FakeSlurm()
    with pytest.raises(SlurmError, match="seed 7 there, 8 here") as e:
        submit(other, out, opts(), python=PY, runner=fake, echo=lambda s: None)
    assert e.value.bad_input and fake.calls == []


def test_submit_prepares_run_dir(tmp_path: Path) -> None:
    """The run's manifest exists before DIR/slurm does, so `poa-mc run` accepts the directory."""
    out = tmp_path / "run"
    submit(GRID, out, opts(), dry_run=True, python=PY, runner=FakeSlurm(), echo=lambda s: None)
    assert (out / "manifest.json").is_file() and (out / "cells.parquet").is_file()
    assert all_cells(out) is not None and len(all_cells(out) or []) == 8


# ------------------------------------------------------------------------------------------------
# status


def test_helpers() -> None:
    assert _array_spec([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert _expand_job_field("12_[4-6,8%2]") == [("12", 4), ("12", 5), ("12", 6), ("12", 8)]
    assert _expand_job_field("12_3") == [("12", 3)]
    assert _expand_job_field("13") == [("13", None)]
    assert norm_cell_id("0007") == "7" and norm_cell_id("c0a1") == "c0a1"


@pytest.mark.parametrize(
    ("log", "state"),
    [
        ("[poa-mc] t shard 1/4 starts on n\n[poa-mc] t shard 1/4 exited with status 0\n", "COMPLETED"),
        (
            "[poa-mc] t shard 1/4 starts on n\nslurmstepd: error: *** JOB 5 ON n CANCELLED AT 2024-01-01T00:00 ***\n",
            "CANCELLED",
        ),
        (
            (
                "[poa-mc] t shard 1/4 starts on n\n"
                "slurmstepd: error: *** JOB 5 ON n CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***\n"
            ),
            "TIMEOUT",
        ),
        # Preempted and requeued: the log of the earlier attempt says cancelled, the latest completed.
        (
            (
                "[poa-mc] t shard 1/4 starts on n\n*** JOB 5 ON n CANCELLED AT 2024 DUE TO PREEMPTION ***\n"
                "[poa-mc] t shard 1/4 starts on n\n[poa-mc] t shard 1/4 exited with status 0\n"
            ),
            "COMPLETED",
        ),
        ("[poa-mc] t shard 1/4 starts on n\n", "STARTED"),
        ("[poa-mc] t shard 1/4 starts on n\n*** JOB 5 ON n CANCELLED AT 2024 DUE TO JOB REQUEUE ***\n", "REQUEUED"),
    ],
)
def test_state_from_log(log: str, state: str) -> None:
    assert state_from_log_text(log) == state


def test_status_without_slurm(tmp_path: Path) -> None:
    """Only cell progress: no jobs.json, Slurm never asked."""
    out = tmp_path / "run"
    submit(GRID, out, opts(), dry_run=True, python=PY, runner=FakeSlurm(), echo=lambda s: None)
    write_shards(out, 4, plan_shards(load_grid(GRID), 4))
    mark_done(out, next(iter((read_shards(out) or (0, {}))[1])))

    def no_slurm(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"Slurm was asked: {cmd}")

    st = collect_status(out, runner=no_slurm)
    assert (st.total, st.done) == (8, 1)
    assert sum(s.cells for s in st.shards) == 8 and sum(s.done for s in st.shards) == 1
    assert "cells: 1/8 done (12%), 7 pending" in format_status(st)


def test_status_reports_failed_tasks_from_logs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    submit(GRID, out, opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    _, shard_of = read_shards(out) or (0, {})
    for cell, k in shard_of.items():
        if k != 1:
            mark_done(out, cell)
    logs = out / "logs"
    for k in range(4):
        end = (
            "slurmstepd: error: *** JOB 9 ON n CANCELLED AT 2024-01-01T00:00:00 ***"
            if k == 1
            else f"[poa-mc] t shard {k}/4 exited with status 0"
        )
        (logs / f"101_{k}.out").write_text(f"[poa-mc] t shard {k}/4 starts on n\n{end}\n")
    (logs / "reduce_102.out").write_text("[poa-mc] t reduce starts on n\n[poa-mc] t reduce exited with status 1\n")
    st = collect_status(out, runner=FakeSlurm())
    assert st.source == "logs"
    assert [(t.job_id, t.task, t.state) for t in st.failed] == [("101", 1, "CANCELLED")]
    assert [s.pending for s in st.shards] == [0, sum(1 for k in shard_of.values() if k == 1), 0, 0]
    assert [r.state for r in st.reduce] == ["FAILED"]
    text = format_status(st)
    assert "101_1: CANCELLED" in text and "reduce 102 FAILED" in text
    assert f"poa-mc submit --grid {GRID.resolve()} --out {out.resolve()} --partition gpu" in text


def test_status_prefers_sacct(tmp_path: Path) -> None:
    out = tmp_path / "run"
    submit(GRID, out, opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    sacct = "101_0|COMPLETED|0:0\n101_1|TIMEOUT|0:15\n101_[2-3]|PENDING|0:0\n102|PENDING|0:0\n"
    st = collect_status(out, runner=FakeSlurm(sacct=sacct))
    assert st.source == "sacct"
    assert [s.task.state if s.task else None for s in st.shards] == ["COMPLETED", "TIMEOUT", "PENDING", "PENDING"]
    assert [(t.task, t.state) for t in st.failed] == [(1, "TIMEOUT")]
    js = st.to_json()
    assert js["cells"] == {"total": 8, "done": 0, "pending": 8, "damaged": []}
    json.dumps(js)


def test_status_resubmitted_task_supersedes_failure(tmp_path: Path) -> None:
    out = tmp_path / "run"
    submit(GRID, out, opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None)
    fake = FakeSlurm()
    fake.next_id = 200
    submit(GRID, out, opts(), python=PY, runner=fake, echo=lambda s: None)
    sacct = (
        "101_0|COMPLETED|0:0\n101_1|CANCELLED by 0|0:0\n101_2|COMPLETED|0:0\n101_3|COMPLETED|0:0\n"
        "201_1|COMPLETED|0:0\n201_0|COMPLETED|0:0\n201_2|COMPLETED|0:0\n201_3|COMPLETED|0:0\n"
    )
    st = collect_status(out, runner=FakeSlurm(sacct=sacct))
    assert st.failed == []
    assert all(s.task and s.task.job_id == "201" for s in st.shards)


# ------------------------------------------------------------------------------------------------
# CLI


@pytest.fixture()
def cli() -> click.Group:
    @click.group()
    def main() -> None:
        pass

    register(main)
    return main


def test_cli_dry_run(cli: click.Group, tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli,
        [
            "submit",
            "--grid",
            str(GRID),
            "--partition",
            "gpu",
            "--tasks",
            "2",
            "--gpus-per-task",
            "1",
            "--out",
            str(tmp_path / "r"),
            "--dry-run",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "#SBATCH --gres=gpu:1" in res.output and "#SBATCH --array=0-1" in res.output
    assert (tmp_path / "r" / "slurm" / "array.sbatch").is_file()


def test_cli_bad_input_exit_2(cli: click.Group, tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli,
        ["submit", "--grid", str(GRID), "--partition", "gpu", "--time", "soon", "--out", str(tmp_path), "--dry-run"],
    )
    assert res.exit_code == 2 and "--time" in res.output
    res = CliRunner().invoke(cli, ["status", str(tmp_path / "nope")])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["status", str(tmp_path)])
    assert res.exit_code == 2 and "not a poa-mc run directory" in res.output


def test_cli_status_plain_and_json(cli: click.Group, tmp_path: Path) -> None:
    write_shards(tmp_path, 2, {"c1": 0, "c2": 1})
    mark_done(tmp_path, "c2")
    res = CliRunner().invoke(cli, ["status", str(tmp_path)])
    assert res.exit_code == 0 and "cells: 1/2 done" in res.output
    res = CliRunner().invoke(cli, ["status", str(tmp_path), "--json"])
    assert json.loads(res.output)["cells"] == {"total": 2, "done": 1, "pending": 1, "damaged": []}


def test_bookkeeping_survives_a_shard_sweeping_temporaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard starting while `submit` writes shards.json sweeps dead writers' temporaries: submit's
    own, mid-write, must be recognised as a live writer's and left alone (CI once lost it)."""
    from poa_mc.io.store import RunDir

    real_replace = os.replace

    def sweep_then_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        RunDir(tmp_path).remove_temporaries()  # the shard beside us, at the worst moment
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", sweep_then_replace)
    write_shards(tmp_path, 2, {"a": 0, "b": 1})
    assert json.loads((tmp_path / "slurm" / "shards.json").read_text())["tasks"] == 2
    assert not [p for p in (tmp_path / "slurm").iterdir() if p.name.endswith(".tmp")]


TUNE_GRID = Path(__file__).parent / "slurm" / "tune_small.toml"


def test_submit_tune_shards_the_load_points_and_resubmits_only_what_is_left(tmp_path: Path) -> None:
    from poa_mc.model.grid import assign_shards
    from poa_mc.run.tune.space import load_tune

    fake = FakeSlurm()
    out = tmp_path / "tune"
    sub = submit(TUNE_GRID, out, opts(tasks=2), python=PY, runner=fake, echo=lambda s: None, tune=True)
    assert (sub.tasks, sub.total_cells, sub.pending_cells, sub.array_spec) == (2, 3, 3, "0-1")
    array = (out / "slurm" / "array.sbatch").read_text()
    assert f'tune {TUNE_GRID.resolve()} --out {out.resolve()} --shard "$SHARD/$NSHARDS" &' in array
    assert "--resume" not in array  # a tune always goes on where it stopped
    reduce = (out / "slurm" / "reduce.sbatch").read_text()
    assert f"poa_mc.cli.main tune {TUNE_GRID.resolve()} --out {out.resolve()}\n" in reduce
    assert (out / "tune.json").is_file()
    # the shards are `poa-mc tune --shard`'s: once shard 0's points are saved, only shard 1 is left
    spec = load_tune(TUNE_GRID)
    cells = spec.grid.cells()
    shard0 = [c for c, s in zip(cells, assign_shards(cells, 2, spec.grid.run)) if s == 0]
    from click.testing import CliRunner

    from poa_mc.cli.main import main

    r = CliRunner().invoke(main, ["tune", str(TUNE_GRID), "--out", str(out), "--shard", "0/2"])
    assert r.exit_code == 0, r.output
    assert sorted(p.stem for p in (out / "points").iterdir()) == sorted(c.cell_id for c in shard0)
    sub = submit(TUNE_GRID, out, opts(tasks=2), python=PY, runner=FakeSlurm(), echo=lambda s: None, tune=True)
    assert (sub.pending_cells, sub.array_spec) == (3 - len(shard0), "1")


def test_submit_tune_bad_input(tmp_path: Path) -> None:
    ctl = tmp_path / "ctl.toml"
    ctl.write_text(
        TUNE_GRID.read_text()
        .replace('kind = "kv"', 'kind = "adaptive"')
        .replace(
            "space = { overlap_weight = [0.0, 2.0], temperature = [0.0, 1.0] }", "space = { theta1 = [100.0, 900.0] }"
        )
    )
    with pytest.raises(SlurmError, match="--tune: .* as one job") as e:
        submit(ctl, tmp_path / "a", opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None, tune=True)
    assert e.value.bad_input
    with pytest.raises(SlurmError, match="--backend") as e:
        submit(
            TUNE_GRID,
            tmp_path / "b",
            opts(backend="cpu"),
            python=PY,
            runner=FakeSlurm(),
            echo=lambda s: None,
            tune=True,
        )
    with pytest.raises(SlurmError, match="tune.space") as e:
        bad = tmp_path / "bad.toml"
        bad.write_text(TUNE_GRID.read_text().replace("overlap_weight = [0.0, 2.0]", "omega = [0.0, 2.0]"))
        submit(bad, tmp_path / "c", opts(), python=PY, runner=FakeSlurm(), echo=lambda s: None, tune=True)
    assert e.value.bad_input
