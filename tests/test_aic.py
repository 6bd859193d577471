"""poa_mc.aic against aiconfigurator itself (skipped without the `aic` extra), and its node choice."""

import sys
from pathlib import Path

import numpy as np
import pytest

from poa_mc.aic import select_nodes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "data" / "profiles"))
from check_aic import monotone_ref  # noqa: E402
from make_aic import SHIPPED  # noqa: E402


def test_select_nodes_keeps_a_step_and_drops_a_line():
    x = np.arange(1, 101)
    y = np.where(x <= 40, 10.0 + 0.1 * x, 30.0 + 0.1 * x)  # a jump between 40 and 41
    nodes = x[select_nodes(x, y[None, :], tol=0.001)]
    assert list(nodes) == [1, 40, 41, 100]
    # every scanned point is within the tolerance of the interpolation between the nodes
    assert np.all(np.abs(np.interp(x, nodes, y[nodes - 1]) - y) <= 0.001 * y)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_tables_reproduce_aiconfigurator_off_their_grid(name):
    pytest.importorskip("aiconfigurator_core")
    from poa_mc import aic
    from poa_mc.profiles import load

    model, system, backend, tp = SHIPPED[name]
    h = aic.engine(model, system, backend, tp)
    t = load(name)
    rng = np.random.default_rng(2026)
    pre, dec = [], []
    while len(pre) < 150:
        b = int(np.exp(rng.uniform(0, np.log(256))))
        u = int(np.exp(rng.uniform(0, np.log(16384))))
        c = int(rng.choice([0, int(np.exp(rng.uniform(np.log(16), np.log(32768))))]))
        if b * u <= 16384:
            ref = min(monotone_ref(h, "prefill", b, u, c), aic.sdk_prefill_ms(h, b, u, c))
            pre.append(abs(t.prefill_ms(b, u, c) - ref) / ref)
    for _ in range(300):
        b = int(np.exp(rng.uniform(0, np.log(512))))
        c = int(np.exp(rng.uniform(0, np.log(131000))))
        ref = min(monotone_ref(h, "decode", b, c), aic.sdk_decode_ms(h, b, c))
        dec.append(abs(t.decode_ms(b, c) - ref) / ref)
    pre, dec = np.array(pre), np.array(dec)
    print(name, "prefill", np.median(pre), np.quantile(pre, 0.95), pre.max(), "decode", np.median(dec), dec.max())
    # the bound the issue sets (3%) holds for the median and the 95th percentile; the worst points
    # sit next to a jump of aiconfigurator's staircase the grid brackets only approximately
    # (docs/profiles.md gives the measured maxima)
    for e in (pre, dec):
        assert np.median(e) < 0.01
        assert np.quantile(e, 0.95) < 0.03
