"""Traces replayed as they happened (poa_mc/model/replay.py, poa_mc/kernels/replay.py): the table, then the engine."""

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from poa_mc.cli.main import main
from poa_mc.engine.engine import simulate
from poa_mc.model.config import loads_grid
from poa_mc.model.replay import build_table, chains
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.traces import load_trace, sample_path

AGENTIC = sample_path("agentic_sample")


def test_chains_follow_heavy_paths_and_count_what_they_keep():
    # a shared 2-id prompt, then two branches: [1, 2, 3, ...] (three lists: the heavy one) and
    # [1, 2, 4, ...]; [9] shares nothing
    lists = [[1, 2, 3], [1, 2, 3, 5], [1, 2, 4, 6], [1, 2, 4, 7], [1, 2, 3, 8], [9]]
    group, depth, kept = chains(lists)
    assert list(depth) == [3, 3, 3, 3, 3, 0]
    assert group[0] == group[1] == group[4] and group[2] == group[3] and group[0] != group[2]
    assert 0 <= group[5] <= 1  # no prefix (depth 0): its group only spreads it over hash owners
    # reusable ids (prefix with any earlier list): 0, 3, 2, 3, 3, 0 = 11; the chains keep each
    # list's overlap with earlier lists of its own chain: 0, 3, 0 (its chain starts), 3, 3, 0 = 9
    assert kept == pytest.approx(9 / 11)


def _trace(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_trace(p, "mooncake")


def test_a_closed_replay_keeps_sessions_in_order(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "session_id": "a"},
        {"timestamp": 10, "input_length": 100, "output_length": 5, "hash_ids": [7]},
        {"timestamp": 20, "input_length": 1100, "output_length": 5, "hash_ids": [1, 3, 4], "session_id": "a",
         "delay": 250},
        {"timestamp": 30, "input_length": 512, "output_length": 5, "hash_ids": [1], "session_id": "b"},
    ]  # fmt: skip
    t = build_table(_trace(tmp_path, rows), replay="closed", block_size=64, trace_block_size=512)
    assert list(t.isl) == [600, 1100, 100, 512]  # session a's two turns, then the single row, then b
    assert list(t.starts) == [0, 2, 3] and list(t.next_row) == [1, -1, -1, -1]
    assert list(t.delay_ms) == [0, 250, 0, 0]
    # shared: id 1 by a's turns and b (one block of 512 = 8 blocks of 64); a's first turn has 600
    # tokens, so its prefix is 512 tokens at most
    assert list(t.pfx) == [8, 8, 0, 8]


def test_a_timestamps_replay_sorts_by_time_and_wraps_with_one_mean_gap(tmp_path):
    rows = [{"timestamp": ts, "input_length": 512, "output_length": 4, "hash_ids": [i]} for i, ts in
            enumerate((300, 0, 100))]  # fmt: skip
    t = build_table(_trace(tmp_path, rows), replay="timestamps", block_size=64, trace_block_size=512)
    assert list(t.time_ms) == [0, 100, 300] and t.period_ms == 450.0
    assert t.rate_rps == pytest.approx(3 / 0.45)


def test_hash_ids_that_do_not_cover_the_prompt_name_the_line(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]},
            {"timestamp": 5, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2]}]  # fmt: skip
    with pytest.raises(SpecError, match=r"line 2: 2 hash_ids for input_length 1100, expected 3"):
        build_table(_trace(tmp_path, rows), replay="closed", block_size=64, trace_block_size=512)


def test_the_agentic_sample_is_multi_turn_with_long_shared_prefixes():
    t = load_trace(AGENTIC, "mooncake")
    table = build_table(t, replay="closed", block_size=64, trace_block_size=512)
    turns = np.diff(np.append(table.starts, len(table)))
    assert len(table.starts) == 80 and turns.min() >= 1 and turns.mean() > 5
    assert (table.pfx * 64).sum() / table.isl.sum() > 0.9  # most prompt tokens are a shared prefix
    assert 0.9 < table.kept_share < 1.0  # sessions share system prompts across chains: a little is lost


GRID = f"""
[run]
replicas = 3
requests = 120
warmup = 20
[workload]
kind = "trace"
format = "mooncake"
path = "{AGENTIC}"
replay = "closed"
[cluster]
prefill_kv_blocks = 4000
[grid]
topology = ["1P/2D"]
concurrency = [6]
[[policy]]
name = "kv"
kind = "kv"
[[policy]]
name = "rr"
kind = "round_robin"
"""

RUN = dict(replicas=3, requests=120, warmup=20, seed=4, stream=9)


def _cells(text=GRID):
    return [c.spec for c in loads_grid(text).cells()]


def test_each_client_sends_its_sessions_turns_in_order_after_their_delays():
    spec = _cells()[0]
    res = simulate(spec, **RUN)
    table = build_table(load_trace(AGENTIC, "mooncake"), replay="closed", block_size=64, trace_block_size=512)
    row_of = {(int(g), int(i), int(o)): k for k, (g, i, o) in enumerate(zip(table.group, table.isl, table.osl))}
    s = res.samples
    checked = 0
    for r in range(3):
        rows = [
            row_of[(int(g) % table.groups, int(i), int(o))] for g, i, o in zip(s["group"][r], s["isl"][r], s["osl"][r])
        ]
        done = s["arrival_ms"][r] + s["e2e_ms"][r]
        for a, row in enumerate(rows):
            nxt = table.next_row[row]
            if nxt < 0 or nxt not in rows:
                continue
            b = rows.index(nxt)
            assert b > a  # the next turn arrives later, after this one completed and its delay
            assert s["arrival_ms"][r][b] == pytest.approx(done[a] + table.delay_ms[nxt], abs=1e-6)
            checked += 1
    assert checked > 100


def test_policies_of_a_point_replay_the_same_stretch_of_the_trace():
    kv, rr = _cells()
    # from the start: the 6 clients' first requests, sent at t = 0 whatever the policy (later
    # arrivals follow each policy's own timing: round robin rotates the decode workers too)
    run = {**RUN, "warmup": 0}
    a, b = simulate(kv, **run), simulate(rr, **run)
    # the same first sessions in every replica (common random numbers), different replicas differ
    assert np.array_equal(a.samples["group"][:, :6], b.samples["group"][:, :6])
    assert not np.array_equal(a.samples["group"][0, :6], a.samples["group"][1, :6])


def test_a_timestamps_replay_arrives_at_the_trace_times_scaled_to_the_grid_rate():
    text = GRID.replace('replay = "closed"', 'replay = "timestamps"').replace("concurrency = [6]", "rate = [4.0]")
    spec = _cells(text)[0]
    res = simulate(spec, **RUN)
    table = build_table(load_trace(AGENTIC, "mooncake"), replay="timestamps", block_size=64, trace_block_size=512)
    scale = table.rate_rps / 4.0
    isl = res.samples["isl"][0]
    j0 = next(j for j in range(len(table)) if list(table.isl[j : j + 5]) == list(isl[:5]))
    want = np.diff(table.time_ms[j0 : j0 + 50]) * scale
    assert np.allclose(np.diff(res.samples["arrival_ms"][0][:50]), want)


def test_sessions_drawn_with_replacement_differ_from_the_ordered_replay():
    spec = _cells()[0]
    boot = replace(spec, workload=replace(spec.workload, trace=replace(spec.workload.trace, sample="sessions")))
    a, b = simulate(spec, **RUN), simulate(boot, **RUN)
    assert not np.array_equal(a.samples["group"], b.samples["group"])


@pytest.mark.parametrize(
    "edit,path",
    [
        (('replay = "closed"', 'replay = "live"'), "workload.replay"),
        (('replay = "closed"', 'replay = "timestamps"\nsample = "sessions"'), "workload.sample"),
        (('format = "mooncake"', 'format = "csv"'), "workload.format"),
        (('replay = "closed"', 'replay = "closed"\nisl = 100'), "workload.isl"),
        ((f'path = "{AGENTIC}"', 'path = "nope.jsonl"'), "workload.path"),
        (('replay = "closed"', 'replay = "closed"\ntrace_block_size = 256'), "workload.path"),
    ],
)
def test_bad_replay_keys_name_the_key(edit, path):
    with pytest.raises(ConfigError) as err:
        loads_grid(GRID.replace(*edit))
    assert err.value.path == path


def test_a_malformed_line_stops_the_run_before_anything_is_written(tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = AGENTIC.read_text().splitlines()
    lines[41] = lines[41][:-5]
    bad.write_text("\n".join(lines) + "\n")
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.replace(str(AGENTIC), str(bad)))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["run", "--grid", str(grid), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "line 42" in res.output and "bad.jsonl" in res.output
    assert not out.exists()


def test_a_replay_that_wraps_starts_a_new_pass_with_fresh_prefixes():
    # 700 requests a replica from a 643-turn trace: the second pass's sessions are other users'
    # sessions, in groups of their own, so they can only hit what the second pass itself cached
    text = GRID.replace("prefill_kv_blocks = 4000", "prefill_kv_blocks = 40000")
    spec = _cells(text)[0]
    res = simulate(spec, replicas=2, requests=700, warmup=0, seed=4, stream=9)
    table = build_table(load_trace(AGENTIC, "mooncake"), replay="closed", block_size=64, trace_block_size=512)
    s = res.samples
    second = s["group"] >= table.groups
    assert second.sum() > 20
    for r in range(2):
        for k in np.flatnonzero(second[r] & (s["cached_blocks"][r] > 0)):
            assert (s["group"][r][:k] == s["group"][r][k]).any()


def test_tier_credit_is_a_policy_key():
    text = GRID.replace("prefill_kv_blocks = 4000", "prefill_kv_blocks = 4000\ng2_blocks = 1000").replace(
        'name = "kv"\nkind = "kv"', 'name = "kv"\nkind = "kv"\ntier_credit = [1.0, 0.5, 0.2, 0.1]'
    )
    kv = _cells(text)[0]
    assert kv.policy.tier_credit == (1.0, 0.5, 0.2, 0.1)
    assert kv.policy == replace(PolicySpec(name="kv"), tier_credit=(1.0, 0.5, 0.2, 0.1))


def test_a_closed_replay_with_a_short_warm_up_is_warned_about():
    from poa_mc.model.config import grid_warnings

    short = loads_grid(GRID.replace("warmup = 20", "warmup = 12"))  # 2 C = 12: the plain warning is quiet
    assert any("one session per client" in w and "warmup >= 54" in w for w in grid_warnings(short))
    assert not any("session" in w for w in grid_warnings(loads_grid(GRID.replace("warmup = 20", "warmup = 60"))))


def test_a_timestamps_replay_of_one_instant_is_an_error(tmp_path):
    rows = [{"timestamp": 5, "input_length": 512, "output_length": 4, "hash_ids": [i]} for i in range(3)]
    with pytest.raises(SpecError, match="every timestamp is the same"):
        build_table(_trace(tmp_path, rows), replay="timestamps", block_size=64, trace_block_size=512)


@pytest.mark.parametrize("fmt,name", [("azure", "azure_sample"), ("burstgpt", "burstgpt_sample")])
def test_azure_and_burstgpt_traces_replay_at_their_own_times_with_their_own_lengths(fmt, name):
    """Traces without hash_ids replay as they happened too: each row's lengths, in the trace's
    order, at its timestamps scaled to the grid's rate (their prefixes from the synthetic model)."""
    text = (
        GRID.replace('format = "mooncake"', f'format = "{fmt}"')
        .replace(f'path = "{AGENTIC}"', f'path = "{sample_path(name)}"')
        .replace('replay = "closed"', 'replay = "timestamps"')
        .replace("concurrency = [6]", "rate = [3.0]")
    )
    spec = _cells(text)[0]
    res = simulate(spec, **RUN)
    table = build_table(load_trace(sample_path(name), fmt), replay="timestamps", block_size=64, trace_block_size=512)
    scale = table.rate_rps / 3.0
    for r in range(3):
        isl, osl = res.samples["isl"][r], res.samples["osl"][r]
        starts = [j for j in range(len(table) - 40) if list(table.isl[j : j + 8]) == list(isl[:8])]
        assert starts, "the replayed lengths are a stretch of the trace's rows"
        j0 = starts[0]
        assert list(table.osl[j0 : j0 + 40]) == list(osl[:40])
        want = np.diff(table.time_ms[j0 : j0 + 40]) * scale
        assert np.allclose(np.diff(res.samples["arrival_ms"][r][:40]), want)
