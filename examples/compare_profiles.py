"""Roofline, dynamo-mocker and aic (aiconfigurator) timing on the same points, through the
notebook API (poa_mc.model.profiles.load): prints a table and draws docs/img/profiles.png.

    python examples/compare_profiles.py [--out docs/img/profiles.png]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from poa_mc.model.profiles import load  # noqa: E402

PROFILES = {
    "dynamo-mocker": "dynamo-mocker (Dynamo's synthetic polynomial)",
    "roofline-b200-llama70b-tp4": "roofline, B200, Llama-70B FP8 TP4",
    "aic-b200-llama70b-fp8-tp4-vllm": "aic, B200, Llama-70B FP8 TP4, vLLM",
    "roofline-h200-llama70b-tp4": "roofline, H200, Llama-70B FP8 TP4",
    "aic-h200-llama70b-fp8-tp4-vllm": "aic, H200, Llama-70B FP8 TP4, vLLM",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/img/profiles.png")
    args = ap.parse_args()
    t = {name: load(name) for name in PROFILES}
    print(
        "| profile | prefill 128 tok | 4096 tok | 4096 on 4096 cached | 8 x 1024 tok | step b=1 ctx 2048 "
        "| b=64 | b=256 | b=64 ctx 16384 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, p in t.items():
        row = [
            p.prefill_ms(1, 128),
            p.prefill_ms(1, 4096),
            p.prefill_ms(1, 4096, 4096),
            p.prefill_ms(8, 1024),
            p.decode_ms(1, 2048),
            p.decode_ms(64, 2048),
            p.decode_ms(256, 2048),
            p.decode_ms(64, 16384),
        ]
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    tokens = np.unique(np.geomspace(16, 16384, 200).astype(int))
    batch = np.arange(1, 513)
    styles = {"dynamo-mocker": ("k", "-"), "roofline-b200-llama70b-tp4": ("C0", "--"),
              "aic-b200-llama70b-fp8-tp4-vllm": ("C0", "-"), "roofline-h200-llama70b-tp4": ("C3", "--"),
              "aic-h200-llama70b-fp8-tp4-vllm": ("C3", "-")}  # fmt: skip
    for name, p in t.items():
        c, ls = styles[name]
        a.plot(tokens, p.prefill_ms(1, tokens, 0), color=c, ls=ls, label=PROFILES[name])
        b.plot(batch, p.decode_ms(batch, 2048), color=c, ls=ls, label=PROFILES[name])
    a.set(
        xscale="log",
        yscale="log",
        xlabel="prompt tokens computed (one request, nothing cached)",
        ylabel="prefill pass (ms)",
        title="Prefill pass",
    )
    b.set(xlabel="sequences in the step (2,048 context tokens each)", ylabel="decode step (ms)", title="Decode step")
    a.grid(alpha=0.3, which="both")
    b.grid(alpha=0.3)
    b.legend(fontsize=8, loc="upper left")
    fig.suptitle("Timing profiles on the same points (poa_mc.model.profiles.load; aic tables: aiconfigurator 0.12.0)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
