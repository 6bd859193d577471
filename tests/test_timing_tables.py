"""Timing tables (poa_mc/model/timing_tables.py): the envelope, the file checks, the shipped tables, and
the notebook API over them (poa_mc.model.profiles.load)."""

import json

import numpy as np
import pytest

from poa_mc.kernels import cpu
from poa_mc.model.profiles import load, pack_profile, resolve_profile
from poa_mc.model.spec_error import SpecError
from poa_mc.model.timing_tables import MONOTONE_AXES, builtin_tables, lower_envelope, parse
from tests.test_kernels_timing import _multilinear_doc

K = cpu._K.timing


def test_lower_envelope_is_the_largest_monotone_table_below_the_source():
    rng = np.random.default_rng(0)
    raw = rng.uniform(1, 10, size=(4, 5, 6))
    env = lower_envelope(raw, (1, 2))
    assert np.all(env <= raw)
    assert np.all(np.diff(env, axis=1) >= 0) and np.all(np.diff(env, axis=2) >= 0)
    assert np.array_equal(lower_envelope(env, (1, 2)), env)
    mono = np.cumsum(rng.uniform(0, 1, size=(3, 4)), axis=1).cumsum(axis=0)
    assert np.array_equal(lower_envelope(mono), mono)  # nothing to lower
    # the B200 decode glitch: batch 1 slower than batch 5 becomes batch 5's time
    assert np.array_equal(lower_envelope(np.array([[12.3, 9.1, 7.8, 10.9, 7.5, 7.6]])), [[7.5] * 5 + [7.6]])


@pytest.mark.parametrize(
    "mutate,where",
    [
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d["prefill"].update(batch=[1]), "prefill.batch"),
        (lambda d: d["prefill"].update(tokens=[1, 10, 10, 1000, 5000]), "prefill.tokens"),
        (lambda d: d["decode"].update(context=[1, 100, "x", 9000]), "decode.context"),
        (lambda d: d["decode"].update(ms=[[1.0, 2.0]]), "decode.ms"),
        (lambda d: d["prefill"]["attention_ms"][0][1].__setitem__(0, 1e6), "prefill.attention_ms"),  # more new, less
        (lambda d: d["prefill"]["gemm_ms"].__setitem__(2, 1e6), "prefill.gemm_ms"),  # more tokens, less time
        (lambda d: d["prefill"]["attention_ms"][0][1].__setitem__(0, -1.0), "prefill.attention_ms"),
        (lambda d: d["decode"]["ms"][1].__setitem__(1, -1.0), "decode.ms"),
        (lambda d: d.pop("decode"), "decode"),
    ],
)
def test_a_bad_table_is_refused_naming_the_key(mutate, where):
    doc = _multilinear_doc()
    mutate(doc)
    with pytest.raises(SpecError) as e:
        parse(doc, "t.json")
    assert e.value.path == ("t.json" if where == "format" else f"t.json.{where}")


def test_a_missing_or_broken_table_file_names_the_profile_key(tmp_path):
    with pytest.raises(SpecError) as e:
        resolve_profile({"kind": "aic", "table": "nope.json"}, base_dir=tmp_path)
    assert e.value.path == "profile.table" and "nope.json" in e.value.message
    (tmp_path / "bad.json").write_text('{\n  "format": 1,,\n}')
    with pytest.raises(SpecError) as e:
        resolve_profile({"kind": "aic", "table": "bad.json"}, base_dir=tmp_path)
    assert e.value.path == "profile.table" and "line 2" in e.value.message
    with pytest.raises(SpecError) as e:
        resolve_profile({"kind": "aic", "table": "bad.json", "p1": 1.0}, base_dir=tmp_path)
    assert e.value.path == "profile.p1"


def test_shipped_tables_are_monotone_with_their_provenance():
    assert {"aic-b200-llama70b-fp8-tp4-vllm", "aic-h200-llama70b-fp8-tp4-vllm"} <= set(builtin_tables())
    for name, path in builtin_tables().items():
        doc = json.loads(path.read_text())
        t = parse(doc, name)
        assert np.array_equal(t.prefill_gemm_ms, lower_envelope(t.prefill_gemm_ms, MONOTONE_AXES["gemm"]))
        assert np.array_equal(
            t.prefill_attention_ms, lower_envelope(t.prefill_attention_ms, MONOTONE_AXES["attention"])
        )
        prov = doc["provenance"]
        assert (
            prov["packages"]["aiconfigurator-core"] and prov["model"] and prov["system"] and "Apache" in prov["notice"]
        )
        timing = load(name)
        # the glitch the issue names: B200 vLLM decode at batch 4 above batch 5 in the source
        assert timing.decode_ms(4, 1024) <= timing.decode_ms(5, 1024)
        assert timing.decode_ms(64, 4096) < timing.decode_ms(256, 4096)


@pytest.mark.parametrize("name", ["dynamo-mocker", "roofline-h200-llama70b-tp4", "aic-b200-llama70b-fp8-tp4-vllm"])
def test_the_notebook_api_gives_the_kernels_numbers(name):
    from poa_mc.model.profiles import decode_ms, prefill_ms

    t = load(name)
    p = t.profile
    if p.kind == "polynomial":  # an independent check: the host's numpy formulas
        assert t.prefill_ms(4, 1000, 300) == pytest.approx(prefill_ms(p, 4000), rel=1e-12)
        assert t.decode_ms(16, 2000) == pytest.approx(decode_ms(p, 32000, 16384, 64), rel=1e-12)
    fp = pack_profile(p)
    assert t.prefill_ms(3, 400, 100) == K.pass_prefill_ms(fp, np.int64(300), np.int64(1500), np.int64(3))
    assert t.decode_ms(7, 1000) == K.step_ms(fp, 7000.0, np.int64(7), float(16384 * 64))
    got = t.prefill_ms(np.array([1, 2]), np.array([[10], [20]]), 0)
    assert got.shape == (2, 2) and t.prefill_ms(1, 0, 5) == 0.0
    with pytest.raises(ValueError):
        t.decode_ms(0, 10)


def test_a_table_kept_as_its_source_gave_it_may_fall():
    doc = _multilinear_doc(envelope=False)
    doc["prefill"]["gemm_ms"][2] = 1e6  # more tokens, less time after it: refused with the envelope
    assert parse(doc, "t.json").prefill_gemm_ms[2] == 1e6
    doc["envelope"] = "yes"
    with pytest.raises(SpecError) as e:
        parse(doc, "t.json")
    assert e.value.path == "t.json.envelope"


def test_a_run_reduced_in_another_process_finds_its_table_again(monkeypatch):
    """`poa-mc reduce --pricing ...` re-prices PoA-hat from a run's cells in a process that never
    resolved the profile: the table is loaded again by its name and checked by its digest."""
    from poa_mc.model import timing_tables
    from poa_mc.model.profiles import pack_profile, resolve_profile
    from poa_mc.model.spec_error import SpecError

    spec = resolve_profile({"name": "aic-b200-llama70b-fp8-tp4-vllm"})
    want = pack_profile(spec)
    monkeypatch.setattr(timing_tables, "_BY_SHA", {})  # a fresh process
    assert (pack_profile(spec) == want).all()
    monkeypatch.setattr(timing_tables, "_BY_SHA", {})
    with pytest.raises(SpecError, match="changed since the run"):
        timing_tables.for_profile(spec.table, "0" * 16)
    with pytest.raises(SpecError, match="neither shipped nor a file"):
        timing_tables.for_profile("no-such-table.json", "0" * 16)
