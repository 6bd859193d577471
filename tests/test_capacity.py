"""poa_mc.run.capacity and `poa-mc capacity`: the highest load meeting an SLO, against a queue whose
answer is known, the bisection's ends, and bad input."""

import math

import polars as pl
import pytest
from click.testing import CliRunner

from poa_mc.cli.main import main
from poa_mc.model.config import loads_grid
from poa_mc.model.sections import ConfigError
from poa_mc.run.capacity import Probe, bisect, find_capacities, parse_target

# M/M/1 (one prefill worker, exponential 10 ms passes of one request, no decode time): the TTFT is
# the sojourn time, whose P99 is ln(100) / (mu - lambda); at most 200 ms for lambda <= 100 - ln(100)/0.2
MM1 = """
[run]
replicas = 32
requests = 400
warmup = 1100
[workload]
isl = 64
osl = 1
prefix_groups = 1
prefix_ratio = 0.0
arrival = "poisson"
[cluster]
flow = "prefill_first"
[profile]
name = "exp"
kind = "exponential"
prefill_ms = 10.0
decode_ms = 0.0
[grid]
topology = ["1P/1D"]
rate = [20.0, 95.0]
[[policy]]
name = "kv"
kind = "kv"
"""
TRUE_RATE = 100.0 - math.log(100.0) / 0.2  # 76.97 req/s


def test_the_capacity_of_a_queue_with_a_known_answer_is_bracketed():
    from poa_mc.engine.engine import simulate

    (c,) = find_capacities(loads_grid(MM1), [parse_target("ttft:p99=200")], simulate)
    assert c.status == "within"
    assert c.capacity_lo <= TRUE_RATE <= c.capacity_hi, c
    assert c.capacity_lo <= c.capacity <= c.capacity_hi
    assert abs(c.capacity - TRUE_RATE) < 0.1 * TRUE_RATE  # the point: within the MC error of 32 replicas
    met = [p.load for p in c.probes if p.meets]
    assert max(met) == c.capacity and all(p.meets for p in c.probes if p.load <= c.capacity)


def _probe_below(edge: float):
    return lambda load: Probe(load, load <= edge, load <= edge - 5, load > edge + 5, {})


@pytest.mark.parametrize("edge,status", [(37, "within"), (500, "above"), (1, "below")])
def test_bisection_finds_the_edge_to_one_client(edge, status):
    found, probes = bisect(_probe_below(edge), 4.0, 256.0, integer=True)
    assert found == status
    if status == "within":
        loads = sorted(p.load for p in probes)
        assert edge in loads and edge + 1 in loads and len(probes) <= 2 + 8  # log2(252) steps
    elif status == "above":
        assert [p.load for p in probes] == [4.0, 256.0]
    else:
        assert [p.load for p in probes] == [4.0]


@pytest.mark.parametrize(
    "text,says",
    [("ttft:p98=100", "p50, p90, p99"), ("tpot:p99=5", "metric must be one of"), ("ttft p99 100", "METRIC:pN=MS"),
     ("ttft:p99=0", "> 0 ms")],
)  # fmt: skip
def test_a_bad_target_is_named(text, says):
    with pytest.raises(ConfigError, match=says):
        parse_target(text)


def test_the_command_writes_its_table_and_plot_and_refuses_bad_input(tmp_path):
    grid = tmp_path / "mm1.toml"
    grid.write_text(MM1)
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, ["capacity", "--grid", str(grid), "--slo", "ttft:p99=200", "--out", str(out)])
    assert r.exit_code == 0, r.output
    frame = pl.read_parquet(out / "capacity.parquet")
    assert frame.height == 1 and frame["status"][0] == "within" and (out / "capacity.png").stat().st_size > 0
    assert "1P/1D" in r.output and "rate" in r.output
    r = CliRunner().invoke(main, ["capacity", "--grid", str(grid), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--slo" in r.output and not (tmp_path / "x").exists()
    r = CliRunner().invoke(main, ["capacity", "--grid", str(grid), "--slo", "ttft:p97=1", "--out", str(tmp_path / "y")])
    assert r.exit_code == 2 and "p50, p90, p99" in r.output and not (tmp_path / "y").exists()
