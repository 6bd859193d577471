import pytest

from poa_mc.model.config import load_grid, loads_grid
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_workload import Dist
from tests.grids_for_tests import SMALL


def test_quickstart_loads_and_expands():
    from poa_mc.cli.common import builtin_grids

    grid = load_grid(builtin_grids()["quickstart"])
    assert grid.run.name == "quickstart"
    cells = grid.cells()
    assert len(cells) == len(grid.topologies) * len(grid.loads) * len(grid.policies)
    assert grid.poa.selfish == "dynamo-default"


def test_small_grid_resolves_defaults():
    grid = loads_grid(SMALL)
    assert grid.run.out == "runs/small"
    assert grid.run.backend == "auto"
    assert grid.workload.isl == Dist("fixed", value=512)
    assert grid.load_axis == "concurrency"
    assert grid.loads == (4, 32)
    assert [t.label for t in grid.topologies] == ["1P/2D", "1P/3D"]
    assert grid.poa.window == 4 and grid.poa.cost == "router" and grid.poa.slots == 0
    assert grid.profile.name == "dynamo-mocker"


def _err(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        loads_grid(text)
    return e.value


def test_malformed_topology_names_its_index():
    e = _err(SMALL.replace('["1P/2D", "1P/3D"]', '["1P/2D", "1P2D"]'))
    assert str(e) == 'grid.topology[1]: "1P2D" is not of the form xP/yD (e.g. "1P/2D")'
    assert e.path == "grid.topology[1]"


@pytest.mark.parametrize(
    "old,new,path",
    [
        ("prefix_groups = 4", "prefix_groups = 4\nprefix_grops = 2", "workload.prefix_grops"),
        ("seed = 7", 'seed = "7"', "run.seed"),
        ("concurrency = [4, 32]", "concurrency = []", "grid.concurrency"),
        ('name = "rr"', 'name = "greedy"', "policy[1].name"),
        ('selfish = "greedy"', 'selfish = "nobody"', "poa.selfish"),
        ("concurrency = [4, 32]", "concurrency = [4, 4]", "grid.concurrency[1]"),
        ("concurrency = [4, 32]", "rate = [1.0]", "grid.rate"),
        ('kind = "round_robin"', 'kind = "roundrobin"', "policy[1].kind"),
        ("isl = 512", 'isl = { dist = "uniform", low = 10 }', "workload.isl.high"),
        ("isl = 512", 'isl = { dist = "gamma", mean = 3 }', "workload.isl.dist"),
        ("isl = 512", "isl = 0", "workload.isl"),
        ("window = 4", "window = 4\nslots = 1", "poa.slots"),
        ('flow = "decode_first"', 'flow = "decode_first"\nn_decode = 3', "cluster.n_decode"),
        ("[run]", "[rnu]", "rnu"),
        ("osl = 16", "osl = 16\nconcurrency = 3", "workload.concurrency"),
        ("replicas = 6", "replicas = 0", "run.replicas"),
        ("replicas = 6", "replicas = true", "run.replicas"),
        ('flow = "decode_first"', 'flow = "decode_first"\nrouter_blocks = "dedup"', "cluster.router_blocks"),
    ],
)
def test_errors_name_the_key_path(old, new, path):
    assert old in SMALL
    e = _err(SMALL.replace(old, new, 1))
    assert e.path == path, str(e)


def test_unknown_key_suggests_the_right_one():
    e = _err(SMALL.replace("prefix_groups = 4", "prefix_grops = 4"))
    assert "did you mean 'prefix_groups'" in str(e)


def test_cell_validation_maps_to_grid_keys():
    # A load the cluster cannot hold: CellSpec.validate() says workload.concurrency; we point at the grid.
    e = _err(
        SMALL.replace("concurrency = [4, 32]", "concurrency = [4, 32]").replace(
            'flow = "decode_first"', 'flow = "decode_first"\nmax_inflight = 16'
        )
    )
    assert e.path == "grid.concurrency[1]"
    assert "1P/2D" in str(e)
    # A prompt bigger than the KV cache: stays a workload key.
    e = _err(
        SMALL.replace("isl = 512", "isl = 5000").replace(
            'flow = "decode_first"', 'flow = "decode_first"\ndecode_kv_blocks = 8'
        )
    )
    assert e.path == "workload.isl"


def test_dist_tables_and_poisson_axis():
    text = SMALL.replace("isl = 512", 'isl = { dist = "lognormal", mean = 400, sigma = 0.5, cap = 2000 }')
    text = text.replace("osl = 16", 'osl = { dist = "empirical", values = [8, 16, 32] }')
    text = text.replace("prefix_groups = 4", 'prefix_groups = 4\narrival = "poisson"')
    text = text.replace("concurrency = [4, 32]", "rate = [0.5, 2]")
    grid = loads_grid(text)
    assert grid.workload.isl == Dist("lognormal", mean=400.0, sigma=0.5, cap=2000)
    assert grid.workload.osl.values == (8, 16, 32)
    assert grid.load_axis == "rate" and grid.loads == (0.5, 2.0)
    cells = grid.cells()
    assert {c.rate for c in cells} == {0.5, 2.0} and all(c.concurrency is None for c in cells)
    assert all(c.spec.workload.rate_rps == c.rate for c in cells)


def test_not_toml_is_a_config_error():
    e = _err("[run\nname=")
    assert "not valid TOML" in str(e)


def test_selfish_defaults_to_first_kv_policy():
    grid = loads_grid(SMALL.replace('selfish = "greedy"\n', ""))
    assert grid.poa.selfish == "greedy"


def test_to_dict_is_json_and_complete():
    import json

    d = loads_grid(SMALL).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["run"]["seed"] == 7 and d["policies"][1]["kind"] == "round_robin"


def test_warmup_below_twice_the_concurrency_is_warned_not_refused():
    from poa_mc.model.config import grid_warnings

    low = loads_grid(SMALL.replace("warmup = ", "warmup = 0 #"))
    assert any("run.warmup" in w for w in grid_warnings(low))
    high = loads_grid(SMALL.replace("warmup = ", "warmup = 100000 #"))
    assert grid_warnings(high) == []


def test_controller_table_reaches_adaptive_policies_only():
    from poa_mc.model.config import loads_grid

    text = """
[grid]
topology = ["1P/2D"]
concurrency = [4]
[[policy]]
name = "static"
kind = "kv"
[[policy]]
name = "adaptive"
kind = "adaptive"
[controller]
threshold_unit = "baseline"
theta1 = 2.0
theta2 = 8.0
saturated = { temperature = 0.9 }
"""
    g = loads_grid(text)
    static, adaptive = g.policies
    assert adaptive.controller.theta1 == 2.0 and adaptive.controller.temperature == (0.0, 0.7, 0.9)
    assert adaptive.controller.overlap_weight == (1.0, 1.0, 0.1)
    assert static.controller == type(static.controller)()  # other cells keep their ids


@pytest.mark.parametrize(
    "table,path",
    [
        ("theta1 = 5.0\ntheta2 = 4.0", "controller.theta2"),
        ("ewma_alpha = 0.0", "controller.ewma_alpha"),
        ("threshold_unit = 'percent'", "controller.threshold_unit"),
        ("transition = { temprature = 0.5 }", "controller.transition.temprature"),
        ("windw = 5", "controller.windw"),
    ],
)
def test_bad_controller_keys_are_named(table, path):
    from poa_mc.model.config import loads_grid
    from poa_mc.model.sections import ConfigError

    text = f"""
[grid]
topology = ["1P/2D"]
concurrency = [4]
[[policy]]
name = "adaptive"
kind = "adaptive"
[controller]
{table}
"""
    with pytest.raises(ConfigError) as err:
        loads_grid(text)
    assert err.value.path == path


def test_paper_presets_load_on_the_prefill_first_path():
    from poa_mc.cli.common import builtin_grids

    for name in ("paper-70b-1p2d", "paper-70b-1p5d", "paper-340b-1p2d"):
        grid = load_grid(builtin_grids()[name])
        assert grid.cluster.flow == "prefill_first"
        assert {p.kind for p in grid.policies} >= {"kv", "adaptive", "oracle", "batch"}
        assert len(grid.policies) == 19 and len(grid.loads) == 17
        assert all(c.spec.cluster.poa_stage("auto")[0] == "decode" for c in grid.cells())


# --- bad input that used to slip through or name the wrong key --------------------------------


def test_cluster_block_size_zero_names_cluster_not_profile():
    e = _err(SMALL.replace('flow = "decode_first"', 'flow = "decode_first"\nblock_size = 0'))
    assert e.path == "cluster.block_size"


def test_a_decode_step_that_falls_with_load_is_refused_naming_its_key(tmp_path):
    # non-decreasing on u in [0, 1] is what PoA-hat >= 1 needs (issue 46: 0.827 on this one)
    bad = '\n[profile]\nkind = "polynomial"\np2 = 0.0\np1 = 0.02\np0 = 10.0\nd2 = -40.0\nd1 = 50.0\nd0 = 6.0\n'
    e = _err(SMALL + bad)
    assert e.path == "profile.d2" and "d1 + 2*d2 must be >= 0" in str(e)
    assert _err(SMALL + bad.replace("d2 = -40.0\nd1 = 50.0", "d2 = 0.0\nd1 = -1.0")).path == "profile.d1"
    loads_grid(SMALL + bad.replace("d2 = -40.0", "d2 = -25.0"))  # flat at u = 1: accepted
    from click.testing import CliRunner

    from poa_mc.cli.main import main

    grid = tmp_path / "bad.toml"
    grid.write_text(SMALL + bad)
    r = CliRunner().invoke(main, ["validate", str(grid)])
    errors = [ln for ln in r.output.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert r.exit_code == 2 and len(errors) == 1 and "profile.d2" in errors[0], r.output


def test_aggregated_flow_refuses_a_prefill_pool():
    text = SMALL.replace('flow = "decode_first"', 'flow = "aggregated"')
    e = _err(text)
    assert e.path == "grid.topology[0]" and '"0P/2D"' in str(e)
    grid = loads_grid(text.replace('["1P/2D", "1P/3D"]', '["0P/2D", "0P/3D"]'))
    assert [t.n_prefill for t in grid.topologies] == [0, 0]


def test_unknown_arrival_names_the_value_not_the_grid_axis():
    e = _err(SMALL.replace("prefix_groups = 4", 'prefix_groups = 4\narrival = "bursty"'))
    assert e.path == "workload.arrival" and "'bursty'" in str(e)


def test_pull_on_decode_first_is_refused_at_validation():
    e = _err(SMALL.replace('kind = "round_robin"', 'kind = "pull"'))
    assert e.path == "policy[1].kind" and "prefill_first" in str(e)


@pytest.mark.parametrize(
    "data, line", [(b'[run]\nname = "\xe9t\xe9"\n', "line 2"), (bytes(range(200, 256)) * 4, "line 1")]
)
def test_non_utf8_file_names_the_line(tmp_path, data, line):
    p = tmp_path / "latin1.toml"
    p.write_bytes(data)
    with pytest.raises(ConfigError) as e:
        load_grid(p)
    assert e.value.path == line and "UTF-8" in str(e.value)


def test_counts_past_32_bits_are_refused():
    e = _err(SMALL.replace("requests = 48", "requests = 3000000000"))
    assert e.path == "run.requests" and "2,147,483,647" in str(e)
    e = _err(SMALL.replace("replicas = 6", "replicas = 99999999999"))
    assert e.path == "run.replicas"


# --- --set overrides ------------------------------------------------------------------------


def _set(*items: str):
    return loads_grid(SMALL, overrides=items)


def test_set_overrides_scalars_lists_and_array_tables():
    grid = _set(
        "run.replicas=3", "grid.concurrency=[2, 8, 16]", "policy[1].temperature=0.5", "cluster.flow=prefill_first"
    )
    assert grid.run.replicas == 3 and grid.loads == (2, 8, 16)
    assert grid.policies[1].temperature == 0.5 and grid.cluster.flow == "prefill_first"
    # a new section or key is created, then validated like the file
    assert _set("slo.ttft_ms=250").slo.ttft_ms == 250.0


@pytest.mark.parametrize(
    "item, path",
    [
        ("run.replica=3", "run.replica"),  # unknown key, as in the file
        ("run.replicas=zero", "run.replicas"),  # a bare word is a string: wrong type
        ("policy[5].d=2", "--set policy[5].d"),
        ("no-equals-sign", "--set"),
        ("run..x=1", "--set run..x"),
    ],
)
def test_set_errors_name_the_key(item, path):
    with pytest.raises(ConfigError) as e:
        _set(item)
    assert e.value.path == path


def test_slo_section():
    assert loads_grid(SMALL).slo.is_set() is False
    grid = loads_grid(SMALL + "\n[slo]\nttft_ms = 500\nitl_ms = 20\n")
    assert (grid.slo.ttft_ms, grid.slo.itl_ms) == (500.0, 20.0)
    assert grid.to_dict()["slo"] == {"ttft_ms": 500.0, "itl_ms": 20.0}
    assert "slo" not in loads_grid(SMALL).to_dict()  # grids without [slo] keep their fingerprint
    assert _err(SMALL + "\n[slo]\nttft_ms = -1\n").path == "slo.ttft_ms"
    assert _err(SMALL + "\n[slo]\np99 = 1\n").path == "slo.p99"


# --- found by a black-box probe of 416 malformed inputs ------------------------------------------


@pytest.mark.parametrize(
    "old, new, path",
    [
        ("seed = 7", "seed = 9223372036854775808", "run.seed"),
        ('name = "small"', 'name = ".."', "run.name"),
        ('name = "small"', 'name = "small"\nout = ""', "run.out"),
        ("warmup = 8", "warmup = 2147483640", "run.warmup"),
        ("osl = 16", "osl = 1099511627776", "workload.osl"),
        ("window = 4", "window = 4\nslots = 1099511627776", "poa.slots"),
        ("window = 4", "window = 4\nbootstrap = 1000000000", "poa.bootstrap"),
        ("window = 4", "window = 100000000", "poa.window"),
        ('flow = "decode_first"', 'flow = "decode_first"\nkv_bytes_per_token = 1e300\ntransfer_gbps = 1.0',
         "cluster.transfer_gbps"),
    ],
)  # fmt: skip
def test_values_that_used_to_crash_or_hang_later_are_refused_up_front(old, new, path):
    assert old in SMALL
    assert _err(SMALL.replace(old, new)).path == path


def test_controller_period_has_a_floor():
    text = SMALL.replace('kind = "round_robin"', 'kind = "adaptive"') + "\n[controller]\nperiod_ms = 1e-9\n"
    assert _err(text).path == "controller.period_ms"


def test_a_byte_order_mark_is_fine_and_toml_errors_name_the_line(tmp_path):
    p = tmp_path / "bom.toml"
    p.write_bytes(b"\xef\xbb\xbf" + SMALL.encode())
    assert load_grid(p).run.name == "small"
    p.write_text("[run\n")
    with pytest.raises(ConfigError) as e:
        load_grid(p)
    assert e.value.path == "not valid TOML" and "line 1" in str(e.value)


def test_a_trace_that_is_not_gzip_names_the_file(tmp_path):
    (tmp_path / "bad.csv.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"not gzip at all" * 20)
    text = SMALL.replace("isl = 512", 'isl = { dist = "trace", file = "bad.csv.gz", format = "azure" }')
    with pytest.raises(ConfigError) as e:
        loads_grid(text, base_dir=tmp_path)
    assert e.value.path == "workload.isl.file" and "gzip" in str(e.value)


def test_the_agentic_tiers_preset_compares_g1_alone_with_three_tiers():
    from poa_mc.cli.common import builtin_grids
    from poa_mc.model.config import load_grid

    grid = load_grid(builtin_grids()["agentic-tiers"])
    labels = [t.label for t in grid.topologies]
    assert labels == ["1P/4D g1", "1P/4D g1+g2+g3", "2P/8D g1", "2P/8D g1+g2+g3"]
    cells = grid.cells()
    assert len(cells) == 48 and grid.workload.trace.replay == "closed" and grid.workload.trace.sessions == 80
    by_label = {}
    for c in cells:
        by_label.setdefault(c.topology, c)
    g1, g3 = by_label["1P/4D g1"].spec.cluster, by_label["1P/4D g1+g2+g3"].spec.cluster
    assert (g1.g2_blocks, g1.g3_blocks) == (0, 0) and (g3.g2_blocks, g3.g3_blocks) == (6000, 64000)
    # the variants of a point see the same requests (one stream), and their cells differ
    a, b = by_label["1P/4D g1"], by_label["1P/4D g1+g2+g3"]
    assert a.stream == b.stream and a.cell_id != b.cell_id


@pytest.mark.parametrize(
    "tiers,path",
    [('"g1"', "grid.tiers"), ('["g2"]', "grid.tiers[0]"), ('["g1", "g1"]', "grid.tiers[1]"),
     ('["g1+g2+g3"]', "grid.tiers")],
)  # fmt: skip
def test_bad_tier_variants_name_the_key(tiers, path):
    text = SMALL.replace("[grid]", f"[grid]\ntiers = {tiers}") if "[grid]" in SMALL else None
    assert text is not None
    with pytest.raises(ConfigError) as err:
        loads_grid(text).cells()
    assert err.value.path == path


@pytest.mark.parametrize(
    "value,keep", [(None, None), ('"all"', None), ('"none"', 0), ("0", 0), ("25", 25), ("100000", 48)]
)
def test_run_samples_says_how_many_requests_are_kept(value, keep):
    text = SMALL if value is None else SMALL.replace("warmup = 8", f"warmup = 8\nsamples = {value}")
    assert loads_grid(text).run.keep() == keep  # at most the measured requests


@pytest.mark.parametrize("value", ['"some"', "-3", "true", "2.5", "[1]"])
def test_bad_run_samples_names_the_key(value):
    with pytest.raises(ConfigError) as e:
        loads_grid(SMALL.replace("warmup = 8", f"warmup = 8\nsamples = {value}"))
    assert e.value.path == "run.samples"


def test_a_misspelt_run_key_still_gets_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'samples'"):
        loads_grid(SMALL.replace("warmup = 8", 'warmup = 8\nsample = "none"'))


def test_a_copied_preset_writes_under_runs_of_its_name(tmp_path):
    """No built-in grid names its own folder: a preset copied elsewhere and run from there writes
    under runs/<its [run] name>, relative to where it runs, never into the package's data."""
    from poa_mc.cli.common import builtin_grids

    for name, path in builtin_grids().items():
        copy = tmp_path / f"my-{name}.toml"
        copy.write_text(path.read_text())
        grid = load_grid(copy)
        assert grid.run.out == f"runs/{grid.run.name}", name
        assert not (copy.parent / grid.run.out).is_relative_to(path.parent), name


def test_router_blocks_per_request_keeps_its_old_cell_ids():
    """`cluster.router_blocks` defaults to "dynamo" since 0.3.0: written out, it gives the default's
    cells; "per_request" (the default before, a different simulation) gives other cells, with the
    ids they had before the key existed (the key is left out of the id at that value)."""
    base = loads_grid(SMALL)
    same = loads_grid(SMALL.replace('flow = "decode_first"', 'flow = "decode_first"\nrouter_blocks = "dynamo"'))
    old = loads_grid(SMALL.replace('flow = "decode_first"', 'flow = "decode_first"\nrouter_blocks = "per_request"'))
    assert [c.cell_id for c in base.cells()] == [c.cell_id for c in same.cells()]
    assert base.to_dict() == same.to_dict()
    assert not {c.cell_id for c in base.cells()} & {c.cell_id for c in old.cells()}
    d = base.to_dict()
    assert "router_blocks" not in old.to_dict()["cluster"] and d["cluster"]["router_blocks"] == "dynamo"


_KV_FROM = """
[cluster]
block_size = 64
{kv}
[grid]
topology = ["1P/2D"]
concurrency = [4]
[[policy]]
name = "kv"
kind = "kv"
"""


def test_kv_blocks_from_the_gpu_the_model_and_the_memory_share():
    """[cluster.kv_from]: a worker's KV blocks from its GPU's memory after the weights
    (poa_mc.model.roofline); the cells are those of a grid that gives the same blocks by hand."""
    from poa_mc.model.roofline import roofline_kv_capacity_blocks

    derived = loads_grid(_KV_FROM.format(kv='kv_from = {gpu = "h200", model = "llama70b", tp = 4}'))
    blocks = roofline_kv_capacity_blocks("h200", "llama70b", 4, block_size=64)
    # by hand: 0.9 x 4 x 141 GB of HBM less 70.6 GB of FP8 weights = 437.0 GB; a block of 64 tokens
    # holds K and V of 80 layers x 8 KV heads x 128 dims at 1 byte, spread over the 4 GPUs (8 heads
    # split 4 ways, none replicated): 2 x 80 x 8 x 128 x 64 = 10,485,760 bytes; 437.0e9 / 10,485,760 = 41,675.5
    assert blocks == int((0.9 * 4 * 141e9 - 70.6e9) // (2 * 80 * 8 * 128 * 64)) == 41675
    bf16_cache = roofline_kv_capacity_blocks("h200", "llama70b", 4, block_size=64, kv_dtype="bf16")
    assert bf16_cache == int((0.9 * 4 * 141e9 - 70.6e9) // (2 * 80 * 8 * 128 * 64 * 2)) == 20837
    c = derived.cells()[0].spec.cluster
    assert c.prefill_kv_blocks == c.decode_kv_blocks == blocks
    by_hand = loads_grid(_KV_FROM.format(kv=f"prefill_kv_blocks = {blocks}\ndecode_kv_blocks = {blocks}"))
    assert [x.cell_id for x in derived.cells()] == [x.cell_id for x in by_hand.cells()]
    half = loads_grid(_KV_FROM.format(kv='kv_from = {gpu = "h200", model = "llama70b", tp = 4, memory_fraction = 0.6}'))
    assert half.cells()[0].spec.cluster.decode_kv_blocks < blocks


@pytest.mark.parametrize(
    "kv,path",
    [
        ('kv_from = {gpu = "a100", model = "llama70b", tp = 4}', "cluster.kv_from.gpu"),
        ('kv_from = {gpu = "h200", model = "llama70b"}', "cluster.kv_from.tp"),
        (
            'kv_from = {gpu = "h200", model = "llama70b", tp = 4, memory_fraction = 1.5}',
            "cluster.kv_from.memory_fraction",
        ),
        ('kv_from = {gpu = "h100", model = "nemotron340b", tp = 1}', "cluster.kv_from"),
        ('decode_kv_blocks = 100\nkv_from = {gpu = "h200", model = "llama70b", tp = 4}', "cluster.decode_kv_blocks"),
    ],
)
def test_kv_from_refuses_what_it_cannot_derive(kv, path):
    with pytest.raises(ConfigError) as e:
        loads_grid(_KV_FROM.format(kv=kv))
    assert e.value.path == path, e.value


def test_a_shared_prefix_in_tokens():
    grid = loads_grid(SMALL.replace("prefix_groups = 4", "prefix_groups = 4\nprefix_tokens = 256"))
    assert grid.cells()[0].spec.workload.prefix_tokens == 256
    plain = loads_grid(SMALL)
    assert plain.cells()[0].spec.workload.prefix_tokens == 0
    assert {c.cell_id for c in grid.cells()}.isdisjoint(c.cell_id for c in plain.cells())
    with pytest.raises(ConfigError) as e:
        loads_grid(SMALL.replace("prefix_groups = 4", "prefix_groups = 4\nprefix_tokens = 256\nprefix_ratio = 0.5"))
    assert e.value.path == "workload.prefix_tokens"
    with pytest.raises(ConfigError) as e:
        loads_grid(SMALL.replace("prefix_groups = 4", "prefix_groups = 4\nprefix_tokens = -5"))
    assert e.value.path == "workload.prefix_tokens"


def test_interconnects_by_name():
    grid = loads_grid(_KV_FROM.format(kv='transfer_gbps = "nvlink4"\nnode_nic_gbps = "ib-xdr"'))
    c = grid.cells()[0].spec.cluster
    assert (c.transfer_gbps, c.node_nic_gbps) == (450.0, 100.0)
    with pytest.raises(ConfigError) as e:
        loads_grid(_KV_FROM.format(kv='transfer_gbps = "nvlink9"'))
    assert e.value.path == "cluster.transfer_gbps" and "nvlink4" in e.value.message


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("prefix_weight", "-1.0", "policy[2].prefix_weight: must be >= 0, got -1.0"),
        ("queue_weight", '"high"', None),
        ("cache_threshold", "1.5", "policy[2].cache_threshold: must be within [0, 1], got 1.5"),
        ("balance_abs_threshold", "-3", "policy[2].balance_abs_threshold: must be >= 0 requests, got -3"),
        ("balance_rel_threshold", "0.5", "policy[2].balance_rel_threshold: must be >= 1, got 0.5"),
        ("picker", '"best"', "policy[2].picker: must be one of max_score, random, weighted_random, got 'best'"),
    ],
)
def test_bad_llmd_and_sglang_keys_are_one_line_errors_naming_the_key(key, value, message):
    kind = "llmd" if key.endswith("weight") or key == "picker" else "sglang"
    e = _err(SMALL + f'\n[[policy]]\nname = "other"\nkind = "{kind}"\n{key} = {value}\n')
    assert e.path == f"policy[2].{key}" and "\n" not in str(e)
    if message:
        assert str(e) == message


def test_llmd_and_sglang_defaults_are_their_projects_and_leave_cell_ids_alone():
    """A policy that writes the new keys at their defaults is the same cell as one that does not."""
    grid = loads_grid(
        SMALL + '\n[[policy]]\nname = "llm-d"\nkind = "llmd"\n[[policy]]\nname = "sgl"\nkind = "sglang"\n'
    )
    llmd, sgl = grid.policies[2], grid.policies[3]
    assert (llmd.prefix_weight, llmd.kv_util_weight, llmd.queue_weight) == (3.0, 2.0, 2.0)
    assert (sgl.cache_threshold, sgl.balance_abs_threshold, sgl.balance_rel_threshold) == (0.3, 64, 1.5)
    assert llmd.picker == "max_score"
    written = SMALL.replace(
        'kind = "kv"', 'kind = "kv"\nprefix_weight = 3.0\ncache_threshold = 0.3\npicker = "max_score"'
    )
    assert [c.cell_id for c in loads_grid(written).cells()] == [c.cell_id for c in loads_grid(SMALL).cells()]
    changed = SMALL.replace('kind = "kv"', 'kind = "kv"\ncache_threshold = 0.5')
    assert [c.cell_id for c in loads_grid(changed).cells()] != [c.cell_id for c in loads_grid(SMALL).cells()]
