"""[schedule] in a grid file (poa_mc/model/parse_schedule.py): the load list as stages of one cell
per topology and policy, and every bad schedule a one-line error naming its key."""

import pytest
from click.testing import CliRunner

from poa_mc.cli.main import main
from poa_mc.model.config import loads_grid
from poa_mc.model.sections import ConfigError

BASE = """
[run]
replicas = 2
warmup = 10
{run}
[workload]
isl = 256
osl = 16
arrival = "{arrival}"
[grid]
topology = ["1P/2D", "1P/3D"]
{axis} = {loads}
{schedule}
[[policy]]
name = "a"
kind = "kv"
[[policy]]
name = "b"
kind = "round_robin"
[poa]
selfish = "a"
window = 4
"""


def grid(arrival="poisson", loads="[2.0, 6.0, 2.0]", schedule="[schedule]\nrequests = [10, 20, 30]", run=""):
    axis = "concurrency" if arrival == "closed" else "rate"
    return BASE.format(arrival=arrival, axis=axis, loads=loads, schedule=schedule, run=run)


def test_a_schedule_is_one_cell_per_topology_and_policy():
    g = loads_grid(grid())
    cells = g.cells()
    assert len(cells) == 4 and g.run.requests == 60
    w = cells[0].spec.workload
    assert [(s.load, s.requests) for s in w.schedule] == [(2.0, 10), (6.0, 20), (2.0, 30)]
    assert w.rate_rps == 2.0 and cells[0].rate == 2.0 and w.stage_ends() == (10, 30, 60)
    closed = loads_grid(grid("closed", "[4, 16, 8]")).cells()[0]
    assert closed.spec.workload.concurrency == 16 and closed.concurrency == 4  # slots for the largest
    # durations at a rate: rate x duration requests
    g = loads_grid(grid(schedule="[schedule]\nduration_s = [10, 5, 2.5]"))
    assert [s.requests for s in g.workload.schedule] == [20, 30, 5]


def test_without_a_schedule_the_cell_ids_are_unchanged():
    plain = loads_grid(grid(loads="[2.0]", schedule=""))
    one = loads_grid(grid(loads="[2.0]", schedule="", run="requests = 50"))
    assert [c.cell_id for c in plain.cells()] != [] and plain.workload.schedule == ()
    assert [c.cell_id for c in one.cells()] == [c.cell_id for c in plain.cells()]


@pytest.mark.parametrize(
    "kw,key,says",
    [
        ({"schedule": "[schedule]\nrequests = [10, 20]"}, "schedule.requests", "2 stages, grid.rate 3 loads"),
        ({"schedule": "[schedule]\nrequests = [10, 0, 5]"}, "schedule.requests[1]", "must be > 0"),
        ({"schedule": "[schedule]\nrequests = [1, 2, 3]\nduration_s = [1, 2, 3]"}, "schedule", "one of them"),
        ({"schedule": "[schedule]\nrequests = 10"}, "schedule.requests", "must be a list"),
        ({"schedule": "[schedule]\nstages = [1]"}, "schedule.stages", "unknown"),
        ({"arrival": "closed", "loads": "[2, 4, 8]", "schedule": "[schedule]\nduration_s = [1, 1, 1]"},
         "schedule.duration_s", "concurrency stage"),
        ({"schedule": "[schedule]\nduration_s = [10, 0.01, 1]"}, "schedule.duration_s[1]", "is no request"),
        ({"run": "requests = 100"}, "run.requests", "remove run.requests"),
        ({"run": "samples = 10"}, "run.samples", 'samples = "all"'),
        ({"loads": str([float(k + 1) for k in range(17)]), "schedule": f"[schedule]\nrequests = {[5] * 17}"},
         "schedule", "at most 16 stages"),
    ],
)  # fmt: skip
def test_a_bad_schedule_names_its_key(kw, key, says):
    with pytest.raises(ConfigError) as e:
        loads_grid(grid(**kw))
    assert e.value.path == key and says in str(e.value), str(e.value)


def test_repeated_loads_are_stages_only_with_a_schedule():
    with pytest.raises(ConfigError, match="repeats grid.rate"):
        loads_grid(grid(schedule=""))


def test_the_command_line_refuses_a_bad_schedule_in_one_line(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text(grid(schedule="[schedule]\nrequests = [10, 20]"))
    r = CliRunner().invoke(main, ["run", "--grid", str(p), "--out", str(tmp_path / "out"), "-q"])
    assert r.exit_code == 2 and "schedule.requests" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_constant_arrivals_take_a_rate_axis_and_a_schedule():
    from poa_mc.engine.packing import pack_params
    from poa_mc.kernels import layout as L

    g = loads_grid(grid("constant"))
    spec = g.cells()[0].spec
    assert spec.workload.arrival == "constant" and g.load_axis == "rate"
    ip, fp, _ = pack_params(spec, requests=60, warmup=10, seed=1, stream=0, record_candidates=False)
    assert ip[L.P_ARRIVAL] == L.ARRIVAL_CONSTANT and ip[L.P_NSTAGE] == 3
    assert list(fp[L.F_STAGE_RATE : L.F_STAGE_RATE + 3] * 1000) == [2.0, 6.0, 2.0]
    with pytest.raises(ConfigError, match="grid.concurrency"):
        loads_grid(grid("constant").replace("rate =", "concurrency ="))
