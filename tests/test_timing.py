"""One timing truth: the kernels' pass and step times are the profiles' (poa_mc.model.profiles), for
every built-in profile; a profile whose step polynomial would need the d_min clamp is refused."""

import numpy as np
import pytest

from poa_mc.engine.packing import pack_params
from poa_mc.kernels import cpu
from poa_mc.kernels import layout as L
from poa_mc.model.profiles import BUILTIN_PROFILES, decode_ms, prefill_ms, resolve_profile
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_profile import ProfileSpec

K = cpu._K


@pytest.mark.parametrize("name", sorted(BUILTIN_PROFILES))
def test_kernel_pass_and_step_times_are_the_profiles(name):
    profile = resolve_profile({"name": name})
    if profile.kind != "polynomial":
        pytest.skip("theory profiles draw their pass times in the kernels")
    spec = CellSpec(profile=profile)
    ip, fp, _ = pack_params(spec, requests=1, warmup=0, seed=0, stream=0, record_candidates=False)
    for tokens in (0, 1, 63, 64, 4096, 131_072):
        # a pass of one request from 0 to `tokens` computed tokens; none: no time
        got = K.timing.pass_prefill_ms(fp, np.int64(0), np.int64(tokens), np.int64(1))
        assert got == pytest.approx(prefill_ms(profile, tokens), rel=1e-12, abs=0.0), tokens
    cap = float(ip[L.P_DKV] * ip[L.P_B])
    for u in np.linspace(0.0, 1.5, 31):  # past 1 the step saturates at u = 1
        want = decode_ms(profile, u * cap, int(ip[L.P_DKV]), int(ip[L.P_B]))
        assert K.timing.step_ms(fp, u * cap, np.int64(1), cap) == pytest.approx(want, rel=1e-12), u


def test_a_step_polynomial_that_needs_the_clamp_is_refused():
    # the kernels step the polynomial itself (their closed-form decode spans need it); profiles
    # clamp at d_min as the mocker does. The two agree because validation refuses the rest.
    with pytest.raises(SpecError) as e:
        ProfileSpec(d2=0.0, d1=-10.0, d0=5.0, d_min=1.0).validate()
    assert e.value.path == "profile.d0"
