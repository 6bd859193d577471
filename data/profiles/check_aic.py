"""How closely the shipped aic tables reproduce aiconfigurator off their grid (docs/profiles.md).

    pip install -e '.[aic]'
    python data/profiles/check_aic.py

Random points (seeded) over the domain the tables cover: prefill batch 1-256, tokens per request
1-16384 with batch x tokens <= 16384, cached 0 or 16-32768; decode batch 1-512, context 1-131000.
Two references: aiconfigurator's raw prediction, and the prediction made monotone as the tables
are (the least value at a larger point nearby: up to 2048 more tokens, 256 or 1024 more cached;
up to 64 more sequences, 512 or 4096 more context), which is what the interpolation should meet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_aic import SHIPPED  # noqa: E402

from poa_mc import aic  # noqa: E402
from poa_mc.profiles import load  # noqa: E402


def monotone_ref(h, kind: str, *args: int) -> float:
    if kind == "prefill":
        b, u, c = args
        us = range(u, min(u + max(1, 2048 // b), 16384 // b) + 1)
        return min(aic.sdk_prefill_ms(h, b, uu, cc) for uu in us for cc in (c, c + 256, c + 1024))
    b, c = args
    return min(aic.sdk_decode_ms(h, bb, cc) for bb in range(b, min(b + 64, 512) + 1) for cc in (c, c + 512, c + 4096))


def main(points: int = 300) -> None:
    rng = np.random.default_rng(7)
    print("table | stage | vs monotone: median / p95 / max / share > 3% | vs raw: median / share > 3%")
    for name, (model, system, backend, tp) in SHIPPED.items():
        h, t = aic.engine(model, system, backend, tp), load(name)
        rows = {"prefill": ([], []), "decode": ([], [])}
        while len(rows["prefill"][0]) < points:
            b = int(np.exp(rng.uniform(0, np.log(256))))
            u = int(np.exp(rng.uniform(0, np.log(16384))))
            c = int(rng.choice([0, int(np.exp(rng.uniform(np.log(16), np.log(32768))))]))
            if b * u > 16384:
                continue
            got, raw = t.prefill_ms(b, u, c), aic.sdk_prefill_ms(h, b, u, c)
            ref = min(monotone_ref(h, "prefill", b, u, c), raw)
            rows["prefill"][0].append(abs(got - ref) / ref)
            rows["prefill"][1].append(abs(got - raw) / raw)
        for _ in range(points * 2):
            b = int(np.exp(rng.uniform(0, np.log(512))))
            c = int(np.exp(rng.uniform(0, np.log(131000))))
            got, raw = t.decode_ms(b, c), aic.sdk_decode_ms(h, b, c)
            ref = min(monotone_ref(h, "decode", b, c), raw)
            rows["decode"][0].append(abs(got - ref) / ref)
            rows["decode"][1].append(abs(got - raw) / raw)
        for stage, (mono, raw) in rows.items():
            m, r = np.array(mono), np.array(raw)
            print(
                f"{name} | {stage} | {np.median(m):.1%} / {np.quantile(m, 0.95):.1%} / {m.max():.1%} / "
                f"{(m > 0.03).mean():.1%} | {np.median(r):.1%} / {(r > 0.03).mean():.1%}"
            )


if __name__ == "__main__":
    main()
