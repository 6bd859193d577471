"""How closely the shipped aic tables reproduce aiconfigurator off their grid (docs/profiles.md).

    pip install -e '.[aic]'
    python poa_mc/data/profiles/check_aic.py

Random points (seeded) over the domain the tables cover: prefill batch 1-256, tokens per request
1-16384 with batch x tokens <= 16384, cached 0 or 16-32768; decode batch 1-512, context 1-131000.
Two references: aiconfigurator's raw prediction, and the prediction made monotone as the tables
are (monotone_ref: the least value at a larger point nearby), which is what the interpolation
should meet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_aic import SHIPPED  # noqa: E402

from poa_mc.model import aic  # noqa: E402
from poa_mc.model.profiles import load  # noqa: E402


def monotone_ref(h, kind: str, *args: int) -> float:
    """aiconfigurator made monotone as the tables are, near the point: for a prefill, the least part
    outside attention over up to 2,048 more tokens (a pass can be padded with tokens) plus the least
    attention over up to 2,048 more new tokens and 256 or 1,024 more cached ones per request; for a
    decode step, the least step over every larger batch (to 512) at 0, 512 or 4,096 more context."""
    if kind == "prefill":
        b, u, c = args
        t = b * u
        gemm = min(aic.sdk_gemm_ms(h, tt) for tt in range(t, min(t + 2048, 16384) + 1))
        us = range(u, min(u + max(1, 2048 // b), 16384 // b) + 1)
        att = min(
            aic.sdk_prefill_ms(h, b, uu, cc) - aic.sdk_gemm_ms(h, b * uu) for uu in us for cc in (c, c + 256, c + 1024)
        )
        return gemm + att
    b, c = args
    return min(aic.sdk_decode_ms(h, bb, cc) for bb in range(b, 513) for cc in (c, c + 512, c + 4096))


def errors(name: str, n_prefill: int = 300, n_decode: int = 600) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Relative errors of the shipped table `name` at seeded random points off its grid, per stage:
    (against the monotone reference, against the raw prediction). Each stage draws from its own
    seeded stream, so fewer points are the first of the same points."""
    model, system, backend, tp = SHIPPED[name]
    h, t = aic.engine(model, system, backend, tp), load(name)
    out = {}
    rng, mono, raw = np.random.default_rng(7), [], []
    while len(mono) < n_prefill:
        b = int(np.exp(rng.uniform(0, np.log(256))))
        u = int(np.exp(rng.uniform(0, np.log(16384))))
        c = int(rng.choice([0, int(np.exp(rng.uniform(np.log(16), np.log(32768))))]))
        if b * u > 16384:
            continue
        got, r = t.prefill_ms(b, u, c), aic.sdk_prefill_ms(h, b, u, c)
        ref = monotone_ref(h, "prefill", b, u, c)
        mono.append(abs(got - ref) / ref)
        raw.append(abs(got - r) / r)
    out["prefill"] = (np.array(mono), np.array(raw))
    rng, mono, raw = np.random.default_rng(8), [], []
    for _ in range(n_decode):
        b = int(np.exp(rng.uniform(0, np.log(512))))
        c = int(np.exp(rng.uniform(0, np.log(131000))))
        got, r = t.decode_ms(b, c), aic.sdk_decode_ms(h, b, c)
        ref = monotone_ref(h, "decode", b, c)
        mono.append(abs(got - ref) / ref)
        raw.append(abs(got - r) / r)
    out["decode"] = (np.array(mono), np.array(raw))
    return out


def main() -> None:
    print("table | stage | vs monotone: median / p95 / max / share > 3% | vs raw: median / share > 3%")
    for name in SHIPPED:
        for stage, (m, r) in errors(name).items():
            print(
                f"{name} | {stage} | {np.median(m):.1%} / {np.quantile(m, 0.95):.1%} / {m.max():.1%} / "
                f"{(m > 0.03).mean():.1%} | {np.median(r):.1%} / {(r > 0.03).mean():.1%}"
            )


if __name__ == "__main__":
    main()
