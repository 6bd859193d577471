"""Rebuild the shipped aic timing tables (poa_mc/data/profiles/aic-*.json) from aiconfigurator.

    pip install -e '.[aic]'
    python poa_mc/data/profiles/make_aic.py

Deterministic: aiconfigurator's predictions are a pure function of its package data, so the same
aiconfigurator-core version writes the same tables (the provenance records the versions and date).
"""

from __future__ import annotations

import json
from pathlib import Path

from poa_mc.model.aic import build_table

HERE = Path(__file__).resolve().parent

# name -> (aiconfigurator model, system, backend, tp)
SHIPPED = {
    "aic-b200-llama70b-fp8-tp4-vllm": ("nvidia/Llama-3.1-70B-Instruct-FP8", "b200_sxm", "vllm", 4),
    "aic-h200-llama70b-fp8-tp4-vllm": ("nvidia/Llama-3.1-70B-Instruct-FP8", "h200_sxm", "vllm", 4),
}


def main() -> None:
    for name, (model, system, backend, tp) in SHIPPED.items():
        doc = build_table(name, model, system, backend, tp)
        out = HERE / f"{name}.json"
        out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        m = doc["provenance"]["monotone"]
        low = ", ".join(
            f"{k} {v['points_lowered']}/{v['points']} (at most {v['max_lowered_rel']:.1%})" for k, v in m.items()
        )
        print(f"{out.name}: {out.stat().st_size / 1024:.0f} KiB; envelope lowered {low}")


if __name__ == "__main__":
    main()
