"""Timing profiles: built-ins, roofline formulas, helpers and error paths."""

from __future__ import annotations

import numpy as np
import pytest

from poa_mc.model import roofline
from poa_mc.model.profiles import BUILTIN_PROFILES, decode_ms, prefill_ms, resolve_profile
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_profile import ProfileSpec

KV_BLOCKS, BLOCK = 16384, 64
ROOFLINE_NAMES = [n for n in BUILTIN_PROFILES if n.startswith("roofline-")]


def test_mocker_coefficients_exact() -> None:
    p = resolve_profile({"name": "dynamo-mocker"})
    assert (p.kind, p.p2, p.p1, p.p0) == ("polynomial", 4.209989e-7, 1.518344e-2, 16.50142)
    assert (p.d2, p.d1, p.d0, p.d_min) == (-25.74, 54.01, 5.74, 1.0)
    # The spec default is the mocker profile too: both spellings must agree field for field.
    assert p == ProfileSpec()


def test_mocker_helpers() -> None:
    p = resolve_profile({"name": "dynamo-mocker"})
    assert prefill_ms(p, 0) == 0.0
    assert prefill_ms(p, 4096) == pytest.approx(4.209989e-7 * 4096**2 + 1.518344e-2 * 4096 + 16.50142)
    cap = KV_BLOCKS * BLOCK
    assert decode_ms(p, 0, KV_BLOCKS, BLOCK) == pytest.approx(5.74)
    assert decode_ms(p, cap, KV_BLOCKS, BLOCK) == pytest.approx(-25.74 + 54.01 + 5.74)
    assert decode_ms(p, 10 * cap, KV_BLOCKS, BLOCK) == pytest.approx(34.01)  # u is capped at 1
    arr = decode_ms(p, np.array([0, cap // 2]), KV_BLOCKS, BLOCK)
    assert arr.shape == (2,) and arr[1] == pytest.approx(-25.74 / 4 + 54.01 / 2 + 5.74)
    assert np.array_equal(prefill_ms(p, np.array([0, 1])), [0.0, 4.209989e-7 + 1.518344e-2 + 16.50142])


def test_builtin_names() -> None:
    assert "dynamo-mocker" in BUILTIN_PROFILES
    for gpu in ("b200", "h200", "h100"):
        assert f"roofline-{gpu}-llama70b-tp4" in BUILTIN_PROFILES
        assert f"roofline-{gpu}-nemotron340b-tp8" in BUILTIN_PROFILES
    assert all(isinstance(v, str) and v for v in BUILTIN_PROFILES.values())


def _expected(name: str, kv_blocks: int = KV_BLOCKS, block: int = BLOCK) -> dict[str, float]:
    """Independent restatement of the roofline formulas of docs/profiles.md."""
    _, gpu_key, short, tp_s = name.split("-")
    g = roofline.GPUS[gpu_key]
    m = roofline.MODELS[roofline.MODEL_ALIASES[short]]
    tp = int(tp_s[2:])
    flops = tp * g.fp8_pflops * 1e15 * 0.5
    bw = tp * g.hbm_tbps * 1e12 * 0.7
    kv = 2 * m.layers * m.kv_heads * m.head_dim * 1  # FP8: one byte per element
    return {
        "p2": 2 * m.layers * m.hidden / flops * 1e3,
        "p1": 2 * m.params / flops * 1e3,
        "p0": 5.0,
        "d2": 0.0,
        "d1": kv_blocks * block * kv / bw * 1e3,
        "d0": m.params * 1 / bw * 1e3 + 2.0,
    }


@pytest.mark.parametrize("name", ROOFLINE_NAMES)
def test_roofline_builtin_formula(name: str) -> None:
    p = resolve_profile({"name": name})
    p.validate()
    for key, value in _expected(name).items():
        assert getattr(p, key) == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert p.d_min == pytest.approx(p.d0)


@pytest.mark.parametrize("name", ROOFLINE_NAMES)
def test_roofline_magnitudes_plausible(name: str) -> None:
    p = resolve_profile({"name": name})
    step0 = decode_ms(p, 4096, KV_BLOCKS, BLOCK)
    pre = prefill_ms(p, 4096)
    # Decode at low context is the weight read plus overhead; a 4096-token prefill is compute bound.
    assert 3.0 < step0 < 30.0
    assert 40.0 < pre < 500.0
    if "llama70b" in name and "h200" in name:
        assert 5.0 < step0 < 30.0 and 50.0 < pre < 500.0


def test_roofline_h200_llama_values() -> None:
    p = resolve_profile({"name": "roofline-h200-llama70b-tp4"})
    # 70.6 GB of FP8 weights over 4 x 4.8 TB/s x 0.7, plus 2 ms overhead.
    assert decode_ms(p, 0, KV_BLOCKS, BLOCK) == pytest.approx(70.6e9 / (4 * 4.8e12 * 0.7) * 1e3 + 2.0)
    # 4096 tokens: 2 * 70.6e9 * 4096 + 2 * 80 * 8192 * 4096^2 FLOPs over 4 x 1.98 PFLOP/s x 0.5, plus 5 ms.
    flops = 2 * 70.6e9 * 4096 + 2 * 80 * 8192 * 4096**2
    assert prefill_ms(p, 4096) == pytest.approx(flops / (4 * 1.98e15 * 0.5) * 1e3 + 5.0)


def test_faster_gpu_is_faster() -> None:
    b, h, o = (resolve_profile({"name": f"roofline-{g}-llama70b-tp4"}) for g in ("b200", "h200", "h100"))
    assert decode_ms(b, 0, KV_BLOCKS, BLOCK) < decode_ms(h, 0, KV_BLOCKS, BLOCK) < decode_ms(o, 0, KV_BLOCKS, BLOCK)
    assert prefill_ms(b, 4096) < prefill_ms(h, 4096) == pytest.approx(prefill_ms(o, 4096))


def test_roofline_explicit_table_equals_builtin() -> None:
    explicit = resolve_profile(
        {"kind": "roofline", "name": "roofline-h200-llama70b-tp4", "gpu": "h200", "model": "llama-3.1-70b", "tp": 4}
    )
    assert explicit == resolve_profile({"name": "roofline-h200-llama70b-tp4"})


def test_roofline_kv_blocks_scale_d1() -> None:
    small = resolve_profile({"name": "roofline-h200-llama70b-tp4"}, kv_blocks=8192, block_size=32)
    big = resolve_profile({"name": "roofline-h200-llama70b-tp4"})
    assert small.d1 == pytest.approx(big.d1 / 4)
    # Same context, same time: u rescales with capacity, so the step time is capacity independent.
    ctx = 100_000
    assert decode_ms(small, ctx, 8192, 32) == pytest.approx(decode_ms(big, ctx, KV_BLOCKS, BLOCK))


def test_roofline_overrides() -> None:
    base = resolve_profile({"name": "roofline-b200-nemotron340b-tp8"})
    slow = resolve_profile({"name": "roofline-b200-nemotron340b-tp8", "decode_efficiency": 0.35})
    assert slow.d1 == pytest.approx(2 * base.d1)
    assert slow.d0 - 2.0 == pytest.approx(2 * (base.d0 - 2.0))
    assert slow.p1 == base.p1
    assert slow.name != base.name and "decode_efficiency=0.35" in slow.name
    bf16 = resolve_profile({"kind": "roofline", "gpu": "b200", "model": "nemotron340b", "tp": 8, "dtype": "bf16"})
    assert bf16.p1 == pytest.approx(2 * base.p1)  # half the peak FLOP/s
    assert bf16.d1 == pytest.approx(2 * base.d1)  # two bytes per KV element


def test_roofline_custom_model_and_gpu() -> None:
    p = resolve_profile(
        {
            "kind": "roofline",
            "tp": 1,
            "layers": 2,
            "hidden": 100,
            "kv_heads": 1,
            "head_dim": 50,
            "params": 1e9,
            "peak_pflops": 1.0,
            "hbm_tbps": 1.0,
            "prefill_efficiency": 1.0,
            "decode_efficiency": 1.0,
            "prefill_overhead_ms": 0.0,
            "decode_overhead_ms": 0.0,
        },
        kv_blocks=10,
        block_size=10,
    )
    assert p.p1 == pytest.approx(2e9 / 1e15 * 1e3)
    assert p.p2 == pytest.approx(2 * 2 * 100 / 1e15 * 1e3)
    assert p.d0 == pytest.approx(1e9 / 1e12 * 1e3)
    assert p.d1 == pytest.approx(100 * (2 * 2 * 1 * 50) / 1e12 * 1e3)


def test_kv_capacity_lead() -> None:
    blocks = roofline.roofline_kv_capacity_blocks("h200", "llama70b", 4)
    assert blocks == int((4 * 141e9 * 0.9 - 70.6e9) // (2 * 80 * 8 * 128 * 64))


def test_explicit_kinds() -> None:
    p = resolve_profile({"kind": "polynomial", "p2": 0, "p1": 0.01, "p0": 10, "d2": 0, "d1": 5, "d0": 3, "d_min": 1})
    assert (p.p1, p.d1, p.d_min) == (0.01, 5.0, 1.0)
    e = resolve_profile({"kind": "exponential", "prefill_ms": 100, "decode_ms": 0})
    assert e.kind == "exponential" and prefill_ms(e, 10) == 100.0 and decode_ms(e, 5, 1, 1) == 0.0
    d = resolve_profile({"kind": "deterministic", "prefill_ms": 50.0, "decode_ms": 2.5, "name": "toy"})
    assert d.name == "toy" and decode_ms(d, np.arange(3), 1, 1).tolist() == [2.5] * 3
    m = resolve_profile({"name": "dynamo-mocker", "p0": 0.0})
    assert m.p0 == 0.0 and m.p1 == 1.518344e-2


@pytest.mark.parametrize(
    ("table", "path"),
    [
        ({"name": "no-such-profile"}, "profile.name"),
        ({}, "profile.name"),
        ({"name": "dynamo-mocker", "bogus": 1}, "profile.bogus"),
        ({"name": "dynamo-mocker", "p1": "fast"}, "profile.p1"),
        # With a kind, name is only a label: this is an exponential profile missing its parameters.
        ({"name": "dynamo-mocker", "kind": "exponential"}, "profile.prefill_ms"),
        ({"kind": "polynomial", "p2": 0, "p1": 0, "p0": 0, "d2": 0, "d1": 0}, "profile.d0"),
        ({"kind": "polynomial", "p2": 0, "p1": 0, "p0": 0, "d2": 0, "d1": 0, "d0": 0.5}, "profile.d0"),
        ({"kind": "polynomial", "p2": -1, "p1": 0, "p0": 0, "d2": 0, "d1": 0, "d0": 2}, "profile.p2"),
        # a step that falls with load breaks PoA-hat >= 1: non-decreasing on u in [0, 1] is needed
        ({"kind": "polynomial", "p2": 0, "p1": 0, "p0": 0, "d2": -40, "d1": 50, "d0": 6}, "profile.d2"),
        ({"kind": "polynomial", "p2": 0, "p1": 0, "p0": 0, "d2": 10, "d1": -5, "d0": 6}, "profile.d1"),
        ({"name": "dynamo-mocker", "d2": -30.0}, "profile.d2"),
        ({"kind": "warp"}, "profile.kind"),
        ({"kind": "exponential", "decode_ms": 1}, "profile.prefill_ms"),
        ({"kind": "exponential", "prefill_ms": 1}, "profile.decode_ms"),
        ({"kind": "deterministic", "prefill_ms": 0, "decode_ms": 1}, "profile.prefill_ms"),
        ({"kind": "deterministic", "prefill_ms": True, "decode_ms": 1}, "profile.prefill_ms"),
        ({"kind": "roofline", "gpu": "h200", "model": "llama70b"}, "profile.tp"),
        ({"kind": "roofline", "gpu": "a100", "model": "llama70b", "tp": 4}, "profile.gpu"),
        ({"kind": "roofline", "gpu": "h200", "model": "gpt-5", "tp": 4}, "profile.model"),
        ({"kind": "roofline", "model": "llama70b", "tp": 4}, "profile.gpu"),
        ({"kind": "roofline", "gpu": "h200", "model": "llama70b", "tp": 4.0}, "profile.tp"),
        ({"kind": "roofline", "gpu": "h200", "model": "llama70b", "tp": 4, "dtype": "int4"}, "profile.dtype"),
        ({"name": "roofline-h200-llama70b-tp4", "decode_efficiency": 1.5}, "profile.decode_efficiency"),
        ({"name": "roofline-h200-llama70b-tp4", "prefill_efficiency": 0}, "profile.prefill_efficiency"),
        ({"name": "roofline-h200-llama70b-tp4", "decode_overhead_ms": -1}, "profile.decode_overhead_ms"),
        ({"name": "roofline-h200-llama70b-tp4", "d_min": 100.0}, "profile.d_min"),
        ({"name": "roofline-h200-llama70b-tp4", "p1": 0.1}, "profile.p1"),
    ],
)
def test_bad_inputs_name_the_key(table: dict, path: str) -> None:
    with pytest.raises(SpecError) as err:
        resolve_profile(table)
    assert err.value.path == path


def test_validate_refuses_a_decode_step_that_falls_with_load() -> None:
    # issue 46: d2 = -40, d1 = 50, d0 = 6 peaks at u = 0.625 (21.6 ms) and falls to 16 ms at u = 1
    # (slope d1 + 2 d2 = -30 there), though never below d_min: PoA-hat came out 0.827 on it
    for bad, path in (({"d2": -40.0, "d1": 50.0, "d0": 6.0}, "profile.d2"), ({"d2": 0.0, "d1": -1.0}, "profile.d1")):
        with pytest.raises(SpecError) as err:
            ProfileSpec(**bad).validate()
        assert err.value.path == path and "decode step may not fall" in str(err.value)
    ProfileSpec(d2=-25.0, d1=50.0, d0=6.0).validate()  # slope 0 at u = 1: non-decreasing, accepted
    for name in ("p0", "p1", "p2"):  # NaN compared below 0 as False, so it was let through
        with pytest.raises(SpecError) as err:
            ProfileSpec(**{name: float("nan")}).validate()
        assert err.value.path == f"profile.{name}"
    for name in BUILTIN_PROFILES:
        resolve_profile({"name": name}).validate()


def test_custom_path_prefix() -> None:
    with pytest.raises(SpecError) as err:
        resolve_profile({"name": "dynamo-mocker", "x": 1}, "grid.profiles[2]")
    assert err.value.path == "grid.profiles[2].x"
